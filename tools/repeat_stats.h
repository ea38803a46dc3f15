// The median and the worst of a bench's repeats, and a ratio against its
// limit as `kvtier bench pool` reports it (issue 32): one figure per
// repeat, each against the limit measured in the same repeat, then the
// median and the worst of those, beside the target they are held to.
//
// Thread safety: plain functions.
#ifndef KVTIER_TOOLS_REPEAT_STATS_H_
#define KVTIER_TOOLS_REPEAT_STATS_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace kvtier::cli {

// Which way a figure improves: a speed ratio is better higher, a time
// ratio lower.
enum class Better { kHigher, kLower };

// The middle value (the upper one of an even count); 0 for none.
double Median(std::vector<double> v);

// The worst of `runs` (the lowest when kHigher is better); 0 for none.
double Worst(const std::vector<double>& runs, Better better);

// {"median", "worst", "runs", "target", "better": "higher"|"lower"} and,
// when given, "target_worst" (the bound the worst repeat is held to; the
// median is held to "target").
nlohmann::json RatioJson(const std::vector<double>& runs, Better better, double target,
                         std::optional<double> target_worst = std::nullopt);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_REPEAT_STATS_H_
