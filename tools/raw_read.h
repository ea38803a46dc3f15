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

#include "kvtier/block_buffer.h"
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
// the device's queue depth). kBuffered reads every file of a thread into
// the same buffer, which stays in the CPU's cache; kBufferedKept reads each
// file into a buffer of its own (allocated and written before the clock
// starts), as a restore lands bytes in memory it keeps (slots, read
// buffers): from the page cache, the gap between the two is what writing
// that memory costs. Those buffers are the caller's (`kept`), allocated by
// the first call that finds it empty and reused by later calls: on this
// guest the first reads into fresh memory ran 10x slower than later ones,
// even after it was written, as a restore's slots do (see cmd_bench_pool.cc).
enum class RawReadMode { kBuffered, kDirect, kBufferedKept };

// Seconds to read, on `threads` threads (files dealt out round-robin), file
// i's `ranges[i]` (all of them asked of the device at once, Prefetch, then
// each one pread, in the order given, into the same offsets of a reused
// buffer) or, where `ranges` is empty or ranges[i] is, file i whole in one
// pread (kDirect: no prefetch; each pread widened to whole pages).
Result<double> RawRead(Env* env, const std::vector<std::string>& files,
                       const std::vector<std::vector<BlockFileRange>>& ranges, uint32_t threads,
                       RawReadMode mode = RawReadMode::kBuffered,
                       std::vector<BlockBuffer>* kept = nullptr);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_RAW_READ_H_
