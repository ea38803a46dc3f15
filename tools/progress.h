// Progress of a long `kvtier` command on a terminal (issue 33 item 9):
// replay, synth, gc and every bench draw on stderr only when stderr is a
// terminal and --json is not given, so pipes, scripts and JSON readers see
// nothing of it.
//
//   ProgressBar: "\r[####    ]  42.0% 420/1000 blocks", redrawn in place
//                at most once per 0.1%, ended with "\n" by Finish().
//   Step:        "kvtier <command>: <what>...\n", one line per step of a
//                command whose steps have no count (a bench's phases, gc's
//                plan and removal).
//   UnitProgress: a ProgressBar per unit, one after the other, for
//                CacheFolderOptions::progress (stats, verify, gc walk the
//                folder's subfolders; gc then evicts bytes over its budget).
//                A command whose stdout lists what it finds as it goes
//                (verify, gc) draws it only when stdout is not the terminal.
//
// Thread safety: one thread draws.
#ifndef KVTIER_TOOLS_PROGRESS_H_
#define KVTIER_TOOLS_PROGRESS_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace kvtier::cli {

// Whether progress is drawn: stderr is a terminal and the output is not JSON.
inline bool ProgressOnTerminal(bool json) { return !json && isatty(STDERR_FILENO) == 1; }

// A one-line progress bar on stderr (see above).
class ProgressBar {
 public:
  // `json`: --json was given (no bar).
  explicit ProgressBar(std::string unit, bool json = false)
      : unit_(std::move(unit)), enabled_(ProgressOnTerminal(json)) {}
  ~ProgressBar() { Finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void Update(uint64_t done, uint64_t total) {
    if (!enabled_ || total == 0) return;
    const uint64_t permille = done * 1000 / total;
    if (permille == last_permille_) return;
    last_permille_ = permille;
    constexpr int kWidth = 40;
    const int filled = static_cast<int>(done * kWidth / total);
    std::fprintf(stderr, "\r[%s%s] %5.1f%% %llu/%llu %s", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, ' ').c_str(), permille / 10.0,
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                 unit_.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
  void Finish() {
    if (drawn_) std::fputs("\n", stderr);
    drawn_ = false;
  }

 private:
  const std::string unit_;
  const bool enabled_;
  uint64_t last_permille_ = UINT64_MAX;
  bool drawn_ = false;
};

// "kvtier <command>: <what>..." on stderr when ProgressOnTerminal(json).
inline void Step(bool json, const std::string& command, const std::string& what) {
  if (!ProgressOnTerminal(json)) return;
  std::fprintf(stderr, "kvtier %s: %s...\n", command.c_str(), what.c_str());
  std::fflush(stderr);
}

// Whether a command whose stdout streams its findings draws progress:
// ProgressOnTerminal, and stdout is not that terminal (its lines are).
inline bool ProgressBesideOutput(bool json) {
  return ProgressOnTerminal(json) && isatty(STDOUT_FILENO) != 1;
}

// A ProgressBar per unit, in turn (see above). `enabled`: whether to draw.
class UnitProgress {
 public:
  explicit UnitProgress(bool enabled) : enabled_(enabled) {}
  void Update(const char* unit, uint64_t done, uint64_t total) {
    if (!enabled_) return;
    if (bar_ == nullptr || unit_ != unit) {
      bar_.reset();  // ends the previous unit's line
      unit_ = unit;
      bar_ = std::make_unique<ProgressBar>(unit_);
    }
    bar_->Update(done, total);
  }
  // Ends the line of the bar drawn last, if any.
  void Finish() { bar_.reset(); }

 private:
  const bool enabled_;
  std::string unit_;
  std::unique_ptr<ProgressBar> bar_;
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_PROGRESS_H_
