// RemoteTierStats::ToJson() and ToPrometheus(), from KVTIER_REMOTE_STATS.
#include "core/stats_render.h"

#include <sstream>

#include "kvtier/remote_tier.h"

namespace kvtier {

std::string RemoteTierStats::ToJson() const {
  try {
    nlohmann::json j = nlohmann::json::object();
    stats::AddJson(*this, &j);
    return j.dump();
  } catch (const std::exception&) {
    // Only a failed allocation can get here; keep the API exception-free.
    return "{\"error\":\"stats rendering failed\"}";
  }
}

std::string RemoteTierStats::ToPrometheus(std::string_view prefix) const {
  try {
    std::ostringstream out;
    stats::AddPrometheus(*this, prefix, out);
    return out.str();
  } catch (const std::exception&) {
    return "# stats rendering failed\n";
  }
}

}  // namespace kvtier
