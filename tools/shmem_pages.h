// What the kernel does with shared memory's transparent huge pages, for
// `kvtier serve` and `kvtier bench serve` (docs/server.md, "Huge pages"):
// the daemon's arena asks for them (MADV_HUGEPAGE), and the kernel gives
// them only when the system's shmem_enabled setting allows.
#ifndef KVTIER_TOOLS_SHMEM_PAGES_H_
#define KVTIER_TOOLS_SHMEM_PAGES_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace kvtier::cli {

// The chosen word of /sys/kernel/mm/transparent_hugepage/shmem_enabled
// ("always", "within_size", "advise", "never", "deny", "force"), or
// "unknown" when the file cannot be read (a kernel without THP).
std::string ShmemHugeSetting();

// Whether that setting gives huge pages to a mapping that asks for them.
bool ShmemHugeAllowed(const std::string& setting);

// The bytes of shared memory process `pid` maps in 2 MiB pages now
// (ShmemPmdMapped of /proc/PID/smaps_rollup), or 0.
uint64_t ShmemPmdMappedBytes(pid_t pid);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_SHMEM_PAGES_H_
