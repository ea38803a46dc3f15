// kvtier: the command-line tool (DESIGN.md §6).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <new>
#include <string>
#include <string_view>

#include "command.h"

namespace kvtier::cli {

std::vector<CommandInfo>& CommandRegistry() {
  static std::vector<CommandInfo> registry;
  return registry;
}

int ReportError(const CommonFlags& flags, const Status& status, int exit_code) {
  if (flags.json) {
    PrintJson({{"error", status.message()}, {"code", std::string(StatusCodeName(status.code()))}});
  }
  std::cerr << "kvtier: " << status.message() << "\n";
  return exit_code;
}

void PrintJson(const nlohmann::json& j) {
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

Result<std::vector<uint32_t>> ParseTokenList(const std::string& text) {
  // Ids are separated by commas and/or whitespace (token files hold one id a
  // line or comma lists). Empty or blank text is zero tokens; a comma with no
  // id before it is an error; one trailing comma is allowed.
  auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  };
  std::vector<uint32_t> out;
  const size_t n = text.size();
  size_t pos = 0;
  bool after_comma = false;
  while (true) {
    while (pos < n && is_space(text[pos])) ++pos;
    if (pos == n) break;
    if (text[pos] == ',') {
      if (out.empty() || after_comma) {
        return Status::InvalidArgument("empty token id at offset " + std::to_string(pos));
      }
      after_comma = true;
      ++pos;
      continue;
    }
    const size_t start = pos;
    while (pos < n && text[pos] != ',' && !is_space(text[pos])) ++pos;
    std::string_view item(text.data() + start, pos - start);
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || p != item.data() + item.size() || v > UINT32_MAX) {
      return Status::InvalidArgument("bad token id '" + std::string(item.substr(0, 40)) +
                                     "' at offset " + std::to_string(start) +
                                     " (expected an integer 0..4294967295)");
    }
    out.push_back(static_cast<uint32_t>(v));
    after_comma = false;
  }
  return out;
}

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

}  // namespace
}  // namespace kvtier::cli

int main(int argc, char** argv) {
  using namespace kvtier::cli;
  CLI::App app{"kvtier: a tiered, persistent KV cache for LLM inference engines"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  // DESIGN.md §6: bad input gives a one-line error (CLI11's default adds a
  // second "Run with --help" line).
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "kvtier: " + std::string(e.what()) + " (see --help)\n";
  });

  std::vector<std::unique_ptr<CommonFlags>> flags;
  std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
  std::map<std::string, CLI::App*> groups;  // e.g. "bench" → `kvtier bench`
  for (const auto& cmd : CommandRegistry()) {
    CLI::App* parent = &app;
    if (!cmd.parent.empty()) {
      CLI::App*& group = groups[cmd.parent];
      if (group == nullptr) {
        group = app.add_subcommand(cmd.parent, "Subcommands of '" + cmd.parent + "'");
        group->require_subcommand(1);
      }
      parent = group;
    }
    CLI::App* sub = parent->add_subcommand(cmd.name, cmd.help);
    flags.push_back(std::make_unique<CommonFlags>());
    sub->add_flag("--json", flags.back()->json, "Print one JSON object on stdout");
    runners.emplace_back(sub, cmd.setup(sub, flags.back().get()));
  }
  RequireDecimalIntegers(&app);
  FollowFolderLinks(&app);
  // No exception leaves main: the library returns Status, but the CLI's own
  // code (CLI11, nlohmann::json, std containers) may throw, and an uncaught
  // exception would abort with a core dump instead of one line.
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int rc = app.exit(e);
      return rc == 0 ? 0 : kExitUsage;
    }
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    // Sizes are checked before allocating; one that slipped through is too
    // large for this machine, which is the input's fault.
    std::cerr << "kvtier: out of memory (a size given is too large for this machine)\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "kvtier: internal error: " << std::string(e.what()).substr(0, 200) << "\n";
    return kExitFailure;
  }
}
