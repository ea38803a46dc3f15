#include "server_client/socket_probe.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "kvtier/server_client.h"
#include "server_client/wire.h"

namespace kvtier::server {
namespace {

struct Attempt {
  int fd = -1;    // connected (or queued, on EAGAIN) socket; -1 when none
  int error = 0;  // connect's errno, 0 when connected
};

Result<Attempt> ConnectUnix(std::string_view path) {
  sockaddr_un a{};
  if (path.empty() || path.size() >= sizeof(a.sun_path) ||
      path.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(
        "socket path '" + std::string(path.substr(0, 80)) + "': empty, longer than " +
        std::to_string(sizeof(a.sun_path) - 1) + " bytes or holding a NUL byte");
  }
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  Attempt at;
  at.fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (at.fd < 0) return Status::IOError("socket", errno);
  if (::connect(at.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) at.error = errno;
  return at;
}

}  // namespace

Result<int> DialUnixSocket(std::string_view path) {
  KVTIER_ASSIGN_OR_RETURN(Attempt at, ConnectUnix(path));
  if (at.error == 0) return at.fd;
  ::close(at.fd);
  return Status::Unavailable("nothing accepts connections on " + std::string(path) + ": " +
                             std::strerror(at.error));
}

Result<bool> UnixSocketAnswers(std::string_view path) {
  KVTIER_ASSIGN_OR_RETURN(Attempt at, ConnectUnix(path));
  ::close(at.fd);
  return at.error == 0 || at.error == EAGAIN;
}

}  // namespace kvtier::server

namespace kvtier {

bool ServerAnswers(std::string_view server) {
  Result<std::string> path = server::SocketPathOf(server);
  return path.ok() && server::UnixSocketAnswers(*path).value_or(false);
}

}  // namespace kvtier
