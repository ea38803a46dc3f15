#include "disk/counters.h"

namespace kvtier::disk {

void DiskCounters::CopyTo(DiskTierStats* out) const {
#define KVTIER_COPY_OUT(name, kind, help) stats::CopyOut(name, &out->name);
  KVTIER_DISK_COUNTERS(KVTIER_COPY_OUT)
#undef KVTIER_COPY_OUT
}

}  // namespace kvtier::disk
