#include "server/http_message.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <string>

#include "server/http_endpoint.h"

namespace kvtier::server {
namespace {

using State = HttpHead::State;

TEST(HttpHead, AWholeGetHeadIsComplete) {
  const HttpHead h = ParseHttpHead(
      "GET /metrics?name=x HTTP/1.1\r\nHost: 127.0.0.1:9464\r\nAccept: */*\r\n\r\n", 8192);
  ASSERT_EQ(h.state, State::kComplete) << h.error;
  EXPECT_EQ(h.request.method, "GET");
  EXPECT_EQ(h.request.target, "/metrics?name=x");
  EXPECT_EQ(h.request.path, "/metrics");
}

TEST(HttpHead, BareLineFeedsLeadingEmptyLinesAndHttp10AreAccepted) {
  const HttpHead h = ParseHttpHead("\r\n\nPOST /healthz#top HTTP/1.0\nX-A: b\n\nbody", 8192);
  ASSERT_EQ(h.state, State::kComplete) << h.error;
  EXPECT_EQ(h.request.method, "POST");
  EXPECT_EQ(h.request.path, "/healthz");
}

TEST(HttpHead, APartialHeadAsksForMore) {
  for (const char* part : {"", "GE", "GET /metrics HTTP/1.1", "GET /metrics HTTP/1.1\r\n",
                           "GET /metrics HTTP/1.1\r\nHost: x\r\n", "\r\n"}) {
    EXPECT_EQ(ParseHttpHead(part, 8192).state, State::kIncomplete) << part;
  }
}

TEST(HttpHead, MalformedHeadsAreBadWithTheReason) {
  struct Case {
    const char* text;
    const char* error;
  };
  const Case cases[] = {
      {"garbage\r\n\r\n", "the request line is not METHOD TARGET HTTP/1.1"},
      {"GET  /metrics HTTP/1.1\r\n\r\n", "the request line is not METHOD TARGET HTTP/1.1"},
      {"GET /metrics HTTP/1.1 x\r\n\r\n", "the request line is not METHOD TARGET HTTP/1.1"},
      {"G(T /metrics HTTP/1.1\r\n\r\n", "the method is not a token"},
      {"GET metrics HTTP/1.1\r\n\r\n", "the target is not a path starting with '/'"},
      {"GET http://h/metrics HTTP/1.1\r\n\r\n", "the target is not a path starting with '/'"},
      {"GET /metrics HTTP/2.0\r\n\r\n", "the version is not HTTP/1.0 or HTTP/1.1"},
      {"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n", "a header line that is not NAME: VALUE"},
      {"GET /metrics HTTP/1.1\r\n: empty name\r\n\r\n", "a header line that is not NAME: VALUE"},
      {"GET /metrics HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n", "a folded header line"},
      {"GET /metrics HTTP/1.1\r\nA: b\x01\r\n\r\n", "a control byte in a header line"},
      {"GET /me\rtrics HTTP/1.1\r\n\r\n", "a control byte in the request line"},
  };
  for (const Case& c : cases) {
    const HttpHead h = ParseHttpHead(c.text, 8192);
    EXPECT_EQ(h.state, State::kBad) << c.text;
    EXPECT_EQ(h.error, c.error) << c.text;
  }
}

TEST(HttpHead, ABadRequestLineOrBinaryIsBadBeforeTheHeadEnds) {
  // Nobody waits for the rest of a head that is already wrong.
  EXPECT_EQ(ParseHttpHead("garbage\r\nHost: x\r\n", 8192).state, State::kBad);
  const HttpHead binary = ParseHttpHead(std::string("\x16\x03\x01\x02\x00", 5), 8192);
  EXPECT_EQ(binary.state, State::kBad);
  EXPECT_EQ(binary.error, "a control byte in the request head");
}

TEST(HttpHead, AHeadLongerThanTheCapIsBad) {
  const std::string line = "GET /metrics HTTP/1.1\r\n";
  // The cap counts the whole head, blank line included: 64 bytes fit 64.
  const std::string fits = line + "X: " + std::string(64 - line.size() - 7, 'a') + "\r\n\r\n";
  ASSERT_EQ(fits.size(), 64u);
  EXPECT_EQ(ParseHttpHead(fits, 64).state, State::kComplete);
  const HttpHead over = ParseHttpHead(line + "X: " + std::string(64 - line.size() - 6, 'a') + "\r\n\r\n", 64);
  EXPECT_EQ(over.state, State::kBad);
  EXPECT_EQ(over.error, "the request head is longer than 64 bytes");
  // Without the blank line: bad once more bytes than the cap came.
  const std::string long_line = line + "X: " + std::string(100, 'a');
  EXPECT_EQ(ParseHttpHead(long_line.substr(0, 64), 64).state, State::kIncomplete);
  EXPECT_EQ(ParseHttpHead(long_line.substr(0, 65), 64).state, State::kBad);
  EXPECT_EQ(ParseHttpHead(std::string(65, '\n'), 64).state, State::kBad);
}

TEST(HttpResponse, FormatsStatusHeadersAndBody) {
  HttpResponse r;
  r.status = 405;
  r.headers.emplace_back("Allow", "GET");
  r.body = "method not allowed\n";
  EXPECT_EQ(FormatHttpResponse(r),
            "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 19\r\nConnection: close\r\nAllow: GET\r\n\r\nmethod not allowed\n");
  HttpResponse ok;
  ok.body = "ok\n";
  EXPECT_EQ(FormatHttpResponse(ok),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\n"
            "Connection: close\r\n\r\nok\n");
}

// The address and port an HttpAddress holds, as "a.b.c.d:port" / "[v6]:port".
std::string AddressText(const HttpAddress& a) {
  char host[INET6_ADDRSTRLEN] = {};
  if (a.addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a.addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  const auto* in = reinterpret_cast<const sockaddr_in*>(&a.addr);
  inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
  return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
}

TEST(HttpAddress, PortAloneIsLoopbackAndHostsAreParsed) {
  struct Case {
    const char* text;
    const char* parsed;
  };
  const Case cases[] = {
      {"9464", "127.0.0.1:9464"},      {"0", "127.0.0.1:0"},
      {"localhost:80", "127.0.0.1:80"}, {"0.0.0.0:9464", "0.0.0.0:9464"},
      {"10.1.2.3:65535", "10.1.2.3:65535"}, {"[::1]:9464", "[::1]:9464"},
      {"[::]:1", "[::]:1"},             {"127.0.0.1:009464", "127.0.0.1:9464"},
  };
  for (const Case& c : cases) {
    Result<HttpAddress> a = ParseHttpAddress(c.text);
    ASSERT_TRUE(a.ok()) << c.text << ": " << a.status().ToString();
    EXPECT_EQ(AddressText(*a), c.parsed);
  }
}

TEST(HttpAddress, BadAddressesAndPortsAreInvalidArgument) {
  for (const char* text : {"", ":9464", "65536", "99999999999999999999999", "-1", "9464x",
                           "host.example:9464", "1.2.3:80", "::1:9464", "[::1]", "[::1]9464",
                           "[zz]:1", "127.0.0.1:", "127.0.0.1: 80", " 9464"}) {
    Result<HttpAddress> a = ParseHttpAddress(text);
    ASSERT_FALSE(a.ok()) << text;
    EXPECT_TRUE(a.status().IsInvalidArgument()) << text;
    EXPECT_NE(a.status().message().find("is not HOST:PORT or PORT"), std::string::npos)
        << a.status().message();
  }
}

}  // namespace
}  // namespace kvtier::server
