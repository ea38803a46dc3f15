#include "server/arena_service.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/stats_render.h"
#include "kvtier/block_buffer.h"
#include "kvtier/block_file.h"

namespace kvtier::server {

ArenaService::ArenaService(std::unique_ptr<Arena> arena, ModelLayout layout,
                           std::unique_ptr<TieredCache> below, uint32_t namespace_quota_slots)
    : arena_(std::move(arena)),
      layout_(std::move(layout)),
      signature_(layout_.Signature()),
      below_(std::move(below)),
      index_(arena_->geometry().slot_count, namespace_quota_slots, arena_->table()) {
  arena_->SetTiersBelow(below_ != nullptr);
}

Status ArenaService::Handle(ClientId client, std::span<const uint8_t> body,
                            std::vector<uint8_t>* reply, bool* pass_arena_fd) {
  *pass_arena_fd = false;
  FrameReader r(body);
  Result<Op> op = r.Header();
  if (!op.ok()) {
    bad_frames_.fetch_add(1, std::memory_order_relaxed);
    return op.status();
  }
  FrameWriter w(*op);
  Status s;
  switch (*op) {
    case Op::kHello: {
      bool accepted = false;
      s = Hello(&r, &w, &accepted);
      *pass_arena_fd = s.ok() && accepted;
      break;
    }
    case Op::kMatch:
      s = Match(&r, &w);
      break;
    case Op::kLookup:
      s = Lookup(client, &r, &w);
      break;
    case Op::kRelease: {
      // Not answered (the client does not wait for it): a lease that is
      // not this client's is a bad frame, which closes the client.
      const uint64_t lease = r.U64();
      s = r.Done("release");
      if (s.ok() && !index_.Release(client, lease)) {
        s = Status::InvalidArgument("lease " + std::to_string(lease) + " is not this client's");
      }
      if (s.ok()) {
        reply->clear();
        return s;
      }
      break;
    }
    case Op::kTouch: {
      // Not answered either; a frame whose count does not fit is a bad one.
      const uint32_t n = r.Count(4 + 8);
      std::vector<SlotRef> read(n);
      for (SlotRef& t : read) {
        t.slot = r.U32();
        t.generation = r.U64();
      }
      s = r.Done("touch");
      if (s.ok()) {
        index_.Touch(read);
        reply->clear();
        return s;
      }
      break;
    }
    case Op::kReserve:
      s = Reserve(client, &r, &w);
      break;
    case Op::kPublish:
      s = Publish(client, &r, &w);
      break;
    case Op::kAbort: {
      const uint32_t n = r.Count(4);
      std::vector<uint32_t> slots;
      for (uint32_t i = 0; i < n; ++i) slots.push_back(r.U32());
      s = r.Done("abort");
      if (s.ok()) {
        for (uint32_t slot : slots) (void)index_.Abort(client, slot);
        w.StatusOf(Status::Ok());
      }
      break;
    }
    case Op::kContains:
      s = Contains(&r, &w);
      break;
    case Op::kErase:
      s = Erase(&r, &w);
      break;
    case Op::kStats:
      s = r.Done("stats");
      if (s.ok()) {
        w.StatusOf(Status::Ok());
        w.Str32(StatsJson());
      }
      break;
  }
  if (!s.ok()) {
    bad_frames_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  *reply = w.Finish();
  return Status::Ok();
}

Status ArenaService::Hello(FrameReader* r, FrameWriter* w, bool* accepted) {
  *accepted = false;
  const std::string signature = r->Str16();
  KVTIER_RETURN_IF_ERROR(r->Done("hello"));
  if (signature != signature_) {
    // A well-formed refusal: the client learns why, and the reply has no fd.
    w->StatusOf(Status::InvalidArgument("the daemon serves layout signature '" + signature_ +
                                        "', not '" + signature + "'"));
    return Status::Ok();
  }
  *accepted = true;
  w->StatusOf(Status::Ok());
  w->U32(arena_->geometry().slot_count);
  w->U64(arena_->geometry().slot_bytes);
  w->U64(arena_->geometry().TotalBytes());
  return Status::Ok();
}

Status ArenaService::Match(FrameReader* r, FrameWriter* w) {
  std::vector<BlockKey> keys = ReadKeys(r);
  KVTIER_RETURN_IF_ERROR(r->Done("match"));
  // Runs the arena holds and runs below it may alternate along a chain
  // (the arena's blocks after one it wrote down): each leading key any
  // tier holds.
  std::vector<CacheTier> tiers;
  const std::span<const BlockKey> chain(keys);
  while (tiers.size() < chain.size()) {
    const size_t in_arena = index_.Match(chain.subspan(tiers.size()));
    tiers.insert(tiers.end(), in_arena, CacheTier::kHost);
    if (tiers.size() == chain.size() || below_ == nullptr) break;
    MatchResult m = below_->Match(chain.subspan(tiers.size()));
    if (m.tiers.empty()) break;
    tiers.insert(tiers.end(), m.tiers.begin(), m.tiers.end());
  }
  w->StatusOf(Status::Ok());
  w->U32(static_cast<uint32_t>(tiers.size()));
  for (CacheTier t : tiers) w->U8(static_cast<uint8_t>(t));
  return Status::Ok();
}

void ArenaService::PromoteMisses(std::span<const BlockKey> keys) {
  if (below_ == nullptr) return;
  std::vector<BlockKey> missing;
  for (const BlockKey& k : keys) {
    if (!index_.Contains(k)) missing.push_back(k);
  }
  if (missing.empty()) return;
  Result<LoadFuture> f = below_->LoadShared(missing);
  if (!f.ok()) return;
  Result<std::vector<LoadedBlock>> got = f->Get();
  if (!got.ok()) return;
  for (size_t i = 0; i < got->size(); ++i) {
    const LoadedBlock& b = (*got)[i];
    if (b.block == nullptr || b.block->size() > arena_->geometry().slot_bytes) continue;
    // The tier below verified it; its namespace is in the header.
    DecodeOptions header_only;
    header_only.verify_checksum = false;
    Result<DecodedBlock> header = DecodeBlockHeader(std::span(b.block->data(), b.block->size()), b.block->size(), header_only);
    if (!header.ok()) continue;
    std::vector<EvictedBlock> evicted;
    Result<std::vector<SlotRef>> slot = index_.Reserve(kDaemonClient, 1, &evicted);
    WriteDown(evicted);
    if (!slot.ok()) return;  // every slot leased or reserved: serve the rest as misses
    const SlotRef ref = (*slot)[0];
    HandOver(ref);
    const std::span<const std::byte> bytes(b.block->data(), b.block->size());
    std::memcpy(arena_->Bytes(ref.slot).data(), bytes.data(), bytes.size());
    arena_->SetPublished(ref.slot, bytes.size(), missing[i], SumOf(bytes));
    evicted.clear();
    const Status published = index_.Publish(kDaemonClient, ref.slot, missing[i],
                                            header->meta.ns, b.block->size(),
                                            /*dirty=*/false, &evicted);
    WriteDown(evicted);
    if (published.ok()) promoted_.fetch_add(1, std::memory_order_relaxed);
  }
}

Status ArenaService::Lookup(ClientId client, FrameReader* r, FrameWriter* w) {
  std::vector<BlockKey> keys = ReadKeys(r);
  KVTIER_RETURN_IF_ERROR(r->Done("lookup"));
  PromoteMisses(keys);
  SlotIndex::LookupResult found = index_.Lookup(client, keys);
  w->StatusOf(Status::Ok());
  w->U64(found.lease);
  w->U32(static_cast<uint32_t>(keys.size()));
  for (const std::optional<SlotRef>& s : found.slots) {
    w->U32(s ? s->slot : kNoSlot);
    w->U64(s ? s->generation : 0);
    w->U64(s ? s->length : 0);
  }
  return Status::Ok();
}

void ArenaService::HandOver(const SlotRef& s) {
  // The header first, then the generation (release): a client reading the
  // slot on its own that sees the new generation sees no key either, and
  // one that read the old generation before its copy sees it change.
  arena_->SetPublished(s.slot, 0, BlockKey{}, SlotSum{});
  arena_->SetGeneration(s.slot, s.generation);
}

Status ArenaService::Reserve(ClientId client, FrameReader* r, FrameWriter* w) {
  const uint32_t n = r->Count(8);
  std::vector<uint64_t> sizes(n);
  for (uint32_t i = 0; i < n; ++i) sizes[i] = r->U64();
  KVTIER_RETURN_IF_ERROR(r->Done("reserve"));
  for (uint32_t i = 0; i < n; ++i) {
    if (sizes[i] == 0 || sizes[i] > arena_->geometry().slot_bytes) {
      w->StatusOf(Status::InvalidArgument(
          "block " + std::to_string(i) + " of " + std::to_string(sizes[i]) +
          " bytes does not fit an arena slot (" + std::to_string(arena_->geometry().slot_bytes) +
          " bytes)"));
      return Status::Ok();
    }
  }
  std::vector<EvictedBlock> evicted;
  Result<std::vector<SlotRef>> slots = index_.Reserve(client, n, &evicted);
  WriteDown(evicted);
  if (!slots.ok()) {
    w->StatusOf(slots.status());
    return Status::Ok();
  }
  w->StatusOf(Status::Ok());
  w->U32(n);
  for (const SlotRef& s : *slots) {
    HandOver(s);
    w->U32(s.slot);
    w->U64(s.generation);
  }
  return Status::Ok();
}

Result<BlockKey> ArenaService::Verify(std::span<const std::byte> bytes,
                                      const BlockKey& key) const {
  DecodeOptions opts;
  opts.expected_key = &key;
  opts.expected_signature = &signature_;
  opts.expected_layout = &layout_;
  KVTIER_ASSIGN_OR_RETURN(DecodedBlock block, DecodeBlock(bytes, opts));
  return block.meta.ns;
}

Result<ArenaService::Verified> ArenaService::CopyAndVerify(uint32_t slot, uint64_t length,
                                                           const BlockKey& key) {
  if (!scratch_.has_value()) {
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer b, BlockBuffer::Allocate(arena_->geometry().slot_bytes));
    scratch_.emplace(std::move(b));
  }
  const std::span<std::byte> copy(scratch_->data(), length);
  Verified v;
  v.sum = CopyWithSum(arena_->Bytes(slot).first(length), copy);
  KVTIER_ASSIGN_OR_RETURN(v.ns, Verify(copy, key));
  return v;
}

Status ArenaService::Publish(ClientId client, FrameReader* r, FrameWriter* w) {
  struct Item {
    uint32_t slot;
    uint64_t length;
    BlockKey key;
  };
  const uint32_t n = r->Count(4 + 8 + 32);
  std::vector<Item> items(n);
  for (Item& it : items) {
    it.slot = r->U32();
    it.length = r->U64();
    it.key = r->Key();
  }
  KVTIER_RETURN_IF_ERROR(r->Done("publish"));
  w->StatusOf(Status::Ok());
  w->U32(n);
  for (const Item& it : items) {
    Status s;
    if (it.slot >= arena_->geometry().slot_count || it.length == 0 ||
        it.length > arena_->geometry().slot_bytes) {
      s = Status::InvalidArgument("bad slot or length");
    } else if (!index_.ReservedBy(client, it.slot)) {
      // Checked before the slot's header is touched: a slot another client
      // reserved, or one published (a second publish of it), keeps the
      // header its readers check their copies against. (Handle runs on the
      // loop thread alone: nothing reserves or frees between here and
      // index_.Publish.)
      s = Status::InvalidArgument("slot " + std::to_string(it.slot) +
                                  " is not reserved by this client");
    } else {
      // A torn or wrong block is never published: the file's own checks,
      // on a copy whose sum readers then check theirs against.
      Result<Verified> ns = CopyAndVerify(it.slot, it.length, it.key);
      if (ns.ok()) {
        arena_->SetPublished(it.slot, it.length, it.key, ns->sum);
        std::vector<EvictedBlock> evicted;
        s = index_.Publish(client, it.slot, it.key, ns->ns, it.length, /*dirty=*/true, &evicted);
        WriteDown(evicted);
      } else {
        s = ns.status();
        (void)index_.Abort(client, it.slot);
      }
    }
    if (!s.ok()) publish_refused_.fetch_add(1, std::memory_order_relaxed);
    w->U8(static_cast<uint8_t>(s.code()));
  }
  return Status::Ok();
}

Status ArenaService::Contains(FrameReader* r, FrameWriter* w) {
  std::vector<BlockKey> keys = ReadKeys(r);
  KVTIER_RETURN_IF_ERROR(r->Done("contains"));
  w->StatusOf(Status::Ok());
  w->U32(static_cast<uint32_t>(keys.size()));
  for (const BlockKey& k : keys) {
    CacheTier t = CacheTier::kNone;
    if (index_.Contains(k)) {
      t = CacheTier::kHost;
    } else if (below_ != nullptr) {
      t = below_->Contains(k);
    }
    w->U8(static_cast<uint8_t>(t));
  }
  return Status::Ok();
}

Status ArenaService::Erase(FrameReader* r, FrameWriter* w) {
  std::vector<BlockKey> keys = ReadKeys(r);
  KVTIER_RETURN_IF_ERROR(r->Done("erase"));
  w->StatusOf(Status::Ok());
  w->U32(static_cast<uint32_t>(keys.size()));
  for (const BlockKey& k : keys) {
    bool erased = index_.Erase(k);
    if (below_ != nullptr) {
      Result<bool> b = below_->Erase(k);
      erased = erased || (b.ok() && *b);
    }
    w->U8(erased ? 1 : 0);
  }
  return Status::Ok();
}

bool ArenaService::StoreBelow(uint32_t slot, const BlockKey& key, uint64_t length) {
  if (below_ == nullptr) return false;
  Result<BlockBuffer> copy = BlockBuffer::Allocate(length);
  if (!copy.ok()) return false;
  // Only the bytes published: a byte changed in the arena since is dropped.
  if (CopyWithSum(arena_->Bytes(slot).first(length), {copy->data(), length}) != arena_->Sum(slot)) {
    return false;
  }
  SharedBlock block = std::make_shared<const BlockBuffer>(std::move(*copy));
  const SharedBlock blocks[] = {block};
  return below_->Store(std::span<const BlockKey>(&key, 1), blocks).ok();
}

void ArenaService::WriteDown(const std::vector<EvictedBlock>& evicted) {
  for (const EvictedBlock& e : evicted) {
    if (!e.dirty) continue;
    if (StoreBelow(e.slot, e.key, e.length)) {
      written_down_.fetch_add(1, std::memory_order_relaxed);
    } else {
      dropped_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void ArenaService::ClientGone(ClientId client) { (void)index_.ReleaseClient(client); }

ServerShutdownReport ArenaService::WriteDownAndClose(uint64_t timeout_ms) {
  ServerShutdownReport report;
  // Saturated: any duration a user types (2^40 ms is 34 years).
  const uint64_t deadline =
      timeout_ms == 0 ? 0 : MonotonicMicros() + std::min<uint64_t>(timeout_ms, uint64_t{1} << 40) * 1000;
  std::vector<BlockKey> keys;
  SlotIndex::LookupResult dirty = index_.DirtyBlocks(&keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    const SlotRef& s = *dirty.slots[i];
    const bool in_time = deadline == 0 || MonotonicMicros() < deadline;
    if (in_time && StoreBelow(s.slot, keys[i], s.length)) {
      index_.MarkClean(s.slot, s.generation);
      ++report.blocks_written;
    } else {
      ++report.blocks_dropped;
    }
  }
  if (dirty.lease != 0) (void)index_.Release(kDaemonClient, dirty.lease);
  written_down_.fetch_add(report.blocks_written, std::memory_order_relaxed);
  dropped_.fetch_add(report.blocks_dropped, std::memory_order_relaxed);
  if (below_ != nullptr) {
    (void)below_->Flush();
    (void)below_->Close();
  }
  return report;
}

ArenaStats ArenaService::Stats() const {
  const SlotIndexStats s = index_.Stats();
  ArenaStats a;
  a.slots = s.slots;
  a.slot_bytes = arena_->geometry().slot_bytes;
  a.free = s.free;
  a.reserved = s.reserved;
  a.published = s.published;
  a.published_bytes = s.published_bytes;
  a.dirty = s.dirty;
  a.leased = s.leased;
  a.leases_open = s.leases_open;
  a.lookups = s.lookups;
  a.hits = s.hits;
  a.evictions = s.evictions;
  a.publishes = s.publishes;
  a.duplicate_publishes = s.duplicate_publishes;
  a.publish_refused = publish_refused_.load(std::memory_order_relaxed);
  a.reserve_failures = s.reserve_failures;
  a.client_releases = s.client_releases;
  a.namespaces = s.namespaces;
  a.quota_evictions = s.quota_evictions;
  a.quota_refusals = s.quota_refusals;
  a.promoted = promoted_.load(std::memory_order_relaxed);
  a.written_down = written_down_.load(std::memory_order_relaxed);
  a.dropped = dropped_.load(std::memory_order_relaxed);
  a.bad_frames = bad_frames_.load(std::memory_order_relaxed);
  return a;
}

std::optional<CacheStats> ArenaService::BelowStats() const {
  if (below_ == nullptr) return std::nullopt;
  return below_->Stats();
}

std::string ArenaService::StatsJson() const {
  nlohmann::json arena = nlohmann::json::object();
  stats::AddJson(Stats(), &arena);
  nlohmann::json j = {{"arena", arena}};
  j["cache"] = below_ != nullptr ? nlohmann::json::parse(below_->Stats().ToJson()) : nlohmann::json();
  return j.dump();
}

}  // namespace kvtier::server
