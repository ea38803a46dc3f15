// libFuzzer target: the block file decoder on arbitrary bytes.
//
// Build and run (scripts/test does this for 60 s, seeded with the corpus):
//   cmake --preset fuzz && cmake --build --preset fuzz --target block_file_fuzz
//   build/fuzz/block_file_fuzz -max_total_time=60 tests/corpus/hostile tests/corpus/valid
//
// Besides ASan/UBSan findings, it traps when an invariant breaks:
//   - every rejection is a Corruption carrying a BlockFileError reason;
//   - an accepted file's views lie inside the input and tile the data
//     section exactly, in layer-major order;
//   - DecodeBlockHeader (header only) and DecodeBlock agree on the verdict
//     and the reason, except that only DecodeBlock checks the checksum;
//   - decoding with expectations never accepts what plain decoding rejects,
//     and accepts the same file when the expectations are the file's own;
//   - BlockVerifier::Verify gives DecodeBlock's exact verdict (code and
//     message) with and without expectations. One verifier lives across
//     inputs, primed with a tiny block and learning a template from every
//     file it accepts, so mutants of valid files meet its fast path.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "core/block_verifier.h"
#include "kvtier/block_file.h"
#include "kvtier/layout.h"

namespace {

using kvtier::BlockFileError;
using kvtier::BlockFileErrorOf;
using kvtier::DecodeOptions;

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

void RequireReason(const kvtier::Status& s) {
  Require(s.IsCorruption());
  Require(BlockFileErrorOf(s) != BlockFileError::kNone);
}

void RequireSame(const kvtier::Status& got, const kvtier::Status& want) {
  Require(got.code() == want.code());
  Require(got.message() == want.message());
}

// A verifier holding the template of one valid tiny block.
kvtier::BlockVerifier* PrimedVerifier(const kvtier::ModelLayout& tiny) {
  std::vector<std::vector<std::byte>> tensors;
  std::vector<std::span<const std::byte>> spans;
  for (const kvtier::LayerSpec& layer : tiny.layers) {
    for (const kvtier::TensorSpec& t : layer.states) tensors.emplace_back(t.ByteSize());
  }
  for (const auto& t : tensors) spans.emplace_back(t);
  kvtier::EncodeRequest req;
  req.layout = &tiny;
  req.key.bytes.fill(0x11);
  req.parent.bytes.fill(0x22);
  req.ns.bytes.fill(0x22);
  req.created_at = 1700000000;
  req.tensors = spans;
  kvtier::Result<kvtier::BlockBuffer> file = kvtier::EncodeBlock(req);
  Require(file.ok());
  auto* verifier = new kvtier::BlockVerifier();
  Require(verifier->Verify(file->span(), {}).ok());
  Require(verifier->template_count() == 1);
  return verifier;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kvtier::ModelLayout* const tiny =
      new kvtier::ModelLayout(kvtier::ModelLayout::Preset("tiny").value());
  static const std::string* const tiny_signature = new std::string(tiny->Signature());

  static kvtier::BlockVerifier* const verifier = PrimedVerifier(*tiny);

  std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);

  kvtier::Result<kvtier::DecodedBlock> plain = kvtier::DecodeBlock(file, {});
  kvtier::Result<kvtier::DecodedBlock> header = kvtier::DecodeBlockHeader(file, size, {});
  if (!header.ok()) {
    RequireReason(header.status());
    Require(!plain.ok());
    Require(BlockFileErrorOf(plain.status()) == BlockFileErrorOf(header.status()));
  }
  if (!plain.ok()) {
    RequireReason(plain.status());
    if (header.ok()) {
      Require(BlockFileErrorOf(plain.status()) == BlockFileError::kChecksumMismatch);
    }
  } else {
    const kvtier::DecodedBlock& b = *plain;
    Require(header.ok());
    Require(b.header_bytes % 8 == 0);
    Require(b.data.data() == file.data() + 8 + b.header_bytes);
    Require(b.data.data() + b.data.size() == file.data() + file.size());
    const std::byte* cursor = b.data.data();
    uint32_t layer = 0, state = 0;
    for (size_t i = 0; i < b.tensors.size(); ++i) {
      const kvtier::TensorView& t = b.tensors[i];
      if (i > 0) {
        if (t.layer == layer) {
          Require(t.state == ++state);
        } else {
          Require(t.layer == ++layer && t.state == 0);
          state = 0;
        }
      } else {
        Require(t.layer == 0 && t.state == 0);
      }
      Require(t.data.data() == cursor);
      cursor += t.data.size();
    }
    Require(cursor == b.data.data() + b.data.size());
    Require(b.meta.layer_cache_types.size() == layer + 1);
    Require(b.meta.layer_meta_states.size() == layer + 1);
    Require(kvtier::BlockChecksum(b.data) == b.meta.checksum);

    // The file's own expectations pass.
    DecodeOptions own;
    own.expected_key = &b.meta.key;
    own.expected_signature = &b.meta.layout_signature;
    Require(kvtier::DecodeBlock(file, own).ok());
  }

  RequireSame(verifier->Verify(file, {}), plain.status());

  // A partial decode of every other tensor: the header's verdict when the
  // header fails; otherwise OK, a selected tensor's mismatch, or "read it
  // whole" for a file without tensor_checksums; never accepted when a
  // selected tensor's bytes differ from its entry.
  if (header.ok()) {
    kvtier::TensorMask mask(header->tensors.size());
    for (size_t i = 0; i < mask.size(); i += 2) mask[i] = true;
    kvtier::Result<kvtier::DecodedBlock> part = kvtier::DecodeBlockTensors(file, mask, {});
    if (part.ok()) {
      for (size_t i = 0; i < mask.size(); ++i) {
        if (mask[i] && i < part->meta.tensor_checksums.size()) {
          Require(kvtier::BlockChecksum(part->tensors[i].data) == part->meta.tensor_checksums[i]);
        }
      }
    } else if (part.status().code() != kvtier::StatusCode::kFailedPrecondition) {
      RequireReason(part.status());
    }
  } else {
    RequireSame(kvtier::DecodeBlockTensors(file, {true}, {}).status(), header.status());
  }

  // Expectations only ever add rejections.
  kvtier::BlockKey key = plain.ok() ? plain->meta.key : kvtier::BlockKey{};
  DecodeOptions keyed;
  keyed.expected_key = &key;
  keyed.expected_signature = tiny_signature;
  RequireSame(verifier->Verify(file, keyed), kvtier::DecodeBlock(file, keyed).status());
  DecodeOptions strict;
  strict.expected_key = &key;
  strict.expected_signature = tiny_signature;
  strict.expected_layout = tiny;
  kvtier::Result<kvtier::DecodedBlock> expect = kvtier::DecodeBlock(file, strict);
  if (!expect.ok()) RequireReason(expect.status());
  if (!plain.ok()) Require(!expect.ok());
  return 0;
}
