#include "repeat_stats.h"

#include <algorithm>

namespace kvtier::cli {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Worst(const std::vector<double>& runs, Better better) {
  if (runs.empty()) return 0;
  return better == Better::kHigher ? *std::min_element(runs.begin(), runs.end())
                                   : *std::max_element(runs.begin(), runs.end());
}

nlohmann::json RatioJson(const std::vector<double>& runs, Better better, double target,
                         std::optional<double> target_worst) {
  nlohmann::json j = {{"median", Median(runs)},
                      {"worst", Worst(runs, better)},
                      {"runs", runs},
                      {"target", target},
                      {"better", better == Better::kHigher ? "higher" : "lower"}};
  if (target_worst.has_value()) j["target_worst"] = *target_worst;
  return j;
}

}  // namespace kvtier::cli
