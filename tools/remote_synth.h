// `kvtier synth ... --remote URL [--check]`: synthesized blocks stored into
// Redis through a RemoteTier, and read back through it to check them.
//
// Thread safety: one sink per command run, used by one thread.
#ifndef KVTIER_TOOLS_REMOTE_SYNTH_H_
#define KVTIER_TOOLS_REMOTE_SYNTH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config_flag.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/layout.h"
#include "kvtier/remote_tier.h"
#include "kvtier/status.h"

namespace kvtier::cli {

class RemoteSynthSink {
 public:
  // Connects (Unavailable if no server answers; InvalidArgument for a bad
  // URL or refused credentials).
  static Result<std::unique_ptr<RemoteSynthSink>> Open(const std::string& url,
                                                       const ModelLayout& layout,
                                                       const ConfigFlag& config);
  // Queues a copy of `file` for the tier's writers (waits for the queue
  // when it is full rather than dropping).
  Status Put(const BlockKey& key, const BlockBuffer& file);
  // Waits until everything is written; OK only if no block was dropped.
  Status Finish();
  struct CheckCounts {
    uint64_t present = 0, missing = 0, wrong = 0;
  };
  // Loads every key back (pipelined, in batches) and checks its content.
  CheckCounts Check(const std::vector<BlockKey>& keys);

 private:
  RemoteSynthSink(std::unique_ptr<RemoteTier> tier, const ModelLayout& layout)
      : tier_(std::move(tier)), layout_(layout) {}
  std::unique_ptr<RemoteTier> tier_;
  ModelLayout layout_;
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_REMOTE_SYNTH_H_
