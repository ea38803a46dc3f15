// A strict reader for Mooncake-format request traces (DESIGN.md §6).
//
// One JSON object a line, exactly these fields:
//
//   {"timestamp": 0, "input_length": 40160, "output_length": 6,
//    "hash_ids": [0, 1, 2, ...]}
//
// timestamp (ms), input_length and output_length (tokens) and each hash id
// are non-negative integers written as plain digits; hash_ids holds one id
// per 512-token block of the prompt, equal ids meaning the same block after
// the same prefix. Anything else — a malformed or blank line, an unknown,
// missing or repeated field, a negative or fractional number, a line or an
// array over its limit — is an InvalidArgument naming the line number and
// the problem. Lines end with "\n"; the last one may omit it.
//
// Thread safety: pure functions.
#ifndef KVTIER_REPLAY_TRACE_READER_H_
#define KVTIER_REPLAY_TRACE_READER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::replay {

// Tokens per trace block in the Mooncake format.
inline constexpr uint64_t kTraceBlockTokens = 512;

struct TraceRequest {
  uint64_t timestamp = 0;          // ms, as written
  uint64_t input_length = 0;       // prompt tokens
  uint64_t output_length = 0;      // generated tokens
  std::vector<uint64_t> hash_ids;  // one id per 512-token prompt block
};

struct TraceReadOptions {
  // Longest accepted line, newline excluded. Default 1 MiB (a line of
  // 65,536 eight-digit ids is ~600 KiB).
  uint64_t max_line_bytes = uint64_t{1} << 20;
  // Most hash ids in one request. Default 65,536 (32 Mi tokens).
  uint64_t max_blocks_per_request = uint64_t{1} << 16;
  // Most hash ids in the whole trace (memory bound). Default 2^27 (1 GiB
  // of ids).
  uint64_t max_total_blocks = uint64_t{1} << 27;
  // Stop after this many requests (the lines after them are not read).
  // Default: all.
  uint64_t max_requests = UINT64_MAX;
};

// Largest accepted input_length / output_length: keeps every sum over a
// trace far from overflow.
inline constexpr uint64_t kMaxTraceLength = UINT32_MAX;

// Parses one line (without its newline). `line_number` (1-based) only goes
// into error messages.
Result<TraceRequest> ParseTraceLine(std::string_view line, uint64_t line_number,
                                    const TraceReadOptions& options = {});

// Parses a whole trace held in memory. InvalidArgument if it has no
// request.
Result<std::vector<TraceRequest>> ParseTrace(std::string_view text,
                                             const TraceReadOptions& options = {});

// Reads and parses the trace file at `path` in bounded chunks. Errors name
// the path. The file must be a regular file (or a symlink to one).
Result<std::vector<TraceRequest>> ReadTrace(Env* env, const std::string& path,
                                            const TraceReadOptions& options = {});

}  // namespace kvtier::replay

#endif  // KVTIER_REPLAY_TRACE_READER_H_
