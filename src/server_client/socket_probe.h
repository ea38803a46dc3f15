// Socket probes: does anything accept connections on a Unix socket path
// now? The one answer the daemon's stale-socket check, the bench's and the
// tests' wait for a daemon to listen, and test clients that speak raw
// frames all use (kvtier::ServerAnswers in kvtier/server_client.h is the
// public form, on a "unix:PATH" address).
//
// A probe never blocks: the socket is non-blocking, and a listener whose
// queue of pending connections is full (connect: EAGAIN) answers.
//
// Thread safety: free functions without state.
#ifndef KVTIER_SERVER_CLIENT_SOCKET_PROBE_H_
#define KVTIER_SERVER_CLIENT_SOCKET_PROBE_H_

#include <string_view>

#include "kvtier/status.h"

namespace kvtier::server {

// A new Unix stream socket (non-blocking, close-on-exec, as SendFrame and
// RecvFrame take them) connected to `path`; the caller closes it.
// Unavailable when nothing accepts there now (no such file, nobody
// listening, not a socket, a full queue), InvalidArgument for a path a
// sockaddr_un cannot hold (too long, empty, a NUL byte), IOError when no
// socket could be made.
Result<int> DialUnixSocket(std::string_view path);

// Whether something listens on `path` now: a connect() that succeeds or
// finds the queue full (the connection is closed at once, nothing sent).
// false when nothing does; InvalidArgument and IOError as DialUnixSocket.
Result<bool> UnixSocketAnswers(std::string_view path);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_CLIENT_SOCKET_PROBE_H_
