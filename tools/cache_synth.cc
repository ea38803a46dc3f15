// `kvtier synth --cache DIR [--check]`: synthesized blocks stored through a
// DiskTier, and loaded back through it to check them.
#include "cache_synth.h"

#include "kvtier/env.h"
#include "synth/block_generator.h"
#include "stderr_logger.h"

namespace kvtier::cli {

std::string WriteFailureSummary(const DiskTierStats& s) {
  uint64_t writes = 0;
  for (const WriteFailureCause& c : s.write_failures) writes += c.count;
  std::string out = "synth --cache: ";
  if (writes == 0) {
    // Index calls outside a block write (access times, the reconcile).
    return out + std::to_string(s.errors) + " index calls failed (" +
           "the disk tier logged each kind above)";
  }
  out += std::to_string(writes) + " block writes failed";
  if (s.write_failures.size() == 1) return out + ": " + s.write_failures[0].cause;
  // Each distinct cause once, with its count, most frequent first.
  out += ":";
  for (const WriteFailureCause& c : s.write_failures) {
    out += "\n  " + std::to_string(c.count) + " x " + c.cause;
  }
  return out;
}

Result<std::unique_ptr<CacheSynthSink>> CacheSynthSink::Open(const std::string& dir,
                                                             const ModelLayout& layout,
                                                             const ConfigFlag& config) {
  DiskTierOptions o;
  o.reconcile_on_open = false;  // a short-lived writer: leave repairs to the long-lived ones
  KVTIER_RETURN_IF_ERROR(config.ApplyTo({.disk = &o}));
  o.dir = dir;
  o.layout_signature = layout.Signature();
  o.info_log = StderrLog();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> tier, DiskTier::Open(o, Env::Default()));
  return std::unique_ptr<CacheSynthSink>(new CacheSynthSink(std::move(tier), layout));
}

CacheSynthSink::~CacheSynthSink() = default;

Status CacheSynthSink::Put(const BlockKey& key, const BlockBuffer& file) {
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer copy, BlockBuffer::CopyOf(file.span()));
  return tier_->Store(key, std::make_shared<const BlockBuffer>(std::move(copy)));
}

Status CacheSynthSink::Finish(uint64_t* failed) {
  Status flushed = tier_->Flush();
  DiskTierStats s = tier_->Stats();
  *failed = s.errors;
  if (s.errors > 0) return Status::IOError(WriteFailureSummary(s), 0);
  return flushed;
}

CacheSynthSink::CheckCounts CacheSynthSink::Check(const std::vector<BlockKey>& keys) {
  CheckCounts c;
  std::vector<std::byte> buf(layout_.BlockBytes() + kMaxBlockHeaderBytes + 8);
  for (const BlockKey& key : keys) {
    auto r = tier_->Load(key, buf);
    if (!r.ok() || !r->has_value()) {
      ++c.missing;
      continue;
    }
    if (CheckBlockFile(std::span(buf).first(**r), layout_, key).ok()) {
      ++c.present;
    } else {
      ++c.wrong;
    }
  }
  return c;
}

}  // namespace kvtier::cli
