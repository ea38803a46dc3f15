#include "server_client/socket_probe.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "kvtier/server_client.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace kvtier::server {
namespace {

using kvtier::testing::StatusIs;

// A socket listening on `path` (backlog 1), never accepting.
int ListenOnForProbe(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << errno;
  EXPECT_EQ(::listen(fd, 1), 0) << errno;
  return fd;
}

TEST(SocketProbe, AnswersOnlyWhileSomethingListens) {
  kvtier::testing::TempDir dir;
  const std::string path = dir.path() + "/p.sock";
  EXPECT_EQ(UnixSocketAnswers(path).value_or(true), false);  // no file
  EXPECT_THAT(DialUnixSocket(path).status(), StatusIs(StatusCode::kUnavailable));
  EXPECT_FALSE(ServerAnswers("unix:" + path));
  const int listener = ListenOnForProbe(path);
  EXPECT_EQ(UnixSocketAnswers(path).value_or(false), true);
  EXPECT_TRUE(ServerAnswers("unix:" + path));
  // Probes that fill the queue (never accepted) still answer, at once.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(UnixSocketAnswers(path).value_or(false), true) << i;
  ::close(listener);
  // The file is left, nobody listens: a stale socket.
  EXPECT_EQ(UnixSocketAnswers(path).value_or(true), false);
  EXPECT_FALSE(ServerAnswers("unix:" + path));
}

TEST(SocketProbe, DialGivesAConnectedDescriptor) {
  kvtier::testing::TempDir dir;
  const std::string path = dir.path() + "/d.sock";
  const int listener = ListenOnForProbe(path);
  Result<int> fd = DialUnixSocket(path);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  const int accepted = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  ASSERT_EQ(::write(*fd, "k", 1), 1);
  char c = 0;
  EXPECT_EQ(::read(accepted, &c, 1), 1);
  EXPECT_EQ(c, 'k');
  for (int f : {*fd, accepted, listener}) ::close(f);
}

TEST(SocketProbe, RefusesPathsASockaddrCannotHold) {
  EXPECT_THAT(UnixSocketAnswers(""), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(UnixSocketAnswers("/tmp/" + std::string(200, 'a')),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(DialUnixSocket(std::string("/tmp/a\0b", 8)).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_FALSE(ServerAnswers("tcp:127.0.0.1:1"));
  EXPECT_FALSE(ServerAnswers("unix:"));
}

}  // namespace
}  // namespace kvtier::server
