// The `kvtier demo` and `kvtier bench pool` commands as scripts see them
// (DESIGN.md §6): one JSON object on stdout with --json, progress on
// stderr, exit 0 on success, a one-line error and exit 2 on bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "testing/temp_dir.h"

namespace kvtier {
namespace {

using ::kvtier::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Ran {
  int exit_code = -1;
  std::string out, err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // $KVTIER_CLI (ctest sets it), else the `kvtier` in the build folder
    // above this test's (tests/integration_test).
    if (const char* cli = std::getenv("KVTIER_CLI"); cli != nullptr && *cli != '\0') {
      cli_ = cli;
    } else {
      cli_ =
          (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "kvtier")
              .string();
    }
    ASSERT_TRUE(std::filesystem::exists(cli_)) << cli_ << " not found: set KVTIER_CLI";
  }

  // Runs the CLI with `args`; `shell_prefix` runs first in the same shell
  // (e.g. a ulimit).
  Ran Run(const std::string& args, const std::string& shell_prefix = "") {
    const std::string err_path = tmp_.path() + "/stderr.txt";
    const std::string cmd = shell_prefix + "'" + cli_ + "' " + args + " 2>'" + err_path + "'";
    Ran r;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
    const int status = ::pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(err_path);
    std::stringstream ss;
    ss << in.rdbuf();
    r.err = ss.str();
    return r;
  }

  static size_t Lines(const std::string& s) {
    size_t n = 0;
    for (char c : s) n += c == '\n';
    return n;
  }

  std::string cli_;
  TempDir tmp_;
};

TEST_F(CliTest, DemoJsonIsOneObjectAndShowsDiskHitsAfterTheRestart) {
  Ran r = Run("demo --quick --json --dir '" + tmp_.path() + "/demo'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(Lines(r.out), 1u) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["bit_exact"], true);
  EXPECT_EQ(j["requests"].size(), 9u);
  EXPECT_GT(j["disk_blocks_after_restart"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["requests"][0]["source"], "none");
  EXPECT_EQ(j["requests"][6]["source"], "disk");
  // Progress went to stderr.
  EXPECT_THAT(r.err, HasSubstr("[ 1/9] conversation 1 turn 1"));
  EXPECT_THAT(r.err, HasSubstr("== restart"));
}

TEST_F(CliTest, DemoTextEndsWithTheSummary) {
  Ran r = Run("demo --quick --quiet --dir '" + tmp_.path() + "/demo'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("logits with the cache vs without: identical, bit for bit"));
  EXPECT_THAT(r.out, HasSubstr("after the restart)"));
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(std::filesystem::exists(tmp_.path() + "/demo/kvtier-demo.marker"));
}

// --model hybrid (attention, sliding window, gated linear attention) and
// --kv-bits 8 (8-bit affine K/V): bit-exact in every request, the disk
// serving after the restart.
TEST_F(CliTest, DemoHybridAndQuantizedModelsAreBitExact) {
  Ran r = Run("demo --quick --json --model hybrid --kv-bits 8 --dir '" + tmp_.path() + "/demo'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["bit_exact"], true);
  EXPECT_EQ(j["model"]["mixers"], nlohmann::json::parse(R"(["attention","sliding","linear"])"));
  EXPECT_EQ(j["model"]["kv_bits"], 8);
  EXPECT_EQ(j["model"]["kv_group"], 16);  // QuickDemoOptions' head_dim
  EXPECT_EQ(j["requests"][6]["source"], "disk");
  EXPECT_THAT(r.err, HasSubstr("attention, sliding 24, linear; K/V 8-bit affine, groups of 16"));
  for (const char* bad : {"--model mamba", "--kv-bits 4"}) {
    Ran b = Run("demo --quick " + std::string(bad) + " --dir '" + tmp_.path() + "/bad'");
    EXPECT_EQ(b.exit_code, 2) << bad;
    EXPECT_EQ(Lines(b.err), 1u) << b.err;
  }
}

TEST_F(CliTest, DemoBadInputIsAOneLineErrorWithExitTwo) {
  Ran r = Run("demo --quick --kv-dtype I8 --dir '" + tmp_.path() + "/demo'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_THAT(r.err, StartsWith("kvtier: "));

  const std::string mine = tmp_.path() + "/mine";
  std::filesystem::create_directories(mine);
  std::ofstream(mine + "/notes.txt") << "keep me";
  r = Run("demo --quick --dir '" + mine + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_THAT(r.err, HasSubstr("not a kvtier demo folder"));
  EXPECT_TRUE(std::filesystem::exists(mine + "/notes.txt"));
}

// A pool size no machine can hold is refused before anything is allocated
// (it once sized the pool's bookkeeping by it and died of bad_alloc). The
// CLI bounds --pool-blocks itself; PoolOptions::Validate refuses what the
// CLI would let through (paged_pool_test: "total_blocks 4000000000 would
// need ...").
TEST_F(CliTest, DemoRefusesAPoolLargerThanTheMachine) {
  const std::string dir = tmp_.path() + "/demo";
  Ran r = Run("demo --quick --pool-blocks 4000000000 --dir '" + dir + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_THAT(r.err, StartsWith("kvtier: --pool-blocks: "));
  EXPECT_THAT(r.err, HasSubstr("4000000000"));
  EXPECT_FALSE(std::filesystem::exists(dir));  // refused before touching the folder
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // The same under a 4 GB address-space limit (sanitizers need more than
  // that to start at all).
  r = Run("demo --quick --pool-blocks 4000000000 --dir '" + dir + "'", "ulimit -v 4000000; ");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_THAT(r.err, StartsWith("kvtier: --pool-blocks: "));
  EXPECT_FALSE(std::filesystem::exists(dir));
#endif
}

TEST_F(CliTest, BenchFolderWritesOnlyWhatTheFolderLacksAndTimesOpenAndMatch) {
  const std::string dir = tmp_.path() + "/folder";
  Ran r = Run("bench folder --dir '" + dir + "' --blocks 300 --chain 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(Lines(r.out), 1u) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["blocks"], 300);
  EXPECT_EQ(j["written"], 300);
  EXPECT_EQ(j["match_blocks"], 64);
  EXPECT_EQ(j["layout"], "tiny");
  EXPECT_LE(j["open_s"].get<double>(), j["first_hit_s"].get<double>());
  EXPECT_LE(j["first_hit_s"].get<double>(), j["reconcile_s"].get<double>());
  EXPECT_GT(j["match_cold_us"].get<double>(), 0);
  EXPECT_GT(j["index_bytes"].get<uint64_t>(), 0u);
  // The folder grows: only the 100 blocks it lacks are written.
  r = Run("bench folder --dir '" + dir + "' --blocks 400 --chain 400 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["blocks"], 400);
  EXPECT_EQ(j["written"], 100);
  EXPECT_EQ(j["match_blocks"], 400);
  // Refused at parse time: no block, or more blocks than it takes.
  for (const char* n : {"0", "100000001"}) {
    r = Run("bench folder --dir '" + dir + "' --blocks " + std::string(n));
    EXPECT_EQ(r.exit_code, 2) << n;
  }
}

TEST_F(CliTest, BenchPoolReportsTheDesignFields) {
  Ran r = Run("bench pool --layout tiny --tokens 256 --repeats 1 --json --dir '" + tmp_.path() +
              "/cache'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(Lines(r.out), 1u) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["append_GBps"].get<double>(), 0);
  EXPECT_GT(j["memcpy_GBps"].get<double>(), 0);
  for (const char* tier : {"pool", "host", "disk"}) {
    ASSERT_TRUE(j["prefix_hit_ms"].contains(tier)) << tier;
    EXPECT_GE(j["prefix_hit_ms"][tier].get<double>(), 0) << tier;
  }
  EXPECT_GT(j["raw_read_GBps"].get<double>(), 0);
  for (const char* tier : {"host", "disk"}) {
    ASSERT_TRUE(j["prefix_hit_GBps"].contains(tier)) << tier;
    EXPECT_GT(j["prefix_hit_GBps"][tier].get<double>(), 0) << tier;
  }
  EXPECT_EQ(j["prefix_tokens"], 256);
  EXPECT_EQ(j["prefix_blocks"], 16);
  EXPECT_EQ(j["block_bytes"], 4096);

  // Issue 32: each ratio per repeat, its median and worst beside its
  // target; warm (no --drop-caches): no O_DIRECT loop, the warm target.
  r = Run("bench pool --layout tiny --tokens 256 --repeats 3 --json --dir '" + tmp_.path() +
          "/cache3'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  {
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["repeats"], 3);
    for (const char* t : {"host", "host_memcpy", "disk", "raw_read", "raw_read_kept", "pool"}) {
      EXPECT_EQ(j["runs_ms"][t].size(), 3u) << t;
    }
    EXPECT_EQ(j["runs_ms"]["raw_direct"].size(), 0u);
    EXPECT_TRUE(j["raw_direct_GBps"].is_null());
    // Warm: the kept-read loop's ceiling per repeat, computed as
    // disk_vs_limit is (K/V over file bytes, times the raw loop's time over
    // the kept loop's, where disk_vs_limit has the restore's).
    const nlohmann::json& ceiling = j["kept_read_ceiling"];
    ASSERT_EQ(ceiling["runs"].size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const double raw = j["runs_ms"]["raw_read"][i].get<double>();
      const double kept = j["runs_ms"]["raw_read_kept"][i].get<double>();
      const double disk = j["runs_ms"]["disk"][i].get<double>();
      const double kv_vs_file = ceiling["runs"][i].get<double>() * kept / raw;
      EXPECT_GT(kv_vs_file, 0.5) << i;  // tiny: 4 KiB of K/V in a 5 KiB file or so
      EXPECT_LE(kv_vs_file, 1.0) << i;
      EXPECT_NEAR(j["ratios"]["disk_vs_limit"]["runs"][i].get<double>() * disk / raw, kv_vs_file,
                  1e-9 * kv_vs_file)
          << i;
    }
    const nlohmann::json& host = j["ratios"]["host_vs_memcpy"];
    EXPECT_EQ(host["runs"].size(), 3u);
    EXPECT_EQ(host["target"], 1.0);
    EXPECT_EQ(host["target_worst"], 0.7);
    EXPECT_EQ(host["better"], "higher");
    EXPECT_EQ(host["median"], j["host_vs_memcpy"]);
    const nlohmann::json& disk = j["ratios"]["disk_vs_limit"];
    EXPECT_EQ(disk["target"], 0.5);
    EXPECT_FALSE(disk.contains("target_worst"));
    for (const nlohmann::json* ratio : {&host, &disk}) {
      std::vector<double> runs = (*ratio)["runs"].get<std::vector<double>>();
      std::sort(runs.begin(), runs.end());
      EXPECT_EQ((*ratio)["worst"].get<double>(), runs[0]);
      EXPECT_EQ((*ratio)["median"].get<double>(), runs[1]);
    }
  }

  r = Run("bench pool --layout no-such-layout");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_THAT(r.err, StartsWith("kvtier: "));
  r = Run("bench pool --layout tiny --tokens 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("less than one block"));
}

// --synthetic-layout: the pool asks for exactly what the prefix needs
// (counted here by hand), and a hybrid layout's restore one state per
// recurrent layer.
TEST_F(CliTest, BenchPoolSyntheticLayoutsAskForWhatThePrefixNeeds) {
  Ran r =
      Run("bench pool --synthetic-layout sliding --block-tokens 16 --tokens 2048 --repeats 1 "
          "--json --dir '" +
          tmp_.path() + "/sliding'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  // 12 layers of K/V [2, 16, 64] BF16 (4096 bytes each); 128 blocks. Full
  // attention (layers 5, 11): every block; a 1024-token window ending at
  // 2048: blocks 64..127 of the 10 others.
  const uint64_t kv = 8192;  // one layer's K and V in one block
  EXPECT_EQ(j["full_bytes"], 128 * 12 * kv);
  EXPECT_EQ(j["needed_bytes"], 128 * 2 * kv + 64 * 10 * kv);
  EXPECT_EQ(j["requested_bytes"], j["needed_bytes"]);
  EXPECT_EQ(j["pool_load_tensor_bytes"], j["needed_bytes"]);
  EXPECT_EQ(j["disk_hits"]["needed"], 128);
  EXPECT_EQ(j["disk_hits"]["whole"], 128);
  EXPECT_EQ(j["recurrent_states_requested"], 0);
  // The raw reads of what the prefix needs, planned from each file's own
  // header: blocks 64..127 whole, blocks 0..63 their header and layers 5
  // and 11; the same bytes the disk tier counted.
  const uint64_t file = j["disk_bytes_read"]["whole"].get<uint64_t>() / 128;
  EXPECT_EQ(file % 8, 0u);  // 8 + a padded header + 12 layers of K/V
  EXPECT_EQ(j["raw_read"]["needed_bytes"], 64 * file + 64 * (file - 10 * kv));
  EXPECT_EQ(j["raw_read"]["needed_bytes"], j["disk_bytes_read"]["needed"]);
  EXPECT_EQ(j["raw_read"]["threads"], 16);
  EXPECT_EQ(j["raw_read"]["needed_runs"].size(), 1u);
  // Warm: no O_DIRECT loops (they would read other things than the
  // buffered ones); the floor under time_vs_whole from the buffered loop.
  EXPECT_EQ(j["raw_read"]["direct_needed_runs"].size(), 0u);
  EXPECT_FALSE(j["raw_read"].contains("direct_needed_ms"));
  EXPECT_EQ(j["needed_read_vs_whole"]["runs"].size(), 1u);

  // Cold, where this process may drop the page cache: the O_DIRECT loops
  // run too, over the needed ranges widened to whole pages (the last
  // partial page of each file included: a read that came back short of
  // what the file holds fails the bench). Elsewhere the bench says why not.
  r =
      Run("bench pool --synthetic-layout sliding --block-tokens 16 --tokens 2048 --repeats 2 "
          "--drop-caches --json --dir '" +
          tmp_.path() + "/sliding-cold'");
  if (::access("/proc/sys/vm/drop_caches", W_OK) == 0) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["raw_read"]["direct_needed_runs"].size(), 2u);
    EXPECT_EQ(j["raw_read"]["direct_whole_runs"].size(), 2u);
    EXPECT_GT(j["raw_read"]["direct_needed_ms"].get<double>(), 0);
    EXPECT_EQ(j["needed_read_vs_whole"]["runs"].size(), 2u);
  } else {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("needs root"));
  }

  r =
      Run("bench pool --synthetic-layout hybrid --block-tokens 16 --tokens 2048 --repeats 1 "
          "--json --dir '" +
          tmp_.path() + "/hybrid'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  // 3 full-attention layers in every block, the 9 recurrent layers'
  // states (F32 [4, 64, 64] + BF16 [3, 512]) of the last block only.
  EXPECT_EQ(j["needed_bytes"], 128 * 3 * kv + 9 * (65536 + 3072));
  EXPECT_EQ(j["requested_bytes"], j["needed_bytes"]);
  EXPECT_EQ(j["recurrent_layers"], 9);
  EXPECT_EQ(j["recurrent_states_requested"], 9);

  r = Run("bench pool --synthetic-layout other");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--synthetic-layout must be sliding or hybrid"));
}

}  // namespace
}  // namespace kvtier
