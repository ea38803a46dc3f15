// RangeOps: GETRANGE of byte ranges of block files, for partial reads
// (BlockReader::LoadTensorBuffers, DESIGN.md §4 tensor_checksums).
//
// A range [begin, end) of a block file maps onto the parts that hold it
// (ValueLayout: part p holds file bytes [p*P, (p+1)*P)); a range that
// straddles parts becomes one GETRANGE per part. Every piece of a key is
// pipelined in one request (all parts share a hash slot: one node), and its
// reply is read straight into the destination the caller gave.
//
// GETRANGE answers "" for an absent name and at most the bytes a value
// has, so a reply may be shorter than asked: `received` says how many
// bytes came (the caller decides whether short is a miss or a bad value).
// A reply longer than asked is a protocol error. WRONGTYPE marks the key
// bad (something else lives under its name); MOVED/ASK/TRYAGAIN are
// followed like any request's (after every reply of the key is consumed).
//
// Thread safety: one handler per batch, used by one thread.
#ifndef KVTIER_REMOTE_RANGE_OPS_H_
#define KVTIER_REMOTE_RANGE_OPS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/block_file.h"
#include "remote/batch_runner.h"
#include "remote/counters.h"
#include "remote/value_layout.h"

namespace kvtier::remote {

// One GETRANGE: `dst.size()` bytes of part `part` from `offset` on.
struct RangePiece {
  uint32_t part = 0;
  uint64_t offset = 0;
  std::span<std::byte> dst;
  uint64_t received = 0;  // bytes the reply held (<= dst.size())
};

// The pieces that read file bytes [r.begin, r.end) into file[r.begin ..]:
// one per part the range touches. REQUIRES: r.end <= file.size().
void AppendPieces(const ValueLayout& layout, const BlockFileRange& r, std::span<std::byte> file,
                  std::vector<RangePiece>* out);

class RangeOps : public OpHandler {
 public:
  enum class State : uint8_t {
    kPending,      // not answered
    kRead,         // every piece answered (see `received`)
    kBad,          // WRONGTYPE: delete it
    kMiss,         // another error reply
    kUnavailable,  // no answer (node down, timeout, protocol error, redirects)
  };
  // pieces[i]: the GETRANGEs of op i (may be empty: nothing asked).
  RangeOps(const ValueLayout& layout, std::vector<std::vector<RangePiece>>* pieces,
           RemoteCounters* counters);

  void AppendRequest(const KeyOp& op, RequestBuffer* out) override;
  uint64_t TransferBytes(const KeyOp& op) override;
  Result<OpOutcome> ReadReply(const KeyOp& op, Connection* conn) override;
  void Fail(const KeyOp& op, OpFailure why) override;

  const std::vector<State>& states() const { return states_; }

 private:
  const ValueLayout& layout_;
  std::vector<std::vector<RangePiece>>* const pieces_;
  std::vector<State> states_;
  RemoteCounters* const counters_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_RANGE_OPS_H_
