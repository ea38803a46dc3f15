#include "server_client/wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvtier::server {
namespace {

constexpr size_t kHeaderBytes = 4;  // version, op, u16 zero

// The wire's integers are little-endian: the low `bytes` bytes of `v`.
void PutLe(std::vector<uint8_t>* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t GetLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

// Waits until `sock` is ready for `events` or the deadline passes.
Status WaitReady(int sock, short events, uint64_t deadline_us) {
  for (;;) {
    int timeout_ms = -1;
    if (deadline_us != 0) {
      const uint64_t now = MonotonicMicros();
      if (now >= deadline_us) return Status::Unavailable("kvtier serve: no answer in time");
      timeout_ms = static_cast<int>(std::min<uint64_t>((deadline_us - now + 999) / 1000, 1 << 30));
    }
    pollfd p{sock, events, 0};
    const int n = ::poll(&p, 1, timeout_ms);
    if (n > 0) return Status::Ok();
    if (n < 0 && errno != EINTR) return Status::IOError("poll", errno);
  }
}

}  // namespace

FrameWriter::FrameWriter(Op op) {
  buf_.resize(4);  // body length, filled by Finish()
  U8(kWireVersion);
  U8(static_cast<uint8_t>(op));
  U16(0);
}

void FrameWriter::U16(uint16_t v) { PutLe(&buf_, v, 2); }
void FrameWriter::U32(uint32_t v) { PutLe(&buf_, v, 4); }
void FrameWriter::U64(uint64_t v) { PutLe(&buf_, v, 8); }
void FrameWriter::Key(const BlockKey& k) { buf_.insert(buf_.end(), k.bytes.begin(), k.bytes.end()); }
void FrameWriter::Str16(std::string_view s) {
  s = s.substr(0, 0xFFFF);
  U16(static_cast<uint16_t>(s.size()));
  buf_.insert(buf_.end(), s.begin(), s.end());
}
void FrameWriter::Str32(std::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  buf_.insert(buf_.end(), s.begin(), s.end());
}
void FrameWriter::StatusOf(const Status& s) {
  U8(static_cast<uint8_t>(s.code()));
  Str16(s.message());
}
const std::vector<uint8_t>& FrameWriter::Finish() {
  const uint32_t n = static_cast<uint32_t>(buf_.size() - 4);
  for (int i = 0; i < 4; ++i) buf_[i] = static_cast<uint8_t>(n >> (8 * i));
  return buf_;
}

FrameReader::FrameReader(std::span<const uint8_t> body) : body_(body) {}

bool FrameReader::Take(size_t n) {
  if (!ok_ || body_.size() - pos_ < n) {
    ok_ = false;
    return false;
  }
  return true;
}

Result<Op> FrameReader::Header() {
  if (!Take(kHeaderBytes)) return Status::Corruption("frame shorter than its header");
  const uint8_t version = body_[0];
  const uint8_t op = body_[1];
  pos_ = kHeaderBytes;
  if (version != kWireVersion) {
    ok_ = false;
    return Status::Corruption("wire version " + std::to_string(version) + ", expected " +
                              std::to_string(kWireVersion));
  }
  if (op < static_cast<uint8_t>(Op::kHello) || op > static_cast<uint8_t>(Op::kTouch)) {
    ok_ = false;
    return Status::Corruption("unknown op " + std::to_string(op));
  }
  // Reserved: a peer that sets it speaks something this version does not.
  if (body_[2] != 0 || body_[3] != 0) {
    ok_ = false;
    return Status::Corruption("header field reserved as 0 is " +
                              std::to_string(body_[2] | body_[3] << 8));
  }
  return static_cast<Op>(op);
}

uint8_t FrameReader::U8() {
  if (!Take(1)) return 0;
  return body_[pos_++];
}
uint16_t FrameReader::U16() {
  if (!Take(2)) return 0;
  pos_ += 2;
  return static_cast<uint16_t>(GetLe(body_.data() + pos_ - 2, 2));
}
uint32_t FrameReader::U32() {
  if (!Take(4)) return 0;
  pos_ += 4;
  return static_cast<uint32_t>(GetLe(body_.data() + pos_ - 4, 4));
}
uint64_t FrameReader::U64() {
  if (!Take(8)) return 0;
  pos_ += 8;
  return GetLe(body_.data() + pos_ - 8, 8);
}
BlockKey FrameReader::Key() {
  BlockKey k;
  if (!Take(32)) return k;
  std::memcpy(k.bytes.data(), body_.data() + pos_, 32);
  pos_ += 32;
  return k;
}
std::string FrameReader::Str16() {
  const uint16_t n = U16();
  if (!Take(n)) return {};
  std::string s(reinterpret_cast<const char*>(body_.data() + pos_), n);
  pos_ += n;
  return s;
}
std::string FrameReader::Str32() {
  const uint32_t n = U32();
  if (!Take(n)) return {};
  std::string s(reinterpret_cast<const char*>(body_.data() + pos_), n);
  pos_ += n;
  return s;
}
uint32_t FrameReader::Count(size_t item_bytes) {
  const uint32_t n = U32();
  if (!ok_) return 0;
  if (n > kMaxBatch || (item_bytes > 0 && n > (body_.size() - pos_) / item_bytes)) {
    ok_ = false;
    return 0;
  }
  return n;
}
Status FrameReader::StatusOf() {
  const uint8_t code = U8();
  std::string msg = Str16();
  if (!ok_) return Status::Corruption("truncated status");
  if (code == 0) return Status::Ok();
  if (code > static_cast<uint8_t>(StatusCode::kInternal)) {
    return Status::Corruption("unknown status code " + std::to_string(code) + ": " + msg);
  }
  return Status(static_cast<StatusCode>(code), std::move(msg));
}
Status FrameReader::Done(std::string_view what) const {
  if (ok_ && AtEnd()) return Status::Ok();
  return Status::Corruption("bad " + std::string(what) + " frame (" +
                            (ok_ ? "trailing bytes" : "field past its end") + ")");
}

void WriteKeys(FrameWriter* w, std::span<const BlockKey> keys) {
  w->U32(static_cast<uint32_t>(keys.size()));
  for (const BlockKey& k : keys) w->Key(k);
}

std::vector<BlockKey> ReadKeys(FrameReader* r) {
  const uint32_t n = r->Count(32);
  std::vector<BlockKey> keys;
  keys.reserve(n);
  for (uint32_t i = 0; i < n; ++i) keys.push_back(r->Key());
  return keys;
}

uint64_t MonotonicMicros() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

Status SendFrame(int sock, const std::vector<uint8_t>& frame, uint64_t deadline_us,
                 int fd_to_pass) {
  size_t sent = 0;
  bool fd_sent = fd_to_pass < 0;
  // Each send and receive is tried first and waits (poll) only when the
  // socket is not ready: one system call fewer per step when it is.
  bool wait = false;
  while (sent < frame.size()) {
    if (wait) KVTIER_RETURN_IF_ERROR(WaitReady(sock, POLLOUT, deadline_us));
    wait = false;
    iovec iov{const_cast<uint8_t*>(frame.data() + sent), frame.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (!fd_sent) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd_to_pass, sizeof(int));
    }
    const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait = true;
        continue;
      }
      return Status::Unavailable(std::string("kvtier serve: send: ") + std::strerror(errno));
    }
    fd_sent = true;
    sent += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status RecvFrame(int sock, std::vector<uint8_t>* body, uint64_t deadline_us, int* received_fd) {
  if (received_fd != nullptr) *received_fd = -1;
  uint8_t len_bytes[4];
  size_t got = 0;
  uint32_t len = 0;
  bool have_len = false;
  bool wait = false;
  body->clear();
  for (;;) {
    const size_t want = have_len ? len : 4;
    if (got == want) {
      if (have_len) return Status::Ok();
      len = uint32_t{len_bytes[0]} | uint32_t{len_bytes[1]} << 8 | uint32_t{len_bytes[2]} << 16 |
            uint32_t{len_bytes[3]} << 24;
      if (len > kMaxFrameBytes || len < kHeaderBytes) {
        return Status::Corruption("frame of " + std::to_string(len) + " bytes (limit " +
                                  std::to_string(kMaxFrameBytes) + ")");
      }
      body->resize(len);
      have_len = true;
      got = 0;
      continue;
    }
    if (wait) KVTIER_RETURN_IF_ERROR(WaitReady(sock, POLLIN, deadline_us));
    wait = false;
    uint8_t* dst = have_len ? body->data() + got : len_bytes + got;
    iovec iov{dst, want - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait = true;
        continue;
      }
      return Status::Unavailable(std::string("kvtier serve: recv: ") + std::strerror(errno));
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < nfds; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (received_fd != nullptr && *received_fd < 0) {
          *received_fd = fd;
        } else {
          ::close(fd);
        }
      }
    }
    if (n == 0) return Status::Unavailable("kvtier serve: connection closed");
    got += static_cast<size_t>(n);
  }
}

Result<std::string> SocketPathOf(std::string_view server) {
  constexpr std::string_view kScheme = "unix:";
  if (!server.starts_with(kScheme) || server.size() == kScheme.size()) {
    return Status::InvalidArgument("server: expected unix:PATH, got '" +
                                   std::string(server.substr(0, 80)) + "'");
  }
  std::string path(server.substr(kScheme.size()));
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return Status::InvalidArgument("server: socket path longer than " +
                                   std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
  }
  if (path.find('\0') != std::string::npos) {
    return Status::InvalidArgument("server: socket path holds a NUL byte");
  }
  return path;
}

}  // namespace kvtier::server
