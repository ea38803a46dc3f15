// kvtier: the command-line tool (DESIGN.md §6). main() only dispatches:
// each subcommand registers itself from its tools/cmd_<name>.cc
// (command.h), and the rules every option follows are option_rules.h's.
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "option_rules.h"

int main(int argc, char** argv) {
  using namespace kvtier::cli;
  CLI::App app{"kvtier: a tiered, persistent KV cache for LLM inference engines"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  app.set_version_flag("--version", kVersionLine, "Print the version (as `kvtier version`)");
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
  AcceptSizeUnits(&app);
  FollowFolderLinks(&app);
  // No exception leaves main: the library returns Status, but the CLI's own
  // code (CLI11, nlohmann::json, std containers) may throw, and an uncaught
  // exception would abort with a core dump instead of one line.
  try {
    // A first word that names no command: say so (CLI11 would only say that
    // a subcommand is required).
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known |= argc > 1 && sub->get_name() == argv[1];
    }
    if (argc > 1 && argv[1][0] != '-' && !known) {
      std::cerr << "kvtier: unknown command '" << std::string(argv[1]).substr(0, 100)
                << "' (see --help)\n";
      return kExitUsage;
    }
    // Likewise under a group (`kvtier bench foo`), naming the ones it has.
    if (auto group = argc > 1 ? groups.find(argv[1]) : groups.end(); group != groups.end()) {
      std::string names;
      bool known_sub = false;
      for (const CLI::App* sub : group->second->get_subcommands({})) {
        names += (names.empty() ? "" : ", ") + sub->get_name();
        known_sub |= argc > 2 && sub->get_name() == argv[2];
      }
      if (argc < 3 || (argv[2][0] != '-' && !known_sub)) {
        std::cerr << "kvtier: "
                  << (argc < 3 ? "'" + group->first + "' needs a command"
                               : "unknown " + group->first + " command '" +
                                     std::string(argv[2]).substr(0, 100) + "'")
                  << " (one of: " << names << ")\n";
        return kExitUsage;
      }
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
