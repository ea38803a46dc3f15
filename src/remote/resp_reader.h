// Strict RESP2 reply reading over a ReplySource.
//
// Replies are read by kvtier itself, not by hiredis's redisReader: that
// reader (0.14) allocates an array of the announced element count before
// any element arrives and buffers every bulk string whole in its own
// buffer, so a hostile or broken server could make it allocate gigabytes,
// and GET data would be copied twice. Here every count and length is checked
// against a bound first, GET payloads go straight from the socket into the
// caller's buffer (ReplySource::ReadExact), and anything unexpected — an
// unknown type byte, a malformed or out-of-range number, a missing CRLF, a
// RESP3 type — is a protocol error (a Corruption status) after which the
// connection is dropped.
//
// Thread safety: functions on a caller-owned source.
#ifndef KVTIER_REMOTE_RESP_READER_H_
#define KVTIER_REMOTE_RESP_READER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/redis_url.h"
#include "kvtier/status.h"

namespace kvtier::remote {

// Longest status or error line accepted (Redis's are far shorter).
inline constexpr size_t kMaxReplyLineBytes = 64 * 1024;

// Where reply bytes come from: a Connection, or memory in tests. Each call
// either delivers exactly what it promises or fails (timeout, closed
// socket, protocol error); after a failure the source is unusable.
class ReplySource {
 public:
  virtual ~ReplySource() = default;
  // The next line without its "\r\n". The view lives until the next call.
  // Corruption if no "\r\n" comes within `max_bytes` bytes or a bare '\r'
  // or '\n' appears.
  virtual Result<std::string_view> ReadLine(size_t max_bytes) = 0;
  // Exactly dst.size() bytes into dst.
  virtual Status ReadExact(std::span<std::byte> dst) = 0;
  // Reads and drops exactly n bytes.
  virtual Status Skip(uint64_t n) = 0;
};

enum class ReplyType : uint8_t {
  kStatus,   // +OK
  kError,    // -ERR ...
  kInteger,  // :5
  kBulk,     // $n (body follows)
  kArray,    // *n (n replies follow)
  kNull,     // $-1 or *-1
};

struct ReplyHead {
  ReplyType type = ReplyType::kNull;
  int64_t number = 0;     // kInteger: the value; kBulk/kArray: the length
  std::string_view text;  // kStatus/kError: the line after the type byte
};

// The bounds a reply head is checked against.
struct ReplyLimits {
  uint64_t max_bulk_bytes = 0;   // a longer bulk string is a protocol error
  uint64_t max_array_items = 0;  // a longer array is a protocol error
};

// Reads the first line of a reply. For kBulk the caller then reads exactly
// `number` bytes and ReadBulkEnd(); for kArray, `number` replies follow.
Result<ReplyHead> ReadReplyHead(ReplySource& src, const ReplyLimits& limits);
// Reads the "\r\n" after a bulk string's bytes (Corruption if absent).
Status ReadBulkEnd(ReplySource& src);
// Skips the body of a reply whose head was read: a bulk's bytes and CRLF,
// or an array's items (recursively, each checked against `limits`, nested
// at most `max_depth` deep).
Status SkipReplyBody(ReplySource& src, const ReplyHead& head, const ReplyLimits& limits,
                     int max_depth = 4);

// A parsed error reply.
enum class ServerErrorKind : uint8_t {
  kMoved,        // MOVED <slot> <host:port>
  kAsk,          // ASK <slot> <host:port>
  kTryAgain,     // TRYAGAIN (multi-key command during a slot migration)
  kClusterDown,  // CLUSTERDOWN
  kLoading,      // LOADING (the server is loading its dataset)
  kOom,          // OOM (maxmemory reached with a noeviction policy)
  kNoAuth,       // NOAUTH (a password is required)
  kWrongPass,    // WRONGPASS
  kNoPerm,       // NOPERM (ACL refuses the command or key)
  kWrongType,    // WRONGTYPE (the key holds another type)
  kExecAbort,    // EXECABORT (a queued command failed)
  kOther,
};

struct ServerError {
  ServerErrorKind kind = ServerErrorKind::kOther;
  uint16_t slot = 0;              // kMoved, kAsk
  std::optional<NodeAddress> to;  // kMoved, kAsk (host may be empty: "the same host")
  std::string message;            // the line, at most 200 bytes
};

// Classifies an error line (without the '-'). A MOVED/ASK line that does
// not parse is kOther.
ServerError ParseServerError(std::string_view line);

// A whole reply, for small replies of unknown shape (CLUSTER SHARDS,
// CLUSTER SLOTS).
struct RespValue {
  ReplyType type = ReplyType::kNull;
  int64_t integer = 0;
  std::string str;               // kStatus, kError, kBulk
  std::vector<RespValue> items;  // kArray
};

struct ValueLimits {
  uint64_t max_bulk_bytes = 64 * 1024;
  uint64_t max_items_total = 200'000;  // array items over the whole reply
  uint64_t max_bytes_total = 16u << 20;
  int max_depth = 8;
};

// Reads one whole reply within `limits` (Corruption past any of them).
Result<RespValue> ReadValue(ReplySource& src, const ValueLimits& limits);

// Parses a RESP integer field ("-1", "0", "42"): an optional '-', then 1 to
// 19 digits without leading zeros. nullopt otherwise.
std::optional<int64_t> ParseRespInteger(std::string_view text);

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_RESP_READER_H_
