#include "remote/block_writer.h"

#include <vector>

#include "remote/block_reader.h"
#include "remote/read_ops.h"
#include "remote/write_ops.h"

namespace kvtier::remote {
namespace {

using C = RemoteCounters;
using SetState = SetResult::State;

}  // namespace

BlockWriter::BlockWriter(const WriterOptions& options, const ValueLayout* values,
                         const ValueMac* mac, BatchRunner* runner, Env* env,
                         RemoteCounters* counters)
    : options_(options),
      values_(values),
      mac_(mac),
      runner_(runner),
      env_(env),
      counters_(counters) {}

void BlockWriter::WriteBatch(std::span<const QueuedBlock> batch) {
  const uint64_t start = env_->NowMicros();
  std::vector<BlockKey> keys;
  keys.reserve(batch.size());
  for (const QueuedBlock& b : batch) keys.push_back(b.key);
  std::vector<bool> skip(batch.size(), false);
  if (options_.skip_existing) {
    std::vector<KeyOp> probe = BlockReader::MakeOps(keys);
    ExistsOps exists(*values_, keys.size(), counters_, /*with_mac=*/mac_ != nullptr);
    runner_->Run(probe, exists);
    skip = exists.found();
  }
  std::vector<BlockKey> send_keys;
  std::vector<std::span<const std::byte>> send_blocks;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (skip[i]) {
      C::Add(counters_->skipped_existing);
      continue;
    }
    send_keys.push_back(batch[i].key);
    send_blocks.push_back(batch[i].block->span());
  }
  if (!send_keys.empty()) {
    std::vector<KeyOp> ops = BlockReader::MakeOps(send_keys);
    SetOps set(*values_, send_blocks, options_.ttl_seconds, mac_, counters_);
    runner_->Run(ops, set);
    for (size_t i = 0; i < send_keys.size(); ++i) {
      switch (set.results()[i].state) {
        case SetState::kStored:
          C::Add(counters_->stored);
          C::Add(counters_->bytes_written, send_blocks[i].size());
          break;
        case SetState::kOom:
          C::Add(counters_->drops_oom);
          counters_->events.OutOfMemory();
          break;
        case SetState::kError:
        case SetState::kRedirectLimit:
          C::Add(counters_->drops_error);
          break;
        case SetState::kClosed:
          C::Add(counters_->drops_closed);
          break;
        case SetState::kPending:
        case SetState::kUnavailable:
          C::Add(counters_->drops_unavailable);
          break;
      }
    }
  }
  counters_->write_latency.Record(env_->NowMicros() - start);
}

Status BlockWriter::WriteOne(const BlockKey& key, std::span<const std::byte> block) {
  std::vector<KeyOp> ops = BlockReader::MakeOps(std::span(&key, 1));
  const std::span<const std::byte> blocks[1] = {block};
  SetOps set(*values_, blocks, options_.ttl_seconds, mac_, counters_);
  runner_->Run(ops, set);
  const SetResult& r = set.results()[0];
  switch (r.state) {
    case SetState::kStored:
      C::Add(counters_->stored);
      C::Add(counters_->bytes_written, block.size());
      return Status::Ok();
    case SetState::kOom:
      C::Add(counters_->drops_oom);
      counters_->events.OutOfMemory();
      return Status::ResourceExhausted(
          "remote: the server is out of memory (-OOM): set "
          "maxmemory-policy allkeys-lru (docs/remote-tier.md)");
    case SetState::kError:
      C::Add(counters_->drops_error);
      return Status::Internal("remote: SET refused: " + r.error);
    case SetState::kRedirectLimit:
      C::Add(counters_->drops_error);
      return Status::Unavailable("remote: SET gave up after 5 cluster redirects");
    case SetState::kClosed:
      C::Add(counters_->drops_closed);
      return Status::FailedPrecondition("remote tier closed");
    case SetState::kPending:
    case SetState::kUnavailable:
      break;
  }
  C::Add(counters_->drops_unavailable);
  return Status::Unavailable("remote: no answer to SET of " + key.Hex() +
                             " (server down, timed out, or breaker open)");
}

}  // namespace kvtier::remote
