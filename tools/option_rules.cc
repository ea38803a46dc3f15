#include "option_rules.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "bindings/option_table.h"

namespace kvtier::cli {
namespace {

// CLI11 reads integer options with strtoull/strtoll, base 0: "-5" wraps to
// 2^64 - 5 in an unsigned option, "010" is octal, "0x10" hex, " 5" is 5.
// Every integer option of every command takes plain decimal instead, and a
// value that does not fit is refused with its name, not wrapped or clamped.
CLI::Validator DecimalInteger(bool allow_negative) {
  return CLI::Validator(
      [allow_negative](std::string& text) -> std::string {
        std::string_view digits = text;
        const bool negative = allow_negative && !digits.empty() && digits[0] == '-';
        if (negative) digits.remove_prefix(1);
        const bool all_digits =
            !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
        const std::string shown = "'" + text.substr(0, 40) + (text.size() > 40 ? "...'" : "'");
        if (!all_digits) {
          return std::string(allow_negative ? "expected a decimal integer"
                                            : "expected a non-negative decimal integer") +
                 ", got " + shown;
        }
        bool fits = false;
        if (allow_negative) {
          int64_t v = 0;
          auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
          fits = ec == std::errc() && p == text.data() + text.size();
        } else {
          uint64_t v = 0;
          auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
          fits = ec == std::errc() && p == digits.data() + digits.size();
        }
        if (!fits) return shown + " is too large";
        // CLI11 converts with base 0, where a leading 0 means octal.
        const size_t zeros = std::min(digits.find_first_not_of('0'), digits.size() - 1);
        text = (negative ? "-" : "") + std::string(digits.substr(zeros));
        return std::string();
      },
      "", "decimal");
}

// A folder option given as a symlink to a folder means that folder. The
// library judges paths with lstat (so that a symlinked block file is never
// followed) and would refuse the link itself; the CLI resolves it once.
std::string FollowFolderLink(std::string path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec)) || ec) return path;
  fs::path target = fs::canonical(path, ec);
  if (ec || !fs::is_directory(target, ec) || ec) return path;
  return target.string();
}

// The folder options of every command (ls, stats, gc and verify take their
// folder as an argument and follow links themselves, keeping the name the
// user gave in what they print).
constexpr std::string_view kFolderOptions[] = {"--dir", "--cache", "--out", "--disk-dir"};

}  // namespace

void FollowFolderLinks(CLI::App* app) {
  for (CLI::Option* opt : app->get_options()) {
    for (std::string_view name : kFolderOptions) {
      if (opt->check_name(std::string(name))) {
        opt->transform([](std::string path) { return FollowFolderLink(std::move(path)); }, "",
                       "folder");
      }
    }
  }
  for (CLI::App* sub : app->get_subcommands({})) FollowFolderLinks(sub);
}

void AcceptSizeUnits(CLI::App* app) {
  for (CLI::Option* opt : app->get_options()) {
    // get_type_name() appends each validator's description ("SIZE:INT in
    // [1 - 68719476736]" with a Range check): the name starts with SIZE.
    if (!opt->get_type_name().starts_with("SIZE")) continue;
    // To plain decimal bytes before CLI11 converts the text to an integer.
    opt->transform(CLI::Validator(
        [](std::string& text) -> std::string {
          Result<uint64_t> bytes = bindings::ParseSizeText("size", text);
          if (!bytes.ok()) {
            std::string msg = bytes.status().message();
            if (msg.starts_with("size: ")) msg.erase(0, 6);
            return msg;
          }
          text = std::to_string(*bytes);
          return std::string();
        },
        "", "size"));
  }
  for (CLI::App* sub : app->get_subcommands({})) AcceptSizeUnits(sub);
}

void RequireDecimalIntegers(CLI::App* app) {
  for (CLI::Option* opt : app->get_options()) {
    const std::string type = opt->get_type_name();
    // A transform (check() would discard the normalized text), placed first
    // so that range checks see plain decimal.
    if (type.rfind("UINT", 0) == 0) {
      opt->transform(DecimalInteger(/*allow_negative=*/false));
    } else if (type.rfind("INT", 0) == 0) {
      opt->transform(DecimalInteger(/*allow_negative=*/true));
    }
  }
  for (CLI::App* sub : app->get_subcommands({})) RequireDecimalIntegers(sub);
}

}  // namespace kvtier::cli
