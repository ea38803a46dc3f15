// LayoutVerifiers: the block decoders of the Python module (decode_block)
// and the C API (kvtier_block_decode) decode through a BlockVerifier made
// for the layout they are given (core/block_verifier.h): an engine decodes
// every block of its one layout, and a header of a shape seen before is then
// checked without a JSON parse, the layout check included. The verdict and
// the result are DecodeBlock's either way. The kMaxLayouts layouts decoded
// with most recently keep their verifier, replaced round-robin.
//
// Thread safety: every method may be called from any thread at once; one
// mutex guards the list (the verifiers are thread-safe on their own), a
// ForkSafeMutex: a forked child finds it free.
#ifndef KVTIER_BINDINGS_LAYOUT_VERIFIERS_H_
#define KVTIER_BINDINGS_LAYOUT_VERIFIERS_H_

#include <array>
#include <cstddef>
#include <memory>
#include <span>

#include "kvtier/block_file.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier {
class BlockVerifier;
class ForkSafeMutex;
}  // namespace kvtier

namespace kvtier::bindings {

class LayoutVerifiers {
 public:
  static constexpr size_t kMaxLayouts = 8;

  // The process's one set, shared by both bindings (never destroyed, so no
  // exit-order question).
  static LayoutVerifiers& Shared();

  LayoutVerifiers();
  ~LayoutVerifiers();
  LayoutVerifiers(const LayoutVerifiers&) = delete;
  LayoutVerifiers& operator=(const LayoutVerifiers&) = delete;

  // DecodeBlock(file, opts) with opts.expected_layout = &layout: the same
  // Status on failure, the same result (views into `file`) on success.
  // ResourceExhausted if memory runs out.
  Result<DecodedBlock> Decode(const ModelLayout& layout, std::span<const std::byte> file,
                              DecodeOptions opts);

 private:
  std::shared_ptr<BlockVerifier> For(const ModelLayout& layout);

  const std::unique_ptr<ForkSafeMutex> mu_;  // guards held_ and next_
  std::array<std::shared_ptr<BlockVerifier>, kMaxLayouts> held_;
  size_t next_ = 0;
};

}  // namespace kvtier::bindings

#endif  // KVTIER_BINDINGS_LAYOUT_VERIFIERS_H_
