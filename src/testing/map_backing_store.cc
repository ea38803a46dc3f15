#include "testing/map_backing_store.h"

#include <utility>

namespace kvtier {

size_t MapBackingStore::Match(std::span<const BlockKey> keys) {
  std::lock_guard lock(mu_);
  size_t n = 0;
  while (n < keys.size() && blocks_.count(keys[n]) != 0) ++n;
  return n;
}

Status MapBackingStore::Store(const BlockKey& key, SharedBlock block) {
  std::lock_guard lock(mu_);
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

std::future<std::vector<SharedBlock>> MapBackingStore::Load(std::vector<BlockKey> keys) {
  std::lock_guard lock(mu_);
  ++load_calls_;
  std::promise<std::vector<SharedBlock>> promise;
  std::future<std::vector<SharedBlock>> future = promise.get_future();
  if (hold_) {
    held_.push_back(HeldLoad{std::move(keys), std::move(promise)});
  } else {
    promise.set_value(LookupLocked(keys));
  }
  return future;
}

void MapBackingStore::FailNextStores(int n) {
  std::lock_guard lock(mu_);
  fail_stores_ = n;
}

void MapBackingStore::HoldLoads() {
  std::lock_guard lock(mu_);
  hold_ = true;
}

void MapBackingStore::ReleaseLoads() {
  std::vector<HeldLoad> held;
  std::vector<std::vector<SharedBlock>> results;
  {
    std::lock_guard lock(mu_);
    hold_ = false;
    held.swap(held_);
    for (const HeldLoad& h : held) results.push_back(LookupLocked(h.keys));
  }
  // Completing a promise may wake the pool's loader; do it unlocked.
  for (size_t i = 0; i < held.size(); ++i) held[i].promise.set_value(std::move(results[i]));
}

void MapBackingStore::Erase(const BlockKey& key) {
  std::lock_guard lock(mu_);
  blocks_.erase(key);
}

void MapBackingStore::Corrupt(const BlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = blocks_.find(key);
  if (it == blocks_.end() || it->second == nullptr || it->second->size() == 0) return;
  Result<BlockBuffer> copy = BlockBuffer::CopyOf(it->second->span());
  if (!copy.ok()) return;
  copy->data()[copy->size() - 1] ^= std::byte{0x5a};
  it->second = std::make_shared<const BlockBuffer>(*std::move(copy));
}

std::unique_ptr<MapBackingStore> MapBackingStore::CloneBytes() const {
  auto clone = std::make_unique<MapBackingStore>();
  std::lock_guard lock(mu_);
  for (const auto& [key, block] : blocks_) {
    Result<BlockBuffer> copy = BlockBuffer::CopyOf(block->span());
    if (copy.ok()) clone->blocks_[key] = std::make_shared<const BlockBuffer>(*std::move(copy));
  }
  return clone;
}

bool MapBackingStore::Contains(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  return blocks_.count(key) != 0;
}

SharedBlock MapBackingStore::Get(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  auto it = blocks_.find(key);
  return it == blocks_.end() ? nullptr : it->second;
}

size_t MapBackingStore::size() const {
  std::lock_guard lock(mu_);
  return blocks_.size();
}

uint64_t MapBackingStore::store_calls() const {
  std::lock_guard lock(mu_);
  return store_calls_;
}

uint64_t MapBackingStore::load_calls() const {
  std::lock_guard lock(mu_);
  return load_calls_;
}

}  // namespace kvtier
