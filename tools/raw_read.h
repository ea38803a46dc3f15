// The disk's limit for a bench's block files: plain preads of the files (or
// of byte ranges of them) with nothing else in the way: no index, no
// verification, no pool. `kvtier bench pool` times its disk restores
// against these loops over the same files, in the same run.
//
// Thread safety: plain functions; RawRead starts and joins its own threads.
#ifndef KVTIER_TOOLS_RAW_READ_H_
#define KVTIER_TOOLS_RAW_READ_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::cli {

// The block file of each of `keys` under the cache folder `dir`
// (DiskBlockPath), in the order of `keys`. Internal when one is not a
// regular file there.
Result<std::vector<std::string>> BlockFiles(Env* env, const std::string& dir,
                                            const std::vector<BlockKey>& keys);

// How RawRead reads: through the page cache, or with O_DIRECT (each range,
// or each file whole, in one pread of the whole pages around it, into a
// page-aligned buffer: one request per thread in flight, so `threads` is
// the device's queue depth).
enum class RawReadMode { kBuffered, kDirect };

// Seconds to read, on `threads` threads (files dealt out round-robin), file
// i's `ranges[i]` (all of them asked of the device at once, Prefetch, then
// each one pread, in the order given, into the same offsets of a reused
// buffer) or, where `ranges` is empty or ranges[i] is, file i whole in one
// pread (kDirect: no prefetch; each pread widened to whole pages).
Result<double> RawRead(Env* env, const std::vector<std::string>& files,
                       const std::vector<std::vector<BlockFileRange>>& ranges, uint32_t threads,
                       RawReadMode mode = RawReadMode::kBuffered);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_RAW_READ_H_
