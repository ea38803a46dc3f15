#include "remote/value_mac.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <array>
#include <new>

namespace kvtier::remote {
namespace {

// The domain separation prefix of every tag, its NUL included.
constexpr std::string_view kTagPrefix{"kvtier-mac-v1\0", 14};
constexpr std::string_view kValuePrefix = "v1 hmac-sha256 ";

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

}  // namespace

// One key: its id and an HMAC context keyed with it, duplicated per call
// (keying it each time would redo the key schedule).
struct ValueMac::Key {
  std::string id;
  EVP_MAC* mac = nullptr;
  EVP_MAC_CTX* keyed = nullptr;
  ~Key() {
    EVP_MAC_CTX_free(keyed);
    EVP_MAC_free(mac);
  }
};

ValueMac::ValueMac(std::vector<std::unique_ptr<Key>> keys) : keys_(std::move(keys)) {}
ValueMac::~ValueMac() = default;

std::string ValueMac::KeyId(std::string_view key) {
  std::array<unsigned char, 32> digest{};
  unsigned int len = 0;
  EVP_Digest(key.data(), key.size(), digest.data(), &len, EVP_sha256(), nullptr);
  return Hex(digest.data(), 8);
}

Result<std::unique_ptr<ValueMac>> ValueMac::FromKeys(std::vector<std::string> keys) {
  if (keys.empty()) return Status::InvalidArgument("mac_keys: no key given");
  std::vector<std::unique_ptr<Key>> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& bytes = keys[i];
    if (bytes.size() < kMinMacKeyBytes) {
      return Status::InvalidArgument("key " + std::to_string(i) + " has " +
                                     std::to_string(bytes.size()) + " bytes, fewer than " +
                                     std::to_string(kMinMacKeyBytes) + " (use e.g. `head -c 32 "
                                     "/dev/urandom > key`)");
    }
    auto k = std::make_unique<Key>();
    k->id = KeyId(bytes);
    for (const std::unique_ptr<Key>& other : out) {
      if (other->id == k->id) {
        return Status::InvalidArgument("key " + std::to_string(i) + " repeats key id " + k->id);
      }
    }
    k->mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (k->mac != nullptr) k->keyed = EVP_MAC_CTX_new(k->mac);
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_END};
    if (k->keyed == nullptr ||
        EVP_MAC_init(k->keyed, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                     params) != 1) {
      return Status::Internal("mac_keys: OpenSSL has no HMAC-SHA256");
    }
    out.push_back(std::move(k));
  }
  return std::unique_ptr<ValueMac>(new ValueMac(std::move(out)));
}

Result<std::unique_ptr<ValueMac>> ValueMac::Load(std::span<const std::string> paths, Env* env) {
  std::vector<std::string> keys;
  for (const std::string& path : paths) {
    Result<std::vector<std::byte>> bytes = env->ReadWholeFile(path, kMaxMacKeyFileBytes);
    if (!bytes.ok()) {
      return Status::InvalidArgument("mac_keys: " + path + ": " + bytes.status().message());
    }
    keys.emplace_back(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  }
  Result<std::unique_ptr<ValueMac>> mac = FromKeys(std::move(keys));
  if (!mac.ok() && !paths.empty()) {
    // Name the file rather than its position.
    const std::string m = mac.status().message();
    for (size_t i = 0; i < paths.size(); ++i) {
      const std::string at = "key " + std::to_string(i) + " ";
      if (m.starts_with(at)) {
        return Status::InvalidArgument("mac_keys: " + paths[i] + ": " + m.substr(at.size()));
      }
    }
  }
  return mac;
}

const std::string& ValueMac::signing_key_id() const { return keys_.front()->id; }

std::string ValueMac::SignWith(const Key& k, const BlockKey& key,
                               std::span<const std::byte> block) const {
  std::array<unsigned char, 32> tag{};
  size_t len = 0;
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(k.keyed);
  if (ctx == nullptr) throw std::bad_alloc();
  const bool ok =
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(kTagPrefix.data()),
                     kTagPrefix.size()) == 1 &&
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(key.bytes.data()),
                     key.bytes.size()) == 1 &&
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(block.data()), block.size()) ==
          1 &&
      EVP_MAC_final(ctx, tag.data(), &len, tag.size()) == 1 && len == tag.size();
  EVP_MAC_CTX_free(ctx);
  if (!ok) throw std::bad_alloc();  // OpenSSL fails here only when it cannot allocate
  std::string out;
  out.reserve(kMacValueBytes);
  out.append(kValuePrefix).append(k.id).append(" ").append(Hex(tag.data(), tag.size()));
  return out;
}

std::string ValueMac::Sign(const BlockKey& key, std::span<const std::byte> block) const {
  return SignWith(*keys_.front(), key, block);
}

ValueMac::Verdict ValueMac::Check(const BlockKey& key, std::span<const std::byte> block,
                                  const std::optional<std::string>& mac) const {
  if (!mac) return Verdict::kMissing;
  const std::string& m = *mac;
  if (m.size() != kMacValueBytes || !m.starts_with(kValuePrefix) ||
      m[kValuePrefix.size() + 16] != ' ') {
    return Verdict::kMalformed;
  }
  const std::string_view id = std::string_view(m).substr(kValuePrefix.size(), 16);
  for (const std::unique_ptr<Key>& k : keys_) {
    if (k->id != id) continue;
    const std::string expected = SignWith(*k, key, block);
    return CRYPTO_memcmp(expected.data(), m.data(), kMacValueBytes) == 0 ? Verdict::kOk
                                                                         : Verdict::kBadTag;
  }
  return Verdict::kUnknownKey;
}

ValueMac::Checker::~Checker() { EVP_MAC_CTX_free(static_cast<EVP_MAC_CTX*>(ctx_)); }

std::unique_ptr<ValueMac::Checker> ValueMac::Begin(const BlockKey& key,
                                                 const std::optional<std::string>& mac) const {
  std::unique_ptr<Checker> c(new Checker());
  if (!mac) {
    c->early_ = Verdict::kMissing;
    return c;
  }
  const std::string& m = *mac;
  if (m.size() != kMacValueBytes || !m.starts_with(kValuePrefix) ||
      m[kValuePrefix.size() + 16] != ' ') {
    c->early_ = Verdict::kMalformed;
    return c;
  }
  const std::string_view id = std::string_view(m).substr(kValuePrefix.size(), 16);
  for (const std::unique_ptr<Key>& k : keys_) {
    if (k->id != id) continue;
    EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(k->keyed);
    if (ctx == nullptr) throw std::bad_alloc();
    c->ctx_ = ctx;
    c->mac_ = m;
    c->key_id_ = k->id;
    if (EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(kTagPrefix.data()),
                       kTagPrefix.size()) != 1 ||
        EVP_MAC_update(ctx, key.bytes.data(), key.bytes.size()) != 1) {
      throw std::bad_alloc();
    }
    return c;
  }
  c->early_ = Verdict::kUnknownKey;
  return c;
}

void ValueMac::Checker::Update(std::span<const std::byte> bytes) {
  if (ctx_ == nullptr || bytes.empty()) return;
  if (EVP_MAC_update(static_cast<EVP_MAC_CTX*>(ctx_),
                     reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()) != 1) {
    throw std::bad_alloc();
  }
}

ValueMac::Verdict ValueMac::Checker::Finish() {
  if (ctx_ == nullptr) return early_;
  std::array<unsigned char, 32> tag{};
  size_t len = 0;
  EVP_MAC_CTX* ctx = static_cast<EVP_MAC_CTX*>(ctx_);
  const bool ok = EVP_MAC_final(ctx, tag.data(), &len, tag.size()) == 1 && len == tag.size();
  EVP_MAC_CTX_free(ctx);
  ctx_ = nullptr;
  if (!ok) throw std::bad_alloc();
  std::string expected;
  expected.reserve(kMacValueBytes);
  expected.append(kValuePrefix).append(key_id_).append(" ").append(Hex(tag.data(), tag.size()));
  early_ = CRYPTO_memcmp(expected.data(), mac_.data(), kMacValueBytes) == 0 ? Verdict::kOk
                                                                             : Verdict::kBadTag;
  return early_;
}

std::string_view VerdictText(ValueMac::Verdict v) {
  switch (v) {
    case ValueMac::Verdict::kOk:
      return "signed";
    case ValueMac::Verdict::kMissing:
      return "no :mac (written by a host without keys)";
    case ValueMac::Verdict::kMalformed:
      return "a malformed :mac";
    case ValueMac::Verdict::kUnknownKey:
      return "a :mac naming a key this host does not hold";
    case ValueMac::Verdict::kBadTag:
      return "a :mac whose tag does not match the value";
  }
  return "";
}

}  // namespace kvtier::remote
