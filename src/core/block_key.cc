// Block key v1 (DESIGN.md §3, docs/block-key.md).
//
// Hashing uses OpenSSL's low-level SHA256_CTX: it lives on the stack, needs
// no provider lookup or heap allocation per block, and costs the same as a
// one-shot SHA-256 of the payload (bench/key_bench.cc measures the ratio).
// OpenSSL 3 marks these functions deprecated in favour of EVP, whose
// per-message dispatch is measurable at ~1 KiB messages, hence the macro.
#define OPENSSL_SUPPRESS_DEPRECATED 1

#include "kvtier/block_key.h"

#include <openssl/sha.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <iterator>
#include <optional>
#include <string_view>

#include "core/layout_internal.h"

namespace kvtier {
namespace {

static_assert(sizeof(BlockKey) == 32 && SHA256_DIGEST_LENGTH == 32);

// Both domain strings include their terminating zero byte.
constexpr char kNamespaceDomain[] = "kvtier-ns-v1";               // 12 chars + '\0'
constexpr char kBlockDomain[] = "kvtier-blk-v1";                  // 13 chars + '\0'
constexpr size_t kNamespaceDomainLen = sizeof(kNamespaceDomain);  // 13
constexpr size_t kBlockDomainLen = sizeof(kBlockDomain);          // 14

constexpr uint8_t kTagModel = 0x01;
constexpr uint8_t kTagSignature = 0x02;
constexpr uint8_t kTagBlockTokens = 0x03;
constexpr uint8_t kTagSalt = 0x04;
constexpr uint8_t kTagAdapter = 0x05;
constexpr uint8_t kTagExtra = 0x06;
constexpr uint8_t kTagShard = 0x07;
constexpr uint8_t kTagBlockExtra = 0x10;

inline void PutU32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

// TLV(tag, bytes): 1-byte tag, u32 LE length, bytes.
// REQUIRES: size <= UINT32_MAX (Create() checks the namespace fields).
void UpdateTlv(SHA256_CTX* ctx, uint8_t tag, const void* data, size_t size) {
  assert(size <= UINT32_MAX);
  uint8_t head[5];
  head[0] = tag;
  PutU32(head + 1, static_cast<uint32_t>(size));
  SHA256_Update(ctx, head, sizeof(head));
  if (size > 0) SHA256_Update(ctx, data, size);
}

// Feeds token ids as u32 little-endian.
void UpdateTokens(SHA256_CTX* ctx, std::span<const uint32_t> tokens) {
  if constexpr (std::endian::native == std::endian::little) {
    // The in-memory form is already the wire form.
    SHA256_Update(ctx, tokens.data(), tokens.size_bytes());
  } else {
    constexpr size_t kChunk = 256;  // tokens per stack chunk (1 KiB)
    uint8_t buf[kChunk * 4];
    for (size_t i = 0; i < tokens.size(); i += kChunk) {
      const size_t n = std::min(kChunk, tokens.size() - i);
      for (size_t j = 0; j < n; ++j) PutU32(buf + 4 * j, tokens[i + j]);
      SHA256_Update(ctx, buf, 4 * n);
    }
  }
}

Status CheckText(const std::string& value, const char* field, bool required) {
  if (required && value.empty()) {
    return Status::InvalidArgument(std::string(field) + " must not be empty");
  }
  if (value.size() > UINT32_MAX) {
    return Status::InvalidArgument(std::string(field) + " is longer than 4294967295 bytes");
  }
  if (!internal::IsStrictUtf8(value)) {
    return Status::InvalidArgument(std::string(field) + " must be valid UTF-8");
  }
  return Status::Ok();
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The shard's fields, in the only order the canonical form allows.
constexpr std::string_view kShardFields[] = {"tp", "pp", "cp"};

// Parses a decimal number without leading zeros that fits in 32 bits.
std::optional<uint64_t> ParseShardNumber(std::string_view text) {
  if (text.empty() || text.size() > 10 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > UINT32_MAX) return std::nullopt;
  return v;
}

Status BadShard(std::string_view shard, std::string_view why) {
  std::string shown(shard.substr(0, 80));
  return Status::InvalidArgument("shard '" + shown + "' is not canonical: " + std::string(why) +
                                 " (expected tp=<rank>/<size>;pp=<rank>/<size>;cp=<rank>/<size>, "
                                 "each field left out when its size is 1)");
}

}  // namespace

Status ValidateShard(std::string_view shard) {
  if (shard.empty()) return Status::Ok();
  size_t next_field = 0;  // index into kShardFields of the earliest allowed field
  size_t pos = 0;
  while (true) {
    const size_t end = std::min(shard.find(';', pos), shard.size());
    const std::string_view field = shard.substr(pos, end - pos);
    const size_t eq = field.find('=');
    if (eq == std::string_view::npos) return BadShard(shard, "a field has no '='");
    const std::string_view name = field.substr(0, eq);
    size_t index = next_field;
    while (index < std::size(kShardFields) && kShardFields[index] != name) ++index;
    if (index == std::size(kShardFields)) {
      const bool known = name == "tp" || name == "pp" || name == "cp";
      return BadShard(shard, known ? "fields must appear once each, in the order tp, pp, cp"
                                   : "unknown field '" + std::string(name.substr(0, 16)) +
                                         "' (fields are tp, pp, cp)");
    }
    next_field = index + 1;
    const std::string_view value = field.substr(eq + 1);
    const size_t slash = value.find('/');
    if (slash == std::string_view::npos) {
      return BadShard(shard, std::string(name) + " is not <rank>/<size>");
    }
    const std::optional<uint64_t> rank = ParseShardNumber(value.substr(0, slash));
    const std::optional<uint64_t> size = ParseShardNumber(value.substr(slash + 1));
    if (!rank.has_value() || !size.has_value()) {
      return BadShard(shard, std::string(name) +
                                 ": rank and size must be decimal numbers below 2^32 without "
                                 "leading zeros");
    }
    if (*size == 1) return BadShard(shard, std::string(name) + " has size 1: leave it out");
    if (*size == 0) return BadShard(shard, std::string(name) + " has size 0");
    if (*rank >= *size) return BadShard(shard, std::string(name) + ": rank must be < size");
    if (end == shard.size()) return Status::Ok();
    pos = end + 1;  // a trailing ';' leaves an empty field, refused above
  }
}

std::string BlockKey::Hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(64, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0x0F];
  }
  return out;
}

std::optional<BlockKey> BlockKey::FromHex(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  BlockKey key;
  for (size_t i = 0; i < key.bytes.size(); ++i) {
    int hi = HexValue(hex[2 * i]);
    int lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key.bytes[i] = static_cast<uint8_t>((hi << 4) | lo);
  }
  return key;
}

Result<KeyChain> KeyChain::Create(const NamespaceOptions& opts) {
  KVTIER_RETURN_IF_ERROR(CheckText(opts.model_id, "model_id", /*required=*/true));
  KVTIER_RETURN_IF_ERROR(CheckText(opts.layout_signature, "layout_signature", /*required=*/true));
  KVTIER_RETURN_IF_ERROR(CheckText(opts.adapter_id, "adapter_id", /*required=*/false));
  if (opts.block_tokens == 0) return Status::InvalidArgument("block_tokens must be > 0");
  if (opts.salt.size() > UINT32_MAX) {
    return Status::InvalidArgument("salt is longer than 4294967295 bytes");
  }
  if (opts.extra.size() > UINT32_MAX) {
    return Status::InvalidArgument("extra is longer than 4294967295 bytes");
  }
  KVTIER_RETURN_IF_ERROR(ValidateShard(opts.shard));

  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, kNamespaceDomain, kNamespaceDomainLen);
  UpdateTlv(&ctx, kTagModel, opts.model_id.data(), opts.model_id.size());
  UpdateTlv(&ctx, kTagSignature, opts.layout_signature.data(), opts.layout_signature.size());
  uint8_t bt[4];
  PutU32(bt, opts.block_tokens);
  UpdateTlv(&ctx, kTagBlockTokens, bt, sizeof(bt));
  if (!opts.salt.empty()) UpdateTlv(&ctx, kTagSalt, opts.salt.data(), opts.salt.size());
  if (!opts.adapter_id.empty()) {
    UpdateTlv(&ctx, kTagAdapter, opts.adapter_id.data(), opts.adapter_id.size());
  }
  if (!opts.extra.empty()) UpdateTlv(&ctx, kTagExtra, opts.extra.data(), opts.extra.size());
  if (!opts.shard.empty()) UpdateTlv(&ctx, kTagShard, opts.shard.data(), opts.shard.size());
  BlockKey ns;
  SHA256_Final(ns.bytes.data(), &ctx);
  return KeyChain(ns, opts.block_tokens);
}

BlockKey KeyChain::Next(const BlockKey& parent, std::span<const uint32_t> block,
                        std::span<const std::byte> extra) const {
  assert(block.size() == block_tokens_);
  assert(extra.size() <= UINT32_MAX);
  // Domain, parent and n in one small update; the tokens follow without a
  // copy on little-endian hosts.
  uint8_t head[kBlockDomainLen + 32 + 4];
  std::memcpy(head, kBlockDomain, kBlockDomainLen);
  std::memcpy(head + kBlockDomainLen, parent.bytes.data(), 32);
  PutU32(head + kBlockDomainLen + 32, static_cast<uint32_t>(block.size()));

  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, head, sizeof(head));
  UpdateTokens(&ctx, block);
  if (!extra.empty()) UpdateTlv(&ctx, kTagBlockExtra, extra.data(), extra.size());
  BlockKey key;
  SHA256_Final(key.bytes.data(), &ctx);
  return key;
}

std::vector<BlockKey> KeyChain::KeysFor(std::span<const uint32_t> tokens) const {
  const size_t blocks = tokens.size() / block_tokens_;
  std::vector<BlockKey> keys;
  keys.reserve(blocks);
  const BlockKey* parent = &ns_;
  for (size_t i = 0; i < blocks; ++i) {
    keys.push_back(Next(*parent, tokens.subspan(i * block_tokens_, block_tokens_)));
    parent = &keys.back();
  }
  return keys;
}

}  // namespace kvtier
