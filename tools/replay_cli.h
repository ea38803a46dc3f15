// Pieces shared by `kvtier replay` (tools/cmd_replay.cc: one RAM size) and
// `kvtier replay --sweep` (tools/cmd_replay_sweep.cc: several).
#ifndef KVTIER_TOOLS_REPLAY_CLI_H_
#define KVTIER_TOOLS_REPLAY_CLI_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "command.h"
#include "config_flag.h"
#include "kvtier/status.h"
#include "progress.h"

namespace kvtier::cli {

// The flags of `kvtier replay`, as typed.
struct ReplayArgs {
  std::string trace;
  std::string ram_tokens;
  std::string sweep;
  std::string disk_tokens;
  std::string disk_dir;
  std::string layout = "tiny";
  std::string payload;  // default: real for one RAM size, none for a sweep
  std::string policy = "lru";
  std::string limit;
  std::string plot;
  std::string remote;         // --remote URL
  std::string remote_prefix;  // --remote-prefix P
  CLI::Option* ram_tokens_opt = nullptr;
  CLI::Option* sweep_opt = nullptr;
  CLI::Option* disk_tokens_opt = nullptr;
  CLI::Option* disk_dir_opt = nullptr;
  CLI::Option* limit_opt = nullptr;
  CLI::Option* plot_opt = nullptr;
  CLI::Option* remote_opt = nullptr;
  CLI::Option* remote_prefix_opt = nullptr;
  ConfigFlag config;  // remote and remote_* apply
};

// A plain integer >= min for `flag` (--limit). InvalidArgument naming it.
Result<uint64_t> ParseReplayCount(std::string_view flag, std::string_view text, uint64_t min);

// A count of tokens for `flag`: plain digits, at least one 512-token block,
// at most kMaxReplayTokens (2^40). InvalidArgument naming the flag.
Result<uint64_t> ParseReplayTokens(std::string_view flag, std::string_view text);

// The disk tier's size in tokens (0: none) from --disk-tokens, checked
// against the folder (--disk-dir, or --config's disk_dir): with a real
// payload both or neither; with none, no folder. The messages name where
// the folder came from.
Result<uint64_t> ReplayDiskTokens(const ReplayArgs& a, bool real);

// "N1,N2,..." for --sweep: 1..kMaxSweepPoints distinct token counts.
Result<std::vector<uint64_t>> ParseSweepList(std::string_view text);

// Runs `kvtier replay --sweep` (RunReplay hands over when --sweep is given).
int RunReplaySweep(const ReplayArgs& a, const CommonFlags& flags);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_REPLAY_CLI_H_
