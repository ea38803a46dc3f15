// Deterministic block content for tests, benchmarks and `kvtier synth`.
//
// A block's tensor bytes are a pure function of (key, tensor index), so any
// reader — another thread, another process, the Python reader in
// tests/block_file_test.py — can check a block it got without having seen
// the writer. The content is counter-based SplitMix64:
//
//   Mix(z)   = z ^= z >> 30; z *= 0xbf58476d1ce4e5b9;
//              z ^= z >> 27; z *= 0x94d049bb133111eb; z ^ (z >> 31)
//   G        = 0x9e3779b97f4a7c15            (all arithmetic mod 2^64)
//   k_j      = little-endian u64 of key bytes [8j, 8j + 8), j = 0..3
//   s        = 0; s = Mix(s ^ k_j) for j = 0..3; s = Mix(s ^ (t + 1) * G)
//   word w   = Mix(s + (w + 1) * G), stored little-endian at byte 8w;
//              the last partial word keeps its low-order bytes
//
// where t is the tensor's index in layer-major order (layer 0 state 0,
// layer 0 state 1, ..., layer 1 state 0, ...).
//
// Thread safety: pure functions.
#ifndef KVTIER_SYNTH_BLOCK_GENERATOR_H_
#define KVTIER_SYNTH_BLOCK_GENERATOR_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier {

// Fills `out` with tensor `tensor_index` of block `key`.
void FillBlockTensor(const BlockKey& key, size_t tensor_index, std::span<std::byte> out);

// The offset of the first byte of `data` that differs from what
// FillBlockTensor writes for the same size, or nullopt if none does.
std::optional<size_t> FirstTensorMismatch(const BlockKey& key, size_t tensor_index,
                                          std::span<const std::byte> data);

// All tensors of block `key` for `layout`, layer-major, each
// TensorSpec::ByteSize() long. REQUIRES: layout.Validate().ok().
std::vector<std::vector<std::byte>> MakeBlockTensors(const ModelLayout& layout,
                                                     const BlockKey& key);

// The block file of `key`: MakeBlockTensors encoded with EncodeBlock (full
// token_count, the layout's default meta states, created_at as given).
Result<BlockBuffer> MakeBlockFile(const ModelLayout& layout, const BlockKey& key,
                                  const BlockKey& parent, const BlockKey& ns,
                                  int64_t created_at = 0);

// OK iff `file` decodes with key `key`, `layout`'s tensors and signature and
// a good checksum (else the DecodeBlock status), and every tensor holds
// exactly the generated content (else Corruption naming the tensor and the
// first differing byte).
Status CheckBlockFile(std::span<const std::byte> file, const ModelLayout& layout,
                      const BlockKey& key);

// A distinct, deterministic key for test number `i` (not a KeyChain key:
// for tests that need many keys without token chains).
BlockKey TestBlockKey(uint64_t i);

}  // namespace kvtier

#endif  // KVTIER_SYNTH_BLOCK_GENERATOR_H_
