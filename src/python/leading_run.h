// LeadingRun: which blocks of a batch load Cache.load_many_tensors copies
// when the caller wants the leading run only (prefix_group > 0).
//
// The keys are taken in groups of `group` (an engine's page of several
// blocks; the last group may be shorter). A group is due once every block of
// it and of every earlier group has landed and was found; from the first
// group with a miss on, nothing is. Blocks land in any order, on any thread:
// one that lands before its turn is held until the turn comes, and one in or
// after a group with a miss is dropped at once. So nothing past the run is
// ever written, and a group is written whole or not at all.
//
// Thread safety: Land() may be called from any thread; one mutex guards the
// state, and the blocks it returns are copied by the caller outside it.
#ifndef KVTIER_PYTHON_LEADING_RUN_H_
#define KVTIER_PYTHON_LEADING_RUN_H_

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "kvtier/block_buffer.h"

namespace kvtier::python {

class LeadingRun {
 public:
  // `group` >= 1.
  LeadingRun(size_t keys, size_t group);

  // Records that key `i` landed: `block` null for a miss (or a block the
  // caller refused). Returns the blocks now due, as (key index, block), in
  // key order; each index is returned at most once.
  std::vector<std::pair<size_t, SharedBlock>> Land(size_t i, SharedBlock block);

 private:
  const size_t keys_;
  const size_t group_;
  std::mutex mu_;  // guards the four below
  std::vector<SharedBlock> held_;
  std::vector<char> landed_;
  size_t next_group_ = 0;  // the first group not yet due
  size_t first_miss_;      // group of the first miss so far
};

}  // namespace kvtier::python

#endif  // KVTIER_PYTHON_LEADING_RUN_H_
