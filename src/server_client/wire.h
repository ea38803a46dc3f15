// The wire format between `kvtier serve` and its clients (docs/server.md):
// length-prefixed binary frames on a Unix stream socket, little-endian.
//
//   frame   = u32 body_len, body (body_len <= kMaxFrameBytes)
//   body    = u8 version (kWireVersion), u8 op (Op), u16 zero, payload
//
// Requests and replies use the same framing; a reply's payload opens with
// u8 status code (StatusCode) and a u16-prefixed message, then the op's
// fields; release alone is not answered. Every count and length is checked
// against what is left of the frame before anything is read or allocated
// (FrameReader), so a bad frame is an error for that connection only.
// Block bytes never travel here: they live in the arena (arena.h). The
// HELLO reply carries the arena's file descriptor as SCM_RIGHTS ancillary
// data.
//
// Thread safety: FrameWriter/FrameReader are plain values; the socket
// helpers are reentrant (one caller per socket at a time).
#ifndef KVTIER_SERVER_CLIENT_WIRE_H_
#define KVTIER_SERVER_CLIENT_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier::server {

// 2: release is not answered (1 answered it: a round trip of its own).
// 3: touch (clients read the arena on their own, arena version 2).
// 4: arena version 3 (the slot sum clients check their copies against).
inline constexpr uint8_t kWireVersion = 4;
// Largest frame body either side sends or accepts.
inline constexpr uint32_t kMaxFrameBytes = 8u << 20;
// Most keys (or slots) one request may name.
inline constexpr uint32_t kMaxBatch = 65536;
// A slot number that means "no slot" (a miss) in replies.
inline constexpr uint32_t kNoSlot = 0xFFFFFFFFu;

enum class Op : uint8_t {
  kHello = 1,     // u16-str layout signature -> u32 slots, u64 slot_bytes, u64 arena_bytes + fd
  kMatch = 2,     // keys -> u32 n leading keys held, n x u8 tier (as kContains)
  kLookup = 3,    // keys -> u64 lease, per key (u32 slot, u64 generation, u64 length)
  kRelease = 4,   // u64 lease -> no reply at all (the client goes on)
  kReserve = 5,   // u32 n, n x u64 size -> n x (u32 slot, u64 generation)
  kPublish = 6,   // u32 n, n x (u32 slot, u64 length, key) -> n x u8 StatusCode
  kAbort = 7,     // u32 n, n x u32 slot -> (nothing): reservations given up
  kContains = 8,  // keys -> n x u8 tier (0 none, 1 host (arena), 2 disk, 3 remote)
  kErase = 9,     // keys -> n x u8 erased
  kStats = 10,    // -> u32-str JSON
  kTouch = 11,    // u32 n, n x (u32 slot, u64 generation) -> no reply: blocks the
                  // client read from the arena without a lease (recency, hits)
};

// Appends little-endian fields to a frame body.
class FrameWriter {
 public:
  FrameWriter(Op op);
  void U8(uint8_t v) { buf_.push_back(v); }
  void U16(uint16_t v);
  void U32(uint32_t v);
  void U64(uint64_t v);
  void Key(const BlockKey& k);
  void Str16(std::string_view s);  // u16 length, bytes (truncated at 65535)
  void Str32(std::string_view s);  // u32 length, bytes
  void StatusOf(const Status& s);  // u8 code, Str16 message
  // The frame: u32 body length, body.
  const std::vector<uint8_t>& Finish();

 private:
  std::vector<uint8_t> buf_;
};

// Reads fields off a frame body; every read checks what is left. After the
// first failed read, ok() is false and every later read returns zeros.
class FrameReader {
 public:
  explicit FrameReader(std::span<const uint8_t> body);
  // The header: version and op. Corruption for another version.
  Result<Op> Header();
  uint8_t U8();
  uint16_t U16();
  uint32_t U32();
  uint64_t U64();
  BlockKey Key();
  std::string Str16();
  std::string Str32();
  // A u32 count of following items of `item_bytes` each: refused (ok()
  // false) past kMaxBatch or past what the frame holds.
  uint32_t Count(size_t item_bytes);
  Status StatusOf();  // as FrameWriter::StatusOf wrote it
  bool ok() const { return ok_; }
  bool AtEnd() const { return pos_ == body_.size(); }
  // OK if every read succeeded and nothing is left; else Corruption naming `what`.
  Status Done(std::string_view what) const;

 private:
  bool Take(size_t n);
  std::span<const uint8_t> body_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Keys as a request carries them: u32 count, count x 32 bytes.
void WriteKeys(FrameWriter* w, std::span<const BlockKey> keys);
std::vector<BlockKey> ReadKeys(FrameReader* r);

// Socket helpers. `deadline_us` is a CLOCK_MONOTONIC time in microseconds
// (MonotonicMicros()); 0 = wait forever. A timeout is Unavailable.
uint64_t MonotonicMicros();
// Sends the whole frame; `fd_to_pass` >= 0 goes along as SCM_RIGHTS.
Status SendFrame(int sock, const std::vector<uint8_t>& frame, uint64_t deadline_us,
                 int fd_to_pass = -1);
// Receives one frame body (checked against kMaxFrameBytes). A file
// descriptor that came with it lands in *received_fd (else -1) when given;
// one that came unasked is closed.
Status RecvFrame(int sock, std::vector<uint8_t>* body, uint64_t deadline_us,
                 int* received_fd = nullptr);

// "unix:PATH" -> PATH. InvalidArgument for anything else or a path longer
// than a sockaddr_un holds.
Result<std::string> SocketPathOf(std::string_view server);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_CLIENT_WIRE_H_
