// DiskTierStats::ToJson() (also CacheStats's "disk") and ToPrometheus()
// (also `kvtier stats --prometheus`), from KVTIER_DISK_STATS plus the
// per-signature usage.
#include "core/stats_render.h"

#include <sstream>
#include <string>
#include <string_view>

#include "kvtier/disk_tier.h"

namespace kvtier {
namespace {

// Gauges of a running tier, not of the folder: DiskStatsScope::kFolderOnly
// leaves them out.
bool OfTheFolder(const MetricInfo& m) {
  if (m.kind == MetricKind::kCounter || m.kind == MetricKind::kHistogram) return false;
  for (std::string_view tier_only : {"queue_bytes", "queue_blocks", "reconcile_running",
                                     "configured_max_bytes", "effective_max_bytes"}) {
    if (m.name == tier_only) return false;
  }
  return true;
}

// ... nor, without a reference signature, the ones that judge against it.
bool OfTheFolderUnjudged(const MetricInfo& m) {
  return OfTheFolder(m) && m.name != "compatible_entries" && m.name != "compatible_bytes";
}

// One gauge per signature, labelled {signature, compatible} (or {signature}
// when nothing was judged); `what` says what it gives of each signature.
void PrometheusPerSignature(std::ostringstream& out, const std::string& metric,
                            std::string_view what, const std::vector<SignatureUsage>& per,
                            uint64_t SignatureUsage::*value, bool judged) {
  std::string help(what);
  help += " per layout signature";
  if (judged)
    help +=
        "; compatible=\"true\" for the signature of this tier's layout (kvtier stats: of "
        "--layout's)";
  stats::PrometheusFamily(out, metric, "gauge", help);
  for (const SignatureUsage& u : per) {
    out << metric << "{signature=\"" << stats::PrometheusLabel(u.signature) << "\"";
    if (judged) out << ",compatible=\"" << (u.compatible ? "true" : "false") << "\"";
    out << "} " << u.*value << "\n";
  }
}

}  // namespace

std::string DiskTierStats::ToJson() const {
  try {
    nlohmann::json j = nlohmann::json::object();
    stats::AddJson(*this, &j);
    nlohmann::json per = nlohmann::json::array();
    for (const SignatureUsage& u : per_signature) {
      per.push_back({{"signature", u.signature},
                     {"blocks", u.blocks},
                     {"bytes", u.bytes},
                     {"compatible", u.compatible}});
    }
    j["per_signature"] = per;
    return j.dump();
  } catch (const std::exception&) {
    // Only a failed allocation can get here; keep the API exception-free.
    return "{\"error\":\"stats rendering failed\"}";
  }
}

std::string DiskTierStats::ToPrometheus(std::string_view prefix, DiskStatsScope scope) const {
  std::ostringstream out;
  if (scope == DiskStatsScope::kAll) {
    stats::AddPrometheus(*this, prefix, out);
  } else if (scope == DiskStatsScope::kFolderOnly) {
    stats::AddPrometheus(*this, prefix, out, OfTheFolder);
  } else {
    stats::AddPrometheus(*this, prefix, out, OfTheFolderUnjudged);
  }
  const std::string p(prefix);
  const bool judged = scope != DiskStatsScope::kFolderUnjudged;
  PrometheusPerSignature(out, p + "_signature_blocks", "indexed block files", per_signature,
                         &SignatureUsage::blocks, judged);
  PrometheusPerSignature(out, p + "_signature_bytes", "bytes of the indexed block files",
                         per_signature, &SignatureUsage::bytes, judged);
  return out.str();
}

}  // namespace kvtier
