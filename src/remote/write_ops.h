// SetOps: the write request of a RemoteTier as an OpHandler for
// BatchRunner.
//
// A block file of one part is `SET <name> <bytes> [EX ttl]`. A longer one
// is written as one transaction, so that a reader's MGET (atomic too) sees
// every part of one version or none of it, even while another host
// overwrites the block with different bytes:
//
//   MULTI; SET <name>:<n-1> ...; ...; SET <name>:1 ...; SET <name> ...; EXEC
//
// (Part 0 last, so that on a server without transactions' guarantees, e.g.
// after a failover, a reader still rarely finds part 0 before the others.)
// A signing writer (ValueMac) adds `SET <name>:mac <signature>` to the same
// transaction, before part 0 — one part or many, the value and its
// signature change together:
//
//   MULTI; SET <name>:<n-1> ...; ...; SET <name>:mac ...; SET <name> ...; EXEC
//
// Values are referenced, never copied (RequestBuffer::Set).
//
// Thread safety: one handler per batch, used by one thread.
#ifndef KVTIER_REMOTE_WRITE_OPS_H_
#define KVTIER_REMOTE_WRITE_OPS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "remote/batch_runner.h"
#include "remote/counters.h"
#include "remote/value_layout.h"
#include "remote/value_mac.h"

namespace kvtier::remote {

struct SetResult {
  enum class State : uint8_t {
    kPending,
    kStored,
    kOom,            // -OOM: the server is full and does not evict
    kError,          // another error reply (the message is kept)
    kUnavailable,    // no answer (node down, timeout, protocol error)
    kRedirectLimit,  // too many redirects
    kClosed,         // the tier is closing
  };
  State state = State::kPending;
  std::string error;  // kError: the server's reply
};

class SetOps : public OpHandler {
 public:
  // Op i writes blocks[i] (signed with `mac` unless null; each signature
  // is computed once, when the op is first sent). The bytes and `mac` must
  // outlive Run().
  SetOps(const ValueLayout& layout, std::span<const std::span<const std::byte>> blocks,
         uint32_t ttl_seconds, const ValueMac* mac,
         RemoteCounters* counters);

  void AppendRequest(const KeyOp& op, RequestBuffer* out) override;
  uint64_t TransferBytes(const KeyOp& op) override;
  Result<OpOutcome> ReadReply(const KeyOp& op, Connection* conn) override;
  void Fail(const KeyOp& op, OpFailure why) override;

  const std::vector<SetResult>& results() const { return results_; }

 private:
  // Folds one error reply into the op's first error.
  void NoteError(std::string_view line, std::optional<ServerError>* first);
  OpOutcome Finish(SetResult& r, const std::optional<ServerError>& first);
  // SETs op `index` sends: its parts, and its signature.
  uint32_t SetsFor(size_t index) const;

  const ValueLayout& layout_;
  const std::span<const std::span<const std::byte>> blocks_;
  const uint32_t ttl_seconds_;
  const ValueMac* const mac_;      // null: unsigned
  std::vector<std::string> macs_;  // op i's `:mac` value, once sent
  std::vector<SetResult> results_;
  RemoteCounters* counters_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_WRITE_OPS_H_
