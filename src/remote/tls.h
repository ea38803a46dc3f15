// TLS for the remote tier (rediss://, rediss-cluster://; DESIGN.md §7), with
// OpenSSL.
//
// TlsContext holds what every connection of a tier shares: an SSL_CTX set
// to TLS 1.2 or later, peer verification on (always: there is no way to turn
// it off) against the CA file or the system store, and the optional client
// certificate and key. The files are read through Env once, when the tier
// opens; a file that cannot be read or holds no usable PEM is
// InvalidArgument naming the option.
//
// TlsSession is one connection's SSL object on a non-blocking socket. Its
// I/O goes through a BIO of kvtier's own that sends with MSG_NOSIGNAL (a
// closed peer is an error, not a SIGPIPE, as on a plaintext connection).
// Every call returns at once with what happened; the caller (Connection)
// waits with poll() until its deadline and calls again.
//
// Thread safety: a TlsContext is immutable after Create() and shared by the
// threads of a tier; a TlsSession is used by one thread at a time.
#ifndef KVTIER_REMOTE_TLS_H_
#define KVTIER_REMOTE_TLS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "kvtier/env.h"
#include "kvtier/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace kvtier::remote {

struct TlsFiles {
  std::string ca_file;      // empty = the system store
  std::string cert_file;    // with key_file, or neither
  std::string key_file;
  std::string server_name;  // checked instead of each node's host; empty = the host
};

class TlsContext {
 public:
  static Result<std::shared_ptr<const TlsContext>> Create(const TlsFiles& files, Env* env);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  SSL_CTX* ctx() const { return ctx_; }
  const TlsFiles& files() const { return files_; }
  // Where certificates are verified from, for messages: "remote_tls_ca_file
  // '<path>'" or "the system store".
  std::string TrustSource() const;

 private:
  TlsContext(SSL_CTX* ctx, TlsFiles files) : ctx_(ctx), files_(std::move(files)) {}

  SSL_CTX* const ctx_;
  const TlsFiles files_;
};

// What a TlsSession call asks the caller to do next.
enum class TlsWait { kNone, kRead, kWrite };

class TlsSession {
 public:
  // An SSL object on `fd` that will check `host` (the URL's or the node's;
  // the context's server_name instead when set): an IP address against the
  // certificate's IP SANs, a name against its DNS names (and sent as SNI).
  static Result<std::unique_ptr<TlsSession>> Create(std::shared_ptr<const TlsContext> context,
                                                    int fd, const std::string& host);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // One step of the handshake. OK with *wait = kNone: done; OK with kRead or
  // kWrite: wait for that and call again. An error says why in one line:
  // InvalidArgument when the certificate was rejected (naming the cause:
  // expired, unknown CA, host name mismatch, ...), Unavailable otherwise
  // (the peer closed, or does not speak TLS).
  Status Handshake(TlsWait* wait);

  // SSL_read / SSL_write of at most `n` bytes: the bytes moved (> 0), or 0
  // with *wait set. Errors: IOError (the peer closed or a socket error),
  // Unavailable (a TLS error or alert from the server, named).
  Result<size_t> Read(void* buf, size_t n, TlsWait* wait);
  Result<size_t> Write(const void* buf, size_t n, TlsWait* wait);

  const std::string& host() const { return host_; }

 private:
  TlsSession(std::shared_ptr<const TlsContext> context, SSL* ssl, std::string host)
      : context_(std::move(context)), ssl_(ssl), host_(std::move(host)) {}
  // The error of a failed SSL call that returned `r`, or OK with *wait set.
  Status Classify(int r, std::string_view what, TlsWait* wait);

  const std::shared_ptr<const TlsContext> context_;
  SSL* const ssl_;
  const std::string host_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_TLS_H_
