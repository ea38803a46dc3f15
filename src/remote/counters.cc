#include "remote/counters.h"

namespace kvtier::remote {

void RemoteCounters::CopyTo(RemoteTierStats* out) const {
#define KVTIER_COPY_OUT(name, kind, help) stats::CopyOut(name, &out->name);
  KVTIER_REMOTE_COUNTERS(KVTIER_COPY_OUT)
#undef KVTIER_COPY_OUT
}

}  // namespace kvtier::remote
