#include "kvtier/server.h"

#include <algorithm>
#include <utility>

#include "server/daemon.h"
#include "server/http_endpoint.h"
#include "server_client/wire.h"

namespace kvtier {
namespace {
// Room for a block file's header beyond its tensors' bytes (DESIGN.md §4
// allows up to 1 MiB; real headers of the presets are a few KiB).
constexpr uint64_t kHeaderRoom = 64 << 10;
constexpr uint64_t kPage = 4096;
}  // namespace

uint64_t ServerOptions::SlotBytes() const {
  const uint64_t raw = layout.BlockBytes() + kHeaderRoom;
  return (raw + kPage - 1) / kPage * kPage;
}

uint32_t ServerOptions::NamespaceQuotaSlots() const {
  if (namespace_quota_bytes == 0) return 0;
  const uint64_t slots = std::max<uint64_t>(namespace_quota_bytes / SlotBytes(), 1);
  return static_cast<uint32_t>(std::min<uint64_t>(slots, UINT32_MAX));
}

Status ServerOptions::Validate() const {
  if (server.empty()) return Status::InvalidArgument("server: is required (unix:PATH)");
  KVTIER_RETURN_IF_ERROR(server::SocketPathOf(server).status());
  KVTIER_RETURN_IF_ERROR(layout.Validate().WithContext("layout"));
  if (cache.host.capacity_bytes == 0) return Status::InvalidArgument("host_bytes: must be > 0");
  if ((socket_permissions & ~0777u) != 0) {
    return Status::InvalidArgument("socket_permissions: must be within 0777");
  }
  if (client_io_timeout_ms == 0 || client_io_timeout_ms > 3'600'000) {
    return Status::InvalidArgument("client_io_timeout_ms: must be in [1, 3600000]");
  }
  if (!http.empty()) {
    KVTIER_RETURN_IF_ERROR(server::ParseHttpAddress(http).status().WithContext("server_http"));
  }
  return Status::Ok();
}

Result<std::unique_ptr<Server>> Server::Open(ServerOptions options, Env* env) {
  KVTIER_ASSIGN_OR_RETURN(auto daemon, server::Daemon::Open(std::move(options), env));
  return std::unique_ptr<Server>(new Server(std::move(daemon)));
}

Server::Server(std::unique_ptr<server::Daemon> daemon) : daemon_(std::move(daemon)) {}
Server::~Server() = default;
Status Server::Run() { return daemon_->Run(); }
void Server::Stop() { daemon_->Stop(); }
Result<ServerShutdownReport> Server::Shutdown() { return daemon_->Shutdown(); }
std::string Server::StatsJson() const { return daemon_->StatsJson(); }
std::string Server::HttpAddress() const { return daemon_->HttpAddress(); }

}  // namespace kvtier
