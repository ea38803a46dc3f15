// ValueMac: signed values of the remote tier (DESIGN.md §7). A writer with
// keys stores, next to a block's value, `<prefix>{<hex>}:mac` =
//
//   v1 hmac-sha256 <key id> <tag>
//
// key id = the first 16 hex digits of SHA-256(key bytes), tag = 64 hex
// digits of HMAC-SHA256(key, "kvtier-mac-v1\0" || 32-byte block key ||
// whole block file), lower case. The first key signs; every key verifies,
// so a new key is rolled out (added second, then moved first) and an old
// one retired without a flag day.
//
// Thread safety: immutable after construction; every method from any
// thread (each call works on its own OpenSSL context).
#ifndef KVTIER_REMOTE_VALUE_MAC_H_
#define KVTIER_REMOTE_VALUE_MAC_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::remote {

// A key shorter than this is refused (DESIGN.md §7: at least 32 random
// bytes).
inline constexpr size_t kMinMacKeyBytes = 32;
// A key file longer than this is not a key file.
inline constexpr uint64_t kMaxMacKeyFileBytes = 64 << 10;
// The length of a `:mac` value: "v1 hmac-sha256 " + 16 + " " + 64.
inline constexpr size_t kMacValueBytes = 15 + 16 + 1 + 64;

class ValueMac {
 public:
  // Why a value's `:mac` was refused.
  enum class Verdict : uint8_t {
    kOk,
    kMissing,     // no `:mac` stored
    kMalformed,   // not `v1 hmac-sha256 <16 hex> <64 hex>`
    kUnknownKey,  // names a key this reader does not hold
    kBadTag,      // the tag does not match the value
  };

  // From the key files (read through `env`), the first one signing.
  // InvalidArgument naming the file when one cannot be read, is shorter
  // than kMinMacKeyBytes, or repeats another's key id.
  static Result<std::unique_ptr<ValueMac>> Load(std::span<const std::string> paths, Env* env);
  // From the key bytes themselves (the first signing); the same checks.
  static Result<std::unique_ptr<ValueMac>> FromKeys(std::vector<std::string> keys);

  ~ValueMac();
  ValueMac(const ValueMac&) = delete;
  ValueMac& operator=(const ValueMac&) = delete;

  // The `:mac` value for `block` stored under `key`, signed by the first key.
  std::string Sign(const BlockKey& key, std::span<const std::byte> block) const;
  // Whether `mac` (nullopt: none stored) signs `block` under `key` with one
  // of the keys. Constant time in the tag.
  Verdict Check(const BlockKey& key, std::span<const std::byte> block,
                const std::optional<std::string>& mac) const;

  // Checker: checks a value whose bytes arrive in pieces (hashed as they are read,
  // while the socket fills with the next ones): Begin() with the value's
  // `:mac`, Update() with every byte of the block file in order, Finish().
  class Checker {
   public:
    ~Checker();
    Checker(const Checker&) = delete;
    Checker& operator=(const Checker&) = delete;
    void Update(std::span<const std::byte> bytes);
    Verdict Finish();

   private:
    friend class ValueMac;
    Checker() = default;
    Verdict early_ = Verdict::kOk;  // a verdict known before any byte
    void* ctx_ = nullptr;           // EVP_MAC_CTX*, while hashing
    std::string mac_;
    std::string key_id_;
  };
  std::unique_ptr<Checker> Begin(const BlockKey& key, const std::optional<std::string>& mac) const;

  // The key id of `key` (16 hex digits).
  static std::string KeyId(std::string_view key);
  // The signing key's id.
  const std::string& signing_key_id() const;
  size_t key_count() const { return keys_.size(); }

 private:
  struct Key;
  explicit ValueMac(std::vector<std::unique_ptr<Key>> keys);
  std::string SignWith(const Key& k, const BlockKey& key, std::span<const std::byte> block) const;

  std::vector<std::unique_ptr<Key>> keys_;
};

// Short words for a Verdict (logger events, errors): "no :mac", ...
std::string_view VerdictText(ValueMac::Verdict v);

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_VALUE_MAC_H_
