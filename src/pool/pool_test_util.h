// Helpers for the pool tests: a deterministic K/V oracle and writers.
//
// The K/V of position p is a pure function of the tokens [0, p] (so shared
// prefixes have equal K/V, as in a real model), the layer, the state and the
// head. Any test can therefore check any view against the oracle.
#ifndef KVTIER_POOL_POOL_TEST_UTIL_H_
#define KVTIER_POOL_POOL_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/layout.h"

namespace kvtier::pool_testing {

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A small attention layout: `layers` layers of K and V [heads, T, dim], F16.
inline ModelLayout TestLayout(uint32_t layers = 2, uint32_t heads = 2, uint32_t dim = 4,
                              uint32_t block_tokens = 4) {
  return ModelLayout::Attention("pool-test", layers, heads, dim, DType::kF16, block_tokens);
}

inline PoolOptions TestOptions(const ModelLayout& layout, uint32_t total_blocks) {
  PoolOptions o;
  o.layout = layout;
  o.key_namespace.model_id = "pool-test-model";
  o.total_blocks = total_blocks;
  o.chunk_blocks = 4;
  return o;
}

inline DensePoolOptions TestDenseOptions(const ModelLayout& layout) {
  DensePoolOptions o;
  o.layout = layout;
  return o;
}

enum class AppendMode { kToken, kHeadRange, kLayer };
enum class Commit { kAdvance, kWriteOnly };

class KvOracle {
 public:
  explicit KvOracle(const ModelLayout& layout) : layout_(layout) {}

  // Write() sets recurrent layers' states too (tests of missing ones turn
  // it off).
  bool write_recurrent = true;

  // A per-token state as [A, T, B] around its token axis (a recurrent
  // state: A = 1, its whole bytes one "row").
  size_t a(uint32_t l, uint32_t k) const {
    const TensorSpec& s = layout_.layers[l].states[k];
    size_t n = 1;
    for (int32_t i = 0; i < s.token_dim; ++i) n *= s.shape[static_cast<size_t>(i)];
    return n;
  }
  size_t row(uint32_t l, uint32_t k) const {
    const TensorSpec& s = layout_.layers[l].states[k];
    if (s.token_dim < 0) return s.ByteSize();
    size_t n = DTypeSize(s.dtype);
    for (size_t i = static_cast<size_t>(s.token_dim) + 1; i < s.shape.size(); ++i) n *= s.shape[i];
    return n;
  }
  bool recurrent(uint32_t l) const { return layout_.layers[l].IsRecurrent(); }
  uint32_t window(uint32_t l) const { return layout_.layers[l].window; }
  // Recurrent state k of layer l after tokens [0, p), p > 0.
  std::vector<std::byte> State(std::span<const uint32_t> tokens, size_t p, uint32_t l,
                               uint32_t k) const {
    std::vector<uint64_t> ph = PrefixHashes(tokens.first(p));
    std::vector<std::byte> out(row(l, k));
    FillHeadRow(ph[p - 1] ^ 0x5eed, l, k, 0, out.data());
    return out;
  }
  uint32_t layers() const { return static_cast<uint32_t>(layout_.layers.size()); }
  uint32_t states(uint32_t l) const {
    return static_cast<uint32_t>(layout_.layers[l].states.size());
  }

  // Hash of tokens [0, p] for every p.
  static std::vector<uint64_t> PrefixHashes(std::span<const uint32_t> tokens) {
    std::vector<uint64_t> out;
    uint64_t h = 0x2545f4914f6cdd1dull;
    for (uint32_t t : tokens) {
      h = Mix(h ^ (uint64_t{t} + 0x1234567));
      out.push_back(h);
    }
    return out;
  }

  // Head `h`'s row of position p (prefix hash ph), `row(l,k)` bytes.
  void FillHeadRow(uint64_t ph, uint32_t l, uint32_t k, uint64_t head, std::byte* out) const {
    uint64_t s = Mix(ph ^ (uint64_t{l} * 0x100000001b3ull) ^ (uint64_t{k} << 48) ^ (head << 32));
    const size_t n = row(l, k);
    for (size_t i = 0; i < n; ++i) {
      if (i % 8 == 0) s = Mix(s);
      out[i] = static_cast<std::byte>(s >> (8 * (i % 8)));
    }
  }

  // Packed [A, len, B] of state k of layer l for tokens [0, len).
  std::vector<std::byte> Packed(std::span<const uint32_t> tokens, size_t len, uint32_t l,
                                uint32_t k) const {
    std::vector<uint64_t> ph = PrefixHashes(tokens.first(len));
    const size_t r = row(l, k);
    std::vector<std::byte> out(a(l, k) * len * r);
    for (size_t h = 0; h < a(l, k); ++h) {
      for (size_t p = 0; p < len; ++p) FillHeadRow(ph[p], l, k, h, &out[(h * len + p) * r]);
    }
    return out;
  }

  // Writes K/V of positions [from, to) of `tokens` to every layer of `seq`
  // with `mode`, then (kAdvance) commits them.
  Status Write(KvPool* pool, uint64_t seq, std::span<const uint32_t> tokens, size_t from, size_t to,
               AppendMode mode, Commit commit = Commit::kAdvance) const {
    std::vector<uint64_t> ph = PrefixHashes(tokens.first(to));
    const size_t t = layout_.block_tokens;
    for (uint32_t l = 0; l < layers(); ++l) {
      const uint32_t ns = states(l);
      if (recurrent(l)) {
        if (!write_recurrent) continue;
        // The state after each block boundary on the way, then after `to`.
        for (size_t p = (from / t + 1) * t; p <= to; p += t) {
          if (p == to) break;
          KVTIER_RETURN_IF_ERROR(SetState(pool, seq, tokens, p, l));
        }
        if (to > from) KVTIER_RETURN_IF_ERROR(SetState(pool, seq, tokens, to, l));
        continue;
      }
      std::vector<std::vector<std::byte>> bufs(ns);
      std::vector<std::span<const std::byte>> spans(ns);
      auto emit = [&]() {
        for (uint32_t k = 0; k < ns; ++k) spans[k] = bufs[k];
      };
      switch (mode) {
        case AppendMode::kToken:
          for (size_t p = from; p < to; ++p) {
            for (uint32_t k = 0; k < ns; ++k) {
              bufs[k].resize(a(l, k) * row(l, k));
              for (size_t h = 0; h < a(l, k); ++h) {
                FillHeadRow(ph[p], l, k, h, &bufs[k][h * row(l, k)]);
              }
            }
            emit();
            KVTIER_RETURN_IF_ERROR(pool->AppendToken(seq, l, p, spans));
          }
          break;
        case AppendMode::kHeadRange:
          for (size_t h = 0; h < a(l, 0); ++h) {
            for (uint32_t k = 0; k < ns; ++k) {
              bufs[k].resize((to - from) * row(l, k));
              for (size_t p = from; p < to; ++p) {
                FillHeadRow(ph[p], l, k, h, &bufs[k][(p - from) * row(l, k)]);
              }
            }
            emit();
            KVTIER_RETURN_IF_ERROR(
                pool->AppendHeadRange(seq, l, static_cast<uint32_t>(h), from, spans));
          }
          break;
        case AppendMode::kLayer:
          for (uint32_t k = 0; k < ns; ++k) {
            const size_t n = to - from, r = row(l, k);
            bufs[k].resize(a(l, k) * n * r);
            for (size_t h = 0; h < a(l, k); ++h) {
              for (size_t p = from; p < to; ++p) {
                FillHeadRow(ph[p], l, k, h, &bufs[k][(h * n + (p - from)) * r]);
              }
            }
          }
          emit();
          KVTIER_RETURN_IF_ERROR(pool->AppendLayer(seq, l, from, to - from, spans));
          break;
      }
    }
    if (commit == Commit::kWriteOnly) return Status::Ok();
    return pool->Advance(seq, tokens.subspan(from, to - from));
  }

  Status SetState(KvPool* pool, uint64_t seq, std::span<const uint32_t> tokens, size_t p,
                  uint32_t l) const {
    std::vector<std::vector<std::byte>> bufs;
    std::vector<std::span<const std::byte>> spans;
    for (uint32_t k = 0; k < states(l); ++k) bufs.push_back(State(tokens, p, l, k));
    for (const auto& b : bufs) spans.emplace_back(b);
    return pool->SetRecurrentState(seq, l, p, spans);
  }

  // Checks every layer's packed view of `seq` against the oracle for
  // `tokens` (the sequence's committed tokens): a sliding layer's window
  // [length - window, length) only, a recurrent layer's RecurrentState.
  ::testing::AssertionResult Check(KvPool* pool, uint64_t seq,
                                   std::span<const uint32_t> tokens) const {
    Result<size_t> len = pool->Length(seq);
    if (!len.ok()) return ::testing::AssertionFailure() << len.status().ToString();
    if (*len != tokens.size()) {
      return ::testing::AssertionFailure()
             << "sequence " << seq << " length " << *len << ", expected " << tokens.size();
    }
    for (uint32_t l = 0; l < layers(); ++l) {
      if (recurrent(l)) {
        auto view = pool->RecurrentState(seq, l);
        if (tokens.empty()) continue;
        if (!view.ok()) return ::testing::AssertionFailure() << view.status().ToString();
        if ((*view)->length != tokens.size()) {
          return ::testing::AssertionFailure()
                 << "layer " << l << " state after " << (*view)->length << " tokens";
        }
        for (uint32_t k = 0; k < states(l); ++k) {
          std::vector<std::byte> want = State(tokens, tokens.size(), l, k);
          std::span<const std::byte> got = (*view)->states[k].data;
          if (got.size() != want.size() || std::memcmp(got.data(), want.data(), want.size()) != 0) {
            return ::testing::AssertionFailure()
                   << "sequence " << seq << " layer " << l << " recurrent state " << k << " differs";
          }
        }
        continue;
      }
      auto view = pool->PackedLayer(seq, l);
      if (!view.ok()) return ::testing::AssertionFailure() << view.status().ToString();
      if ((*view)->length != tokens.size() || (*view)->states.size() != states(l)) {
        return ::testing::AssertionFailure() << "layer " << l << " view shape wrong";
      }
      for (uint32_t k = 0; k < states(l); ++k) {
        std::vector<std::byte> want = Packed(tokens, tokens.size(), l, k);
        std::span<const std::byte> got = (*view)->states[k].data;
        if (got.size() != want.size()) {
          return ::testing::AssertionFailure()
                 << "sequence " << seq << " layer " << l << " state " << k << " size differs";
        }
        const size_t len = tokens.size(), r = row(l, k);
        const size_t from = window(l) > 0 && len > window(l) ? len - window(l) : 0;
        for (size_t h = 0; h < a(l, k); ++h) {
          const size_t at = (h * len + from) * r, n = (len - from) * r;
          if (n != 0 && std::memcmp(got.data() + at, want.data() + at, n) != 0) {
            return ::testing::AssertionFailure() << "sequence " << seq << " layer " << l
                                                 << " state " << k << " head " << h << " differs";
          }
        }
      }
    }
    return ::testing::AssertionSuccess();
  }

  // Checks `slot`, which holds block `block` of a sequence of `tokens`
  // (through at least that block), against the oracle, reading it the way
  // a paged-attention kernel does (SlotAddress, TensorGeometry).
  ::testing::AssertionResult CheckSlot(BlockPool* pool, uint32_t slot,
                                       std::span<const uint32_t> tokens, size_t block) const {
    const size_t t = layout_.block_tokens;
    if (tokens.size() < (block + 1) * t) return ::testing::AssertionFailure() << "too few tokens";
    Result<std::byte*> base = pool->SlotAddress(slot);
    if (!base.ok()) return ::testing::AssertionFailure() << base.status().ToString();
    std::vector<uint64_t> ph = PrefixHashes(tokens.first((block + 1) * t));
    for (uint32_t l = 0; l < layers(); ++l) {
      for (uint32_t k = 0; k < states(l); ++k) {
        const SlotTensorGeometry g = pool->TensorGeometry(l, k);
        if (recurrent(l)) {  // the snapshot: the state after the block
          std::vector<std::byte> want = State(tokens, (block + 1) * t, l, k);
          if (std::memcmp(*base + g.offset, want.data(), want.size()) != 0) {
            return ::testing::AssertionFailure()
                   << "slot " << slot << " layer " << l << " snapshot " << k << " differs";
          }
          continue;
        }
        const size_t r = row(l, k);
        std::vector<std::byte> want(r);
        for (size_t h = 0; h < a(l, k); ++h) {
          for (size_t p = 0; p < t; ++p) {
            FillHeadRow(ph[block * t + p], l, k, h, want.data());
            if (std::memcmp(*base + g.offset + (h * t + p) * r, want.data(), r) != 0) {
              return ::testing::AssertionFailure()
                     << "slot " << slot << " layer " << l << " state " << k << " head " << h
                     << " position " << p << " differs";
            }
          }
        }
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  ModelLayout layout_;
};

}  // namespace kvtier::pool_testing

#endif  // KVTIER_POOL_POOL_TEST_UTIL_H_
