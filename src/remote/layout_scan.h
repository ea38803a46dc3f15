// LayoutScan: finds and erases every block of one layout under the tier's
// prefix, whoever stored it (RemoteTier::EraseLayout, behind
// TieredCache::Clear).
//
//   1. SCAN <prefix>{*} on every master (the single server, or each node
//      serving a Cluster slot): the part-0 names, `<prefix>{<64 hex>}`
//      (later parts end in `:<i>`, signatures in `:mac`, so the pattern
//      leaves them out);
//   2. GETRANGE of each value's header (its first 8 bytes give the length;
//      a header longer than part 0 continues in parts 1, 2, ...),
//      pipelined per node through the BatchRunner;
//   3. DEL of every part and the `:mac` name of each value whose header
//      decodes as a block of this key and this layout's signature. Values
//      of other layouts (or that are not blocks) are kept.
//
// Thread safety: Run() may be called from any thread; it works on its own
// connections and handlers.
#ifndef KVTIER_REMOTE_LAYOUT_SCAN_H_
#define KVTIER_REMOTE_LAYOUT_SCAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "remote/batch_runner.h"
#include "remote/counters.h"
#include "remote/router.h"
#include "remote/value_layout.h"

namespace kvtier::remote {

struct LayoutScanOptions {
  uint64_t command_timeout_micros = 2'000'000;
  uint64_t connect_timeout_micros = 500'000;
};

class LayoutScan {
 public:
  // REQUIRES: every pointer outlives the scan.
  LayoutScan(const LayoutScanOptions& options, const ValueLayout* values, std::string signature,
             Router* router, BatchRunner* runner, Env* env, RemoteCounters* counters);

  // Erases this layout's blocks; returns how many values were deleted.
  // Unavailable when a master cannot be scanned (nothing is deleted then)
  // or a DEL got no answer (those blocks stay).
  Result<uint64_t> EraseLayout();

  // Step 1: the keys of every part-0 name under the prefix, on every master.
  Result<std::vector<BlockKey>> ScanKeys();
  // Step 2: which of `keys` hold a block of this layout (header checked).
  Result<std::vector<BlockKey>> OfThisLayout(const std::vector<BlockKey>& keys);

  // The SCAN pattern for `prefix`: its glob characters escaped, then "{*}".
  static std::string PatternFor(const std::string& prefix);

 private:
  Result<std::vector<std::shared_ptr<Node>>> Masters();
  Status ScanNode(Node& node, std::vector<BlockKey>* out);

  const LayoutScanOptions options_;
  const ValueLayout* const values_;
  const std::string signature_;
  Router* const router_;
  BatchRunner* const runner_;
  Env* const env_;
  RemoteCounters* const counters_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_LAYOUT_SCAN_H_
