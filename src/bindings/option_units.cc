// Sizes and durations with units (DESIGN.md §8), for the options table and
// the CLI's flags. Numbers are read as an integer part and up to 18 digits
// of fraction and multiplied in 128 bits, so no value wraps: one past what
// 64 bits hold is refused.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <string>
#include <string_view>

#include "bindings/option_table.h"

namespace kvtier::bindings {
namespace {

using json = nlohmann::json;
using u128 = unsigned __int128;

constexpr size_t kMaxEchoChars = 60;

std::string Quote(std::string_view text) {
  std::string s(text.substr(0, kMaxEchoChars));
  if (text.size() > kMaxEchoChars) s += "...";
  return "'" + s + "'";
}

Status Bad(std::string_view what, std::string_view why) {
  return Status::InvalidArgument(std::string(what) + ": " + std::string(why));
}

struct Unit {
  std::string_view name;
  u128 scale;
};

constexpr u128 kKi = 1024;
constexpr std::array<Unit, 14> kSizeUnits = {{
    {"B", 1},
    {"KB", 1000},
    {"MB", 1000 * 1000},
    {"GB", 1000ull * 1000 * 1000},
    {"TB", 1000ull * 1000 * 1000 * 1000},
    {"KiB", kKi},
    {"MiB", kKi* kKi},
    {"GiB", kKi* kKi* kKi},
    {"TiB", kKi* kKi* kKi* kKi},
    {"", 1},
    // The CLI's historical suffixes (kvtier gc --max-bytes 512M, binary):
    // flags only, not options (kSizeUnits.size() - kShortUnits below).
    {"K", kKi},
    {"M", kKi* kKi},
    {"G", kKi* kKi* kKi},
    {"T", kKi* kKi* kKi* kKi},
}};
constexpr size_t kShortUnits = 4;

// Microseconds per unit; a bare number is milliseconds.
constexpr std::array<Unit, 5> kDurationUnits = {{
    {"ms", 1000},
    {"s", 1000 * 1000},
    {"min", 60ull * 1000 * 1000},
    {"h", 3600ull * 1000 * 1000},
    {"", 1000},
}};

constexpr u128 kU64Max = ~uint64_t{0};

template <size_t N>
Result<uint64_t> ParseWithUnits(std::string_view what, std::string_view text,
                                const std::array<Unit, N>& all_units, size_t n_units,
                                std::string_view kind, std::string_view unit_list,
                                bool bare_number_ok) {
  const std::string_view t = text;
  size_t i = 0;
  u128 whole = 0;
  size_t whole_digits = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
    whole = whole * 10 + static_cast<unsigned>(t[i] - '0');
    if (whole > kU64Max) return Bad(what, Quote(text) + " is too large");
    ++i;
    ++whole_digits;
  }
  u128 frac = 0;
  u128 frac_scale = 1;
  size_t frac_digits = 0;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
      if (frac_digits < 18) {
        frac = frac * 10 + static_cast<unsigned>(t[i] - '0');
        frac_scale *= 10;
      }
      ++i;
      ++frac_digits;
    }
  }
  if (whole_digits + frac_digits == 0) {
    return Bad(what, "expected " + std::string(kind) + " (a number with an optional unit: " +
                         std::string(unit_list) + "), got " + Quote(text));
  }
  std::string_view unit = t.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (unit.empty() && (!bare_number_ok || frac_digits > 0)) {
    return Bad(what, Quote(text) + " has no unit: give an integer, or a string with a unit (" +
                         std::string(unit_list) + ")");
  }
  for (size_t k = 0; k < n_units; ++k) {
    const Unit& u = all_units[k];
    if (unit != u.name) continue;
    const u128 value = whole * u.scale + frac * u.scale / frac_scale;
    if (whole > kU64Max / u.scale || value > kU64Max) {
      return Bad(what, Quote(text) + " is too large");
    }
    return static_cast<uint64_t>(value);
  }
  return Bad(what, "unknown unit " + Quote(unit) + " in " + Quote(text) +
                       " (units: " + std::string(unit_list) + ")");
}

constexpr std::string_view kSizeUnitList = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB";
constexpr std::string_view kDurationUnitList = "ms, s, min, h";

// A JSON number that is a whole value >= 0, times `scale`.
Result<uint64_t> WholeNumber(std::string_view what, const json& value, uint64_t scale,
                             std::string_view kind) {
  if (value.is_number_unsigned()) {
    const u128 v = u128{value.get<uint64_t>()} * scale;
    if (v > kU64Max) return Bad(what, value.dump() + " is too large");
    return static_cast<uint64_t>(v);
  }
  if (value.is_number_integer()) {
    return Bad(what, "must be >= 0, got " + value.dump());
  }
  if (value.is_number_float()) {
    // 1.5 of what? A fraction needs its unit, in a string.
    return Bad(what,
               "expected an integer, or a string with a unit for a fraction, got " + value.dump());
  }
  return Bad(what, "expected " + std::string(kind) + ", got " + value.dump().substr(0, kMaxEchoChars));
}

}  // namespace

Result<uint64_t> ParseSizeText(std::string_view what, std::string_view text) {
  return ParseWithUnits(what, text, kSizeUnits, kSizeUnits.size(), "a size",
                        "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, K, M, G, T",
                        /*bare_number_ok=*/true);
}

Result<uint64_t> ParseDurationText(std::string_view what, std::string_view text) {
  return ParseWithUnits(what, text, kDurationUnits, kDurationUnits.size(), "a duration",
                        kDurationUnitList, /*bare_number_ok=*/true);
}

Result<uint64_t> ParseSize(std::string_view what, const json& value) {
  if (value.is_string()) {
    return ParseWithUnits(what, value.get<std::string>(), kSizeUnits,
                          kSizeUnits.size() - kShortUnits, "a size", kSizeUnitList,
                          /*bare_number_ok=*/false);
  }
  return WholeNumber(what, value, 1, "a size (bytes, or a string such as \"1.5GB\", \"512MiB\")");
}

Result<uint64_t> ParseDuration(std::string_view what, const json& value) {
  if (value.is_string()) {
    return ParseWithUnits(what, value.get<std::string>(), kDurationUnits, kDurationUnits.size(),
                          "a duration", kDurationUnitList, /*bare_number_ok=*/false);
  }
  return WholeNumber(what, value, 1000,
                     "a duration (milliseconds, or a string such as \"500ms\", \"2s\", \"1h\")");
}

}  // namespace kvtier::bindings
