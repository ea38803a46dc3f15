#include "remote/write_ops.h"

namespace kvtier::remote {
namespace {

using SetState = SetResult::State;
constexpr ReplyLimits kNoBulk{0, 0};

Status UnexpectedReply(std::string_view what) {
  return Status::Corruption("protocol error: unexpected reply to " + std::string(what));
}

}  // namespace

SetOps::SetOps(const ValueLayout& layout, std::span<const std::span<const std::byte>> blocks,
               uint32_t ttl_seconds, const ValueMac* mac,
               RemoteCounters* counters)
    : layout_(layout),
      blocks_(blocks),
      ttl_seconds_(ttl_seconds),
      mac_(mac),
      results_(blocks.size()),
      counters_(counters) {
  if (mac != nullptr) macs_.resize(blocks.size());
}

uint32_t SetOps::SetsFor(size_t index) const {
  return layout_.PartsFor(blocks_[index].size()) + (mac_ == nullptr ? 0 : 1);
}

void SetOps::AppendRequest(const KeyOp& op, RequestBuffer* out) {
  std::span<const std::byte> block = blocks_[op.index];
  const uint32_t parts = layout_.PartsFor(block.size());
  if (SetsFor(op.index) == 1) {
    out->Set(layout_.PartName(op.key, 0), block, ttl_seconds_);
    return;
  }
  out->Command({"MULTI"});
  const std::vector<std::string> names = layout_.PartNames(op.key, parts);
  for (uint32_t i = parts; i-- > 0;) {
    if (i == 0 && mac_ != nullptr) {
      // Signed when first sent (not all up front): hashing this block
      // overlaps the server's work on the requests already in flight.
      std::string& m = macs_[op.index];
      if (m.empty()) m = mac_->Sign(op.key, block);
      out->Set(layout_.MacName(op.key), std::as_bytes(std::span(m)), ttl_seconds_);
    }
    const uint64_t begin = uint64_t{i} * layout_.part_bytes();
    out->Set(names[i], block.subspan(begin, layout_.PartSize(block.size(), i)), ttl_seconds_);
  }
  out->Command({"EXEC"});
}

uint64_t SetOps::TransferBytes(const KeyOp& op) {
  const uint64_t size = blocks_[op.index].size();
  return size + 64 + uint64_t{SetsFor(op.index)} * (layout_.prefix().size() + 128);
}

void SetOps::NoteError(std::string_view line, std::optional<ServerError>* first) {
  ServerError e = ParseServerError(line);
  // EXECABORT only repeats an earlier error: keep the one that says why.
  if (!first->has_value() || (*first)->kind == ServerErrorKind::kExecAbort) *first = std::move(e);
}

OpOutcome SetOps::Finish(SetResult& r, const std::optional<ServerError>& first) {
  if (!first) {
    r.state = SetState::kStored;
    return OpOutcome{};
  }
  if (std::optional<OpOutcome> redirect = RedirectFor(*first)) return *redirect;
  if (first->kind == ServerErrorKind::kOom) {
    r.state = SetState::kOom;
  } else {
    RemoteCounters::Add(counters_->error_replies);
    r.state = SetState::kError;
    r.error = first->message;
  }
  return OpOutcome{};
}

Result<OpOutcome> SetOps::ReadReply(const KeyOp& op, Connection* conn) {
  SetResult& r = results_[op.index];
  r = SetResult();
  std::optional<ServerError> first;
  const uint32_t parts = SetsFor(op.index);
  if (parts == 1) {
    KVTIER_ASSIGN_OR_RETURN(ReplyHead h, ReadReplyHead(*conn, kNoBulk));
    if (h.type == ReplyType::kError) {
      NoteError(h.text, &first);
    } else if (h.type != ReplyType::kStatus) {
      return UnexpectedReply("SET");
    }
    return Finish(r, first);
  }
  // MULTI, `parts` SETs (+QUEUED or an error each; the signature's is one
  // of them), then EXEC.
  for (uint32_t i = 0; i < parts + 1; ++i) {
    KVTIER_ASSIGN_OR_RETURN(ReplyHead h, ReadReplyHead(*conn, kNoBulk));
    if (h.type == ReplyType::kError) {
      NoteError(h.text, &first);
    } else if (h.type != ReplyType::kStatus) {
      return UnexpectedReply(i == 0 ? "MULTI" : "a queued SET");
    }
  }
  KVTIER_ASSIGN_OR_RETURN(ReplyHead exec, ReadReplyHead(*conn, ReplyLimits{0, parts}));
  if (exec.type == ReplyType::kError) {
    NoteError(exec.text, &first);
  } else if (exec.type == ReplyType::kNull) {
    NoteError("EXECABORT transaction discarded", &first);
  } else if (exec.type == ReplyType::kArray && exec.number == static_cast<int64_t>(parts)) {
    for (uint32_t i = 0; i < parts; ++i) {
      KVTIER_ASSIGN_OR_RETURN(ReplyHead h, ReadReplyHead(*conn, kNoBulk));
      if (h.type == ReplyType::kError) {
        NoteError(h.text, &first);
      } else if (h.type != ReplyType::kStatus) {
        return UnexpectedReply("EXEC");
      }
    }
  } else {
    return UnexpectedReply("EXEC");
  }
  return Finish(r, first);
}

void SetOps::Fail(const KeyOp& op, OpFailure why) {
  SetResult& r = results_[op.index];
  switch (why) {
    case OpFailure::kUnavailable:
      r.state = SetState::kUnavailable;
      break;
    case OpFailure::kRedirectLimit:
      r.state = SetState::kRedirectLimit;
      break;
    case OpFailure::kClosed:
      r.state = SetState::kClosed;
      break;
  }
}

}  // namespace kvtier::remote
