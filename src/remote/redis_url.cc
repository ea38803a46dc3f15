#include "kvtier/redis_url.h"

#include <charconv>

namespace kvtier::remote {
namespace {

constexpr std::string_view kSingleScheme = "redis://";
constexpr std::string_view kClusterScheme = "redis-cluster://";
constexpr std::string_view kTlsSingleScheme = "rediss://";
constexpr std::string_view kTlsClusterScheme = "rediss-cluster://";
constexpr size_t kMaxHostBytes = 255;
constexpr size_t kMaxClusterSeeds = 64;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> PercentDecode(std::string_view in, std::string_view what) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) {
      return Status::InvalidArgument("url: truncated %-escape in the " + std::string(what));
    }
    const int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0) {
      return Status::InvalidArgument("url: bad %-escape in the " + std::string(what));
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

Result<uint16_t> ParsePort(std::string_view text) {
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v == 0 || v > 65535) {
    return Status::InvalidArgument("bad port '" + std::string(text.substr(0, 16)) +
                                   "' (expected 1..65535)");
  }
  return static_cast<uint16_t>(v);
}

bool ValidHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

// "host", "host:port", "[v6]" or "[v6]:port" of a URL (brackets required
// around IPv6 there). `default_port` 0 = a port is required.
Result<NodeAddress> ParseUrlHostPort(std::string_view text, uint16_t default_port) {
  NodeAddress a;
  std::string_view port_text;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return Status::InvalidArgument("unclosed '[' in host");
    a.host = std::string(text.substr(1, close - 1));
    for (char c : a.host) {
      if (HexValue(c) < 0 && c != ':' && c != '.') {
        return Status::InvalidArgument("bad IPv6 address '" + a.host + "'");
      }
    }
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Status::InvalidArgument("junk after ']' in host");
      port_text = rest.substr(1);
      has_port = true;
    }
  } else {
    const size_t colon = text.find(':');
    a.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = text.substr(colon + 1);
      has_port = true;
    }
    for (char c : a.host) {
      if (!ValidHostChar(c)) {
        return Status::InvalidArgument("bad character in host '" + a.host.substr(0, 64) + "'");
      }
    }
  }
  if (a.host.empty()) return Status::InvalidArgument("empty host");
  if (a.host.size() > kMaxHostBytes) return Status::InvalidArgument("host longer than 255 bytes");
  if (has_port) {
    KVTIER_ASSIGN_OR_RETURN(a.port, ParsePort(port_text));
  } else if (default_port != 0) {
    a.port = default_port;
  } else {
    return Status::InvalidArgument("'" + a.host + "' has no port (host:port)");
  }
  return a;
}

}  // namespace

std::string NodeAddress::ToString() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string RedisUrl::Redacted() const {
  std::string out(mode == RedisMode::kSingle ? (tls ? kTlsSingleScheme : kSingleScheme)
                                             : (tls ? kTlsClusterScheme : kClusterScheme));
  if (has_password) out += user + ":***@";
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i > 0) out += ",";
    out += nodes[i].ToString();
  }
  if (mode == RedisMode::kSingle && db != 0) out += "/" + std::to_string(db);
  return out;
}

Result<RedisUrl> ParseRedisUrl(std::string_view url) {
  RedisUrl r;
  std::string_view rest;
  const struct {
    std::string_view scheme;
    RedisMode mode;
    bool tls;
  } kSchemes[] = {{kSingleScheme, RedisMode::kSingle, false},
                  {kClusterScheme, RedisMode::kCluster, false},
                  {kTlsSingleScheme, RedisMode::kSingle, true},
                  {kTlsClusterScheme, RedisMode::kCluster, true}};
  bool known = false;
  for (const auto& k : kSchemes) {
    if (url.starts_with(k.scheme)) {
      r.mode = k.mode;
      r.tls = k.tls;
      rest = url.substr(k.scheme.size());
      known = true;
      break;
    }
  }
  if (!known) {
    return Status::InvalidArgument(
        "url: expected redis://[[user]:password@]host[:port][/db] or "
        "redis-cluster://host:port[,host:port...] (rediss:// and rediss-cluster:// for TLS)");
  }
  // Credentials end at the last '@' (a host never holds one), so an
  // unescaped '@' in a password still parses.
  const size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = cred.find(':');
    if (colon == std::string_view::npos) {
      return Status::InvalidArgument(
          "url: credentials must be [user]:password@ (a ':' before the password)");
    }
    KVTIER_ASSIGN_OR_RETURN(r.user, PercentDecode(cred.substr(0, colon), "user"));
    KVTIER_ASSIGN_OR_RETURN(r.password, PercentDecode(cred.substr(colon + 1), "password"));
    r.has_password = true;
  }
  if (r.mode == RedisMode::kSingle) {
    std::string_view hostport = rest;
    const size_t slash = rest.find('/');
    if (slash != std::string_view::npos) {
      hostport = rest.substr(0, slash);
      std::string_view db = rest.substr(slash + 1);
      uint64_t v = 0;
      auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), v);
      if (db.empty() || ec != std::errc() || p != db.data() + db.size() || v > INT32_MAX) {
        return Status::InvalidArgument("url: bad database number '" +
                                       std::string(db.substr(0, 16)) + "' after '/'");
      }
      r.db = static_cast<uint32_t>(v);
    }
    Result<NodeAddress> a = ParseUrlHostPort(hostport, 6379);
    if (!a.ok()) return Status::InvalidArgument("url: " + a.status().message());
    r.nodes.push_back(std::move(a).value());
    return r;
  }
  if (rest.find('/') != std::string_view::npos) {
    return Status::InvalidArgument(
        "url: a redis-cluster:// or rediss-cluster:// URL has no /db (Cluster has db 0 only)");
  }
  while (true) {
    const size_t comma = rest.find(',');
    Result<NodeAddress> a = ParseUrlHostPort(rest.substr(0, comma), 0);
    if (!a.ok()) return Status::InvalidArgument("url: seed: " + a.status().message());
    r.nodes.push_back(std::move(a).value());
    if (r.nodes.size() > kMaxClusterSeeds) {
      return Status::InvalidArgument("url: more than 64 cluster seeds");
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return r;
}

Result<NodeAddress> ParseHostPort(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return Status::InvalidArgument("no ':' in address '" + std::string(text.substr(0, 64)) + "'");
  }
  NodeAddress a;
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.size() > kMaxHostBytes) return Status::InvalidArgument("host longer than 255 bytes");
  for (char c : host) {
    if (!ValidHostChar(c) && c != ':') {
      return Status::InvalidArgument("bad character in address '" +
                                     std::string(text.substr(0, 64)) + "'");
    }
  }
  a.host = std::string(host);
  KVTIER_ASSIGN_OR_RETURN(a.port, ParsePort(text.substr(colon + 1)));
  return a;
}

}  // namespace kvtier::remote
