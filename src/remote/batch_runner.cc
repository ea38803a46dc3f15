#include "remote/batch_runner.h"

#include <algorithm>
#include <unordered_map>

namespace kvtier::remote {
namespace {

using C = RemoteCounters;

}  // namespace

std::optional<OpOutcome> RedirectFor(const ServerError& e) {
  OpOutcome o;
  switch (e.kind) {
    case ServerErrorKind::kMoved:
      o.kind = OpOutcome::Kind::kMoved;
      break;
    case ServerErrorKind::kAsk:
      o.kind = OpOutcome::Kind::kAsk;
      break;
    case ServerErrorKind::kTryAgain:
    case ServerErrorKind::kLoading:
      o.kind = OpOutcome::Kind::kRetry;
      return o;
    case ServerErrorKind::kClusterDown:
      o.kind = OpOutcome::Kind::kClusterDown;
      return o;
    default:
      return std::nullopt;
  }
  if (!e.to) return std::nullopt;
  o.slot = e.slot;
  o.to = *e.to;
  return o;
}

BatchRunner::BatchRunner(const RunnerOptions& options, Router* router, Env* env,
                         RemoteCounters* counters)
    : options_(options), router_(router), env_(env), counters_(counters) {}

namespace {

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// 10 ms per MiB: a round trip moving data at 100 MiB/s or faster never
// times out for its size alone.
uint64_t SizeAllowance(uint64_t bytes) {
  const uint64_t mib = bytes >> 20;
  return mib > UINT64_MAX / 10'000 ? UINT64_MAX : mib * 10'000;
}

}  // namespace

uint64_t BatchRunner::DeadlineFor(uint64_t bytes) const {
  return SaturatingAdd(SaturatingAdd(env_->NowMicros(), options_.command_timeout_micros),
                       SizeAllowance(bytes));
}

uint64_t BatchRunner::CallDeadlineFor(uint64_t bytes) const {
  // The connect is inside it: a call that had to connect first has that
  // much less time for its round trips.
  return DeadlineFor(bytes);
}

void BatchRunner::ReportBadValue(uint16_t slot) {
  std::shared_ptr<Node> node = router_->Peek(slot);
  if (node && node->breaker.OnFailure(env_->NowMicros(), "a value that failed verification")) {
    C::Add(counters_->breaker_opens);
  }
}

void BatchRunner::Run(std::span<KeyOp> ops, OpHandler& handler, uint64_t deadline_cap) {
  std::vector<KeyOp*> pending;
  pending.reserve(ops.size());
  uint64_t bytes = 0;
  for (KeyOp& op : ops) {
    pending.push_back(&op);
    bytes = SaturatingAdd(bytes, handler.TransferBytes(op));
  }
  // The whole call — connects, every round trip, retries and their
  // backoffs — ends by this deadline: a server that trickles valid replies,
  // or answers LOADING for ever, costs one call's timeout, not one per key.
  const uint64_t deadline = std::min(CallDeadlineFor(bytes), deadline_cap);
  auto fail_pending = [&] {
    C::Add(counters_->timeouts);
    for (KeyOp* op : pending) handler.Fail(*op, OpFailure::kUnavailable);
  };
  for (uint32_t round = 0; !pending.empty(); ++round) {
    // A stale slot map is reloaded by the router's own thread, off this
    // path; a MOVED has already updated its slot.
    if (round > 0 && env_->NowMicros() >= deadline) return fail_pending();
    // Group by node, keeping the caller's order within a node and running
    // the nodes in the order their first key comes (not by address: the
    // same call reads the same way every time).
    std::vector<std::pair<std::shared_ptr<Node>, std::vector<KeyOp*>>> groups;
    std::unordered_map<Node*, size_t> group_of;
    for (KeyOp* op : pending) {
      std::shared_ptr<Node> node = op->ask ? router_->NodeAt(*op->ask) : router_->Route(op->slot);
      if (!node) {
        handler.Fail(*op, OpFailure::kUnavailable);
        continue;
      }
      auto [it, added] = group_of.try_emplace(node.get(), groups.size());
      if (added) groups.emplace_back(std::move(node), std::vector<KeyOp*>());
      groups[it->second].second.push_back(op);
    }
    std::vector<KeyOp*> again;
    for (auto& [node, group] : groups) {
      RunOnNode(*node, group, deadline, handler, &again);
    }
    pending.clear();
    bool backoff = false;
    for (KeyOp* op : again) {
      if (op->attempts > kMaxRedirects) {
        C::Add(counters_->redirect_limit);
        handler.Fail(*op, OpFailure::kRedirectLimit);
        continue;
      }
      backoff |= op->retry_later;  // MOVED and ASK go straight to the new node
      op->retry_later = false;
      pending.push_back(op);
    }
    if (backoff && !pending.empty()) {
      const uint64_t pause = uint64_t{10'000} << std::min<uint32_t>(round, 4);
      const uint64_t now = env_->NowMicros();
      if (now >= deadline || deadline - now <= pause) return fail_pending();
      env_->SleepForMicros(pause);
    }
  }
}

void BatchRunner::RunOnNode(Node& node, std::span<KeyOp* const> ops, uint64_t call_deadline,
                            OpHandler& handler, std::vector<KeyOp*>* again) {
  auto fail_from = [&](size_t i, OpFailure why) {
    for (; i < ops.size(); ++i) handler.Fail(*ops[i], why);
  };
  const CircuitBreaker::Admit admit = node.breaker.Allow(env_->NowMicros());
  if (admit == CircuitBreaker::Admit::kNo) {
    C::Add(counters_->breaker_rejections);
    fail_from(0, OpFailure::kUnavailable);
    return;
  }
  Result<std::unique_ptr<Connection>> acquired = node.pool.Acquire(std::min(
      call_deadline, SaturatingAdd(env_->NowMicros(), options_.connect_timeout_micros +
                                                          options_.command_timeout_micros)));
  if (!acquired.ok()) {
    const Status& s = acquired.status();
    if (s.code() == StatusCode::kFailedPrecondition) {
      fail_from(0, OpFailure::kClosed);
      return;
    }
    if (s.IsResourceExhausted()) {
      C::Add(counters_->timeouts);  // every connection stayed busy
    } else {
      router_->MarkStale();  // down: a failover may be under way
    }
    if (node.breaker.OnFailure(env_->NowMicros(), s.message())) C::Add(counters_->breaker_opens);
    fail_from(0, OpFailure::kUnavailable);
    return;
  }
  std::unique_ptr<Connection> conn = std::move(acquired).value();
  // A sliding window: requests [i, sent) are on the wire, their replies not
  // read yet. More are sent while the replies they announce stay within
  // pipeline_max_bytes (two are always in flight, so the server always has
  // the next one), so that the server never builds a long queue of large
  // replies in its own memory while this side is still reading the first.
  RequestBuffer req;
  size_t i = 0, sent = 0;
  uint64_t in_flight = 0;
  // A TRYAGAIN / LOADING answer or a redirect to itself (or back): the
  // node is up but cannot serve, which counts toward its breaker like a
  // failed round trip (a Redis loading a large RDB answers LOADING for
  // minutes).
  std::string misbehaved;  // what it did, for the breaker's cause; "" = nothing
  Status s;
  while (s.ok() && i < ops.size()) {
    req.Clear();
    while (sent < ops.size() && (sent - i < 2 || in_flight + handler.TransferBytes(*ops[sent]) <=
                                                     options_.pipeline_max_bytes)) {
      in_flight += handler.TransferBytes(*ops[sent]);
      if (ops[sent]->ask) req.Command({"ASKING"});
      handler.AppendRequest(*ops[sent], &req);
      ++sent;
    }
    if (!req.empty()) {
      conn->SetDeadline(std::min(call_deadline, DeadlineFor(req.bytes())));
      const std::vector<iovec> iov = req.Iovecs();
      s = conn->Write(iov);
      if (!s.ok()) break;
    }
    // Each reply has its own deadline: a stalled server is noticed within
    // command_timeout however long the batch.
    KeyOp& op = *ops[i];
    const uint64_t op_bytes = handler.TransferBytes(op);
    conn->SetDeadline(std::min(call_deadline, DeadlineFor(op_bytes)));
    conn->WatchReplyRate(options_.min_reply_rate, options_.reply_rate_grace_micros);
    if (op.ask) {
      Result<ReplyHead> h = ReadReplyHead(*conn, ReplyLimits{0, 0});
      if (!h.ok()) {
        s = h.status();
        break;
      }
      if (h->type != ReplyType::kStatus) {
        s = Status::Corruption("protocol error: ASKING was not answered +OK");
        break;
      }
      op.ask.reset();
    }
    Result<OpOutcome> r = handler.ReadReply(op, conn.get());
    if (!r.ok()) {
      s = r.status();
      break;
    }
    ++i;
    in_flight -= op_bytes;
    OpOutcome o = std::move(r).value();
    if (o.kind == OpOutcome::Kind::kDone) continue;
    if (o.kind == OpOutcome::Kind::kClusterDown) {
      // The cluster, not this node, cannot serve the slot (its master is
      // failing over): a miss now, and a slot map to reload.
      router_->MarkStale();
      handler.Fail(op, OpFailure::kUnavailable);
      continue;
    }
    if (o.to.host.empty()) o.to.host = node.address.host;  // "MOVED 12 :6380"
    if (o.kind != OpOutcome::Kind::kRetry && o.to == node.address) {
      // A node that redirects a key to itself would be asked again for
      // ever: the key ends here, and the node is failing.
      C::Add(counters_->protocol_errors);
      misbehaved = "redirected a key to itself";
      handler.Fail(op, OpFailure::kRedirectLimit);
      continue;
    }
    ++op.attempts;
    if (o.kind == OpOutcome::Kind::kMoved) {
      C::Add(counters_->moved);
      router_->OnMoved(o.slot, o.to);
      if (op.moved_from && *op.moved_from == o.to) {
        // Sent back to the node that sent it here: two nodes redirecting to
        // each other. This one (the second) is failing: the key ends, and
        // only this node's breaker hears of it, so that one breaker opens.
        C::Add(counters_->protocol_errors);
        misbehaved = "MOVED slot " + std::to_string(o.slot) + " back to " + o.to.ToString() +
                     ", which had MOVED it here";
        handler.Fail(op, OpFailure::kRedirectLimit);
        continue;
      }
      op.moved_from = node.address;
    } else if (o.kind == OpOutcome::Kind::kAsk) {
      C::Add(counters_->asked);
      op.ask = o.to;
    } else {
      C::Add(counters_->retries);
      op.retry_later = true;
      misbehaved = "answered TRYAGAIN or LOADING";
    }
    again->push_back(&op);
  }
  if (!s.ok()) {
    if (s.IsCorruption()) C::Add(counters_->protocol_errors);
    conn->MarkBroken();
  }
  const bool healthy = conn->healthy();
  const bool slow = conn->slow_reply();
  node.pool.Release(std::move(conn));
  if (healthy && misbehaved.empty()) {
    node.breaker.OnSuccess();
  } else if (healthy) {
    if (node.breaker.OnFailure(env_->NowMicros(), misbehaved)) C::Add(counters_->breaker_opens);
  } else {
    router_->MarkStale();  // down: a failover may be under way
    // A slow reply counts in the breaker's slow window too: the node's
    // quick answers to small requests in between must not hide it.
    const uint64_t now = env_->NowMicros();
    const std::string cause = s.ok() ? "connection broken" : s.message();
    if (slow ? node.breaker.OnSlowFailure(now, cause) : node.breaker.OnFailure(now, cause)) {
      C::Add(counters_->breaker_opens);
    }
    fail_from(i, OpFailure::kUnavailable);
  }
}

}  // namespace kvtier::remote
