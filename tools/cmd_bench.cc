// `kvtier bench <what>`: runs one of the registered benchmarks
// (tools/bench_command.h). Each prints our figures, the limit measured in the
// same run and their ratio.
#include "bench_command.h"

#include <memory>

namespace kvtier::cli {

std::vector<CommandInfo>& BenchRegistry() {
  static std::vector<CommandInfo> registry;
  return registry;
}

namespace {

std::function<int()> SetupBench(CLI::App* app, const CommonFlags* flags) {
  app->require_subcommand(1);
  struct Sub {
    CLI::App* app;
    std::shared_ptr<CommonFlags> flags;  // --json given after the benchmark's name
    std::function<int()> run;
  };
  std::vector<Sub> subs;
  for (const CommandInfo& b : BenchRegistry()) {
    Sub s;
    s.app = app->add_subcommand(b.name, b.help);
    s.flags = std::make_shared<CommonFlags>();
    s.app->add_flag("--json", s.flags->json, "Print one JSON object on stdout");
    s.run = b.setup(s.app, s.flags.get());
    subs.push_back(std::move(s));
  }
  return [subs, flags] {
    for (const Sub& s : subs) {
      if (!s.app->parsed()) continue;
      s.flags->json = s.flags->json || flags->json;
      return s.run();
    }
    return kExitUsage;
  };
}

}  // namespace
KVTIER_COMMAND(bench, "bench", "Benchmarks against limits measured in the same run", SetupBench);
}  // namespace kvtier::cli
