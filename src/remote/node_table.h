// Node and NodeTable: the servers a RemoteTier talks to, and (Cluster) which
// of them owns each of the 16384 slots.
//
// A Node is one server: its connection pool and its circuit breaker. Nodes
// are created on first sight (URL seeds, topology replies, MOVED/ASK
// targets) and kept until the tier closes, so a shared_ptr<Node> handed out
// stays valid while the slot map changes under it.
//
// Thread safety: NodeTable's methods are safe from any thread (one mutex,
// mu_, never held during I/O: nodes connect lazily, in Acquire()).
#ifndef KVTIER_REMOTE_NODE_TABLE_H_
#define KVTIER_REMOTE_NODE_TABLE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/redis_url.h"
#include "remote/circuit_breaker.h"
#include "remote/connection_pool.h"
#include "remote/key_slot.h"

namespace kvtier::remote {

struct Node {
  Node(ConnectionParams params, uint32_t max_connections, const BreakerOptions& breaker_options,
       Env* env, RemoteCounters* counters)
      : address(params.address),
        breaker(breaker_options),
        pool(std::move(params), max_connections, env, counters) {}

  const NodeAddress address;
  CircuitBreaker breaker;
  ConnectionPool pool;
};

// Slots [first, last] served by `master`.
struct SlotRange {
  uint16_t first = 0;
  uint16_t last = 0;
  NodeAddress master;
};

class NodeTable {
 public:
  using NodeFactory = std::function<std::shared_ptr<Node>(const NodeAddress&)>;
  explicit NodeTable(NodeFactory factory);

  // Nodes a table holds at most; addresses past that are ignored.
  static constexpr size_t kMaxNodes = 1024;

  // The node at `address`, created if new; nullptr past kMaxNodes.
  std::shared_ptr<Node> GetOrAdd(const NodeAddress& address);
  // The owner of `slot`, or nullptr if unknown.
  std::shared_ptr<Node> ForSlot(uint16_t slot);
  // Records one slot's owner (after a MOVED).
  void SetSlot(uint16_t slot, const NodeAddress& owner);
  // Replaces the whole slot map: slots outside `ranges` become unknown.
  // Returns how many slots that had a master now have another one.
  uint32_t SetSlots(const std::vector<SlotRange>& ranges);
  // The nodes that own a slot, each once; `*complete`: every slot has one.
  std::vector<std::shared_ptr<Node>> Owners(bool* complete);
  // True if every slot has an owner.
  bool Complete();
  // Every node known, in address order.
  std::vector<std::shared_ptr<Node>> All();

 private:
  static constexpr uint16_t kNoNode = 0xffff;
  uint16_t IndexLocked(const NodeAddress& address) REQUIRES(mu_);

  const NodeFactory factory_;
  Mutex mu_;
  std::vector<std::shared_ptr<Node>> nodes_ GUARDED_BY(mu_);
  std::map<NodeAddress, uint16_t> by_address_ GUARDED_BY(mu_);
  std::array<uint16_t, kClusterSlots> slots_ GUARDED_BY(mu_);
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_NODE_TABLE_H_
