// `kvtier bench <what>`: each benchmark lives in tools/cmd_bench_<what>.cc
// and registers itself with KVTIER_BENCH; tools/cmd_bench.cc makes them
// subcommands of `kvtier bench`. Same contract as KVTIER_COMMAND
// (tools/command.h): the setup adds options and returns the runner.
#ifndef KVTIER_TOOLS_BENCH_COMMAND_H_
#define KVTIER_TOOLS_BENCH_COMMAND_H_

#include <string>
#include <vector>

#include "command.h"

namespace kvtier::cli {

std::vector<CommandInfo>& BenchRegistry();

struct BenchRegistrar {
  BenchRegistrar(std::string name, std::string help, CommandSetup setup) {
    BenchRegistry().push_back({std::move(name), std::move(help), std::move(setup)});
  }
};

#define KVTIER_BENCH(ident, name, help, setup) \
  static ::kvtier::cli::BenchRegistrar kvtier_bench_##ident(name, help, setup)

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_BENCH_COMMAND_H_
