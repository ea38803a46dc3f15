// The shared-memory arena of `kvtier serve` (docs/server.md): one memfd
// that the daemon creates and every client maps, holding block files in
// fixed-size slots. Layout (all little-endian, offsets from the start):
//
//   [0, 4096)                  ArenaHeader: magic, version, slot count, slot
//                              size, flags; at byte 64 the owner lock
//   [4096, table_offset)       slot_count x SlotHeader (64 bytes each)
//   [table_offset, data_offset) the KeyTable (key_table.h): key -> slot
//   [data_offset, ...)         slot_count x slot_bytes of block files
//
// A SlotHeader holds the slot's generation (bumped by the daemon, release
// order, each time the slot is handed to a new block), and the published
// block's length, key and sum. The daemon alone decides what a slot holds;
// the header lets a client check, after copying a slot, that the slot still
// holds the block it was leased (same generation, key, length). The sum is
// XXH3-128 of the block file's bytes, taken by the daemon over its own copy
// of the bytes after that copy passed DecodeBlock (structure, the key, the
// daemon's layout signature, every checksum): a client's copy with the same
// sum is those verified bytes, so any byte changed in the arena since
// (or the sum itself) is caught without decoding the block again. The key
// table lets a client answer a match without a round trip.
//
// The owner lock is a process-shared robust pthread mutex that the daemon's
// serving thread holds while it serves (LockOwner, UnlockOwner). Its futex
// word holds that thread's id; when the thread ends without unlocking it
// (the daemon killed), the kernel sets FUTEX_OWNER_DIED in the word, and a
// clean stop unlocks it (0). A client reads the word, no system call, and
// believes the arena only while the word is the owner it saw at connect
// (OwnerAlive): what a client reads on its own never outlives the daemon.
//
// Ownership: an Arena owns its mapping and file descriptor.
// Thread safety: the mapping may be read and written from any thread; the
// generation, the header's key and length, and the key table are read and
// written as atomics, the block bytes are guarded by the protocol (a slot's bytes are written only by the holder of its
// reservation, and read only under a lease).
#ifndef KVTIER_SERVER_CLIENT_ARENA_H_
#define KVTIER_SERVER_CLIENT_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "server_client/key_table.h"

namespace kvtier::server {

inline constexpr uint64_t kArenaMagic = 0x314e45524154564bULL;  // "KVTAREN1"
inline constexpr uint32_t kArenaVersion = 3;  // 3: the slot sum
inline constexpr uint64_t kArenaHeaderBytes = 4096;
inline constexpr uint64_t kSlotHeaderBytes = 64;
// The page size WarmPublished reads one byte of: a transparent huge page.
inline constexpr uint64_t kArenaWarmPageBytes = uint64_t{2} << 20;
// At most this many slots (the slot number is a u32 on the wire, and the
// daemon keeps a few dozen bytes per slot).
inline constexpr uint64_t kMaxArenaSlots = uint64_t{1} << 24;

struct ArenaGeometry {
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;  // largest block file a slot holds (a multiple of 4096)

  uint64_t TableOffset() const;
  uint64_t DataOffset() const;
  uint64_t TotalBytes() const;
  // InvalidArgument for 0 slots, more than kMaxArenaSlots, a slot size that
  // is 0, not a multiple of 4096 or past 1 TiB.
  Status Validate() const;
};

// XXH3-128 of a block file's bytes (the slot header's sum).
struct SlotSum {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const SlotSum&) const = default;
};
SlotSum SumOf(std::span<const std::byte> bytes);
// Copies `src` into the front of `dst` (REQUIRES: dst.size() >= src.size())
// and returns SumOf the copy, hashing each 128 KiB chunk right after copying
// it, while it is in cache: the source is read once from memory, and the sum
// is of what the caller holds, never of the source (which another process
// may be writing).
SlotSum CopyWithSum(std::span<const std::byte> src, std::span<std::byte> dst);

class Arena {
 public:
  // A new anonymous arena (memfd_create, sealed against shrinking), zeroed,
  // with every generation 0.
  static Result<std::unique_ptr<Arena>> Create(const ArenaGeometry& geometry);
  // Maps the arena behind `fd` (taking ownership of it), after checking its
  // header against the file's size. Corruption for a file that is not one.
  // The mapping is not inherited by a forked child (MADV_DONTFORK).
  static Result<std::unique_ptr<Arena>> Map(int fd);

  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  const ArenaGeometry& geometry() const { return geometry_; }
  int fd() const { return fd_; }

  // REQUIRES: slot < geometry().slot_count.
  uint64_t Generation(uint32_t slot) const;  // acquire
  void SetGeneration(uint32_t slot, uint64_t generation);  // release
  // The published length, key and sum (written by the daemon at publish;
  // all zero while the slot holds no block).
  uint64_t Length(uint32_t slot) const;
  BlockKey Key(uint32_t slot) const;
  SlotSum Sum(uint32_t slot) const;
  void SetPublished(uint32_t slot, uint64_t length, const BlockKey& key, const SlotSum& sum);
  // The arena's key table (written by the daemon's SlotIndex alone).
  KeyTable table() const;
  // The slot that holds `key` as far as the key table and the slot's
  // header say now (a client's Match: advisory, racing the daemon).
  std::optional<uint32_t> FindPublished(const BlockKey& key) const;
  // Whether the daemon has tiers below the arena (disk, remote): if not, a
  // key the arena lacks is a miss without asking it. Set by the daemon
  // before any client maps the arena.
  bool TiersBelow() const;
  void SetTiersBelow(bool below);
  // The slot's bytes (slot_bytes of them).
  std::span<std::byte> Bytes(uint32_t slot) const;

  // A client's start-up (ServerClient::Connect): reads one byte of each
  // kArenaWarmPageBytes page of the file that holds bytes of a published
  // block, slot by slot, each page once, so that this process's first
  // loads do not each pay for mapping the pages they copy (docs/server.md,
  // "Huge pages"). Holes are never read (a read would allocate them).
  // `out_of_time` is asked before the first page and every 64 pages after;
  // true stops it. Returns the pages read. The reads are relaxed atomic
  // loads: they race the daemon's hand-overs harmlessly.
  uint64_t WarmPublished(const std::function<bool()>& out_of_time) const;

  // The daemon: takes the owner lock on the calling thread, which holds it
  // until UnlockOwner (or its end). Internal on any pthread error.
  Status LockOwner();
  void UnlockOwner();
  // The owner lock's futex word now (an atomic read).
  uint32_t OwnerWord() const;
  // Whether a daemon whose word was `seen` at connect still holds the lock
  // when the word reads `now`.
  static bool OwnerAlive(uint32_t seen, uint32_t now);

  // In a forked child of the process that mapped it: closes the child's
  // copy of the descriptor and forgets the mapping (a Map()ped one is not
  // there), so the child holds none of the arena's memory. Only geometry()
  // is usable afterwards. Async-signal-safe (close only).
  void AbandonAfterFork();

 private:
  Arena(int fd, std::byte* base, ArenaGeometry geometry);
  std::byte* SlotHeader(uint32_t slot) const;
  int fd_;
  std::byte* base_;
  ArenaGeometry geometry_;
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_CLIENT_ARENA_H_
