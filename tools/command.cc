#include "command.h"

#include <iostream>
#include <string>
#include <vector>

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

}  // namespace kvtier::cli
