// libFuzzer target: layout JSON (ModelLayout::FromJson) on arbitrary text.
//
// Build and run (scripts/test does this for 20 s, seeded with a copy of
// docs/examples/*.json: libFuzzer adds what it finds to its first folder):
//   cmake --preset fuzz && cmake --build --preset fuzz --target layout_json_fuzz
//   mkdir -p /tmp/layouts && cp docs/examples/*.json /tmp/layouts/
//   build/fuzz/layout_json_fuzz -max_total_time=20 /tmp/layouts
//
// Besides ASan/UBSan findings, it traps when an invariant breaks:
//   - every rejection is InvalidArgument with a message;
//   - an accepted layout validates, its ToJson parses back to an equal
//     layout with the same signature, and its sizes (BlockBytes, each
//     tensor's ByteSize) add up without wrapping;
//   - WithBlockTokens to 1 and to the layout's own value either refuses
//     with InvalidArgument or gives a layout that validates.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvtier/layout.h"

namespace {

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kvtier::Result<kvtier::ModelLayout> parsed = kvtier::ModelLayout::FromJson(text);
  if (!parsed.ok()) {
    Require(parsed.status().IsInvalidArgument());
    Require(!parsed.status().message().empty());
    return 0;
  }
  const kvtier::ModelLayout& layout = *parsed;
  Require(layout.Validate().ok());
  kvtier::Result<kvtier::ModelLayout> again = kvtier::ModelLayout::FromJson(layout.ToJson());
  Require(again.ok());
  Require(*again == layout);
  Require(again->Signature() == layout.Signature());
  uint64_t sum = 0;
  for (const kvtier::LayerSpec& l : layout.layers) {
    for (const kvtier::TensorSpec& t : l.states) {
      const uint64_t n = t.ByteSize();
      Require(sum + n >= sum);
      sum += n;
    }
  }
  Require(sum == layout.BlockBytes());
  for (uint32_t bt : {1u, layout.block_tokens, 65536u}) {
    kvtier::Result<kvtier::ModelLayout> w = layout.WithBlockTokens(bt);
    Require(w.ok() ? w->Validate().ok() : w.status().IsInvalidArgument());
  }
  return 0;
}
