#include "remote/block_reader.h"

namespace kvtier::remote {
namespace {

using C = RemoteCounters;
using State = GetResult::State;

}  // namespace

BlockReader::BlockReader(const ValueLayout* values, const ModelLayout* layout, BatchRunner* runner,
                         RemoteCounters* counters)
    : values_(values),
      layout_(layout),
      signature_(layout->Signature()),
      runner_(runner),
      counters_(counters) {}

std::vector<KeyOp> BlockReader::MakeOps(std::span<const BlockKey> keys) {
  std::vector<KeyOp> ops(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ops[i].index = i;
    ops[i].key = keys[i];
    ops[i].slot = ValueLayout::SlotOf(keys[i]);
  }
  return ops;
}

bool BlockReader::Verify(const BlockKey& key, std::span<const std::byte> bytes) {
  DecodeOptions o;
  o.expected_key = &key;
  o.expected_signature = &signature_;
  o.expected_layout = layout_;
  o.verify_checksum = true;
  return DecodeBlock(bytes, o).ok();
}

void BlockReader::CountMiss(const GetResult& r) {
  C::Add(counters_->misses);
  switch (r.state) {
    case State::kBad:
      C::Add(counters_->bad_values);
      counters_->events.BadValue();
      break;
    case State::kUnavailable:
    case State::kPending:
      C::Add(counters_->misses_unavailable);
      break;
    case State::kTooSmall:
      C::Add(counters_->too_small);
      break;
    case State::kAllocError:
      C::Add(counters_->alloc_failures);
      break;
    default:
      break;
  }
}

void BlockReader::DeleteBad(const std::vector<BlockKey>& keys) {
  if (keys.empty()) return;
  std::vector<KeyOp> ops = MakeOps(keys);
  DeleteOps del(*values_, keys.size(), counters_);
  runner_->Run(ops, del);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (del.deleted()[i]) C::Add(counters_->bad_values_deleted);
    // After the DEL: a breaker this opens must not keep the value there.
    runner_->ReportBadValue(ops[i].slot);
  }
}

std::vector<bool> BlockReader::Exists(std::span<const BlockKey> keys) {
  C::Add(counters_->exists_calls);
  C::Add(counters_->exists_keys, keys.size());
  std::vector<KeyOp> ops = MakeOps(keys);
  ExistsOps exists(*values_, keys.size(), counters_);
  runner_->Run(ops, exists);
  std::vector<bool> found = exists.found();
  uint64_t n = 0;
  for (bool f : found) n += f;
  C::Add(counters_->exists_found, n);
  return found;
}

void BlockReader::LoadBuffers(
    std::span<const BlockKey> keys, const ValueAllocator* alloc,
    const std::function<void(size_t, Result<std::optional<BlockBuffer>>)>& done) {
  C::Add(counters_->lookups, keys.size());
  std::vector<KeyOp> ops = MakeOps(keys);
  GetOps get(*values_, keys.size(), alloc, counters_);
  runner_->Run(ops, get);
  std::vector<BlockKey> bad;
  for (size_t i = 0; i < keys.size(); ++i) {
    GetResult& r = get.results()[i];
    if (r.state == State::kRead) {
      if (Verify(keys[i], r.buffer.span())) {
        C::Add(counters_->hits);
        C::Add(counters_->bytes_read, r.buffer.size());
        done(i, std::optional<BlockBuffer>(std::move(r.buffer)));
        continue;
      }
      r.state = State::kBad;
    }
    r.buffer = BlockBuffer();
    CountMiss(r);
    if (r.state == State::kBad) bad.push_back(keys[i]);
    if (r.state == State::kAllocError) {
      done(i, r.alloc_error);
    } else {
      done(i, std::optional<BlockBuffer>());
    }
  }
  DeleteBad(bad);
}

std::vector<SharedBlock> BlockReader::GetMany(std::span<const BlockKey> keys) {
  std::vector<SharedBlock> out(keys.size());
  LoadBuffers(keys, nullptr, [&](size_t i, Result<std::optional<BlockBuffer>> r) {
    if (r.ok() && r->has_value()) out[i] = std::make_shared<const BlockBuffer>(std::move(**r));
  });
  return out;
}

Result<std::optional<size_t>> BlockReader::GetInto(const BlockKey& key, std::span<std::byte> dst) {
  C::Add(counters_->lookups);
  std::vector<KeyOp> ops = MakeOps(std::span(&key, 1));
  const std::span<std::byte> dsts[1] = {dst};
  GetOps get(*values_, dsts, counters_);
  runner_->Run(ops, get);
  GetResult& r = get.results()[0];
  if (r.state == State::kRead) {
    const std::span<const std::byte> bytes = dst.first(static_cast<size_t>(r.size));
    if (Verify(key, bytes)) {
      C::Add(counters_->hits);
      C::Add(counters_->bytes_read, r.size);
      return std::optional<size_t>(static_cast<size_t>(r.size));
    }
    r.state = State::kBad;
  }
  CountMiss(r);
  if (r.state == State::kBad) DeleteBad({key});
  if (r.state == State::kTooSmall) {
    return Status::InvalidArgument("remote: buffer of " + std::to_string(dst.size()) +
                                   " bytes is smaller than the block's " + std::to_string(r.size));
  }
  return std::optional<size_t>();
}

Result<bool> BlockReader::Erase(const BlockKey& key) {
  std::vector<KeyOp> ops = MakeOps(std::span(&key, 1));
  DeleteOps del(*values_, 1, counters_);
  runner_->Run(ops, del);
  if (!del.answered()[0]) {
    return Status::Unavailable("remote: no answer to DEL of " + key.Hex());
  }
  if (del.deleted()[0]) C::Add(counters_->erases);
  return del.deleted()[0];
}

}  // namespace kvtier::remote
