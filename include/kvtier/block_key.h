// BlockKey and KeyChain: block key v1 (DESIGN.md §3, docs/block-key.md).
//
// A BlockKey names a block by its tokens and everything before it: a chained
// SHA-256 over a namespace (model, layout signature, block size, tenant salt,
// adapter, extra, shard) and the token ids of each full block. Equal keys mean the
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
  // TLV 0x07: which part of the model's KV this process holds when one
  // model's cache is split across processes (DESIGN.md §3), in the
  // canonical form "tp=<rank>/<size>;pp=<rank>/<size>;cp=<rank>/<size>",
  // each field left out when its size is 1 (so "" = the whole model,
  // omitted from the hash). An MLA model leaves tp out: its latent cache is
  // the same on every TP rank, so the ranks share blocks.
  std::string shard;
};

// OK iff `shard` is "" or in the canonical form above: the fields in the
// order tp, pp, cp, separated by ';', each "<name>=<rank>/<size>" with
// decimal numbers without leading zeros, 2 <= size <= 4294967295 and
// rank < size. InvalidArgument naming what is wrong otherwise (e.g.
// "tp=0/1", "pp=1/2;tp=0/2", "tp=01/2", "tp=2/2", "tp=0/2;").
Status ValidateShard(std::string_view shard);

class KeyChain {
 public:
  // InvalidArgument if model_id or layout_signature is empty, model_id,
  // layout_signature or adapter_id is not UTF-8, a field is longer than
  // 4294967295 bytes, block_tokens is 0, or shard is not canonical
  // (ValidateShard).
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
