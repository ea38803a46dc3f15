// The read requests of a RemoteTier as OpHandlers for BatchRunner:
//
//   ExistsOps  GETRANGE <part 0> 0 7, and EXISTS <part 1> ... <part
//              min_parts-1> [<:mac>] when the layout or a signing writer
//              needs more than part 0 → all present, and part 0 starts
//              with a block file's header length (8 bytes, 2 to 1 MiB)?
//              So an empty or short value, or one that cannot start a
//              block file, is absent to Match/Contains and to a writer's
//              probe (which stores over it), without reading the value
//              and with the commands the ACL already allows (GETRANGE is
//              the partial reads'; STRLEN is not in it). A value that
//              passes and is bad further on is found by the load: a
//              counted miss, deleted.
//   GetOps     GET <part 0> (one-part layouts) or MGET <every possible part>
//              → the value, read straight from the socket into its
//              destination: a new exact-size BlockBuffer, or the caller's
//              buffer. Verification (DecodeBlock) is the caller's job.
//              A reader with MAC keys asks MGET <:mac> <parts...>: the
//              signature comes in the same (atomic) reply as the value and
//              ahead of it, so that the value is hashed as it is read
//              (chunk by chunk, while the socket fills with the next),
//              not in a second pass. With a VerifyPool the value is
//              read plainly and hashed whole by a worker (or by Wait())
//              while the socket thread reads the next value: the hash, the
//              costlier per byte, then runs on another core.
//   DeleteOps  DEL <every possible part> <:mac>
//
// A GET reply is checked before a byte of its data is read: a bulk longer
// than the layout's largest block (one part: its part size) is a protocol
// error — the connection is dropped rather than read — and the key is
// marked bad so that the caller deletes it on a fresh connection. For
// parts, part 0's first 8 bytes give the total size (ValueLayout), so the
// destination is allocated once, exactly, and every later part's length
// is checked against it; a missing or wrong-length part marks the value
// bad (the rest of the reply is still consumed so the connection stays in
// sync).
//
// Thread safety: one handler per batch, used by one thread (its VerifyPool
// tasks write only the GetResult of a value already read, which nothing
// reads before WaitChecks()).
#ifndef KVTIER_REMOTE_READ_OPS_H_
#define KVTIER_REMOTE_READ_OPS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_buffer.h"
#include "remote/batch_runner.h"
#include "remote/counters.h"
#include "remote/value_layout.h"
#include "remote/value_mac.h"
#include "remote/verify_pool.h"

namespace kvtier::remote {

// The shortest value that can hold a block: a block file starts with its
// 8-byte header length (DESIGN.md §4).
inline constexpr uint64_t kMinValueBytes = 8;

class ExistsOps : public OpHandler {
 public:
  // `with_mac`: a value exists only with its `:mac` too (a signing
  // writer's probe, so that it does not skip an unsigned value).
  ExistsOps(const ValueLayout& layout, size_t n, RemoteCounters* counters, bool with_mac = false)
      : layout_(layout), found_(n, false), counters_(counters), with_mac_(with_mac) {}

  void AppendRequest(const KeyOp& op, RequestBuffer* out) override;
  uint64_t TransferBytes(const KeyOp& op) override;
  Result<OpOutcome> ReadReply(const KeyOp& op, Connection* conn) override;
  void Fail(const KeyOp& op, OpFailure why) override;

  const std::vector<bool>& found() const { return found_; }
  uint64_t failed() const { return failed_; }

 private:
  // Names besides part 0 that must exist (the EXISTS command; 0: none sent).
  uint32_t Rest() const;
  // Whether `head` (part 0's first bytes) can start a block of the layout.
  bool PlausibleHead(std::span<const std::byte, kMinValueBytes> head) const;

  const ValueLayout& layout_;
  std::vector<bool> found_;
  RemoteCounters* counters_;
  const bool with_mac_;
  uint64_t failed_ = 0;
};

// What a GET found for one key.
struct GetResult {
  enum class State : uint8_t {
    kPending,      // not answered
    kRead,         // `size` bytes read into the destination: verify them
    kMiss,         // absent (or an error reply)
    kBad,          // present but wrong (wrong type, size, missing part): delete it
    kTooSmall,     // the caller's buffer is smaller than `size`
    kAllocError,   // the allocator failed: `alloc_error` (the value was skipped)
    kUnavailable,  // no answer (node down, timeout, protocol error, redirects)
  };
  State state = State::kPending;
  uint64_t size = 0;   // value bytes (kRead, kTooSmall)
  BlockBuffer buffer;  // allocating mode: the value (kRead)
  Status alloc_error;  // kAllocError
  bool missing_part = false;  // kBad because a part was absent (LRU eviction)
  // With a ValueMac: the stored `:mac` (nullopt: none; "" when it was too
  // long to be one), and for a value read whole (kRead), its verdict.
  std::optional<std::string> mac;
  std::optional<ValueMac::Verdict> mac_verdict;
  // With a VerifyPool and a ValueCheck: the ValueCheck's verdict on a
  // value whose tag verified, given on the pool's thread (nullopt: not run).
  std::optional<bool> value_ok;
};

// The rest of a value's verification (structure, key, checksums: DecodeBlock),
// run on the pool right after its tag verified; true = good. Must be
// callable from any thread.
using ValueCheck = std::function<bool(const BlockKey& key, std::span<const std::byte> value)>;

// Supplies an exact-size buffer for a value (RemoteTier::BufferAllocator).
using ValueAllocator = std::function<Result<BlockBuffer>(size_t bytes)>;

class GetOps : public OpHandler {
 public:
  // Allocating mode: each value gets its own exact-size BlockBuffer from
  // `alloc` (the heap when null; it must outlive the handler).
  // `mac` (null: none): also fetch each value's `:mac` and check the value
  // against it (GetResult::mac_verdict, set once WaitChecks() returns):
  // with `pool` null as it is read, else by the pool once it is read.
  // `value_check` (null: none; it must outlive the handler) runs on the
  // pool too, after a tag that verified (GetResult::value_ok).
  GetOps(const ValueLayout& layout, size_t n, const ValueAllocator* alloc,
         RemoteCounters* counters, const ValueMac* mac = nullptr, VerifyPool* pool = nullptr,
         const ValueCheck* value_check = nullptr);
  // Into mode: op i's value goes to the front of dsts[i].
  GetOps(const ValueLayout& layout, std::span<const std::span<std::byte>> dsts,
         RemoteCounters* counters, const ValueMac* mac = nullptr, VerifyPool* pool = nullptr,
         const ValueCheck* value_check = nullptr);
  ~GetOps() override {
    if (checks_) checks_->Wait();
  }

  void AppendRequest(const KeyOp& op, RequestBuffer* out) override;
  uint64_t TransferBytes(const KeyOp& op) override;
  Result<OpOutcome> ReadReply(const KeyOp& op, Connection* conn) override;
  void Fail(const KeyOp& op, OpFailure why) override;

  // Waits for the checks handed to the pool (no-op without one). Call it
  // after BatchRunner::Run() and before reading results(). Throws
  // std::bad_alloc, on this thread, if OpenSSL ran out of memory in a check
  // (as a check made while reading throws it).
  void WaitChecks();

  std::vector<GetResult>& results() { return results_; }

 private:
  Result<OpOutcome> ReadOnePart(GetResult& r, size_t index, Connection* conn);
  Result<OpOutcome> ReadParts(GetResult& r, const KeyOp& op, Connection* conn);
  // The `:mac` element that starts an MGET reply with a ValueMac.
  Status ReadMac(GetResult& r, Connection* conn);
  // Where a value of `size` bytes goes; empty (and r.state set) if nowhere.
  std::span<std::byte> Destination(GetResult& r, size_t index, uint64_t size);
  // The outcome of an error reply in place of a value.
  OpOutcome OnError(GetResult& r, std::string_view line);
  // Hands `check` of the value read whole into `bytes` to the pool.
  void CheckLater(GetResult& r, const BlockKey& key, std::unique_ptr<ValueMac::Checker> check,
                  std::span<const std::byte> bytes);

  const ValueLayout& layout_;
  const std::span<const std::span<std::byte>> dsts_;  // empty in allocating mode
  const bool allocate_;
  const ValueAllocator* const alloc_;  // allocating mode; null = the heap
  std::vector<GetResult> results_;
  RemoteCounters* counters_;
  const ValueMac* const mac_;
  VerifyPool* const pool_;                // null: checked as read
  const ValueCheck* const value_check_;   // with pool_; null: none
  std::shared_ptr<VerifyGroup> checks_;  // with pool_: this batch's checks
  std::atomic<bool> checks_no_memory_{false};
};

class DeleteOps : public OpHandler {
 public:
  DeleteOps(const ValueLayout& layout, size_t n, RemoteCounters* counters)
      : layout_(layout), deleted_(n, false), answered_(n, false), counters_(counters) {}

  void AppendRequest(const KeyOp& op, RequestBuffer* out) override;
  uint64_t TransferBytes(const KeyOp& op) override;
  Result<OpOutcome> ReadReply(const KeyOp& op, Connection* conn) override;
  void Fail(const KeyOp& op, OpFailure why) override;

  const std::vector<bool>& deleted() const { return deleted_; }
  const std::vector<bool>& answered() const { return answered_; }

 private:
  const ValueLayout& layout_;
  std::vector<bool> deleted_;
  std::vector<bool> answered_;
  RemoteCounters* counters_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_READ_OPS_H_
