// CacheOptions::info_log reaches the tiers the cache opens (DESIGN.md §7):
// the remote tier's "down" line and the disk tier's quarantine line come to
// the cache's logger, unless a tier's own options name another.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <fstream>

#include "cache/cache_test_util.h"
#include "kvtier/tiered_cache.h"
#include "testing/recording_logger.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using cache_test::Blocks;
using cache_test::Buffers;
using cache_test::DiskOptions;
using cache_test::Keys;
using cache_test::OpenCache;
using cache_test::TempDir;
using cache_test::TinyLayout;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::RecordingLogger;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// A loopback port nothing listens on (bound, then closed).
int ClosedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return 1;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// Flips the last byte of key's block file in `dir`.
void Damage(const std::string& dir, const BlockKey& key) {
  const std::string hex = key.Hex();
  std::fstream f(dir + "/blocks/" + hex.substr(0, 2) + "/" + hex + ".safetensors",
                 std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good());
  f.seekp(-1, std::ios::end);
  f.put('\x5a');
}

TEST(CacheLogger, TheTiersLogToTheCachesLogger) {
  TempDir dir;
  const auto keys = Keys(0, 1);
  {
    auto cache = OpenCache(DiskOptions(dir.path(), 4));
    ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
    ASSERT_THAT(cache->Close(), IsOk());
  }
  Damage(dir.path(), keys[0]);
  RecordingLogger logger;
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.info_log = &logger;
  RemoteTierOptions r;
  r.url = "redis://127.0.0.1:" + std::to_string(ClosedPort());
  r.layout = TinyLayout();
  r.connect_timeout_ms = 200;
  o.remote = r;
  auto cache = OpenCache(o);
  ASSERT_NE(cache, nullptr);
  EXPECT_THAT(logger.Matching("remote: redis 127.0.0.1"), SizeIs(1));  // down at open
  Buffers buf(1);
  auto got = cache->Load(keys, buf.spans).value().Get();
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ((*got)[0].tier, CacheTier::kNone);
  auto lines = logger.Matching("quarantine");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_THAT(lines[0].message, HasSubstr(keys[0].Hex()));
}

TEST(CacheLogger, ATiersOwnLoggerWins) {
  TempDir dir;
  const auto keys = Keys(0, 1);
  {
    auto cache = OpenCache(DiskOptions(dir.path(), 4));
    ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
    ASSERT_THAT(cache->Close(), IsOk());
  }
  Damage(dir.path(), keys[0]);
  RecordingLogger cache_log, disk_log;
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.info_log = &cache_log;
  o.disk->info_log = &disk_log;
  auto cache = OpenCache(o);
  ASSERT_NE(cache, nullptr);
  Buffers buf(1);
  ASSERT_THAT(cache->Load(keys, buf.spans).value().Get(), IsOk());
  EXPECT_THAT(disk_log.Matching("quarantine"), SizeIs(1));
  EXPECT_THAT(cache_log.Lines(), SizeIs(0));
}

}  // namespace
}  // namespace kvtier
