#include "replay/trace_reader.h"

#include <memory>
#include <optional>
#include <utility>

#include "core/json_strict.h"

namespace kvtier::replay {
namespace {

using internal::JsonDocument;
using internal::JsonElements;
using internal::JsonError;
using internal::JsonKind;
using internal::JsonMembers;
using internal::JsonNode;

constexpr size_t kReadChunk = size_t{1} << 20;
constexpr size_t kQuoteMax = 40;  // bytes of bad input quoted in a message

Status LineError(uint64_t line_number, const std::string& what) {
  return Status::InvalidArgument("line " + std::to_string(line_number) + ": " + what);
}

std::string Quote(std::string_view text) {
  std::string out;
  internal::AppendJsonString(text.substr(0, kQuoteMax), &out);
  if (text.size() > kQuoteMax) out.insert(out.size() - 1, "...");
  return out;
}

// The field's value as a bounded non-negative integer, or a message.
Result<uint64_t> ReadUint(const JsonNode& node, std::string_view field, uint64_t max,
                          uint64_t line_number) {
  std::optional<uint64_t> v = internal::JsonUint64(node);
  if (!v.has_value()) {
    std::string got = node.kind == JsonKind::kNumber   ? std::string(node.text.substr(0, kQuoteMax))
                      : node.kind == JsonKind::kString ? "a string"
                      : node.kind == JsonKind::kArray  ? "an array"
                      : node.kind == JsonKind::kObject ? "an object"
                                                       : "null or a boolean";
    return LineError(line_number, std::string(field) +
                                      " must be a non-negative integer (plain digits), got " + got);
  }
  if (*v > max) {
    return LineError(line_number, std::string(field) + " " + std::to_string(*v) +
                                      " is over the limit of " + std::to_string(max));
  }
  return *v;
}

// Accumulates parsed lines and enforces the whole-trace limits.
class TraceBuilder {
 public:
  explicit TraceBuilder(const TraceReadOptions& options) : options_(options) {}

  bool full() const { return requests_.size() >= options_.max_requests; }

  Status AddLine(std::string_view line) {
    ++line_number_;
    if (line.size() > options_.max_line_bytes) return TooLong();
    KVTIER_ASSIGN_OR_RETURN(TraceRequest r, ParseTraceLine(line, line_number_, options_));
    total_blocks_ += r.hash_ids.size();
    if (total_blocks_ > options_.max_total_blocks) {
      return LineError(line_number_, "the trace holds more than " +
                                         std::to_string(options_.max_total_blocks) +
                                         " hash ids in all (the limit)");
    }
    requests_.push_back(std::move(r));
    return Status::Ok();
  }

  // A line still growing past the limit (reading in chunks).
  Status TooLongPending() {
    ++line_number_;
    return TooLong();
  }

  Result<std::vector<TraceRequest>> Finish() {
    if (requests_.empty()) return Status::InvalidArgument("the trace holds no request");
    return std::move(requests_);
  }

 private:
  Status TooLong() const {
    return LineError(line_number_, "longer than the limit of " +
                                       std::to_string(options_.max_line_bytes) + " bytes");
  }

  const TraceReadOptions& options_;
  std::vector<TraceRequest> requests_;
  uint64_t line_number_ = 0;
  uint64_t total_blocks_ = 0;
};

// Feeds the complete lines of `text` to `builder`; returns the offset where
// the unfinished last line starts (text.size() if none).
Result<size_t> FeedLines(std::string_view text, TraceBuilder* builder) {
  size_t start = 0;
  while (start < text.size() && !builder->full()) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) break;
    KVTIER_RETURN_IF_ERROR(builder->AddLine(text.substr(start, nl - start)));
    start = nl + 1;
  }
  return start;
}

}  // namespace

Result<TraceRequest> ParseTraceLine(std::string_view line, uint64_t line_number,
                                    const TraceReadOptions& options) {
  if (line.size() > options.max_line_bytes) {
    return LineError(line_number, "longer than the limit of " +
                                      std::to_string(options.max_line_bytes) + " bytes");
  }
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
    return LineError(line_number, "empty line (expected one JSON object a line)");
  }
  size_t bad = 0;
  if (!internal::IsStrictUtf8(line, &bad)) {
    return LineError(line_number, "not UTF-8 at byte " + std::to_string(bad + 1));
  }
  JsonDocument doc;
  JsonError err;
  // An object holding one array of numbers: depth 2.
  if (!doc.Parse(line, 2, &err)) {
    return LineError(line_number, "not a JSON object of scalars and one array: " + err.message +
                                      " at byte " + std::to_string(err.offset + 1));
  }
  if (doc.root().kind != JsonKind::kObject) {
    return LineError(line_number, "expected a JSON object");
  }
  TraceRequest r;
  bool has_timestamp = false, has_input = false, has_output = false, has_ids = false;
  for (auto [k, v] : JsonMembers(doc, 0)) {
    const std::string_view name = doc.node(k).text;
    const JsonNode& value = doc.node(v);
    if (name == "timestamp") {
      KVTIER_ASSIGN_OR_RETURN(r.timestamp, ReadUint(value, name, UINT64_MAX, line_number));
      has_timestamp = true;
    } else if (name == "input_length") {
      KVTIER_ASSIGN_OR_RETURN(r.input_length, ReadUint(value, name, kMaxTraceLength, line_number));
      has_input = true;
    } else if (name == "output_length") {
      KVTIER_ASSIGN_OR_RETURN(r.output_length, ReadUint(value, name, kMaxTraceLength, line_number));
      has_output = true;
    } else if (name == "hash_ids") {
      if (value.kind != JsonKind::kArray) {
        return LineError(line_number, "hash_ids must be an array of non-negative integers");
      }
      if (value.count > options.max_blocks_per_request) {
        return LineError(line_number, "hash_ids has " + std::to_string(value.count) +
                                          " entries, over the limit of " +
                                          std::to_string(options.max_blocks_per_request));
      }
      r.hash_ids.reserve(value.count);
      uint64_t index = 0;
      for (uint32_t e : JsonElements(doc, v)) {
        std::optional<uint64_t> id = internal::JsonUint64(doc.node(e));
        if (!id.has_value()) {
          const JsonNode& n = doc.node(e);
          return LineError(
              line_number,
              "hash_ids[" + std::to_string(index) +
                  "] must be a non-negative integer below 2^64 (plain digits), got " +
                  (n.kind == JsonKind::kNumber ? std::string(n.text.substr(0, kQuoteMax))
                                               : std::string("a non-number")));
        }
        r.hash_ids.push_back(*id);
        ++index;
      }
      has_ids = true;
    } else {
      return LineError(line_number, "unknown field " + Quote(name) +
                                        " (expected timestamp, input_length, output_length, "
                                        "hash_ids)");
    }
  }
  const char* missing = !has_timestamp ? "timestamp"
                        : !has_input   ? "input_length"
                        : !has_output  ? "output_length"
                        : !has_ids     ? "hash_ids"
                                       : nullptr;
  if (missing != nullptr) return LineError(line_number, std::string("missing field ") + missing);
  return r;
}

Result<std::vector<TraceRequest>> ParseTrace(std::string_view text,
                                             const TraceReadOptions& options) {
  TraceBuilder builder(options);
  KVTIER_ASSIGN_OR_RETURN(size_t rest, FeedLines(text, &builder));
  if (rest < text.size() && !builder.full()) {
    KVTIER_RETURN_IF_ERROR(builder.AddLine(text.substr(rest)));
  }
  return builder.Finish();
}

Result<std::vector<TraceRequest>> ReadTrace(Env* env, const std::string& path,
                                            const TraceReadOptions& options) {
  auto with_path = [&path](const Status& s) { return s.WithContext(path); };
  Result<FileInfo> info = env->Stat(path);
  if (!info.ok()) return with_path(info.status());
  if (info->type != FileType::kRegular && info->type != FileType::kSymlink) {
    return Status::InvalidArgument(path + ": not a regular file");
  }
  ReadFileOptions ropts;
  ropts.follow_symlinks = true;
  Result<std::unique_ptr<RandomAccessFile>> file = env->OpenForRead(path, ropts);
  if (!file.ok()) return with_path(file.status());

  TraceBuilder builder(options);
  std::string pending;  // bytes after the last newline seen
  std::vector<std::byte> chunk(kReadChunk);
  uint64_t offset = 0;
  while (!builder.full()) {
    Result<size_t> n = (*file)->ReadAt(offset, chunk);
    if (!n.ok()) return with_path(n.status());
    if (*n == 0) break;
    offset += *n;
    pending.append(reinterpret_cast<const char*>(chunk.data()), *n);
    Result<size_t> used = FeedLines(pending, &builder);
    if (!used.ok()) return with_path(used.status());
    pending.erase(0, *used);
    if (!builder.full() && pending.size() > options.max_line_bytes) {
      return with_path(builder.TooLongPending());
    }
  }
  if (!pending.empty() && !builder.full()) {
    Status s = builder.AddLine(pending);
    if (!s.ok()) return with_path(s);
  }
  Result<std::vector<TraceRequest>> out = builder.Finish();
  if (!out.ok()) return with_path(out.status());
  return out;
}

}  // namespace kvtier::replay
