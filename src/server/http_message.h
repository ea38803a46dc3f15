// HTTP/1.1 messages as the daemon's HTTP endpoint (http_endpoint.h) reads
// and writes them: the head of one request, parsed from the bytes a
// connection has received so far, and the text of one response. Only what
// GET /metrics and /healthz need: the request line and well-formed header
// lines (their values are not used); no bodies, no keep-alive (every
// response says Connection: close).
//
// Thread safety: plain values and pure functions.
#ifndef KVTIER_SERVER_HTTP_MESSAGE_H_
#define KVTIER_SERVER_HTTP_MESSAGE_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvtier::server {

struct HttpRequest {
  std::string method;  // as sent ("GET"): methods are case-sensitive
  std::string target;  // as sent ("/metrics?x=1")
  std::string path;    // the target up to '?' or '#' ("/metrics")
};

// What the bytes received so far are.
struct HttpHead {
  enum class State {
    kIncomplete,  // no blank line yet, and nothing wrong so far: read on
    kComplete,    // `request` holds the request line
    kBad,         // `error` says why: answer 400 and close
  };
  State state = State::kIncomplete;
  HttpRequest request;
  std::string error;
};

// Parses `received` (everything a connection has sent so far). A head is
// the request line and header lines, each ended by CRLF (or a bare LF),
// then an empty line; empty lines before the request line are skipped. The
// request line is `METHOD SP TARGET SP HTTP/1.0|HTTP/1.1`, TARGET starting
// with '/'. kBad for anything else, a control byte (other than CR, LF and
// tab), a header line without a name and ':', a folded header line, or a
// head longer than `max_head_bytes` (reported as soon as that many bytes
// came without the blank line). A request line that is complete and bad
// is kBad before the head is.
HttpHead ParseHttpHead(std::string_view received, size_t max_head_bytes);

struct HttpResponse {
  int status = 200;  // 200, 400, 404, 405 or 503 (others print "Status")
  std::string content_type = "text/plain; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;  // extra, e.g. {"Allow", "GET"}
  std::string body;
};

// The response's bytes: status line, Content-Type, Content-Length,
// Connection: close, the extra headers, a blank line, the body.
std::string FormatHttpResponse(const HttpResponse& response);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_HTTP_MESSAGE_H_
