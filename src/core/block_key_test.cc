#include "kvtier/block_key.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "kvtier/layout.h"

namespace kvtier {
namespace {

using ::testing::HasSubstr;

// Test vectors from tests/block_key_vectors.py (an independent hashlib
// implementation): `/usr/bin/python3 tests/block_key_vectors.py --cpp`.
// docs/block-key.md shows the same vectors; DocsShowTheSameVectors checks it.
struct Vector {
  const char* name;
  const char* model;
  const char* signature;
  uint32_t block_tokens;
  const char* salt_hex;
  const char* adapter;
  const char* extra_hex;
  const char* tokens;     // "1,2,3", "a..b" (inclusive) or ""
  int block_extra_index;  // block that gets a per-block extra, or -1
  const char* block_extra_hex;
  const char* shard;  // "" = none
  const char* ns;
  std::vector<const char*> keys;
};

const std::vector<Vector>& Vectors() {
  static const std::vector<Vector> v = {
      {"empty",
       "m",
       "s",
       4,
       "",
       "",
       "",
       "",
       -1,
       "",
       "",
       "99a4a7d4c66439b08508fe76879688e05f734e84da91e625cfc891e65c2186e0",
       {}},
      {"basic",
       "m",
       "s",
       4,
       "",
       "",
       "",
       "1,2,3,4,5,6,7,8,9,10",
       -1,
       "",
       "",
       "99a4a7d4c66439b08508fe76879688e05f734e84da91e625cfc891e65c2186e0",
       {"d7e47b56072b83272d8fa7278aa17c7b0e3d2acc2771111924e5cea8d28d7e19",
        "f158913aff79937298ecaeea0d354f062738f61f190f76d50159a42cea48a9c1"}},
      {"tiny",
       "tiny-model",
       "kvtier-layout-v1;bt=16;L0-1=attention:keys:F16[2,16,16],values:F16[2,16,16]",
       16,
       "",
       "",
       "",
       "1..35",
       -1,
       "",
       "",
       "dee236fcdec169cfe5674082ae4f0b7c8928b887844cd0c034a3b476df55eca4",
       {"06541b22c0e01ce9decbe1166b2209debd43e7cdc693640c7b30d5445929782c",
        "f159775e9ba30e4670c0e0b16a0438b0317ad5f0805fe761ac7ae9901e52b9df"}},
      {"qwen-256",
       "Qwen/Qwen2.5-0.5B-Instruct",
       "kvtier-layout-v1;bt=256;L0-23=attention:keys:BF16[2,256,64],values:BF16[2,256,64]",
       256,
       "",
       "",
       "",
       "0..599",
       -1,
       "",
       "",
       "de2ee438b45e2073b63a7b59e3e74b50ff4da33535b6df7c9e51ce168cc862d2",
       {"562c0b12b11535833071d3f046725b05a6a25da5bb65a0b0b844fee91b703f80",
        "1e87052189b86365878cc33711ddd6f6ed44404b9f6c1cac7bed89fbba691935"}},
      {"salt",
       "m",
       "s",
       4,
       "74656e616e742d3432",
       "",
       "",
       "1,2,3,4,5,6,7,8",
       -1,
       "",
       "",
       "d8c27683eb213af038d6a2f0867a7c10ea05b1075f3257cabcef8cd238834ec4",
       {"3c9b57f77af4a2851adf020b8d1592499dfe8c3ae9edb3db239d1033d87cc38a",
        "fea2cc577f52f56fc5b783063ca7d37047fd8e578619e2c2125af0ed55fa1687"}},
      {"adapter",
       "m",
       "s",
       4,
       "",
       "lora-sql-v2",
       "",
       "1,2,3,4,5,6,7,8",
       -1,
       "",
       "",
       "478c8f557fc27ff34cfd3616955f104fec7453b117597dd94a0fe032777ee612",
       {"dc7906a45d0823c5568790a13a0bdd8c105f4cc227678ec10cca41a582dcabb5",
        "86e98b81db3bd8e366285a015ac17ae46cba9a5d57b3159bafedf81a2a6cd09f"}},
      {"ns-extra",
       "m",
       "s",
       4,
       "",
       "",
       "00ff10",
       "1,2,3,4,5,6,7,8",
       -1,
       "",
       "",
       "e20ed4ce02c35a7e6a21845df119b72b678dfec874b4dfaf9a07f9e8cb071f4c",
       {"157e87c3f7a4563bc5e6d5db56e82a01730d69770e08e42752520929d0248be1",
        "31f9d091cfa4798c1957de50473704356824443978e8225d5930dfb0fce041bf"}},
      {"block-extra",
       "m",
       "s",
       4,
       "",
       "",
       "",
       "1,2,3,4,5,6,7,8",
       1,
       "0cf457e24a479f02fd4d34540389f720f0807dcff92a7562108165b2637ea82f",
       "",
       "99a4a7d4c66439b08508fe76879688e05f734e84da91e625cfc891e65c2186e0",
       {"d7e47b56072b83272d8fa7278aa17c7b0e3d2acc2771111924e5cea8d28d7e19",
        "56d5b3d4f0aeb98e6991e1f69f6528d8500b21e0c5f94d4367db483eb7c5f34f"}},
      {"all-fields",
       "llama3-8b",
       "sig",
       2,
       "0001",
       "adapter-\303\251",
       "78",
       "4294967295,2147483648,256,1,0,65536",
       -1,
       "",
       "",
       "b1439d35370a111fbe29c09482e895e5e7c01ac916fba8c88a2ed4783c1f6ae4",
       {"498ff1626a955b3e3143185428309c28e9af583d6729bce68998ce84d0312ce6",
        "53179e359b6b7e4dded70c91f2c32c59952a3f574cb140414eb869baeb71adfb",
        "50285d41c55e1ade6f1af77c4b896ac828c7b2cafa6448eb662cc047d94d9245"}},
      {"utf8-model",
       "\346\250\241\345\236\213-\316\261",
       "s",
       1,
       "",
       "",
       "",
       "7,7,7",
       -1,
       "",
       "",
       "db7292eea2a94121a601c69c70fe4c9ee0b19931e3253a5e00b90cb6d7e90e50",
       {"d773896e1e3924b08ab733150808fbbe6c00918341493bb46ab9500e8d75db12",
        "c7d02c362330344b30196f0b0e268d037ebdca4f5867c1f4f2ad26bcb90d9ab8",
        "2a2f41282da5e6cac1785a6978735ae312fefd9049fdfdd752f92760917a9963"}},
      {"shard-tp",
       "m",
       "s",
       4,
       "",
       "",
       "",
       "1,2,3,4,5,6,7,8",
       -1,
       "",
       "tp=1/2",
       "0552ed33e58a76ecd3283c23ac0d375631467cf4f88d5606390389febc2f2676",
       {"7982031064e9cf74efff88a016e94d3138f57971d945ff5d79e2d5be64941f7d",
        "a532a079157b9c962606fa431d5200a600b22951a3a7c3ecd361b248e4048e12"}},
      {"shard-tp-pp-cp",
       "tiny-model",
       "kvtier-layout-v1;bt=16;L0-1=attention:keys:F16[2,16,16],values:F16[2,16,16]",
       16,
       "",
       "",
       "",
       "1..35",
       -1,
       "",
       "tp=3/8;pp=0/2;cp=1/4",
       "009831137ee1c13fdb2671add5f8cadf74dd104f35bd17cc179f932d71b318d4",
       {"6abee6107f36cce2c378b8ae8428d089aa34920fe972c9a2b1c5944241d0ae10",
        "8bfb2d4120c943236a237fa25e79dc22fa5eca8da3fbb980dec9c8397d2fb0aa"}},
      {"shard-mla-pp",
       "m",
       "s",
       4,
       "74656e616e742d3432",
       "",
       "",
       "1,2,3,4,5,6,7,8",
       -1,
       "",
       "pp=1/4",
       "bc26cbdea3cdeab4d000a1ee893883f06671977c32d883c1e701a966cb5fc82d",
       {"7776ba985bdcbfb756cd7be7e58ed5eac70eacb33022ff12d99ea325dca1e2fa",
        "6aae6213d19a1922f114671a9bdd1491bd9485cd41860799567767fc97fe6909"}},
  };
  return v;
}

std::string FromHexString(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::vector<uint32_t> ParseTokens(std::string_view text) {
  std::vector<uint32_t> out;
  if (text.empty()) return out;
  if (size_t dots = text.find(".."); dots != std::string_view::npos) {
    uint64_t a = std::stoull(std::string(text.substr(0, dots)));
    uint64_t b = std::stoull(std::string(text.substr(dots + 2)));
    for (uint64_t t = a; t <= b; ++t) out.push_back(static_cast<uint32_t>(t));
    return out;
  }
  std::stringstream ss{std::string(text)};
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(static_cast<uint32_t>(std::stoull(item)));
  return out;
}

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

NamespaceOptions Options(const Vector& v) {
  NamespaceOptions o;
  o.model_id = v.model;
  o.layout_signature = v.signature;
  o.block_tokens = v.block_tokens;
  o.salt = FromHexString(v.salt_hex);
  o.adapter_id = v.adapter;
  o.extra = FromHexString(v.extra_hex);
  o.shard = v.shard;
  return o;
}

TEST(BlockKeyVectorsTest, MatchIndependentImplementation) {
  ASSERT_GE(Vectors().size(), 5u);
  for (const Vector& v : Vectors()) {
    SCOPED_TRACE(v.name);
    Result<KeyChain> chain = KeyChain::Create(Options(v));
    ASSERT_TRUE(chain.ok()) << chain.status().ToString();
    EXPECT_EQ(chain->ns().Hex(), v.ns);
    EXPECT_EQ(chain->block_tokens(), v.block_tokens);
    const std::vector<uint32_t> tokens = ParseTokens(v.tokens);
    const std::string block_extra = FromHexString(v.block_extra_hex);
    // Next() one block at a time, with the per-block extra where given.
    std::vector<std::string> got;
    BlockKey parent = chain->ns();
    for (size_t i = 0; (i + 1) * v.block_tokens <= tokens.size(); ++i) {
      std::span<const uint32_t> block(tokens.data() + i * v.block_tokens, v.block_tokens);
      parent = static_cast<int>(i) == v.block_extra_index
                   ? chain->Next(parent, block, AsBytes(block_extra))
                   : chain->Next(parent, block);
      got.push_back(parent.Hex());
    }
    EXPECT_THAT(
        got, ::testing::ElementsAreArray(std::vector<std::string>(v.keys.begin(), v.keys.end())));
    if (v.block_extra_index < 0) {
      std::vector<std::string> all;
      for (const BlockKey& k : chain->KeysFor(tokens)) all.push_back(k.Hex());
      EXPECT_EQ(all, got);
    }
  }
}

TEST(BlockKeyVectorsTest, DocsShowTheSameVectors) {
  const char* dir = std::getenv("KVTIER_SOURCE_DIR");
  std::ifstream in(std::string(dir ? dir : ".") + "/docs/block-key.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  ASSERT_FALSE(doc.empty()) << "docs/block-key.md not found (KVTIER_SOURCE_DIR)";
  for (const Vector& v : Vectors()) {
    SCOPED_TRACE(v.name);
    EXPECT_THAT(doc, HasSubstr(std::string(": ") + v.name + "\n"));
    EXPECT_THAT(doc, HasSubstr(std::string("namespace ") + v.ns + "\n"));
    for (size_t i = 0; i < v.keys.size(); ++i) {
      EXPECT_THAT(doc, HasSubstr("key[" + std::to_string(i) + "]    " + v.keys[i] + "\n"));
    }
  }
}

TEST(BlockKeyTest, HexRoundTrip) {
  BlockKey k;
  for (size_t i = 0; i < 32; ++i) k.bytes[i] = static_cast<uint8_t>(i * 8 + 7);
  EXPECT_EQ(k.Hex(), "070f171f272f373f474f575f676f777f878f979fa7afb7bfc7cfd7dfe7eff7ff");
  EXPECT_EQ(BlockKey::FromHex(k.Hex()), k);
  EXPECT_EQ(BlockKey::FromHex("070F171F272F373F474F575F676F777F878F979FA7AFB7BFC7CFD7DFE7EFF7FF"),
            k);
  EXPECT_EQ(BlockKey().Hex(), std::string(64, '0'));
  EXPECT_EQ(BlockKey::FromHex(std::string(64, '0')), BlockKey());
}

TEST(BlockKeyTest, FromHexRejectsBadInput) {
  const std::string good(64, 'a');
  std::vector<std::string> bad = {
      "",
      good.substr(1),
      good + "a",
      good + "aa",
      "0x" + good.substr(2),
      " " + good.substr(1),
      good.substr(1) + "\n",
      good.substr(1) + "g",
      good.substr(0, 10) + "-" + good.substr(11),
      good.substr(0, 31) + std::string(1, '\0') + good.substr(32),
      good.substr(0, 63) + "\xC3",
  };
  for (const std::string& s : bad) EXPECT_FALSE(BlockKey::FromHex(s).has_value()) << s;
}

TEST(BlockKeyTest, HashUsesTheFirstEightBytes) {
  BlockKey k;
  for (size_t i = 0; i < 32; ++i) k.bytes[i] = static_cast<uint8_t>(i + 1);
  uint64_t expected = 0;
  for (int i = 7; i >= 0; --i) expected = (expected << 8) | k.bytes[i];
  if constexpr (std::endian::native == std::endian::little) {
    EXPECT_EQ(BlockKeyHash()(k), static_cast<size_t>(expected));
  }
}

NamespaceOptions Basic() {
  NamespaceOptions o;
  o.model_id = "m";
  o.layout_signature = "s";
  o.block_tokens = 4;
  return o;
}

TEST(KeyChainTest, NextChainsEqualKeysFor) {
  KeyChain chain = *KeyChain::Create(Basic());
  std::vector<uint32_t> tokens(4 * 9 + 3);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 2654435761u);
  std::vector<BlockKey> keys = chain.KeysFor(tokens);
  ASSERT_EQ(keys.size(), 9u);
  BlockKey parent = chain.ns();
  for (size_t i = 0; i < keys.size(); ++i) {
    parent = chain.Next(parent, std::span<const uint32_t>(tokens).subspan(4 * i, 4));
    EXPECT_EQ(parent, keys[i]) << i;
  }
  // A prefix's keys are a prefix of the keys.
  std::vector<BlockKey> first = chain.KeysFor(std::span<const uint32_t>(tokens).first(13));
  ASSERT_EQ(first.size(), 3u);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), keys.begin()));
  // All distinct.
  std::set<BlockKey> distinct(keys.begin(), keys.end());
  distinct.insert(chain.ns());
  EXPECT_EQ(distinct.size(), 10u);
}

TEST(KeyChainTest, PartialBlocksGetNoKey) {
  KeyChain chain = *KeyChain::Create(Basic());
  std::vector<uint32_t> tokens = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(chain.KeysFor(tokens).size(), 1u);
  EXPECT_EQ(chain.KeysFor(std::span<const uint32_t>(tokens).first(3)).size(), 0u);
  EXPECT_EQ(chain.KeysFor({}).size(), 0u);
  EXPECT_EQ(chain.KeysFor(std::span<const uint32_t>(tokens).first(4)), chain.KeysFor(tokens));
}

TEST(KeyChainTest, EmptyExtraEqualsNoExtra) {
  KeyChain chain = *KeyChain::Create(Basic());
  std::vector<uint32_t> block = {9, 8, 7, 6};
  std::string extra = "img";
  EXPECT_EQ(chain.Next(chain.ns(), block, {}), chain.Next(chain.ns(), block));
  EXPECT_NE(chain.Next(chain.ns(), block, AsBytes(extra)), chain.Next(chain.ns(), block));
}

TEST(KeyChainTest, EveryInputChangesTheKey) {
  std::set<std::string> ns;
  std::vector<std::function<void(NamespaceOptions*)>> mutations = {
      [](NamespaceOptions*) {},
      [](NamespaceOptions* o) { o->model_id = "m2"; },
      [](NamespaceOptions* o) { o->layout_signature = "s2"; },
      [](NamespaceOptions* o) { o->block_tokens = 5; },
      [](NamespaceOptions* o) { o->salt = "t"; },
      [](NamespaceOptions* o) { o->adapter_id = "t"; },
      [](NamespaceOptions* o) { o->extra = "t"; },
      [](NamespaceOptions* o) { o->shard = "tp=0/2"; },
      [](NamespaceOptions* o) { o->shard = "tp=1/2"; },
      [](NamespaceOptions* o) { o->shard = "pp=0/2"; },
      // The same bytes as extra or as shard are different namespaces.
      [](NamespaceOptions* o) { o->extra = "tp=0/2"; },
      // Moving bytes between fields changes the TLV framing, hence the key.
      [](NamespaceOptions* o) {
        o->model_id = "ms";
        o->layout_signature = "x";
      },
      [](NamespaceOptions* o) {
        o->model_id = "m";
        o->layout_signature = "sx";
      },
      [](NamespaceOptions* o) { o->salt = std::string(1, '\0'); },
  };
  for (auto& mutate : mutations) {
    NamespaceOptions o = Basic();
    mutate(&o);
    EXPECT_TRUE(ns.insert(KeyChain::Create(o)->ns().Hex()).second);
  }
  KeyChain chain = *KeyChain::Create(Basic());
  std::set<BlockKey> keys;
  for (std::vector<uint32_t> block : {std::vector<uint32_t>{1, 2, 3, 4},
                                      {1, 2, 4, 3},
                                      {0, 0, 0, 0},
                                      {1, 2, 3, 5},
                                      {256, 0, 0, 0},
                                      {1, 0, 0, 0}}) {
    EXPECT_TRUE(keys.insert(chain.Next(chain.ns(), block)).second);
  }
  BlockKey other;
  other.bytes[0] = 1;
  EXPECT_TRUE(keys.insert(chain.Next(other, std::vector<uint32_t>{1, 2, 3, 4})).second);
}

TEST(KeyChainTest, CreateRejectsBadOptions) {
  struct Case {
    std::function<void(NamespaceOptions*)> mutate;
    const char* message;
  };
  const Case cases[] = {
      {[](NamespaceOptions* o) { o->model_id = ""; }, "model_id must not be empty"},
      {[](NamespaceOptions* o) { o->layout_signature = ""; }, "layout_signature must not be empty"},
      {[](NamespaceOptions* o) { o->block_tokens = 0; }, "block_tokens must be > 0"},
      {[](NamespaceOptions* o) { o->model_id = "a\xFF"; }, "model_id must be valid UTF-8"},
      {[](NamespaceOptions* o) { o->model_id = "\xED\xA0\x80"; }, "model_id must be valid UTF-8"},
      {[](NamespaceOptions* o) { o->layout_signature = "\xC0\x80"; },
       "layout_signature must be valid UTF-8"},
      {[](NamespaceOptions* o) { o->adapter_id = "\xF4\x90\x80\x80"; },
       "adapter_id must be valid UTF-8"},
      {[](NamespaceOptions* o) { o->adapter_id = "\xE2\x82"; }, "adapter_id must be valid UTF-8"},
  };
  for (const Case& c : cases) {
    NamespaceOptions o = Basic();
    c.mutate(&o);
    Result<KeyChain> chain = KeyChain::Create(o);
    ASSERT_FALSE(chain.ok()) << c.message;
    EXPECT_TRUE(chain.status().IsInvalidArgument());
    EXPECT_EQ(chain.status().message(), c.message);
  }
  // Binary salt and extra are fine; so is any valid UTF-8.
  NamespaceOptions o = Basic();
  o.salt = std::string("\0\xFF", 2);
  o.extra = "\xC0";
  o.model_id = "\xF0\x9F\x98\x80 \xE2\x82\xAC";
  EXPECT_TRUE(KeyChain::Create(o).ok());
}

TEST(ShardTest, AcceptsCanonicalForms) {
  for (const char* shard :
       {"", "tp=0/2", "tp=1/2", "pp=3/4", "cp=0/16", "tp=7/8;pp=1/2", "tp=0/2;cp=1/2",
        "pp=0/2;cp=1/3", "tp=3/8;pp=0/2;cp=1/4", "tp=4294967294/4294967295", "tp=10/11"}) {
    SCOPED_TRACE(shard);
    EXPECT_TRUE(ValidateShard(shard).ok()) << ValidateShard(shard).ToString();
    NamespaceOptions o = Basic();
    o.shard = shard;
    EXPECT_TRUE(KeyChain::Create(o).ok());
  }
}

TEST(ShardTest, RefusesNonCanonicalForms) {
  struct Case {
    const char* shard;
    const char* why;
  };
  const Case cases[] = {
      {"tp=0/1", "tp has size 1: leave it out"},
      {"tp=0/2;pp=0/1", "pp has size 1: leave it out"},
      {"tp=0/0", "tp has size 0"},
      {"tp=2/2", "tp: rank must be < size"},
      {"tp=5/2", "tp: rank must be < size"},
      {"tp=01/2", "without leading zeros"},
      {"tp=0/02", "without leading zeros"},
      {"tp=+1/2", "decimal numbers"},
      {"tp=-1/2", "decimal numbers"},
      {"tp= 1/2", "decimal numbers"},
      {"tp=1/2 ", "decimal numbers"},
      {"tp=0/4294967296", "below 2^32"},
      {"tp=0x1/2", "decimal numbers"},
      {"tp=1", "tp is not <rank>/<size>"},
      {"tp=/2", "decimal numbers"},
      {"tp=1/", "decimal numbers"},
      {"pp=0/2;tp=0/2", "in the order tp, pp, cp"},
      {"tp=0/2;tp=1/2", "in the order tp, pp, cp"},
      {"cp=0/2;pp=0/2", "in the order tp, pp, cp"},
      {"tp=0/2;", "a field has no '='"},
      {";tp=0/2", "a field has no '='"},
      {"tp=0/2;;pp=0/2", "a field has no '='"},
      {"tp=0/2,pp=0/2", "decimal numbers"},
      {"TP=0/2", "unknown field 'TP'"},
      {"ep=0/2", "unknown field 'ep'"},
      {"rank=0", "unknown field 'rank'"},
      {"tp", "a field has no '='"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shard);
    Status s = ValidateShard(c.shard);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(s.IsInvalidArgument());
    EXPECT_THAT(s.message(), HasSubstr(c.why));
    EXPECT_THAT(s.message(), HasSubstr(std::string("shard '") + c.shard + "'"));
    NamespaceOptions o = Basic();
    o.shard = c.shard;
    Result<KeyChain> chain = KeyChain::Create(o);
    ASSERT_FALSE(chain.ok());
    EXPECT_EQ(chain.status().message(), s.message());
  }
}

TEST(ShardTest, NoShardKeepsTheOldKeys) {
  // An empty shard adds no TLV: the vectors without a shard (computed before
  // the field existed) still hold, and "" equals the field being absent.
  NamespaceOptions a = Basic();
  NamespaceOptions b = Basic();
  b.shard = "";
  EXPECT_EQ(KeyChain::Create(a)->ns(), KeyChain::Create(b)->ns());
  b.shard = "tp=0/2";
  EXPECT_NE(KeyChain::Create(a)->ns(), KeyChain::Create(b)->ns());
}

TEST(KeyChainTest, PresetSignatureWorks) {
  NamespaceOptions o = Basic();
  o.layout_signature = ModelLayout::Preset("llama3-8b")->Signature();
  o.block_tokens = 256;
  KeyChain chain = *KeyChain::Create(o);
  std::vector<uint32_t> tokens(1000, 7);
  EXPECT_EQ(chain.KeysFor(tokens).size(), 3u);
}

}  // namespace
}  // namespace kvtier
