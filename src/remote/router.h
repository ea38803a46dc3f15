// Router: which node serves a key, for one server or a Redis Cluster.
//
// One server: always its node. Cluster: the slot map in the NodeTable,
// loaded from CLUSTER SHARDS (CLUSTER SLOTS when the server does not know
// SHARDS) of the first node that answers — known nodes first, then the
// URL's seeds. A MOVED reply updates one slot at once and marks the map
// stale; so do a node that fails (MarkStale(): a failed connect or round
// trip, a breaker that opens) and CLUSTERDOWN. A stale map is reloaded by
// the router's own thread (StartRefresher()), off the request path: at
// most once per 100 ms after a MOVED, once per 250 ms while a slot's
// master is down (its breaker open, or no master known: a failover under
// way, so that its replica's promotion is seen within 250 ms plus one
// CLUSTER SHARDS round trip), and once per breaker open time after a
// reload that found no answering node. A reload asks the known nodes whose
// breakers are not open, in address order, and ends after
// 3 x (connect + command timeout) whatever it found. Only one thread
// reloads at a time while the others go on with the map they have.
//
// Thread safety: all methods are safe from any thread. The refresh does
// its I/O without any lock (atomics only); mu_ guards only the refresher's
// sleep and wake-up.
#ifndef KVTIER_REMOTE_ROUTER_H_
#define KVTIER_REMOTE_ROUTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/env.h"
#include "kvtier/redis_url.h"
#include "kvtier/status.h"
#include "remote/counters.h"
#include "remote/node_table.h"

namespace kvtier::remote {

struct RouterOptions {
  RedisMode mode = RedisMode::kSingle;
  std::vector<NodeAddress> seeds;  // the URL's nodes
  bool tls = false;                // rediss-cluster://: nodes' TLS ports
  uint64_t command_timeout_micros = 2'000'000;
  uint64_t connect_timeout_micros = 500'000;
  uint64_t failed_refresh_backoff_micros = 1'000'000;
};

class Router {
 public:
  // REQUIRES: table, env and counters outlive the router.
  Router(RouterOptions options, NodeTable* table, Env* env, RemoteCounters* counters);
  ~Router() { StopRefresher(); }

  // Cluster: starts the thread that reloads a stale slot map. One server:
  // nothing. StopRefresher() joins it (also from the destructor).
  void StartRefresher();
  void StopRefresher();

  RedisMode mode() const { return options_.mode; }

  // The node serving `slot` as far as known, without I/O; nullptr if unknown.
  std::shared_ptr<Node> Peek(uint16_t slot);
  // The node serving `slot`; loads the slot map first when the slot is
  // unknown (Cluster). nullptr if still unknown.
  std::shared_ptr<Node> Route(uint16_t slot);
  // The node at `address` (an ASK or MOVED target).
  std::shared_ptr<Node> NodeAt(const NodeAddress& address);

  // Records a MOVED redirect and marks the slot map stale.
  void OnMoved(uint16_t slot, const NodeAddress& to);
  // Marks the slot map stale (a node failed, or CLUSTERDOWN) and wakes the
  // refresher. Cheap when it is stale already.
  void MarkStale();
  // Reloads the slot map if a MOVED marked it stale (rate-limited).
  void RefreshIfStale();
  // Loads the slot map now. InvalidArgument if a node refused our
  // credentials; Unavailable if no node answered. A concurrent Refresh()
  // makes this one return OK at once.
  Status Refresh();

 private:
  Status RefreshFrom(Node& node);
  bool DueLocked(uint64_t now) const;
  uint64_t DueAt() const;
  // True if some slot has no master, or a master whose breaker is open.
  bool MasterDown();
  void RefresherLoop();

  const RouterOptions options_;
  NodeTable* const table_;
  Env* const env_;
  RemoteCounters* const counters_;
  std::shared_ptr<Node> single_;  // kSingle: the node
  std::atomic<bool> stale_{true};
  std::atomic<bool> refreshing_{false};
  std::atomic<bool> last_failed_{false};
  std::atomic<uint64_t> last_attempt_micros_{0};
  std::atomic<bool> master_down_{false};  // the last reload found one
  Mutex mu_;
  CondVar wake_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread refresher_;  // StartRefresher() to StopRefresher()
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_ROUTER_H_
