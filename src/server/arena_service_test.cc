// ArenaService::Handle driven with random request frames from three clients,
// as the daemon's loop thread calls it: the frames a well-behaved client
// sends (honest) and frames cut short, bit-flipped, padded or naming slots,
// leases and keys that are not theirs (hostile). What must hold after every
// request: each slot is free, reserved, published or (erased while leased)
// waiting for its last lease; with no lease open none waits; each answered
// request gets a well-formed reply to its own op; every refused frame is
// counted in bad_frames; and, with honest clients, a leased slot keeps
// exactly the bytes of the block its key names until the lease goes.
#include "server/arena_service.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "kvtier/tiered_cache.h"
#include "server_client/arena.h"
#include "server_client/wire.h"
#include "testing/temp_dir.h"

namespace kvtier::server {
namespace arena_frames {
namespace {

constexpr ClientId kClients = 3;

// One lease a client holds on one slot, as its lookup reply gave it.
struct Held {
  uint64_t lease = 0;
  uint32_t slot = 0;
  uint64_t generation = 0;
  size_t block = 0;  // index into Rig::files
};

class Rig {
 public:
  // `below_dir`: a disk tier below the arena there, as `kvtier serve
  // --disk-dir` opens it (write-through, nothing promoted); empty: none.
  Rig(uint32_t slots, uint32_t quota, const std::string& below_dir = "")
      : layout_(*ModelLayout::Preset("tiny")) {
    for (uint8_t i = 0; i < 12; ++i) {
      BlockKey key;
      key.bytes[0] = static_cast<uint8_t>(i + 1);
      key.bytes[1] = 0xA7;
      std::vector<std::vector<std::byte>> tensors;
      std::vector<std::span<const std::byte>> spans;
      size_t t = 0;
      for (const LayerSpec& l : layout_.layers) {
        for (const TensorSpec& s : l.states) {
          tensors.emplace_back(s.ByteSize());
          for (size_t b = 0; b < tensors.back().size(); ++b) {
            tensors.back()[b] = static_cast<std::byte>(b * 13 + i * 7 + t);
          }
          ++t;
        }
      }
      for (const auto& x : tensors) spans.emplace_back(x);
      EncodeRequest req;
      req.layout = &layout_;
      req.key = key;
      req.ns.bytes[0] = static_cast<uint8_t>(1 + i % 2);  // two namespaces
      req.tensors = spans;
      Result<BlockBuffer> file = EncodeBlock(req);
      EXPECT_TRUE(file.ok());
      keys.push_back(key);
      files.push_back(*std::move(file));
    }
    slot_bytes_ = (files[0].size() + 4095) / 4096 * 4096;
    Result<std::unique_ptr<Arena>> arena = Arena::Create({slots, slot_bytes_});
    EXPECT_TRUE(arena.ok());
    Result<std::unique_ptr<Arena>> view = Arena::Map(::dup((*arena)->fd()));
    EXPECT_TRUE(view.ok());
    view_ = *std::move(view);
    std::unique_ptr<TieredCache> below;
    if (!below_dir.empty()) {
      Result<std::unique_ptr<TieredCache>> opened = OpenBelow(below_dir);
      EXPECT_TRUE(opened.ok()) << opened.status().ToString();
      if (opened.ok()) below = *std::move(opened);
    }
    service = std::make_unique<ArenaService>(*std::move(arena), layout_, std::move(below), quota);
  }

  Result<std::unique_ptr<TieredCache>> OpenBelow(const std::string& dir) const {
    CacheOptions c;
    c.layout_signature = layout_.Signature();
    c.host.capacity_bytes = slot_bytes_;
    c.promote_disk_hits = false;
    c.write_policy = WritePolicy::kWriteThrough;
    DiskTierOptions d;
    d.dir = dir;
    d.max_bytes = 0;
    c.disk = std::move(d);
    return TieredCache::Open(std::move(c), Env::Default());
  }

  // The arena as a client maps it.
  Arena& view() { return *view_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  std::string signature() const { return layout_.Signature(); }

  std::vector<BlockKey> keys;
  std::vector<BlockBuffer> files;
  std::unique_ptr<ArenaService> service;

 private:
  ModelLayout layout_;
  uint64_t slot_bytes_ = 0;
  std::unique_ptr<Arena> view_;
};

// The body of a frame (FrameWriter::Finish puts a u32 length first).
std::vector<uint8_t> BodyOf(FrameWriter* w) {
  const std::vector<uint8_t>& frame = w->Finish();
  return std::vector<uint8_t>(frame.begin() + 4, frame.end());
}

// The slot accounting every step must keep.
void ExpectAccounted(const ArenaService& s, uint32_t slots, uint64_t step) {
  const ArenaStats a = s.Stats();
  ASSERT_EQ(a.slots, slots) << "step " << step;
  ASSERT_LE(a.free + a.reserved + a.published, a.slots) << "step " << step;
  if (a.leases_open == 0) {
    ASSERT_EQ(a.free + a.reserved + a.published, a.slots) << "step " << step;
    ASSERT_EQ(a.leased, 0u) << "step " << step;
  }
}

class Driver {
 public:
  Driver(Rig* rig, uint32_t slots, uint64_t seed, bool honest)
      : rig_(rig), slots_(slots), rng_(seed), honest_(honest) {}

  uint64_t R(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  // A key of the rig's blocks, or (hostile) now and then one of no block.
  BlockKey SomeKey() {
    if (!honest_ && R(10) == 0) {
      BlockKey k;
      for (uint8_t& b : k.bytes) b = static_cast<uint8_t>(R(256));
      return k;
    }
    return rig_->keys[R(rig_->keys.size())];
  }

  // One request of a random client (or its socket closing).
  void Step(uint64_t step) {
    const ClientId c = 1 + R(kClients);
    if (R(60) == 0) {
      Gone(c);
      return;
    }
    Op op = static_cast<Op>(1 + R(11));
    // Erase (which reaches the tiers below too) one time in 16 it is
    // drawn, a lookup the others: blocks stay long enough to be evicted.
    if (op == Op::kErase && R(16) != 0) op = Op::kLookup;
    FrameWriter w(op);
    std::vector<BlockKey> asked;
    std::vector<size_t> published_blocks;
    switch (op) {
      case Op::kHello:
        w.Str16(honest_ || R(4) != 0 ? rig_->signature() : "kvtier-layout-v1;bt=1;L0=x");
        break;
      case Op::kMatch:
      case Op::kLookup:
      case Op::kContains:
      case Op::kErase: {
        const uint32_t n = static_cast<uint32_t>(R(5));
        for (uint32_t i = 0; i < n; ++i) asked.push_back(SomeKey());
        WriteKeys(&w, asked);
        break;
      }
      case Op::kRelease: {
        std::vector<Held>& held = leases_[c];
        if (honest_ && held.empty()) return;
        w.U64(held.empty() || (!honest_ && R(8) == 0) ? R(1000) : held[R(held.size())].lease);
        break;
      }
      case Op::kReserve: {
        const uint32_t n = static_cast<uint32_t>(R(4));
        w.U32(n);
        for (uint32_t i = 0; i < n; ++i) {
          w.U64(honest_ || R(8) != 0 ? rig_->files[0].size() : R(rig_->slot_bytes() * 2));
        }
        break;
      }
      case Op::kPublish: {
        std::vector<uint32_t>& mine = reserved_[c];
        if (honest_ && mine.empty()) return;
        const uint32_t n = honest_ ? 1 : static_cast<uint32_t>(1 + R(2));
        w.U32(n);
        for (uint32_t i = 0; i < n; ++i) {
          const size_t pick = mine.empty() ? 0 : R(mine.size());
          uint32_t slot = static_cast<uint32_t>(R(slots_ + 1));
          if (!mine.empty() && (honest_ || R(6) != 0)) {
            slot = mine[pick];
            mine.erase(mine.begin() + static_cast<ptrdiff_t>(pick));
          }
          const size_t b = R(rig_->files.size());
          const BlockBuffer& file = rig_->files[b];
          if (slot < slots_) {  // the client writes the block into the slot
            std::span<std::byte> bytes = rig_->view().Bytes(slot);
            std::memcpy(bytes.data(), file.data(), file.size());
            if (!honest_ && R(10) == 0) bytes[R(file.size())] ^= std::byte{0x5A};
          }
          w.U32(slot);
          w.U64(honest_ || R(8) != 0 ? file.size() : R(rig_->slot_bytes() + 10));
          w.Key(honest_ || R(8) != 0 ? rig_->keys[b] : SomeKey());
          published_blocks.push_back(b);
        }
        break;
      }
      case Op::kAbort: {
        std::vector<uint32_t>& mine = reserved_[c];
        const uint32_t n = static_cast<uint32_t>(R(3));
        std::vector<uint32_t> given;
        for (uint32_t i = 0; i < n; ++i) {
          if (!mine.empty() && (honest_ || R(4) != 0)) {
            const size_t pick = R(mine.size());
            given.push_back(mine[pick]);
            mine.erase(mine.begin() + static_cast<ptrdiff_t>(pick));
          } else if (!honest_) {
            given.push_back(static_cast<uint32_t>(R(slots_ + 2)));
          }
        }
        w.U32(static_cast<uint32_t>(given.size()));
        for (uint32_t s : given) w.U32(s);
        break;
      }
      case Op::kStats:
        break;
      case Op::kTouch: {
        const uint32_t n = static_cast<uint32_t>(R(3));
        w.U32(n);
        for (uint32_t i = 0; i < n; ++i) {
          w.U32(static_cast<uint32_t>(R(slots_ + 1)));
          w.U64(R(4));
        }
        break;
      }
    }
    std::vector<uint8_t> body = BodyOf(&w);
    const std::vector<uint8_t> sent = body;
    if (!honest_) {
      if (R(30) == 0 && !body.empty()) body.resize(R(body.size()));
      if (R(30) == 0 && !body.empty()) body[R(body.size())] ^= static_cast<uint8_t>(1 + R(255));
      if (R(40) == 0) body.push_back(static_cast<uint8_t>(R(256)));
    }
    std::vector<uint8_t> reply;
    bool pass_fd = false;
    const Status s = rig_->service->Handle(c, body, &reply, &pass_fd);
    if (!s.ok()) {
      ++refused;
      ASSERT_FALSE(honest_) << "step " << step << ": " << s.ToString();
      ASSERT_FALSE(pass_fd);
      Gone(c);  // the daemon closes a client that sent a bad frame
      return;
    }
    if (reply.empty()) {  // release and touch are not answered
      ASSERT_TRUE(body[1] == static_cast<uint8_t>(Op::kRelease) ||
                  body[1] == static_cast<uint8_t>(Op::kTouch))
          << "step " << step;
      if (body[1] == static_cast<uint8_t>(Op::kRelease)) Forget(c, body);
      return;
    }
    FrameReader r(std::span<const uint8_t>(reply).subspan(4));
    Result<Op> got = r.Header();
    ASSERT_TRUE(got.ok()) << "step " << step;
    ASSERT_EQ(static_cast<uint8_t>(*got), body[1]) << "step " << step;
    const Status st = r.StatusOf();
    ASSERT_TRUE(r.ok()) << "step " << step;
    ASSERT_EQ(pass_fd, *got == Op::kHello && st.ok()) << "step " << step;
    if (!st.ok()) {
      // Refusals an honest client can meet: none but a full arena.
      if (honest_) {
        ASSERT_TRUE(st.IsResourceExhausted()) << "step " << step << ": " << st.ToString();
      }
      return;
    }
    if (*got == Op::kLookup && body == sent) {  // not mutated: `asked` is what it names
      const uint64_t lease = r.U64();
      const uint32_t n = r.U32();
      ASSERT_EQ(n, asked.size()) << "step " << step;
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t slot = r.U32();
        const uint64_t generation = r.U64();
        const uint64_t length = r.U64();
        if (slot == kNoSlot) continue;
        ASSERT_LT(slot, slots_) << "step " << step;
        ASSERT_NE(lease, 0u) << "step " << step;
        ASSERT_EQ(rig_->view().Key(slot), asked[i]) << "step " << step;
        ASSERT_EQ(rig_->view().Length(slot), length) << "step " << step;
        size_t b = 0;
        while (b < rig_->keys.size() && rig_->keys[b] != asked[i]) ++b;
        if (b < rig_->keys.size()) leases_[c].push_back({lease, slot, generation, b});
      }
      ASSERT_TRUE(r.AtEnd()) << "step " << step;
    } else if (*got == Op::kReserve) {
      const uint32_t n = r.U32();
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t slot = r.U32();
        (void)r.U64();
        ASSERT_LT(slot, slots_) << "step " << step;
        reserved_[c].push_back(slot);
      }
      ASSERT_TRUE(r.ok() && r.AtEnd()) << "step " << step;
    } else if (*got == Op::kPublish && honest_) {
      ASSERT_EQ(r.U32(), published_blocks.size()) << "step " << step;
      for (size_t i = 0; i < published_blocks.size(); ++i) {
        const uint8_t code = r.U8();
        // OK, or (a namespace at its quota, all of it leased) refused.
        ASSERT_TRUE(code == static_cast<uint8_t>(StatusCode::kOk) ||
                    code == static_cast<uint8_t>(StatusCode::kResourceExhausted))
            << "step " << step << ": code " << int{code};
      }
    }
  }

  // Honest clients: every lease still held sees the generation it was given
  // and exactly its block's bytes (a leased slot is never handed over).
  void ExpectLeasedBytes(uint64_t step) {
    for (const auto& [c, held] : leases_) {
      for (const Held& h : held) {
        ASSERT_EQ(rig_->view().Generation(h.slot), h.generation) << "step " << step;
        const BlockBuffer& file = rig_->files[h.block];
        ASSERT_EQ(rig_->view().Length(h.slot), file.size()) << "step " << step;
        ASSERT_EQ(std::memcmp(rig_->view().Bytes(h.slot).data(), file.data(), file.size()), 0)
            << "step " << step << ": slot " << h.slot;
      }
    }
  }

  void Gone(ClientId c) {
    rig_->service->ClientGone(c);
    leases_.erase(c);
    reserved_.erase(c);
  }

  uint64_t refused = 0;  // frames Handle refused

 private:
  // A release the daemon took: the client's lease entries under it go.
  void Forget(ClientId c, const std::vector<uint8_t>& body) {
    FrameReader r(body);
    (void)r.Header();
    const uint64_t lease = r.U64();
    std::vector<Held>& held = leases_[c];
    std::erase_if(held, [&](const Held& h) { return h.lease == lease; });
  }

  Rig* rig_;
  uint32_t slots_;
  std::mt19937_64 rng_;
  bool honest_;
  std::map<ClientId, std::vector<Held>> leases_;
  std::map<ClientId, std::vector<uint32_t>> reserved_;
};

void Drive(uint32_t slots, uint32_t quota, uint64_t seed, bool honest, uint64_t steps,
           bool below = false) {
  SCOPED_TRACE("slots " + std::to_string(slots) + " quota " + std::to_string(quota) + " seed " +
               std::to_string(seed) + (below ? " with a disk tier below" : ""));
  kvtier::testing::TempDir dir("arena-below");
  Rig rig(slots, quota, below ? dir.path() : "");
  ASSERT_TRUE(rig.service->BeginServing().ok());
  Driver d(&rig, slots, seed, honest);
  for (uint64_t step = 0; step < steps; ++step) {
    d.Step(step);
    if (::testing::Test::HasFatalFailure()) break;
    ExpectAccounted(*rig.service, slots, step);
    if (honest) d.ExpectLeasedBytes(step);
    if (::testing::Test::HasFatalFailure()) break;
  }
  // Every refused frame is counted; every client gone, nothing is held.
  EXPECT_EQ(rig.service->Stats().bad_frames, d.refused);
  if (honest) {
    EXPECT_EQ(d.refused, 0u);
  }
  for (ClientId c = 1; c <= kClients; ++c) d.Gone(c);
  const ArenaStats a = rig.service->Stats();
  EXPECT_EQ(a.leases_open, 0u);
  EXPECT_EQ(a.reserved, 0u);
  EXPECT_EQ(a.leased, 0u);
  EXPECT_EQ(a.free + a.published, a.slots);
  rig.service->EndServing();
  if (!below) return;
  // Whatever went down (evicted dirty blocks, then every dirty block at
  // shutdown) is a key's own block, byte for byte: read back in a cache
  // opened afresh on the folder, no file is refused.
  const ServerShutdownReport report = rig.service->WriteDownAndClose(0);
  Result<std::unique_ptr<TieredCache>> again = rig.OpenBelow(dir.path());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  std::vector<std::vector<std::byte>> got(rig.keys.size(),
                                          std::vector<std::byte>(rig.files[0].size()));
  std::vector<std::span<std::byte>> dsts(got.begin(), got.end());
  Result<LoadFuture> f = (*again)->Load(rig.keys, dsts);
  ASSERT_TRUE(f.ok());
  Result<std::vector<LoadedBlock>> loaded = f->Get();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  uint64_t found = 0;
  for (size_t k = 0; k < rig.keys.size(); ++k) {
    if ((*loaded)[k].tier == CacheTier::kNone) continue;
    ++found;
    ASSERT_EQ((*loaded)[k].bytes, rig.files[k].size()) << "block " << k;
    EXPECT_EQ(std::memcmp(got[k].data(), rig.files[k].data(), rig.files[k].size()), 0)
        << "block " << k;
  }
  const CacheStats st = (*again)->Stats();
  ASSERT_TRUE(st.disk.has_value());
  EXPECT_EQ(st.disk->quarantined, 0u);
  EXPECT_EQ(found, st.hits_disk);
  EXPECT_GT(found, 0u);  // 3 to 6 of the 12 in these runs
  // Honest clients publish valid blocks only: each one went down.
  if (honest) {
    EXPECT_EQ(report.blocks_dropped, 0u);
  }
  EXPECT_TRUE((*again)->Close().ok());
}

// The status code of each publish item, in order (REQUIRES: an OK reply).
std::vector<uint8_t> PublishCodes(const std::vector<uint8_t>& reply) {
  FrameReader r(std::span<const uint8_t>(reply).subspan(4));
  EXPECT_TRUE(r.Header().ok());
  EXPECT_TRUE(r.StatusOf().ok());
  std::vector<uint8_t> codes(r.U32());
  for (uint8_t& c : codes) c = r.U8();
  EXPECT_TRUE(r.ok() && r.AtEnd());
  return codes;
}

// Found by the hostile run below: the daemon passed its arena's descriptor
// with a refused hello too (the reply said InvalidArgument and carried it).
TEST(ArenaServiceFrames, HelloOfAnotherLayoutIsRefusedWithoutTheArenaDescriptor) {
  Rig rig(2, 0);
  for (const std::string& signature :
       {std::string("kvtier-layout-v1;bt=1;L0=x"), std::string(), rig.signature()}) {
    FrameWriter w(Op::kHello);
    w.Str16(signature);
    std::vector<uint8_t> reply;
    bool pass_fd = true;
    ASSERT_TRUE(rig.service->Handle(1, BodyOf(&w), &reply, &pass_fd).ok());
    FrameReader r(std::span<const uint8_t>(reply).subspan(4));
    ASSERT_TRUE(r.Header().ok());
    const Status st = r.StatusOf();
    const bool ours = signature == rig.signature();
    EXPECT_EQ(st.code(), ours ? StatusCode::kOk : StatusCode::kInvalidArgument) << signature;
    EXPECT_EQ(pass_fd, ours) << signature;
  }
}

// Found by the hostile run below: a publish of a slot the client had not
// reserved (another client's published block, or its own published twice)
// was refused, but only after the daemon had written the new key and sum
// into the slot's header: the index still named the old key there, whose
// readers then failed every copy (verify_failures) until the slot was
// evicted, and an eviction wrote nothing down (the bytes were not the key's).
TEST(ArenaServiceFrames, PublishOfASlotNotReservedByTheClientLeavesItsHeaderAlone) {
  Rig rig(2, 0);
  auto call = [&](ClientId c, FrameWriter* w) {
    std::vector<uint8_t> reply;
    bool pass_fd = false;
    EXPECT_TRUE(rig.service->Handle(c, BodyOf(w), &reply, &pass_fd).ok());
    return reply;
  };
  // Client 1 stores block 0 in the slot it reserved.
  FrameWriter reserve(Op::kReserve);
  reserve.U32(1);
  reserve.U64(rig.files[0].size());
  std::vector<uint8_t> reply = call(1, &reserve);
  FrameReader rr(std::span<const uint8_t>(reply).subspan(4));
  ASSERT_TRUE(rr.Header().ok());
  ASSERT_TRUE(rr.StatusOf().ok());
  ASSERT_EQ(rr.U32(), 1u);
  const uint32_t slot = rr.U32();
  std::memcpy(rig.view().Bytes(slot).data(), rig.files[0].data(), rig.files[0].size());
  auto publish = [&](ClientId c, size_t block) {
    FrameWriter w(Op::kPublish);
    w.U32(1);
    w.U32(slot);
    w.U64(rig.files[block].size());
    w.Key(rig.keys[block]);
    return PublishCodes(call(c, &w));
  };
  ASSERT_EQ(publish(1, 0), std::vector<uint8_t>{static_cast<uint8_t>(StatusCode::kOk)});
  const SlotSum sum0 = SumOf(rig.files[0].span());
  ASSERT_EQ(rig.view().Sum(slot), sum0);

  // Client 2 writes block 1 over it (every client may write the arena) and
  // publishes the slot it never reserved; then client 1 publishes it again.
  std::memcpy(rig.view().Bytes(slot).data(), rig.files[1].data(), rig.files[1].size());
  EXPECT_EQ(publish(2, 1),
            std::vector<uint8_t>{static_cast<uint8_t>(StatusCode::kInvalidArgument)});
  EXPECT_EQ(publish(1, 1),
            std::vector<uint8_t>{static_cast<uint8_t>(StatusCode::kInvalidArgument)});
  EXPECT_EQ(rig.view().Key(slot), rig.keys[0]);
  EXPECT_EQ(rig.view().Length(slot), rig.files[0].size());
  EXPECT_EQ(rig.view().Sum(slot), sum0);
  const ArenaStats a = rig.service->Stats();
  EXPECT_EQ(a.publishes, 1u);
  EXPECT_EQ(a.publish_refused, 2u);
  EXPECT_EQ(a.published, 1u);
  EXPECT_EQ(a.free, 1u);
}

TEST(ArenaServiceFrames, HonestClientsKeepTheirLeasedBytesAndEverySlotAccountedFor) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Drive(/*slots=*/1 + static_cast<uint32_t>(seed % 5), /*quota=*/0, seed, /*honest=*/true, 3000);
    Drive(/*slots=*/4, /*quota=*/2, seed, /*honest=*/true, 3000);
  }
}

// With a disk tier below: lookups promote from it, evictions and the
// shutdown write down to it, and nothing but a key's own block lands there.
TEST(ArenaServiceFrames, WithADiskTierBelowOnlyKeysOwnBlocksGoDown) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Drive(/*slots=*/2 + static_cast<uint32_t>(seed % 3), /*quota=*/0, seed, /*honest=*/true, 1500,
          /*below=*/true);
    Drive(/*slots=*/2 + static_cast<uint32_t>(seed % 3), /*quota=*/0, seed, /*honest=*/false, 1500,
          /*below=*/true);
  }
}

TEST(ArenaServiceFrames, HostileFramesAreRefusedAndCountedAndLeaveEverySlotAccountedFor) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Drive(/*slots=*/1 + static_cast<uint32_t>(seed % 5), /*quota=*/0, seed, /*honest=*/false, 3000);
    Drive(/*slots=*/4, /*quota=*/2, seed, /*honest=*/false, 3000);
  }
}

}  // namespace
}  // namespace arena_frames
}  // namespace kvtier::server
