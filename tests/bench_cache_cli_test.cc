// `kvtier bench cache` and `kvtier bench serve` keep the CLI contract
// (DESIGN.md §6): the JSON names, sane figures (and the exact ones: blocks,
// bytes, what kill -9 left), and a one-line error with a non-zero exit on
// bad input. Runs the CLI named by $KVTIER_CLI, or the one built next to this
// test binary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace kvtier {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout + stderr
};

CliRun RunCli(const std::string& args) {
  CliRun r;
  // $KVTIER_CLI, else the `kvtier` in the build folder above this test
  // binary's (tests/integration_test).
  std::string cli;
  if (const char* env = std::getenv("KVTIER_CLI"); env != nullptr && *env != '\0') {
    cli = env;
  } else {
    std::error_code ec;
    cli =
        (std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "kvtier")
            .string();
  }
  if (!std::filesystem::exists(cli)) {
    ADD_FAILURE() << "no kvtier binary at " << cli << " (build kvtier_cli)";
    return r;
  }
  const std::string cmd = cli + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    ADD_FAILURE() << "popen failed: " << cmd;
    return r;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(BenchCacheCli, PrintsTheContractFieldsAsOneJsonObject) {
  CliRun r =
      RunCli("bench cache --layout tiny --blocks 640 --samples 200 --round-bytes 1048576 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* name : {"host_hit_GBps", "memcpy_GBps", "match_ns_per_block_p50",
                           "match_ns_per_block_p99", "index_bytes_per_block"}) {
    ASSERT_TRUE(j.contains(name)) << name;
    EXPECT_TRUE(j[name].is_number()) << name;
    EXPECT_GT(j[name].get<double>(), 0) << name;
  }
  EXPECT_LE(j["match_ns_per_block_p50"].get<double>(), j["match_ns_per_block_p99"].get<double>());
  EXPECT_EQ(j["blocks"], 640);
  EXPECT_EQ(j["host_blocks"], 640);
  EXPECT_EQ(j["chain_blocks"], 64);
}

TEST(BenchCacheCli, BadInputIsAOneLineErrorAndExitTwo) {
  for (const char* args :
       {"bench cache --layout tiny", "bench cache --blocks 10",
        "bench cache --layout tiny --blocks 0", "bench cache --layout tiny --blocks 12x",
        "bench cache --layout no-such-layout --blocks 10",
        "bench cache --layout tiny --blocks 10 --samples 0"}) {
    CliRun r = RunCli(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
    EXPECT_TRUE(r.out.starts_with("kvtier: ")) << args << ": " << r.out;
  }
}

// A small run of every part: the counts it reports are exact (the figures
// are only checked to be there; their speed is the bench's business).
TEST(BenchServeCli, ReportsExactCountsOfEveryPart) {
  CliRun r = RunCli(
      "bench serve --layout tiny --tokens 256 --clients 3 --kills 20 --rounds 1 "
      "--tiny-samples 16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* name : {"arena_load_GBps", "memcpy_GBps", "first_load_GBps",
                           "first_process_new_slots_GBps",
                           "served_match_ns_per_block", "local_match_ns_per_block",
                           "served_load_ns_per_block", "local_load_ns_per_block"}) {
    ASSERT_TRUE(j.contains(name)) << name;
    EXPECT_GT(j[name].get<double>(), 0) << name;
  }
  // tiny: 16 tokens per block; each block file is 4 KiB of tensors plus
  // its header.
  EXPECT_EQ(j["prefix_blocks"], 16);
  EXPECT_EQ(j["prefix_bytes"].get<uint64_t>() % 16, 0u);
  // Three processes storing the same 16 blocks take the slots of one.
  EXPECT_EQ(j["shared_blocks"], 16);
  EXPECT_GT(j["one_copy_arena_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["shared_arena_bytes"], j["one_copy_arena_bytes"]);
  EXPECT_EQ(j["shared_vs_one_copy"].get<double>(), 1.0);
  EXPECT_EQ(j["kills"], 20);
  EXPECT_EQ(j["killed_clients_wrong_bytes"], 0);
  EXPECT_EQ(j["final_wrong_bytes"], 0);
  EXPECT_EQ(j["leases_left"], 0);
  EXPECT_EQ(j["reservations_left"], 0);
  // (d): one new process per round; connect timed apart from the load.
  EXPECT_EQ(j["first_processes"], 1);
  EXPECT_GT(j["first_load_median_GBps"].get<double>(), 0);
  EXPECT_EQ(j["first_load_median_GBps"], j["first_load_GBps"]);
  EXPECT_GT(j["first_process_connect_ms"].get<double>(), 0);
  // The system's setting, as the kernel prints it: "[word]" among others.
  std::ifstream setting("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string word, chosen = "unknown";
  while (setting >> word) {
    if (word.front() == '[') chosen = word.substr(1, word.size() - 2);
  }
  EXPECT_EQ(j["shmem_enabled"], chosen);
  // Without shared-memory huge pages the arena has none mapped.
  if (chosen == "never" || chosen == "deny" || chosen == "unknown") {
    EXPECT_EQ(j["first_process_huge_page_bytes"], 0);
  }
}

TEST(BenchServeCli, BadInputIsAOneLineErrorAndExitTwo) {
  for (const char* args :
       {"bench serve --tokens 0", "bench serve --tokens 99999999999999",
        "bench serve --clients 0", "bench serve --clients 100000", "bench serve --rounds 0",
        "bench serve --kills 4000000000", "bench serve --layout no-such-layout"}) {
    CliRun r = RunCli(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
    EXPECT_TRUE(r.out.starts_with("kvtier: ")) << args << ": " << r.out;
  }
}

}  // namespace
}  // namespace kvtier
