// docs/dashboards/kvtier.json, the Grafana dashboard over kvtier's
// Prometheus text: it loads as a dashboard (panels, queries, data source and
// instance variables), covers what docs/operations.md says it shows, and
// every metric it queries is one that kvtier exports. The exported names come
// from running the two real exporters: TieredCache::Stats().ToPrometheus()
// of a cache with both tiers, and `kvtier stats DIR --prometheus`; both
// print only what the stats tables (kvtier/stats_table.h) give.
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "kvtier/disk_tier.h"
#include "kvtier/layout.h"
#include "kvtier/tiered_cache.h"
#include "synth/block_generator.h"
#include "testing/prometheus_text.h"
#include "testing/temp_dir.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

std::string SourceDir() {
  if (const char* env = std::getenv("KVTIER_SOURCE_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  // Ninja compiles with paths relative to the build folder, which holds
  // tests/integration_test.
  fs::path file(__FILE__);
  std::error_code ec;
  if (file.is_relative()) {
    file = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / file;
  }
  return file.parent_path().parent_path().lexically_normal().string();
}

std::string CliPath() {
  if (const char* env = std::getenv("KVTIER_CLI"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  return (fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "kvtier").string();
}

// Metric names in Prometheus text: each sample's name and each # TYPE name.
std::set<std::string> ExportedNames(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      names.insert(line.substr(7, line.find(' ', 7) - 7));
    } else if (!line.empty() && line[0] != '#') {
      names.insert(line.substr(0, line.find_first_of("{ ")));
    }
  }
  return names;
}

// A small disk tier in `dir`: the disk tests' options (small queue, no
// reconcile at open, short touch flushes).
DiskTierOptions SmallDiskOptions(const std::string& dir, const ModelLayout& layout) {
  DiskTierOptions o;
  o.dir = dir;
  o.layout_signature = layout.Signature();
  o.writer_threads = 2;
  o.read_threads = 2;
  o.queue_max_bytes = 1 << 20;
  o.reconcile_on_open = false;
  o.touch_flush_interval_ms = 50;
  return o;
}

// TieredCache with a host and a disk tier, a block stored, written down
// and loaded back from each tier, so that every family has samples.
std::string CachePrometheus(const std::string& dir) {
  const ModelLayout layout = ModelLayout::Preset("tiny").value();
  CacheOptions o;
  o.layout_signature = layout.Signature();
  o.host.capacity_bytes = 1 << 20;
  o.disk = SmallDiskOptions(dir, layout);
  auto cache = TieredCache::Open(o, Env::Default());
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  if (!cache.ok()) return "";
  std::vector<BlockKey> keys = {TestBlockKey(1), TestBlockKey(2)};
  std::vector<SharedBlock> blocks;
  for (const BlockKey& k : keys) {
    blocks.push_back(std::make_shared<const BlockBuffer>(
        MakeBlockFile(layout, k, k, k).value()));  // parent/namespace do not matter here
  }
  EXPECT_TRUE((*cache)->Store(keys, blocks).ok());
  (*cache)->ShrinkHost(0, {});  // down to disk
  std::vector<BlockBuffer> bufs;
  std::vector<std::span<std::byte>> dsts;
  for (size_t i = 0; i < keys.size(); ++i) {
    bufs.push_back(BlockBuffer::Allocate(blocks[i]->size()).value());
    dsts.emplace_back(bufs.back().data(), bufs.back().size());
  }
  for (int pass = 0; pass < 2; ++pass) {  // from disk, then from RAM
    auto f = (*cache)->Load(keys, dsts);
    EXPECT_TRUE(f.ok() && f->Get().ok());
  }
  const std::string text = (*cache)->Stats().ToPrometheus();
  EXPECT_TRUE((*cache)->Close().ok());
  return text;
}

// `kvtier stats DIR --prometheus` plus `args` (--layout P judges the blocks).
std::string CliPrometheus(const std::string& dir, const std::string& args = "") {
  const std::string cmd = "'" + CliPath() + "' stats '" + dir + "' --prometheus " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << cmd << ":\n" << out;
  return out;
}

// Every PromQL string of the dashboard: panel targets (rows included) and
// template variable queries.
void CollectQueries(const nlohmann::json& panels, std::vector<std::string>* out) {
  for (const nlohmann::json& p : panels) {
    if (p.contains("panels")) CollectQueries(p["panels"], out);
    if (!p.contains("targets")) continue;
    for (const nlohmann::json& t : p["targets"]) out->push_back(t.at("expr").get<std::string>());
  }
}

// The kvtier_* metric names the dashboard's queries use.
std::set<std::string> QueriedMetrics(const nlohmann::json& dash) {
  std::vector<std::string> queries;
  CollectQueries(dash.at("panels"), &queries);
  for (const nlohmann::json& v : dash.at("templating").at("list")) {
    if (v.at("query").is_object()) queries.push_back(v.at("query").at("query"));
  }
  const std::regex metric("\\bkvtier_[a-z0-9_]+");
  std::set<std::string> used;
  for (const std::string& q : queries) {
    for (auto it = std::sregex_iterator(q.begin(), q.end(), metric); it != std::sregex_iterator();
         ++it) {
      used.insert(it->str());
    }
  }
  return used;
}

// Every name the stats tables (kvtier/stats_table.h) give, rendered with
// every tier present: what kvtier can export, samples or not.
std::set<std::string> TableNames() {
  CacheStats all;
  all.disk.emplace();
  all.remote.emplace();
  return ExportedNames(all.ToPrometheus());
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = SourceDir() + "/docs/dashboards/kvtier.json";
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << "cannot read " << path;
    std::stringstream text;
    text << in.rdbuf();
    dash_ = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(dash_.is_discarded()) << path << " is not JSON";
  }
  nlohmann::json dash_;
};

TEST_F(DashboardTest, LoadsAsAGrafanaDashboard) {
  EXPECT_EQ(dash_.at("title"), "kvtier");
  EXPECT_EQ(dash_.at("uid"), "kvtier");
  EXPECT_TRUE(dash_.at("schemaVersion").is_number_integer());
  std::set<std::string> vars;
  for (const nlohmann::json& v : dash_.at("templating").at("list")) vars.insert(v.at("name"));
  EXPECT_EQ(vars, (std::set<std::string>{"datasource", "instance"}));
  std::set<int> ids;
  int targets = 0;
  for (const nlohmann::json& p : dash_.at("panels")) {
    SCOPED_TRACE(p.value("title", "?"));
    EXPECT_TRUE(ids.insert(p.at("id").get<int>()).second) << "duplicate panel id";
    EXPECT_FALSE(p.at("title").get<std::string>().empty());
    const nlohmann::json& g = p.at("gridPos");
    EXPECT_GE(g.at("x").get<int>(), 0);
    EXPECT_LE(g.at("x").get<int>() + g.at("w").get<int>(), 24);  // Grafana's grid is 24 wide
    EXPECT_GT(g.at("h").get<int>(), 0);
    if (p.at("type") == "row") continue;
    EXPECT_EQ(p.at("datasource").at("uid"), "${datasource}");
    std::set<std::string> refs;
    for (const nlohmann::json& t : p.at("targets")) {
      EXPECT_TRUE(refs.insert(t.at("refId").get<std::string>()).second) << "duplicate refId";
      // Every query is scoped to the chosen instances.
      EXPECT_NE(t.at("expr").get<std::string>().find("{instance=~\"$instance\"}"),
                std::string::npos)
          << t.at("expr");
      ++targets;
    }
  }
  EXPECT_GE(targets, 30);
}

TEST_F(DashboardTest, EveryMetricItQueriesIsExported) {
  testing::TempDir dir;
  const std::string cache_text = CachePrometheus(dir.Sub("cache"));
  const std::string cli_text = CliPrometheus(dir.Sub("cache"));
  const std::string cli_judged = CliPrometheus(dir.Sub("cache"), "--layout tiny");
  // Every family of both exporters opens with its HELP, then its TYPE.
  EXPECT_TRUE(testing::WellFormedPrometheus(cache_text));
  EXPECT_TRUE(testing::WellFormedPrometheus(cli_text));
  EXPECT_TRUE(testing::WellFormedPrometheus(cli_judged));
  EXPECT_NE(cli_judged.find("# HELP kvtier_disk_compatible_entries "), std::string::npos);
  std::set<std::string> exported = ExportedNames(cache_text);
  const std::set<std::string> from_cli = ExportedNames(cli_text);
  ASSERT_FALSE(from_cli.empty());
  exported.insert(from_cli.begin(), from_cli.end());
  // Both exporters ran: names only each of them prints.
  ASSERT_EQ(exported.count("kvtier_cache_lookups_total"), 1u);
  ASSERT_EQ(exported.count("kvtier_disk_signature_blocks"), 1u);

  // The exporters print what the stats tables give, and `kvtier stats`
  // adds what only its scan of the folder finds.
  const std::set<std::string> tables = TableNames();
  const std::set<std::string> scan_only = {"kvtier_disk_quarantine_bytes", "kvtier_disk_temp_files",
                                           "kvtier_disk_foreign_files"};
  for (const std::string& name : exported) {
    EXPECT_EQ(tables.count(name) + (from_cli.count(name) > 0 ? scan_only.count(name) : 0), 1u)
        << name << " is exported but not by the stats tables";
  }

  const std::set<std::string> used = QueriedMetrics(dash_);
  for (const std::string& name : used) {
    EXPECT_EQ(exported.count(name), 1u) << name << " is not exported by kvtier";
  }
  // What docs/operations.md says the dashboard shows: hit ratio per tier,
  // bytes in and out, queue depth, latency histograms, quarantines, errors.
  for (const char* name :
       {"kvtier_cache_hits_host_total", "kvtier_cache_hits_disk_total", "kvtier_cache_hit_ratio",
        "kvtier_cache_bytes_stored_total", "kvtier_cache_bytes_loaded_disk_total",
        "kvtier_disk_bytes_written_total", "kvtier_disk_queue_bytes", "kvtier_disk_queue_blocks",
        "kvtier_cache_load_latency_seconds_bucket", "kvtier_disk_write_latency_seconds_bucket",
        "kvtier_disk_quarantined_total", "kvtier_disk_quarantine_files", "kvtier_disk_errors_total",
        "kvtier_cache_load_errors_total"}) {
    EXPECT_EQ(used.count(name), 1u) << name << " is not on the dashboard";
  }
}

// The dashboard follows from the stats tables: every metric it queries is
// one the tables give (of any tier, the remote one too).
TEST_F(DashboardTest, EveryMetricItQueriesIsInAStatsTable) {
  const std::set<std::string> tables = TableNames();
  ASSERT_EQ(tables.count("kvtier_remote_hits_total"), 1u);  // every tier is there
  for (const std::string& name : QueriedMetrics(dash_)) {
    EXPECT_EQ(tables.count(name), 1u) << name << " is in no stats table";
  }
}

}  // namespace
}  // namespace kvtier
