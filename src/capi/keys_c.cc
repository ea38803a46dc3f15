// kvtier_block_keys_ns (include/kvtier/kvtier_c.h): block keys under a full
// key namespace (DESIGN.md §3: salt, adapter, extra and shard too), given as
// one JSON object so that the call need not change when a field is added.
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capi/c_status.h"
#include "core/json_strict.h"
#include "kvtier/block_key.h"
#include "kvtier/kvtier_c.h"

namespace kvtier::capi {
namespace {

// {"model": ..., "signature": ...}: one level of nesting, no more.
constexpr int kMaxNamespaceDepth = 1;

// Decodes an even number of hex digits (either case) into bytes.
Result<std::string> FromHex(std::string_view field, std::string_view hex) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) {
    return Status::InvalidArgument(std::string(field) + ": an odd number of hex digits");
  }
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = digit(hex[2 * i]);
    const int lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return Status::InvalidArgument(std::string(field) + ": not hex at offset " +
                                     std::to_string(2 * i));
    }
    out[i] = static_cast<char>((hi << 4) | lo);
  }
  return out;
}

// The namespace JSON of kvtier_block_keys_ns: unknown names, repeated
// names and wrong types are refused, naming the field.
Result<NamespaceOptions> ParseNamespaceJson(std::string_view text) {
  if (!internal::IsStrictUtf8(text)) {
    return Status::InvalidArgument("namespace_json is not valid UTF-8");
  }
  internal::JsonDocument doc;
  internal::JsonError error;
  if (!doc.Parse(text, kMaxNamespaceDepth, &error)) {
    if (error.kind == internal::JsonErrorKind::kDuplicateKey) {
      return Status::InvalidArgument("namespace_json: a name is given twice (at byte " +
                                     std::to_string(error.offset) + ")");
    }
    return Status::InvalidArgument("namespace_json is not valid JSON: " + error.message +
                                   " at byte " + std::to_string(error.offset));
  }
  if (doc.root().kind != internal::JsonKind::kObject) {
    return Status::InvalidArgument("namespace_json: expected a JSON object");
  }
  NamespaceOptions ns;
  bool has_model = false;
  bool has_signature = false;
  bool has_block_tokens = false;
  for (auto [k, v] : internal::JsonMembers(doc, 0)) {
    const std::string_view name = doc.node(k).text;
    const internal::JsonNode& value = doc.node(v);
    if (name == "block_tokens") {
      std::optional<uint64_t> n = internal::JsonUint64(value);
      if (value.kind != internal::JsonKind::kNumber || !n.has_value() || *n == 0 ||
          *n > UINT32_MAX) {
        return Status::InvalidArgument("block_tokens: expected an integer 1..4294967295");
      }
      ns.block_tokens = static_cast<uint32_t>(*n);
      has_block_tokens = true;
      continue;
    }
    static constexpr std::string_view kStringFields[] = {"model",   "signature", "salt_hex",
                                                         "adapter", "extra_hex", "shard"};
    bool known = false;
    for (std::string_view f : kStringFields) known = known || f == name;
    if (!known) {
      return Status::InvalidArgument(
          "namespace_json: unknown name '" + std::string(name.substr(0, 64)) +
          "' (known: model, signature, block_tokens, salt_hex, adapter, extra_hex, shard)");
    }
    if (value.kind != internal::JsonKind::kString) {
      return Status::InvalidArgument(std::string(name) + ": expected a string");
    }
    const std::string text_value(value.text);
    if (name == "model") {
      ns.model_id = text_value;
      has_model = true;
    } else if (name == "signature") {
      ns.layout_signature = text_value;
      has_signature = true;
    } else if (name == "salt_hex") {
      KVTIER_ASSIGN_OR_RETURN(ns.salt, FromHex(name, text_value));
    } else if (name == "adapter") {
      ns.adapter_id = text_value;
    } else if (name == "extra_hex") {
      KVTIER_ASSIGN_OR_RETURN(ns.extra, FromHex(name, text_value));
    } else {
      ns.shard = text_value;
    }
  }
  if (!has_model) return Status::InvalidArgument("model: is required");
  if (!has_signature) return Status::InvalidArgument("signature: is required");
  if (!has_block_tokens) return Status::InvalidArgument("block_tokens: is required");
  return ns;
}

}  // namespace
}  // namespace kvtier::capi

using namespace kvtier::capi;  // NOLINT(google-build-using-namespace): the C entry points

extern "C" {

int kvtier_block_keys_ns(const char* namespace_json, const uint32_t* tokens, size_t n,
                         uint8_t* keys_out, size_t* n_keys) {
  constexpr std::string_view fn = "kvtier_block_keys_ns";
  return Guard(fn, [&]() -> int {
    if (n_keys == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": n_keys is NULL");
    *n_keys = 0;
    if (namespace_json == nullptr) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": namespace_json is NULL");
    }
    if (tokens == nullptr && n > 0) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": tokens is NULL and n > 0");
    }
    kvtier::Result<kvtier::NamespaceOptions> ns = ParseNamespaceJson(namespace_json);
    if (!ns.ok()) return FromStatus(fn, ns.status());
    kvtier::Result<kvtier::KeyChain> chain = kvtier::KeyChain::Create(*ns);
    if (!chain.ok()) return FromStatus(fn, chain.status());
    const size_t count = n / chain->block_tokens();
    if (count > 0 && keys_out == nullptr) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": keys_out is NULL and there are full blocks");
    }
    const std::vector<kvtier::BlockKey> keys =
        chain->KeysFor(std::span<const uint32_t>(tokens, tokens == nullptr ? 0 : n));
    for (size_t i = 0; i < keys.size(); ++i) {
      std::memcpy(keys_out + i * 32, keys[i].bytes.data(), 32);
    }
    *n_keys = keys.size();
    return KVTIER_OK;
  });
}

int kvtier_block_namespace(const char* namespace_json, uint8_t ns_out[32]) {
  constexpr std::string_view fn = "kvtier_block_namespace";
  return Guard(fn, [&]() -> int {
    if (namespace_json == nullptr) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": namespace_json is NULL");
    }
    if (ns_out == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": ns_out is NULL");
    kvtier::Result<kvtier::NamespaceOptions> ns = ParseNamespaceJson(namespace_json);
    if (!ns.ok()) return FromStatus(fn, ns.status());
    kvtier::Result<kvtier::KeyChain> chain = kvtier::KeyChain::Create(*ns);
    if (!chain.ok()) return FromStatus(fn, chain.status());
    std::memcpy(ns_out, chain->ns().bytes.data(), 32);
    return KVTIER_OK;
  });
}

}  // extern "C"
