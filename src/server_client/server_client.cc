#include "kvtier/server_client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "server_client/connection.h"

namespace kvtier {

using server::Connection;
using server::FrameReader;
using server::FrameWriter;
using server::Op;

Status ServerClientOptions::Validate() const {
  KVTIER_RETURN_IF_ERROR(server::SocketPathOf(server).status());
  if (layout_signature.empty()) {
    return Status::InvalidArgument("layout_signature: is required");
  }
  if (timeout_ms == 0 || timeout_ms > 3'600'000) {
    return Status::InvalidArgument("server_timeout: must be in [1 ms, 1 h]");
  }
  if (reconnect_backoff_ms > 3'600'000) {
    return Status::InvalidArgument("server_reconnect_backoff: must be at most 1 h");
  }
  return Status::Ok();
}

Result<std::unique_ptr<ServerClient>> ServerClient::Open(ServerClientOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  KVTIER_ASSIGN_OR_RETURN(std::string path, server::SocketPathOf(options.server));
  return std::unique_ptr<ServerClient>(
      new ServerClient(std::make_unique<Connection>(std::move(options), std::move(path))));
}

ServerClient::ServerClient(std::unique_ptr<Connection> conn) : conn_(std::move(conn)) {}
ServerClient::~ServerClient() = default;

std::vector<ServerTier> ServerClient::Match(std::span<const BlockKey> chain) {
  std::vector<ServerTier> tiers;
  if (chain.empty() || chain.size() > server::kMaxBatch) return tiers;
  MutexLock lock(conn_->mu());
  if (const server::Arena* arena = conn_->LiveArena()) {
    // The arena's key table answers without a round trip when it holds the
    // whole chain, or when there is nothing below it to ask about the rest.
    size_t n = 0;
    while (n < chain.size() && arena->FindPublished(chain[n]).has_value()) ++n;
    if (n == chain.size() || !arena->TiersBelow()) {
      tiers.assign(n, ServerTier::kArena);
      conn_->FlushTouchesIfDue();
      return tiers;
    }
  }
  FrameWriter w(Op::kMatch);
  server::WriteKeys(&w, chain);
  Result<std::vector<uint8_t>> body = conn_->Call(&w);
  if (!body.ok()) return tiers;
  FrameReader r(*body);
  if (!server::ReadReplyHead(&r, Op::kMatch).ok()) return tiers;
  const uint32_t n = r.Count(1);
  bool bad = n > chain.size();
  for (uint32_t i = 0; i < n && !bad; ++i) {
    const uint8_t t = r.U8();
    bad = t == 0 || t > static_cast<uint8_t>(ServerTier::kRemote);
    tiers.push_back(static_cast<ServerTier>(t));
  }
  if (bad || !r.Done("match").ok()) {
    conn_->Drop();
    tiers.clear();
  }
  return tiers;
}

namespace {

// Where a key's block sits in the arena as the slot's header said before
// the copy (the key table found it there).
struct ArenaSpot {
  uint32_t slot = 0;
  uint64_t generation = 0;
  uint64_t length = 0;
  server::SlotSum sum;
};

enum class ArenaRead {
  kHit,
  kMoved,  // the slot changed before or during the copy: ask the daemon
  kBad,    // the copy's sum is not the slot's, the slot unchanged: a corrupted byte
};

// Copies `spot`'s block into `dst` (which holds it) and checks it without
// the daemon: the slot's generation, key, length and sum, read before the
// copy, are read again after it, and the copy's sum must be the slot's,
// as a lease-held copy's is. The daemon clears a slot's header and bumps
// its generation before anyone may write it, so a copy that overlapped a
// new block's bytes sees the generation change: kMoved, never wrong bytes.
ArenaRead CopyFromArena(const server::Arena& arena, const ArenaSpot& spot, const BlockKey& key,
                        std::span<std::byte> dst) {
  const bool same_bytes =
      server::CopyWithSum(arena.Bytes(spot.slot).first(spot.length), dst) == spot.sum;
  // The copy's loads before the generation's second read.
#if defined(__SANITIZE_THREAD__)
  std::atomic_signal_fence(std::memory_order_seq_cst);  // TSan has no standalone fences
#else
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
  if (arena.Generation(spot.slot) != spot.generation || arena.Length(spot.slot) != spot.length ||
      !(arena.Key(spot.slot) == key) || !(arena.Sum(spot.slot) == spot.sum)) {
    return ArenaRead::kMoved;
  }
  return same_bytes ? ArenaRead::kHit : ArenaRead::kBad;
}

}  // namespace

Result<std::vector<uint64_t>> ServerClient::Load(std::span<const BlockKey> keys,
                                                 std::span<const std::span<std::byte>> dsts) {
  if (keys.size() != dsts.size()) {
    return Status::InvalidArgument("ServerClient::Load: " + std::to_string(keys.size()) +
                                   " keys but " + std::to_string(dsts.size()) + " buffers");
  }
  if (keys.size() > server::kMaxBatch) {
    return Status::InvalidArgument("ServerClient::Load: more than 65536 keys in one call");
  }
  std::vector<uint64_t> lens(keys.size(), 0);
  if (keys.empty()) return lens;
  MutexLock lock(conn_->mu());
  ServerClientStats& st = conn_->counters;
  st.lookups += keys.size();
  Status too_small;
  auto note_too_small = [&](size_t i, uint64_t length) {
    if (too_small.ok()) {
      too_small = Status::InvalidArgument("ServerClient::Load: buffer " + std::to_string(i) +
                                          " holds " + std::to_string(dsts[i].size()) +
                                          " bytes, the block " + std::to_string(length));
    }
    ++st.misses;
  };
  // First from the arena on its own; what it cannot serve goes to the
  // daemon, which leases it (and promotes it from the tiers below). The
  // hits are queued as touches (Connection::QueueTouch): the daemon counts
  // them and makes them recent when they reach it.
  std::vector<size_t> ask;
  if (const server::Arena* arena = conn_->LiveArena()) {
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::optional<uint32_t> slot = arena->FindPublished(keys[i]);
      if (!slot.has_value()) {
        if (arena->TiersBelow()) {
          ask.push_back(i);
        } else {
          ++st.misses;
        }
        continue;
      }
      const ArenaSpot spot{*slot, arena->Generation(*slot), arena->Length(*slot),
                           arena->Sum(*slot)};
      if (spot.length == 0 || spot.length > arena->geometry().slot_bytes ||
          !(arena->Key(*slot) == keys[i])) {
        ask.push_back(i);  // moved since the table was read
        continue;
      }
      if (spot.length > dsts[i].size()) {
        note_too_small(i, spot.length);
        continue;
      }
      switch (CopyFromArena(*arena, spot, keys[i], dsts[i])) {
        case ArenaRead::kHit:
          lens[i] = spot.length;
          ++st.hits;
          st.bytes_loaded += spot.length;
          conn_->QueueTouch(spot.slot, spot.generation);
          break;
        case ArenaRead::kMoved:
          ask.push_back(i);
          break;
        case ArenaRead::kBad:
          ++st.verify_failures;
          ++st.misses;
          break;
      }
    }
    conn_->FlushTouchesIfDue();
  } else {
    for (size_t i = 0; i < keys.size(); ++i) ask.push_back(i);
  }
  if (ask.empty()) {
    if (!too_small.ok()) return too_small;
    return lens;
  }

  FrameWriter w(Op::kLookup);
  std::vector<BlockKey> asked;
  asked.reserve(ask.size());
  for (size_t i : ask) asked.push_back(keys[i]);
  server::WriteKeys(&w, asked);
  Result<std::vector<uint8_t>> body = conn_->Call(&w);
  if (!body.ok()) {
    st.misses += ask.size();
    if (!too_small.ok()) return too_small;
    return lens;
  }
  FrameReader r(*body);
  struct Ref {
    uint32_t slot;
    uint64_t generation;
    uint64_t length;
  };
  std::vector<Ref> refs;
  uint64_t lease = 0;
  if (server::ReadReplyHead(&r, Op::kLookup).ok()) {
    lease = r.U64();
    const uint32_t n = r.Count(4 + 8 + 8);
    for (uint32_t i = 0; i < n; ++i) refs.push_back({r.U32(), r.U64(), r.U64()});
  }
  server::Arena* arena = conn_->arena();
  if (!r.Done("lookup").ok() || refs.size() != ask.size() || arena == nullptr) {
    conn_->Drop();
    st.misses += ask.size();
    if (!too_small.ok()) return too_small;
    return lens;
  }
  for (size_t k = 0; k < ask.size(); ++k) {
    const size_t i = ask[k];
    const Ref& ref = refs[k];
    if (ref.slot == server::kNoSlot) {
      ++st.misses;
      continue;
    }
    if (ref.slot >= arena->geometry().slot_count || ref.length == 0 ||
        ref.length > arena->geometry().slot_bytes) {
      ++st.verify_failures;
      ++st.misses;
      continue;
    }
    if (ref.length > dsts[i].size()) {
      note_too_small(i, ref.length);
      continue;
    }
    // The copy must be the bytes the daemon verified, and the slot must
    // still hold what was leased (a leased slot is never handed on: any
    // change is a bad byte, not a move).
    const ArenaSpot spot{ref.slot, ref.generation, ref.length, arena->Sum(ref.slot)};
    if (CopyFromArena(*arena, spot, keys[i], dsts[i]) != ArenaRead::kHit) {
      ++st.verify_failures;
      ++st.misses;
      continue;
    }
    lens[i] = ref.length;
    ++st.hits;
    st.bytes_loaded += ref.length;
  }
  if (lease != 0) {
    // Not answered: the daemon takes it before this client's next request.
    FrameWriter rel(Op::kRelease);
    rel.U64(lease);
    conn_->Post(&rel);  // a lost release ends with the connection
  }
  if (!too_small.ok()) return too_small;
  return lens;
}

std::optional<BlockBuffer> ServerClient::LoadBlock(const BlockKey& key) {
  std::optional<BlockBuffer> out;
  const BlockKey keys[] = {key};
  LoadBlocks(keys, [&](size_t, std::optional<BlockBuffer> b) { out = std::move(b); });
  return out;
}

void ServerClient::LoadBlocks(
    std::span<const BlockKey> keys,
    const std::function<void(size_t, std::optional<BlockBuffer>)>& on_block,
    const BlockAllocator& allocate) {
  if (keys.empty()) return;
  uint64_t slot_bytes = 0;
  {
    MutexLock lock(conn_->mu());
    if (conn_->arena() != nullptr) slot_bytes = conn_->arena()->geometry().slot_bytes;
  }
  if (slot_bytes == 0) {
    // Not connected yet: a Match makes the connection (and tells the size).
    (void)Match(keys.first(1));
    MutexLock lock(conn_->mu());
    if (conn_->arena() != nullptr) slot_bytes = conn_->arena()->geometry().slot_bytes;
  }
  if (slot_bytes == 0) {
    // No daemon to ask: lookups and misses, as Load counts them.
    {
      MutexLock lock(conn_->mu());
      conn_->counters.lookups += keys.size();
      conn_->counters.misses += keys.size();
    }
    for (size_t i = 0; i < keys.size(); ++i) on_block(i, std::nullopt);
    return;
  }
  const size_t round = static_cast<size_t>(
      std::clamp<uint64_t>(kLoadBlocksRoundBytes / slot_bytes, 1, server::kMaxBatch));
  for (size_t begin = 0; begin < keys.size(); begin += round) {
    const size_t n = std::min(round, keys.size() - begin);
    std::vector<std::optional<BlockBuffer>> bufs(n);
    // The keys of the round that got a buffer, and their buffers: a key
    // without one is left out of the Load (a destination too small would
    // fail the whole call) and counted a miss here.
    std::vector<BlockKey> asked;
    std::vector<std::span<std::byte>> dsts;
    std::vector<size_t> at;  // round position of each asked key
    for (size_t k = 0; k < n; ++k) {
      Result<BlockBuffer> b = allocate ? allocate(slot_bytes) : BlockBuffer::Allocate(slot_bytes);
      if (!b.ok() || b->size() < slot_bytes) continue;  // no memory: a miss
      bufs[k].emplace(*std::move(b));
      asked.push_back(keys[begin + k]);
      dsts.emplace_back(bufs[k]->data(), bufs[k]->size());
      at.push_back(k);
    }
    if (asked.size() < n) {
      MutexLock lock(conn_->mu());
      conn_->counters.lookups += n - asked.size();
      conn_->counters.misses += n - asked.size();
    }
    std::vector<uint64_t> lens(n, 0);
    if (!asked.empty()) {
      Result<std::vector<uint64_t>> got = Load(asked, dsts);
      if (got.ok()) {
        for (size_t j = 0; j < at.size(); ++j) lens[at[j]] = (*got)[j];
      }
    }
    for (size_t k = 0; k < n; ++k) {
      if (lens[k] == 0 || !bufs[k].has_value()) {
        on_block(begin + k, std::nullopt);
        continue;
      }
      bufs[k]->Truncate(lens[k]);  // the block, in the buffer it was copied into
      on_block(begin + k, std::move(bufs[k]));
    }
  }
}

Status ServerClient::Store(std::span<const BlockKey> keys,
                           std::span<const std::span<const std::byte>> blocks) {
  if (keys.size() != blocks.size()) {
    return Status::InvalidArgument("ServerClient::Store: " + std::to_string(keys.size()) +
                                   " keys but " + std::to_string(blocks.size()) + " blocks");
  }
  if (keys.size() > server::kMaxBatch) {
    return Status::InvalidArgument("ServerClient::Store: more than 65536 blocks in one call");
  }
  if (keys.empty()) return Status::Ok();
  MutexLock lock(conn_->mu());
  ServerClientStats& st = conn_->counters;
  FrameWriter w(Op::kReserve);
  w.U32(static_cast<uint32_t>(keys.size()));
  for (const auto& b : blocks) w.U64(b.size());
  Result<std::vector<uint8_t>> body = conn_->Call(&w);
  if (!body.ok()) {
    st.store_errors += keys.size();
    return body.status().WithContext("ServerClient::Store");
  }
  FrameReader r(*body);
  Status s = server::ReadReplyHead(&r, Op::kReserve);
  if (!s.ok()) {
    st.store_errors += keys.size();
    return s.WithContext("ServerClient::Store");
  }
  const uint32_t n = r.Count(12);
  std::vector<uint32_t> slots;
  for (uint32_t i = 0; i < n; ++i) {
    slots.push_back(r.U32());
    r.U64();  // generation: this client writes the slot, nobody reads it yet
  }
  server::Arena* arena = conn_->arena();
  if (!r.Done("reserve").ok() || n != keys.size() || arena == nullptr) {
    conn_->Drop();
    st.store_errors += keys.size();
    return Status::Unavailable("ServerClient::Store: bad reserve reply");
  }
  for (size_t i = 0; i < n; ++i) {
    if (slots[i] >= arena->geometry().slot_count) {
      conn_->Drop();
      return Status::Unavailable("ServerClient::Store: reply names a slot past the arena");
    }
    std::memcpy(arena->Bytes(slots[i]).data(), blocks[i].data(), blocks[i].size());
  }
  FrameWriter pub(Op::kPublish);
  pub.U32(n);
  for (size_t i = 0; i < n; ++i) {
    pub.U32(slots[i]);
    pub.U64(blocks[i].size());
    pub.Key(keys[i]);
  }
  body = conn_->Call(&pub);
  if (!body.ok()) {
    st.store_errors += keys.size();
    return body.status().WithContext("ServerClient::Store");
  }
  FrameReader pr(*body);
  s = server::ReadReplyHead(&pr, Op::kPublish);
  if (!s.ok()) return s.WithContext("ServerClient::Store");
  const uint32_t m = pr.Count(1);
  std::vector<uint8_t> codes;
  for (uint32_t i = 0; i < m; ++i) codes.push_back(pr.U8());
  if (!pr.Done("publish").ok() || m != n) {
    conn_->Drop();
    return Status::Unavailable("ServerClient::Store: bad publish reply");
  }
  Status first;
  for (size_t i = 0; i < n; ++i) {
    if (codes[i] == 0) {
      ++st.stores;
      st.bytes_stored += blocks[i].size();
      continue;
    }
    ++st.store_errors;
    if (first.ok()) {
      first = Status(codes[i] <= static_cast<uint8_t>(StatusCode::kInternal)
                         ? static_cast<StatusCode>(codes[i])
                         : StatusCode::kInternal,
                     "ServerClient::Store: block " + std::to_string(i) + " (key " +
                         keys[i].Hex().substr(0, 16) + "...) refused by the daemon");
    }
  }
  return first;
}

ServerTier ServerClient::Contains(const BlockKey& key) {
  MutexLock lock(conn_->mu());
  FrameWriter w(Op::kContains);
  const BlockKey one[] = {key};
  server::WriteKeys(&w, one);
  Result<std::vector<uint8_t>> body = conn_->Call(&w);
  if (!body.ok()) return ServerTier::kNone;
  FrameReader r(*body);
  if (!server::ReadReplyHead(&r, Op::kContains).ok()) return ServerTier::kNone;
  const uint32_t n = r.Count(1);
  const uint8_t t = n == 1 ? r.U8() : 0;
  if (!r.Done("contains").ok() || n != 1 || t > static_cast<uint8_t>(ServerTier::kRemote)) {
    conn_->Drop();
    return ServerTier::kNone;
  }
  return static_cast<ServerTier>(t);
}

Result<bool> ServerClient::Erase(const BlockKey& key) {
  MutexLock lock(conn_->mu());
  FrameWriter w(Op::kErase);
  const BlockKey one[] = {key};
  server::WriteKeys(&w, one);
  KVTIER_ASSIGN_OR_RETURN(std::vector<uint8_t> body, conn_->Call(&w));
  FrameReader r(body);
  KVTIER_RETURN_IF_ERROR(server::ReadReplyHead(&r, Op::kErase));
  const uint32_t n = r.Count(1);
  const uint8_t erased = n == 1 ? r.U8() : 0;
  if (!r.Done("erase").ok() || n != 1) {
    conn_->Drop();
    return Status::Unavailable("ServerClient::Erase: bad reply");
  }
  return erased != 0;
}

Result<std::string> ServerClient::DaemonStatsJson() {
  MutexLock lock(conn_->mu());
  FrameWriter w(Op::kStats);
  KVTIER_ASSIGN_OR_RETURN(std::vector<uint8_t> body, conn_->Call(&w));
  FrameReader r(body);
  KVTIER_RETURN_IF_ERROR(server::ReadReplyHead(&r, Op::kStats));
  std::string json = r.Str32();
  if (!r.Done("stats").ok()) {
    conn_->Drop();
    return Status::Unavailable("ServerClient::DaemonStatsJson: bad reply");
  }
  return json;
}

Status ServerClient::Connect() {
  MutexLock lock(conn_->mu());
  return conn_->ConnectNow();
}

ServerClientStats ServerClient::Stats() const {
  MutexLock lock(conn_->mu());
  return conn_->counters;
}

}  // namespace kvtier
