#include "remote/resp_reader.h"

#include <array>
#include <charconv>

namespace kvtier::remote {
namespace {

Status ProtocolError(std::string what) { return Status::Corruption("protocol error: " + what); }

std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) {
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  return out;
}

struct ValueReader {
  ReplySource& src;
  const ValueLimits& limits;
  uint64_t items = 0;
  uint64_t bytes = 0;

  Result<RespValue> Read(int depth) {
    ReplyLimits head_limits{limits.max_bulk_bytes, limits.max_items_total};
    KVTIER_ASSIGN_OR_RETURN(ReplyHead head, ReadReplyHead(src, head_limits));
    RespValue v;
    v.type = head.type;
    switch (head.type) {
      case ReplyType::kStatus:
      case ReplyType::kError:
        v.str = std::string(head.text);
        bytes += v.str.size();
        break;
      case ReplyType::kInteger:
        v.integer = head.number;
        break;
      case ReplyType::kNull:
        break;
      case ReplyType::kBulk: {
        bytes += static_cast<uint64_t>(head.number);
        if (bytes > limits.max_bytes_total) return ProtocolError("reply larger than expected");
        v.str.resize(static_cast<size_t>(head.number));
        KVTIER_RETURN_IF_ERROR(src.ReadExact(std::as_writable_bytes(std::span(v.str))));
        KVTIER_RETURN_IF_ERROR(ReadBulkEnd(src));
        break;
      }
      case ReplyType::kArray: {
        if (depth >= limits.max_depth) return ProtocolError("reply nested too deep");
        items += static_cast<uint64_t>(head.number);
        if (items > limits.max_items_total) return ProtocolError("reply has too many items");
        v.items.reserve(static_cast<size_t>(head.number));
        for (int64_t i = 0; i < head.number; ++i) {
          KVTIER_ASSIGN_OR_RETURN(RespValue item, Read(depth + 1));
          v.items.push_back(std::move(item));
        }
        break;
      }
    }
    if (bytes > limits.max_bytes_total) return ProtocolError("reply larger than expected");
    return v;
  }
};

}  // namespace

std::optional<int64_t> ParseRespInteger(std::string_view text) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '-') digits.remove_prefix(1);
  if (digits.empty() || digits.size() > 19) return std::nullopt;
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  if (v == 0 && text.front() == '-') return std::nullopt;  // "-0"
  return v;
}

Result<ReplyHead> ReadReplyHead(ReplySource& src, const ReplyLimits& limits) {
  KVTIER_ASSIGN_OR_RETURN(std::string_view line, src.ReadLine(kMaxReplyLineBytes));
  if (line.empty()) return ProtocolError("empty reply line");
  ReplyHead h;
  const char type = line.front();
  std::string_view rest = line.substr(1);
  switch (type) {
    case '+':
      h.type = ReplyType::kStatus;
      h.text = rest;
      return h;
    case '-':
      h.type = ReplyType::kError;
      h.text = rest;
      return h;
    case ':': {
      std::optional<int64_t> v = ParseRespInteger(rest);
      if (!v) return ProtocolError("bad integer reply '" + Printable(rest) + "'");
      h.type = ReplyType::kInteger;
      h.number = *v;
      return h;
    }
    case '$':
    case '*': {
      std::optional<int64_t> v = ParseRespInteger(rest);
      if (!v || *v < -1) {
        return ProtocolError(std::string("bad length in '") + type + Printable(rest) + "'");
      }
      if (*v == -1) {
        h.type = ReplyType::kNull;
        return h;
      }
      const uint64_t n = static_cast<uint64_t>(*v);
      if (type == '$') {
        if (n > limits.max_bulk_bytes) {
          return ProtocolError("bulk reply of " + std::to_string(n) + " bytes, more than the " +
                               std::to_string(limits.max_bulk_bytes) + " expected");
        }
        h.type = ReplyType::kBulk;
      } else {
        if (n > limits.max_array_items) {
          return ProtocolError("array reply of " + std::to_string(n) + " items, more than the " +
                               std::to_string(limits.max_array_items) + " expected");
        }
        h.type = ReplyType::kArray;
      }
      h.number = *v;
      return h;
    }
    default:
      return ProtocolError("unexpected reply type byte '" + Printable(line.substr(0, 1)) + "'");
  }
}

Status ReadBulkEnd(ReplySource& src) {
  std::array<std::byte, 2> crlf;
  KVTIER_RETURN_IF_ERROR(src.ReadExact(crlf));
  if (crlf[0] != std::byte{'\r'} || crlf[1] != std::byte{'\n'}) {
    return ProtocolError("bulk reply not followed by CRLF");
  }
  return Status::Ok();
}

Status SkipReplyBody(ReplySource& src, const ReplyHead& head, const ReplyLimits& limits,
                     int max_depth) {
  if (head.type == ReplyType::kBulk) {
    KVTIER_RETURN_IF_ERROR(src.Skip(static_cast<uint64_t>(head.number)));
    return ReadBulkEnd(src);
  }
  if (head.type != ReplyType::kArray) return Status::Ok();
  if (max_depth <= 0) return ProtocolError("reply nested too deep");
  for (int64_t i = 0; i < head.number; ++i) {
    KVTIER_ASSIGN_OR_RETURN(ReplyHead item, ReadReplyHead(src, limits));
    KVTIER_RETURN_IF_ERROR(SkipReplyBody(src, item, limits, max_depth - 1));
  }
  return Status::Ok();
}

ServerError ParseServerError(std::string_view line) {
  ServerError e;
  e.message = std::string(line.substr(0, 200));
  const size_t space = line.find(' ');
  const std::string_view code = line.substr(0, space);
  struct Code {
    std::string_view name;
    ServerErrorKind kind;
  };
  static constexpr Code kCodes[] = {
      {"MOVED", ServerErrorKind::kMoved},         {"ASK", ServerErrorKind::kAsk},
      {"TRYAGAIN", ServerErrorKind::kTryAgain},   {"CLUSTERDOWN", ServerErrorKind::kClusterDown},
      {"LOADING", ServerErrorKind::kLoading},     {"OOM", ServerErrorKind::kOom},
      {"NOAUTH", ServerErrorKind::kNoAuth},       {"WRONGPASS", ServerErrorKind::kWrongPass},
      {"NOPERM", ServerErrorKind::kNoPerm},       {"WRONGTYPE", ServerErrorKind::kWrongType},
      {"EXECABORT", ServerErrorKind::kExecAbort},
  };
  for (const Code& c : kCodes) {
    if (code == c.name) e.kind = c.kind;
  }
  if (e.kind != ServerErrorKind::kMoved && e.kind != ServerErrorKind::kAsk) return e;
  // "<slot> <host:port>"
  std::string_view rest = space == std::string_view::npos ? "" : line.substr(space + 1);
  const size_t sp = rest.find(' ');
  std::optional<int64_t> slot = ParseRespInteger(rest.substr(0, sp));
  if (!slot || *slot < 0 || *slot >= 16384 || sp == std::string_view::npos) {
    e.kind = ServerErrorKind::kOther;
    return e;
  }
  std::string_view addr = rest.substr(sp + 1);
  Result<NodeAddress> to = [&]() -> Result<NodeAddress> {
    if (addr.starts_with(":")) {  // "the host you asked" (no announced address)
      NodeAddress a;
      Result<NodeAddress> p = ParseHostPort("x" + std::string(addr));
      if (!p.ok()) return p.status();
      a.port = p->port;
      return a;
    }
    return ParseHostPort(addr);
  }();
  if (!to.ok()) {
    e.kind = ServerErrorKind::kOther;
    return e;
  }
  e.slot = static_cast<uint16_t>(*slot);
  e.to = std::move(to).value();
  return e;
}

Result<RespValue> ReadValue(ReplySource& src, const ValueLimits& limits) {
  ValueReader r{src, limits};
  return r.Read(0);
}

}  // namespace kvtier::remote
