// ConnectionPool: the connections of one node, reused across calls.
//
// Acquire() hands out an idle connection, or opens a new one (outside the
// lock) while fewer than `max_connections` exist, or waits for one to come
// back. Release() takes it back; a broken connection is closed, and so is
// every idle one, since whatever broke one (a restarted, killed or paused
// server) has most likely broken the others too: the next call connects
// afresh instead of failing on a stale socket.
//
// Thread safety: all methods are safe from any thread (one mutex, mu_).
// Sockets are opened and closed outside the lock.
#ifndef KVTIER_REMOTE_CONNECTION_POOL_H_
#define KVTIER_REMOTE_CONNECTION_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/env.h"
#include "kvtier/status.h"
#include "remote/connection.h"
#include "remote/counters.h"

namespace kvtier::remote {

class ConnectionPool {
 public:
  ConnectionPool(ConnectionParams params, uint32_t max_connections, Env* env,
                 RemoteCounters* counters);
  ~ConnectionPool();

  // A connection ready for use, waiting until `deadline_micros` for one to
  // be free; a new connection's connect and handshake end by then too
  // (within connect_timeout_ms whichever is sooner). Errors: Connection::Open's (a failed connect); ResourceExhausted
  // if every connection stayed busy until the deadline; FailedPrecondition
  // after Close().
  Result<std::unique_ptr<Connection>> Acquire(uint64_t deadline_micros);
  // Takes back a connection from Acquire(); closes it if !healthy() (and
  // then the idle ones too).
  void Release(std::unique_ptr<Connection> conn);
  // Closes the idle connections and refuses new Acquire() calls;
  // connections in use are closed when released.
  void Close();

  // Connections open now (idle and in use).
  uint64_t open_connections();
  const NodeAddress& address() const { return params_.address; }

 private:
  const ConnectionParams params_;
  const uint32_t max_connections_;
  Env* const env_;
  RemoteCounters* const counters_;

  Mutex mu_;
  CondVar cv_;  // a connection came back or a slot freed
  std::vector<std::unique_ptr<Connection>> idle_ GUARDED_BY(mu_);
  uint32_t open_ GUARDED_BY(mu_) = 0;  // idle + in use + being opened
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_CONNECTION_POOL_H_
