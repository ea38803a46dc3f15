#include "remote/topology.h"

#include <optional>
#include <string_view>

namespace kvtier::remote {
namespace {

Status Bad(std::string what) { return Status::Corruption("cluster topology reply: " + what); }

std::optional<int64_t> AsInteger(const RespValue& v) {
  if (v.type == ReplyType::kInteger) return v.integer;
  if (v.type == ReplyType::kBulk || v.type == ReplyType::kStatus) return ParseRespInteger(v.str);
  return std::nullopt;
}

bool IsString(const RespValue& v) {
  return v.type == ReplyType::kBulk || v.type == ReplyType::kStatus;
}

Result<NodeAddress> Address(std::string_view host, std::optional<int64_t> port,
                            const NodeAddress& asked) {
  if (!port || *port <= 0 || *port > 65535) return Bad("bad port");
  NodeAddress a;
  a.host = host.empty() || host == "?" ? asked.host : std::string(host);
  a.port = static_cast<uint16_t>(*port);
  if (a.host.size() > 255) return Bad("host too long");
  return a;
}

Status AddRange(std::optional<int64_t> first, std::optional<int64_t> last, const NodeAddress& m,
                std::vector<SlotRange>* out) {
  if (!first || !last || *first < 0 || *last < *first || *last >= kClusterSlots) {
    return Bad("bad slot range");
  }
  out->push_back({static_cast<uint16_t>(*first), static_cast<uint16_t>(*last), m});
  return Status::Ok();
}

// A flat [name, value, name, value, ...] array as RESP2 sends a map.
const RespValue* Field(const RespValue& map, std::string_view name) {
  if (map.type != ReplyType::kArray) return nullptr;
  for (size_t i = 0; i + 1 < map.items.size(); i += 2) {
    if (IsString(map.items[i]) && map.items[i].str == name) return &map.items[i + 1];
  }
  return nullptr;
}

}  // namespace

Result<std::vector<SlotRange>> ParseClusterShards(const RespValue& reply, const NodeAddress& asked,
                                                  bool tls) {
  if (reply.type != ReplyType::kArray) return Bad("CLUSTER SHARDS is not an array");
  std::vector<SlotRange> out;
  for (const RespValue& shard : reply.items) {
    const RespValue* slots = Field(shard, "slots");
    const RespValue* nodes = Field(shard, "nodes");
    if (slots == nullptr || nodes == nullptr || slots->type != ReplyType::kArray ||
        nodes->type != ReplyType::kArray || slots->items.size() % 2 != 0) {
      return Bad("shard without slots and nodes");
    }
    if (slots->items.empty()) continue;  // a shard that owns no slot
    std::optional<NodeAddress> master;
    for (const RespValue& node : nodes->items) {
      const RespValue* role = Field(node, "role");
      if (role == nullptr || !IsString(*role) || role->str != "master") continue;
      // A node without the port asked for (a TLS-only node for a plaintext
      // client, a plaintext-only one for TLS) is not reachable this way.
      const RespValue* port = Field(node, tls ? "tls-port" : "port");
      if (port == nullptr) continue;
      std::string_view host;
      for (std::string_view f : {"endpoint", "ip"}) {
        const RespValue* v = Field(node, f);
        if (v != nullptr && IsString(*v) && !v->str.empty() && v->str != "?") {
          host = v->str;
          break;
        }
      }
      KVTIER_ASSIGN_OR_RETURN(NodeAddress a, Address(host, AsInteger(*port), asked));
      master = std::move(a);
      break;
    }
    if (!master) continue;  // no master right now (failover): its slots stay unknown
    for (size_t i = 0; i < slots->items.size(); i += 2) {
      KVTIER_RETURN_IF_ERROR(
          AddRange(AsInteger(slots->items[i]), AsInteger(slots->items[i + 1]), *master, &out));
    }
  }
  return out;
}

Result<std::vector<SlotRange>> ParseClusterSlots(const RespValue& reply, const NodeAddress& asked) {
  if (reply.type != ReplyType::kArray) return Bad("CLUSTER SLOTS is not an array");
  std::vector<SlotRange> out;
  for (const RespValue& range : reply.items) {
    if (range.type != ReplyType::kArray || range.items.size() < 3) return Bad("bad slot entry");
    const RespValue& m = range.items[2];
    if (m.type != ReplyType::kArray || m.items.size() < 2 || !IsString(m.items[0])) {
      return Bad("bad master entry");
    }
    KVTIER_ASSIGN_OR_RETURN(NodeAddress a, Address(m.items[0].str, AsInteger(m.items[1]), asked));
    KVTIER_RETURN_IF_ERROR(AddRange(AsInteger(range.items[0]), AsInteger(range.items[1]), a, &out));
  }
  return out;
}

}  // namespace kvtier::remote
