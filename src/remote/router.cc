#include "remote/router.h"

#include <algorithm>

#include "remote/request_buffer.h"
#include "remote/topology.h"

namespace kvtier::remote {
namespace {

constexpr uint64_t kStaleRefreshIntervalMicros = 100'000;
constexpr uint64_t kMasterDownRefreshIntervalMicros = 250'000;

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

Router::Router(RouterOptions options, NodeTable* table, Env* env, RemoteCounters* counters)
    : options_(std::move(options)), table_(table), env_(env), counters_(counters) {
  if (options_.mode == RedisMode::kSingle) {
    single_ = table_->GetOrAdd(options_.seeds.at(0));
  } else {
    for (const NodeAddress& a : options_.seeds) table_->GetOrAdd(a);
  }
}

std::shared_ptr<Node> Router::Peek(uint16_t slot) {
  if (single_) return single_;
  return table_->ForSlot(slot);
}

std::shared_ptr<Node> Router::Route(uint16_t slot) {
  if (single_) return single_;
  std::shared_ptr<Node> n = table_->ForSlot(slot);
  if (n) return n;
  stale_.store(true);
  RefreshIfStale();
  return table_->ForSlot(slot);
}

std::shared_ptr<Node> Router::NodeAt(const NodeAddress& address) {
  return table_->GetOrAdd(address);
}

void Router::OnMoved(uint16_t slot, const NodeAddress& to) {
  if (single_) return;
  table_->SetSlot(slot, to);
  MarkStale();
}

void Router::MarkStale() {
  if (single_ || stale_.exchange(true)) return;
  MutexLock lock(&mu_);
  wake_.Signal();
}

uint64_t Router::DueAt() const {
  const uint64_t last = last_attempt_micros_.load();
  if (last == 0) return 0;
  const uint64_t wait = last_failed_.load()  ? options_.failed_refresh_backoff_micros
                        : master_down_.load() ? kMasterDownRefreshIntervalMicros
                                              : kStaleRefreshIntervalMicros;
  return SaturatingAdd(last, wait);
}

bool Router::DueLocked(uint64_t now) const { return now >= DueAt(); }

void Router::StartRefresher() {
  if (single_ || refresher_.joinable()) return;
  refresher_ = env_->StartThread([this] { RefresherLoop(); });
}

void Router::StopRefresher() {
  if (!refresher_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stop_ = true;
    wake_.Signal();
  }
  refresher_.join();
}

void Router::RefresherLoop() {
  while (true) {
    {
      MutexLock lock(&mu_);
      while (!stop_ && !stale_.load()) wake_.Wait(&lock);
      if (stop_) return;
      const uint64_t now = env_->NowMicros();
      const uint64_t due = DueAt();
      if (now < due) {
        (void)wake_.WaitFor(&lock, due - now);
        continue;
      }
    }
    RefreshIfStale();
  }
}

bool Router::MasterDown() {
  bool complete = true;
  const uint64_t now = env_->NowMicros();
  for (const std::shared_ptr<Node>& n : table_->Owners(&complete)) {
    if (n->breaker.IsOpen(now)) return true;
  }
  return !complete;
}

void Router::RefreshIfStale() {
  if (single_ || !stale_.load()) return;
  if (!DueLocked(env_->NowMicros())) return;
  (void)Refresh();
}

Status Router::Refresh() {
  if (single_) return Status::Ok();
  bool expected = false;
  if (!refreshing_.compare_exchange_strong(expected, true)) return Status::Ok();
  last_attempt_micros_.store(env_->NowMicros());
  stale_.store(false);
  // Known nodes first (they are the live cluster), then the seeds.
  std::vector<std::shared_ptr<Node>> candidates = table_->All();
  Status last = Status::Unavailable("no cluster node known");
  bool auth_refused = false;
  // A bound on the whole reload, however many nodes time out.
  const uint64_t end = SaturatingAdd(
      env_->NowMicros(),
      3 * (options_.connect_timeout_micros + options_.command_timeout_micros));
  for (const std::shared_ptr<Node>& node : candidates) {
    if (env_->NowMicros() >= end) break;
    if (node->breaker.IsOpen(env_->NowMicros())) continue;
    Status s = RefreshFrom(*node);
    if (s.ok()) {
      last_failed_.store(false);
      // A master still down (a failover not done yet): ask again soon.
      const bool down = MasterDown();
      master_down_.store(down);
      refreshing_.store(false);
      if (down) MarkStale();
      return s;
    }
    if (s.IsInvalidArgument()) auth_refused = true;  // credentials refused, or not a cluster
    last = s;
  }
  RemoteCounters::Add(counters_->topology_failures);
  last_failed_.store(true);
  refreshing_.store(false);
  MarkStale();
  if (auth_refused) return last;
  return Status::Unavailable(
      "no cluster node answered CLUSTER SHARDS/SLOTS (last: " + last.message() + ")");
}

Status Router::RefreshFrom(Node& node) {
  const uint64_t now = env_->NowMicros();
  Result<std::unique_ptr<Connection>> conn =
      node.pool.Acquire(now + options_.connect_timeout_micros + options_.command_timeout_micros);
  if (!conn.ok()) {
    if (node.breaker.OnFailure(env_->NowMicros(), conn.status().message())) {
      RemoteCounters::Add(counters_->breaker_opens);
    }
    return conn.status();
  }
  Connection& c = **conn;
  auto ask = [&](std::string_view sub) -> Result<RespValue> {
    c.SetDeadline(env_->NowMicros() + options_.command_timeout_micros);
    RequestBuffer req;
    req.Command({"CLUSTER", sub});
    const std::vector<iovec> iov = req.Iovecs();
    KVTIER_RETURN_IF_ERROR(c.Write(iov));
    return ReadValue(c, ValueLimits{});
  };
  Result<std::vector<SlotRange>> ranges = [&]() -> Result<std::vector<SlotRange>> {
    KVTIER_ASSIGN_OR_RETURN(RespValue shards, ask("SHARDS"));
    if (shards.type != ReplyType::kError) return ParseClusterShards(shards, node.address, options_.tls);
    KVTIER_ASSIGN_OR_RETURN(RespValue slots, ask("SLOTS"));
    if (slots.type == ReplyType::kError) {
      // A definite answer, not an outage: the URL names a server without
      // cluster support.
      return Status::InvalidArgument("redis " + node.address.ToString() +
                                     " is not a cluster node (" + slots.str.substr(0, 200) +
                                     "): use a redis:// URL for one server");
    }
    return ParseClusterSlots(slots, node.address);
  }();
  if (!ranges.ok()) {
    if (ranges.status().IsCorruption()) RemoteCounters::Add(counters_->protocol_errors);
    c.MarkBroken();
  }
  const bool healthy = c.healthy();
  node.pool.Release(std::move(conn).value());
  if (!healthy) {
    if (node.breaker.OnFailure(env_->NowMicros(), ranges.status().message())) {
      RemoteCounters::Add(counters_->breaker_opens);
    }
    return ranges.status();
  }
  node.breaker.OnSuccess();
  if (!ranges.ok()) return ranges.status();
  if (ranges->empty()) {
    return Status::Unavailable("redis " + node.address.ToString() + " serves no slot yet");
  }
  const uint32_t moved = table_->SetSlots(*ranges);
  RemoteCounters::Add(counters_->topology_refreshes);
  if (moved > 0) counters_->events.SlotMapChanged(node.address.ToString(), moved);
  return Status::Ok();
}

}  // namespace kvtier::remote
