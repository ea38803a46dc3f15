#include "shmem_pages.h"

#include <fstream>
#include <sstream>

namespace kvtier::cli {

std::string ShmemHugeSetting() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string word;
  while (f >> word) {
    if (word.size() > 2 && word.front() == '[' && word.back() == ']') {
      return word.substr(1, word.size() - 2);
    }
  }
  return "unknown";
}

bool ShmemHugeAllowed(const std::string& setting) {
  return setting == "always" || setting == "within_size" || setting == "advise" ||
         setting == "force";
}

uint64_t ShmemPmdMappedBytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  while (std::getline(f, line)) {
    if (!line.starts_with("ShmemPmdMapped:")) continue;
    std::istringstream in(line.substr(15));
    uint64_t kib = 0;
    std::string unit;
    if (in >> kib >> unit && unit == "kB") return kib * 1024;
    break;
  }
  return 0;
}

}  // namespace kvtier::cli
