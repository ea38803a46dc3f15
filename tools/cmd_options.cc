// kvtier options [--markdown]: every option of docs/options.md (DESIGN.md
// §8), from the options table the bindings and --config parse with.
//   text:       name, type, default, one line each
//   --markdown: docs/options.md exactly (tests compare the two)
//   --json:     {"options": [{"name", "type", "default", "doc"}]}
#include <iomanip>
#include <iostream>
#include <memory>

#include "bindings/option_table.h"
#include "command.h"

namespace kvtier::cli {
namespace {

struct OptionsArgs {
  bool markdown = false;
};

int Run(const OptionsArgs& a, const CommonFlags& flags) {
  const auto& options = bindings::Options();
  if (a.markdown) {
    std::cout << bindings::OptionsMarkdown();
  } else if (flags.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const bindings::OptionInfo& o : options) {
      list.push_back(
          {{"name", o.name}, {"type", o.type}, {"default", o.default_value}, {"doc", o.doc}});
    }
    PrintJson({{"options", list}});
  } else {
    std::cout << std::left << std::setw(34) << "NAME" << std::setw(28) << "TYPE"
              << "DEFAULT\n";
    for (const bindings::OptionInfo& o : options) {
      std::cout << std::setw(34) << o.name << std::setw(28) << o.type << o.default_value << "\n";
    }
  }
  std::cout.flush();
  return kExitOk;
}

std::function<int()> SetupOptions(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<OptionsArgs>();
  app->add_flag("--markdown", a->markdown, "Print docs/options.md (the generated reference)");
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_COMMAND(options, "options",
               "List every cache option (Python keywords, C options_json, --config files)",
               SetupOptions);
}  // namespace kvtier::cli
