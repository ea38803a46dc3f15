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
// LoadTensorBuffers() reads only what a TensorMask selects (DESIGN.md §4,
// tensor_checksums): a GETRANGE of part 0's head (as many bytes as the last
// verified header had, so one round trip usually holds the whole header),
// a second one for the rest of a longer header, then one GETRANGE per
// (selected range x part holding it): three round trips at most, each
// pipelined per node. What it serves is verified (meta_checksum and each
// selected tensor's entry); a failure is a bad value like a whole read's.
// A reader with MAC keys reads whole values: the tag covers the whole file.
//
// Exists() ends by the lookup budget: what is not answered by then is
// absent for this call, counted in exists_late.
//
// Thread safety: all methods are safe from any thread; each call runs its
// own batch.
#ifndef KVTIER_REMOTE_BLOCK_READER_H_
#define KVTIER_REMOTE_BLOCK_READER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
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
#include "remote/verify_pool.h"

namespace kvtier::remote {

class BlockReader {
 public:
  // `mac` null: values are not checked for signatures. `pool` (null: none)
  // hashes signed values, and decodes those whose tag verified, on other
  // cores while the socket thread reads the next (GetOps). REQUIRES: every pointer outlives the reader.
  BlockReader(const ValueLayout* values, const ModelLayout* layout, const ValueMac* mac,
              uint64_t lookup_budget_micros, BatchRunner* runner, Env* env,
              RemoteCounters* counters, VerifyPool* pool = nullptr);

  std::vector<bool> Exists(std::span<const BlockKey> keys);
  // RemoteTier::LoadBuffers(); `alloc` null = the heap.
  void LoadBuffers(std::span<const BlockKey> keys, const ValueAllocator* alloc,
                   const std::function<void(size_t, Result<std::optional<BlockBuffer>>)>& done);
  std::vector<SharedBlock> GetMany(std::span<const BlockKey> keys);
  // RemoteTier::LoadTensorBuffers(): LoadBuffers() of only the tensors
  // masks[i] selects of keys[i] (an empty or missing mask, or one that
  // selects every tensor: the whole value). The buffer is the whole file's
  // size, its header and selected tensors read and verified, the rest
  // unspecified. Values without tensor_checksums, and every value of a reader
  // with MAC keys, are read whole.
  void LoadTensorBuffers(
      std::span<const BlockKey> keys, std::span<const TensorMask> masks,
      const ValueAllocator* alloc,
      const std::function<void(size_t, Result<std::optional<BlockBuffer>>)>& done);
  Result<std::optional<size_t>> GetInto(const BlockKey& key, std::span<std::byte> dst);
  // True if anything was deleted; Unavailable without an answer.
  Result<bool> Erase(const BlockKey& key);

  // One KeyOp per key, index i for keys[i].
  static std::vector<KeyOp> MakeOps(std::span<const BlockKey> keys);

 private:
  // What a value read as `bytes` (with its `:mac`, if fetched) is.
  enum class Check : uint8_t { kGood, kBad, kUnsigned };
  Check Verify(const BlockKey& key, std::span<const std::byte> bytes, const GetResult& r);
  // DecodeBlock's verdict (structure, key, layout, signature, checksums).
  bool Decodes(const BlockKey& key, std::span<const std::byte> bytes) const;
  // Counts (and reports) one value that is not signed by our keys.
  void CountMacFailure(const BlockKey& key, ValueMac::Verdict v);
  // Counts one GET result that is not a verified hit.
  void CountMiss(const GetResult& r);
  // Deletes the values of `keys` (best effort, counted); `bad` ones count
  // toward their node's breaker.
  void DeleteBad(const std::vector<BlockKey>& keys, bool bad = true);

  // One partial read per key of `keys` (every mask a strict subset).
  void LoadPartial(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                   const ValueAllocator* alloc,
                   const std::function<void(size_t, Result<std::optional<BlockBuffer>>)>& done);

  const ValueLayout* const values_;
  const ModelLayout* const layout_;
  const std::string signature_;
  const ValueMac* const mac_;
  VerifyPool* const pool_;
  const ValueCheck decode_;  // Decodes(), for GetOps to run on pool_
  const uint64_t lookup_budget_micros_;
  BatchRunner* const runner_;
  Env* const env_;
  RemoteCounters* const counters_;
  // Bytes of part 0 a partial read asks for first: the header length
  // (8 + N) of the last header it verified (headers of one layout differ
  // by a few bytes at most). A shorter guess costs a second round trip, a
  // longer one reads a few data bytes. The first guess is below any real
  // layout's header (a 2-layer one's is over 1 KiB): one extra round trip
  // once, rather than data bytes read on every call of a tier whose reads
  // fail.
  std::atomic<uint64_t> head_hint_{512};
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_BLOCK_READER_H_
