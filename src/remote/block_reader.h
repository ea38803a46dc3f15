// BlockReader: the read side of a RemoteTier — existence, verified reads,
// deletion of bad values, Erase.
//
// Every value read is checked with DecodeBlock against the key it was asked
// for, the tier's layout and signature, and its checksums, in the buffer it
// was read into (no copy). A value that fails, is partial, or has the wrong
// type or size is a miss, counted in bad_values, and deleted from the
// server right away (DEL of every possible part, on the caller's thread).
//
// A reader with MAC keys (ValueMac) fetches each value's `:mac` in the same
// MGET and serves a value only if it is signed by one of its keys; any other
// value is a miss, counted in mac_failures, reported to the logger and
// deleted like a bad value (but not held against the node's breaker: an
// unsigned value says a writer lacks a key, not that the node is failing).
// Without keys `:mac` is neither asked for nor checked.
//
// Exists() ends by the lookup budget: what is not answered by then is
// absent for this call, counted in exists_late.
//
// Thread safety: all methods are safe from any thread; each call runs its
// own batch.
#ifndef KVTIER_REMOTE_BLOCK_READER_H_
#define KVTIER_REMOTE_BLOCK_READER_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_buffer.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/layout.h"
#include "remote/batch_runner.h"
#include "remote/counters.h"
#include "remote/read_ops.h"
#include "remote/value_layout.h"
#include "remote/value_mac.h"

namespace kvtier::remote {

class BlockReader {
 public:
  // `mac` null: values are not checked for signatures. REQUIRES: every
  // pointer outlives the reader.
  BlockReader(const ValueLayout* values, const ModelLayout* layout, const ValueMac* mac,
              uint64_t lookup_budget_micros, BatchRunner* runner, Env* env,
              RemoteCounters* counters);

  std::vector<bool> Exists(std::span<const BlockKey> keys);
  // RemoteTier::LoadBuffers(); `alloc` null = the heap.
  void LoadBuffers(std::span<const BlockKey> keys, const ValueAllocator* alloc,
                   const std::function<void(size_t, Result<std::optional<BlockBuffer>>)>& done);
  std::vector<SharedBlock> GetMany(std::span<const BlockKey> keys);
  Result<std::optional<size_t>> GetInto(const BlockKey& key, std::span<std::byte> dst);
  // True if anything was deleted; Unavailable without an answer.
  Result<bool> Erase(const BlockKey& key);

  // One KeyOp per key, index i for keys[i].
  static std::vector<KeyOp> MakeOps(std::span<const BlockKey> keys);

 private:
  // What a value read as `bytes` (with its `:mac`, if fetched) is.
  enum class Check : uint8_t { kGood, kBad, kUnsigned };
  Check Verify(const BlockKey& key, std::span<const std::byte> bytes, const GetResult& r);
  // Counts (and reports) one value that is not signed by our keys.
  void CountMacFailure(const BlockKey& key, ValueMac::Verdict v);
  // Counts one GET result that is not a verified hit.
  void CountMiss(const GetResult& r);
  // Deletes the values of `keys` (best effort, counted); `bad` ones count
  // toward their node's breaker.
  void DeleteBad(const std::vector<BlockKey>& keys, bool bad = true);

  const ValueLayout* const values_;
  const ModelLayout* const layout_;
  const std::string signature_;
  const ValueMac* const mac_;
  const uint64_t lookup_budget_micros_;
  BatchRunner* const runner_;
  Env* const env_;
  RemoteCounters* const counters_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_BLOCK_READER_H_
