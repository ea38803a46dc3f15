#include "server/http_message.h"

#include <optional>

namespace kvtier::server {
namespace {

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

// A byte no request head holds: controls other than tab (CR and LF end
// lines and are checked where lines are cut).
bool HasControlByte(std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f) return true;
  }
  return false;
}

struct Line {
  std::string_view text;  // without its CR LF (or LF)
  size_t next;            // where the next line starts
};

std::optional<Line> NextLine(std::string_view s, size_t pos) {
  const size_t lf = s.find('\n', pos);
  if (lf == std::string_view::npos) return std::nullopt;
  size_t end = lf;
  if (end > pos && s[end - 1] == '\r') --end;
  return Line{s.substr(pos, end - pos), lf + 1};
}

HttpHead Bad(std::string why) {
  HttpHead h;
  h.state = HttpHead::State::kBad;
  h.error = std::move(why);
  return h;
}

// "" when `line` is a request line we serve; else why not.
std::string ParseRequestLine(std::string_view line, HttpRequest* r) {
  if (HasControlByte(line) || line.find('\r') != std::string_view::npos) {
    return "a control byte in the request line";
  }
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return "the request line is not METHOD TARGET HTTP/1.1";
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(method)) return "the method is not a token";
  if (target.empty() || target[0] != '/') return "the target is not a path starting with '/'";
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return "the version is not HTTP/1.0 or HTTP/1.1";
  r->method = std::string(method);
  r->target = std::string(target);
  r->path = std::string(target.substr(0, target.find_first_of("?#")));
  return "";
}

// What is left after the last complete line: wrong already, or wait.
HttpHead Unfinished(std::string_view received, size_t pos, size_t max_head_bytes) {
  if (HasControlByte(received.substr(pos))) return Bad("a control byte in the request head");
  if (received.size() > max_head_bytes) {
    return Bad("the request head is longer than " + std::to_string(max_head_bytes) + " bytes");
  }
  return HttpHead{};
}

std::string_view Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
  }
  return "Status";
}

}  // namespace

HttpHead ParseHttpHead(std::string_view received, size_t max_head_bytes) {
  size_t pos = 0;
  // Empty lines before the request line are skipped (RFC 9112 §2.2).
  for (;;) {
    if (received.substr(pos, 1) == "\n") {
      pos += 1;
    } else if (received.substr(pos, 2) == "\r\n") {
      pos += 2;
    } else {
      break;
    }
  }
  const std::optional<Line> first = NextLine(received, pos);
  if (!first) return Unfinished(received, pos, max_head_bytes);
  if (first->next > max_head_bytes) {
    return Bad("the request head is longer than " + std::to_string(max_head_bytes) + " bytes");
  }
  HttpHead head;
  if (std::string why = ParseRequestLine(first->text, &head.request); !why.empty()) {
    return Bad(std::move(why));
  }
  pos = first->next;
  for (;;) {
    const std::optional<Line> line = NextLine(received, pos);
    if (!line) return Unfinished(received, pos, max_head_bytes);
    if (line->next > max_head_bytes) {
      return Bad("the request head is longer than " + std::to_string(max_head_bytes) + " bytes");
    }
    const std::string_view text = line->text;
    if (text.empty()) {
      head.state = HttpHead::State::kComplete;
      return head;
    }
    if (text[0] == ' ' || text[0] == '\t') return Bad("a folded header line");
    if (HasControlByte(text) || text.find('\r') != std::string_view::npos) {
      return Bad("a control byte in a header line");
    }
    const size_t colon = text.find(':');
    if (colon == std::string_view::npos || !IsToken(text.substr(0, colon))) {
      return Bad("a header line that is not NAME: VALUE");
    }
    pos = line->next;
  }
}

std::string FormatHttpResponse(const HttpResponse& response) {
  std::string out = "HTTP/1.1 " + std::to_string(response.status) + " ";
  out += Reason(response.status);
  out += "\r\nContent-Type: " + response.content_type;
  out += "\r\nContent-Length: " + std::to_string(response.body.size());
  out += "\r\nConnection: close\r\n";
  for (const auto& [name, value] : response.headers) out += name + ": " + value + "\r\n";
  out += "\r\n";
  out += response.body;
  return out;
}

}  // namespace kvtier::server
