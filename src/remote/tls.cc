#include "remote/tls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <vector>

namespace kvtier::remote {
namespace {

// PEM files are small; this bounds what a wrong path (a device, a huge
// file) can make Open() read.
constexpr uint64_t kMaxPemBytes = uint64_t{4} << 20;
constexpr size_t kReadBufferBytes = 64 * 1024;

// The most specific reason in OpenSSL's error queue (the first entry), and
// the queue cleared. "unknown error" when it is empty.
std::string TakeOpenSslError() {
  unsigned long first = ERR_get_error();
  while (ERR_get_error() != 0) {
  }
  if (first == 0) return "unknown error";
  if (const char* reason = ERR_reason_error_string(first); reason != nullptr) return reason;
  char buf[256];
  ERR_error_string_n(first, buf, sizeof(buf));
  return buf;
}

// --- A socket BIO that sends with MSG_NOSIGNAL -------------------------------

int SocketOf(BIO* b) { return static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b))); }

int BioWrite(BIO* b, const char* data, int len) {
  BIO_clear_retry_flags(b);
  while (true) {
    const ssize_t r = ::send(SocketOf(b), data, static_cast<size_t>(len), MSG_NOSIGNAL);
    if (r >= 0) return static_cast<int>(r);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(b);
    return -1;
  }
}

int BioRead(BIO* b, char* data, int len) {
  BIO_clear_retry_flags(b);
  while (true) {
    const ssize_t r = ::recv(SocketOf(b), data, static_cast<size_t>(len), 0);
    if (r >= 0) return static_cast<int>(r);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(b);
    return -1;
  }
}

long BioCtrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

int BioCreate(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

// One method table for the process (never freed: connections use it until
// exit).
const BIO_METHOD* SocketMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kvtier socket");
    if (m == nullptr) return m;
    BIO_meth_set_write(m, BioWrite);
    BIO_meth_set_read(m, BioRead);
    BIO_meth_set_ctrl(m, BioCtrl);
    BIO_meth_set_create(m, BioCreate);
    return m;
  }();
  return method;
}

// --- Loading PEM files through Env -------------------------------------------

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

Status Bad(std::string_view option, const std::string& path, std::string_view why) {
  return Status::InvalidArgument(std::string(option) + ": '" + path + "': " + std::string(why));
}

Result<BioPtr> ReadPem(Env* env, std::string_view option, const std::string& path,
                       std::vector<std::byte>* storage) {
  Result<std::vector<std::byte>> bytes = env->ReadWholeFile(path, kMaxPemBytes);
  if (!bytes.ok()) return Bad(option, path, "cannot read it: " + bytes.status().message());
  *storage = std::move(bytes).value();
  BioPtr bio(BIO_new_mem_buf(storage->data(), static_cast<int>(storage->size())));
  if (bio == nullptr) return Status::ResourceExhausted("remote tls: out of memory");
  return bio;
}

// A key protected by a passphrase is refused rather than prompted for on
// the terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

Status LoadCa(SSL_CTX* ctx, Env* env, const std::string& path) {
  std::vector<std::byte> data;
  KVTIER_ASSIGN_OR_RETURN(BioPtr bio, ReadPem(env, "remote_tls_ca_file", path, &data));
  STACK_OF(X509_INFO)* infos = PEM_X509_INFO_read_bio(bio.get(), nullptr, NoPassphrase, nullptr);
  if (infos == nullptr) {
    return Bad("remote_tls_ca_file", path, "not PEM certificates: " + TakeOpenSslError());
  }
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int added = 0;
  for (int i = 0; i < sk_X509_INFO_num(infos); ++i) {
    X509_INFO* info = sk_X509_INFO_value(infos, i);
    if (info->x509 != nullptr && X509_STORE_add_cert(store, info->x509) == 1) ++added;
  }
  sk_X509_INFO_pop_free(infos, X509_INFO_free);
  ERR_clear_error();
  if (added == 0) return Bad("remote_tls_ca_file", path, "holds no PEM certificate");
  return Status::Ok();
}

Status LoadClientCertificate(SSL_CTX* ctx, Env* env, const TlsFiles& files) {
  std::vector<std::byte> cert_data, key_data;
  KVTIER_ASSIGN_OR_RETURN(BioPtr cert_bio,
                          ReadPem(env, "remote_tls_cert_file", files.cert_file, &cert_data));
  X509* leaf = PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassphrase, nullptr);
  if (leaf == nullptr) {
    return Bad("remote_tls_cert_file", files.cert_file,
               "holds no PEM certificate: " + TakeOpenSslError());
  }
  const int used = SSL_CTX_use_certificate(ctx, leaf);
  X509_free(leaf);
  if (used != 1) return Bad("remote_tls_cert_file", files.cert_file, TakeOpenSslError());
  // The rest of the file is the chain up to the CA the server trusts.
  while (X509* extra = PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassphrase, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx, extra) != 1) {
      X509_free(extra);
      return Bad("remote_tls_cert_file", files.cert_file, TakeOpenSslError());
    }
  }
  ERR_clear_error();  // the end of the file
  KVTIER_ASSIGN_OR_RETURN(BioPtr key_bio,
                          ReadPem(env, "remote_tls_key_file", files.key_file, &key_data));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr);
  if (key == nullptr) {
    return Bad("remote_tls_key_file", files.key_file,
               "holds no unencrypted PEM private key: " + TakeOpenSslError());
  }
  const int key_used = SSL_CTX_use_PrivateKey(ctx, key);
  EVP_PKEY_free(key);
  if (key_used != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    return Bad("remote_tls_key_file", files.key_file,
               "does not match remote_tls_cert_file: " + TakeOpenSslError());
  }
  return Status::Ok();
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

// --- TlsContext -----------------------------------------------------------

Result<std::shared_ptr<const TlsContext>> TlsContext::Create(const TlsFiles& files, Env* env) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return Status::InvalidArgument(
        files.cert_file.empty() ? "remote_tls_cert_file: required with remote_tls_key_file"
                                : "remote_tls_key_file: required with remote_tls_cert_file");
  }
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    return Status::Internal("remote tls: SSL_CTX_new failed: " + TakeOpenSslError());
  }
  // Owned from here on, also on the error paths.
  std::shared_ptr<const TlsContext> context(new TlsContext(ctx, files));
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
    return Status::Internal("remote tls: cannot require TLS 1.2: " + TakeOpenSslError());
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  // Write() hands over large buffers and resumes after a partial write.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read ahead into a 64 KiB buffer: one recv() for several records, not
  // two per record (header, then body).
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, kReadBufferBytes);
  if (files.ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      return Status::InvalidArgument(
          "remote_tls_ca_file: not set, and the system certificate store cannot be loaded: " +
          TakeOpenSslError());
    }
  } else {
    KVTIER_RETURN_IF_ERROR(LoadCa(ctx, env, files.ca_file));
  }
  if (!files.cert_file.empty()) KVTIER_RETURN_IF_ERROR(LoadClientCertificate(ctx, env, files));
  return context;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

std::string TlsContext::TrustSource() const {
  return files_.ca_file.empty() ? "the system store" : "remote_tls_ca_file '" + files_.ca_file + "'";
}

// --- TlsSession -----------------------------------------------------------

Result<std::unique_ptr<TlsSession>> TlsSession::Create(std::shared_ptr<const TlsContext> context,
                                                       int fd, const std::string& host_in) {
  const std::string host =
      context->files().server_name.empty() ? host_in : context->files().server_name;
  const BIO_METHOD* method = SocketMethod();
  SSL* ssl = method == nullptr ? nullptr : SSL_new(context->ctx());
  if (ssl == nullptr) return Status::ResourceExhausted("tls: out of memory: " + TakeOpenSslError());
  std::unique_ptr<TlsSession> session(new TlsSession(std::move(context), ssl, host));
  BIO* bio = BIO_new(method);
  if (bio == nullptr) return Status::ResourceExhausted("tls: out of memory: " + TakeOpenSslError());
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  SSL_set_bio(ssl, bio, bio);  // the SSL owns it now
  bool ok;
  if (IsIpAddress(host)) {
    // No SNI for an address (RFC 6066); the certificate must list it as
    // an IP SAN.
    ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) == 1;
  } else {
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    ok = SSL_set_tlsext_host_name(ssl, host.c_str()) == 1 && SSL_set1_host(ssl, host.c_str()) == 1;
  }
  if (!ok) {
    return Status::InvalidArgument("tls: cannot check the host name '" + host +
                                   "': " + TakeOpenSslError());
  }
  SSL_set_connect_state(ssl);
  return session;
}

TlsSession::~TlsSession() {
  // No close_notify: the socket is closed right after, and a shutdown could
  // wait on a stalled server.
  SSL_free(ssl_);
}

Status TlsSession::Classify(int r, std::string_view what, TlsWait* wait) {
  const int err = SSL_get_error(ssl_, r);
  const int sys_errno = errno;
  if (err == SSL_ERROR_WANT_READ) {
    *wait = TlsWait::kRead;
    return Status::Ok();
  }
  if (err == SSL_ERROR_WANT_WRITE) {
    *wait = TlsWait::kWrite;
    return Status::Ok();
  }
  *wait = TlsWait::kNone;
  if (what == "handshake") {
    const long verify = SSL_get_verify_result(ssl_);
    if (verify != X509_V_OK) {
      ERR_clear_error();
      return Status::InvalidArgument("TLS handshake: certificate rejected: " +
                                     std::string(X509_verify_cert_error_string(verify)) +
                                     " (host '" + host_ + "', verified against " +
                                     context_->TrustSource() + ")");
    }
  }
  if (err == SSL_ERROR_ZERO_RETURN) {
    ERR_clear_error();
    return Status::IOError("TLS " + std::string(what) + ": the server closed the connection", 0);
  }
  if (err == SSL_ERROR_SYSCALL) {
    ERR_clear_error();
    if (sys_errno == 0) {
      return Status::IOError("TLS " + std::string(what) + ": the server closed the connection", 0);
    }
    return Status::IOError("TLS " + std::string(what), sys_errno);
  }
  const std::string reason = TakeOpenSslError();
  if (what == "handshake") {
    return Status::Unavailable("TLS handshake failed: " + reason + " (is it a TLS port?)");
  }
  return Status::Unavailable("TLS " + std::string(what) + " failed: " + reason);
}

Status TlsSession::Handshake(TlsWait* wait) {
  ERR_clear_error();
  errno = 0;
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    *wait = TlsWait::kNone;
    return Status::Ok();
  }
  Status s = Classify(r, "handshake", wait);
  if (s.ok() && *wait == TlsWait::kNone) {
    return Status::Unavailable("TLS handshake failed (is it a TLS port?)");
  }
  return s;
}

Result<size_t> TlsSession::Read(void* buf, size_t n, TlsWait* wait) {
  ERR_clear_error();
  errno = 0;
  const int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(n, INT_MAX)));
  if (r > 0) {
    *wait = TlsWait::kNone;
    return static_cast<size_t>(r);
  }
  KVTIER_RETURN_IF_ERROR(Classify(r, "read", wait));
  if (*wait == TlsWait::kNone) return Status::IOError("TLS read: no data and no error", 0);
  return size_t{0};
}

Result<size_t> TlsSession::Write(const void* buf, size_t n, TlsWait* wait) {
  ERR_clear_error();
  errno = 0;
  const int r = SSL_write(ssl_, buf, static_cast<int>(std::min<size_t>(n, INT_MAX)));
  if (r > 0) {
    *wait = TlsWait::kNone;
    return static_cast<size_t>(r);
  }
  KVTIER_RETURN_IF_ERROR(Classify(r, "write", wait));
  if (*wait == TlsWait::kNone) return Status::IOError("TLS write: nothing sent and no error", 0);
  return size_t{0};
}

}  // namespace kvtier::remote
