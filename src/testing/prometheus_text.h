// A check of Prometheus text exposition (format 0.0.4) as kvtier writes it,
// for the tests of every output that prints it (CacheStats, DiskTierStats,
// RemoteTierStats, TieredCache::Prometheus, `kvtier stats --prometheus`):
//
//   - every family opens with `# HELP <name> <help>` and, on the very next
//     line, `# TYPE <name> <counter|gauge|histogram>` of the same name;
//   - a help text is non-empty, one line, and escapes only `\\` and `\n`
//     (a raw newline in it splits the HELP line: the TYPE line is then not
//     the next one);
//   - a family appears once; each sample line belongs to the family opened
//     last (its name, or a histogram's `_bucket`, `_sum` and `_count`) and
//     ends in a number; no other comment, no blank line; the text ends in
//     a newline.
//
// Thread safety: pure functions.
#ifndef KVTIER_TESTING_PROMETHEUS_TEXT_H_
#define KVTIER_TESTING_PROMETHEUS_TEXT_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::testing {

namespace prometheus_text_internal {

inline bool IsMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Empty, or why `help` is not a HELP text: empty, or a backslash followed
// by something other than a backslash or `n`.
inline std::string HelpProblem(std::string_view help) {
  if (help.empty()) return "empty help text";
  for (size_t i = 0; i < help.size(); ++i) {
    if (help[i] != '\\') continue;
    if (i + 1 == help.size() || (help[i + 1] != '\\' && help[i + 1] != 'n')) {
      return "a backslash not escaped in the help text (only \\\\ and \\n are escapes)";
    }
    ++i;
  }
  return "";
}

// A sample value: a number, +Inf, -Inf or NaN.
inline bool IsValue(const std::string& v) {
  if (v == "+Inf" || v == "-Inf" || v == "NaN") return true;
  if (v.empty()) return false;
  char* end = nullptr;
  std::strtod(v.c_str(), &end);
  return end == v.c_str() + v.size();
}

}  // namespace prometheus_text_internal

// Empty when `text` follows the rules above; else the first thing wrong,
// with its line number (from 1) and the line.
inline std::string PrometheusTextProblem(std::string_view text) {
  namespace in = prometheus_text_internal;
  if (text.empty()) return "no metric family";
  if (text.back() != '\n') return "the text does not end in a newline";
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  std::set<std::string, std::less<>> families;
  std::string family, type;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    auto problem = [&](const std::string& what) {
      return "line " + std::to_string(i + 1) + ": " + what + ": \"" + std::string(line) + "\"";
    };
    if (line.starts_with("# HELP ")) {
      const std::string_view rest = line.substr(7);
      const size_t space = rest.find(' ');
      const std::string_view name = rest.substr(0, space);
      if (!in::IsMetricName(name)) return problem("not a metric name");
      if (space == std::string_view::npos) return problem("a HELP line without help text");
      if (std::string why = in::HelpProblem(rest.substr(space + 1)); !why.empty()) {
        return problem(why);
      }
      if (!families.insert(std::string(name)).second) return problem("a family printed twice");
      const std::string want = "# TYPE " + std::string(name) + " ";
      if (i + 1 == lines.size() || !lines[i + 1].starts_with(want)) {
        return problem(
            "a HELP line not followed by the TYPE line of its family (a newline in its help?)");
      }
      ++i;
      family = std::string(name);
      type = std::string(lines[i].substr(want.size()));
      if (type != "counter" && type != "gauge" && type != "histogram") {
        return "line " + std::to_string(i + 1) + ": not a type kvtier prints: \"" +
               std::string(lines[i]) + "\"";
      }
      continue;
    }
    if (line.starts_with("# TYPE ")) {
      return problem("a TYPE line without the HELP line of its family right before it");
    }
    if (line.empty()) return problem("a blank line");
    if (line[0] == '#') return problem("a comment that is neither HELP nor TYPE");
    if (family.empty()) return problem("a sample before any family");
    const std::string_view name = line.substr(0, line.find_first_of("{ "));
    const bool ours = type == "histogram" ? name == family + "_bucket" || name == family + "_sum" ||
                                                name == family + "_count"
                                          : name == family;
    if (!ours) return problem("a sample not of the family " + family);
    const size_t last_space = line.rfind(' ');
    if (last_space == std::string_view::npos ||
        !in::IsValue(std::string(line.substr(last_space + 1)))) {
      return problem("a sample without a value");
    }
  }
  return "";
}

// EXPECT_TRUE(WellFormedPrometheus(text)): fails with PrometheusTextProblem.
inline ::testing::AssertionResult WellFormedPrometheus(std::string_view text) {
  const std::string problem = PrometheusTextProblem(text);
  if (problem.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << problem;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTING_PROMETHEUS_TEXT_H_
