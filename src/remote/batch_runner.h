// BatchRunner: runs one kind of per-key request for many keys, pipelined
// per node, following Cluster redirects.
//
// Run() groups the keys by the node that serves their slot (or the node an
// ASK named), and per node: asks the node's circuit breaker, takes a
// connection, and pipelines the requests through a sliding window: more
// requests are written (several per writev) while the replies on the wire
// stay within pipeline_max_bytes, two always in flight, and the replies are
// read in order through the OpHandler. A long pipeline of large replies
// would only pile up in the server's memory; small ones (EXISTS) all go in
// one round trip. Each reply has its own deadline: command_timeout plus
// 10 ms per MiB it carries. MOVED updates the slot map and retries on the
// new owner, ASK retries once on the named node behind ASKING, TRYAGAIN /
// LOADING retry after a short backoff (10, 20, 40, 80, 160 ms); a key is
// given up after 5 of these (kRedirectLimit), and at once when a node
// redirects it to that node itself, or MOVEDs it back to the node whose
// MOVED sent it there (two nodes redirecting to each other: the second is
// failing). CLUSTERDOWN (a failover under way) fails the key at once, a
// miss, and marks the slot map stale: the node that says so is healthy, and
// its breaker is not touched.
//
// The whole call has one deadline (CallDeadlineFor: what one round trip
// of all its bytes may take, a connect included): no backoff sleeps past
// it, no reply is waited for past it, and the keys still open then fail
// (kUnavailable). A server trickling valid replies or answering LOADING
// for ever costs one call's timeout, not one per key.
//
// A reply whose bytes trickle in slower than min_reply_rate (after a grace
// from its first byte) fails like a timeout: a node that answers far
// slower than any healthy Redis must reach its breaker, not cost each call
// its whole deadline (each such call would otherwise succeed, late, and
// close the breaker again).
//
// Any failure of a connection (connect, timeout, slow reply, I/O, protocol error)
// fails every key of that node not answered yet (kUnavailable), drops the
// connection, marks a Cluster's slot map stale (a failover may be under way)
// and counts against the node's breaker, naming its cause; so does a round trip
// answered with a retry or a redirect to the node itself (the node is up
// but cannot serve), and so does each bad value the caller reports
// (ReportBadValue). A clean round trip closes it. The handler's reply reader must consume exactly the replies of
// the requests it appended, or return an error.
//
// Thread safety: Run() may be called from many threads at once (each call
// works on its own ops and handler).
#ifndef KVTIER_REMOTE_BATCH_RUNNER_H_
#define KVTIER_REMOTE_BATCH_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/status.h"
#include "remote/connection.h"
#include "remote/counters.h"
#include "remote/request_buffer.h"
#include "remote/resp_reader.h"
#include "remote/router.h"

namespace kvtier::remote {

// Redirects and retries a key may take before it is given up (DESIGN.md §7).
inline constexpr uint32_t kMaxRedirects = 5;

// One key's request in a batch.
struct KeyOp {
  size_t index = 0;  // the caller's position for it
  BlockKey key;
  uint16_t slot = 0;
  uint32_t attempts = 0;           // redirects and retries so far
  std::optional<NodeAddress> ask;  // the next attempt goes here, behind ASKING
  bool retry_later = false;        // the last reply asked for a backoff
  // The node whose MOVED sent the key where it is asked now.
  std::optional<NodeAddress> moved_from;
};

// What a reply says about its key.
struct OpOutcome {
  enum class Kind : uint8_t {
    kDone,   // answered (whatever the answer was)
    kMoved,  // ask `to` (and remember it owns `slot`)
    kAsk,    // ask `to` once, behind ASKING
    kRetry,        // ask the same node again after a backoff
    kClusterDown,  // the cluster cannot serve the slot now: a miss, map stale
  };
  Kind kind = Kind::kDone;
  uint16_t slot = 0;
  NodeAddress to;
};

// The redirect or retry an error reply asks for, if it is one.
std::optional<OpOutcome> RedirectFor(const ServerError& e);

enum class OpFailure : uint8_t {
  kUnavailable,    // the node is down, timed out, broke the protocol, or its breaker is open
  kRedirectLimit,  // more than kMaxRedirects redirects and retries
  kClosed,         // the tier is closing
};

// One kind of request (EXISTS, GET, SET, DEL) for one key.
class OpHandler {
 public:
  virtual ~OpHandler() = default;
  // Appends the request(s) for `op`.
  virtual void AppendRequest(const KeyOp& op, RequestBuffer* out) = 0;
  // Bytes the request and its reply usually carry (the pipeline window,
  // deadlines).
  virtual uint64_t TransferBytes(const KeyOp& op) = 0;
  // Reads exactly the replies of AppendRequest(op). An error means the
  // connection can no longer be trusted.
  virtual Result<OpOutcome> ReadReply(const KeyOp& op, Connection* conn) = 0;
  // `op` ends without an answer.
  virtual void Fail(const KeyOp& op, OpFailure why) = 0;
};

struct RunnerOptions {
  uint64_t connect_timeout_micros = 500'000;
  uint64_t command_timeout_micros = 2'000'000;
  uint64_t pipeline_max_bytes = uint64_t{8} << 20;
  // Each reply's bytes must keep arriving at this many bytes per second on
  // average, once reply_rate_grace_micros have passed since its first byte
  // (Connection::WatchReplyRate); 0 = off.
  uint64_t min_reply_rate = uint64_t{1} << 20;
  uint64_t reply_rate_grace_micros = 100'000;
};

class BatchRunner {
 public:
  // REQUIRES: router, env and counters outlive the runner.
  BatchRunner(const RunnerOptions& options, Router* router, Env* env, RemoteCounters* counters);

  // Runs `handler` for every op; each op ends in ReadReply() returning
  // kDone or in Fail(). `deadline_cap` (Env microseconds) ends the call
  // earlier than its own deadline, connects included: a lookup's budget.
  void Run(std::span<KeyOp> ops, OpHandler& handler, uint64_t deadline_cap = UINT64_MAX);

  // The deadline of a round trip carrying `bytes`, starting now.
  uint64_t DeadlineFor(uint64_t bytes) const;
  // The deadline of a whole Run() carrying `bytes`, starting now: the same
  // as one round trip's, DeadlineFor(bytes), any connect included.
  uint64_t CallDeadlineFor(uint64_t bytes) const;

  // A value the node serving `slot` returned failed verification: counts
  // toward that node's breaker, so that a node serving garbage is given up
  // like a node that is down.
  void ReportBadValue(uint16_t slot);

 private:
  // Runs `ops` on `node`, none past `call_deadline`; appends the ops to try
  // again to `again`.
  void RunOnNode(Node& node, std::span<KeyOp* const> ops, uint64_t call_deadline,
                 OpHandler& handler, std::vector<KeyOp*>* again);

  const RunnerOptions options_;
  Router* const router_;
  Env* const env_;
  RemoteCounters* const counters_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_BATCH_RUNNER_H_
