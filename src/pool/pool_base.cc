#include "pool/pool_base.h"

#include <algorithm>

namespace kvtier::pool_internal {

size_t CommonPrefix(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  size_t n = std::min(a.size(), b.size());
  return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + n, b.begin()).first - a.begin());
}

Status CheckAppendPosition(uint64_t id, const AppendRequest& req, size_t length, size_t written) {
  if (req.pos < length) {
    return Status::InvalidArgument("position " + std::to_string(req.pos) + " of " + SeqName(id) +
                                   " is committed (length " + std::to_string(length) + ")");
  }
  if (req.pos > written) {
    return Status::InvalidArgument("position " + std::to_string(req.pos) + " is past layer " +
                                   std::to_string(req.layer) + "'s written end " +
                                   std::to_string(written) + " of " + SeqName(id) +
                                   " (appends must be contiguous)");
  }
  if (req.count > SIZE_MAX - req.pos) return Status::InvalidArgument("position overflows");
  return Status::Ok();
}

Status CheckWritten(uint64_t id, std::span<const size_t> written, size_t new_len) {
  for (size_t l = 0; l < written.size(); ++l) {
    if (written[l] < new_len) {
      return Status::FailedPrecondition(
          "cannot advance " + SeqName(id) + " to " + std::to_string(new_len) + " tokens: layer " +
          std::to_string(l) + " has K/V for " + std::to_string(written[l]));
    }
  }
  return Status::Ok();
}

}  // namespace kvtier::pool_internal
