// BlockKey and KeyChain: block key v1 (DESIGN.md §3, docs/block-key.md).
//
// A BlockKey names a block by its tokens and everything before it: a chained
// SHA-256 over a namespace (model, layout signature, block size, tenant salt,
// adapter, extra) and the token ids of each full block. Equal keys mean the
// same reusable KV state in every tier, process and host.
//
// Thread safety: KeyChain is immutable after Create() and safe to share.
#ifndef KVTIER_BLOCK_KEY_H_
#define KVTIER_BLOCK_KEY_H_

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

struct BlockKey {
  std::array<uint8_t, 32> bytes{};

  // 64 lowercase hex digits.
  std::string Hex() const;
  // Parses exactly 64 hex digits (either case); nullopt otherwise.
  static std::optional<BlockKey> FromHex(std::string_view hex);

  auto operator<=>(const BlockKey&) const = default;
  bool operator==(const BlockKey&) const = default;
};

// For unordered containers: the first 8 bytes of a SHA-256 are uniform.
struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const {
    uint64_t h;
    std::memcpy(&h, k.bytes.data(), sizeof(h));
    return static_cast<size_t>(h);
  }
};

struct NamespaceOptions {
  std::string model_id;          // TLV 0x01, required, UTF-8
  std::string layout_signature;  // TLV 0x02, required (ModelLayout::Signature())
  uint32_t block_tokens = 0;     // TLV 0x03, > 0
  std::string salt;              // TLV 0x04 tenant salt (bytes); omitted if empty
  std::string adapter_id;        // TLV 0x05 (UTF-8); omitted if empty
  std::string extra;             // TLV 0x06 (bytes); omitted if empty
};

class KeyChain {
 public:
  // InvalidArgument if model_id or layout_signature is empty, model_id,
  // layout_signature or adapter_id is not UTF-8, a field is longer than
  // 4294967295 bytes, or block_tokens is 0.
  static Result<KeyChain> Create(const NamespaceOptions& opts);

  const BlockKey& ns() const { return ns_; }
  uint32_t block_tokens() const { return block_tokens_; }

  // Keys of all full blocks of `tokens`, in order (tokens.size() / n keys).
  std::vector<BlockKey> KeysFor(std::span<const uint32_t> tokens) const;

  // The key of the block after `parent` (the namespace for the first block).
  // `extra` (e.g. a multimodal input hash) is appended as TLV(0x10) when
  // non-empty. REQUIRES: block.size() == block_tokens().
  BlockKey Next(const BlockKey& parent, std::span<const uint32_t> block,
                std::span<const std::byte> extra = {}) const;

 private:
  KeyChain(BlockKey ns, uint32_t block_tokens) : ns_(ns), block_tokens_(block_tokens) {}
  BlockKey ns_;
  uint32_t block_tokens_;
};

}  // namespace kvtier

#endif  // KVTIER_BLOCK_KEY_H_
