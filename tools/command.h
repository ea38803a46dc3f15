// The `kvtier` command's plumbing: each subcommand lives in its own
// tools/cmd_<name>.cc and registers itself with KVTIER_COMMAND. The CLI is
// the only place that reads argv or the environment.
#ifndef KVTIER_TOOLS_COMMAND_H_
#define KVTIER_TOOLS_COMMAND_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and found a problem
// What `kvtier version` and `kvtier --version` print.
inline constexpr char kVersionLine[] = "kvtier 0.1.0 (block key v1, block file v1)";
inline constexpr int kExitUsage = 2;    // bad arguments or input

// Options every subcommand takes.
struct CommonFlags {
  bool json = false;  // one JSON object on stdout instead of text
};

// Sets up the subcommand's options on `app` and returns what runs it.
using CommandSetup = std::function<std::function<int()>(CLI::App* app, const CommonFlags* flags)>;

struct CommandInfo {
  std::string name;
  std::string help;
  CommandSetup setup;
  // Empty for a top-level command; else the group it sits under, e.g.
  // "bench" for `kvtier bench cache`. main() creates each group once.
  std::string parent;
};

std::vector<CommandInfo>& CommandRegistry();

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string help, CommandSetup setup,
                   std::string parent = "") {
    CommandRegistry().push_back(
        {std::move(name), std::move(help), std::move(setup), std::move(parent)});
  }
};

#define KVTIER_COMMAND(ident, name, help, setup) \
  static ::kvtier::cli::CommandRegistrar kvtier_command_##ident(name, help, setup)

// A command under a group: KVTIER_SUBCOMMAND(bench_cache, "bench", "cache", ...)
// registers `kvtier bench cache`.
#define KVTIER_SUBCOMMAND(ident, parent, name, help, setup) \
  static ::kvtier::cli::CommandRegistrar kvtier_command_##ident(name, help, setup, parent)

// Prints "kvtier: <message>" (or {"error": ...} with --json) and returns
// the exit code for a bad-input / failed-call error.
int ReportError(const CommonFlags& flags, const Status& status, int exit_code = kExitUsage);

// Prints a JSON object (pretty with --json? no: one line) to stdout.
void PrintJson(const nlohmann::json& j);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_COMMAND_H_
