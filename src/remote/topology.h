// Parsing of a Redis Cluster's slot map from CLUSTER SHARDS (Redis 7) or
// CLUSTER SLOTS (older servers, and the fallback), as RESP2 replies.
//
// Only masters are used. A master announced without an address ("" or
// "?") is the node that answered (`asked`). Over TLS (`tls`) a CLUSTER
// SHARDS node is dialed at its "tls-port" (Redis 7 lists "port" for the
// plaintext port and "tls-port" for the TLS one; a node without the port
// asked for is skipped); CLUSTER SLOTS has one port, which a server with
// tls-cluster gives TLS clients as its TLS port. A reply of the wrong shape is
// Corruption: the caller tries another node.
//
// Thread safety: pure functions.
#ifndef KVTIER_REMOTE_TOPOLOGY_H_
#define KVTIER_REMOTE_TOPOLOGY_H_

#include <vector>

#include "kvtier/redis_url.h"
#include "kvtier/status.h"
#include "remote/node_table.h"
#include "remote/resp_reader.h"

namespace kvtier::remote {

Result<std::vector<SlotRange>> ParseClusterShards(const RespValue& reply, const NodeAddress& asked,
                                                  bool tls = false);
Result<std::vector<SlotRange>> ParseClusterSlots(const RespValue& reply, const NodeAddress& asked);

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_TOPOLOGY_H_
