#include "cache/disk_reads.h"

#include <utility>
#include <vector>

namespace kvtier::cache_internal {

void LoadBuffersFromDisk(DiskTier* disk, std::span<const BlockKey> keys,
                         const BufferAllocator& alloc, const LoadedBufferCallback& done) {
  std::vector<size_t> pos;
  std::vector<BlockKey> want;
  std::vector<BlockBuffer> bufs;
  std::vector<std::span<std::byte>> dsts;
  pos.reserve(keys.size());
  want.reserve(keys.size());
  bufs.reserve(keys.size());
  for (size_t j = 0; j < keys.size(); ++j) {
    std::optional<uint64_t> size = disk->SizeOf(keys[j]);
    if (!size.has_value()) {
      done(j, std::optional<BlockBuffer>());
      continue;
    }
    Result<BlockBuffer> buf = alloc(static_cast<size_t>(*size));
    if (!buf.ok()) {
      done(j, buf.status());
      continue;
    }
    pos.push_back(j);
    want.push_back(keys[j]);
    bufs.push_back(std::move(buf).value());
  }
  dsts.reserve(bufs.size());
  for (BlockBuffer& b : bufs) dsts.push_back(b.mutable_span());
  std::vector<Result<std::optional<size_t>>> got = disk->LoadMany(want, dsts);
  for (size_t k = 0; k < want.size(); ++k) {
    if (!got[k].ok()) {
      done(pos[k], got[k].status());
    } else if (!got[k]->has_value()) {
      done(pos[k], std::optional<BlockBuffer>());
    } else {
      bufs[k].Truncate(**got[k]);
      done(pos[k], std::optional<BlockBuffer>(std::move(bufs[k])));
    }
  }
}

}  // namespace kvtier::cache_internal
