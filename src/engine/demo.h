// The `kvtier demo` session: the reference engine serving a scripted
// workload through a BlockPool backed by a TieredCache (host RAM + a disk
// folder), with a restart in the middle.
//
// The script (demo_script.h): `conversations` conversations share one long
// system prompt; each has `turns_before_restart` turns, then every object
// (engine, pool, cache) is closed and reopened from the folder, then each
// has `turns_after_restart` more turns. A turn's prompt is the whole
// conversation so far plus the new user message; the engine answers with
// `decode_tokens` greedy tokens. The pool is small enough that idle
// conversations are evicted (and offloaded to the tiers), so prefixes come
// from the pool, the host tier and, after the restart, the disk tier.
//
// Every request is also computed from scratch by a second engine on a
// private pool with no tiers and no prefix reuse: its time is the
// "recompute" time to first token, and its logits (after the prompt and
// after each decoded token) must equal the cached engine's bit for bit.
//
// With a remote tier (DemoOptions::remote), the serving cache also stores
// every block into Redis, and after the session a second host joins: a
// fresh engine, pool and TieredCache with an empty host tier and an empty
// folder of its own (<dir>/host2/cache), sharing nothing with the first
// host but the Redis server. It serves each conversation's last prompt
// again; its prefix comes from Redis, and its logits must equal the first
// host's for that request bit for bit.
//
// Thread safety: RunDemo is a plain function; the progress callback runs on
// the calling thread.
#ifndef KVTIER_ENGINE_DEMO_H_
#define KVTIER_ENGINE_DEMO_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/model.h"
#include "kvtier/logger.h"
#include "kvtier/remote_tier.h"
#include "kvtier/status.h"

namespace kvtier {
class Env;
}  // namespace kvtier

namespace kvtier::engine {

// What to do with an existing demo folder.
enum class DemoStart : uint8_t {
  // Remove what an earlier run left (only if the folder is empty or carries
  // the demo's marker file).
  kClean,
  // Keep it: the disk tier may serve blocks of an earlier run from the
  // first request on.
  kKeep,
};

struct DemoOptions {
  // The demo folder (created if missing); the cache lives in <dir>/cache.
  // Default "kvtier-demo".
  std::string dir = "kvtier-demo";
  DemoStart start = DemoStart::kClean;
  // The model. Default: ModelConfig's defaults (4 layers, hidden 128,
  // F16 K/V).
  ModelConfig model;
  // Tokens per block. Default 16.
  uint32_t block_tokens = 16;
  // Conversations and turns. Defaults 4, 2 and 1.
  uint32_t conversations = 4;
  uint32_t turns_before_restart = 2;
  uint32_t turns_after_restart = 1;
  // Tokens generated per turn. Default 8.
  uint32_t decode_tokens = 8;
  // Use only the first N bytes of the system prompt (0 = all of it).
  // Smaller runs for tests. Default 0.
  uint32_t system_prompt_bytes = 0;
  // Use only the first N bytes of each user message (0 = all). Default 0.
  uint32_t user_message_bytes = 0;
  // Slots of the serving pool; 0 = enough for the longest conversation and
  // a few more, so that idle ones get evicted and some of their blocks must
  // come back from the host tier. Default 0.
  uint32_t pool_blocks = 0;
  // Host tier budget in bytes. Default 256 MiB.
  uint64_t host_bytes = 256ull << 20;
  // The Redis tier both hosts share, or nullopt: no remote tier and no
  // second host. Its `layout` is replaced by the model's K/V layout;
  // `require_server_at_open` is forced on (a demo of a server that is not
  // there shows nothing). Default nullopt.
  std::optional<RemoteTierOptions> remote;
  // Clock, files and threads. Null: Env::Default(). Not owned.
  Env* env = nullptr;
  // The serving cache's logger (CacheOptions::info_log), or nullptr. Not
  // owned.
  Logger* info_log = nullptr;

  // OK, or InvalidArgument naming the bad field.
  Status Validate() const;
};

// A small configuration that runs in a second or two even in a sanitizer
// build (2 layers, hidden 32, a 256-token system prompt, 3 conversations):
// for smoke tests of the demo and its CLI.
DemoOptions QuickDemoOptions(std::string dir);

// Makes o's model the hybrid one (`kvtier demo --model hybrid`): 6 layers
// (3 when o's model has fewer than 4, as QuickDemoOptions' does) mixing
// full attention, sliding-window attention over 3 blocks' worth of tokens
// and gated linear attention (HybridMixers), other sizes kept.
void UseHybridModel(DemoOptions* o);

// One request of the session.
struct DemoRequest {
  uint32_t index = 0;  // 0-based, in serving order
  // 1: the demo's host; 2: the second host (--remote), which serves each
  // conversation's last prompt again with nothing but Redis in common.
  uint32_t host = 1;
  uint32_t conversation = 0;
  uint32_t turn = 0;  // 0-based, over the whole conversation
  bool after_restart = false;
  size_t prompt_tokens = 0;
  size_t reused_tokens = 0;    // K/V the pool supplied
  size_t computed_tokens = 0;  // prompt tokens computed
  // Blocks of the reused prefix by where they came from. pool: the
  // sequence's own blocks, shared blocks and blocks the pool kept for an
  // evicted sequence; host/disk/remote: loaded through the TieredCache.
  size_t pool_blocks = 0;
  size_t host_blocks = 0;
  size_t disk_blocks = 0;
  size_t remote_blocks = 0;
  // "none", or the tiers that supplied blocks joined by '+' ("pool+disk").
  std::string source;
  // Milliseconds. load: BlockPool::Allocate, including waiting for blocks
  // from the lower tiers; prefill: computing the prompt tokens not reused
  // (with the first token's logits); ttft: from the request to the first
  // token chosen (load + prefill + argmax); recompute: ttft with no cache
  // (on the second host: the first host's figure for the same prompt).
  double load_ms = 0;
  double prefill_ms = 0;
  double ttft_ms = 0;
  double recompute_ttft_ms = 0;
  // Logits compared (prompt + decode steps) and how many differed: with
  // the recomputation, or on the second host with the first host's.
  uint32_t logits_compared = 0;
  uint32_t logits_mismatched = 0;
  // First differing logit when one differs: where and the two values.
  std::string mismatch;
};

struct DemoReport {
  std::string dir;
  std::string cache_dir;
  ModelConfig model;
  uint64_t parameters = 0;
  uint32_t block_tokens = 0;
  uint64_t block_bytes = 0;  // K/V bytes of one block
  uint32_t pool_blocks = 0;
  size_t system_prompt_tokens = 0;
  std::vector<DemoRequest> requests;
  // Totals.
  bool bit_exact = true;  // every logit compared was identical
  uint32_t mismatched_requests = 0;
  size_t reused_tokens = 0;
  size_t computed_tokens = 0;
  size_t pool_blocks_hit = 0, host_blocks_hit = 0, disk_blocks_hit = 0;
  size_t disk_blocks_after_restart = 0;  // disk hits of the requests after the restart
  // --remote: prefix blocks Redis supplied (both hosts), those of the
  // second host, and the blocks the caches wrote to Redis.
  bool remote = false;
  size_t remote_blocks_hit = 0;
  size_t second_host_remote_blocks = 0;
  uint64_t remote_blocks_stored = 0;
  double ttft_ms = 0, recompute_ttft_ms = 0;  // sums over the requests
  // Lower-tier traffic over the whole run (both cache instances).
  uint64_t blocks_stored = 0;
  uint64_t pool_evicted_sequences = 0;
  uint64_t disk_bytes_written = 0;
  uint64_t disk_entries_at_end = 0;
  double wall_s = 0;

  // One JSON object with the fields above (requests as an array).
  std::string ToJson() const;
};

// What RunDemo reports while it runs.
struct DemoEvent {
  enum class Kind : uint8_t {
    kStart,       // message: what is about to run
    kRequest,     // request: one request done
    kRestart,     // message: the restart happened
    kSecondHost,  // message: the second host is about to serve (--remote)
  };
  Kind kind = Kind::kStart;
  std::string message;
  const DemoRequest* request = nullptr;  // kRequest; valid during the call
  uint32_t total_requests = 0;
};

// Runs the session. A logits mismatch is not an error: the report says so
// (bit_exact false). Errors: InvalidArgument for bad options (and a Redis
// server that refuses the credentials), FailedPrecondition if the folder
// holds something else, Unavailable when no Redis server answers, the
// tiers' and pool's errors otherwise.
Result<DemoReport> RunDemo(const DemoOptions& options,
                           const std::function<void(const DemoEvent&)>& progress = {});

// The summary table as text (one line per request, then totals).
std::string FormatDemoTable(const DemoReport& report);

}  // namespace kvtier::engine

#endif  // KVTIER_ENGINE_DEMO_H_
