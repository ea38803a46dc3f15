// kvtier: the command-line tool (DESIGN.md §6).
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

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
}
