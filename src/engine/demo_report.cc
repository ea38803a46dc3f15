// DemoReport as JSON and as the summary table.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/demo.h"

namespace kvtier::engine {

namespace {

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

std::string Pad(std::string s, size_t width, bool left = false) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return left ? s + fill : fill + s;
}

double Speedup(double cached, double recompute) { return cached > 0 ? recompute / cached : 0; }

}  // namespace

std::string DemoReport::ToJson() const {
  using nlohmann::json;
  json mixers = json::array();
  for (uint32_t l = 0; l < model.layers; ++l) mixers.push_back(MixerKindName(model.mixer(l)));
  json reqs = json::array();
  for (const DemoRequest& r : requests) {
    reqs.push_back({{"index", r.index},
                    {"host", r.host},
                    {"conversation", r.conversation},
                    {"turn", r.turn},
                    {"after_restart", r.after_restart},
                    {"prompt_tokens", r.prompt_tokens},
                    {"reused_tokens", r.reused_tokens},
                    {"computed_tokens", r.computed_tokens},
                    {"source", r.source},
                    {"pool_blocks", r.pool_blocks},
                    {"host_blocks", r.host_blocks},
                    {"disk_blocks", r.disk_blocks},
                    {"remote_blocks", r.remote_blocks},
                    {"load_ms", r.load_ms},
                    {"prefill_ms", r.prefill_ms},
                    {"ttft_ms", r.ttft_ms},
                    {"recompute_ttft_ms", r.recompute_ttft_ms},
                    {"logits_compared", r.logits_compared},
                    {"logits_mismatched", r.logits_mismatched},
                    {"bit_exact", r.logits_mismatched == 0},
                    {"mismatch", r.mismatch}});
  }
  json j = {
      {"dir", dir},
      {"cache_dir", cache_dir},
      {"model",
       {{"layers", model.layers},
        {"heads", model.heads},
        {"kv_heads", model.kv_heads},
        {"head_dim", model.head_dim},
        {"hidden", model.hidden},
        {"ffn", model.ffn},
        {"vocab", model.vocab},
        {"seed", model.seed},
        {"kv_dtype", std::string(DTypeName(model.kv_dtype))},
        {"mixers", mixers},
        {"window", model.window},
        {"kv_bits", model.kv_bits},
        {"kv_group", model.kv_group},
        {"parameters", parameters}}},
      {"block_tokens", block_tokens},
      {"block_bytes", block_bytes},
      {"pool_blocks", pool_blocks},
      {"system_prompt_tokens", system_prompt_tokens},
      {"requests", reqs},
      {"bit_exact", bit_exact},
      {"mismatched_requests", mismatched_requests},
      {"reused_tokens", reused_tokens},
      {"computed_tokens", computed_tokens},
      {"pool_blocks_hit", pool_blocks_hit},
      {"host_blocks_hit", host_blocks_hit},
      {"disk_blocks_hit", disk_blocks_hit},
      {"disk_blocks_after_restart", disk_blocks_after_restart},
      {"remote", remote},
      {"remote_blocks_hit", remote_blocks_hit},
      {"second_host_remote_blocks", second_host_remote_blocks},
      {"remote_blocks_stored", remote_blocks_stored},
      {"ttft_ms", ttft_ms},
      {"recompute_ttft_ms", recompute_ttft_ms},
      {"ttft_speedup", Speedup(ttft_ms, recompute_ttft_ms)},
      {"blocks_stored", blocks_stored},
      {"pool_evicted_sequences", pool_evicted_sequences},
      {"disk_bytes_written", disk_bytes_written},
      {"disk_entries_at_end", disk_entries_at_end},
      {"wall_s", wall_s},
  };
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string FormatDemoTable(const DemoReport& rep) {
  std::string out;
  out +=
      "  #  conv turn  prompt  reused  source             pool  host  disk  remote  computed"
      "  load_ms  prefill_ms  ttft_ms  recompute_ms  speedup  logits\n";
  bool restart_marked = false;
  bool second_host_marked = false;
  for (const DemoRequest& r : rep.requests) {
    if (r.after_restart && !restart_marked) {
      out +=
          "  ------------------------------------------- restart "
          "--------------------------------------------\n";
      restart_marked = true;
    }
    if (r.host == 2 && !second_host_marked) {
      out +=
          "  ------------------ second host: empty RAM, empty folder, same Redis "
          "(logits vs the first host) ------------------\n";
      second_host_marked = true;
    }
    out +=
        Pad(std::to_string(r.index + 1), 3) + "  " + Pad(std::to_string(r.conversation + 1), 4) +
        " " + Pad(std::to_string(r.turn + 1), 4) + "  " + Pad(std::to_string(r.prompt_tokens), 6) +
        "  " + Pad(std::to_string(r.reused_tokens), 6) + "  " + Pad(r.source, 17, true) + "  " +
        Pad(std::to_string(r.pool_blocks), 4) + "  " + Pad(std::to_string(r.host_blocks), 4) +
        "  " + Pad(std::to_string(r.disk_blocks), 4) + "  " +
        Pad(std::to_string(r.remote_blocks), 6) + "  " + Pad(std::to_string(r.computed_tokens), 8) +
        "  " + Pad(Fixed(r.load_ms, 1), 7) + "  " + Pad(Fixed(r.prefill_ms, 1), 10) + "  " +
        Pad(Fixed(r.ttft_ms, 1), 7) + "  " + Pad(Fixed(r.recompute_ttft_ms, 1), 12) + "  " +
        Pad(Fixed(Speedup(r.ttft_ms, r.recompute_ttft_ms), 1) + "x", 7) + "  " +
        (r.logits_mismatched == 0 ? "identical" : "DIFFER") + "\n";
  }
  out += "\n";
  out += "requests " + std::to_string(rep.requests.size()) + ": prompt tokens reused " +
         std::to_string(rep.reused_tokens) + ", computed " + std::to_string(rep.computed_tokens) +
         "; prefix blocks from pool " + std::to_string(rep.pool_blocks_hit) + ", host " +
         std::to_string(rep.host_blocks_hit) + ", disk " + std::to_string(rep.disk_blocks_hit) +
         " (" + std::to_string(rep.disk_blocks_after_restart) + " after the restart)" +
         (rep.remote ? ", remote " + std::to_string(rep.remote_blocks_hit) : "") + "\n";
  out += "time to first token: " + Fixed(rep.ttft_ms, 1) + " ms with the cache, " +
         Fixed(rep.recompute_ttft_ms, 1) + " ms recomputing everything (" +
         Fixed(Speedup(rep.ttft_ms, rep.recompute_ttft_ms), 1) + "x)\n";
  out += "tiers: " + std::to_string(rep.blocks_stored) + " blocks stored, " +
         std::to_string(rep.pool_evicted_sequences) +
         " idle conversations evicted from the pool, " + std::to_string(rep.disk_bytes_written) +
         " bytes written to disk, " + std::to_string(rep.disk_entries_at_end) +
         " blocks on disk at the end" +
         (rep.remote ? ", " + std::to_string(rep.remote_blocks_stored) + " blocks written to Redis"
                     : "") +
         "\n";
  if (rep.remote) {
    out += "second host: " + std::to_string(rep.second_host_remote_blocks) +
           " prefix blocks from Redis, with an empty host tier and an empty folder\n";
  }
  out += std::string(rep.remote ? "logits with the cache vs without (second host: vs the first "
                                  "host's): "
                                : "logits with the cache vs without: ") +
         (rep.bit_exact ? "identical, bit for bit, in every request"
                        : std::to_string(rep.mismatched_requests) + " request(s) DIFFER") +
         "\n";
  return out;
}

}  // namespace kvtier::engine
