// Connection: one TCP connection to one Redis server, with deadlines.
//
// Open() connects through hiredis (redisConnectWithTimeout: name
// resolution, non-blocking connect bounded by the connect timeout,
// TCP_NODELAY, keep-alive), takes the socket over (redisFreeKeepFd) and
// runs the handshake — AUTH, SELECT, PING, pipelined in one round trip —
// before anyone uses it. From then on all I/O is kvtier's own on a
// non-blocking socket: every read and write waits with poll() until the
// deadline set by SetDeadline(), sends use MSG_NOSIGNAL (a closed peer is an
// error, not a SIGPIPE), and ReadExact() copies what is already buffered
// and then receives the rest directly into the destination.
//
// WatchReplyRate() adds a floor on the rate of a reply: a server that
// sends valid bytes, but one at a time, passes any deadline set for the
// reply's size; it does not pass the floor.
//
// Any failure — timeout, slow reply, reset, EOF, protocol error — marks the connection
// broken (healthy() false) and counts it; the owner then drops it.
//
// Thread safety: used by one thread at a time (ConnectionPool hands it out).
#ifndef KVTIER_REMOTE_CONNECTION_H_
#define KVTIER_REMOTE_CONNECTION_H_

#include <poll.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/env.h"
#include "kvtier/redis_url.h"
#include "kvtier/status.h"
#include "remote/counters.h"
#include "remote/resp_reader.h"
#include "remote/tls.h"

namespace kvtier::remote {

struct ConnectionParams {
  NodeAddress address;
  std::string user;
  std::string password;
  bool has_password = false;  // send AUTH
  uint32_t db = 0;            // SELECT db when non-zero
  uint32_t connect_timeout_ms = 500;
  std::shared_ptr<const TlsContext> tls;  // non-null: TLS (rediss://)
};

class Connection : public ReplySource {
 public:
  // Connects and runs the handshake within connect_timeout_ms.
  //   Unavailable       refused, unreachable, timed out, closed, LOADING;
  //   InvalidArgument   the server refused AUTH (or needs it: NOAUTH) or
  //                     SELECT; the message names the server and the
  //                     reply, never the password.
  static Result<std::unique_ptr<Connection>> Open(const ConnectionParams& params, Env* env,
                                                  RemoteCounters* counters);
  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Every later read and write fails with a timeout once Env::NowMicros()
  // passes `deadline_micros`. Ends any WatchReplyRate() (a pooled
  // connection's next user sets its own).
  void SetDeadline(uint64_t deadline_micros) {
    deadline_ = deadline_micros;
    rate_floor_ = 0;
  }

  // Watches the reply read from now on: from the first byte that arrives
  // after this call, bytes must keep arriving at `min_bytes_per_second` on
  // average once `grace_micros` have passed; a read that would wait past
  // that point fails as a timeout ("reply trickles at N B/s", counted in
  // `timeouts`). The wait for the first byte is the deadline's alone (a
  // slow server is not a slow link). 0 = no floor. Each call starts afresh;
  // call it after SetDeadline().
  void WatchReplyRate(uint64_t min_bytes_per_second, uint64_t grace_micros) {
    rate_floor_ = min_bytes_per_second;
    rate_grace_ = grace_micros;
    rate_started_ = false;
    rate_bytes_ = 0;
  }

  // Sends every byte of `iov`, in order.
  Status Write(std::span<const iovec> iov);

  // ReplySource.
  Result<std::string_view> ReadLine(size_t max_bytes) override;
  Status ReadExact(std::span<std::byte> dst) override;
  Status Skip(uint64_t n) override;

  bool healthy() const { return healthy_; }
  // It broke because a reply fell under the WatchReplyRate() floor.
  bool slow_reply() const { return slow_reply_; }
  // Marks the connection unusable (e.g. a reply did not match the request).
  void MarkBroken() { healthy_ = false; }
  const NodeAddress& address() const { return address_; }

 private:
  Connection(int fd, NodeAddress address, Env* env, RemoteCounters* counters);
  Status Handshake(const ConnectionParams& params);
  // The TLS handshake (before Handshake()).
  Status StartTls(std::shared_ptr<const TlsContext> context);
  // Sends [data, data + n) over TLS.
  Status WriteTls(const void* data, size_t n);
  Status WaitTls(TlsWait wait) { return Wait(wait == TlsWait::kRead ? POLLIN : POLLOUT); }
  // Waits until the socket is readable (POLLIN) or writable (POLLOUT).
  Status Wait(short events);
  // Wait() for the rest of a reply: also fails once the reply's rate falls
  // under the floor of WatchReplyRate().
  Status WaitForReply(short events);
  // Ready (true) or `until` passed (false).
  Result<bool> Poll(short events, uint64_t until);
  // Counts `n` bytes of the watched reply.
  void CountReplyBytes(size_t n);
  // When the watched reply falls under its floor (UINT64_MAX: never).
  uint64_t RateFloorMicros() const;
  // Receives at least one byte into [buf, buf + cap).
  Result<size_t> Receive(void* buf, size_t cap);
  Status Fail(Status s);
  Status Timeout();
  Status SlowReply();

  static constexpr size_t kBufferBytes = 64 * 1024;
  // TLS writes: pieces shorter than kTlsGatherBytes are copied together into
  // writes of up to one TLS record (16 KiB).
  static constexpr size_t kTlsGatherBytes = 4096;
  static constexpr size_t kTlsRecordBytes = 16 * 1024;

  int fd_;
  NodeAddress address_;
  Env* env_;
  RemoteCounters* counters_;
  uint64_t deadline_ = 0;
  uint64_t rate_floor_ = 0;  // bytes per second; 0 = no floor
  uint64_t rate_grace_ = 0;
  bool rate_started_ = false;  // the reply's first byte came, at rate_start_
  uint64_t rate_start_ = 0;
  uint64_t rate_bytes_ = 0;  // bytes of the reply since then
  // The last read brought less than kQuickAckBelow bytes (or none yet):
  // the server may be writing small pieces (see WaitForReply).
  bool small_reads_ = true;
  bool healthy_ = true;
  bool slow_reply_ = false;
  std::unique_ptr<TlsSession> tls_;  // null: plaintext
  std::unique_ptr<char[]> buf_;
  size_t begin_ = 0;  // unread bytes are [begin_, end_)
  size_t end_ = 0;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_CONNECTION_H_
