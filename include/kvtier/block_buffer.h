// BlockBuffer: the owned bytes of one block file, and SharedBlock, the same
// bytes shared read-only between tiers. Storage is 4096-byte aligned
// (usable with O_DIRECT), its capacity a multiple of 4096 bytes, not
// zero-initialised; it comes from the heap (Allocate, CopyOf) or from a
// BufferRecycler (Adopt), to which destroying the buffer hands it back, so
// a pool of already page-faulted buffers serves the next read.
//
// Ownership: a BlockBuffer is move-only and owns its memory. A SharedBlock
// keeps the bytes alive as long as any tier, load or engine holds it; when
// the last reference goes, the memory returns to its recycler or the heap.
//
// Thread safety: a BlockBuffer is used by one thread at a time; a
// SharedBlock's bytes are immutable and may be read from any thread, and
// its header note (below) set and read from any thread.
// BufferRecycler implementations are thread-safe (buffers die anywhere).
#ifndef KVTIER_BLOCK_BUFFER_H_
#define KVTIER_BLOCK_BUFFER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier {

// Where an adopted buffer's memory goes when the buffer is destroyed.
class BufferRecycler {
 public:
  virtual ~BufferRecycler() = default;
  // Takes back `capacity` bytes at `data` (what Adopt was given). Called
  // from whichever thread drops the buffer; must not throw or block long.
  virtual void Recycle(std::byte* data, size_t capacity) noexcept = 0;
};

class BlockBuffer {
 public:
  // Alignment of data() and granularity of capacity().
  static constexpr size_t kAlignment = 4096;

  BlockBuffer() = default;
  // `size` bytes from the heap (capacity rounded up to kAlignment).
  // kResourceExhausted if the allocation fails or the size overflows.
  static Result<BlockBuffer> Allocate(size_t size);
  static Result<BlockBuffer> CopyOf(std::span<const std::byte> bytes);
  // A buffer of `size` bytes over memory the caller lends: `capacity`
  // bytes at `data`, handed back through home->Recycle(data, capacity) when
  // the buffer is destroyed.
  // REQUIRES: data kAlignment-aligned, size <= capacity, home != nullptr.
  static BlockBuffer Adopt(std::byte* data, size_t size, size_t capacity,
                           std::shared_ptr<BufferRecycler> home);

  BlockBuffer(BlockBuffer&& other) noexcept;
  BlockBuffer& operator=(BlockBuffer&& other) noexcept;
  BlockBuffer(const BlockBuffer&) = delete;
  BlockBuffer& operator=(const BlockBuffer&) = delete;

  // The non-const accessors drop the header note: the bytes may change.
  std::byte* data() {
    DropHeaderNote();
    return data_.get();
  }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  // Bytes usable at data() (>= size()).
  size_t capacity() const { return data_.get_deleter().capacity; }
  std::span<const std::byte> span() const { return {data_.get(), size_}; }
  std::span<std::byte> mutable_span() {
    DropHeaderNote();
    return {data_.get(), size_};
  }
  // Shrinks the logical size (the allocation is kept). REQUIRES: n <= size().
  void Truncate(size_t n);

  // What a decoder found in these bytes' header: that they are a valid
  // block file of `key` for that decoder (its layout, its geometry), with
  // `data_size` bytes of tensor data at `data_offset`. A decoder that meets
  // the same shared bytes again (a host-tier block restored into a pool,
  // again and again) reads its note instead of parsing the header again.
  // `decoder` is an id from NewDecoderId(), one per decoder: never reused,
  // so no other decoder takes the note for its own.
  struct HeaderNote {
    uint64_t decoder = 0;
    BlockKey key;
    uint64_t data_offset = 0;
    uint64_t data_size = 0;
  };
  static uint64_t NewDecoderId();
  // Keeps `note` unless a note is there already (the first one stays: the
  // bytes do not change while shared). Const: a SharedBlock's bytes stay
  // as they are; only the note is written.
  void NoteHeader(const HeaderNote& note) const;
  // The note `decoder` left, if it left one and the bytes were not
  // reached through a non-const accessor since.
  std::optional<HeaderNote> HeaderNoteOf(uint64_t decoder) const;

 private:
  void DropHeaderNote() { note_state_.store(kNoNote, std::memory_order_relaxed); }
  // A move's: this buffer gets `other`'s note (or none), `other` has none.
  void TakeNoteFrom(BlockBuffer& other) noexcept;

  // Frees heap memory (`base` if it is not the data pointer itself) or
  // hands recycled memory back to `home`.
  struct Release {
    // Spelled out: a nested class's default member initializers do not
    // make it default-constructible inside the enclosing class.
    Release() noexcept : base(nullptr), capacity(0) {}
    void operator()(std::byte* p) const noexcept;
    void* base;
    size_t capacity;
    std::shared_ptr<BufferRecycler> home;
  };
  std::unique_ptr<std::byte[], Release> data_;
  size_t size_ = 0;
  // kNoted once note_ is written (kWriting while one thread writes it).
  static constexpr uint32_t kNoNote = 0, kWriting = 1, kNoted = 2;
  mutable std::atomic<uint32_t> note_state_{kNoNote};
  mutable HeaderNote note_;
};

// A block file shared read-only between tiers (host entry, pending write,
// a load handing it to the pool).
using SharedBlock = std::shared_ptr<const BlockBuffer>;

}  // namespace kvtier

#endif  // KVTIER_BLOCK_BUFFER_H_
