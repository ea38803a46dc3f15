#include "kvtier/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "kvtier/env.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(DTypeTest, SizesAndNames) {
  struct Row {
    DType dtype;
    const char* name;
    size_t size;
  };
  const Row rows[] = {
      {DType::kF16, "F16", 2},   {DType::kBF16, "BF16", 2},      {DType::kF32, "F32", 4},
      {DType::kF64, "F64", 8},   {DType::kI8, "I8", 1},          {DType::kI16, "I16", 2},
      {DType::kI32, "I32", 4},   {DType::kI64, "I64", 8},        {DType::kU8, "U8", 1},
      {DType::kU16, "U16", 2},   {DType::kU32, "U32", 4},        {DType::kU64, "U64", 8},
      {DType::kBool, "BOOL", 1}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(DTypeSize(r.dtype), r.size) << r.name;
    EXPECT_EQ(DTypeName(r.dtype), r.name);
    ASSERT_TRUE(DTypeFromName(r.name).has_value()) << r.name;
    EXPECT_EQ(*DTypeFromName(r.name), r.dtype);
  }
  for (const char* bad : {"", "f16", "Bf16", "F8E4M3", "F16 ", "bool", "FLOAT"}) {
    EXPECT_FALSE(DTypeFromName(bad).has_value()) << bad;
  }
  EXPECT_EQ(DTypeSize(static_cast<DType>(99)), 0u);
}

TEST(LayoutPresetTest, BlockBytesExactly) {
  struct Row {
    const char* name;
    uint64_t bytes;
    size_t tensors;
    uint32_t block_tokens;
  };
  // gpt-oss-20b: 24 × 2 × 8·256·64·2; qwen3-next-80b: 12 × 2 × 2·256·256·2 +
  // 36 × (8192·3·2 + 32·128·128·2); llama3-8b-q4: 32 × 2 × (8·256·16·4 + 2 · 8·256·2·2).
  for (const Row& r :
       {Row{"tiny", 4096, 4, 16}, Row{"qwen2.5-0.5b", 3145728, 48, 256},
        Row{"llama3-8b", 33554432, 64, 256}, Row{"gpt-oss-20b", 12582912, 48, 256},
        Row{"qwen3-next-80b", 45809664, 96, 256}, Row{"llama3-8b-q4", 9437184, 192, 256}}) {
    Result<ModelLayout> l = ModelLayout::Preset(r.name);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ(l->BlockBytes(), r.bytes) << r.name;
    EXPECT_EQ(l->TensorCount(), r.tensors) << r.name;
    EXPECT_EQ(l->block_tokens, r.block_tokens) << r.name;
    EXPECT_EQ(l->name, r.name);
    EXPECT_TRUE(l->Validate().ok());
  }
  EXPECT_THAT(ModelLayout::PresetNames(),
              ::testing::ElementsAre("tiny", "qwen2.5-0.5b", "llama3-8b", "gpt-oss-20b",
                                     "qwen3-next-80b", "llama3-8b-q4"));
}

TEST(LayoutPresetTest, MixedKindsExactSignatures) {
  EXPECT_EQ(ModelLayout::Preset("gpt-oss-20b", 16)->Signature(),
            "kvtier-layout-v1;bt=16;"
            "L0=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L1=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L2=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L3=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L4=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L5=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L6=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L7=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L8=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L9=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L10=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L11=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L12=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L13=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L14=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L15=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L16=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L17=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L18=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L19=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L20=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L21=attention:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L22=sliding_window{window=128}:keys:BF16[8,16,64],values:BF16[8,16,64];"
            "L23=attention:keys:BF16[8,16,64],values:BF16[8,16,64]");
  EXPECT_EQ(ModelLayout::Preset("llama3-8b-q4")->Signature(),
            "kvtier-layout-v1;bt=256;L0-31=quantized_attention{quant=affine,bits=4,group=64}:"
            "keys:U32[8,256,16],key_scales:BF16[8,256,2],key_biases:BF16[8,256,2],"
            "values:U32[8,256,16],value_scales:BF16[8,256,2],value_biases:BF16[8,256,2]");
  ModelLayout next = *ModelLayout::Preset("qwen3-next-80b", 64);
  ASSERT_EQ(next.layers.size(), 48u);
  for (size_t i = 0; i < next.layers.size(); ++i) {
    EXPECT_EQ(next.layers[i].IsRecurrent(), i % 4 != 3) << i;
  }
  EXPECT_EQ(next.layers[0].states[0].shape, (std::vector<uint64_t>{8192, 3}));
  EXPECT_EQ(next.layers[0].states[1].shape, (std::vector<uint64_t>{32, 128, 128}));
  EXPECT_EQ(next.layers[3].states[0].shape, (std::vector<uint64_t>{2, 64, 256}));
  EXPECT_THAT(next.Signature(),
              StartsWith("kvtier-layout-v1;bt=64;L0-2=linear_attention:conv:BF16[8192,3],"
                         "recurrent:BF16[32,128,128];L3=attention:keys:BF16[2,64,256],"
                         "values:BF16[2,64,256];L4-6=linear_attention:"));
  // The recurrent state does not grow with block_tokens; K/V do.
  EXPECT_EQ(ModelLayout::Preset("qwen3-next-80b", 512)->BlockBytes() - next.BlockBytes(),
            12u * 2 * 2 * (512 - 64) * 256 * 2);
}

TEST(LayoutPresetTest, ShapesAreHeadsTokensHeadDim) {
  ModelLayout l = *ModelLayout::Preset("llama3-8b");
  ASSERT_EQ(l.layers.size(), 32u);
  for (const LayerSpec& layer : l.layers) {
    EXPECT_EQ(layer.cache_type, "attention");
    ASSERT_EQ(layer.states.size(), 2u);
    EXPECT_EQ(layer.states[0].role, "keys");
    EXPECT_EQ(layer.states[1].role, "values");
    for (const TensorSpec& t : layer.states) {
      EXPECT_EQ(t.dtype, DType::kBF16);
      EXPECT_EQ(t.shape, (std::vector<uint64_t>{8, 256, 128}));
      EXPECT_EQ(t.token_dim, 1);
      EXPECT_EQ(t.ByteSize(), 524288u);
    }
  }
}

TEST(LayoutPresetTest, BlockTokensOverrideChangesTokenDimension) {
  ModelLayout l = *ModelLayout::Preset("tiny", 32);
  EXPECT_EQ(l.block_tokens, 32u);
  EXPECT_EQ(l.BlockBytes(), 8192u);
  EXPECT_EQ(l.layers[1].states[1].shape, (std::vector<uint64_t>{2, 32, 16}));
  EXPECT_EQ(ModelLayout::Preset("qwen2.5-0.5b", 16)->BlockBytes(), 3145728u / 16);
  EXPECT_EQ(*ModelLayout::Preset("tiny", 16), *ModelLayout::Preset("tiny"));
}

TEST(LayoutPresetTest, UnknownPresetAndTooLargeOverride) {
  Result<ModelLayout> l = ModelLayout::Preset("llama3-70b");
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(l.status().IsInvalidArgument());
  EXPECT_THAT(l.status().message(), HasSubstr("unknown layout preset 'llama3-70b'"));
  EXPECT_THAT(l.status().message(), HasSubstr("tiny, qwen2.5-0.5b, llama3-8b"));
  // 33554432 / 256 bytes per token: 4 GiB is reached at 32768 tokens.
  EXPECT_TRUE(ModelLayout::Preset("llama3-8b", 32768).ok());
  Result<ModelLayout> big = ModelLayout::Preset("llama3-8b", 32769);
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(big.status().IsInvalidArgument());
  EXPECT_THAT(big.status().message(), HasSubstr("4 GiB"));
}

TEST(LayoutSignatureTest, ExactForm) {
  EXPECT_EQ(ModelLayout::Preset("tiny")->Signature(),
            "kvtier-layout-v1;bt=16;L0-1=attention:keys:F16[2,16,16],values:F16[2,16,16]");
  EXPECT_EQ(ModelLayout::Preset("llama3-8b")->Signature(),
            "kvtier-layout-v1;bt=256;L0-31=attention:keys:BF16[8,256,128],"
            "values:BF16[8,256,128]");
  ModelLayout one = ModelLayout::Attention("x", 1, 1, 4, DType::kF8E4M3, 8);
  EXPECT_EQ(one.Signature(),
            "kvtier-layout-v1;bt=8;L0=attention:keys:F8_E4M3[1,8,4],"
            "values:F8_E4M3[1,8,4]");
}

// A small layout with every kind of layer, for mutation tests.
ModelLayout Hybrid() {
  ModelLayout l = ModelLayout::Attention("hybrid", 3, 2, 8, DType::kF16, 4);
  l.layers[1].cache_type = "sliding_window";
  l.layers[1].meta_state = {"window=64"};
  LayerSpec mamba;
  mamba.cache_type = "mamba";
  mamba.states = {TensorSpec{"conv", DType::kBF16, {3, 32}, -1},
                  TensorSpec{"ssm", DType::kF32, {4, 8, 16}, -1}};
  l.layers.push_back(mamba);
  return l;
}

TEST(LayoutSignatureTest, HybridExactForm) {
  EXPECT_EQ(Hybrid().Signature(),
            "kvtier-layout-v1;bt=4;L0=attention:keys:F16[2,4,8],values:F16[2,4,8];"
            "L1=sliding_window:keys:F16[2,4,8],values:F16[2,4,8];"
            "L2=attention:keys:F16[2,4,8],values:F16[2,4,8];"
            "L3=mamba:conv:BF16[3,32],ssm:F32[4,8,16]");
}

TEST(LayoutSignatureTest, DeterministicAndIndependentOfNameMetaAndTokenDim) {
  const std::string base = Hybrid().Signature();
  EXPECT_EQ(Hybrid().Signature(), base);
  ModelLayout l = Hybrid();
  l.name = "another name";
  l.layers[1].meta_state = {"window=4096", "keep=4"};
  l.layers[0].meta_state = {"x"};
  l.layers[0].states[0].token_dim = -1;
  EXPECT_EQ(l.Signature(), base);
}

TEST(LayoutSignatureTest, EveryChangeToBytesChangesIt) {
  std::vector<std::pair<std::string, std::function<void(ModelLayout*)>>> mutations = {
      {"dtype", [](ModelLayout* l) { l->layers[2].states[1].dtype = DType::kBF16; }},
      {"dtype same size", [](ModelLayout* l) { l->layers[3].states[1].dtype = DType::kI32; }},
      {"shape value", [](ModelLayout* l) { l->layers[3].states[0].shape[1] = 33; }},
      {"shape transposed",
       [](ModelLayout* l) {
         l->layers[3].states[0].shape = {32, 3};
       }},
      {"shape rank",
       [](ModelLayout* l) {
         l->layers[3].states[0].shape = {3, 32, 1};
       }},
      {"state order",
       [](ModelLayout* l) { std::swap(l->layers[0].states[0], l->layers[0].states[1]); }},
      {"layer order", [](ModelLayout* l) { std::swap(l->layers[1], l->layers[2]); }},
      {"layer order 2", [](ModelLayout* l) { std::swap(l->layers[2], l->layers[3]); }},
      {"role", [](ModelLayout* l) { l->layers[0].states[0].role = "k"; }},
      {"cache type", [](ModelLayout* l) { l->layers[3].cache_type = "mamba2"; }},
      {"block tokens", [](ModelLayout* l) { l->block_tokens = 5; }},
      {"extra layer", [](ModelLayout* l) { l->layers.push_back(l->layers[3]); }},
      {"drop layer", [](ModelLayout* l) { l->layers.pop_back(); }},
      {"drop state", [](ModelLayout* l) { l->layers[3].states.pop_back(); }},
      {"sliding->attention", [](ModelLayout* l) { l->layers[1].cache_type = "attention"; }},
  };
  std::set<std::string> seen = {Hybrid().Signature()};
  for (auto& [what, mutate] : mutations) {
    ModelLayout l = Hybrid();
    mutate(&l);
    EXPECT_TRUE(seen.insert(l.Signature()).second) << what << ": " << l.Signature();
  }
  // Runs: three equal layers, and the same with the middle one different.
  ModelLayout a = ModelLayout::Attention("a", 3, 1, 2, DType::kF16, 2);
  ModelLayout b = a;
  b.layers[1].states[0].shape[0] = 2;
  EXPECT_EQ(a.Signature(),
            "kvtier-layout-v1;bt=2;L0-2=attention:keys:F16[1,2,2],values:F16[1,2,2]");
  EXPECT_EQ(b.Signature(),
            "kvtier-layout-v1;bt=2;L0=attention:keys:F16[1,2,2],values:F16[1,2,2];"
            "L1=attention:keys:F16[2,2,2],values:F16[1,2,2];"
            "L2=attention:keys:F16[1,2,2],values:F16[1,2,2]");
}

TEST(LayoutSignatureTest, WindowAndQuantizationAreSigned) {
  const ModelLayout base = Hybrid();
  ModelLayout w = base;
  w.layers[1].window = 512;
  ModelLayout w2 = base;
  w2.layers[1].window = 1024;
  EXPECT_NE(w.Signature(), base.Signature());
  EXPECT_NE(w.Signature(), w2.Signature());
  EXPECT_THAT(w.Signature(), HasSubstr(";L1=sliding_window{window=512}:keys:F16[2,4,8],"));
  // Two quantization schemes with equal tensor shapes: 4-bit affine and
  // 4-bit mxfp4 with group 32 (same packed width), and the bits alone.
  ModelLayout q = base;
  q.layers[2].quantization = Quantization{4, 64, "affine"};
  ModelLayout q_mode = base;
  q_mode.layers[2].quantization = Quantization{4, 64, "mxfp4"};
  ModelLayout q_group = base;
  q_group.layers[2].quantization = Quantization{4, 32, "affine"};
  ModelLayout q_bits = base;
  q_bits.layers[2].quantization = Quantization{8, 64, "affine"};
  std::set<std::string> seen;
  const std::vector<const ModelLayout*> all = {&base, &w, &w2, &q, &q_mode, &q_group, &q_bits};
  for (const ModelLayout* l : all) {
    EXPECT_EQ(l->BlockBytes(), base.BlockBytes());
    EXPECT_TRUE(l->Validate().ok()) << l->Validate().ToString();
    EXPECT_TRUE(seen.insert(l->Signature()).second) << l->Signature();
  }
  EXPECT_THAT(q.Signature(), HasSubstr(";L2=attention{quant=affine,bits=4,group=64}:keys:"));
  ModelLayout both = w;
  both.layers[1].quantization = Quantization{2, 16, "affine"};
  EXPECT_THAT(both.Signature(),
              HasSubstr(";L1=sliding_window{window=512,quant=affine,bits=2,group=16}:keys:"));
  // A run of layers only merges when windows and quantizations are equal.
  ModelLayout run = ModelLayout::Attention("r", 2, 1, 2, DType::kF16, 2);
  run.layers[1].window = 8;
  EXPECT_EQ(run.Signature(),
            "kvtier-layout-v1;bt=2;L0=attention:keys:F16[1,2,2],values:F16[1,2,2];"
            "L1=attention{window=8}:keys:F16[1,2,2],values:F16[1,2,2]");
}

TEST(LayoutValidateTest, WindowAndQuantizationRules) {
  struct Case {
    const char* message;
    std::function<void(ModelLayout*)> mutate;
  };
  const Case cases[] = {
      {"layers[3].window needs a per-token state",
       [](ModelLayout* l) { l->layers[3].window = 16; }},
      {"layers[0].quantization.bits must be in 1..8, got 0",
       [](ModelLayout* l) { l->layers[0].quantization.mode = "affine"; }},
      {"layers[0].quantization.bits must be in 1..8, got 9",
       [](ModelLayout* l) {
         l->layers[0].quantization = Quantization{9, 64, "affine"};
       }},
      {"layers[0].quantization.group_size must be in 1..65536, got 0",
       [](ModelLayout* l) {
         l->layers[0].quantization = Quantization{4, 0, "affine"};
       }},
      {"layers[0].quantization.mode must be a non-empty string",
       [](ModelLayout* l) {
         l->layers[0].quantization = Quantization{4, 64, "af fine"};
       }},
  };
  for (const Case& c : cases) {
    ModelLayout l = Hybrid();
    c.mutate(&l);
    Status s = l.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  // A layer mixing per-token and constant-size states is a per-token layer,
  // so it may have a window.
  ModelLayout mixed = Hybrid();
  mixed.layers[0].states.push_back(TensorSpec{"offset", DType::kI32, {1}, -1});
  mixed.layers[0].window = 4;
  EXPECT_TRUE(mixed.Validate().ok()) << mixed.Validate().ToString();
  EXPECT_FALSE(mixed.layers[0].IsRecurrent());
  EXPECT_TRUE(Hybrid().layers[3].IsRecurrent());
}

TEST(LayoutJsonTest, WindowAndQuantizationFields) {
  Result<ModelLayout> l = ModelLayout::FromJson(R"({"block_tokens": 2, "layers": [
      {"cache_type": "sliding_window", "window": 4096,
       "states": [{"role": "keys", "dtype": "F16", "shape": [1, "T", 2]}]},
      {"cache_type": "quantized_attention",
       "quantization": {"mode": "affine", "bits": 4, "group_size": 64},
       "states": [{"role": "keys", "dtype": "U32", "shape": [1, "T", 2]}]}]})");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->layers[0].window, 4096u);
  EXPECT_EQ(l->layers[1].quantization, (Quantization{4, 64, "affine"}));
  EXPECT_EQ(l->Signature(),
            "kvtier-layout-v1;bt=2;L0=sliding_window{window=4096}:keys:F16[1,2,2];"
            "L1=quantized_attention{quant=affine,bits=4,group=64}:keys:U32[1,2,2]");
  EXPECT_THAT(l->ToJson(), HasSubstr("{\"cache_type\": \"sliding_window\", \"window\": 4096, "
                                     "\"states\": ["));
  EXPECT_THAT(l->ToJson(), HasSubstr("\"quantization\": {\"mode\": \"affine\", \"bits\": 4, "
                                     "\"group_size\": 64}"));
  EXPECT_EQ(*ModelLayout::FromJson(l->ToJson()), *l);
  const std::string kState = R"("states": [{"role": "k", "dtype": "F16", "shape": [1, "T"]}])";
  struct Bad {
    std::string layer;
    const char* message;
  };
  const Bad bad[] = {
      {R"("window": 0, )", "layers[0].window: must be an integer in 1..4294967295, got 0"},
      {R"("window": "128", )", "layers[0].window: must be an integer"},
      {R"("quantization": 4, )", "layers[0].quantization: must be an object"},
      {R"("quantization": {"mode": "affine", "bits": 4}, )",
       "layers[0].quantization: missing required field 'group_size'"},
      {R"("quantization": {"mode": "affine", "bits": 16, "group_size": 64}, )",
       "layers[0].quantization.bits: must be an integer in 1..8, got 16"},
      {R"("quantization": {"mode": "affine", "bits": 4, "group_size": 64, "x": 1}, )",
       "layers[0].quantization: unknown field 'x'"},
      {R"("quantization": {"mode": "", "bits": 4, "group_size": 64}, )",
       "layers[0].quantization.mode must be a non-empty string"},
  };
  for (const Bad& b : bad) {
    const std::string doc =
        R"({"block_tokens": 2, "layers": [{"cache_type": "a", )" + b.layer + kState + "}]}";
    Result<ModelLayout> r = ModelLayout::FromJson(doc);
    ASSERT_FALSE(r.ok()) << doc;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_THAT(r.status().message(), HasSubstr(b.message)) << doc;
  }
  // A window on a recurrent layer.
  Result<ModelLayout> r = ModelLayout::FromJson(
      R"({"block_tokens": 2, "layers": [{"cache_type": "mamba", "window": 8,
          "states": [{"role": "ssm", "dtype": "F32", "shape": [2, 3]}]}]})");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("layers[0].window needs a per-token state"));
}

TEST(LayoutValidateTest, NamesTheBadField) {
  struct Case {
    const char* message;
    std::function<void(ModelLayout*)> mutate;
  };
  const Case cases[] = {
      {"block_tokens must be > 0", [](ModelLayout* l) { l->block_tokens = 0; }},
      {"layers must list at least one layer", [](ModelLayout* l) { l->layers.clear(); }},
      {"layers[2].states must list at least one state tensor",
       [](ModelLayout* l) { l->layers[2].states.clear(); }},
      {"layers[3].states[1].shape[2] must be > 0",
       [](ModelLayout* l) { l->layers[3].states[1].shape[2] = 0; }},
      {"layers[3].states[0].shape must have 1 to 8 dimensions, got 0",
       [](ModelLayout* l) { l->layers[3].states[0].shape.clear(); }},
      {"layers[3].states[0].shape must have 1 to 8 dimensions, got 9",
       [](ModelLayout* l) { l->layers[3].states[0].shape.assign(9, 1); }},
      {"layers[0].states[1].role must be a non-empty string of [A-Za-z0-9_.-]",
       [](ModelLayout* l) { l->layers[0].states[1].role = "val ues"; }},
      {"layers[0].states[0].role must be a non-empty string",
       [](ModelLayout* l) { l->layers[0].states[0].role = ""; }},
      {"layers[0].states[0].role must be a non-empty string",
       [](ModelLayout* l) { l->layers[0].states[0].role = std::string(65, 'k'); }},
      {"layers[0].states[1].role 'keys' repeats layers[0].states[0].role",
       [](ModelLayout* l) { l->layers[0].states[1].role = "keys"; }},
      {"layers[1].cache_type must be a non-empty string",
       [](ModelLayout* l) { l->layers[1].cache_type = "sliding;window"; }},
      {"layers[2].states[0].dtype is not a known dtype (value 42)",
       [](ModelLayout* l) { l->layers[2].states[0].dtype = static_cast<DType>(42); }},
      {"layers[0].states[0].shape[1] is the token dimension and must equal block_tokens (4), got 5",
       [](ModelLayout* l) { l->layers[0].states[0].shape[1] = 5; }},
      {"layers[3].states[0].token_dim must be -1 or a dimension index below 2, got 2",
       [](ModelLayout* l) { l->layers[3].states[0].token_dim = 2; }},
      {"layers[1].meta_state[0] must be UTF-8 of at most 1024 bytes",
       [](ModelLayout* l) { l->layers[1].meta_state = {"\xC0\xAF"}; }},
      {"layers[1].meta_state[1] must be UTF-8 of at most 1024 bytes",
       [](ModelLayout* l) {
         l->layers[1].meta_state = {"a", std::string(1025, 'a')};
       }},
      {"layers[3].states[1].shape: the tensor's byte size exceeds the 4 GiB block limit",
       [](ModelLayout* l) {
         l->layers[3].states[1].shape = {1u << 20, 1u << 20, 1u << 30};
       }},
      {"layers[3].states[1].shape: the tensor's byte size exceeds the 4 GiB block limit",
       [](ModelLayout* l) { l->layers[3].states[1].shape = {UINT64_MAX}; }},
      {"layers[3].states: the layer's byte size exceeds the 4 GiB block limit",
       [](ModelLayout* l) {
         l->layers[3].states[0] = {"a", DType::kU8, {1ull << 31}, -1};
         l->layers[3].states[1] = {"b", DType::kU8, {(1ull << 31) + 1}, -1};
       }},
      {"layers: the block's byte size exceeds the 4 GiB limit (reached at layers[3])",
       [](ModelLayout* l) {
         l->layers[3].states = {{"a", DType::kU8, {1ull << 32}, -1}};
       }},
      {"layers has 4097 entries; at most 4096 allowed",
       [](ModelLayout* l) { l->layers.resize(4097, l->layers[0]); }},
      {"layers: more than 4096 state tensors in all (reached at layers[2048])",
       [](ModelLayout* l) { l->layers.resize(2049, l->layers[0]); }},
  };
  ASSERT_TRUE(Hybrid().Validate().ok()) << Hybrid().Validate().ToString();
  for (const Case& c : cases) {
    ModelLayout l = Hybrid();
    c.mutate(&l);
    Status s = l.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << c.message << " -> " << s.ToString();
    EXPECT_THAT(s.message(), StartsWith(c.message));
  }
}

TEST(LayoutValidateTest, ExactlyFourGiBIsAllowed) {
  ModelLayout l = Hybrid();
  l.layers[3].states = {{"a", DType::kU8, {1ull << 30}, -1}};
  l.layers.resize(1);
  l.layers[0].states = {{"x", DType::kF32, {1ull << 30}, -1}};
  EXPECT_EQ(l.BlockBytes(), 1ull << 32);
  EXPECT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  l.layers[0].states[0].shape[0] += 1;
  EXPECT_THAT(l.Validate(), StatusIs(StatusCode::kInvalidArgument));
}

TEST(LayoutTest, WithBlockTokensScalesOnlyTokenDimensions) {
  Result<ModelLayout> l = Hybrid().WithBlockTokens(16);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->block_tokens, 16u);
  EXPECT_EQ(l->layers[0].states[0].shape, (std::vector<uint64_t>{2, 16, 8}));
  EXPECT_EQ(l->layers[1].states[1].shape, (std::vector<uint64_t>{2, 16, 8}));
  EXPECT_EQ(l->layers[3].states[0].shape, (std::vector<uint64_t>{3, 32}));
  EXPECT_EQ(l->layers[3].states[1].shape, (std::vector<uint64_t>{4, 8, 16}));
  EXPECT_EQ(l->BlockBytes(), 3 * 2 * (2 * 16 * 8 * 2) + 3 * 32 * 2 + 4 * 8 * 16 * 4);
  EXPECT_EQ(*Hybrid().WithBlockTokens(0), Hybrid());
  EXPECT_EQ(*Hybrid().WithBlockTokens(4), Hybrid());
  EXPECT_EQ(*ModelLayout::Preset("tiny")->WithBlockTokens(48), *ModelLayout::Preset("tiny", 48));
}

TEST(LayoutJsonTest, RoundTrip) {
  std::vector<ModelLayout> layouts = {Hybrid(), *ModelLayout::Preset("tiny"),
                                      *ModelLayout::Preset("qwen2.5-0.5b"),
                                      *ModelLayout::Preset("llama3-8b", 64)};
  for (const char* name : {"gpt-oss-20b", "qwen3-next-80b", "llama3-8b-q4"}) {
    layouts.push_back(*ModelLayout::Preset(name, 32));
  }
  ModelLayout odd = Hybrid();
  odd.name = "na\"me\n\xC3\xA9";
  odd.layers[2].meta_state = {"", "a\\b", "\xE2\x82\xAC"};
  odd.layers[0].states[1].token_dim = -1;  // a token-sized dim that is not marked
  layouts.push_back(odd);
  for (const ModelLayout& l : layouts) {
    const std::string text = l.ToJson();
    Result<ModelLayout> back = ModelLayout::FromJson(text);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
    EXPECT_EQ(*back, l) << text;
    EXPECT_EQ(back->Signature(), l.Signature());
    EXPECT_EQ(back->ToJson(), text);
  }
}

TEST(LayoutJsonTest, ToJsonForm) {
  EXPECT_EQ(ModelLayout::Preset("tiny")->ToJson(),
            "{\n"
            "  \"name\": \"tiny\",\n"
            "  \"block_tokens\": 16,\n"
            "  \"layers\": [\n"
            "    {\"repeat\": 2, \"cache_type\": \"attention\", \"states\": [\n"
            "      {\"role\": \"keys\", \"dtype\": \"F16\", \"shape\": [2, \"T\", 16]},\n"
            "      {\"role\": \"values\", \"dtype\": \"F16\", \"shape\": [2, \"T\", 16]}\n"
            "    ]}\n"
            "  ]\n"
            "}\n");
}

TEST(LayoutJsonTest, MinimalAndDefaults) {
  Result<ModelLayout> l = ModelLayout::FromJson(
      R"({"block_tokens": 4, "layers": [{"cache_type": "mamba",
          "states": [{"role": "ssm", "dtype": "F32", "shape": [2, 3]}]}]})");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->name, "");
  EXPECT_EQ(l->block_tokens, 4u);
  ASSERT_EQ(l->layers.size(), 1u);
  EXPECT_TRUE(l->layers[0].meta_state.empty());
  EXPECT_EQ(l->layers[0].states[0].token_dim, -1);
  EXPECT_EQ(l->BlockBytes(), 24u);
  EXPECT_EQ(l->Signature(), "kvtier-layout-v1;bt=4;L0=mamba:ssm:F32[2,3]");
}

// Each malformed document must give InvalidArgument naming the field.
TEST(LayoutJsonTest, MalformedIsInvalidArgumentNamingTheField) {
  const std::string kState = R"({"role": "keys", "dtype": "F16", "shape": [2, "T", 4]})";
  auto doc = [&](const std::string& layer_fields, const std::string& top = "\"block_tokens\": 4") {
    return "{" + top + ", \"layers\": [{" + layer_fields + "}]}";
  };
  auto with_state = [&](const std::string& state) {
    return doc("\"cache_type\": \"attention\", \"states\": [" + state + "]");
  };
  struct Case {
    std::string json;
    std::string message;  // expected substring
  };
  const std::vector<Case> cases = {
      {"", "layout JSON: not valid JSON: parse error at line 1, column 1: syntax error"},
      {"{", "layout JSON: not valid JSON"},
      {"[1, 2]", "layout JSON: (top level): must be an object, got array"},
      {"{\"block_tokens\": 4, \"layers\": []} x", "layout JSON: not valid JSON"},
      {"{\"block_tokens\": 4, /* c */ \"layers\": []}", "layout JSON: not valid JSON"},
      {"{\"layers\": []}", "layout JSON: (top level): missing required field 'block_tokens'"},
      {"{\"block_tokens\": 4}", "layout JSON: (top level): missing required field 'layers'"},
      {"{\"block_tokens\": 4, \"layers\": [], \"blocktokens\": 4}",
       "layout JSON: (top level): unknown field 'blocktokens' (allowed: name, block_tokens, "
       "layers)"},
      {"{\"block_tokens\": 4, \"block_tokens\": 8, \"layers\": []}",
       "layout JSON: duplicate key 'block_tokens'"},
      {"{\"name\": 5, \"block_tokens\": 4, \"layers\": []}", "layout JSON: name: must be a string"},
      {"{\"block_tokens\": 0, \"layers\": []}",
       "layout JSON: block_tokens: must be an integer in 1..4294967295, got 0"},
      {"{\"block_tokens\": -4, \"layers\": []}",
       "layout JSON: block_tokens: must be an integer in "
       "1..4294967295, got a negative integer -4"},
      {"{\"block_tokens\": 4.5, \"layers\": []}",
       "block_tokens: must be an integer in "
       "1..4294967295, got a fractional number 4.5"},
      {"{\"block_tokens\": 4.0, \"layers\": []}", "block_tokens: must be an integer"},
      {"{\"block_tokens\": 4294967296, \"layers\": []}",
       "block_tokens: must be an integer in 1..4294967295, got 4294967296"},
      {"{\"block_tokens\": \"4\", \"layers\": []}",
       "block_tokens: must be an integer in "
       "1..4294967295, got string \"4\""},
      {"{\"block_tokens\": 4, \"layers\": {}}",
       "layout JSON: layers: must be an array, got object"},
      {"{\"block_tokens\": 4, \"layers\": []}",
       "layout JSON: layers: must list at least one layer"},
      {"{\"block_tokens\": 4, \"layers\": [7]}",
       "layout JSON: layers[0]: must be an object, got a non-negative integer"},
      {doc("\"states\": [" + kState + "]"),
       "layout JSON: layers[0]: missing required field 'cache_type'"},
      {doc("\"cache_type\": \"attention\""), "layers[0]: missing required field 'states'"},
      {doc("\"cache_type\": \"attention\", \"states\": [" + kState + "], \"kind\": 1"),
       "layers[0]: unknown field 'kind' (allowed: cache_type, states, meta_state, repeat, window, "
       "quantization)"},
      {doc("\"cache_type\": 3, \"states\": []"), "layers[0].cache_type: must be a string"},
      {doc("\"cache_type\": \"a b\", \"states\": [" + kState + "]"),
       "layout JSON: layers[0].cache_type must be a non-empty string of [A-Za-z0-9_.-]"},
      {doc("\"cache_type\": \"attention\", \"states\": []"),
       "layout JSON: layers[0].states must list at least one state tensor"},
      {doc("\"cache_type\": \"attention\", \"states\": {}"),
       "layers[0].states: must be an array, got object"},
      {doc("\"cache_type\": \"attention\", \"states\": [" + kState + "], \"repeat\": 0"),
       "layers[0].repeat: must be an integer in 1..4096, got 0"},
      {doc("\"cache_type\": \"attention\", \"states\": [" + kState + "], \"repeat\": 1.5"),
       "layers[0].repeat: must be an integer in 1..4096, got a fractional number"},
      {doc("\"cache_type\": \"attention\", \"states\": [" + kState + "], \"repeat\": 4097"),
       "layers[0].repeat: must be an integer in 1..4096, got 4097"},
      {"{\"block_tokens\": 4, \"layers\": [{\"repeat\": 4000, \"cache_type\": \"a\", \"states\": "
       "[" +
           kState + "]}, {\"repeat\": 97, \"cache_type\": \"a\", \"states\": [" + kState + "]}]}",
       "layout JSON: layers[1]: the model has more than 4096 layers with this entry"},
      {doc("\"cache_type\": \"attention\", \"states\": [" + kState + "], \"meta_state\": \"w\""),
       "layers[0].meta_state: must be an array of strings, got string"},
      {doc("\"cache_type\": \"attention\", \"states\": [" + kState +
           "], \"meta_state\": [\"a\", 4]"),
       "layers[0].meta_state[1]: must be a string, got a non-negative integer"},
      {with_state("[]"), "layers[0].states[0]: must be an object, got array"},
      {with_state(R"({"dtype": "F16", "shape": [1]})"),
       "layers[0].states[0]: missing required field 'role'"},
      {with_state(R"({"role": "k", "shape": [1]})"),
       "layers[0].states[0]: missing required field 'dtype'"},
      {with_state(R"({"role": "k", "dtype": "F16"})"),
       "layers[0].states[0]: missing required field 'shape'"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": [1], "stride": [1]})"),
       "layers[0].states[0]: unknown field 'stride' (allowed: role, dtype, shape)"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": [1], "role": "v"})"),
       "layout JSON: duplicate key 'role'"},
      {with_state(R"({"role": ["k"], "dtype": "F16", "shape": [1]})"),
       "layers[0].states[0].role: must be a string, got array"},
      {with_state(R"({"role": "k/v", "dtype": "F16", "shape": [1]})"),
       "layout JSON: layers[0].states[0].role must be a non-empty string of [A-Za-z0-9_.-]"},
      {with_state(R"({"role": "k", "dtype": "F17", "shape": [1]})"),
       "layers[0].states[0].dtype: unknown dtype 'F17' (known: F16, BF16"},
      {with_state(R"({"role": "k", "dtype": "f16", "shape": [1]})"),
       "layers[0].states[0].dtype: unknown dtype 'f16'"},
      {with_state(R"({"role": "k", "dtype": 2, "shape": [1]})"),
       "layers[0].states[0].dtype: must be a string"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": 4})"),
       "layers[0].states[0].shape: must be an array, got a non-negative integer"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": []})"),
       "layers[0].states[0].shape: must have 1 to 8 dimensions, got 0"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": [1,1,1,1,1,1,1,1,1]})"),
       "layers[0].states[0].shape: must have 1 to 8 dimensions, got 9"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": [2, -3]})"),
       "layers[0].states[0].shape[1]: must be a positive integer or \"T\" (block_tokens), got a "
       "negative integer -3"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": [2, 0]})"),
       "layers[0].states[0].shape[1]: must be a positive integer or \"T\""},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": [2.5]})"),
       "layers[0].states[0].shape[0]: must be a positive integer or \"T\" (block_tokens), got a "
       "fractional number 2.5"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": [1e3]})"),
       "layers[0].states[0].shape[0]: must be a positive integer"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": [99999999999999999999999]})"),
       "layers[0].states[0].shape[0]: must be a positive integer"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": ["t"]})"),
       "layers[0].states[0].shape[0]: must be a positive integer or \"T\" (block_tokens), got "
       "string \"t\""},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": [null]})"),
       "layers[0].states[0].shape[0]: must be a positive integer or \"T\" (block_tokens), got "
       "null"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": ["T", "T"]})"),
       "layers[0].states[0].shape[1]: \"T\" (block_tokens) may appear once per shape"},
      {with_state(R"({"role": "k", "dtype": "F16", "shape": [65536, 65536, 65536]})"),
       "layout JSON: layers[0].states[0].shape: the tensor's byte size exceeds the 4 GiB block "
       "limit"},
      {with_state(kState + ", " + kState),
       "layout JSON: layers[0].states[1].role 'keys' repeats layers[0].states[0].role"},
      {"{\"block_tokens\": 4, \"layers\": [{\"repeat\": 3, \"cache_type\": \"a\", \"states\": "
       "[{\"role\": \"k\", \"dtype\": \"U8\", \"shape\": [2147483648]}]}]}",
       "layout JSON: layers: the block's byte size exceeds the 4 GiB limit (reached at layers[2])"},
      {"{\"name\": \"\xFF\", \"block_tokens\": 4, \"layers\": []}", "layout JSON: not valid JSON"},
  };
  for (const Case& c : cases) {
    Result<ModelLayout> l = ModelLayout::FromJson(c.json);
    ASSERT_FALSE(l.ok()) << c.json;
    EXPECT_TRUE(l.status().IsInvalidArgument()) << c.json << " -> " << l.status().ToString();
    EXPECT_THAT(l.status().message(), HasSubstr(c.message)) << c.json;
  }
}

std::string ReadSourceFile(const std::string& rel) {
  const char* dir = std::getenv("KVTIER_SOURCE_DIR");
  std::string path = std::string(dir ? dir : ".") + "/" + rel;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Issue 33 item 6: a layout nested ~70,000 deep killed the process (the DOM's
// dump and copies recurse once per level). 100,000 levels of arrays and of
// objects, at the top and inside a field, are refused by name.
TEST(LayoutJsonTest, DeepNestingIsInvalidArgumentNotACrash) {
  constexpr size_t kDeep = 100'000;
  const std::string arrays = std::string(kDeep, '[') + std::string(kDeep, ']');
  std::string objects;
  for (size_t i = 0; i < kDeep; ++i) objects += "{\"a\":";
  objects += "1" + std::string(kDeep, '}');
  for (const std::string& deep :
       {arrays, objects, "{\"block_tokens\": 4, \"layers\": " + arrays + "}",
        "{\"name\": " + objects + ", \"block_tokens\": 4, \"layers\": []}"}) {
    EXPECT_THAT(ModelLayout::FromJson(deep),
                StatusIs(StatusCode::kInvalidArgument,
                         StartsWith("layout JSON: nested deeper than 32 levels")));
  }
  // 32 levels is allowed by the reader (and then refused by the schema).
  const std::string at_limit = "{\"block_tokens\": 4, \"layers\": " + std::string(31, '[') +
                               std::string(31, ']') + "}";
  EXPECT_THAT(ModelLayout::FromJson(at_limit),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("layers[0]")));
}

TEST(LayoutExamplesTest, DocsExamplesLoad) {
  struct Row {
    const char* file;
    const char* name;
    uint64_t bytes;
    size_t layers;
    size_t tensors;
  };
  const Row rows[] = {
      {"llama3-8b.json", "llama3-8b", 33554432, 32, 64},
      // 32 × 2 × (8·256·16·4 + 2 · 8·256·2·2)
      {"quantized.json", "llama3-8b-kv4", 9437184, 32, 192},
      // 6 × 2 × 4·128·256·2
      {"sliding_window.json", "gemma-like-swa", 3145728, 6, 12},
      // 4 × (3·1536·2 + 24·64·128·4)
      {"mamba.json", "mamba2-like", 3182592, 4, 8},
      // 2 × 2·4·64·64·2 + 2·4·64·64·2 + 2 × (4·64·8·4 + 2 · 4·64·2·2) + 2 × (3·1024·2 + 16·64·16·4)
      {"hybrid.json", "hybrid-example", 360448, 6, 16},
      // 3 × 2·4·32·64·2 + 2 × (4·32·8·4 + 2 · 4·32·1·2) + 256·3·2 + 4·32·32·4
      {"features.json", "features-example", 125440, 5, 14},
  };
  for (const Row& r : rows) {
    const std::string text = ReadSourceFile(std::string("docs/examples/") + r.file);
    ASSERT_FALSE(text.empty()) << r.file << " not found (KVTIER_SOURCE_DIR)";
    Result<ModelLayout> l = ModelLayout::FromJson(text);
    ASSERT_TRUE(l.ok()) << r.file << ": " << l.status().ToString();
    EXPECT_EQ(l->name, r.name);
    EXPECT_EQ(l->BlockBytes(), r.bytes) << r.file;
    EXPECT_EQ(l->layers.size(), r.layers) << r.file;
    EXPECT_EQ(l->TensorCount(), r.tensors) << r.file;
    EXPECT_EQ(*ModelLayout::FromJson(l->ToJson()), *l) << r.file;
  }
  // The file form of the preset is the preset.
  ModelLayout file = *ModelLayout::FromJson(ReadSourceFile("docs/examples/llama3-8b.json"));
  EXPECT_EQ(file, *ModelLayout::Preset("llama3-8b"));
  // Hybrid: token dims follow block_tokens, Mamba state does not.
  ModelLayout hybrid = *ModelLayout::FromJson(ReadSourceFile("docs/examples/hybrid.json"));
  EXPECT_EQ(hybrid.layers[2].cache_type, "sliding_window");
  EXPECT_THAT(hybrid.layers[2].meta_state, ::testing::ElementsAre("keep=0", "window=512"));
  EXPECT_EQ(hybrid.layers[3].states[0].dtype, DType::kU32);
  EXPECT_EQ(hybrid.layers[5].cache_type, "mamba");
  ModelLayout h128 = *hybrid.WithBlockTokens(128);
  EXPECT_EQ(h128.BlockBytes(), 2 * (131072 + 65536 + 20480) + 143360);
  EXPECT_EQ(h128.Signature(),
            "kvtier-layout-v1;bt=128;L0-1=attention:keys:BF16[4,128,64],values:BF16[4,128,64];"
            "L2=sliding_window:keys:BF16[4,128,64],values:BF16[4,128,64];"
            "L3=quantized_attention:keys:U32[4,128,8],key_scales:F16[4,128,2],"
            "key_biases:F16[4,128,2],values:U32[4,128,8],value_scales:F16[4,128,2],"
            "value_biases:F16[4,128,2];"
            "L4-5=mamba:conv:BF16[3,1024],ssm:F32[16,64,16]");
}

TEST(LayoutExamplesTest, DocsShowTheActualSignatures) {
  const std::string doc = ReadSourceFile("docs/layouts.md");
  ASSERT_FALSE(doc.empty()) << "docs/layouts.md not found (KVTIER_SOURCE_DIR)";
  EXPECT_THAT(doc, HasSubstr("tiny:\n" + ModelLayout::Preset("tiny")->Signature() + "\n"));
  EXPECT_THAT(doc,
              HasSubstr("llama3-8b:\n" + ModelLayout::Preset("llama3-8b")->Signature() + "\n"));
  ModelLayout hybrid = *ModelLayout::FromJson(ReadSourceFile("docs/examples/hybrid.json"));
  EXPECT_THAT(doc, HasSubstr("docs/examples/hybrid.json:\n" + hybrid.Signature() + "\n"));
  EXPECT_THAT(doc, HasSubstr("360448 bytes"));
  EXPECT_EQ(hybrid.BlockBytes(), 360448u);
}

// LoadFile and Resolve read through the POSIX Env.
class LayoutFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvtier_layout_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : files_) unlink(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    files_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(LayoutFileTest, LoadFileReadsExamples) {
  const char* src = std::getenv("KVTIER_SOURCE_DIR");
  const std::string path = std::string(src ? src : ".") + "/docs/examples/hybrid.json";
  Result<ModelLayout> l = ModelLayout::LoadFile(Env::Default(), path);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(*l, *ModelLayout::FromJson(ReadSourceFile("docs/examples/hybrid.json")));
  EXPECT_EQ(l->name, "hybrid-example");
}

TEST_F(LayoutFileTest, NameDefaultsToFileStem) {
  ModelLayout tiny = *ModelLayout::Preset("tiny");
  tiny.name = "";
  const std::string path = Write("my-model.json", tiny.ToJson());
  Result<ModelLayout> l = ModelLayout::LoadFile(Env::Default(), path);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->name, "my-model");
  EXPECT_EQ(l->Signature(), tiny.Signature());
}

TEST_F(LayoutFileTest, Errors) {
  const std::string missing = dir_ + "/missing.json";
  Result<ModelLayout> l = ModelLayout::LoadFile(Env::Default(), missing);
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(l.status().IsNotFound()) << l.status().ToString();
  EXPECT_THAT(l.status().message(), HasSubstr(missing));

  const std::string bad = Write("bad.json", R"({"block_tokens": 4, "layers": [1]})");
  l = ModelLayout::LoadFile(Env::Default(), bad);
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(l.status().IsInvalidArgument());
  EXPECT_EQ(l.status().message(),
            bad + ": layout JSON: layers[0]: must be an object, got a non-negative integer");

  l = ModelLayout::LoadFile(Env::Default(), dir_);
  ASSERT_THAT(l, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(l.status().message(), HasSubstr(dir_));

  l = ModelLayout::LoadFile(Env::Default(), Write("big.json", std::string((1 << 20) + 1, ' ')));
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(l.status().IsResourceExhausted()) << l.status().ToString();
}

TEST_F(LayoutFileTest, Resolve) {
  Env* env = Env::Default();
  EXPECT_EQ(*ModelLayout::Resolve(env, "tiny"), *ModelLayout::Preset("tiny"));
  EXPECT_EQ(*ModelLayout::Resolve(env, "llama3-8b", 64), *ModelLayout::Preset("llama3-8b", 64));
  Result<ModelLayout> unknown = ModelLayout::Resolve(env, "tiny.jso");
  ASSERT_THAT(unknown, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown layout preset 'tiny.jso'"));

  const std::string path = Write("hybrid.json", ReadSourceFile("docs/examples/hybrid.json"));
  Result<ModelLayout> l = ModelLayout::Resolve(env, path, 128);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(
      *l,
      *ModelLayout::FromJson(ReadSourceFile("docs/examples/hybrid.json"))->WithBlockTokens(128));
  EXPECT_EQ(l->BlockBytes(), 2 * (131072 + 65536 + 20480) + 143360);
  EXPECT_EQ(ModelLayout::Resolve(env, path)->block_tokens, 64u);
  // 3392 bytes per token in the token-sized tensors: 4 GiB is passed well before 2^31 tokens.
  Result<ModelLayout> big = ModelLayout::Resolve(env, path, 1u << 31);
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(big.status().IsInvalidArgument());
  EXPECT_THAT(big.status().message(), HasSubstr("with block_tokens 2147483648: layers"));
}

}  // namespace
}  // namespace kvtier
