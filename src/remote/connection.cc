#include "remote/connection.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "remote/request_buffer.h"

namespace kvtier::remote {
namespace {

// A read smaller than this may be a piece a Nagling server wrote.
constexpr size_t kQuickAckBelow = size_t{16} << 10;

using C = RemoteCounters;

bool IsTimeoutText(const char* errstr) {
  return std::strstr(errstr, "timed out") != nullptr || std::strstr(errstr, "Timeout") != nullptr;
}

}  // namespace

Connection::Connection(int fd, NodeAddress address, Env* env, RemoteCounters* counters)
    : fd_(fd),
      address_(std::move(address)),
      env_(env),
      counters_(counters),
      buf_(new char[kBufferBytes]) {}

Connection::~Connection() {
  tls_.reset();  // before its socket closes
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<Connection>> Connection::Open(const ConnectionParams& params, Env* env,
                                                     RemoteCounters* counters) {
  const std::string where = params.address.ToString();
  const uint64_t deadline = env->NowMicros() + uint64_t{params.connect_timeout_ms} * 1000;
  timeval tv{};
  tv.tv_sec = params.connect_timeout_ms / 1000;
  tv.tv_usec = static_cast<suseconds_t>(params.connect_timeout_ms % 1000) * 1000;
  redisContext* c = redisConnectWithTimeout(params.address.host.c_str(), params.address.port, tv);
  if (c == nullptr) {
    C::Add(counters->connect_failures);
    return Status::ResourceExhausted("connect to " + where + ": out of memory");
  }
  if (c->err != 0) {
    const std::string err = c->errstr;
    const bool timed_out = IsTimeoutText(c->errstr);
    redisFree(c);
    C::Add(counters->connect_failures);
    if (timed_out) C::Add(counters->timeouts);
    return Status::Unavailable("connect to " + where + ": " + err);
  }
  redisEnableKeepAlive(c);
  const int fd = redisFreeKeepFd(c);
  const int flags = ::fcntl(fd, F_GETFL);
  int one = 1;
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0) {
    const int err = errno;
    ::close(fd);
    C::Add(counters->connect_failures);
    return Status::IOError("set up the socket to " + where, err);
  }
  std::unique_ptr<Connection> conn(new Connection(fd, params.address, env, counters));
  conn->SetDeadline(deadline);
  if (params.tls != nullptr) {
    Status tls = conn->StartTls(params.tls);
    if (!tls.ok()) {
      C::Add(counters->connect_failures);
      C::Add(counters->tls_failures);
      return tls;
    }
  }
  Status s = conn->Handshake(params);
  if (!s.ok()) {
    C::Add(counters->connect_failures);
    if (s.IsCorruption()) C::Add(counters->protocol_errors);
    if (s.IsInvalidArgument()) C::Add(counters->auth_failures);
    return s;
  }
  C::Add(counters->connects);
  return conn;
}

Status Connection::StartTls(std::shared_ptr<const TlsContext> context) {
  const std::string where = "redis " + address_.ToString();
  Result<std::unique_ptr<TlsSession>> session =
      TlsSession::Create(std::move(context), fd_, address_.host);
  if (!session.ok()) return Fail(session.status().WithContext(where));
  tls_ = std::move(session).value();
  while (true) {
    TlsWait wait = TlsWait::kNone;
    Status s = tls_->Handshake(&wait);
    if (!s.ok()) return Fail(Status(s.code(), where + ": " + s.message(), s.sys_errno()));
    if (wait == TlsWait::kNone) return Status::Ok();
    Status w = WaitTls(wait);
    if (!w.ok()) {
      // A plaintext server behind rediss:// usually waits for the rest of
      // what it takes for a command line: say what that likely means.
      if (env_->NowMicros() >= deadline_) {
        return Fail(Status::Unavailable(where + ": TLS handshake timed out (is it a TLS port?)"));
      }
      return w;
    }
  }
}

Status Connection::Handshake(const ConnectionParams& params) {
  const std::string where = "redis " + address_.ToString();
  RequestBuffer req;
  if (params.has_password) {
    if (params.user.empty()) {
      req.Command({"AUTH", params.password});
    } else {
      req.Command({"AUTH", params.user, params.password});
    }
  }
  const std::string db = std::to_string(params.db);
  if (params.db != 0) req.Command({"SELECT", db});
  req.Command({"PING"});
  const std::vector<iovec> iov = req.Iovecs();
  KVTIER_RETURN_IF_ERROR(Write(iov));

  const ReplyLimits limits{0, 0};
  auto expect = [&](std::string_view ok_text, std::string_view what) -> Status {
    KVTIER_ASSIGN_OR_RETURN(ReplyHead h, ReadReplyHead(*this, limits));
    if (h.type == ReplyType::kStatus && h.text == ok_text) return Status::Ok();
    if (h.type != ReplyType::kError) {
      return Fail(Status::Corruption("protocol error: unexpected reply to " + std::string(what) +
                                     " from " + where));
    }
    const ServerError e = ParseServerError(h.text);
    if (e.kind == ServerErrorKind::kLoading) {
      return Fail(Status::Unavailable(where + " is loading its dataset"));
    }
    if (what == "AUTH") {
      const std::string user = params.user.empty() ? "default" : params.user;
      return Fail(
          Status::InvalidArgument(where + " refused AUTH for user '" + user + "': " + e.message));
    }
    if (e.kind == ServerErrorKind::kNoAuth) {
      return Fail(Status::InvalidArgument(where +
                                          " requires a password (NOAUTH): give one in the URL, "
                                          "redis://[user]:password@host:port"));
    }
    if (e.kind == ServerErrorKind::kWrongPass || e.kind == ServerErrorKind::kNoPerm) {
      return Fail(
          Status::InvalidArgument(where + " refused " + std::string(what) + ": " + e.message));
    }
    if (what == "SELECT") {
      return Fail(Status::InvalidArgument(where + " refused SELECT " + db + ": " + e.message));
    }
    return Fail(
        Status::Unavailable(where + " answered " + std::string(what) + " with: " + e.message));
  };
  if (params.has_password) KVTIER_RETURN_IF_ERROR(expect("OK", "AUTH"));
  if (params.db != 0) KVTIER_RETURN_IF_ERROR(expect("OK", "SELECT"));
  return expect("PONG", "PING");
}

Status Connection::Fail(Status s) {
  healthy_ = false;
  return s;
}

Status Connection::Timeout() {
  C::Add(counters_->timeouts);
  return Fail(Status::Unavailable("redis " + address_.ToString() + ": timed out"));
}

Status Connection::SlowReply() {
  const uint64_t elapsed = env_->NowMicros() - rate_start_;
  const uint64_t rate =
      elapsed == 0 ? rate_bytes_ : static_cast<uint64_t>(rate_bytes_ * 1e6 / elapsed);
  C::Add(counters_->timeouts);
  slow_reply_ = true;
  return Fail(Status::Unavailable("redis " + address_.ToString() + ": reply trickles at " +
                                  std::to_string(rate) + " B/s (under remote_min_reply_rate, " +
                                  std::to_string(rate_floor_) + " B/s)"));
}

Result<bool> Connection::Poll(short events, uint64_t until) {
  while (true) {
    const uint64_t now = env_->NowMicros();
    if (now >= until) return false;
    const uint64_t ms = std::min<uint64_t>((until - now + 999) / 1000, INT_MAX);
    pollfd p{fd_, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(ms));
    if (r > 0) return true;  // an error or hang-up shows in the next send/recv
    if (r == 0) continue;    // re-check the time on the Env's clock
    if (errno == EINTR) continue;
    C::Add(counters_->io_errors);
    return Fail(Status::IOError("poll on redis " + address_.ToString(), errno));
  }
}

Status Connection::Wait(short events) {
  KVTIER_ASSIGN_OR_RETURN(const bool ready, Poll(events, deadline_));
  return ready ? Status::Ok() : Timeout();
}

uint64_t Connection::RateFloorMicros() const {
  if (rate_floor_ == 0 || !rate_started_) return UINT64_MAX;
  // The time rate_bytes_ may take at the floor (a double: no overflow).
  const double at_floor = static_cast<double>(rate_bytes_) * 1e6 / static_cast<double>(rate_floor_);
  const double allowed = std::max(static_cast<double>(rate_grace_), at_floor);
  const double end = static_cast<double>(rate_start_) + allowed;
  return end >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(end);
}

void Connection::CountReplyBytes(size_t n) {
  small_reads_ = n < kQuickAckBelow;
  if (!rate_started_) {
    rate_started_ = true;
    rate_start_ = env_->NowMicros();
  }
  rate_bytes_ += n;
}

Status Connection::WaitForReply(short events) {
  if ((events & POLLIN) != 0) {
    // Acknowledge what the server sent before waiting for more. Linux
    // delays an ACK up to 40 ms when it has nothing to send back, and a
    // sender with Nagle's algorithm on (a proxy, a server without
    // TCP_NODELAY) holds its next small write until that ACK comes: each
    // piece of a reply, or each reply of a pipeline, would then cost 40 ms.
    // Setting TCP_QUICKACK sends a pending ACK now and leaves delayed-ACK
    // mode for a while; it is not sticky, so it is set before each wait
    // that follows a small read (a large reply comes in full segments,
    // which Nagle never holds: no syscall per wait there). A failure only
    // loses that speed-up.
    if (small_reads_) {
      const int one = 1;
      ::setsockopt(fd_, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
    }
  }
  const uint64_t floor = RateFloorMicros();
  if (floor >= deadline_) return Wait(events);
  KVTIER_ASSIGN_OR_RETURN(const bool ready, Poll(events, floor));
  return ready ? Status::Ok() : SlowReply();
}

Result<size_t> Connection::Receive(void* buf, size_t cap) {
  if (!healthy_) return Status::Unavailable("redis " + address_.ToString() + ": connection broken");
  while (tls_ != nullptr) {
    TlsWait wait = TlsWait::kNone;
    Result<size_t> r = tls_->Read(buf, cap, &wait);
    if (!r.ok()) {
      C::Add(counters_->io_errors);
      const Status& e = r.status();
      return Fail(Status(e.code(), "redis " + address_.ToString() + ": " + e.message(),
                         e.sys_errno()));
    }
    if (*r > 0) {
      CountReplyBytes(*r);
      return *r;
    }
    KVTIER_RETURN_IF_ERROR(WaitForReply(wait == TlsWait::kRead ? POLLIN : POLLOUT));
  }
  while (true) {
    const ssize_t r = ::recv(fd_, buf, cap, 0);
    if (r > 0) {
      CountReplyBytes(static_cast<size_t>(r));
      return static_cast<size_t>(r);
    }
    if (r == 0) {
      C::Add(counters_->io_errors);
      return Fail(Status::IOError("redis " + address_.ToString() + " closed the connection", 0));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      KVTIER_RETURN_IF_ERROR(WaitForReply(POLLIN));
      continue;
    }
    C::Add(counters_->io_errors);
    return Fail(Status::IOError("recv from redis " + address_.ToString(), errno));
  }
}

Status Connection::Write(std::span<const iovec> iov_in) {
  if (!healthy_) return Status::Unavailable("redis " + address_.ToString() + ": connection broken");
  small_reads_ = true;  // a reply's first piece may be held behind the last one's tail
  if (tls_ != nullptr) {
    // Small pieces (command headers, names, trailers) are gathered into
    // records of up to kTlsRecordBytes; a large value is handed over as is
    // (OpenSSL cuts it into records).
    std::string staged;
    for (const iovec& v : iov_in) {
      const char* p = static_cast<const char*>(v.iov_base);
      if (v.iov_len < kTlsGatherBytes && staged.size() + v.iov_len <= kTlsRecordBytes) {
        staged.append(p, v.iov_len);
        continue;
      }
      if (!staged.empty()) {
        KVTIER_RETURN_IF_ERROR(WriteTls(staged.data(), staged.size()));
        staged.clear();
      }
      if (v.iov_len < kTlsGatherBytes) {
        staged.append(p, v.iov_len);
      } else {
        KVTIER_RETURN_IF_ERROR(WriteTls(p, v.iov_len));
      }
    }
    if (!staged.empty()) KVTIER_RETURN_IF_ERROR(WriteTls(staged.data(), staged.size()));
    return Status::Ok();
  }
  std::vector<iovec> iov(iov_in.begin(), iov_in.end());
  size_t i = 0;
  while (true) {
    while (i < iov.size() && iov[i].iov_len == 0) ++i;
    if (i == iov.size()) return Status::Ok();
    msghdr m{};
    m.msg_iov = &iov[i];
    m.msg_iovlen = std::min<size_t>(iov.size() - i, IOV_MAX);
    const ssize_t r = ::sendmsg(fd_, &m, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        KVTIER_RETURN_IF_ERROR(Wait(POLLOUT));
        continue;
      }
      C::Add(counters_->io_errors);
      return Fail(Status::IOError("send to redis " + address_.ToString(), errno));
    }
    size_t sent = static_cast<size_t>(r);
    while (sent > 0) {
      if (sent >= iov[i].iov_len) {
        sent -= iov[i].iov_len;
        iov[i].iov_len = 0;
        ++i;
      } else {
        iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + sent;
        iov[i].iov_len -= sent;
        sent = 0;
      }
    }
  }
}

Status Connection::WriteTls(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    TlsWait wait = TlsWait::kNone;
    Result<size_t> r = tls_->Write(p, n, &wait);
    if (!r.ok()) {
      C::Add(counters_->io_errors);
      const Status& e = r.status();
      return Fail(Status(e.code(), "redis " + address_.ToString() + ": " + e.message(),
                         e.sys_errno()));
    }
    if (*r == 0) {
      // Retried with the same bytes, as SSL_write requires.
      KVTIER_RETURN_IF_ERROR(WaitTls(wait));
      continue;
    }
    p += *r;
    n -= *r;
  }
  return Status::Ok();
}

Result<std::string_view> Connection::ReadLine(size_t max_bytes) {
  size_t scanned = begin_;
  while (true) {
    const void* nl = std::memchr(buf_.get() + scanned, '\n', end_ - scanned);
    if (nl != nullptr) {
      const size_t pos = static_cast<const char*>(nl) - buf_.get();
      if (pos == begin_ || buf_[pos - 1] != '\r') {
        return Fail(Status::Corruption("protocol error: line ends without CR from redis " +
                                       address_.ToString()));
      }
      std::string_view line(buf_.get() + begin_, pos - 1 - begin_);
      if (line.find('\r') != std::string_view::npos) {
        return Fail(Status::Corruption("protocol error: bare CR in a reply line from redis " +
                                       address_.ToString()));
      }
      begin_ = pos + 1;
      return line;
    }
    if (end_ - begin_ > max_bytes + 1) {
      return Fail(Status::Corruption("protocol error: reply line longer than " +
                                     std::to_string(max_bytes) + " bytes from redis " +
                                     address_.ToString()));
    }
    if (end_ == kBufferBytes) {
      if (begin_ == 0) {
        return Fail(Status::Corruption("protocol error: reply line too long from redis " +
                                       address_.ToString()));
      }
      std::memmove(buf_.get(), buf_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    scanned = end_;
    KVTIER_ASSIGN_OR_RETURN(size_t n, Receive(buf_.get() + end_, kBufferBytes - end_));
    end_ += n;
  }
}

Status Connection::ReadExact(std::span<std::byte> dst) {
  const size_t buffered = std::min(end_ - begin_, dst.size());
  std::memcpy(dst.data(), buf_.get() + begin_, buffered);
  begin_ += buffered;
  size_t off = buffered;
  while (off < dst.size()) {
    KVTIER_ASSIGN_OR_RETURN(size_t n, Receive(dst.data() + off, dst.size() - off));
    off += n;
  }
  if (begin_ == end_) begin_ = end_ = 0;
  return Status::Ok();
}

Status Connection::Skip(uint64_t n) {
  const uint64_t buffered = std::min<uint64_t>(end_ - begin_, n);
  begin_ += buffered;
  n -= buffered;
  if (begin_ == end_) begin_ = end_ = 0;
  while (n > 0) {
    // Read into the (empty) line buffer and drop it; only what the caller
    // skips is consumed.
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, kBufferBytes));
    KVTIER_ASSIGN_OR_RETURN(size_t got, Receive(buf_.get(), want));
    n -= got;
  }
  return Status::Ok();
}

}  // namespace kvtier::remote
