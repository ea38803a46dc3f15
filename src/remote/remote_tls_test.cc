// The remote tier over TLS (rediss://, rediss-cluster://) against the TLS
// redis-servers scripts/redis-servers starts (scripts/test exports their
// URLs and the certificate folder, KVTIER_TEST_REDIS_TLS_* and
// KVTIER_TEST_TLS_DIR): a good certificate works, a wrong CA, an expired
// certificate and a wrong host name each fail Open() with the cause named,
// a plaintext server or a silent one behind rediss:// fails within the
// connect timeout, a client certificate is sent when given. Without those
// variables the test starts the servers itself (scripts/redis-servers);
// when it cannot, every test here fails (never skips), saying why.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "remote/remote_test_util.h"
#include "testing/status_matchers.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

constexpr double kTlsMarginSeconds = 5.0;

// The TLS servers' URLs and certificate folder: the KVTIER_TEST_REDIS_TLS_*
// and KVTIER_TEST_TLS_DIR variables scripts/test exports, or else servers
// this process starts once with scripts/redis-servers (found through
// KVTIER_SOURCE_DIR, which ctest sets) and stops at exit, as the plaintext
// tests do with testing::TestRedisUrl().
class TlsServers {
 public:
  static TlsServers& Get() {
    static TlsServers servers;
    return servers;
  }

  // The variable's value; "" and a test failure saying why when there is
  // none.
  std::string Var(const std::string& name) {
    auto it = vars_.find(name);
    if (it == vars_.end() || it->second.empty()) {
      ADD_FAILURE() << name << " is not set and no TLS servers could be started: " << error_;
      return "";
    }
    return it->second;
  }

 private:
  static constexpr const char* kNames[] = {
      "KVTIER_TEST_REDIS_TLS_URL",         "KVTIER_TEST_REDIS_TLS_CLUSTER_URL",
      "KVTIER_TEST_REDIS_TLS_MTLS_URL",    "KVTIER_TEST_REDIS_TLS_EXPIRED_URL",
      "KVTIER_TEST_REDIS_TLS_WRONG_HOST_URL", "KVTIER_TEST_TLS_DIR"};

  TlsServers() {
    bool all = true;
    for (const char* n : kNames) {
      const char* v = std::getenv(n);
      all = all && v != nullptr && *v != '\0';
      if (v != nullptr) vars_[n] = v;
    }
    if (all) return;
    vars_.clear();
    const char* src = std::getenv("KVTIER_SOURCE_DIR");
    if (src == nullptr || *src == '\0') {
      error_ = "KVTIER_SOURCE_DIR is not set (ctest sets it); or start them with "
               "`eval \"$(scripts/redis-servers start DIR)\"` (scripts/test does)";
      return;
    }
    script_ = std::string(src) + "/scripts/redis-servers";
    char tmpl[] = "/tmp/kvtier_tls_servers_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = std::string(tmpl) + "/redis";
    std::string out;
    FILE* p = ::popen(("'" + script_ + "' start '" + dir_ + "' 2>&1").c_str(), "r");
    if (p == nullptr) {
      error_ = "cannot run " + script_;
      return;
    }
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
    if (::pclose(p) != 0) {
      error_ = script_ + " start failed: " + out;
      return;
    }
    // "export NAME=VALUE" lines.
    size_t pos = 0;
    while (pos < out.size()) {
      const size_t end = std::min(out.find('\n', pos), out.size());
      const std::string line = out.substr(pos, end - pos);
      pos = end + 1;
      const size_t eq = line.find('=');
      if (line.starts_with("export ") && eq != std::string::npos) {
        vars_[line.substr(7, eq - 7)] = line.substr(eq + 1);
      }
    }
  }

  ~TlsServers() {
    if (dir_.empty()) return;
    const std::string parent = dir_.substr(0, dir_.rfind('/'));
    (void)std::system(("'" + script_ + "' stop '" + dir_ + "'; rmdir '" + parent + "'").c_str());
  }

  std::map<std::string, std::string> vars_;
  std::string error_;
  std::string script_;
  std::string dir_;  // non-empty: servers this process started
};

std::string Need(const char* name) { return TlsServers::Get().Var(name); }

std::string TlsFile(const std::string& name) { return Need("KVTIER_TEST_TLS_DIR") + "/" + name; }

class RemoteTlsTest : public ::testing::Test {
 protected:
  RemoteTierOptions Options(const std::string& url) {
    RemoteTierOptions o = TestOptions(
        url, layout_, ::testing::UnitTest::GetInstance()->current_test_info()->name());
    o.require_server_at_open = true;
    o.tls_ca_file = TlsFile("ca.crt");
    o.connect_timeout_ms = 1000;
    return o;
  }

  // Stores kBlocks blocks, reads them back byte for byte, erases them.
  void RoundTrip(const RemoteTierOptions& o, uint64_t nodes) {
    Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(o, Env::Default());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    RemoteTier& tier = **t;
    constexpr int kBlocks = 24;
    std::vector<BlockKey> keys;
    for (int i = 0; i < kBlocks; ++i) {
      keys.push_back(TestBlockKey(i));
      ASSERT_TRUE(tier.Put(keys.back(), TestBlock(layout_, i)).ok());
    }
    ASSERT_TRUE(tier.Flush().ok());
    std::vector<SharedBlock> got = tier.GetMany(keys);
    ASSERT_EQ(got.size(), keys.size());
    for (int i = 0; i < kBlocks; ++i) {
      ASSERT_NE(got[i], nullptr) << i;
      const SharedBlock want = TestBlock(layout_, i);
      ASSERT_EQ(got[i]->size(), want->size()) << i;
      EXPECT_EQ(std::memcmp(got[i]->data(), want->data(), want->size()), 0) << i;
    }
    RemoteTierStats s = tier.Stats();
    EXPECT_EQ(s.stored, uint64_t{kBlocks});
    EXPECT_EQ(s.hits, uint64_t{kBlocks});
    EXPECT_EQ(s.nodes, nodes);
    EXPECT_EQ(s.tls_failures, 0u);
    EXPECT_EQ(s.connect_failures, 0u);
    EXPECT_GE(s.connects, nodes);
    for (const BlockKey& k : keys) EXPECT_EQ(tier.Erase(k).value_or(false), true);
    EXPECT_TRUE(tier.Close().ok());
  }

  // Open() with `o` fails with `code` and a message holding `reason`.
  void ExpectOpenFails(const RemoteTierOptions& o, StatusCode code, const std::string& reason) {
    Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(o, Env::Default());
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.status(), StatusIs(code, HasSubstr(reason))) << t.status().ToString();
    EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << "one line";
  }

  const ModelLayout layout_ = MultiPartLayout();  // several parts: MULTI/EXEC over TLS
};

TEST_F(RemoteTlsTest, GoodCertificateSingleServer) {
  RoundTrip(Options(Need("KVTIER_TEST_REDIS_TLS_URL")), 1);
}

TEST_F(RemoteTlsTest, GoodCertificateCluster) {
  // The nodes CLUSTER SHARDS names (by "tls-port") are dialed over TLS too.
  RoundTrip(Options(Need("KVTIER_TEST_REDIS_TLS_CLUSTER_URL")), 3);
}

TEST_F(RemoteTlsTest, ServerNameOverrideChecksThatNameAndSendsIt) {
  RemoteTierOptions o = Options(Need("KVTIER_TEST_REDIS_TLS_URL"));
  o.tls_server_name = "localhost";  // a DNS SAN of server.crt
  RoundTrip(o, 1);
}

TEST_F(RemoteTlsTest, WrongCaFailsOpen) {
  RemoteTierOptions o = Options(Need("KVTIER_TEST_REDIS_TLS_URL"));
  o.tls_ca_file = TlsFile("other-ca.crt");
  // redis-server sends its chain up to its root (ca.crt), which this client
  // does not trust.
  ExpectOpenFails(o, StatusCode::kInvalidArgument,
                  "certificate rejected: self-signed certificate in certificate chain");
  // A configuration error: Open() says so also when it may start without a
  // server.
  o.require_server_at_open = false;
  ExpectOpenFails(o, StatusCode::kInvalidArgument, "certificate rejected");
}

TEST_F(RemoteTlsTest, WrongCaFailsClusterOpen) {
  RemoteTierOptions o = Options(Need("KVTIER_TEST_REDIS_TLS_CLUSTER_URL"));
  o.tls_ca_file = TlsFile("other-ca.crt");
  ExpectOpenFails(o, StatusCode::kInvalidArgument,
                  "certificate rejected: self-signed certificate in certificate chain");
}

TEST_F(RemoteTlsTest, ExpiredCertificateFailsOpen) {
  ExpectOpenFails(Options(Need("KVTIER_TEST_REDIS_TLS_EXPIRED_URL")), StatusCode::kInvalidArgument,
                  "certificate rejected: certificate has expired");
}

TEST_F(RemoteTlsTest, WrongHostFailsOpen) {
  // The URL's host is 127.0.0.1; wrong-host.crt names only
  // wrong-host.invalid.
  RemoteTierOptions o = Options(Need("KVTIER_TEST_REDIS_TLS_WRONG_HOST_URL"));
  ExpectOpenFails(o, StatusCode::kInvalidArgument, "certificate rejected: IP address mismatch");
  // A name, checked against the DNS SANs.
  o.tls_server_name = "localhost";
  ExpectOpenFails(o, StatusCode::kInvalidArgument, "certificate rejected: hostname mismatch");
  // The good server's certificate does not name this one either.
  RemoteTierOptions good = Options(Need("KVTIER_TEST_REDIS_TLS_URL"));
  good.tls_server_name = "wrong-host.invalid";
  ExpectOpenFails(good, StatusCode::kInvalidArgument, "certificate rejected: hostname mismatch");
}

TEST_F(RemoteTlsTest, PlaintextServerBehindRedissFailsWithinConnectTimeout) {
  Result<std::string> plain = testing::TestRedisUrl();
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_TRUE(plain->starts_with("redis://")) << *plain;
  RemoteTierOptions o = Options("rediss://" + plain->substr(8));
  o.connect_timeout_ms = 300;
  Stopwatch w;
  ExpectOpenFails(o, StatusCode::kUnavailable, "TLS handshake");
  EXPECT_LT(w.Seconds(), (o.connect_timeout_ms + o.command_timeout_ms) / 1000.0 + kTlsMarginSeconds);

  // Without require_server_at_open, Open() succeeds with the breaker open
  // and the failed handshake counted.
  o.require_server_at_open = false;
  Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(o, Env::Default());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  RemoteTierStats s = (*t)->Stats();
  EXPECT_EQ(s.tls_failures, 1u);
  EXPECT_EQ(s.connect_failures, 1u);
  EXPECT_EQ(s.connects, 0u);
  EXPECT_EQ(s.nodes_down, 1u);
  EXPECT_EQ((*t)->Get(TestBlockKey(1)), nullptr);
}

// A listening socket that never accepts: the kernel completes the TCP
// handshake, nobody ever answers the ClientHello.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(fd_, 8) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen on a loopback port";
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST_F(RemoteTlsTest, SilentServerFailsWithinConnectTimeout) {
  SilentListener silent;
  RemoteTierOptions o = Options("rediss://127.0.0.1:" + std::to_string(silent.port()));
  o.connect_timeout_ms = 300;
  Stopwatch w;
  ExpectOpenFails(o, StatusCode::kUnavailable, "TLS handshake timed out (is it a TLS port?)");
  EXPECT_LT(w.Seconds(), (o.connect_timeout_ms + o.command_timeout_ms) / 1000.0 + kTlsMarginSeconds);
}

TEST_F(RemoteTlsTest, ClientCertificate) {
  RemoteTierOptions o = Options(Need("KVTIER_TEST_REDIS_TLS_MTLS_URL"));
  // The server asks for a certificate (tls-auth-clients yes): none is
  // refused... With TLS 1.3 the client's handshake is done before the
  // server checks; the refusal then reaches the first write or read as the
  // server's alert ("tlsv13 alert certificate required") or as a reset,
  // whichever comes first.
  ExpectOpenFails(o, StatusCode::kUnavailable, "TLS ");
  // ... one its CA signed is taken.
  o.tls_cert_file = TlsFile("client.crt");
  o.tls_key_file = TlsFile("client.key");
  RoundTrip(o, 1);
}

TEST_F(RemoteTlsTest, BadFilesAreInvalidArgumentNamingTheOption) {
  RemoteTierOptions o = Options(Need("KVTIER_TEST_REDIS_TLS_URL"));
  o.tls_ca_file = TlsFile("no-such-ca.crt");
  ExpectOpenFails(o, StatusCode::kInvalidArgument, "remote_tls_ca_file: '" + o.tls_ca_file + "'");
  o.tls_ca_file = TlsFile("ca.cnf");  // exists, not PEM
  ExpectOpenFails(o, StatusCode::kInvalidArgument, "remote_tls_ca_file");
  o.tls_ca_file = TlsFile("ca.crt");
  o.tls_cert_file = TlsFile("client.crt");
  ExpectOpenFails(o, StatusCode::kInvalidArgument, "remote_tls_key_file: required");
  o.tls_key_file = TlsFile("server.key");  // not client.crt's key
  ExpectOpenFails(o, StatusCode::kInvalidArgument,
                  "remote_tls_key_file: '" + o.tls_key_file + "': does not match");
  o.tls_key_file = TlsFile("no-such.key");
  ExpectOpenFails(o, StatusCode::kInvalidArgument, "remote_tls_key_file");
}

}  // namespace
}  // namespace kvtier::remote
