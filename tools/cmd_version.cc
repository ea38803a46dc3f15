#include "command.h"

namespace kvtier::cli {
namespace {

std::function<int()> SetupVersion(CLI::App*, const CommonFlags* flags) {
  return [flags] {
    if (flags->json) {
      PrintJson({{"version", "0.1.0"}, {"block_key", 1}, {"block_file", 1}});
    } else {
      std::cout << kVersionLine << "\n";
    }
    return kExitOk;
  };
}

}  // namespace
KVTIER_COMMAND(version, "version", "Print the version and format versions", SetupVersion);
}  // namespace kvtier::cli
