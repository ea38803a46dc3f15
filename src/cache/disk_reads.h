// LoadBuffersFromDisk: the disk part of a load, as the disk tier's batched
// read API will give it (DiskTier::LoadBuffers, coming from the disk
// tier): each block read into an exact-size buffer from `alloc`, verified,
// and handed to `done` as it lands.
//
// Until that API lands this runs on DiskTier::SizeOf and LoadMany: one
// size lookup per key, then the batch read in parallel on the disk tier's
// read threads, the blocks handed out when the batch is done.
//
// Thread safety: `alloc` and `done` may be called from several threads at
// once; `done` is called exactly once per key before this returns.
#ifndef KVTIER_CACHE_DISK_READS_H_
#define KVTIER_CACHE_DISK_READS_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <span>

#include "kvtier/block_buffer.h"
#include "kvtier/block_key.h"
#include "kvtier/disk_tier.h"
#include "kvtier/status.h"

namespace kvtier::cache_internal {

using BufferAllocator = std::function<Result<BlockBuffer>(size_t bytes)>;
using LoadedBufferCallback =
    std::function<void(size_t index, Result<std::optional<BlockBuffer>> result)>;

void LoadBuffersFromDisk(DiskTier* disk, std::span<const BlockKey> keys,
                         const BufferAllocator& alloc, const LoadedBufferCallback& done);

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_DISK_READS_H_
