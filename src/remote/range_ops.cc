#include "remote/range_ops.h"

#include <algorithm>
#include <optional>
#include <string>

#include "remote/resp_reader.h"

namespace kvtier::remote {
namespace {

using C = RemoteCounters;

}  // namespace

void AppendPieces(const ValueLayout& layout, const BlockFileRange& r, std::span<std::byte> file,
                  std::vector<RangePiece>* out) {
  const uint64_t p = layout.part_bytes();
  for (uint64_t at = r.begin; at < r.end;) {
    const uint64_t part = at / p;
    const uint64_t stop = std::min(r.end, (part + 1) * p);
    RangePiece piece;
    piece.part = static_cast<uint32_t>(part);
    piece.offset = at - part * p;
    piece.dst = file.subspan(static_cast<size_t>(at), static_cast<size_t>(stop - at));
    out->push_back(piece);
    at = stop;
  }
}

RangeOps::RangeOps(const ValueLayout& layout, std::vector<std::vector<RangePiece>>* pieces,
                   RemoteCounters* counters)
    : layout_(layout),
      pieces_(pieces),
      states_(pieces->size(), State::kPending),
      counters_(counters) {}

void RangeOps::AppendRequest(const KeyOp& op, RequestBuffer* out) {
  for (const RangePiece& p : (*pieces_)[op.index]) {
    const std::string name = layout_.PartName(op.key, p.part);
    const std::string from = std::to_string(p.offset);
    const std::string to = std::to_string(p.offset + p.dst.size() - 1);
    out->Command({"GETRANGE", name, from, to});
  }
}

uint64_t RangeOps::TransferBytes(const KeyOp& op) {
  uint64_t n = 0;
  for (const RangePiece& p : (*pieces_)[op.index]) {
    n += p.dst.size() + 2 * (layout_.prefix().size() + 96);
  }
  return n;
}

Result<OpOutcome> RangeOps::ReadReply(const KeyOp& op, Connection* conn) {
  std::vector<RangePiece>& pieces = (*pieces_)[op.index];
  State state = State::kRead;
  std::optional<OpOutcome> redirect;
  // Every reply is consumed, whatever the first ones said, so that the
  // connection stays in sync.
  for (RangePiece& p : pieces) {
    p.received = 0;
    KVTIER_ASSIGN_OR_RETURN(ReplyHead h, ReadReplyHead(*conn, ReplyLimits{p.dst.size(), 0}));
    if (h.type == ReplyType::kBulk) {
      const size_t n = static_cast<size_t>(h.number);
      KVTIER_RETURN_IF_ERROR(conn->ReadExact(p.dst.first(n)));
      KVTIER_RETURN_IF_ERROR(ReadBulkEnd(*conn));
      p.received = n;
      continue;
    }
    if (h.type != ReplyType::kError) {
      return Status::Corruption("protocol error: unexpected reply type " +
                                std::to_string(static_cast<int>(h.type)) + " to GETRANGE");
    }
    const ServerError e = ParseServerError(h.text);
    if (std::optional<OpOutcome> r = RedirectFor(e)) {
      if (!redirect) redirect = *r;
      continue;
    }
    if (e.kind == ServerErrorKind::kWrongType) {
      state = State::kBad;
    } else if (state != State::kBad) {
      C::Add(counters_->error_replies);
      state = State::kMiss;
    }
  }
  if (redirect) return *redirect;
  states_[op.index] = state;
  return OpOutcome{};
}

void RangeOps::Fail(const KeyOp& op, OpFailure why) { states_[op.index] = State::kUnavailable; }

}  // namespace kvtier::remote
