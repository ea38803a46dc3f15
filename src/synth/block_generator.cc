#include "synth/block_generator.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace kvtier {

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

inline uint64_t Mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t TensorSeed(const BlockKey& key, size_t tensor_index) {
  uint64_t s = 0;
  for (int j = 0; j < 4; ++j) {
    uint64_t k = 0;
    for (int b = 7; b >= 0; --b) k = (k << 8) | key.bytes[8 * j + b];
    s = Mix(s ^ k);
  }
  return Mix(s ^ (static_cast<uint64_t>(tensor_index) + 1) * kGolden);
}

inline void StoreLe64(uint64_t v, std::byte* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

}  // namespace

void FillBlockTensor(const BlockKey& key, size_t tensor_index, std::span<std::byte> out) {
  const uint64_t s = TensorSeed(key, tensor_index);
  const size_t words = out.size() / 8;
  std::byte* p = out.data();
  uint64_t counter = s;
  for (size_t w = 0; w < words; ++w) {
    counter += kGolden;
    StoreLe64(Mix(counter), p + 8 * w);
  }
  if (size_t tail = out.size() % 8; tail != 0) {
    std::byte last[8];
    StoreLe64(Mix(counter + kGolden), last);
    std::memcpy(p + 8 * words, last, tail);
  }
}

std::optional<size_t> FirstTensorMismatch(const BlockKey& key, size_t tensor_index,
                                          std::span<const std::byte> data) {
  // Compare a chunk at a time so a checker needs no block-sized buffer.
  constexpr size_t kWords = 512;
  std::byte expect[kWords * 8];
  const uint64_t s = TensorSeed(key, tensor_index);
  uint64_t counter = s;
  size_t offset = 0;
  while (offset < data.size()) {
    size_t len = std::min(sizeof(expect), data.size() - offset);
    for (size_t w = 0; w < (len + 7) / 8; ++w) {
      counter += kGolden;
      StoreLe64(Mix(counter), expect + 8 * w);
    }
    if (std::memcmp(expect, data.data() + offset, len) != 0) {
      for (size_t i = 0; i < len; ++i) {
        if (expect[i] != data[offset + i]) return offset + i;
      }
    }
    offset += len;
  }
  return std::nullopt;
}

std::vector<std::vector<std::byte>> MakeBlockTensors(const ModelLayout& layout,
                                                     const BlockKey& key) {
  std::vector<std::vector<std::byte>> tensors;
  tensors.reserve(layout.TensorCount());
  for (const LayerSpec& layer : layout.layers) {
    for (const TensorSpec& spec : layer.states) {
      auto& t = tensors.emplace_back(spec.ByteSize());
      FillBlockTensor(key, tensors.size() - 1, t);
    }
  }
  return tensors;
}

Result<BlockBuffer> MakeBlockFile(const ModelLayout& layout, const BlockKey& key,
                                  const BlockKey& parent, const BlockKey& ns, int64_t created_at,
                                  uint32_t token_count) {
  std::vector<std::vector<std::byte>> tensors = MakeBlockTensors(layout, key);
  std::vector<std::span<const std::byte>> spans(tensors.begin(), tensors.end());
  EncodeRequest req;
  req.layout = &layout;
  req.key = key;
  req.parent = parent;
  req.ns = ns;
  req.token_count = token_count;
  req.created_at = created_at;
  req.tensors = spans;
  return EncodeBlock(req);
}

Status CheckBlockFile(std::span<const std::byte> file, const ModelLayout& layout,
                      const BlockKey& key) {
  const std::string signature = layout.Signature();
  DecodeOptions opts;
  opts.expected_key = &key;
  opts.expected_signature = &signature;
  opts.expected_layout = &layout;
  KVTIER_ASSIGN_OR_RETURN(DecodedBlock block, DecodeBlock(file, opts));
  for (size_t t = 0; t < block.tensors.size(); ++t) {
    if (auto at = FirstTensorMismatch(key, t, block.tensors[t].data)) {
      return Status::Corruption("tensor " + block.tensors[t].name +
                                " differs from the generated content at byte " +
                                std::to_string(*at));
    }
  }
  return Status::Ok();
}

BlockKey TestBlockKey(uint64_t i) {
  BlockKey key;
  uint64_t counter = Mix(i ^ 0x6b76746965722d74ull);  // "kvtier-t"
  for (int j = 0; j < 4; ++j) {
    counter += kGolden;
    uint64_t w = Mix(counter);
    for (int b = 0; b < 8; ++b) key.bytes[8 * j + b] = static_cast<uint8_t>(w >> (8 * b));
  }
  return key;
}

SharedBlock MakeOpaqueBlock(const BlockKey& key, size_t size) {
  Result<BlockBuffer> buf = BlockBuffer::Allocate(size);
  if (!buf.ok()) return nullptr;
  FillBlockTensor(key, 0, buf->mutable_span());
  return std::make_shared<const BlockBuffer>(std::move(buf).value());
}

bool IsOpaqueBlock(const BlockKey& key, const BlockBuffer& block, size_t size) {
  return block.size() == size && !FirstTensorMismatch(key, 0, block.span()).has_value();
}

uint64_t SplitMix64Next(uint64_t& state) {
  state += kGolden;
  return Mix(state);
}

}  // namespace kvtier
