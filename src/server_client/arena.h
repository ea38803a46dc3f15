// The shared-memory arena of `kvtier serve` (docs/server.md): one memfd
// that the daemon creates and every client maps, holding block files in
// fixed-size slots. Layout (all little-endian, offsets from the start):
//
//   [0, 4096)             ArenaHeader: magic, version, slot count, slot size
//   [4096, data_offset)   slot_count x SlotHeader (64 bytes each)
//   [data_offset, ...)    slot_count x slot_stride bytes of block files
//
// A SlotHeader holds the slot's generation (bumped by the daemon, release
// order, each time the slot is handed to a new block), and the published
// block's length and key. The daemon alone decides what a slot holds; the
// header lets a client check, after copying a slot, that the slot still
// holds the block it was leased (same generation, key, length). The block
// file's own checksums (DESIGN.md §4) catch any byte that changed.
//
// Reading a slot (Read): a process's first access to a page of its mapping
// costs a page fault, and on some machines (a PVM guest: a shadow page
// table per process) about 13 us per 4 KiB page however the page table is
// filled first (MADV_POPULATE_READ and MAP_POPULATE do not help: the cost
// is the first access). So the first Read of a slot through an Arena is a
// pread() from the descriptor (the kernel copies from its own mapping of
// the memory, which every process shares), and later Reads of that slot go
// through the mapping (memcpy; the first of them maps the pages). A bitmap
// of one bit per slot remembers which slots this Arena has read.
//
// Ownership: an Arena owns its mapping and file descriptor.
// Thread safety: the mapping may be read and written from any thread; the
// generation, the read bitmap and the read counts are atomics, the rest is
// guarded by the protocol (a slot's bytes are written only by the holder of
// its reservation, and read only under a lease).
#ifndef KVTIER_SERVER_CLIENT_ARENA_H_
#define KVTIER_SERVER_CLIENT_ARENA_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier::server {

inline constexpr uint64_t kArenaMagic = 0x314e45524154564bULL;  // "KVTAREN1"
inline constexpr uint32_t kArenaVersion = 1;
inline constexpr uint64_t kArenaHeaderBytes = 4096;
inline constexpr uint64_t kSlotHeaderBytes = 64;
// At most this many slots (the slot number is a u32 on the wire, and the
// daemon keeps a few dozen bytes per slot).
inline constexpr uint64_t kMaxArenaSlots = uint64_t{1} << 24;

struct ArenaGeometry {
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;  // largest block file a slot holds (a multiple of 4096)

  uint64_t DataOffset() const;
  uint64_t TotalBytes() const;
  // InvalidArgument for 0 slots, more than kMaxArenaSlots, a slot size that
  // is 0, not a multiple of 4096 or past 1 TiB.
  Status Validate() const;
};

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
  // The published length and key (written by the daemon at publish).
  uint64_t Length(uint32_t slot) const;
  BlockKey Key(uint32_t slot) const;
  void SetPublished(uint32_t slot, uint64_t length, const BlockKey& key);
  // The slot's bytes (slot_bytes of them).
  std::span<std::byte> Bytes(uint32_t slot) const;

  // Copies the first dst.size() bytes of `slot` into `dst`: by pread() the
  // first time this Arena reads the slot, through the mapping after that
  // (see Reading a slot above). A pread that fails (any errno, or the file
  // ends early) is finished through the mapping and counted as a fallback,
  // never an error. InvalidArgument, and dst untouched, for a slot past the
  // arena or more than slot_bytes.
  Status Read(uint32_t slot, std::span<std::byte> dst);

  struct ReadCounts {
    uint64_t preads = 0;     // first reads of a slot, by pread
    uint64_t mapped = 0;     // later reads, through the mapping
    uint64_t fallbacks = 0;  // preads that failed and were finished by the mapping
  };
  ReadCounts read_counts() const;

  // In a forked child of the process that mapped it: closes the child's
  // copy of the descriptor and forgets the mapping (a Map()ped one is not
  // there), so the child holds none of the arena's memory. Only geometry()
  // is usable afterwards. Async-signal-safe (close only).
  void AbandonAfterFork();

 private:
  Arena(int fd, std::byte* base, ArenaGeometry geometry);
  std::byte* SlotHeader(uint32_t slot) const;
  // Sets the slot's bit in read_; true if it was already set.
  bool MarkRead(uint32_t slot);
  int fd_;
  std::byte* base_;
  ArenaGeometry geometry_;
  // One bit per slot: this Arena has read it (Read).
  std::unique_ptr<std::atomic<uint64_t>[]> read_;
  std::atomic<uint64_t> preads_{0}, mapped_reads_{0}, pread_fallbacks_{0};
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_CLIENT_ARENA_H_
