#include "server_client/arena.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "testing/status_matchers.h"

namespace kvtier::server {
namespace {

using kvtier::testing::StatusIs;

// Slot `slot` of `a` filled with a pattern of its own.
void FillArenaSlot(Arena& a, uint32_t slot) {
  std::span<std::byte> b = a.Bytes(slot);
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::byte(static_cast<uint8_t>(i * 7 + slot));
}

bool ReadMatchesSlot(const std::vector<std::byte>& got, uint32_t slot) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != std::byte(static_cast<uint8_t>(i * 7 + slot))) return false;
  }
  return true;
}

TEST(ArenaRead, FirstReadOfASlotIsAPreadLaterOnesGoThroughTheMapping) {
  Result<std::unique_ptr<Arena>> a = Arena::Create({4, 8192});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  for (uint32_t s = 0; s < 4; ++s) FillArenaSlot(**a, s);
  // Another mapping of the same memory (a client's).
  Result<std::unique_ptr<Arena>> b = Arena::Map(::dup((*a)->fd()));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::vector<std::byte> got(5000);
  for (int round = 0; round < 3; ++round) {
    for (uint32_t s : {3u, 1u}) {
      std::fill(got.begin(), got.end(), std::byte{0});
      ASSERT_TRUE((*b)->Read(s, got).ok());
      EXPECT_TRUE(ReadMatchesSlot(got, s)) << "slot " << s << " round " << round;
    }
  }
  // Once per slot by pread (slots 3 and 1), the four later reads mapped.
  Arena::ReadCounts c = (*b)->read_counts();
  EXPECT_EQ(c.preads, 2u);
  EXPECT_EQ(c.mapped, 4u);
  EXPECT_EQ(c.fallbacks, 0u);
  // Bytes the daemon writes later into a slot read before are what a
  // mapped read returns.
  (*a)->Bytes(3)[10] = std::byte{0xAB};
  ASSERT_TRUE((*b)->Read(3, got).ok());
  EXPECT_EQ(got[10], std::byte{0xAB});
  // A whole slot, and an empty read (nothing counted).
  std::vector<std::byte> whole(8192);
  ASSERT_TRUE((*b)->Read(0, whole).ok());
  EXPECT_TRUE(ReadMatchesSlot(whole, 0));
  ASSERT_TRUE((*b)->Read(2, std::span<std::byte>()).ok());
  c = (*b)->read_counts();
  EXPECT_EQ(c.preads, 3u);
  EXPECT_EQ(c.mapped, 5u);
  // Each Arena keeps its own record: the creator's first read is a pread.
  ASSERT_TRUE((*a)->Read(3, got).ok());
  EXPECT_EQ((*a)->read_counts().preads, 1u);
}

TEST(ArenaRead, RefusesASlotPastTheArenaAndMoreThanASlot) {
  Result<std::unique_ptr<Arena>> a = Arena::Create({2, 4096});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::vector<std::byte> got(4096, std::byte{9});
  EXPECT_THAT((*a)->Read(2, got), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT((*a)->Read(UINT32_MAX, got), StatusIs(StatusCode::kInvalidArgument));
  std::vector<std::byte> big(4097, std::byte{9});
  EXPECT_THAT((*a)->Read(0, big), StatusIs(StatusCode::kInvalidArgument));
  // Refused reads leave dst alone and count nothing.
  EXPECT_EQ(got[0], std::byte{9});
  EXPECT_EQ(big[4096], std::byte{9});
  const Arena::ReadCounts c = (*a)->read_counts();
  EXPECT_EQ(c.preads + c.mapped + c.fallbacks, 0u);
  // A slot refused is not marked: its first good read is still a pread.
  ASSERT_TRUE((*a)->Read(1, got).ok());
  EXPECT_EQ((*a)->read_counts().preads, 1u);
}

TEST(ArenaRead, AFailingPreadIsFinishedThroughTheMapping) {
  Result<std::unique_ptr<Arena>> a = Arena::Create({2, 8192});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  FillArenaSlot(**a, 1);
  Result<std::unique_ptr<Arena>> b = Arena::Map(::dup((*a)->fd()));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  // The mapping's descriptor replaced by one pread cannot read (EBADF); the
  // mapping itself stays.
  const int wronly = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(wronly, 0);
  ASSERT_EQ(::dup2(wronly, (*b)->fd()), (*b)->fd());
  ::close(wronly);
  std::vector<std::byte> got(8192);
  ASSERT_TRUE((*b)->Read(1, got).ok());
  EXPECT_TRUE(ReadMatchesSlot(got, 1));
  Arena::ReadCounts c = (*b)->read_counts();
  EXPECT_EQ(c.preads, 0u);
  EXPECT_EQ(c.fallbacks, 1u);
  // The slot counts as read: the next read is a mapped one.
  ASSERT_TRUE((*b)->Read(1, got).ok());
  EXPECT_TRUE(ReadMatchesSlot(got, 1));
  c = (*b)->read_counts();
  EXPECT_EQ(c.mapped, 1u);
  EXPECT_EQ(c.fallbacks, 1u);
}

}  // namespace
}  // namespace kvtier::server
