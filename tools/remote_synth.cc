#include "remote_synth.h"

#include <algorithm>
#include <span>

#include "kvtier/env.h"
#include "synth/block_generator.h"
#include "stderr_logger.h"

namespace kvtier::cli {

Result<std::unique_ptr<RemoteSynthSink>> RemoteSynthSink::Open(const std::string& url,
                                                               const ModelLayout& layout,
                                                               const ConfigFlag& config) {
  RemoteTierOptions o;
  KVTIER_RETURN_IF_ERROR(config.ApplyTo({.remote = &o}));
  o.url = url;
  o.layout = layout;
  o.require_server_at_open = true;  // a tool says so when Redis is down
  o.info_log = StderrLog();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RemoteTier> tier, RemoteTier::Open(o, Env::Default()));
  return std::unique_ptr<RemoteSynthSink>(new RemoteSynthSink(std::move(tier), layout));
}

Status RemoteSynthSink::Put(const BlockKey& key, const BlockBuffer& file) {
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer copy, BlockBuffer::CopyOf(file.span()));
  auto block = std::make_shared<const BlockBuffer>(std::move(copy));
  Status s = tier_->Put(key, block);
  if (s.IsResourceExhausted()) {
    // The queue is full: a tool may wait where an engine would drop.
    KVTIER_RETURN_IF_ERROR(tier_->Flush());
    s = tier_->Put(key, block);
  }
  return s;
}

Status RemoteSynthSink::Finish() {
  KVTIER_RETURN_IF_ERROR(tier_->Flush());
  const RemoteTierStats s = tier_->Stats();
  const uint64_t dropped =
      s.drops_queue_full + s.drops_unavailable + s.drops_oom + s.drops_error + s.drops_closed;
  if (dropped > 0) {
    return Status::Unavailable(
        "synth --remote: " + std::to_string(dropped) + " blocks were not stored (" +
        std::to_string(s.drops_oom) + " refused with -OOM, " + std::to_string(s.drops_unavailable) +
        " server down or timed out, " + std::to_string(s.drops_error) + " error replies)");
  }
  return Status::Ok();
}

RemoteSynthSink::CheckCounts RemoteSynthSink::Check(const std::vector<BlockKey>& keys) {
  CheckCounts c;
  constexpr size_t kBatch = 256;
  for (size_t begin = 0; begin < keys.size(); begin += kBatch) {
    std::span<const BlockKey> batch(keys.data() + begin, std::min(kBatch, keys.size() - begin));
    std::vector<SharedBlock> got = tier_->GetMany(batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (got[i] == nullptr) {
        ++c.missing;
      } else if (CheckBlockFile(got[i]->span(), layout_, batch[i]).ok()) {
        ++c.present;
      } else {
        ++c.wrong;
      }
    }
  }
  return c;
}

}  // namespace kvtier::cli
