#include "server_client/wire.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "server_client/arena.h"

namespace kvtier::server {
namespace {

std::vector<uint8_t> BodyOf(FrameWriter* w) {
  const std::vector<uint8_t>& f = w->Finish();
  return {f.begin() + 4, f.end()};
}

TEST(Wire, RoundTripsEveryFieldKind) {
  FrameWriter w(Op::kPublish);
  BlockKey k;
  k.bytes[0] = 7;
  k.bytes[31] = 9;
  w.U8(1);
  w.U16(0xBEEF);
  w.U32(0xDEADBEEF);
  w.U64(0x0102030405060708ULL);
  w.Key(k);
  w.Str16("hello");
  w.StatusOf(Status::NotFound("gone"));
  std::vector<uint8_t> body = BodyOf(&w);
  FrameReader r(body);
  ASSERT_EQ(*r.Header(), Op::kPublish);
  EXPECT_EQ(r.U8(), 1);
  EXPECT_EQ(r.U16(), 0xBEEF);
  EXPECT_EQ(r.U32(), 0xDEADBEEFu);
  EXPECT_EQ(r.U64(), 0x0102030405060708ULL);
  EXPECT_EQ(r.Key(), k);
  EXPECT_EQ(r.Str16(), "hello");
  Status s = r.StatusOf();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "gone");
  EXPECT_TRUE(r.Done("test").ok());
}

TEST(Wire, RefusesOtherVersionsAndUnknownOps) {
  // Version 1 (release answered), 2 (no touch), 3 (no slot sum) and a
  // later one are refused.
  for (uint8_t version : {uint8_t{1}, uint8_t{2}, uint8_t{3}, uint8_t{kWireVersion + 1}}) {
    std::vector<uint8_t> body = {version, 1, 0, 0};
    FrameReader r(body);
    EXPECT_EQ(r.Header().status().code(), StatusCode::kCorruption) << int{version};
  }
  std::vector<uint8_t> body2 = {kWireVersion, 99, 0, 0};
  FrameReader r2(body2);
  EXPECT_EQ(r2.Header().status().code(), StatusCode::kCorruption);
  std::vector<uint8_t> body3 = {kWireVersion};
  FrameReader r3(body3);
  EXPECT_EQ(r3.Header().status().code(), StatusCode::kCorruption);
  // The u16 after the op is reserved as 0.
  for (std::vector<uint8_t> body : {std::vector<uint8_t>{kWireVersion, 2, 1, 0},
                                    std::vector<uint8_t>{kWireVersion, 2, 0, 0x80}}) {
    FrameReader r4(body);
    const Status s = r4.Header().status();
    EXPECT_EQ(s.code(), StatusCode::kCorruption);
    EXPECT_NE(s.message().find("reserved as 0"), std::string::npos) << s.message();
    EXPECT_FALSE(r4.ok());
  }
}

TEST(Wire, CountPastTheFrameOrTheBatchLimitIsRefused) {
  // A count of 3 keys with bytes for 2.
  FrameWriter w(Op::kLookup);
  w.U32(3);
  w.Key(BlockKey{});
  w.Key(BlockKey{});
  std::vector<uint8_t> body = BodyOf(&w);
  FrameReader r(body);
  ASSERT_TRUE(r.Header().ok());
  EXPECT_EQ(ReadKeys(&r).size(), 0u);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.Done("lookup").code(), StatusCode::kCorruption);
  // A huge count with nothing behind it: no allocation, refused.
  FrameWriter w2(Op::kReserve);
  w2.U32(0xFFFFFFFF);
  std::vector<uint8_t> body2 = BodyOf(&w2);
  FrameReader r2(body2);
  ASSERT_TRUE(r2.Header().ok());
  EXPECT_EQ(r2.Count(8), 0u);
  EXPECT_FALSE(r2.ok());
  // A string longer than the frame.
  FrameWriter w3(Op::kHello);
  w3.U16(500);
  std::vector<uint8_t> body3 = BodyOf(&w3);
  FrameReader r3(body3);
  ASSERT_TRUE(r3.Header().ok());
  EXPECT_EQ(r3.Str16(), "");
  EXPECT_FALSE(r3.ok());
}

TEST(Wire, TrailingBytesAreAnError) {
  FrameWriter w(Op::kStats);
  w.U8(0);
  std::vector<uint8_t> body = BodyOf(&w);
  FrameReader r(body);
  ASSERT_TRUE(r.Header().ok());
  EXPECT_EQ(r.Done("stats").code(), StatusCode::kCorruption);
}

TEST(Wire, SocketFramesCarryADescriptorAndRefuseOversizedLengths) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  FrameWriter w(Op::kHello);
  w.Str16("sig");
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  ASSERT_TRUE(SendFrame(sv[0], w.Finish(), MonotonicMicros() + 5'000'000, pipefd[0]).ok());
  std::vector<uint8_t> body;
  int got_fd = -1;
  ASSERT_TRUE(RecvFrame(sv[1], &body, MonotonicMicros() + 5'000'000, &got_fd).ok());
  ASSERT_GE(got_fd, 0);
  // The received descriptor is the pipe's read end.
  ASSERT_EQ(::write(pipefd[1], "x", 1), 1);
  char c = 0;
  EXPECT_EQ(::read(got_fd, &c, 1), 1);
  EXPECT_EQ(c, 'x');
  FrameReader r(body);
  ASSERT_EQ(*r.Header(), Op::kHello);
  EXPECT_EQ(r.Str16(), "sig");
  // A length past kMaxFrameBytes is refused before any allocation.
  const uint8_t huge[4] = {0xFF, 0xFF, 0xFF, 0x7F};
  ASSERT_EQ(::write(sv[0], huge, 4), 4);
  EXPECT_EQ(RecvFrame(sv[1], &body, MonotonicMicros() + 5'000'000).code(),
            StatusCode::kCorruption);
  // Nothing arrives: Unavailable at the deadline, not a hang.
  EXPECT_EQ(RecvFrame(sv[1], &body, MonotonicMicros() + 20'000).code(), StatusCode::kUnavailable);
  for (int fd : {sv[0], sv[1], pipefd[0], pipefd[1], got_fd}) ::close(fd);
}

TEST(Wire, SocketPathOfChecksTheForm) {
  EXPECT_EQ(*SocketPathOf("unix:/tmp/x.sock"), "/tmp/x.sock");
  EXPECT_EQ(SocketPathOf("tcp:1.2.3.4").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SocketPathOf("unix:").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SocketPathOf("unix:/" + std::string(200, 'a')).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(Arena, CreateMapsAndAnotherMappingSeesTheSameBytes) {
  Result<std::unique_ptr<Arena>> a = Arena::Create({3, 8192});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  (*a)->Bytes(2)[5] = std::byte{42};
  (*a)->SetGeneration(2, 77);
  BlockKey k;
  k.bytes[3] = 1;
  const SlotSum sum{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  (*a)->SetPublished(2, 100, k, sum);
  Result<std::unique_ptr<Arena>> b = Arena::Map(::dup((*a)->fd()));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->geometry().slot_count, 3u);
  EXPECT_EQ((*b)->geometry().slot_bytes, 8192u);
  EXPECT_EQ((*b)->Bytes(2)[5], std::byte{42});
  EXPECT_EQ((*b)->Generation(2), 77u);
  EXPECT_EQ((*b)->Length(2), 100u);
  EXPECT_EQ((*b)->Sum(2), sum);
  EXPECT_EQ((*b)->Sum(1), SlotSum{});
  EXPECT_EQ((*b)->Key(2), k);
}

// A client's start-up read of the published blocks: one byte of each 2 MiB
// page (by file offset) that holds published bytes, each page once, none of
// an empty slot; stopped when out of time.
TEST(Arena, WarmPublishedReadsEachPageOfPublishedBytesOnce) {
  const uint64_t mib = 1 << 20;
  Result<std::unique_ptr<Arena>> a = Arena::Create({8, 3 * mib});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // Header page, 8 slot headers (one page), a 16-word key table (one page).
  ASSERT_EQ((*a)->geometry().DataOffset(), 12288u);
  const BlockKey k;
  // Slot s starts at 12288 + 3 MiB * s. In 2 MiB pages: slot 0 (3 MiB) is
  // in pages 0-1; slot 1 (1 MiB from 3 MiB + 12 KiB) in pages 1-2, 1 read
  // already; slot 2 is empty; slot 3 (100 bytes at 9 MiB + 12 KiB) in page
  // 4; slot 7 (3 MiB from 21 MiB + 12 KiB) in pages 10-12.
  (*a)->SetPublished(0, 3 * mib, k, SlotSum{});
  (*a)->SetPublished(1, 1 * mib, k, SlotSum{});
  (*a)->SetPublished(3, 100, k, SlotSum{});
  (*a)->SetPublished(7, 3 * mib, k, SlotSum{});
  int asks = 0;
  EXPECT_EQ((*a)->WarmPublished([&] {
    ++asks;
    return false;
  }),
            2u + 1u + 1u + 3u);
  EXPECT_EQ(asks, 1);  // before the first page (then every 64)
  EXPECT_EQ((*a)->WarmPublished([] { return true; }), 0u);
  // A length past the slot (a corrupted header) reads the slot's pages only.
  Result<std::unique_ptr<Arena>> b = Arena::Create({1, 4 * mib});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  (*b)->SetPublished(0, ~uint64_t{0}, k, SlotSum{});
  EXPECT_EQ((*b)->WarmPublished([] { return false; }), 3u);  // 12 KiB + 4 MiB: pages 0-2
}

TEST(Arena, RefusesBadGeometryAndFilesThatAreNotArenas) {
  EXPECT_EQ(Arena::Create({0, 4096}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Arena::Create({1, 100}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Arena::Create({(1u << 24) + 1, 4096}).status().code(), StatusCode::kInvalidArgument);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  EXPECT_EQ(Arena::Map(p[0]).status().code(), StatusCode::kCorruption);  // closes p[0]
  ::close(p[1]);
}

// The sum a client takes while copying is XXH3-128 of the whole copy,
// whatever the size: one shot up to a chunk, chunk by chunk past it.
TEST(SlotSum, CopyWithSumCopiesAndSumsLikeOneShot) {
  const size_t chunk = 128 * 1024;
  for (size_t size : {size_t{1}, size_t{4095}, chunk - 1, chunk, chunk + 1, 3 * chunk + 5}) {
    std::vector<std::byte> src(size);
    for (size_t i = 0; i < size; ++i) src[i] = std::byte(static_cast<uint8_t>(i * 131 + size));
    std::vector<std::byte> dst(size + 7, std::byte{0x5A});
    const SlotSum got = CopyWithSum(src, dst);
    EXPECT_EQ(got, SumOf(src)) << size;
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << size;
    EXPECT_EQ(dst[size], std::byte{0x5A}) << size;  // nothing past the copy
    // A changed byte changes the sum.
    src[size / 2] ^= std::byte{1};
    EXPECT_NE(SumOf(src), got) << size;
  }
  // XXH3-128 (seed 0) of "abc": `printf abc | xxhsum -H2` prints
  // 06b05ab6733a618578af5f94892f3950 (the high half first).
  const std::string abc = "abc";
  const SlotSum known = SumOf(std::as_bytes(std::span(abc.data(), abc.size())));
  EXPECT_EQ(known, (SlotSum{0x78af5f94892f3950ULL, 0x06b05ab6733a6185ULL}));
}

// The owner lock: free (0) in a new arena, the holder's thread id while
// held, 0 after a clean unlock, and marked dead by the kernel when the
// holder ends without unlocking (a process killed, here one that exits).
TEST(Arena, TheOwnerLockTellsAClientWhetherItsDaemonStillServes) {
  Result<std::unique_ptr<Arena>> a = Arena::Create({2, 4096});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->OwnerWord(), 0u);
  EXPECT_FALSE(Arena::OwnerAlive(0, 0));  // nobody serves it

  ASSERT_TRUE((*a)->LockOwner().ok());
  const uint32_t seen = (*a)->OwnerWord();
  EXPECT_EQ(seen, static_cast<uint32_t>(::gettid()));
  EXPECT_TRUE(Arena::OwnerAlive(seen, (*a)->OwnerWord()));
  (*a)->UnlockOwner();
  EXPECT_EQ((*a)->OwnerWord(), 0u);
  EXPECT_FALSE(Arena::OwnerAlive(seen, (*a)->OwnerWord()));  // stopped cleanly

  // A child (it shares the mapping) takes the lock and exits holding it.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!(*a)->LockOwner().ok()) ::_exit(1);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The kernel put FUTEX_OWNER_DIED where the child's thread id was.
  const uint32_t dead = (*a)->OwnerWord();
  EXPECT_EQ(dead, 0x40000000u);
  EXPECT_FALSE(Arena::OwnerAlive(static_cast<uint32_t>(child), dead));
  // Another mapping of the same arena reads the same word.
  Result<std::unique_ptr<Arena>> b = Arena::Map(::dup((*a)->fd()));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->OwnerWord(), dead);
}

}  // namespace
}  // namespace kvtier::server
