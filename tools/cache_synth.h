// `kvtier synth --cache DIR [--check]`: synthesized blocks stored through a
// DiskTier, and loaded back through it to check them (tools/cache_synth.cc;
// remote_synth.h is the same for --remote).
//
// Thread safety: one thread uses a CacheSynthSink.
#ifndef KVTIER_TOOLS_CACHE_SYNTH_H_
#define KVTIER_TOOLS_CACHE_SYNTH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config_flag.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/disk_tier.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier::cli {

// "synth --cache: N block writes failed: <cause>", each distinct cause of
// `s.write_failures` once with its count (issue 25: the cause reaches the
// user, not a guess).
std::string WriteFailureSummary(const DiskTierStats& s);

// `kvtier synth --cache DIR [--check]`: stores blocks through a DiskTier.
class CacheSynthSink {
 public:
  static Result<std::unique_ptr<CacheSynthSink>> Open(const std::string& dir,
                                                      const ModelLayout& layout,
                                                      const ConfigFlag& config);
  ~CacheSynthSink();
  Status Put(const BlockKey& key, const BlockBuffer& file);
  // Waits until everything is written. OK only if every block was persisted
  // (or was already there); else the error, with `*failed` set to the
  // number of failed writes and index calls (DiskTierStats::errors), and the
  // message naming each cause (WriteFailureSummary).
  Status Finish(uint64_t* failed);
  struct CheckCounts {
    uint64_t present = 0, missing = 0, wrong = 0;
  };
  // Loads every key back through the tier and checks its content.
  CheckCounts Check(const std::vector<BlockKey>& keys);

 private:
  CacheSynthSink(std::unique_ptr<DiskTier> tier, const ModelLayout& layout)
      : tier_(std::move(tier)), layout_(layout) {}
  std::unique_ptr<DiskTier> tier_;
  ModelLayout layout_;
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_CACHE_SYNTH_H_
