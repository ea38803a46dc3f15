// What the `kvtier bench` commands (tools/cmd_bench_*.cc) share: their
// clock, the block layout of --layout P | --block-bytes N, and dropping the
// page cache before a cold read.
//
// Thread safety: plain functions.
#ifndef KVTIER_TOOLS_BENCH_UTIL_H_
#define KVTIER_TOOLS_BENCH_UTIL_H_

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier::cli {

using Clock = std::chrono::steady_clock;

// Seconds from `a` to `b`.
double Seconds(Clock::time_point a, Clock::time_point b);

// The layout of exactly one of --layout P (`layout_opt`, resolved through
// the default Env) and --block-bytes N (`block_bytes_opt`): a one-tensor U8
// layout whose data section is N bytes. N outside 1..max_block_bytes is
// InvalidArgument(range_error).
Result<ModelLayout> BenchLayout(const CLI::Option* layout_opt, const std::string& layout,
                                const CLI::Option* block_bytes_opt, uint64_t block_bytes,
                                uint64_t max_block_bytes, const std::string& range_error);

// The kernel's MemAvailable (/proc/meminfo) in bytes: what this process
// may allocate without swapping others out. IOError if it cannot be read.
Result<uint64_t> MemAvailableBytes();

// The RAM guard of every command that allocates its working set up front
// (the benches, the demo, read buffers faulted in at open): InvalidArgument
// "<what> needs N bytes of RAM; M are available (MemAvailable)" when
// `needed` is over MemAvailable, so that a size inside a flag's range but
// beyond this machine is refused before anything is allocated instead of
// meeting the OOM killer. `needed` saturates: callers add with SatAdd/SatMul.
Status CheckMemory(const std::string& what, uint64_t needed);

// a + b and a * b, saturating at UINT64_MAX (sizes a user typed).
uint64_t SatAdd(uint64_t a, uint64_t b);
uint64_t SatMul(uint64_t a, uint64_t b);

// Writes back dirty pages and drops the page cache (needs root:
// FailedPrecondition naming --drop-caches otherwise).
Status DropCaches();

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_BENCH_UTIL_H_
