// MapBackingStore: a BlockBackingStore over a std::map, for tests.
//
// It keeps the block files it is given (shared, not copied) by key and, like
// every store, verifies a block (key and checksum) before handing it to a
// load; a bad one is a miss. Loads call back on the calling thread. Tests can
// make stores fail, hold loads until released (to see a load in flight),
// drop or corrupt a stored block, and deep-copy the whole map (CloneBytes)
// to model another process that reads the same tier: the clone shares no
// memory with the original.
//
// Thread safety: every method may be called from any thread.
#ifndef KVTIER_TESTING_MAP_BACKING_STORE_H_
#define KVTIER_TESTING_MAP_BACKING_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_pool.h"

namespace kvtier {

class MapBackingStore final : public BlockBackingStore {
 public:
  MapBackingStore() = default;

  size_t Match(std::span<const BlockKey> keys) override;
  Status Store(const BlockKey& key, SharedBlock block) override;
  void Load(std::span<const BlockKey> keys, BlockArrivalCallback on_block) override;

  // Test controls.
  // The next `n` Store calls fail with kIOError and keep nothing.
  void FailNextStores(int n);
  // Loads started from now on wait until ReleaseLoads().
  void HoldLoads();
  // Completes the held loads (with what the map holds now, on this thread)
  // and stops holding.
  void ReleaseLoads();
  void Erase(const BlockKey& key);
  // Replaces the stored file with a copy whose last byte is flipped.
  void Corrupt(const BlockKey& key);
  // A new store with copies of every block file's bytes.
  std::unique_ptr<MapBackingStore> CloneBytes() const;

  bool Contains(const BlockKey& key) const;
  SharedBlock Get(const BlockKey& key) const;
  size_t size() const;
  uint64_t store_calls() const;
  uint64_t load_calls() const;

 private:
  struct HeldLoad {
    std::vector<BlockKey> keys;
    BlockArrivalCallback on_block;
  };
  std::vector<SharedBlock> LookupLocked(const std::vector<BlockKey>& keys) const REQUIRES(mu_);
  static void Deliver(const std::vector<BlockKey>& keys, const std::vector<SharedBlock>& found,
                      const BlockArrivalCallback& on_block);

  mutable Mutex mu_;
  std::map<BlockKey, SharedBlock> blocks_ GUARDED_BY(mu_);
  int fail_stores_ GUARDED_BY(mu_) = 0;
  bool hold_ GUARDED_BY(mu_) = false;
  std::vector<HeldLoad> held_ GUARDED_BY(mu_);
  uint64_t store_calls_ GUARDED_BY(mu_) = 0;
  uint64_t load_calls_ GUARDED_BY(mu_) = 0;
};

// Runs store.Load(keys) and waits for every block: the block files (null
// for misses), in key order. For tests of stores.
std::vector<SharedBlock> LoadAndWait(BlockBackingStore& store, std::span<const BlockKey> keys);

}  // namespace kvtier

#endif  // KVTIER_TESTING_MAP_BACKING_STORE_H_
