// Uses the installed C++ library: prints the block keys of tokens 0..31
// (model "pkg", tiny layout), one hex key a line, after storing and loading
// the first block through a RAM-only TieredCache. Exits 1 on any error.
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "kvtier/tiered_cache.h"

int main() {
  auto layout = kvtier::ModelLayout::Preset("tiny");
  if (!layout.ok()) return 1;
  kvtier::NamespaceOptions ns;
  ns.model_id = "pkg";
  ns.layout_signature = layout->Signature();
  ns.block_tokens = layout->block_tokens;
  auto chain = kvtier::KeyChain::Create(ns);
  if (!chain.ok()) return 1;
  std::vector<uint32_t> tokens(32);
  std::iota(tokens.begin(), tokens.end(), 0u);
  const std::vector<kvtier::BlockKey> keys = chain->KeysFor(tokens);

  // One block through the cache: store, then load it back byte for byte.
  std::vector<std::vector<std::byte>> data;
  std::vector<std::span<const std::byte>> spans;
  for (const auto& layer : layout->layers) {
    for (const auto& t : layer.states) data.emplace_back(t.ByteSize(), std::byte{7});
  }
  for (const auto& d : data) spans.emplace_back(d);
  kvtier::EncodeRequest req;
  req.layout = &*layout;
  req.key = keys[0];
  req.parent = chain->ns();
  req.ns = chain->ns();
  req.tensors = spans;
  auto block = kvtier::EncodeBlock(req);
  if (!block.ok()) return 1;
  kvtier::CacheOptions options;
  options.layout_signature = layout->Signature();
  options.host.capacity_bytes = 1 << 20;
  auto cache = kvtier::TieredCache::Open(options, kvtier::Env::Default());
  if (!cache.ok()) return 1;
  const kvtier::SharedBlock shared = std::make_shared<const kvtier::BlockBuffer>(std::move(*block));
  if (!(*cache)->Store({&keys[0], 1}, {&shared, 1}).ok()) return 1;
  std::vector<std::byte> out(shared->size());
  const std::span<std::byte> dsts[] = {out};
  auto future = (*cache)->Load({&keys[0], 1}, dsts);
  if (!future.ok()) return 1;
  auto loaded = future->Get();
  if (!loaded.ok() || (*loaded)[0].bytes != shared->size() ||
      std::memcmp(out.data(), shared->data(), out.size()) != 0) {
    return 1;
  }
  for (const auto& k : keys) std::printf("%s\n", k.Hex().c_str());
  return 0;
}
