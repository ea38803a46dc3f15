#include "remote/read_ops.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <new>

namespace kvtier::remote {
namespace {

using C = RemoteCounters;
using GetState = GetResult::State;

// Heads are read without a bulk bound so that an oversized value can be
// recognised (and its key deleted) before the protocol error is returned.
constexpr ReplyLimits kUnboundedBulk{std::numeric_limits<uint64_t>::max(), 0};

Status UnexpectedReply(std::string_view command, const ReplyHead& h) {
  return Status::Corruption("protocol error: unexpected reply type " +
                            std::to_string(static_cast<int>(h.type)) + " to " +
                            std::string(command));
}

Status Oversized(uint64_t n, uint64_t max) {
  return Status::Corruption("protocol error: value of " + std::to_string(n) +
                            " bytes, more than the " + std::to_string(max) + " expected");
}


Status SkipBulk(Connection* conn, uint64_t n) {
  KVTIER_RETURN_IF_ERROR(conn->Skip(n));
  return ReadBulkEnd(*conn);
}

}  // namespace

// --- EXISTS -------------------------------------------------------------------

void ExistsOps::AppendRequest(const KeyOp& op, RequestBuffer* out) {
  out->Command({"GETRANGE", layout_.PartName(op.key, 0), "0", std::to_string(kMinValueBytes - 1)});
  if (Rest() == 0) return;
  std::vector<std::string> names;
  for (uint32_t i = 1; i < layout_.min_parts(); ++i) names.push_back(layout_.PartName(op.key, i));
  if (with_mac_) names.push_back(layout_.MacName(op.key));
  out->Command("EXISTS", names);
}

uint64_t ExistsOps::TransferBytes(const KeyOp& op) {
  return 48 + kMinValueBytes + uint64_t{layout_.min_parts() + 1} * (layout_.prefix().size() + 80);
}

Result<OpOutcome> ExistsOps::ReadReply(const KeyOp& op, Connection* conn) {
  // Both replies are consumed, whatever the first said, so that the
  // connection stays in sync.
  std::optional<OpOutcome> redirect;
  bool found = false;
  bool error = false;
  KVTIER_ASSIGN_OR_RETURN(ReplyHead h, ReadReplyHead(*conn, ReplyLimits{kMinValueBytes, 0}));
  if (h.type == ReplyType::kBulk) {
    std::array<std::byte, kMinValueBytes> head{};
    const size_t n = static_cast<size_t>(h.number);
    KVTIER_RETURN_IF_ERROR(conn->ReadExact(std::span<std::byte>(head).first(n)));
    KVTIER_RETURN_IF_ERROR(ReadBulkEnd(*conn));
    found = n == kMinValueBytes && PlausibleHead(head);
  } else if (h.type == ReplyType::kError) {
    const ServerError e = ParseServerError(h.text);
    redirect = RedirectFor(e);
    // WRONGTYPE: something else under the name, not a block (no error).
    error = !redirect && e.kind != ServerErrorKind::kWrongType;
  } else {
    return UnexpectedReply("GETRANGE", h);
  }
  if (Rest() > 0) {
    KVTIER_ASSIGN_OR_RETURN(ReplyHead r, ReadReplyHead(*conn, ReplyLimits{0, 0}));
    if (r.type == ReplyType::kInteger) {
      found = found && r.number == static_cast<int64_t>(Rest());
    } else if (r.type == ReplyType::kError) {
      const ServerError e = ParseServerError(r.text);
      std::optional<OpOutcome> again = RedirectFor(e);
      if (!redirect) redirect = again;
      error = error || !again;
      found = false;
    } else {
      return UnexpectedReply("EXISTS", r);
    }
  }
  if (redirect) return *redirect;
  if (error) C::Add(counters_->error_replies);
  found_[op.index] = found && !error;
  return OpOutcome{};
}

uint32_t ExistsOps::Rest() const { return layout_.min_parts() - 1 + (with_mac_ ? 1 : 0); }

bool ExistsOps::PlausibleHead(std::span<const std::byte, kMinValueBytes> head) const {
  uint64_t n = 0;
  std::memcpy(&n, head.data(), sizeof(n));
  // The shortest safetensors header is "{}"; the longest is bounded.
  return n >= 2 && layout_.TotalFromPrefix(head).has_value();
}

void ExistsOps::Fail(const KeyOp& op, OpFailure why) {
  found_[op.index] = false;
  ++failed_;
}

// --- GET / MGET -----------------------------------------------------------------

GetOps::GetOps(const ValueLayout& layout, size_t n, const ValueAllocator* alloc,
               RemoteCounters* counters, const ValueMac* mac, VerifyPool* pool,
               const ValueCheck* value_check)
    : layout_(layout),
      allocate_(true),
      alloc_(alloc),
      results_(n),
      counters_(counters),
      mac_(mac),
      pool_(mac != nullptr ? pool : nullptr),
      value_check_(pool_ != nullptr ? value_check : nullptr),
      checks_(pool_ != nullptr ? std::make_shared<VerifyGroup>() : nullptr) {}

GetOps::GetOps(const ValueLayout& layout, std::span<const std::span<std::byte>> dsts,
               RemoteCounters* counters, const ValueMac* mac, VerifyPool* pool,
               const ValueCheck* value_check)
    : layout_(layout),
      dsts_(dsts),
      allocate_(false),
      alloc_(nullptr),
      results_(dsts.size()),
      counters_(counters),
      mac_(mac),
      pool_(mac != nullptr ? pool : nullptr),
      value_check_(pool_ != nullptr ? value_check : nullptr),
      checks_(pool_ != nullptr ? std::make_shared<VerifyGroup>() : nullptr) {}

void GetOps::AppendRequest(const KeyOp& op, RequestBuffer* out) {
  if (layout_.single_part() && mac_ == nullptr) {
    out->Command({"GET", layout_.PartName(op.key, 0)});
    return;
  }
  std::vector<std::string> names;
  if (mac_ != nullptr) names.push_back(layout_.MacName(op.key));
  for (std::string& n : layout_.PartNames(op.key, layout_.max_parts())) {
    names.push_back(std::move(n));
  }
  out->Command("MGET", names);
}

uint64_t GetOps::TransferBytes(const KeyOp& op) {
  // A typical value: the data plus a header of a few KiB (the 1 MiB header
  // bound only limits what a reply may announce).
  return std::min(layout_.max_value_bytes(), 8 + layout_.data_bytes() + (64 << 10));
}

void GetOps::Fail(const KeyOp& op, OpFailure why) {
  GetResult& r = results_[op.index];
  // A value found oversized stays kBad (to be deleted) though the
  // connection it broke fails the op.
  if (r.state == GetState::kBad) return;
  r.state = GetState::kUnavailable;
  r.buffer = BlockBuffer();
}

std::span<std::byte> GetOps::Destination(GetResult& r, size_t index, uint64_t size) {
  r.size = size;
  if (size < kMinValueBytes) {
    // Not even a block file's length word: no block (an empty SET, a
    // truncated write). Bad before any buffer is asked for, so that it is
    // counted and deleted, not skipped as an allocation failure.
    r.state = GetState::kBad;
    return {};
  }
  if (!allocate_) {
    if (size > dsts_[index].size()) {
      r.state = GetState::kTooSmall;
      return {};
    }
    return dsts_[index].first(static_cast<size_t>(size));
  }
  Result<BlockBuffer> b = alloc_ != nullptr ? (*alloc_)(static_cast<size_t>(size))
                                            : BlockBuffer::Allocate(static_cast<size_t>(size));
  if (b.ok() && b->size() != size) {
    b = Status::InvalidArgument("remote: the allocator returned " + std::to_string(b->size()) +
                                " bytes for a value of " + std::to_string(size));
  }
  if (!b.ok()) {
    // The value is fine; there is nowhere to put it now. It is skipped.
    r.state = GetState::kAllocError;
    r.alloc_error = b.status();
    return {};
  }
  r.buffer = std::move(b).value();
  return r.buffer.mutable_span();
}

OpOutcome GetOps::OnError(GetResult& r, std::string_view line) {
  const ServerError e = ParseServerError(line);
  if (std::optional<OpOutcome> redirect = RedirectFor(e)) return *redirect;
  if (e.kind == ServerErrorKind::kWrongType) {
    r.state = GetState::kBad;  // something else lives under our name
  } else {
    C::Add(counters_->error_replies);
    r.state = GetState::kMiss;
  }
  return OpOutcome{};
}

Result<OpOutcome> GetOps::ReadReply(const KeyOp& op, Connection* conn) {
  GetResult& r = results_[op.index];
  r = GetResult();
  return layout_.single_part() && mac_ == nullptr ? ReadOnePart(r, op.index, conn)
                                                 : ReadParts(r, op, conn);
}

Result<OpOutcome> GetOps::ReadOnePart(GetResult& r, size_t index, Connection* conn) {
  KVTIER_ASSIGN_OR_RETURN(ReplyHead h, ReadReplyHead(*conn, kUnboundedBulk));
  switch (h.type) {
    case ReplyType::kNull:
      r.state = GetState::kMiss;
      return OpOutcome{};
    case ReplyType::kError:
      return OnError(r, h.text);
    case ReplyType::kBulk: {
      const uint64_t n = static_cast<uint64_t>(h.number);
      if (n > layout_.max_value_bytes()) {
        r.state = GetState::kBad;
        return Oversized(n, layout_.max_value_bytes());
      }
      std::span<std::byte> dst = Destination(r, index, n);
      if (r.state != GetState::kPending) {
        KVTIER_RETURN_IF_ERROR(SkipBulk(conn, n));
        return OpOutcome{};
      }
      KVTIER_RETURN_IF_ERROR(conn->ReadExact(dst));
      KVTIER_RETURN_IF_ERROR(ReadBulkEnd(*conn));
      r.state = GetState::kRead;
      return OpOutcome{};
    }
    default:
      return UnexpectedReply("GET", h);
  }
}

Result<OpOutcome> GetOps::ReadParts(GetResult& r, const KeyOp& op, Connection* conn) {
  const size_t index = op.index;
  const uint32_t parts = layout_.max_parts();
  const uint32_t elements = parts + (mac_ != nullptr ? 1 : 0);
  KVTIER_ASSIGN_OR_RETURN(ReplyHead h, ReadReplyHead(*conn, ReplyLimits{0, elements}));
  if (h.type == ReplyType::kError) return OnError(r, h.text);
  if (h.type != ReplyType::kArray || h.number != static_cast<int64_t>(elements)) {
    return UnexpectedReply("MGET", h);
  }
  std::unique_ptr<ValueMac::Checker> check;
  if (mac_ != nullptr) {
    KVTIER_RETURN_IF_ERROR(ReadMac(r, conn));
    check = mac_->Begin(op.key, r.mac);
  }
  // Without a pool: reads `dst` from the socket in chunks, hashing each
  // while the next arrives. With one, the whole value is hashed once read.
  const bool inline_check = check != nullptr && pool_ == nullptr;
  auto read_data = [&](std::span<std::byte> dst) -> Status {
    constexpr size_t kChunk = size_t{256} << 10;
    if (!inline_check) return conn->ReadExact(dst);
    for (size_t off = 0; off < dst.size(); off += kChunk) {
      const std::span<std::byte> piece = dst.subspan(off, std::min(kChunk, dst.size() - off));
      KVTIER_RETURN_IF_ERROR(conn->ReadExact(piece));
      check->Update(piece);
    }
    return Status::Ok();
  };
  std::span<std::byte> dst;
  uint64_t total = 0;
  uint32_t needed = 0;  // parts the value has, once part 0 told its size
  for (uint32_t i = 0; i < parts; ++i) {
    KVTIER_ASSIGN_OR_RETURN(ReplyHead e, ReadReplyHead(*conn, kUnboundedBulk));
    if (e.type == ReplyType::kNull) {
      if (r.state != GetState::kPending) continue;  // already decided
      if (i == 0) {
        r.state = GetState::kMiss;
      } else if (i < needed) {
        r.state = GetState::kBad;  // a missing part (evicted, or a writer that stopped)
        r.missing_part = true;
      }
      continue;
    }
    if (e.type != ReplyType::kBulk) return UnexpectedReply("MGET", e);
    const uint64_t len = static_cast<uint64_t>(e.number);
    if (len > layout_.part_bytes()) {
      r.state = GetState::kBad;
      return Oversized(len, layout_.part_bytes());
    }
    if (r.state != GetState::kPending || (i > 0 && i >= needed)) {
      KVTIER_RETURN_IF_ERROR(SkipBulk(conn, len));  // a dead value, or a stale extra part
      continue;
    }
    if (i == 0) {
      std::array<std::byte, 8> prefix;
      if (len < prefix.size()) {
        r.state = GetState::kBad;
        KVTIER_RETURN_IF_ERROR(SkipBulk(conn, len));
        continue;
      }
      KVTIER_RETURN_IF_ERROR(conn->ReadExact(prefix));
      const std::optional<uint64_t> t = layout_.TotalFromPrefix(prefix);
      if (!t || len != layout_.PartSize(*t, 0)) {
        r.state = GetState::kBad;
        KVTIER_RETURN_IF_ERROR(SkipBulk(conn, len - prefix.size()));
        continue;
      }
      total = *t;
      needed = layout_.PartsFor(total);
      dst = Destination(r, index, total);
      if (r.state != GetState::kPending) {
        KVTIER_RETURN_IF_ERROR(SkipBulk(conn, len - prefix.size()));
        continue;
      }
      std::memcpy(dst.data(), prefix.data(), prefix.size());
      if (inline_check) check->Update(prefix);
      KVTIER_RETURN_IF_ERROR(read_data(dst.subspan(prefix.size(), len - prefix.size())));
      KVTIER_RETURN_IF_ERROR(ReadBulkEnd(*conn));
      continue;
    }
    if (len != layout_.PartSize(total, i)) {
      r.state = GetState::kBad;
      KVTIER_RETURN_IF_ERROR(SkipBulk(conn, len));
      continue;
    }
    const uint64_t offset = uint64_t{i} * layout_.part_bytes();
    KVTIER_RETURN_IF_ERROR(read_data(dst.subspan(offset, len)));
    KVTIER_RETURN_IF_ERROR(ReadBulkEnd(*conn));
  }
  if (r.state == GetState::kPending) {
    r.state = GetState::kRead;
    if (inline_check) {
      r.mac_verdict = check->Finish();
    } else if (check) {
      CheckLater(r, op.key, std::move(check), dst);
    }
  }
  if (r.state != GetState::kRead) r.buffer = BlockBuffer();
  return OpOutcome{};
}

void GetOps::CheckLater(GetResult& r, const BlockKey& key,
                        std::unique_ptr<ValueMac::Checker> check,
                        std::span<const std::byte> bytes) {
  // results_ never grows, and r.buffer (whose heap bytes `bytes` are) is
  // not touched again before WaitChecks(): the task's pointers stay valid.
  std::shared_ptr<ValueMac::Checker> c(std::move(check));
  GetResult* const out = &r;
  std::atomic<bool>* const no_memory = &checks_no_memory_;
  const ValueCheck* const then = value_check_;
  checks_->Add([c, out, key, bytes, no_memory, then] {
    // Out of memory: the caller's thread throws it (WaitChecks), as a check
    // made while reading would have.
    try {
      c->Update(bytes);
      out->mac_verdict = c->Finish();
      if (then != nullptr && out->mac_verdict == ValueMac::Verdict::kOk) {
        out->value_ok = (*then)(key, bytes);
      }
    } catch (const std::bad_alloc&) {
      no_memory->store(true);
    }
  });
  pool_->Post(checks_);
}

void GetOps::WaitChecks() {
  if (checks_ == nullptr) return;
  checks_->Wait();
  if (checks_no_memory_.exchange(false)) throw std::bad_alloc();
}

Status GetOps::ReadMac(GetResult& r, Connection* conn) {
  // A `:mac` is kMacValueBytes long; anything much longer is not one (and
  // is not read into memory).
  constexpr uint64_t kMaxMacBytes = 256;
  KVTIER_ASSIGN_OR_RETURN(ReplyHead e, ReadReplyHead(*conn, kUnboundedBulk));
  if (e.type == ReplyType::kNull) return Status::Ok();
  if (e.type != ReplyType::kBulk) return UnexpectedReply("MGET", e);
  const uint64_t len = static_cast<uint64_t>(e.number);
  if (len > kMaxMacBytes) {
    r.mac = std::string();  // malformed
    return SkipBulk(conn, len);
  }
  std::string mac(static_cast<size_t>(len), '\0');
  KVTIER_RETURN_IF_ERROR(conn->ReadExact(std::as_writable_bytes(std::span(mac))));
  KVTIER_RETURN_IF_ERROR(ReadBulkEnd(*conn));
  r.mac = std::move(mac);
  return Status::Ok();
}

// --- DEL ----------------------------------------------------------------------

void DeleteOps::AppendRequest(const KeyOp& op, RequestBuffer* out) {
  // The `:mac` too, whether or not this tier signs: a signature left
  // behind would only name bytes that are gone.
  std::vector<std::string> names = layout_.PartNames(op.key, layout_.max_parts());
  names.push_back(layout_.MacName(op.key));
  out->Command("DEL", names);
}

uint64_t DeleteOps::TransferBytes(const KeyOp& op) {
  return 32 + uint64_t{layout_.max_parts() + 1} * (layout_.prefix().size() + 80);
}

Result<OpOutcome> DeleteOps::ReadReply(const KeyOp& op, Connection* conn) {
  KVTIER_ASSIGN_OR_RETURN(ReplyHead h, ReadReplyHead(*conn, ReplyLimits{0, 0}));
  if (h.type == ReplyType::kInteger) {
    deleted_[op.index] = h.number > 0;
    answered_[op.index] = true;
    return OpOutcome{};
  }
  if (h.type != ReplyType::kError) return UnexpectedReply("DEL", h);
  const ServerError e = ParseServerError(h.text);
  if (std::optional<OpOutcome> r = RedirectFor(e)) return *r;
  C::Add(counters_->error_replies);
  return OpOutcome{};
}

void DeleteOps::Fail(const KeyOp& op, OpFailure why) {}

}  // namespace kvtier::remote
