// BlockReader::LoadTensorBuffers: partial reads of values (GETRANGE of the
// header and of the selected tensors' ranges on the parts holding them),
// verified like a partial disk read (DecodeBlockTensors).
#include <algorithm>
#include <cstring>
#include <utility>

#include "remote/block_reader.h"
#include "remote/range_ops.h"

namespace kvtier::remote {
namespace {

using C = RemoteCounters;
using GetState = GetResult::State;

// Where one key's partial read stands.
struct Partial {
  enum class Verdict : uint8_t {
    kOpen,         // still being read
    kMiss,         // absent (or an error reply)
    kBad,          // present but wrong: delete it
    kMissingPart,  // a part is gone (evicted, or deleted since round 1): delete the rest
    kUnavailable,  // no answer
    kAllocError,   // `error`
    kInvalid,      // the mask does not fit the block: `error`
    kWhole,        // no tensor_checksums / meta_checksum: read it whole
  };
  Verdict verdict = Verdict::kOpen;
  std::vector<std::byte> head;  // round 1's reply
  BlockBuffer buffer;           // the whole file's size, once known
  uint64_t total = 0;
  uint64_t have = 0;     // file bytes [0, have) are in `buffer`
  uint64_t fetched = 0;  // bytes GETRANGE returned
  Status error;
};

using Verdict = Partial::Verdict;

}  // namespace

void BlockReader::LoadTensorBuffers(
    std::span<const BlockKey> keys, std::span<const TensorMask> masks, const ValueAllocator* alloc,
    const std::function<void(size_t, Result<std::optional<BlockBuffer>>)>& done) {
  // A MAC covers the whole file: a part of it cannot be checked.
  if (mac_ != nullptr) {
    LoadBuffers(keys, alloc, done);
    return;
  }
  std::vector<size_t> whole, partial;
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool subset =
        i < masks.size() && !masks[i].empty() && !MaskSelectsAll(masks[i], masks[i].size());
    (subset ? partial : whole).push_back(i);
  }
  if (partial.empty()) {
    LoadBuffers(keys, alloc, done);
    return;
  }
  // Every result first, then the callbacks in key order (bad values are
  // deleted by then, as LoadBuffers does before a caller can store again).
  std::vector<std::optional<Result<std::optional<BlockBuffer>>>> out(keys.size());
  std::vector<BlockKey> pkeys;
  std::vector<TensorMask> pmasks;
  for (size_t i : partial) {
    pkeys.push_back(keys[i]);
    pmasks.push_back(masks[i]);
  }
  LoadPartial(pkeys, pmasks, alloc, [&](size_t j, Result<std::optional<BlockBuffer>> r) {
    out[partial[j]] = std::move(r);
  });
  // Values without tensor_checksums came back as nullopt results with no
  // answer yet: LoadPartial leaves them to the whole read.
  for (size_t i : partial) {
    if (!out[i].has_value()) whole.push_back(i);
  }
  std::sort(whole.begin(), whole.end());
  if (!whole.empty()) {
    std::vector<BlockKey> wkeys;
    for (size_t i : whole) wkeys.push_back(keys[i]);
    LoadBuffers(wkeys, alloc, [&](size_t j, Result<std::optional<BlockBuffer>> r) {
      out[whole[j]] = std::move(r);
    });
  }
  for (size_t i = 0; i < keys.size(); ++i) done(i, std::move(*out[i]));
}

void BlockReader::LoadPartial(
    std::span<const BlockKey> keys, std::span<const TensorMask> masks, const ValueAllocator* alloc,
    const std::function<void(size_t, Result<std::optional<BlockBuffer>>)>& done) {
  const size_t n = keys.size();
  std::vector<Partial> ps(n);
  // One pipelined round trip per node of the GETRANGEs `pieces` holds for
  // the keys still open; with `short_is_bad`, a piece that came back empty
  // (its part's name is absent: GETRANGE answers "" for it) is a missing
  // part, and one that came back short but not empty a bad value.
  auto run_round = [&](std::vector<std::vector<RangePiece>>& pieces, bool short_is_bad) {
    std::vector<size_t> open;
    for (size_t j = 0; j < n; ++j) {
      if (ps[j].verdict == Verdict::kOpen && !pieces[j].empty()) open.push_back(j);
    }
    if (open.empty()) return;
    std::vector<BlockKey> okeys;
    std::vector<std::vector<RangePiece>> opieces;
    for (size_t j : open) {
      okeys.push_back(keys[j]);
      opieces.push_back(std::move(pieces[j]));
    }
    std::vector<KeyOp> ops = MakeOps(okeys);
    RangeOps ranges(*values_, &opieces, counters_);
    runner_->Run(ops, ranges);
    for (size_t k = 0; k < open.size(); ++k) {
      Partial& p = ps[open[k]];
      switch (ranges.states()[k]) {
        case RangeOps::State::kRead:
          break;
        case RangeOps::State::kBad:
          p.verdict = Verdict::kBad;
          continue;
        case RangeOps::State::kMiss:
          p.verdict = Verdict::kMiss;
          continue;
        default:
          p.verdict = Verdict::kUnavailable;
          continue;
      }
      for (const RangePiece& piece : opieces[k]) {
        p.fetched += piece.received;
        if (!short_is_bad || piece.received == piece.dst.size()) continue;
        if (piece.received > 0) {
          p.verdict = Verdict::kBad;
        } else if (p.verdict == Verdict::kOpen) {
          p.verdict = Verdict::kMissingPart;
        }
      }
      pieces[open[k]] = std::move(opieces[k]);  // round 1 reads `received`
    }
  };

  // Round 1: the head of part 0.
  const uint64_t hint = std::min(head_hint_.load(std::memory_order_relaxed), values_->part_bytes());
  std::vector<std::vector<RangePiece>> pieces(n);
  for (size_t j = 0; j < n; ++j) {
    ps[j].head.resize(static_cast<size_t>(hint));
    pieces[j].push_back(RangePiece{0, 0, std::span(ps[j].head), 0});
  }
  run_round(pieces, /*short_is_bad=*/false);
  for (size_t j = 0; j < n; ++j) {
    Partial& p = ps[j];
    if (p.verdict != Verdict::kOpen) continue;
    const uint64_t got = pieces[j][0].received;
    if (got == 0) {  // GETRANGE of an absent name
      p.verdict = Verdict::kMiss;
      continue;
    }
    std::optional<uint64_t> total;
    if (got >= 8) total = values_->TotalFromPrefix(std::span(p.head).first<8>());
    // Part 0 must hold min(part_bytes, total) bytes: a shorter one is a
    // truncated value.
    if (!total || got < std::min(hint, values_->PartSize(*total, 0))) {
      p.verdict = Verdict::kBad;
      continue;
    }
    Result<BlockBuffer> b = alloc != nullptr ? (*alloc)(static_cast<size_t>(*total))
                                             : BlockBuffer::Allocate(static_cast<size_t>(*total));
    if (b.ok() && b->size() != *total) {
      b = Status::InvalidArgument("remote: the allocator returned " + std::to_string(b->size()) +
                                  " bytes for a value of " + std::to_string(*total));
    }
    if (!b.ok()) {
      p.verdict = Verdict::kAllocError;
      p.error = b.status();
      continue;
    }
    p.buffer = std::move(b).value();
    p.total = *total;
    p.have = std::min(got, p.total);
    std::memcpy(p.buffer.mutable_span().data(), p.head.data(), static_cast<size_t>(p.have));
    p.head = {};
  }

  // Round 2: the rest of a header longer than the head.
  for (size_t j = 0; j < n; ++j) {
    Partial& p = ps[j];
    pieces[j].clear();
    if (p.verdict != Verdict::kOpen) continue;
    const uint64_t header_end = p.total - values_->data_bytes();
    if (header_end > p.have) {
      AppendPieces(*values_, BlockFileRange{p.have, header_end}, p.buffer.mutable_span(),
                   &pieces[j]);
      p.have = header_end;
    }
  }
  run_round(pieces, /*short_is_bad=*/true);

  // The header, then round 3: the selected tensors not read yet.
  DecodeOptions o;
  o.expected_key = nullptr;
  o.expected_signature = &signature_;
  o.expected_layout = layout_;
  uint64_t last_header = 0;
  for (size_t j = 0; j < n; ++j) {
    Partial& p = ps[j];
    pieces[j].clear();
    if (p.verdict != Verdict::kOpen) continue;
    o.expected_key = &keys[j];
    const uint64_t header_end = p.total - values_->data_bytes();
    Result<DecodedBlock> h =
        DecodeBlockHeader(p.buffer.span().first(static_cast<size_t>(header_end)), p.total, o);
    if (!h.ok()) {
      p.verdict = Verdict::kBad;
      continue;
    }
    if (!h->meta.meta_checksum.has_value() || h->meta.tensor_checksums.empty()) {
      p.verdict = Verdict::kWhole;
      continue;
    }
    Result<std::vector<BlockFileRange>> ranges = SelectedTensorRanges(*h, masks[j]);
    if (!ranges.ok()) {
      p.verdict = Verdict::kInvalid;
      p.error = ranges.status();
      continue;
    }
    last_header = header_end;
    for (BlockFileRange r : *ranges) {
      r.begin = std::max(r.begin, p.have);  // bytes the head already holds
      if (r.begin < r.end) AppendPieces(*values_, r, p.buffer.mutable_span(), &pieces[j]);
    }
  }
  if (last_header != 0) head_hint_.store(last_header, std::memory_order_relaxed);
  run_round(pieces, /*short_is_bad=*/true);

  // The verdicts.
  std::vector<BlockKey> bad, evicted;
  uint64_t lookups = 0;
  for (size_t j = 0; j < n; ++j) {
    Partial& p = ps[j];
    if (p.verdict == Verdict::kWhole) continue;  // LoadBuffers counts it
    ++lookups;
    if (p.verdict == Verdict::kOpen) {
      o.expected_key = &keys[j];
      if (DecodeBlockTensors(p.buffer.span(), masks[j], o).ok()) {
        C::Add(counters_->hits);
        C::Add(counters_->bytes_read, p.fetched);
        done(j, std::optional<BlockBuffer>(std::move(p.buffer)));
        continue;
      }
      p.verdict = Verdict::kBad;
    }
    p.buffer = BlockBuffer();
    GetResult r;
    switch (p.verdict) {
      case Verdict::kBad:
        r.state = GetState::kBad;
        bad.push_back(keys[j]);
        break;
      case Verdict::kMissingPart:
        r.state = GetState::kBad;
        r.missing_part = true;
        evicted.push_back(keys[j]);
        break;
      case Verdict::kUnavailable:
        r.state = GetState::kUnavailable;
        break;
      case Verdict::kAllocError:
        r.state = GetState::kAllocError;
        break;
      default:
        r.state = GetState::kMiss;
        break;
    }
    CountMiss(r);
    if (p.verdict == Verdict::kAllocError || p.verdict == Verdict::kInvalid) {
      done(j, p.error);
    } else {
      done(j, std::optional<BlockBuffer>());
    }
  }
  C::Add(counters_->lookups, lookups);
  DeleteBad(bad);
  // As LoadBuffers: a part evicted by the server's LRU says nothing against
  // the node.
  DeleteBad(evicted, /*bad=*/false);
}

}  // namespace kvtier::remote
