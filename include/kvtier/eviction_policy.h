// HostEvictionPolicy's names, and EvictionList: entries kept in eviction
// order under a HostEvictionPolicy.
//
// Shared by the host tier (src/host/host_arena.h, whose entries are real
// blocks) and the metadata-only trace simulator (src/replay/, whose entries
// are trace block ids), so that both evict exactly the same way: public so
// that the layers above the host tier can run the very code it runs.
// host_internal is not for applications and may change in any release.
//
// The order is one std::list, front = next victim:
//
//   [ not reused: LRU ... MRU ][ reused: LRU ... MRU ]
//                               ^ reused_begin_
//
// kLru keeps every entry in the first segment: an insert or a touch moves it
// to the back. kReuse (see HostEvictionPolicy in kvtier/host_tier.h) appends new
// entries to the first segment and moves an entry to the back of the second
// once it is reused: touched, re-inserted after being extracted for a
// replacement, or inserted while its key is in the ghost list of recently
// evicted keys. Every operation is O(1) (amortised for the ghost trim).
//
// Ownership: the list owns its entries. Iterators stay valid until the entry
// is removed, as for std::list; callers keep them in their own key maps.
//
// Thread safety: none; the owner serialises calls (the host arena holds its
// mutex for every call).
#ifndef KVTIER_EVICTION_POLICY_H_
#define KVTIER_EVICTION_POLICY_H_

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <list>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "kvtier/block_key.h"
#include "kvtier/host_tier.h"
#include "kvtier/status.h"

namespace kvtier {

// "lru" or "reuse".
std::string_view HostEvictionPolicyName(HostEvictionPolicy policy);
// Inverse of HostEvictionPolicyName; InvalidArgument naming the accepted names.
Result<HostEvictionPolicy> ParseHostEvictionPolicy(std::string_view name);

namespace host_internal {

// Ghost entries remembered per resident entry (kReuse). 4 keeps most of the
// benefit of unbounded memory on the Mooncake trace (docs/replay.md) and
// costs ~100 bytes per remembered key, next to the entry's block.
inline constexpr size_t kGhostPerEntry = 4;

// The 64-bit fingerprint of a block key that the ghost list remembers (its
// first 8 bytes, little-endian; keys are SHA-256 output). A collision only
// makes one store count as a reuse.
uint64_t KeyFingerprint(const BlockKey& key);

// Fingerprints of recently evicted keys, oldest forgotten first.
class GhostList {
 public:
  // Remembers `fp` as the newest (moving it if already remembered).
  void Add(uint64_t fp);
  // Forgets `fp`; returns whether it was remembered.
  bool Take(uint64_t fp);
  // Forgets the oldest until at most `limit` remain.
  void Trim(size_t limit);
  size_t size() const { return index_.size(); }

 private:
  std::list<uint64_t> order_;  // front = oldest
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> index_;
};

// How an entry enters an EvictionList.
enum class Admission : uint8_t {
  kNew,     // first store: reused only if the ghost list remembers it
  kReused,  // already known to be wanted again (a replacement, a promotion)
};

// How an entry leaves an EvictionList.
enum class Removal : uint8_t {
  kEvicted,  // pushed out for room: remembered in the ghost list (kReuse)
  kErased,   // dropped on request: not remembered
};

// T is the caller's entry; it must have a `bool reused` member, which the
// list owns (callers read it, never write it).
template <typename T>
class EvictionList {
 public:
  using List = std::list<T>;
  using iterator = typename List::iterator;
  using const_iterator = typename List::const_iterator;

  explicit EvictionList(HostEvictionPolicy policy) : policy_(policy), reused_begin_(list_.end()) {}
  // reused_begin_ points into list_: not copyable or movable.
  EvictionList(const EvictionList&) = delete;
  EvictionList& operator=(const EvictionList&) = delete;

  HostEvictionPolicy policy() const { return policy_; }

  // Links the single entry of `node` (spliced: no allocation, so callers
  // can build it before taking their lock). `fp` identifies its key.
  // Returns its position.
  iterator Insert(List&& node, uint64_t fp, Admission admission) {
    assert(node.size() == 1);
    iterator it = node.begin();
    if (policy_ == HostEvictionPolicy::kLru) {
      it->reused = admission == Admission::kReused;
      list_.splice(list_.end(), node);
      return it;
    }
    bool reused = admission == Admission::kReused;
    if (ghost_.Take(fp)) {
      reused = true;
      ++ghost_hits_;
    }
    it->reused = reused;
    if (reused) {
      list_.splice(list_.end(), node);
      if (reused_begin_ == list_.end()) reused_begin_ = it;
    } else {
      list_.splice(reused_begin_, node);
    }
    return it;
  }
  iterator Insert(T value, uint64_t fp, Admission admission) {
    List node;
    node.push_back(std::move(value));
    return Insert(std::move(node), fp, admission);
  }

  // The entry was used: it becomes the last victim (of the reused segment
  // under kReuse).
  void Touch(iterator it) {
    if (policy_ == HostEvictionPolicy::kLru) {
      list_.splice(list_.end(), list_, it);
      return;
    }
    if (it == reused_begin_) reused_begin_ = std::next(it);
    list_.splice(list_.end(), list_, it);
    it->reused = true;
    if (reused_begin_ == list_.end()) reused_begin_ = it;
  }

  // Unlinks and destroys the entry. REQUIRES: `fp` is its key's fingerprint.
  void Remove(iterator it, uint64_t fp, Removal why) {
    Unlink(it);
    list_.erase(it);
    if (policy_ == HostEvictionPolicy::kReuse && why == Removal::kEvicted) {
      ghost_.Add(fp);
      ghost_.Trim(kGhostPerEntry * (list_.size() + 1));
    }
  }

  // Unlinks the entry and hands it back as a one-entry list (for a
  // replacement: re-insert it with Admission::kReused). Not remembered.
  List Extract(iterator it) {
    Unlink(it);
    List out;
    out.splice(out.begin(), list_, it);
    return out;
  }

  iterator begin() { return list_.begin(); }
  iterator end() { return list_.end(); }
  const_iterator begin() const { return list_.begin(); }
  const_iterator end() const { return list_.end(); }
  size_t size() const { return list_.size(); }
  bool empty() const { return list_.empty(); }
  // Inserts whose key the ghost list remembered (kReuse), since creation.
  uint64_t ghost_hits() const { return ghost_hits_; }
  size_t ghost_size() const { return ghost_.size(); }

 private:
  void Unlink(iterator it) {
    if (it == reused_begin_) reused_begin_ = std::next(it);
  }

  const HostEvictionPolicy policy_;
  List list_;
  iterator reused_begin_;  // first reused entry, or end()
  GhostList ghost_;
  uint64_t ghost_hits_ = 0;
};

}  // namespace host_internal
}  // namespace kvtier

#endif  // KVTIER_EVICTION_POLICY_H_
