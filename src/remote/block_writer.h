// BlockWriter: the write side of a RemoteTier — one batch of queued blocks
// at a time (writer threads), or one block synchronously (PutSync).
//
// With `skip_existing`, a batch first asks which of its blocks the server
// already has (one pipelined probe round trip per node: GETRANGE of the
// value's head, EXISTS of its other parts) and sends only the others, so
// that hosts sharing a server do not each send the same block.
// Every block ends counted: stored, skipped_existing, or one of the drops
// (unavailable, oom, error). A signing writer's probe asks for the `:mac`
// too, so that it replaces an unsigned copy rather than skip it.
//
// Thread safety: all methods are safe from any thread; each call runs its
// own batch.
#ifndef KVTIER_REMOTE_BLOCK_WRITER_H_
#define KVTIER_REMOTE_BLOCK_WRITER_H_

#include <cstdint>
#include <span>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/status.h"
#include "remote/batch_runner.h"
#include "remote/counters.h"
#include "remote/value_layout.h"
#include "remote/value_mac.h"
#include "remote/write_queue.h"

namespace kvtier::remote {

struct WriterOptions {
  uint32_t ttl_seconds = 0;
  bool skip_existing = true;
};

class BlockWriter {
 public:
  // REQUIRES: every pointer outlives the writer.
  // `mac`: signs every value (null: unsigned).
  BlockWriter(const WriterOptions& options, const ValueLayout* values, const ValueMac* mac,
              BatchRunner* runner, Env* env, RemoteCounters* counters);

  // Writes (or skips) every block of the batch and counts the outcome.
  void WriteBatch(std::span<const QueuedBlock> batch);
  // Writes one block now. OK when stored; Unavailable, ResourceExhausted
  // (-OOM) or Internal (another error reply, quoted) otherwise.
  Status WriteOne(const BlockKey& key, std::span<const std::byte> block);

 private:
  const WriterOptions options_;
  const ValueLayout* const values_;
  const ValueMac* const mac_;
  BatchRunner* const runner_;
  Env* const env_;
  RemoteCounters* const counters_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_BLOCK_WRITER_H_
