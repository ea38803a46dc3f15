#include "server_client/arena.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include "core/xxh3.h"

namespace kvtier::server {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxSlotBytes = uint64_t{1} << 40;

struct HeaderFields {
  uint64_t magic;
  uint32_t version;
  uint32_t slot_count;
  uint64_t slot_bytes;
};
constexpr size_t kFlagsOffset = sizeof(HeaderFields);
constexpr uint32_t kFlagTiersBelow = 1;
constexpr size_t kOwnerOffset = 64;
static_assert(kOwnerOffset + sizeof(pthread_mutex_t) <= kArenaHeaderBytes);
// The futex word is the first member of glibc's mutex (the robust-futex ABI
// the kernel writes FUTEX_OWNER_DIED into).
static_assert(offsetof(pthread_mutex_t, __data.__lock) == 0);

uint64_t RoundToPage(uint64_t n) { return (n + kPage - 1) / kPage * kPage; }

// Asks for the arena's memory in transparent huge pages, in the daemon's
// mapping and in every client's (whichever process faults a page in first
// decides its size). The kernel honours it when
// /sys/kernel/mm/transparent_hugepage/shmem_enabled is advise,
// within_size or always, and ignores it otherwise (docs/server.md, "Huge
// pages"). Why it matters: on some virtual machines a process's first
// touch of each 4 KiB page costs microseconds, so a new client's first
// read of the arena runs at a few percent of memory speed; in 2 MiB pages
// it runs near it. A failure (a kernel without THP) changes nothing else.
void AdviseHugePages(void* p, uint64_t bytes) { (void)::madvise(p, bytes, MADV_HUGEPAGE); }

uint64_t LoadWord(const std::byte* p) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<std::byte*>(p)))
      .load(std::memory_order_relaxed);
}
void StoreWord(std::byte* p, uint64_t v) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p)).store(v, std::memory_order_relaxed);
}

// Slot header field offsets.
constexpr size_t kGenOffset = 0;
constexpr size_t kLengthOffset = 8;
constexpr size_t kKeyOffset = 16;
constexpr size_t kSumOffset = 48;
static_assert(kSumOffset + 16 <= kSlotHeaderBytes);

// Well inside a core's L2, so the hash reads what the copy just wrote from
// cache (BlockVerifier::kCopyChunk's reasoning).
constexpr size_t kCopyChunk = size_t{128} << 10;

SlotSum FromHash(XXH128_hash_t h) { return SlotSum{h.low64, h.high64}; }

}  // namespace

SlotSum SumOf(std::span<const std::byte> bytes) {
  return FromHash(internal::Xxh3Hash128(bytes.data(), bytes.size()));
}

SlotSum CopyWithSum(std::span<const std::byte> src, std::span<std::byte> dst) {
  if (src.size() <= kCopyChunk) {
    std::memcpy(dst.data(), src.data(), src.size());
    return SumOf(dst.first(src.size()));  // one shot: the copy is in cache
  }
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  for (size_t at = 0; at < src.size(); at += kCopyChunk) {
    const size_t n = std::min(kCopyChunk, src.size() - at);
    std::memcpy(dst.data() + at, src.data() + at, n);
    internal::Xxh3Update128(&state, dst.data() + at, n);
  }
  return FromHash(XXH3_128bits_digest(&state));
}

uint64_t ArenaGeometry::TableOffset() const {
  return kArenaHeaderBytes + RoundToPage(uint64_t{slot_count} * kSlotHeaderBytes);
}

uint64_t ArenaGeometry::DataOffset() const {
  return TableOffset() + RoundToPage(KeyTable::WordsFor(slot_count) * sizeof(uint64_t));
}

uint64_t ArenaGeometry::TotalBytes() const { return DataOffset() + uint64_t{slot_count} * slot_bytes; }

Status ArenaGeometry::Validate() const {
  if (slot_count == 0) return Status::InvalidArgument("arena: 0 slots");
  if (slot_count > kMaxArenaSlots) {
    return Status::InvalidArgument("arena: more than " + std::to_string(kMaxArenaSlots) + " slots");
  }
  if (slot_bytes == 0 || slot_bytes % kPage != 0 || slot_bytes > kMaxSlotBytes) {
    return Status::InvalidArgument("arena: slot size " + std::to_string(slot_bytes) +
                                   " is not a multiple of 4096 in (0, 1 TiB]");
  }
  // slot_count <= 2^24 and slot_bytes <= 2^40: the total fits in 2^64.
  return Status::Ok();
}

Result<std::unique_ptr<Arena>> Arena::Create(const ArenaGeometry& geometry) {
  KVTIER_RETURN_IF_ERROR(geometry.Validate());
  const int fd = ::memfd_create("kvtier-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::IOError("memfd_create", errno);
  const uint64_t total = geometry.TotalBytes();
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::ResourceExhausted("arena: ftruncate to " + std::to_string(total) + " bytes", e);
  }
  // A client cannot shrink it under the others (a SIGBUS in the daemon).
  (void)::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    return Status::IOError("arena: mmap", e);
  }
  AdviseHugePages(p, total);
  HeaderFields h{kArenaMagic, kArenaVersion, geometry.slot_count, geometry.slot_bytes};
  std::memcpy(p, &h, sizeof(h));
  pthread_mutexattr_t attr;
  int e = ::pthread_mutexattr_init(&attr);
  if (e == 0) e = ::pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (e == 0) e = ::pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (e == 0) {
    e = ::pthread_mutex_init(
        reinterpret_cast<pthread_mutex_t*>(static_cast<std::byte*>(p) + kOwnerOffset), &attr);
  }
  (void)::pthread_mutexattr_destroy(&attr);
  if (e != 0) {
    ::munmap(p, total);
    ::close(fd);
    return Status::Internal("arena: the owner lock: " + std::string(std::strerror(e)));
  }
  return std::unique_ptr<Arena>(new Arena(fd, static_cast<std::byte*>(p), geometry));
}

Result<std::unique_ptr<Arena>> Arena::Map(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::IOError("arena: fstat", e);
  }
  HeaderFields h{};
  if (static_cast<uint64_t>(st.st_size) < kArenaHeaderBytes ||
      ::pread(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h))) {
    ::close(fd);
    return Status::Corruption("arena: shorter than its header");
  }
  ArenaGeometry g{h.slot_count, h.slot_bytes};
  if (h.magic != kArenaMagic || h.version != kArenaVersion || !g.Validate().ok() ||
      g.TotalBytes() != static_cast<uint64_t>(st.st_size)) {
    ::close(fd);
    return Status::Corruption("arena: header does not describe this file (magic, version, size)");
  }
  void* p = ::mmap(nullptr, g.TotalBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    return Status::IOError("arena: mmap", e);
  }
  // A child the client's process forks (vLLM's workers) would otherwise keep
  // the whole arena alive after this process, and the daemon, let go of it.
  if (::madvise(p, g.TotalBytes(), MADV_DONTFORK) != 0) {
    const int e = errno;
    ::munmap(p, g.TotalBytes());
    ::close(fd);
    return Status::IOError("arena: madvise(MADV_DONTFORK)", e);
  }
  AdviseHugePages(p, g.TotalBytes());
  return std::unique_ptr<Arena>(new Arena(fd, static_cast<std::byte*>(p), g));
}

Arena::Arena(int fd, std::byte* base, ArenaGeometry geometry)
    : fd_(fd), base_(base), geometry_(geometry) {}

Arena::~Arena() {
  if (base_ != nullptr) ::munmap(base_, geometry_.TotalBytes());
  if (fd_ >= 0) ::close(fd_);
}

void Arena::AbandonAfterFork() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  base_ = nullptr;
}

std::byte* Arena::SlotHeader(uint32_t slot) const {
  return base_ + kArenaHeaderBytes + uint64_t{slot} * kSlotHeaderBytes;
}

uint64_t Arena::Generation(uint32_t slot) const {
  auto* g = reinterpret_cast<uint64_t*>(SlotHeader(slot) + kGenOffset);
  return std::atomic_ref<uint64_t>(*g).load(std::memory_order_acquire);
}

void Arena::SetGeneration(uint32_t slot, uint64_t generation) {
  auto* g = reinterpret_cast<uint64_t*>(SlotHeader(slot) + kGenOffset);
  std::atomic_ref<uint64_t>(*g).store(generation, std::memory_order_release);
}

// The length and key are read by clients' matches while the daemon may
// write them (a slot handed to another block): word by word, as atomics.
uint64_t Arena::Length(uint32_t slot) const { return LoadWord(SlotHeader(slot) + kLengthOffset); }

BlockKey Arena::Key(uint32_t slot) const {
  BlockKey k;
  for (size_t i = 0; i < 4; ++i) {
    const uint64_t w = LoadWord(SlotHeader(slot) + kKeyOffset + 8 * i);
    std::memcpy(k.bytes.data() + 8 * i, &w, 8);
  }
  return k;
}

SlotSum Arena::Sum(uint32_t slot) const {
  return SlotSum{LoadWord(SlotHeader(slot) + kSumOffset), LoadWord(SlotHeader(slot) + kSumOffset + 8)};
}

void Arena::SetPublished(uint32_t slot, uint64_t length, const BlockKey& key,
                         const SlotSum& sum) {
  StoreWord(SlotHeader(slot) + kLengthOffset, length);
  StoreWord(SlotHeader(slot) + kSumOffset, sum.low);
  StoreWord(SlotHeader(slot) + kSumOffset + 8, sum.high);
  for (size_t i = 0; i < 4; ++i) {
    uint64_t w;
    std::memcpy(&w, key.bytes.data() + 8 * i, 8);
    StoreWord(SlotHeader(slot) + kKeyOffset + 8 * i, w);
  }
}

KeyTable Arena::table() const {
  return KeyTable({reinterpret_cast<uint64_t*>(base_ + geometry_.TableOffset()),
                   KeyTable::WordsFor(geometry_.slot_count)});
}

std::optional<uint32_t> Arena::FindPublished(const BlockKey& key) const {
  return table().Find(key, [&](uint32_t slot) {
    return slot < geometry_.slot_count && Key(slot) == key;
  });
}

bool Arena::TiersBelow() const {
  return (std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(base_ + kFlagsOffset))
              .load(std::memory_order_acquire) &
          kFlagTiersBelow) != 0;
}

void Arena::SetTiersBelow(bool below) {
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(base_ + kFlagsOffset))
      .store(below ? kFlagTiersBelow : 0, std::memory_order_release);
}

Status Arena::LockOwner() {
  const int e = ::pthread_mutex_lock(reinterpret_cast<pthread_mutex_t*>(base_ + kOwnerOffset));
  if (e != 0) return Status::Internal("arena: taking the owner lock: " + std::string(std::strerror(e)));
  return Status::Ok();
}

void Arena::UnlockOwner() {
  (void)::pthread_mutex_unlock(reinterpret_cast<pthread_mutex_t*>(base_ + kOwnerOffset));
}

uint32_t Arena::OwnerWord() const {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(base_ + kOwnerOffset))
      .load(std::memory_order_acquire);
}

bool Arena::OwnerAlive(uint32_t seen, uint32_t now) {
  const uint32_t owner = seen & FUTEX_TID_MASK;
  return owner != 0 && (now & FUTEX_TID_MASK) == owner && (now & FUTEX_OWNER_DIED) == 0;
}

uint64_t Arena::WarmPublished(const std::function<bool()>& out_of_time) const {
  constexpr uint64_t kAskEvery = 64;
  uint64_t read = 0;
  uint64_t last_page = UINT64_MAX;  // pages are read in file order: each once
  unsigned char sink = 0;
  for (uint32_t slot = 0; slot < geometry_.slot_count; ++slot) {
    const uint64_t length = std::min(Length(slot), geometry_.slot_bytes);
    if (length == 0) continue;
    const uint64_t start = geometry_.DataOffset() + uint64_t{slot} * geometry_.slot_bytes;
    for (uint64_t page = start / kArenaWarmPageBytes;
         page <= (start + length - 1) / kArenaWarmPageBytes; ++page) {
      if (page == last_page) continue;
      if (read % kAskEvery == 0 && out_of_time()) return read;
      last_page = page;
      const uint64_t at = std::max(start, page * kArenaWarmPageBytes);
      sink ^= std::atomic_ref<unsigned char>(*reinterpret_cast<unsigned char*>(base_ + at))
                  .load(std::memory_order_relaxed);
      ++read;
    }
  }
  asm volatile("" : : "r"(sink));
  return read;
}

std::span<std::byte> Arena::Bytes(uint32_t slot) const {
  return {base_ + geometry_.DataOffset() + uint64_t{slot} * geometry_.slot_bytes,
          geometry_.slot_bytes};
}

}  // namespace kvtier::server
