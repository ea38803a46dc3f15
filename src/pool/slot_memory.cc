#include "kvtier/slot_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>

namespace kvtier {

namespace {

constexpr size_t kSlotAlignment = 256;
constexpr size_t kHugePage = size_t{2} << 20;

class HostSlotMemory final : public SlotMemory {
 public:
  MemoryKind kind() const override { return MemoryKind::kHost; }

  Result<std::byte*> Allocate(size_t bytes) override {
    std::byte* p = bytes >= kHugePage ? MapHuge(bytes)
                                      : static_cast<std::byte*>(::operator new(
                                            bytes, std::align_val_t(kSlotAlignment), std::nothrow));
    if (p == nullptr) {
      return Status::ResourceExhausted("cannot allocate " + std::to_string(bytes) +
                                       " bytes of slot memory");
    }
    return p;
  }

  void Deallocate(std::byte* p, size_t bytes) override {
    if (bytes >= kHugePage) {
      ::munmap(p, bytes);
    } else {
      ::operator delete(p, std::align_val_t(kSlotAlignment));
    }
  }

  void Copy(CopyDirection dir, const Copy2D& c) override {
    if (c.width == 0 || c.rows == 0) return;
    if (c.rows == 1 || (c.dst_pitch == c.width && c.src_pitch == c.width)) {
      std::memcpy(c.dst, c.src, c.width * c.rows);
      return;
    }
    for (size_t r = 0; r < c.rows; ++r) {
      std::memcpy(c.dst + r * c.dst_pitch, c.src + r * c.src_pitch, c.width);
    }
  }

 private:
  // A mapping that starts on a 2 MiB boundary, with transparent huge pages
  // asked for: a chunk of slots is faulted in 2 MiB at a time.
  static std::byte* MapHuge(size_t bytes) {
    if (bytes > SIZE_MAX - kHugePage) return nullptr;
    const size_t span = bytes + kHugePage;
    void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const auto base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (base + kHugePage - 1) / kHugePage * kHugePage;
    if (start > base) ::munmap(raw, start - base);
    const uintptr_t end = start + bytes;
    if (base + span > end) ::munmap(reinterpret_cast<void*>(end), base + span - end);
    auto* p = reinterpret_cast<std::byte*>(start);
    (void)::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: fine if refused
    return p;
  }
};

}  // namespace

std::shared_ptr<SlotMemory> NewHostSlotMemory() { return std::make_shared<HostSlotMemory>(); }

}  // namespace kvtier
