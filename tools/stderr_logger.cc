#include "stderr_logger.h"

#include <cstdio>
#include <string>

namespace kvtier::cli {
namespace {

class StderrLogger final : public Logger {
 public:
  void Log(LogLevel level, std::string_view message) override {
    if (level < LogLevel::kInfo) return;
    std::string line = "kvtier: ";
    line += LogLevelName(level);
    line += ": ";
    line += message;
    line += '\n';
    // One fwrite per line: stdio locks the stream, so lines from several
    // threads never interleave.
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
  }
};

}  // namespace

Logger* StderrLog() {
  static Logger* const logger = new StderrLogger();
  return logger;
}

}  // namespace kvtier::cli
