#include "bindings/layout_verifiers.h"

#include <new>
#include <utility>

#include "core/block_verifier.h"
#include "core/fork_safe_mutex.h"

namespace kvtier::bindings {

LayoutVerifiers& LayoutVerifiers::Shared() {
  static auto* shared = new LayoutVerifiers();
  return *shared;
}

LayoutVerifiers::LayoutVerifiers() : mu_(std::make_unique<ForkSafeMutex>()) {}
LayoutVerifiers::~LayoutVerifiers() = default;

std::shared_ptr<BlockVerifier> LayoutVerifiers::For(const ModelLayout& layout) {
  MutexLock lock(mu_.get());
  for (const auto& v : held_) {
    if (v != nullptr && *v->layout() == layout) return v;
  }
  auto v = std::make_shared<BlockVerifier>(layout);
  held_[next_] = v;
  next_ = (next_ + 1) % held_.size();
  return v;
}

Result<DecodedBlock> LayoutVerifiers::Decode(const ModelLayout& layout,
                                             std::span<const std::byte> file, DecodeOptions opts) {
  try {
    opts.expected_layout = &layout;
    return For(layout)->Decode(file, opts);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("out of memory decoding a block");
  }
}

}  // namespace kvtier::bindings
