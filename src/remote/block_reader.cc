#include "remote/block_reader.h"

namespace kvtier::remote {
namespace {

using C = RemoteCounters;
using GetState = GetResult::State;

}  // namespace

BlockReader::BlockReader(const ValueLayout* values, const ModelLayout* layout,
                         const ValueMac* mac, uint64_t lookup_budget_micros, BatchRunner* runner,
                         Env* env, RemoteCounters* counters, VerifyPool* pool)
    : values_(values),
      layout_(layout),
      signature_(layout->Signature()),
      mac_(mac),
      pool_(pool),
      decode_([this](const BlockKey& key, std::span<const std::byte> bytes) {
        return Decodes(key, bytes);
      }),
      lookup_budget_micros_(lookup_budget_micros),
      runner_(runner),
      env_(env),
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

BlockReader::Check BlockReader::Verify(const BlockKey& key, std::span<const std::byte> bytes,
                                       const GetResult& r) {
  // The signature first (checked as the value was read): bytes no key
  // holder wrote are not worth parsing.
  if (mac_ != nullptr) {
    const ValueMac::Verdict v = r.mac_verdict.value_or(ValueMac::Verdict::kMissing);
    if (v != ValueMac::Verdict::kOk) {
      CountMacFailure(key, v);
      return Check::kUnsigned;
    }
  }
  // Decoded on the pool already, or here.
  const bool ok = r.value_ok.has_value() ? *r.value_ok : Decodes(key, bytes);
  return ok ? Check::kGood : Check::kBad;
}

bool BlockReader::Decodes(const BlockKey& key, std::span<const std::byte> bytes) const {
  DecodeOptions o;
  o.expected_key = &key;
  o.expected_signature = &signature_;
  o.expected_layout = layout_;
  o.verify_checksum = true;
  return DecodeBlock(bytes, o).ok();
}

void BlockReader::CountMacFailure(const BlockKey& key, ValueMac::Verdict v) {
  C::Add(counters_->mac_failures);
  counters_->events.MacFailure(key.Hex(), VerdictText(v));
}

void BlockReader::CountMiss(const GetResult& r) {
  C::Add(counters_->misses);
  switch (r.state) {
    case GetState::kBad:
      C::Add(counters_->bad_values);
      counters_->events.BadValue(r.missing_part);
      break;
    case GetState::kUnavailable:
    case GetState::kPending:
      C::Add(counters_->misses_unavailable);
      break;
    case GetState::kTooSmall:
      C::Add(counters_->too_small);
      break;
    case GetState::kAllocError:
      C::Add(counters_->alloc_failures);
      break;
    default:
      break;
  }
}

void BlockReader::DeleteBad(const std::vector<BlockKey>& keys, bool bad) {
  if (keys.empty()) return;
  std::vector<KeyOp> ops = MakeOps(keys);
  DeleteOps del(*values_, keys.size(), counters_);
  runner_->Run(ops, del);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (del.deleted()[i]) C::Add(counters_->bad_values_deleted);
    // After the DEL: a breaker this opens must not keep the value there.
    if (bad) runner_->ReportBadValue(ops[i].slot);
  }
}

std::vector<bool> BlockReader::Exists(std::span<const BlockKey> keys) {
  C::Add(counters_->exists_calls);
  C::Add(counters_->exists_keys, keys.size());
  std::vector<KeyOp> ops = MakeOps(keys);
  ExistsOps exists(*values_, keys.size(), counters_);
  // The budget starts with the call, so a connect it needs is inside it.
  const uint64_t budget_end = env_->NowMicros() + lookup_budget_micros_;
  runner_->Run(ops, exists, budget_end);
  // Keys that failed once the budget had run out were given up for it (a
  // down node's breaker refuses at once, long before).
  if (exists.failed() > 0 && env_->NowMicros() >= budget_end) {
    C::Add(counters_->exists_late, exists.failed());
  }
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
  GetOps get(*values_, keys.size(), alloc, counters_, mac_, pool_, &decode_);
  runner_->Run(ops, get);
  get.WaitChecks();
  std::vector<BlockKey> bad, evicted, unsigned_values;
  for (size_t i = 0; i < keys.size(); ++i) {
    GetResult& r = get.results()[i];
    bool is_unsigned = false;
    if (r.state == GetState::kRead) {
      const Check c = Verify(keys[i], r.buffer.span(), r);
      if (c == Check::kGood) {
        C::Add(counters_->hits);
        C::Add(counters_->bytes_read, r.buffer.size());
        done(i, std::optional<BlockBuffer>(std::move(r.buffer)));
        continue;
      }
      is_unsigned = c == Check::kUnsigned;
      r.state = is_unsigned ? GetState::kMiss : GetState::kBad;
    }
    r.buffer = BlockBuffer();
    CountMiss(r);
    if (is_unsigned) unsigned_values.push_back(keys[i]);
    if (r.state == GetState::kBad) (r.missing_part ? evicted : bad).push_back(keys[i]);
    if (r.state == GetState::kAllocError) {
      done(i, r.alloc_error);
    } else {
      done(i, std::optional<BlockBuffer>());
    }
  }
  DeleteBad(bad);
  // A part evicted by the server's LRU says nothing against the node.
  DeleteBad(evicted, /*bad=*/false);
  DeleteBad(unsigned_values, /*bad=*/false);
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
  GetOps get(*values_, dsts, counters_, mac_, pool_, &decode_);
  runner_->Run(ops, get);
  get.WaitChecks();
  GetResult& r = get.results()[0];
  bool is_unsigned = false;
  if (r.state == GetState::kRead) {
    const std::span<const std::byte> bytes = dst.first(static_cast<size_t>(r.size));
    const Check c = Verify(key, bytes, r);
    if (c == Check::kGood) {
      C::Add(counters_->hits);
      C::Add(counters_->bytes_read, r.size);
      return std::optional<size_t>(static_cast<size_t>(r.size));
    }
    is_unsigned = c == Check::kUnsigned;
    r.state = is_unsigned ? GetState::kMiss : GetState::kBad;
  }
  CountMiss(r);
  if (r.state == GetState::kBad) DeleteBad({key}, /*bad=*/!r.missing_part);
  if (is_unsigned) DeleteBad({key}, /*bad=*/false);
  if (r.state == GetState::kTooSmall) {
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
