#include "replay/simulator.h"

#include <algorithm>
#include <cassert>
#include <queue>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace kvtier::replay {

using host_internal::Admission;
using host_internal::Removal;

Status SimOptions::Validate() const {
  if (ram_blocks == 0) {
    return Status::InvalidArgument("SimOptions.ram_blocks must be > 0 (at least 512 RAM tokens)");
  }
  if (ram_blocks > kMaxReplayBlocks || disk_blocks > kMaxReplayBlocks) {
    return Status::InvalidArgument(std::string("SimOptions.") +
                                   (ram_blocks > kMaxReplayBlocks ? "ram_blocks" : "disk_blocks") +
                                   " must be <= " + std::to_string(kMaxReplayBlocks));
  }
  if (policy != HostEvictionPolicy::kLru && policy != HostEvictionPolicy::kReuse) {
    return Status::InvalidArgument("SimOptions.policy is not a known eviction policy");
  }
  return Status::Ok();
}

uint64_t BlockHitTokens(const TraceRequest& r, uint64_t index) {
  const uint64_t start = kTraceBlockTokens * index;
  if (r.input_length <= start) return 0;
  return std::min(kTraceBlockTokens, r.input_length - start);
}

TierSimulator::TierSimulator(const SimOptions& options)
    : options_(options), ram_(options.policy), disk_(HostEvictionPolicy::kLru) {
  assert(options.Validate().ok());
}

void TierSimulator::Replay(const TraceRequest& request) {
  ReplayCounts& c = counts_;
  ++c.requests;
  c.input_tokens += request.input_length;
  c.blocks += request.hash_ids.size();
  // The match, as found on arrival.
  for (uint64_t i = 0; i < request.hash_ids.size(); ++i) {
    auto found = where_.find(request.hash_ids[i]);
    if (found == where_.end()) break;
    const uint64_t tokens = BlockHitTokens(request, i);
    c.hit_tokens += tokens;
    (found->second.on_disk ? c.hit_tokens_disk : c.hit_tokens_ram) += tokens;
  }
  for (uint64_t id : request.hash_ids) {
    auto found = where_.find(id);
    if (found == where_.end()) {
      ++c.inserts;
      InsertRam(id, Admission::kNew);
    } else if (!found->second.on_disk) {
      ++c.ram_hits;
      ram_.Touch(found->second.it);
    } else {
      ++c.disk_hits;
      disk_.Remove(found->second.it, id, Removal::kErased);
      where_.erase(found);
      InsertRam(id, Admission::kReused);
    }
  }
  c.ghost_hits = ram_.ghost_hits();
}

void TierSimulator::InsertRam(uint64_t id, Admission admission) {
  if (ram_.size() >= options_.ram_blocks) {
    auto victim = ram_.begin();
    const uint64_t vid = victim->id;
    ram_.Remove(victim, vid, Removal::kEvicted);
    ++counts_.ram_evictions;
    if (options_.disk_blocks == 0) {
      where_.erase(vid);
    } else {
      if (disk_.size() >= options_.disk_blocks) {
        auto dv = disk_.begin();
        const uint64_t did = dv->id;
        disk_.Remove(dv, did, Removal::kEvicted);
        where_.erase(did);
        ++counts_.disk_evictions;
      }
      where_[vid] = Where{true, disk_.Insert(Block{vid}, vid, Admission::kNew)};
    }
  }
  where_[id] = Where{false, ram_.Insert(Block{id}, id, admission)};
}

namespace {

uint64_t MatchTokens(const TraceRequest& r, const auto& present) {
  uint64_t tokens = 0;
  for (uint64_t i = 0; i < r.hash_ids.size(); ++i) {
    if (!present(r.hash_ids[i])) break;
    tokens += BlockHitTokens(r, i);
  }
  return tokens;
}

}  // namespace

uint64_t MaxHitTokens(std::span<const TraceRequest> trace) {
  std::unordered_set<uint64_t> seen;
  uint64_t hits = 0;
  for (const TraceRequest& r : trace) {
    hits += MatchTokens(r, [&](uint64_t id) { return seen.count(id) != 0; });
    seen.insert(r.hash_ids.begin(), r.hash_ids.end());
  }
  return hits;
}

uint64_t BeladyHitTokens(std::span<const TraceRequest> trace, uint64_t capacity_blocks) {
  assert(capacity_blocks > 0);
  constexpr uint64_t kNever = UINT64_MAX;
  // next_use[p]: the position of the next access to the block accessed at
  // position p (positions number every block access in trace order).
  uint64_t accesses = 0;
  for (const TraceRequest& r : trace) accesses += r.hash_ids.size();
  // A cache that holds every access never evicts; the bound keeps the heap
  // arithmetic below exact for any capacity.
  capacity_blocks = std::min(capacity_blocks, accesses + 1);
  std::vector<uint64_t> next_use(accesses);
  {
    std::unordered_map<uint64_t, uint64_t> later;
    uint64_t p = accesses;
    for (auto r = trace.rbegin(); r != trace.rend(); ++r) {
      for (auto id = r->hash_ids.rbegin(); id != r->hash_ids.rend(); ++id) {
        --p;
        auto [it, fresh] = later.try_emplace(*id, p);
        next_use[p] = fresh ? kNever : it->second;
        it->second = p;
      }
    }
  }
  // Cached blocks with their next use; a max-heap of (next use, id) with
  // stale entries skipped on pop.
  std::unordered_map<uint64_t, uint64_t> cached;
  std::priority_queue<std::pair<uint64_t, uint64_t>> heap;
  uint64_t hits = 0;
  uint64_t p = 0;
  for (const TraceRequest& r : trace) {
    hits += MatchTokens(r, [&](uint64_t id) { return cached.count(id) != 0; });
    for (uint64_t id : r.hash_ids) {
      const uint64_t next = next_use[p++];
      auto found = cached.find(id);
      if (found == cached.end()) {
        if (cached.size() >= capacity_blocks) {
          while (true) {
            auto [use, victim] = heap.top();
            heap.pop();
            auto v = cached.find(victim);
            if (v != cached.end() && v->second == use) {
              cached.erase(v);
              break;
            }
          }
        }
        found = cached.emplace(id, next).first;
      }
      found->second = next;
      heap.emplace(next, id);
      // Stale heap entries are bounded by rebuilding when they dominate.
      if (heap.size() > 4 * capacity_blocks + 1024) {
        std::priority_queue<std::pair<uint64_t, uint64_t>> fresh;
        for (const auto& [cid, use] : cached) fresh.emplace(use, cid);
        heap.swap(fresh);
      }
    }
  }
  return hits;
}

}  // namespace kvtier::replay
