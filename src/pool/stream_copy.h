// StreamCopy: memcpy for a restore's copies into slots, which bypasses the
// CPU caches for large copies.
//
// A restore copies a whole prefix, far more than the caches hold, into slots
// that the copy does not read back. A plain memcpy of a block first reads
// every destination line it then overwrites (glibc turns to non-temporal
// stores only for copies larger than about three quarters of the last-level
// cache, and a restore copies one block at a time), so each byte crosses
// the memory bus three times; with non-temporal stores, twice. A copy of
// fewer than kStreamFromBytes fits a core's L2 and is a plain memcpy.
//
// Only for memory the CPU may write (MemoryKind::kHost): the pool calls it
// instead of SlotMemory::Copy for its restores into host slots.
//
// Thread safety: a function of its arguments.
#ifndef KVTIER_POOL_STREAM_COPY_H_
#define KVTIER_POOL_STREAM_COPY_H_

#include <cstddef>

namespace kvtier::pool_internal {

inline constexpr size_t kStreamFromBytes = size_t{256} << 10;

// memcpy(dst, src, n) (no overlap). From kStreamFromBytes on, on x86-64,
// the 64-byte-aligned middle of dst is written with non-temporal stores,
// ordered (sfence) before anything this thread writes afterwards.
void StreamCopy(std::byte* dst, const std::byte* src, size_t n);

}  // namespace kvtier::pool_internal

#endif  // KVTIER_POOL_STREAM_COPY_H_
