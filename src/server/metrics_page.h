// The daemon's /metrics page (docs/server.md): Prometheus text exposition
// 0.0.4 of one snapshot of its figures. Every family it writes has a
// `# HELP` line (the help of its stats-table row) and a `# TYPE` line, then
// its samples:
//
//   kvtier_server_*             the daemon: clients connected, accepted
//   kvtier_server_http_*        the HTTP endpoint (HttpStats)
//   kvtier_server_{blocks,bytes,hits_total,misses_total,stores_total,
//     evictions_total}{tier=...} what every tier has, per tier: "arena",
//                               and "host", "disk", "remote" of the
//                               TieredCache below it (a tier that does not
//                               know a figure has no sample of it)
//   kvtier_server_arena_*       the rest of ArenaStats
//   kvtier_server_client_*{client="ID",pid="PID"}  what each connected
//                               client holds (ClientHoldings)
//   kvtier_server_namespace_*{namespace="HEX"}  what each key namespace
//                               holds in the arena (NamespaceFigures; HEX:
//                               the first 8 bytes of the block files' `ns`)
//
// then the TieredCache below as CacheStats::ToPrometheus() prints it
// (kvtier_cache_*, kvtier_host_*, kvtier_disk_*, kvtier_remote_*).
//
// Thread safety: plain values and a pure function.
#ifndef KVTIER_SERVER_METRICS_PAGE_H_
#define KVTIER_SERVER_METRICS_PAGE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/stats_table.h"
#include "kvtier/tiered_cache.h"
#include "server/arena_service.h"
#include "server/http_endpoint.h"
#include "server/slot_index.h"

namespace kvtier::server {

// The daemon's own figures, X(name, kind, help).
#define KVTIER_SERVER_STATS(X)                                  \
  X(clients, kGauge, "clients connected to the Unix socket")   \
  X(clients_accepted, kCounter, "client connections accepted")
struct DaemonStats {
  KVTIER_SERVER_STATS(KVTIER_STATS_FIELD)
  KVTIER_STATS_FOR_EACH(KVTIER_SERVER_STATS)
};

// The figures every tier has, X(name, kind, help), each one per tier
// (label `tier`).
#define KVTIER_SERVER_TIER_FIGURES(X)                                                       \
  X(blocks, kGauge, "blocks the tier holds (disk: of the daemon's layout)")                 \
  X(bytes, kGauge, "their bytes")                                                           \
  X(hits, kCounter, "keys the tier served (arena: to clients; below it: to promotions)")   \
  X(misses, kCounter, "keys asked of the tier that it did not serve")                       \
  X(stores, kCounter, "blocks written into the tier (arena: publishes, promotions included)") \
  X(evictions, kCounter, "blocks the tier removed to make room")
#define KVTIER_SERVER_TIER_FIELD_(name, kind, help) std::optional<uint64_t> name;
struct TierFigures {
  KVTIER_SERVER_TIER_FIGURES(KVTIER_SERVER_TIER_FIELD_)
  KVTIER_STATS_FOR_EACH(KVTIER_SERVER_TIER_FIGURES)
};
#undef KVTIER_SERVER_TIER_FIELD_

// One client connected to the Unix socket.
struct ClientFigures {
  ClientId id = 0;
  int64_t pid = 0;  // SO_PEERCRED's; 0 when unknown
  ClientHoldings held;
};

// What one key namespace holds in the arena, X(name, kind, help).
#define KVTIER_SERVER_NAMESPACE_FIGURES(X)                    \
  X(slots, kGauge, "arena slots holding the namespace's blocks") \
  X(bytes, kGauge, "those slots' bytes")
struct NamespaceFigures {
  KVTIER_SERVER_NAMESPACE_FIGURES(KVTIER_STATS_FIELD)
  KVTIER_STATS_FOR_EACH(KVTIER_SERVER_NAMESPACE_FIGURES)
};

struct MetricsSnapshot {
  DaemonStats daemon;
  HttpStats http;
  ArenaStats arena;
  std::optional<CacheStats> below;  // nullopt: no tier below the arena
  std::vector<ClientFigures> clients;  // in the order to print
  // Per namespace (the `namespace` label's value), in the order to print.
  std::vector<std::pair<std::string, NamespaceFigures>> namespaces;
};

std::string RenderMetricsPage(const MetricsSnapshot& snapshot);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_METRICS_PAGE_H_
