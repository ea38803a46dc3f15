#include "disk/counters.h"

namespace kvtier::disk {

void DiskCounters::CopyTo(DiskTierStats* out) const {
  out->saves = Get(saves);
  out->saves_persisted = Get(saves_persisted);
  out->saves_deduplicated = Get(saves_deduplicated);
  out->loads = Get(loads);
  out->hits = Get(hits);
  out->hits_pending = Get(hits_pending);
  out->misses = Get(misses);
  out->incompatible_misses = Get(incompatible_misses);
  out->evictions = Get(evictions);
  out->expired = Get(expired);
  out->unlink_failures = Get(unlink_failures);
  out->errors = Get(errors);
  out->inline_writes = Get(inline_writes);
  out->drops = Get(drops);
  out->quarantined = Get(quarantined);
  out->bytes_written = Get(bytes_written);
  out->bytes_read = Get(bytes_read);
  out->reconcile_passes = Get(reconcile_passes);
  out->reconcile_adopted = Get(reconcile_adopted);
  out->reconcile_rows_dropped = Get(reconcile_rows_dropped);
  out->reconcile_temps_removed = Get(reconcile_temps_removed);
  out->load_latency = load_latency;
  out->write_latency = write_latency;
}

}  // namespace kvtier::disk
