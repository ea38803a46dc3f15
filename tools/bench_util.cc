#include "bench_util.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>

#include "kvtier/env.h"

namespace kvtier::cli {

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Result<ModelLayout> BenchLayout(const CLI::Option* layout_opt, const std::string& layout,
                                const CLI::Option* block_bytes_opt, uint64_t block_bytes,
                                uint64_t max_block_bytes, const std::string& range_error) {
  const bool has_layout = layout_opt->count() > 0;
  const bool has_bytes = block_bytes_opt->count() > 0;
  if (has_layout == has_bytes) {
    return Status::InvalidArgument("give exactly one of --layout or --block-bytes");
  }
  if (has_layout) return ModelLayout::Resolve(Env::Default(), layout);
  if (block_bytes == 0 || block_bytes > max_block_bytes) {
    return Status::InvalidArgument(range_error);
  }
  ModelLayout l;
  l.name = "bytes";
  l.block_tokens = 1;
  LayerSpec layer;
  layer.cache_type = "raw";
  TensorSpec t;
  t.role = "bytes";
  t.dtype = DType::kU8;
  t.shape = {block_bytes};
  layer.states.push_back(t);
  l.layers.push_back(layer);
  KVTIER_RETURN_IF_ERROR(l.Validate());
  return l;
}

Result<uint64_t> MemAvailableBytes() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream in(line.substr(13));
    uint64_t kib = 0;
    std::string unit;
    if (in >> kib >> unit && unit == "kB") return SatMul(kib, 1024);
    break;
  }
  return Status::IOError("cannot read MemAvailable from /proc/meminfo", 0);
}

Status CheckMemory(const std::string& what, uint64_t needed) {
  KVTIER_ASSIGN_OR_RETURN(uint64_t available, MemAvailableBytes());
  if (needed <= available) return Status::Ok();
  return Status::InvalidArgument(what + " needs " + std::to_string(needed) + " bytes of RAM; " +
                                 std::to_string(available) + " are available (MemAvailable)");
}

uint64_t SatAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

uint64_t SatMul(uint64_t a, uint64_t b) {
  return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

Status DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  f.flush();
  if (!f) {
    return Status::FailedPrecondition(
        "--drop-caches: cannot write /proc/sys/vm/drop_caches (needs root)");
  }
  return Status::Ok();
}

}  // namespace kvtier::cli
