#include "bench_remote_raw.h"

#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace kvtier::cli {
namespace {

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no detail";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

}  // namespace

RawSocket::~RawSocket() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  if (fd_ >= 0) ::close(fd_);
}

Status RawSocket::Connect(const remote::RedisUrl& url, const RawTlsFiles* tls) {
  timeval tv{2, 0};
  const remote::NodeAddress& a = url.nodes[0];
  redisContext* c = redisConnectWithTimeout(a.host.c_str(), a.port, tv);
  if (c == nullptr || c->err) {
    const std::string err = c ? c->errstr : "out of memory";
    if (c) redisFree(c);
    return Status::Unavailable("raw connect to " + a.ToString() + ": " + err);
  }
  fd_ = redisFreeKeepFd(c);
  // Blocking, no timeout: a benchmark of a working server.
  timeval none{0, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
  if (tls != nullptr) {
    auto fail = [&](const std::string& what) {
      return Status::Unavailable("raw TLS to " + a.ToString() + ": " + what + ": " +
                                 OpenSslError());
    };
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (ctx_ == nullptr) return fail("SSL_CTX_new");
    SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    // As the tier reads: one recv() for several records.
    SSL_CTX_set_read_ahead(ctx_, 1);
    SSL_CTX_set_default_read_buffer_len(ctx_, 64 * 1024);
    const int ca = tls->ca_file.empty()
                       ? SSL_CTX_set_default_verify_paths(ctx_)
                       : SSL_CTX_load_verify_locations(ctx_, tls->ca_file.c_str(), nullptr);
    if (ca != 1) return fail("CA " + tls->ca_file);
    if (!tls->cert_file.empty() &&
        (SSL_CTX_use_certificate_chain_file(ctx_, tls->cert_file.c_str()) != 1 ||
         SSL_CTX_use_PrivateKey_file(ctx_, tls->key_file.c_str(), SSL_FILETYPE_PEM) != 1)) {
      return fail("client certificate " + tls->cert_file);
    }
    ssl_ = SSL_new(ctx_);
    if (ssl_ == nullptr) return fail("SSL_new");
    const std::string host = tls->server_name.empty() ? a.host : tls->server_name;
    SSL_set_hostflags(ssl_, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (SSL_set_fd(ssl_, fd_) != 1 || SSL_set_tlsext_host_name(ssl_, host.c_str()) != 1 ||
        SSL_set1_host(ssl_, host.c_str()) != 1) {
      return fail("setup");
    }
    if (SSL_connect(ssl_) != 1) return fail("handshake");
  }
  if (url.has_password) {
    KVTIER_RETURN_IF_ERROR(url.user.empty() ? Command({"AUTH", url.password})
                                            : Command({"AUTH", url.user, url.password}));
  }
  if (url.db != 0) KVTIER_RETURN_IF_ERROR(Command({"SELECT", std::to_string(url.db)}));
  return Status::Ok();
}

Status RawSocket::Command(const std::vector<std::string>& args) {
  std::string req = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& s : args) req += "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
  KVTIER_RETURN_IF_ERROR(WriteAll({Bytes(req)}));
  std::string line;
  KVTIER_RETURN_IF_ERROR(ReadLine(&line));
  if (line.empty() || line.starts_with('-')) {
    return Status::Unavailable("raw " + args[0] + " failed: " + line.substr(0, 100));
  }
  return Status::Ok();
}

Status RawSocket::Set(const std::string& name, std::span<const std::byte> value) {
  const std::string head = "*3\r\n$3\r\nSET\r\n$" + std::to_string(name.size()) + "\r\n" + name +
                           "\r\n$" + std::to_string(value.size()) + "\r\n";
  KVTIER_RETURN_IF_ERROR(WriteAll({Bytes(head), value, Bytes("\r\n")}));
  std::string line;
  KVTIER_RETURN_IF_ERROR(ReadLine(&line));
  if (line != "+OK") return Status::Internal("raw SET answered " + line.substr(0, 100));
  return Status::Ok();
}

Result<size_t> RawSocket::Get(const std::string& name, std::span<std::byte> buf) {
  const std::string cmd =
      "*2\r\n$3\r\nGET\r\n$" + std::to_string(name.size()) + "\r\n" + name + "\r\n";
  KVTIER_RETURN_IF_ERROR(WriteAll({Bytes(cmd)}));
  std::string line;
  KVTIER_RETURN_IF_ERROR(ReadLine(&line));
  if (!line.starts_with('$')) return Status::Internal("raw GET answered " + line);
  const long long n = std::stoll(line.substr(1));
  if (n < 0 || static_cast<size_t>(n) + 2 > buf.size()) {
    return Status::Internal("raw GET: unexpected length " + line);
  }
  KVTIER_RETURN_IF_ERROR(ReadExact(buf.first(static_cast<size_t>(n) + 2)));
  return static_cast<size_t>(n);
}

Status RawSocket::Del(const std::string& name) {
  const std::string cmd =
      "*2\r\n$3\r\nDEL\r\n$" + std::to_string(name.size()) + "\r\n" + name + "\r\n";
  KVTIER_RETURN_IF_ERROR(WriteAll({Bytes(cmd)}));
  std::string line;
  return ReadLine(&line);
}

Result<double> RawSocket::ServerCpuSeconds() {
  KVTIER_RETURN_IF_ERROR(WriteAll({Bytes("*2\r\n$4\r\nINFO\r\n$3\r\ncpu\r\n")}));
  std::string line;
  KVTIER_RETURN_IF_ERROR(ReadLine(&line));
  if (!line.starts_with('$')) return Status::Internal("raw INFO answered " + line);
  const long long n = std::stoll(line.substr(1));
  if (n < 0 || n > (1 << 20)) return Status::Internal("raw INFO: length " + line);
  std::string text(static_cast<size_t>(n) + 2, '\0');
  KVTIER_RETURN_IF_ERROR(ReadExact(std::as_writable_bytes(std::span(text))));
  double total = 0;
  int found = 0;
  for (const char* field : {"used_cpu_sys:", "used_cpu_user:"}) {
    const size_t at = text.find(std::string("\n") + field);
    if (at == std::string::npos) continue;
    total += std::strtod(text.c_str() + at + 1 + std::strlen(field), nullptr);
    ++found;
  }
  if (found != 2) return Status::Internal("raw INFO cpu: no used_cpu_sys/used_cpu_user");
  return total;
}

Status RawSocket::WriteAll(std::vector<std::span<const std::byte>> pieces) {
  if (ssl_ != nullptr) {
    for (std::span<const std::byte> p : pieces) {
      size_t written = 0;
      if (!p.empty() && SSL_write_ex(ssl_, p.data(), p.size(), &written) != 1) {
        return Status::IOError("raw SSL_write: " + OpenSslError(), 0);
      }
    }
    return Status::Ok();
  }
  std::vector<iovec> iov;
  for (std::span<const std::byte> p : pieces) {
    iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
  }
  iovec* v = iov.data();
  int n = static_cast<int>(iov.size());
  while (n > 0) {
    ssize_t w = ::writev(fd_, v, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IOError("raw writev", errno);
    }
    while (n > 0 && static_cast<size_t>(w) >= v->iov_len) {
      w -= static_cast<ssize_t>(v->iov_len);
      ++v;
      --n;
    }
    if (n > 0) {
      v->iov_base = static_cast<char*>(v->iov_base) + w;
      v->iov_len -= static_cast<size_t>(w);
    }
  }
  return Status::Ok();
}

Status RawSocket::Recv(std::byte* dst, size_t n, size_t* got) {
  if (ssl_ != nullptr) {
    if (SSL_read_ex(ssl_, dst, n, got) != 1) {
      return Status::IOError("raw SSL_read: " + OpenSslError(), 0);
    }
    return Status::Ok();
  }
  while (true) {
    const ssize_t r = ::recv(fd_, dst, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Status::IOError("raw recv", r == 0 ? 0 : errno);
    *got = static_cast<size_t>(r);
    return Status::Ok();
  }
}

Status RawSocket::Fill() {
  if (begin_ > 0) {
    std::memmove(buf_, buf_ + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  size_t got = 0;
  KVTIER_RETURN_IF_ERROR(Recv(reinterpret_cast<std::byte*>(buf_) + end_, sizeof(buf_) - end_, &got));
  end_ += got;
  return Status::Ok();
}

Status RawSocket::ReadLine(std::string* line) {
  while (true) {
    const void* nl = std::memchr(buf_ + begin_, '\n', end_ - begin_);
    if (nl != nullptr) {
      const size_t pos = static_cast<const char*>(nl) - buf_;
      line->assign(buf_ + begin_, pos - begin_ - 1);
      begin_ = pos + 1;
      return Status::Ok();
    }
    if (end_ - begin_ == sizeof(buf_)) return Status::Internal("raw: reply line too long");
    KVTIER_RETURN_IF_ERROR(Fill());
  }
}

Status RawSocket::ReadExact(std::span<std::byte> dst) {
  const size_t have = std::min(end_ - begin_, dst.size());
  std::memcpy(dst.data(), buf_ + begin_, have);
  begin_ += have;
  size_t off = have;
  while (off < dst.size()) {
    size_t got = 0;
    KVTIER_RETURN_IF_ERROR(Recv(dst.data() + off, dst.size() - off, &got));
    off += got;
  }
  return Status::Ok();
}

double HmacGBps(std::span<const std::byte> block) {
  using Clock = std::chrono::steady_clock;
  unsigned char key[32] = {1, 2, 3};
  unsigned char tag[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  uint64_t bytes = 0;
  const auto t0 = Clock::now();
  double secs = 0;
  // At least 3 hashes and 0.3 s: a figure, not a warm-up.
  for (int i = 0; i < 3 || secs < 0.3; ++i) {
    HMAC(EVP_sha256(), key, sizeof(key), reinterpret_cast<const unsigned char*>(block.data()),
         block.size(), tag, &len);
    bytes += block.size();
    secs = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return static_cast<double>(bytes) / 1e9 / secs;
}

double ProcessCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace kvtier::cli
