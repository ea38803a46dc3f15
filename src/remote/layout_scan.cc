#include "remote/layout_scan.h"

#include <algorithm>
#include <set>
#include <utility>

#include "kvtier/block_file.h"
#include "remote/block_reader.h"
#include "remote/read_ops.h"
#include "remote/request_buffer.h"
#include "remote/resp_reader.h"

namespace kvtier::remote {
namespace {

using C = RemoteCounters;

// Names per SCAN round trip: the server's hint, not a bound on the reply.
constexpr std::string_view kScanCount = "1000";
// GETRANGE asks for at most this much of a header per round trip.
constexpr uint64_t kRangeStep = 64 * 1024;

// One GETRANGE per key: bytes [have, want) of the value, from the part
// that holds byte `have`. Replies are appended to bytes(i).
class RangeOps final : public OpHandler {
 public:
  RangeOps(const ValueLayout& values, std::vector<std::vector<std::byte>>* bytes,
           const std::vector<uint64_t>* want, RemoteCounters* counters)
      : values_(values), bytes_(bytes), want_(want), counters_(counters) {}

  void AppendRequest(const KeyOp& op, RequestBuffer* out) override {
    const uint64_t have = (*bytes_)[op.index].size();
    const uint64_t p = values_.part_bytes();
    const uint32_t part = static_cast<uint32_t>(have / p);
    const uint64_t from = have % p;
    const uint64_t to = std::min({p, from + kRangeStep, (*want_)[op.index] - part * p});
    out->Command({"GETRANGE", values_.PartName(op.key, part), std::to_string(from),
                  std::to_string(to - 1)});
  }
  uint64_t TransferBytes(const KeyOp& op) override { return 64 + kRangeStep; }
  Result<OpOutcome> ReadReply(const KeyOp& op, Connection* conn) override {
    KVTIER_ASSIGN_OR_RETURN(ReplyHead h, ReadReplyHead(*conn, ReplyLimits{kRangeStep, 0}));
    std::vector<std::byte>& b = (*bytes_)[op.index];
    if (h.type == ReplyType::kBulk) {
      if (h.number == 0) {
        // Gone since the SCAN (an empty string is what GETRANGE answers
        // for a missing key), or shorter than its header says: not a block.
        KVTIER_RETURN_IF_ERROR(ReadBulkEnd(*conn));
        failed_.insert(op.index);
        return OpOutcome{};
      }
      const size_t at = b.size();
      b.resize(at + static_cast<size_t>(h.number));
      KVTIER_RETURN_IF_ERROR(conn->ReadExact(std::span(b).subspan(at)));
      KVTIER_RETURN_IF_ERROR(ReadBulkEnd(*conn));
      return OpOutcome{};
    }
    if (h.type == ReplyType::kError) {
      const ServerError e = ParseServerError(h.text);
      if (std::optional<OpOutcome> r = RedirectFor(e)) return *r;
      C::Add(counters_->error_replies);  // e.g. WRONGTYPE: not a block, kept
    }
    failed_.insert(op.index);
    return OpOutcome{};
  }
  void Fail(const KeyOp& op, OpFailure) override { unanswered_.insert(op.index); }

  std::set<size_t> failed_;      // answered, but not with the bytes asked for
  std::set<size_t> unanswered_;  // no answer (node down, redirects)

 private:
  const ValueLayout& values_;
  std::vector<std::vector<std::byte>>* bytes_;
  const std::vector<uint64_t>* want_;
  RemoteCounters* counters_;
};

// DEL of every possible part, and of the `:mac` name a signed value has.
class EraseOps final : public OpHandler {
 public:
  EraseOps(const ValueLayout& values, size_t n, RemoteCounters* counters)
      : values_(values), inner_(values, n, counters) {}

  void AppendRequest(const KeyOp& op, RequestBuffer* out) override {
    std::vector<std::string> names = values_.PartNames(op.key, values_.max_parts());
    names.push_back(values_.PartName(op.key, 0) + ":mac");
    out->Command("DEL", names);
  }
  uint64_t TransferBytes(const KeyOp& op) override { return inner_.TransferBytes(op) + 80; }
  Result<OpOutcome> ReadReply(const KeyOp& op, Connection* conn) override {
    return inner_.ReadReply(op, conn);
  }
  void Fail(const KeyOp& op, OpFailure why) override { inner_.Fail(op, why); }
  const DeleteOps& result() const { return inner_; }

 private:
  const ValueLayout& values_;
  DeleteOps inner_;
};

}  // namespace

LayoutScan::LayoutScan(const LayoutScanOptions& options, const ValueLayout* values,
                       std::string signature, Router* router, BatchRunner* runner, Env* env,
                       RemoteCounters* counters)
    : options_(options),
      values_(values),
      signature_(std::move(signature)),
      router_(router),
      runner_(runner),
      env_(env),
      counters_(counters) {}

std::string LayoutScan::PatternFor(const std::string& prefix) {
  std::string out;
  for (char c : prefix) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out + "{*}";
}

Result<std::vector<std::shared_ptr<Node>>> LayoutScan::Masters() {
  if (router_->mode() == RedisMode::kCluster) {
    // A fresh map: a master that took slots since the last refresh holds
    // blocks too.
    KVTIER_RETURN_IF_ERROR(router_->Refresh().WithContext("remote: listing the masters"));
  }
  std::vector<std::shared_ptr<Node>> out;
  std::set<const Node*> seen;
  for (uint32_t slot = 0; slot < kClusterSlots; ++slot) {
    std::shared_ptr<Node> n = router_->Route(static_cast<uint16_t>(slot));
    if (n == nullptr) {
      return Status::Unavailable("remote: no node serves slot " + std::to_string(slot) +
                                 ", so its blocks cannot be listed");
    }
    if (seen.insert(n.get()).second) out.push_back(std::move(n));
    if (router_->mode() != RedisMode::kCluster) break;
  }
  return out;
}

Status LayoutScan::ScanNode(Node& node, std::vector<BlockKey>* out) {
  const std::string where = "remote: SCAN of " + node.address.ToString();
  if (node.breaker.Allow(env_->NowMicros()) == CircuitBreaker::Admit::kNo) {
    C::Add(counters_->breaker_rejections);
    return Status::Unavailable(where + ": the node is marked down (circuit breaker open)");
  }
  Result<std::unique_ptr<Connection>> conn = node.pool.Acquire(
      env_->NowMicros() + options_.connect_timeout_micros + options_.command_timeout_micros);
  if (!conn.ok()) {
    if (node.breaker.OnFailure(env_->NowMicros())) C::Add(counters_->breaker_opens);
    return conn.status().WithContext(where);
  }
  Connection& c = **conn;
  const std::string pattern = PatternFor(values_->prefix());
  const size_t name_bytes = values_->prefix().size() + 2 + 64;
  Status s;
  std::string cursor = "0";
  do {
    c.SetDeadline(env_->NowMicros() + options_.command_timeout_micros);
    RequestBuffer req;
    req.Command({"SCAN", cursor, "MATCH", pattern, "COUNT", kScanCount});
    const std::vector<iovec> iov = req.Iovecs();
    s = c.Write(iov);
    if (!s.ok()) break;
    Result<RespValue> v = ReadValue(c, ValueLimits{});
    if (!v.ok()) {
      s = v.status();
      if (s.IsCorruption()) C::Add(counters_->protocol_errors);
      c.MarkBroken();
      break;
    }
    if (v->type == ReplyType::kError) {
      // NOPERM and the like: a definite answer; the connection is fine.
      s = Status::Unavailable("the server refused it: " + v->str.substr(0, 200));
      break;
    }
    if (v->type != ReplyType::kArray || v->items.size() != 2 ||
        v->items[0].type != ReplyType::kBulk || v->items[1].type != ReplyType::kArray) {
      C::Add(counters_->protocol_errors);
      c.MarkBroken();
      s = Status::Corruption("protocol error: unexpected SCAN reply");
      break;
    }
    cursor = v->items[0].str;
    for (const RespValue& name : v->items[1].items) {
      // <prefix>{<64 hex>}; the pattern also lets through names with more
      // (or other) text between the braces, which are not blocks.
      if (name.type != ReplyType::kBulk || name.str.size() != name_bytes) continue;
      const std::string_view hex = std::string_view(name.str).substr(values_->prefix().size() + 1, 64);
      std::optional<BlockKey> key = BlockKey::FromHex(hex);
      if (key.has_value()) out->push_back(*key);
    }
  } while (cursor != "0");
  const bool healthy = c.healthy();
  node.pool.Release(std::move(conn).value());
  if (!healthy) {
    if (node.breaker.OnFailure(env_->NowMicros())) C::Add(counters_->breaker_opens);
  } else {
    node.breaker.OnSuccess();
  }
  return s.WithContext(where);
}

Result<std::vector<BlockKey>> LayoutScan::ScanKeys() {
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<Node>> masters, Masters());
  std::vector<BlockKey> keys;
  for (const std::shared_ptr<Node>& n : masters) KVTIER_RETURN_IF_ERROR(ScanNode(*n, &keys));
  // A key SCAN returned twice (it may, while the table rehashes) is one.
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

Result<std::vector<BlockKey>> LayoutScan::OfThisLayout(const std::vector<BlockKey>& keys) {
  std::vector<std::vector<std::byte>> bytes(keys.size());
  std::vector<uint64_t> want(keys.size(), 8);  // first the header's length
  std::vector<uint64_t> totals(keys.size(), 0);
  std::vector<bool> done(keys.size(), false);
  std::vector<BlockKey> out;
  std::vector<size_t> open(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) open[i] = i;
  while (!open.empty()) {
    std::vector<KeyOp> ops;
    for (size_t i : open) {
      KeyOp op;
      op.index = i;
      op.key = keys[i];
      op.slot = ValueLayout::SlotOf(keys[i]);
      ops.push_back(op);
    }
    RangeOps ranges(*values_, &bytes, &want, counters_);
    runner_->Run(ops, ranges);
    if (!ranges.unanswered_.empty()) {
      return Status::Unavailable("remote: no answer to GETRANGE of " +
                                 keys[*ranges.unanswered_.begin()].Hex() + " (and " +
                                 std::to_string(ranges.unanswered_.size() - 1) + " more)");
    }
    std::vector<size_t> next;
    for (size_t i : open) {
      if (ranges.failed_.count(i) > 0) continue;  // not a block of this layout: kept
      if (bytes[i].size() < want[i]) {
        next.push_back(i);
        continue;
      }
      if (totals[i] == 0) {
        std::optional<uint64_t> total =
            values_->TotalFromPrefix(std::span<const std::byte, 8>(bytes[i].data(), 8));
        if (!total.has_value()) continue;
        totals[i] = *total;
        want[i] = *total - values_->data_bytes();  // 8 + N
        if (bytes[i].size() < want[i]) {
          next.push_back(i);
          continue;
        }
      }
      DecodeOptions o;
      o.expected_key = &keys[i];
      o.expected_signature = &signature_;
      if (DecodeBlockHeader(bytes[i], totals[i], o).ok()) out.push_back(keys[i]);
    }
    open.swap(next);
  }
  return out;
}

Result<uint64_t> LayoutScan::EraseLayout() {
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockKey> names, ScanKeys());
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockKey> mine, OfThisLayout(names));
  if (mine.empty()) return uint64_t{0};
  std::vector<KeyOp> ops = BlockReader::MakeOps(mine);
  EraseOps del(*values_, mine.size(), counters_);
  runner_->Run(ops, del);
  uint64_t erased = 0;
  uint64_t unanswered = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!del.result().answered()[i]) ++unanswered;
    if (del.result().deleted()[i]) {
      ++erased;
      C::Add(counters_->erases);
    }
  }
  if (unanswered > 0) {
    return Status::Unavailable("remote: no answer to DEL of " + std::to_string(unanswered) +
                               " of this layout's " + std::to_string(mine.size()) + " blocks");
  }
  return erased;
}

}  // namespace kvtier::remote
