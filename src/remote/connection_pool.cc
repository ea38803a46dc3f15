#include "remote/connection_pool.h"

#include <algorithm>

namespace kvtier::remote {

ConnectionPool::ConnectionPool(ConnectionParams params, uint32_t max_connections, Env* env,
                               RemoteCounters* counters)
    : params_(std::move(params)),
      max_connections_(max_connections),
      env_(env),
      counters_(counters) {}

ConnectionPool::~ConnectionPool() { Close(); }

Result<std::unique_ptr<Connection>> ConnectionPool::Acquire(uint64_t deadline_micros) {
  {
    MutexLock lock(&mu_);
    while (true) {
      if (closed_) return Status::FailedPrecondition("remote tier closed");
      if (!idle_.empty()) {
        std::unique_ptr<Connection> c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
      if (open_ < max_connections_) {
        ++open_;
        break;
      }
      const uint64_t now = env_->NowMicros();
      if (now >= deadline_micros) {
        return Status::ResourceExhausted("every connection to " + params_.address.ToString() +
                                         " stayed busy");
      }
      cv_.WaitFor(&lock, deadline_micros - now);
    }
  }
  // The connect (and its handshake) ends by the caller's deadline too: a
  // lookup's budget is far shorter than connect_timeout_ms, and a paused
  // server accepts TCP connects but never answers the handshake.
  ConnectionParams params = params_;
  const uint64_t now = env_->NowMicros();
  const uint64_t left_ms = deadline_micros > now ? (deadline_micros - now + 999) / 1000 : 0;
  if (left_ms < params.connect_timeout_ms) {
    params.connect_timeout_ms = static_cast<uint32_t>(std::max<uint64_t>(left_ms, 1));
  }
  Result<std::unique_ptr<Connection>> c = Connection::Open(params, env_, counters_);
  if (!c.ok()) {
    MutexLock lock(&mu_);
    --open_;
    cv_.Signal();
  }
  return c;
}

void ConnectionPool::Release(std::unique_ptr<Connection> conn) {
  if (conn == nullptr) return;
  std::vector<std::unique_ptr<Connection>> to_close;
  {
    MutexLock lock(&mu_);
    if (conn->healthy() && !closed_) {
      idle_.push_back(std::move(conn));
    } else {
      to_close.push_back(std::move(conn));
      if (!closed_) {
        for (auto& c : idle_) to_close.push_back(std::move(c));
        idle_.clear();
      }
    }
    open_ -= static_cast<uint32_t>(to_close.size());
    cv_.SignalAll();
  }
  to_close.clear();  // closes the sockets outside the lock
}

void ConnectionPool::Close() {
  std::vector<std::unique_ptr<Connection>> to_close;
  {
    MutexLock lock(&mu_);
    closed_ = true;
    to_close.swap(idle_);
    open_ -= static_cast<uint32_t>(to_close.size());
    cv_.SignalAll();
  }
}

uint64_t ConnectionPool::open_connections() {
  MutexLock lock(&mu_);
  return open_;
}

}  // namespace kvtier::remote
