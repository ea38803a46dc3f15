#include "testing/map_backing_store.h"

#include <utility>

#include "kvtier/block_file.h"

namespace kvtier {

size_t MapBackingStore::Match(std::span<const BlockKey> keys) {
  MutexLock lock(&mu_);
  size_t n = 0;
  while (n < keys.size() && blocks_.count(keys[n]) != 0) ++n;
  return n;
}

Status MapBackingStore::Store(const BlockKey& key, SharedBlock block) {
  MutexLock lock(&mu_);
  ++store_calls_;
  if (fail_stores_ > 0) {
    --fail_stores_;
    return Status::IOError("map store: injected failure", 5 /* EIO */);
  }
  blocks_[key] = std::move(block);
  return Status::Ok();
}

std::vector<SharedBlock> MapBackingStore::LookupLocked(const std::vector<BlockKey>& keys) const {
  std::vector<SharedBlock> out;
  out.reserve(keys.size());
  for (const BlockKey& k : keys) {
    auto it = blocks_.find(k);
    out.push_back(it == blocks_.end() ? nullptr : it->second);
  }
  return out;
}

void MapBackingStore::Load(std::span<const BlockKey> keys, BlockArrivalCallback on_block) {
  std::vector<BlockKey> want(keys.begin(), keys.end());
  std::vector<SharedBlock> found;
  {
    MutexLock lock(&mu_);
    ++load_calls_;
    if (hold_) {
      held_.push_back(HeldLoad{std::move(want), std::move(on_block)});
      return;
    }
    found = LookupLocked(want);
  }
  // Unlocked: the callback takes the pool's lock.
  Deliver(want, found, on_block);
}

void MapBackingStore::Deliver(const std::vector<BlockKey>& keys,
                              const std::vector<SharedBlock>& found,
                              const BlockArrivalCallback& on_block) {
  for (size_t i = 0; i < keys.size(); ++i) {
    SharedBlock block = found[i];
    // A store verifies what it hands out, as the disk and remote tiers do
    // where bytes enter the process: here, the key and the data checksum.
    DecodeOptions opts;
    opts.expected_key = &keys[i];
    if (block != nullptr && !DecodeBlock(block->span(), opts).ok()) block = nullptr;
    on_block(i, std::move(block));
  }
}

void MapBackingStore::FailNextStores(int n) {
  MutexLock lock(&mu_);
  fail_stores_ = n;
}

void MapBackingStore::HoldLoads() {
  MutexLock lock(&mu_);
  hold_ = true;
}

void MapBackingStore::ReleaseLoads() {
  std::vector<HeldLoad> held;
  std::vector<std::vector<SharedBlock>> results;
  {
    MutexLock lock(&mu_);
    hold_ = false;
    held.swap(held_);
    for (const HeldLoad& h : held) results.push_back(LookupLocked(h.keys));
  }
  for (size_t i = 0; i < held.size(); ++i) Deliver(held[i].keys, results[i], held[i].on_block);
}

void MapBackingStore::Erase(const BlockKey& key) {
  MutexLock lock(&mu_);
  blocks_.erase(key);
}

void MapBackingStore::Corrupt(const BlockKey& key) {
  MutexLock lock(&mu_);
  auto it = blocks_.find(key);
  if (it == blocks_.end() || it->second == nullptr || it->second->size() == 0) return;
  Result<BlockBuffer> copy = BlockBuffer::CopyOf(it->second->span());
  if (!copy.ok()) return;
  copy->data()[copy->size() - 1] ^= std::byte{0x5a};
  it->second = std::make_shared<const BlockBuffer>(*std::move(copy));
}

std::unique_ptr<MapBackingStore> MapBackingStore::CloneBytes() const {
  auto clone = std::make_unique<MapBackingStore>();
  MutexLock lock(&mu_);
  // Not shared yet; locked only so that the analysis sees its map guarded.
  MutexLock clone_lock(&clone->mu_);
  for (const auto& [key, block] : blocks_) {
    Result<BlockBuffer> copy = BlockBuffer::CopyOf(block->span());
    if (copy.ok()) clone->blocks_[key] = std::make_shared<const BlockBuffer>(*std::move(copy));
  }
  return clone;
}

bool MapBackingStore::Contains(const BlockKey& key) const {
  MutexLock lock(&mu_);
  return blocks_.count(key) != 0;
}

SharedBlock MapBackingStore::Get(const BlockKey& key) const {
  MutexLock lock(&mu_);
  auto it = blocks_.find(key);
  return it == blocks_.end() ? nullptr : it->second;
}

size_t MapBackingStore::size() const {
  MutexLock lock(&mu_);
  return blocks_.size();
}

uint64_t MapBackingStore::store_calls() const {
  MutexLock lock(&mu_);
  return store_calls_;
}

uint64_t MapBackingStore::load_calls() const {
  MutexLock lock(&mu_);
  return load_calls_;
}

std::vector<SharedBlock> LoadAndWait(BlockBackingStore& store, std::span<const BlockKey> keys) {
  Mutex mu;
  CondVar cv;
  std::vector<SharedBlock> out(keys.size());
  size_t arrived = 0;
  store.Load(keys, [&](size_t i, SharedBlock block) {
    MutexLock lock(&mu);
    out[i] = std::move(block);
    ++arrived;
    cv.SignalAll();
  });
  MutexLock lock(&mu);
  while (arrived != keys.size()) cv.Wait(&lock);
  return out;
}

}  // namespace kvtier
