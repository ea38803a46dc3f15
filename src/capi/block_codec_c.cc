// kvtier_block_encode and kvtier_block_decode (include/kvtier/kvtier_c.h):
// block files (DESIGN.md §4) from and to a C program's tensor buffers, over
// EncodeBlock and DecodeBlock, so that an engine in C (or any language that
// calls C) never re-implements docs/block-format.md.
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bindings/layout_verifiers.h"
#include "capi/c_status.h"
#include "kvtier/block_file.h"
#include "kvtier/env.h"
#include "kvtier/kvtier_c.h"
#include "kvtier/layout.h"

namespace kvtier::capi {
namespace {

constexpr int64_t kMicrosPerSecond = 1'000'000;

// The layout a preset name or JSON path names, or the C code and message.
int ResolveLayout(std::string_view fn, const char* name, ModelLayout* out) {
  Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), name);
  if (!layout.ok()) return FromStatus(fn, layout.status().WithContext("layout"));
  *out = *std::move(layout);
  return KVTIER_OK;
}

int WrongTensorCount(std::string_view fn, size_t given, const ModelLayout& layout) {
  return Fail(KVTIER_E_INVALID_ARGUMENT, fn,
              ": n_tensors is " + std::to_string(given) + ", the layout has " +
                  std::to_string(layout.TensorCount()) +
                  " tensors (layers x states, in layer-major order)");
}

}  // namespace
}  // namespace kvtier::capi

using namespace kvtier::capi;  // NOLINT(google-build-using-namespace): the C entry points

extern "C" {

int kvtier_block_encode(const char* layout, const uint8_t key[32], const uint8_t parent[32],
                        const uint8_t ns[32], const void* const* tensors, size_t n_tensors,
                        void* dst, size_t cap, size_t* len) {
  constexpr std::string_view fn = "kvtier_block_encode";
  return Guard(fn, [&]() -> int {
    if (len == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": len is NULL");
    *len = 0;
    if (layout == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": layout is NULL");
    if (key == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": key is NULL");
    if (parent == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": parent is NULL");
    if (ns == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": ns is NULL");
    if (tensors == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": tensors is NULL");
    if (dst == nullptr && cap > 0) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": dst is NULL and cap > 0");
    }
    kvtier::ModelLayout l;
    if (int rc = ResolveLayout(fn, layout, &l); rc != KVTIER_OK) return rc;
    if (n_tensors != l.TensorCount()) return WrongTensorCount(fn, n_tensors, l);
    // Each buffer is exactly its tensor's bytes: the layout says how many.
    std::vector<std::span<const std::byte>> spans;
    spans.reserve(n_tensors);
    size_t i = 0;
    for (uint32_t layer = 0; layer < l.layers.size(); ++layer) {
      for (uint32_t s = 0; s < l.layers[layer].states.size(); ++s, ++i) {
        if (tensors[i] == nullptr) {
          return Fail(KVTIER_E_INVALID_ARGUMENT, fn,
                      ": tensors[" + std::to_string(i) + "] (layer_" + std::to_string(layer) +
                          "_state_" + std::to_string(s) + ") is NULL");
        }
        spans.emplace_back(static_cast<const std::byte*>(tensors[i]),
                           l.layers[layer].states[s].ByteSize());
      }
    }
    kvtier::EncodeRequest req;
    req.layout = &l;
    req.key = KeyOf(key);
    req.parent = KeyOf(parent);
    req.ns = KeyOf(ns);
    req.created_at = kvtier::Env::Default()->NowUnixMicros() / kMicrosPerSecond;
    req.tensors = spans;
    kvtier::Result<kvtier::BlockBuffer> block = kvtier::EncodeBlock(req);
    if (!block.ok()) return FromStatus(fn, block.status());
    *len = block->size();
    if (cap < block->size()) {
      return Fail(KVTIER_E_BUFFER_TOO_SMALL, fn,
                  ": the block has " + std::to_string(block->size()) + " bytes, cap is " +
                      std::to_string(cap));
    }
    std::memcpy(dst, block->data(), block->size());
    return KVTIER_OK;
  });
}

int kvtier_block_decode(const void* block, size_t len, const char* layout, const uint8_t key[32],
                        size_t* offsets, size_t* lengths, size_t n_tensors) {
  constexpr std::string_view fn = "kvtier_block_decode";
  return Guard(fn, [&]() -> int {
    if (block == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": block is NULL");
    if (layout == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": layout is NULL");
    if (key == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": key is NULL");
    const bool verify_only = offsets == nullptr && lengths == nullptr && n_tensors == 0;
    if (!verify_only && (offsets == nullptr || lengths == nullptr)) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn,
                  offsets == nullptr ? ": offsets is NULL" : ": lengths is NULL");
    }
    kvtier::ModelLayout l;
    if (int rc = ResolveLayout(fn, layout, &l); rc != KVTIER_OK) return rc;
    if (!verify_only && n_tensors != l.TensorCount()) return WrongTensorCount(fn, n_tensors, l);
    const kvtier::BlockKey k = KeyOf(key);
    const std::string signature = l.Signature();
    kvtier::DecodeOptions opts;
    opts.expected_key = &k;
    opts.expected_signature = &signature;
    opts.verify_checksum = true;
    const auto* base = static_cast<const std::byte*>(block);
    // DecodeBlock with the layout expected: its verdict, without a JSON
    // parse for a header of a shape seen before.
    kvtier::Result<kvtier::DecodedBlock> decoded =
        kvtier::bindings::LayoutVerifiers::Shared().Decode(l, std::span<const std::byte>(base, len),
                                                           opts);
    // Every rejection (structure, key, signature, layout, checksum) is a
    // Corruption status naming the rule, as a disk read reports it.
    if (!decoded.ok()) return FromStatus(fn, decoded.status());
    if (verify_only) return KVTIER_OK;
    for (size_t i = 0; i < n_tensors; ++i) {
      const std::span<const std::byte> data = decoded->tensors[i].data;
      offsets[i] = static_cast<size_t>(data.data() - base);
      lengths[i] = data.size();
    }
    return KVTIER_OK;
  });
}

}  // extern "C"
