#include "remote/counters.h"

namespace kvtier::remote {

void RemoteCounters::CopyTo(RemoteTierStats* out) const {
  out->exists_calls = Get(exists_calls);
  out->exists_keys = Get(exists_keys);
  out->exists_found = Get(exists_found);
  out->lookups = Get(lookups);
  out->hits = Get(hits);
  out->misses = Get(misses);
  out->misses_unavailable = Get(misses_unavailable);
  out->bad_values = Get(bad_values);
  out->bad_values_deleted = Get(bad_values_deleted);
  out->too_small = Get(too_small);
  out->alloc_failures = Get(alloc_failures);
  out->bytes_read = Get(bytes_read);
  out->puts = Get(puts);
  out->puts_deduplicated = Get(puts_deduplicated);
  out->stored = Get(stored);
  out->skipped_existing = Get(skipped_existing);
  out->drops_queue_full = Get(drops_queue_full);
  out->drops_unavailable = Get(drops_unavailable);
  out->drops_oom = Get(drops_oom);
  out->drops_error = Get(drops_error);
  out->drops_closed = Get(drops_closed);
  out->bytes_written = Get(bytes_written);
  out->erases = Get(erases);
  out->connects = Get(connects);
  out->connect_failures = Get(connect_failures);
  out->auth_failures = Get(auth_failures);
  out->timeouts = Get(timeouts);
  out->protocol_errors = Get(protocol_errors);
  out->io_errors = Get(io_errors);
  out->error_replies = Get(error_replies);
  out->moved = Get(moved);
  out->asked = Get(asked);
  out->retries = Get(retries);
  out->redirect_limit = Get(redirect_limit);
  out->topology_refreshes = Get(topology_refreshes);
  out->topology_failures = Get(topology_failures);
  out->breaker_opens = Get(breaker_opens);
  out->breaker_rejections = Get(breaker_rejections);
  out->exists_latency = exists_latency;
  out->get_latency = get_latency;
  out->write_latency = write_latency;
}

}  // namespace kvtier::remote
