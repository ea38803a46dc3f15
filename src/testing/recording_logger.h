// RecordingLogger: a Logger (kvtier/logger.h) that keeps every line, for
// tests that check which events a tier sent, at what level, how often.
//
// Thread safety: every method from any thread (one mutex).
#ifndef KVTIER_TESTING_RECORDING_LOGGER_H_
#define KVTIER_TESTING_RECORDING_LOGGER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/logger.h"

namespace kvtier::testing {

class RecordingLogger final : public Logger {
 public:
  struct Line {
    LogLevel level;
    std::string message;
  };

  void Log(LogLevel level, std::string_view message) override {
    MutexLock lock(&mu_);
    lines_.push_back({level, std::string(message)});
  }

  std::vector<Line> Lines() {
    MutexLock lock(&mu_);
    return lines_;
  }
  // The lines whose message contains `needle`.
  std::vector<Line> Matching(std::string_view needle) {
    MutexLock lock(&mu_);
    std::vector<Line> out;
    for (const Line& l : lines_) {
      if (l.message.find(needle) != std::string::npos) out.push_back(l);
    }
    return out;
  }
  size_t Count(std::string_view needle) { return Matching(needle).size(); }
  void Clear() {
    MutexLock lock(&mu_);
    lines_.clear();
  }

 private:
  Mutex mu_;
  std::vector<Line> lines_ GUARDED_BY(mu_);
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTING_RECORDING_LOGGER_H_
