// The limits `kvtier bench remote` measures in the same run, against which
// it prints the tier's figures:
//
//   RawSocket      one blocking connection and the least RESP that does the
//                  job (SET / GET / DEL / INFO), over plain TCP or over
//                  OpenSSL (TLS 1.2+, the server's certificate and host name
//                  verified, read-ahead into 64 KiB as the tier does): the
//                  server's own limit, without the tier.
//   HmacGBps       what one core hashes with HMAC-SHA256 (the signed-values
//                  MAC, DESIGN.md §7) over a block-sized buffer.
//   CpuSeconds     this process's CPU time (user + system), and a Redis
//                  server's own (INFO cpu), to tell how many core-seconds a
//                  GB of a phase costs on both sides.
//
// Thread safety: none; one bench thread.
#ifndef KVTIER_TOOLS_BENCH_REMOTE_RAW_H_
#define KVTIER_TOOLS_BENCH_REMOTE_RAW_H_

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "kvtier/redis_url.h"
#include "kvtier/status.h"

struct ssl_st;
struct ssl_ctx_st;

namespace kvtier::cli {

// The TLS side of a RawSocket: the CA (empty: the system's), an optional
// client certificate and the name to verify (empty: the URL's host).
struct RawTlsFiles {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;
};

class RawSocket {
 public:
  RawSocket() = default;
  ~RawSocket();
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  // Connects to url.nodes[0] (over TLS when `tls` is given), then AUTH and
  // SELECT as the URL says.
  Status Connect(const remote::RedisUrl& url, const RawTlsFiles* tls = nullptr);

  Status Set(const std::string& name, std::span<const std::byte> value);
  // Reads the value into `buf` (which must hold it and 2 more bytes); its
  // size.
  Result<size_t> Get(const std::string& name, std::span<std::byte> buf);
  Status Del(const std::string& name);
  // used_cpu_sys + used_cpu_user of the server (INFO cpu), in seconds.
  Result<double> ServerCpuSeconds();

 private:
  Status Command(const std::vector<std::string>& args);
  Status WriteAll(std::vector<std::span<const std::byte>> pieces);
  Status Recv(std::byte* dst, size_t n, size_t* got);
  Status Fill();
  // The next line without its CRLF.
  Status ReadLine(std::string* line);
  Status ReadExact(std::span<std::byte> dst);

  int fd_ = -1;
  ssl_ctx_st* ctx_ = nullptr;
  ssl_st* ssl_ = nullptr;
  char buf_[64 * 1024];
  size_t begin_ = 0, end_ = 0;
};

// HMAC-SHA256 GB/s of one core over `block` (repeated for about 0.3 s).
double HmacGBps(std::span<const std::byte> block);

// User + system CPU seconds of this process so far.
double ProcessCpuSeconds();

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_BENCH_REMOTE_RAW_H_
