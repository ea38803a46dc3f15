// The full JSON and Prometheus text of populated stats (every field its own
// value, see stats_test_util.h), byte for byte as main printed them before
// the stats tables (issue 19): the tables changed how the text is made, not
// the text. One gauge came later: the disk's allocated_bytes (issue 25),
// left 0 by stats_test_util.h so that every other value stays as it was;
// so did the remote tier's exists_late, mac_failures and tls_failures
// (issue 23). Every Prometheus family then got its `# HELP` line, the help
// of its table entry, right before its `# TYPE` line (issue 35).
#include <gtest/gtest.h>

#include <string>

#include "cache/stats_test_util.h"
#include "kvtier/disk_tier.h"
#include "kvtier/remote_tier.h"
#include "kvtier/tiered_cache.h"

namespace kvtier {
namespace {

using stats_test::PopulatedCache;
using stats_test::PopulatedDisk;
using stats_test::PopulatedRemote;

// CacheStats::ToJson() of PopulatedCache(): one line, cut here into pieces.
const std::string kCacheJson =
    R"json({"bytes_loaded_disk":5022,"bytes_loaded_host":5021,"bytes_loaded_remote":5023,"bytes_promote)json"
    R"json(d":5026,"bytes_stored":5020,"bytes_written_back":5024,"bytes_written_through":5025,"close_dr)json"
    R"json(opped":5034,"disk":{"allocated_bytes":0,"bytes":1024,"bytes_read":1016,"bytes_written":1015,"compatible_bytes":1)json"
    R"json(026,"compatible_entries":1025,"configured_max_bytes":1027,"drops":1013,"effective_max_bytes")json"
    R"json(:1028,"entries":1023,"errors":1011,"evictions":1008,"expired":1009,"hits":1004,"hits_pending)json"
    R"json(":1005,"incompatible_misses":1007,"inline_writes":1012,"load_latency":{"buckets":[{"count":1)json"
    R"json(,"lt_us":1},{"count":1,"lt_us":8},{"count":1,"lt_us":32},{"count":1,"lt_us":8192}],"count":4)json"
    R"json(,"max_us":7000,"p50_us":7,"p99_us":7000,"sum_us":7029},"loads":1003,"misses":1006,"per_signa)json"
    R"json(ture":[{"blocks":1030,"bytes":1031,"compatible":true,"signature":"sig\"a\\b\nc"},{"blocks":1)json"
    R"json(032,"bytes":1033,"compatible":false,"signature":"other"}],"quarantine_files":1029,"quarantin)json"
    R"json(ed":1014,"queue_blocks":1022,"queue_bytes":1021,"read_only_skips":0,"reconcile_adopted":1018,"reconcile_passes":)json"
    R"json(1017,"reconcile_rows_dropped":1019,"reconcile_running":true,"reconcile_temps_removed":1020,")json"
    R"json(saves":1000,"saves_deduplicated":1002,"saves_persisted":1001,"unlink_failures":1010,"write_l)json"
    R"json(atency":{"buckets":[{"count":1,"lt_us":1},{"count":1,"lt_us":16},{"count":1,"lt_us":64},{"co)json"
    R"json(unt":1,"lt_us":16384}],"count":4,"max_us":11000,"p50_us":15,"p99_us":11000,"sum_us":11045}},)json"
    R"json("hit_ratio":0.3125,"hits_disk":5002,"hits_host":5001,"hits_remote":5003,"host":{"bytes":3001)json"
    R"json(,"dirty_bytes":3003,"dirty_dropped":3015,"dirty_entries":3002,"dirty_evictions":3014,"entrie)json"
    R"json(s":3000,"erases":3012,"evictions":3013,"handoff_hits":3006,"hits":3005,"misses":3007,"put_fa)json"
    R"json(ilures":3011,"puts":3008,"rejections":3010,"replacements":3009,"reservation_failures":3018,")json"
    R"json(reservations":3017,"reserved_bytes":3004,"sink_errors":3016},"host_budget":{"capacity_bytes")json"
    R"json(:4000,"entries":4003,"evictions":4005,"reserved_bytes":4002,"tiers":4004,"used_bytes":4001},)json"
    R"json("index_bytes":5043,"index_disk_keys":5042,"index_host_keys":5041,"index_keys":5040,"load_err)json"
    R"json(ors":5005,"load_latency":{"buckets":[{"count":1,"lt_us":1},{"count":1,"lt_us":32},{"count":1)json"
    R"json(,"lt_us":128},{"count":1,"lt_us":32768}],"count":4,"max_us":23000,"p50_us":31,"p99_us":23000)json"
    R"json(,"sum_us":23093},"loads_cancelled":5006,"lookups":5000,"match_blocks":5008,"match_disk_probe)json"
    R"json(s":5009,"match_remote_found":5012,"match_remote_probes":5011,"matches":5007,"misses":5004,"p)json"
    R"json(reloads":5033,"promotion_failures":5030,"promotions":5029,"read_buffer_free_bytes":5039,"rea)json"
    R"json(d_buffer_fresh_bytes":5037,"read_buffers":5035,"read_buffers_prefaulted":5038,"read_buffers_)json"
    R"json(reused":5036,"remote":{"alloc_failures":2010,"asked":2031,"auth_failures":2025,"bad_values":)json"
    R"json(2007,"bad_values_deleted":2008,"breaker_opens":2036,"breaker_rejections":2037,"bytes_read":2)json"
    R"json(011,"bytes_written":2021,"connect_failures":2024,"connections":2042,"connects":2023,"drops_c)json"
    R"json(losed":2020,"drops_error":2019,"drops_oom":2018,"drops_queue_full":2016,"drops_unavailable":)json"
    R"json(2017,"erases":2022,"error_replies":2029,"exists_calls":2000,"exists_found":2002,"exists_keys)json"
    R"json(":2001,"exists_late":0,"exists_latency":{"buckets":[{"count":1,"lt_us":1},{"count":1,"lt_us":16},{"count":1,)json"
    R"json("lt_us":64},{"count":1,"lt_us":16384}],"count":4,"max_us":13000,"p50_us":15,"p99_us":13000,")json"
    R"json(sum_us":13053},"get_latency":{"buckets":[{"count":1,"lt_us":1},{"count":1,"lt_us":32},{"coun)json"
    R"json(t":1,"lt_us":64},{"count":1,"lt_us":32768}],"count":4,"max_us":17000,"p50_us":31,"p99_us":17)json"
    R"json(000,"sum_us":17069},"hits":2004,"io_errors":2028,"lookups":2003,"mac_failures":0,"misses":2005,"misses_unavai)json"
    R"json(lable":2006,"moved":2030,"nodes":2040,"nodes_down":2041,"protocol_errors":2027,"puts":2012,")json"
    R"json(puts_deduplicated":2013,"queue_blocks":2039,"queue_bytes":2038,"redirect_limit":2033,"retrie)json"
    R"json(s":2032,"skipped_existing":2015,"stored":2014,"timeouts":2026,"tls_failures":0,"too_small":2009,"topology_fai)json"
    R"json(lures":2035,"topology_refreshes":2034,"write_latency":{"buckets":[{"count":1,"lt_us":1},{"co)json"
    R"json(unt":1,"lt_us":32},{"count":1,"lt_us":64},{"count":1,"lt_us":32768}],"count":4,"max_us":1900)json"
    R"json(0,"p50_us":31,"p99_us":19000,"sum_us":19077}},"remote_lookups":5013,"remote_misses":5014,"re)json"
    R"json(mote_promotions":5031,"remote_puts_dropped":5019,"remote_puts_queued":5018,"reservation_fail)json"
    R"json(ures":5032,"stale_disk_hints":5010,"store_bypasses":5017,"store_errors":5016,"store_latency")json"
    R"json(:{"buckets":[{"count":1,"lt_us":1},{"count":1,"lt_us":32},{"count":1,"lt_us":128},{"count":1)json"
    R"json(,"lt_us":32768}],"count":4,"max_us":29000,"p50_us":31,"p99_us":29000,"sum_us":29117},"stores)json"
    R"json(":5015,"write_back_errors":5028,"write_backs":5027})json";

// DiskTierStats::ToJson() of PopulatedDisk().
const std::string kDiskJson =
    R"json({"allocated_bytes":0,"bytes":1024,"bytes_read":1016,"bytes_written":1015,"compatible_bytes":1026,"compatible_ent)json"
    R"json(ries":1025,"configured_max_bytes":1027,"drops":1013,"effective_max_bytes":1028,"entries":102)json"
    R"json(3,"errors":1011,"evictions":1008,"expired":1009,"hits":1004,"hits_pending":1005,"incompatibl)json"
    R"json(e_misses":1007,"inline_writes":1012,"load_latency":{"buckets":[{"count":1,"lt_us":1},{"count)json"
    R"json(":1,"lt_us":8},{"count":1,"lt_us":32},{"count":1,"lt_us":8192}],"count":4,"max_us":7000,"p50)json"
    R"json(_us":7,"p99_us":7000,"sum_us":7029},"loads":1003,"misses":1006,"per_signature":[{"blocks":10)json"
    R"json(30,"bytes":1031,"compatible":true,"signature":"sig\"a\\b\nc"},{"blocks":1032,"bytes":1033,"c)json"
    R"json(ompatible":false,"signature":"other"}],"quarantine_files":1029,"quarantined":1014,"queue_blo)json"
    R"json(cks":1022,"queue_bytes":1021,"read_only_skips":0,"reconcile_adopted":1018,"reconcile_passes":1017,"reconcile_row)json"
    R"json(s_dropped":1019,"reconcile_running":true,"reconcile_temps_removed":1020,"saves":1000,"saves_)json"
    R"json(deduplicated":1002,"saves_persisted":1001,"unlink_failures":1010,"write_latency":{"buckets":)json"
    R"json([{"count":1,"lt_us":1},{"count":1,"lt_us":16},{"count":1,"lt_us":64},{"count":1,"lt_us":1638)json"
    R"json(4}],"count":4,"max_us":11000,"p50_us":15,"p99_us":11000,"sum_us":11045}})json";

// RemoteTierStats::ToJson() of PopulatedRemote().
const std::string kRemoteJson =
    R"json({"alloc_failures":2010,"asked":2031,"auth_failures":2025,"bad_values":2007,"bad_values_delet)json"
    R"json(ed":2008,"breaker_opens":2036,"breaker_rejections":2037,"bytes_read":2011,"bytes_written":20)json"
    R"json(21,"connect_failures":2024,"connections":2042,"connects":2023,"drops_closed":2020,"drops_err)json"
    R"json(or":2019,"drops_oom":2018,"drops_queue_full":2016,"drops_unavailable":2017,"erases":2022,"er)json"
    R"json(ror_replies":2029,"exists_calls":2000,"exists_found":2002,"exists_keys":2001,"exists_late":0,"exists_latency)json"
    R"json(":{"buckets":[{"count":1,"lt_us":1},{"count":1,"lt_us":16},{"count":1,"lt_us":64},{"count":1)json"
    R"json(,"lt_us":16384}],"count":4,"max_us":13000,"p50_us":15,"p99_us":13000,"sum_us":13053},"get_la)json"
    R"json(tency":{"buckets":[{"count":1,"lt_us":1},{"count":1,"lt_us":32},{"count":1,"lt_us":64},{"cou)json"
    R"json(nt":1,"lt_us":32768}],"count":4,"max_us":17000,"p50_us":31,"p99_us":17000,"sum_us":17069},"h)json"
    R"json(its":2004,"io_errors":2028,"lookups":2003,"mac_failures":0,"misses":2005,"misses_unavailable":2006,"moved":20)json"
    R"json(30,"nodes":2040,"nodes_down":2041,"protocol_errors":2027,"puts":2012,"puts_deduplicated":201)json"
    R"json(3,"queue_blocks":2039,"queue_bytes":2038,"redirect_limit":2033,"retries":2032,"skipped_exist)json"
    R"json(ing":2015,"stored":2014,"timeouts":2026,"tls_failures":0,"too_small":2009,"topology_failures":2035,"topology_)json"
    R"json(refreshes":2034,"write_latency":{"buckets":[{"count":1,"lt_us":1},{"count":1,"lt_us":32},{"c)json"
    R"json(ount":1,"lt_us":64},{"count":1,"lt_us":32768}],"count":4,"max_us":19000,"p50_us":31,"p99_us")json"
    R"json(:19000,"sum_us":19077}})json";

// CacheStats::ToPrometheus() of PopulatedCache() up to the disk tier's part.
const std::string kCacheHostPrometheus = R"golden(# HELP kvtier_cache_lookups_total keys asked of Load
# TYPE kvtier_cache_lookups_total counter
kvtier_cache_lookups_total 5000
# HELP kvtier_cache_hits_host_total blocks served from the host tier
# TYPE kvtier_cache_hits_host_total counter
kvtier_cache_hits_host_total 5001
# HELP kvtier_cache_hits_disk_total blocks served from the disk tier
# TYPE kvtier_cache_hits_disk_total counter
kvtier_cache_hits_disk_total 5002
# HELP kvtier_cache_hits_remote_total blocks served from the remote tier
# TYPE kvtier_cache_hits_remote_total counter
kvtier_cache_hits_remote_total 5003
# HELP kvtier_cache_misses_total keys no tier served
# TYPE kvtier_cache_misses_total counter
kvtier_cache_misses_total 5004
# HELP kvtier_cache_load_errors_total keys whose destination was too small
# TYPE kvtier_cache_load_errors_total counter
kvtier_cache_load_errors_total 5005
# HELP kvtier_cache_loads_cancelled_total Loads cancelled before their disk reads
# TYPE kvtier_cache_loads_cancelled_total counter
kvtier_cache_loads_cancelled_total 5006
# HELP kvtier_cache_matches_total Match() calls
# TYPE kvtier_cache_matches_total counter
kvtier_cache_matches_total 5007
# HELP kvtier_cache_match_blocks_total blocks Match() calls reported available
# TYPE kvtier_cache_match_blocks_total counter
kvtier_cache_match_blocks_total 5008
# HELP kvtier_cache_match_disk_probes_total index misses checked with the disk tier
# TYPE kvtier_cache_match_disk_probes_total counter
kvtier_cache_match_disk_probes_total 5009
# HELP kvtier_cache_stale_disk_hints_total disk hints found wrong (a read missed, a write failed)
# TYPE kvtier_cache_stale_disk_hints_total counter
kvtier_cache_stale_disk_hints_total 5010
# HELP kvtier_cache_match_remote_probes_total keys Match asked the remote tier about
# TYPE kvtier_cache_match_remote_probes_total counter
kvtier_cache_match_remote_probes_total 5011
# HELP kvtier_cache_match_remote_found_total keys Match asked the remote tier about that it reported present
# TYPE kvtier_cache_match_remote_found_total counter
kvtier_cache_match_remote_found_total 5012
# HELP kvtier_cache_remote_lookups_total keys no local tier served, asked of the remote tier
# TYPE kvtier_cache_remote_lookups_total counter
kvtier_cache_remote_lookups_total 5013
# HELP kvtier_cache_remote_misses_total keys asked of the remote tier that it did not serve (absent, down, bad value)
# TYPE kvtier_cache_remote_misses_total counter
kvtier_cache_remote_misses_total 5014
# HELP kvtier_cache_stores_total blocks accepted by Store()
# TYPE kvtier_cache_stores_total counter
kvtier_cache_stores_total 5015
# HELP kvtier_cache_store_errors_total blocks Store() refused
# TYPE kvtier_cache_store_errors_total counter
kvtier_cache_store_errors_total 5016
# HELP kvtier_cache_store_bypasses_total write-back blocks the host budget could not take: sent to disk
# TYPE kvtier_cache_store_bypasses_total counter
kvtier_cache_store_bypasses_total 5017
# HELP kvtier_cache_remote_puts_queued_total stored blocks queued for the remote tier
# TYPE kvtier_cache_remote_puts_queued_total counter
kvtier_cache_remote_puts_queued_total 5018
# HELP kvtier_cache_remote_puts_dropped_total stored blocks the remote tier refused at once (queue full, node down)
# TYPE kvtier_cache_remote_puts_dropped_total counter
kvtier_cache_remote_puts_dropped_total 5019
# HELP kvtier_cache_bytes_stored_total bytes given to Store()
# TYPE kvtier_cache_bytes_stored_total counter
kvtier_cache_bytes_stored_total 5020
# HELP kvtier_cache_bytes_loaded_host_total bytes of host hits handed to callers (copied or shared)
# TYPE kvtier_cache_bytes_loaded_host_total counter
kvtier_cache_bytes_loaded_host_total 5021
# HELP kvtier_cache_bytes_loaded_disk_total bytes of disk hits handed to callers (copied or shared)
# TYPE kvtier_cache_bytes_loaded_disk_total counter
kvtier_cache_bytes_loaded_disk_total 5022
# HELP kvtier_cache_bytes_loaded_remote_total bytes of remote hits handed to callers (copied or shared)
# TYPE kvtier_cache_bytes_loaded_remote_total counter
kvtier_cache_bytes_loaded_remote_total 5023
# HELP kvtier_cache_bytes_written_back_total dirty bytes handed to the disk tier
# TYPE kvtier_cache_bytes_written_back_total counter
kvtier_cache_bytes_written_back_total 5024
# HELP kvtier_cache_bytes_written_through_total write-through bytes handed to the disk tier
# TYPE kvtier_cache_bytes_written_through_total counter
kvtier_cache_bytes_written_through_total 5025
# HELP kvtier_cache_bytes_promoted_total disk/remote bytes that became host entries (not copied)
# TYPE kvtier_cache_bytes_promoted_total counter
kvtier_cache_bytes_promoted_total 5026
# HELP kvtier_cache_write_backs_total dirty blocks handed to the disk tier (eviction, Flush, Close)
# TYPE kvtier_cache_write_backs_total counter
kvtier_cache_write_backs_total 5027
# HELP kvtier_cache_write_back_errors_total write-backs the disk tier refused
# TYPE kvtier_cache_write_back_errors_total counter
kvtier_cache_write_back_errors_total 5028
# HELP kvtier_cache_promotions_total disk/remote hits (Load, Preload) now in the host tier
# TYPE kvtier_cache_promotions_total counter
kvtier_cache_promotions_total 5029
# HELP kvtier_cache_promotion_failures_total disk/remote hits not promoted (no budget, Put refused)
# TYPE kvtier_cache_promotion_failures_total counter
kvtier_cache_promotion_failures_total 5030
# HELP kvtier_cache_remote_promotions_total promotions of remote hits (counted in promotions too)
# TYPE kvtier_cache_remote_promotions_total counter
kvtier_cache_remote_promotions_total 5031
# HELP kvtier_cache_reservation_failures_total host budget reservations refused
# TYPE kvtier_cache_reservation_failures_total counter
kvtier_cache_reservation_failures_total 5032
# HELP kvtier_cache_preloads_total blocks Preload() brought into RAM
# TYPE kvtier_cache_preloads_total counter
kvtier_cache_preloads_total 5033
# HELP kvtier_cache_close_dropped_total dirty blocks Close() could not hand down in time
# TYPE kvtier_cache_close_dropped_total counter
kvtier_cache_close_dropped_total 5034
# HELP kvtier_cache_read_buffers_total read buffers disk reads were given
# TYPE kvtier_cache_read_buffers_total counter
kvtier_cache_read_buffers_total 5035
# HELP kvtier_cache_read_buffers_reused_total read buffers that were recycled (no page faults)
# TYPE kvtier_cache_read_buffers_reused_total counter
kvtier_cache_read_buffers_reused_total 5036
# HELP kvtier_cache_read_buffer_fresh_bytes_total bytes of new memory allocated for read buffers
# TYPE kvtier_cache_read_buffer_fresh_bytes_total counter
kvtier_cache_read_buffer_fresh_bytes_total 5037
# HELP kvtier_cache_read_buffers_prefaulted_total read buffers added by PrefaultReadBuffers
# TYPE kvtier_cache_read_buffers_prefaulted_total counter
kvtier_cache_read_buffers_prefaulted_total 5038
# HELP kvtier_cache_index_keys keys any tier holds, in the Match index
# TYPE kvtier_cache_index_keys gauge
kvtier_cache_index_keys 5040
# HELP kvtier_cache_index_host_keys keys the host tier holds, in the Match index
# TYPE kvtier_cache_index_host_keys gauge
kvtier_cache_index_host_keys 5041
# HELP kvtier_cache_index_disk_keys keys the disk tier holds, in the Match index (hints)
# TYPE kvtier_cache_index_disk_keys gauge
kvtier_cache_index_disk_keys 5042
# HELP kvtier_cache_index_bytes bytes of memory the Match index's table takes
# TYPE kvtier_cache_index_bytes gauge
kvtier_cache_index_bytes 5043
# HELP kvtier_cache_read_buffer_free_bytes bytes of read buffers kept for the next reads
# TYPE kvtier_cache_read_buffer_free_bytes gauge
kvtier_cache_read_buffer_free_bytes 5039
# HELP kvtier_cache_hit_ratio (hits_host + hits_disk + hits_remote) / lookups; 0 with no lookups
# TYPE kvtier_cache_hit_ratio gauge
kvtier_cache_hit_ratio 0.3125
# HELP kvtier_cache_load_latency_seconds time from a Load() call until its future is ready, in seconds
# TYPE kvtier_cache_load_latency_seconds histogram
kvtier_cache_load_latency_seconds_bucket{le="0"} 1
kvtier_cache_load_latency_seconds_bucket{le="1e-06"} 1
kvtier_cache_load_latency_seconds_bucket{le="3e-06"} 1
kvtier_cache_load_latency_seconds_bucket{le="7e-06"} 1
kvtier_cache_load_latency_seconds_bucket{le="1.5e-05"} 1
kvtier_cache_load_latency_seconds_bucket{le="3.1e-05"} 2
kvtier_cache_load_latency_seconds_bucket{le="6.3e-05"} 2
kvtier_cache_load_latency_seconds_bucket{le="0.000127"} 3
kvtier_cache_load_latency_seconds_bucket{le="0.000255"} 3
kvtier_cache_load_latency_seconds_bucket{le="0.000511"} 3
kvtier_cache_load_latency_seconds_bucket{le="0.001023"} 3
kvtier_cache_load_latency_seconds_bucket{le="0.002047"} 3
kvtier_cache_load_latency_seconds_bucket{le="0.004095"} 3
kvtier_cache_load_latency_seconds_bucket{le="0.008191"} 3
kvtier_cache_load_latency_seconds_bucket{le="0.016383"} 3
kvtier_cache_load_latency_seconds_bucket{le="0.032767"} 4
kvtier_cache_load_latency_seconds_bucket{le="0.065535"} 4
kvtier_cache_load_latency_seconds_bucket{le="0.131071"} 4
kvtier_cache_load_latency_seconds_bucket{le="0.262143"} 4
kvtier_cache_load_latency_seconds_bucket{le="0.524287"} 4
kvtier_cache_load_latency_seconds_bucket{le="1.04858"} 4
kvtier_cache_load_latency_seconds_bucket{le="2.09715"} 4
kvtier_cache_load_latency_seconds_bucket{le="4.1943"} 4
kvtier_cache_load_latency_seconds_bucket{le="8.38861"} 4
kvtier_cache_load_latency_seconds_bucket{le="16.7772"} 4
kvtier_cache_load_latency_seconds_bucket{le="33.5544"} 4
kvtier_cache_load_latency_seconds_bucket{le="67.1089"} 4
kvtier_cache_load_latency_seconds_bucket{le="134.218"} 4
kvtier_cache_load_latency_seconds_bucket{le="268.435"} 4
kvtier_cache_load_latency_seconds_bucket{le="536.871"} 4
kvtier_cache_load_latency_seconds_bucket{le="1073.74"} 4
kvtier_cache_load_latency_seconds_bucket{le="2147.48"} 4
kvtier_cache_load_latency_seconds_bucket{le="4294.97"} 4
kvtier_cache_load_latency_seconds_bucket{le="8589.93"} 4
kvtier_cache_load_latency_seconds_bucket{le="17179.9"} 4
kvtier_cache_load_latency_seconds_bucket{le="34359.7"} 4
kvtier_cache_load_latency_seconds_bucket{le="68719.5"} 4
kvtier_cache_load_latency_seconds_bucket{le="137439"} 4
kvtier_cache_load_latency_seconds_bucket{le="274878"} 4
kvtier_cache_load_latency_seconds_bucket{le="+Inf"} 4
kvtier_cache_load_latency_seconds_sum 0.023093
kvtier_cache_load_latency_seconds_count 4
# HELP kvtier_cache_store_latency_seconds time of one Store() call, in seconds
# TYPE kvtier_cache_store_latency_seconds histogram
kvtier_cache_store_latency_seconds_bucket{le="0"} 1
kvtier_cache_store_latency_seconds_bucket{le="1e-06"} 1
kvtier_cache_store_latency_seconds_bucket{le="3e-06"} 1
kvtier_cache_store_latency_seconds_bucket{le="7e-06"} 1
kvtier_cache_store_latency_seconds_bucket{le="1.5e-05"} 1
kvtier_cache_store_latency_seconds_bucket{le="3.1e-05"} 2
kvtier_cache_store_latency_seconds_bucket{le="6.3e-05"} 2
kvtier_cache_store_latency_seconds_bucket{le="0.000127"} 3
kvtier_cache_store_latency_seconds_bucket{le="0.000255"} 3
kvtier_cache_store_latency_seconds_bucket{le="0.000511"} 3
kvtier_cache_store_latency_seconds_bucket{le="0.001023"} 3
kvtier_cache_store_latency_seconds_bucket{le="0.002047"} 3
kvtier_cache_store_latency_seconds_bucket{le="0.004095"} 3
kvtier_cache_store_latency_seconds_bucket{le="0.008191"} 3
kvtier_cache_store_latency_seconds_bucket{le="0.016383"} 3
kvtier_cache_store_latency_seconds_bucket{le="0.032767"} 4
kvtier_cache_store_latency_seconds_bucket{le="0.065535"} 4
kvtier_cache_store_latency_seconds_bucket{le="0.131071"} 4
kvtier_cache_store_latency_seconds_bucket{le="0.262143"} 4
kvtier_cache_store_latency_seconds_bucket{le="0.524287"} 4
kvtier_cache_store_latency_seconds_bucket{le="1.04858"} 4
kvtier_cache_store_latency_seconds_bucket{le="2.09715"} 4
kvtier_cache_store_latency_seconds_bucket{le="4.1943"} 4
kvtier_cache_store_latency_seconds_bucket{le="8.38861"} 4
kvtier_cache_store_latency_seconds_bucket{le="16.7772"} 4
kvtier_cache_store_latency_seconds_bucket{le="33.5544"} 4
kvtier_cache_store_latency_seconds_bucket{le="67.1089"} 4
kvtier_cache_store_latency_seconds_bucket{le="134.218"} 4
kvtier_cache_store_latency_seconds_bucket{le="268.435"} 4
kvtier_cache_store_latency_seconds_bucket{le="536.871"} 4
kvtier_cache_store_latency_seconds_bucket{le="1073.74"} 4
kvtier_cache_store_latency_seconds_bucket{le="2147.48"} 4
kvtier_cache_store_latency_seconds_bucket{le="4294.97"} 4
kvtier_cache_store_latency_seconds_bucket{le="8589.93"} 4
kvtier_cache_store_latency_seconds_bucket{le="17179.9"} 4
kvtier_cache_store_latency_seconds_bucket{le="34359.7"} 4
kvtier_cache_store_latency_seconds_bucket{le="68719.5"} 4
kvtier_cache_store_latency_seconds_bucket{le="137439"} 4
kvtier_cache_store_latency_seconds_bucket{le="274878"} 4
kvtier_cache_store_latency_seconds_bucket{le="+Inf"} 4
kvtier_cache_store_latency_seconds_sum 0.029117
kvtier_cache_store_latency_seconds_count 4
# HELP kvtier_host_hits_total Get calls that found the key
# TYPE kvtier_host_hits_total counter
kvtier_host_hits_total 3005
# HELP kvtier_host_handoff_hits_total hits on a key evicted while its sink call ran (counted in hits too)
# TYPE kvtier_host_handoff_hits_total counter
kvtier_host_handoff_hits_total 3006
# HELP kvtier_host_misses_total Get calls that did not find the key
# TYPE kvtier_host_misses_total counter
kvtier_host_misses_total 3007
# HELP kvtier_host_puts_total successful Puts (new keys and replacements)
# TYPE kvtier_host_puts_total counter
kvtier_host_puts_total 3008
# HELP kvtier_host_replacements_total successful Puts of a key already present
# TYPE kvtier_host_replacements_total counter
kvtier_host_replacements_total 3009
# HELP kvtier_host_rejections_total Puts refused: block larger than the budget
# TYPE kvtier_host_rejections_total counter
kvtier_host_rejections_total 3010
# HELP kvtier_host_put_failures_total Puts refused: Reservations hold the room
# TYPE kvtier_host_put_failures_total counter
kvtier_host_put_failures_total 3011
# HELP kvtier_host_erases_total entries removed by Erase
# TYPE kvtier_host_erases_total counter
kvtier_host_erases_total 3012
# HELP kvtier_host_evictions_total entries removed to make room, by ShrinkTo or Clear
# TYPE kvtier_host_evictions_total counter
kvtier_host_evictions_total 3013
# HELP kvtier_host_dirty_evictions_total evicted dirty entries handed to the sink
# TYPE kvtier_host_dirty_evictions_total counter
kvtier_host_dirty_evictions_total 3014
# HELP kvtier_host_dirty_dropped_total evicted dirty entries dropped (no sink)
# TYPE kvtier_host_dirty_dropped_total counter
kvtier_host_dirty_dropped_total 3015
# HELP kvtier_host_sink_errors_total sink calls that returned an error
# TYPE kvtier_host_sink_errors_total counter
kvtier_host_sink_errors_total 3016
# HELP kvtier_host_reservations_total successful Reserve calls
# TYPE kvtier_host_reservations_total counter
kvtier_host_reservations_total 3017
# HELP kvtier_host_reservation_failures_total Reserve calls refused
# TYPE kvtier_host_reservation_failures_total counter
kvtier_host_reservation_failures_total 3018
# HELP kvtier_host_entries entries in the tier
# TYPE kvtier_host_entries gauge
kvtier_host_entries 3000
# HELP kvtier_host_bytes bytes of the entries (their block sizes)
# TYPE kvtier_host_bytes gauge
kvtier_host_bytes 3001
# HELP kvtier_host_dirty_entries dirty entries: not yet written down to a lower tier
# TYPE kvtier_host_dirty_entries gauge
kvtier_host_dirty_entries 3002
# HELP kvtier_host_dirty_bytes bytes of the dirty entries
# TYPE kvtier_host_dirty_bytes gauge
kvtier_host_dirty_bytes 3003
# HELP kvtier_host_reserved_bytes bytes held by this tier's live Reservations
# TYPE kvtier_host_reserved_bytes gauge
kvtier_host_reserved_bytes 3004
# HELP kvtier_host_budget_capacity_bytes the budget, in bytes
# TYPE kvtier_host_budget_capacity_bytes gauge
kvtier_host_budget_capacity_bytes 4000
# HELP kvtier_host_budget_used_bytes bytes of the entries over all tiers
# TYPE kvtier_host_budget_used_bytes gauge
kvtier_host_budget_used_bytes 4001
# HELP kvtier_host_budget_reserved_bytes bytes held by live Reservations over all tiers
# TYPE kvtier_host_budget_reserved_bytes gauge
kvtier_host_budget_reserved_bytes 4002
# HELP kvtier_host_budget_entries entries over all tiers
# TYPE kvtier_host_budget_entries gauge
kvtier_host_budget_entries 4003
# HELP kvtier_host_budget_tiers live HostTiers on the budget
# TYPE kvtier_host_budget_tiers gauge
kvtier_host_budget_tiers 4004
# HELP kvtier_host_budget_evictions entries evicted over all tiers since creation (exported as a gauge)
# TYPE kvtier_host_budget_evictions gauge
kvtier_host_budget_evictions 4005
)golden";

// DiskTierStats::ToPrometheus() of PopulatedDisk().
const std::string kDiskPrometheus = R"golden(# HELP kvtier_disk_saves_total Store() calls accepted (queued or written inline)
# TYPE kvtier_disk_saves_total counter
kvtier_disk_saves_total 1000
# HELP kvtier_disk_saves_persisted_total blocks renamed into place and indexed
# TYPE kvtier_disk_saves_persisted_total counter
kvtier_disk_saves_persisted_total 1001
# HELP kvtier_disk_saves_deduplicated_total stores skipped: already queued or on disk
# TYPE kvtier_disk_saves_deduplicated_total counter
kvtier_disk_saves_deduplicated_total 1002
# HELP kvtier_disk_loads_total Load() lookups (LoadMany counts each key)
# TYPE kvtier_disk_loads_total counter
kvtier_disk_loads_total 1003
# HELP kvtier_disk_hits_total loads served verified bytes
# TYPE kvtier_disk_hits_total counter
kvtier_disk_hits_total 1004
# HELP kvtier_disk_hits_pending_total hits served from the pending-write buffer (counted in hits too)
# TYPE kvtier_disk_hits_pending_total counter
kvtier_disk_hits_pending_total 1005
# HELP kvtier_disk_misses_total loads that served nothing (any reason)
# TYPE kvtier_disk_misses_total counter
kvtier_disk_misses_total 1006
# HELP kvtier_disk_incompatible_misses_total misses because the block has another layout signature
# TYPE kvtier_disk_incompatible_misses_total counter
kvtier_disk_incompatible_misses_total 1007
# HELP kvtier_disk_evictions_total block files removed to respect the limit
# TYPE kvtier_disk_evictions_total counter
kvtier_disk_evictions_total 1008
# HELP kvtier_disk_expired_total block files removed by retention
# TYPE kvtier_disk_expired_total counter
kvtier_disk_expired_total 1009
# HELP kvtier_disk_unlink_failures_total evictions whose unlink failed (row kept)
# TYPE kvtier_disk_unlink_failures_total counter
kvtier_disk_unlink_failures_total 1010
# HELP kvtier_disk_errors_total failed writes, index calls, renames
# TYPE kvtier_disk_errors_total counter
kvtier_disk_errors_total 1011
# HELP kvtier_disk_inline_writes_total stores written on the caller's thread (queue full)
# TYPE kvtier_disk_inline_writes_total counter
kvtier_disk_inline_writes_total 1012
# HELP kvtier_disk_drops_total stores dropped under OnPressure::kDrop
# TYPE kvtier_disk_drops_total counter
kvtier_disk_drops_total 1013
# HELP kvtier_disk_read_only_skips_total stores skipped: the folder is read-only
# TYPE kvtier_disk_read_only_skips_total counter
kvtier_disk_read_only_skips_total 0
# HELP kvtier_disk_quarantined_total files moved to quarantine/ (bad, foreign)
# TYPE kvtier_disk_quarantined_total counter
kvtier_disk_quarantined_total 1014
# HELP kvtier_disk_bytes_written_total block bytes persisted
# TYPE kvtier_disk_bytes_written_total counter
kvtier_disk_bytes_written_total 1015
# HELP kvtier_disk_bytes_read_total block bytes served
# TYPE kvtier_disk_bytes_read_total counter
kvtier_disk_bytes_read_total 1016
# HELP kvtier_disk_reconcile_passes_total completed reconcile passes
# TYPE kvtier_disk_reconcile_passes_total counter
kvtier_disk_reconcile_passes_total 1017
# HELP kvtier_disk_reconcile_adopted_total block files with no index row that reconcile gave one
# TYPE kvtier_disk_reconcile_adopted_total counter
kvtier_disk_reconcile_adopted_total 1018
# HELP kvtier_disk_reconcile_rows_dropped_total index rows reconcile dropped: their file was gone
# TYPE kvtier_disk_reconcile_rows_dropped_total counter
kvtier_disk_reconcile_rows_dropped_total 1019
# HELP kvtier_disk_reconcile_temps_removed_total temp files of dead writers reconcile removed
# TYPE kvtier_disk_reconcile_temps_removed_total counter
kvtier_disk_reconcile_temps_removed_total 1020
# HELP kvtier_disk_queue_bytes bytes of blocks queued or being written
# TYPE kvtier_disk_queue_bytes gauge
kvtier_disk_queue_bytes 1021
# HELP kvtier_disk_queue_blocks blocks queued or being written
# TYPE kvtier_disk_queue_blocks gauge
kvtier_disk_queue_blocks 1022
# HELP kvtier_disk_reconcile_running 1 while a reconcile pass is running, else 0
# TYPE kvtier_disk_reconcile_running gauge
kvtier_disk_reconcile_running 1
# HELP kvtier_disk_entries indexed block files, all signatures
# TYPE kvtier_disk_entries gauge
kvtier_disk_entries 1023
# HELP kvtier_disk_bytes bytes of the indexed block files (file lengths), all signatures
# TYPE kvtier_disk_bytes gauge
kvtier_disk_bytes 1024
# HELP kvtier_disk_allocated_bytes bytes the indexed block files take from the disk (whole file system blocks), estimated
# TYPE kvtier_disk_allocated_bytes gauge
kvtier_disk_allocated_bytes 0
# HELP kvtier_disk_compatible_entries indexed block files of this tier's layout signature (kvtier stats: of --layout's)
# TYPE kvtier_disk_compatible_entries gauge
kvtier_disk_compatible_entries 1025
# HELP kvtier_disk_compatible_bytes bytes of the indexed block files of this tier's layout signature (kvtier stats: of --layout's)
# TYPE kvtier_disk_compatible_bytes gauge
kvtier_disk_compatible_bytes 1026
# HELP kvtier_disk_configured_max_bytes the size limit set in DiskTierOptions::max_bytes, in bytes (0 = none)
# TYPE kvtier_disk_configured_max_bytes gauge
kvtier_disk_configured_max_bytes 1027
# HELP kvtier_disk_effective_max_bytes the size limit in force now, in bytes (held against allocated_bytes)
# TYPE kvtier_disk_effective_max_bytes gauge
kvtier_disk_effective_max_bytes 1028
# HELP kvtier_disk_quarantine_files files in quarantine/
# TYPE kvtier_disk_quarantine_files gauge
kvtier_disk_quarantine_files 1029
# HELP kvtier_disk_load_latency_seconds time of one Load() that hit, in seconds
# TYPE kvtier_disk_load_latency_seconds histogram
kvtier_disk_load_latency_seconds_bucket{le="0"} 1
kvtier_disk_load_latency_seconds_bucket{le="1e-06"} 1
kvtier_disk_load_latency_seconds_bucket{le="3e-06"} 1
kvtier_disk_load_latency_seconds_bucket{le="7e-06"} 2
kvtier_disk_load_latency_seconds_bucket{le="1.5e-05"} 2
kvtier_disk_load_latency_seconds_bucket{le="3.1e-05"} 3
kvtier_disk_load_latency_seconds_bucket{le="6.3e-05"} 3
kvtier_disk_load_latency_seconds_bucket{le="0.000127"} 3
kvtier_disk_load_latency_seconds_bucket{le="0.000255"} 3
kvtier_disk_load_latency_seconds_bucket{le="0.000511"} 3
kvtier_disk_load_latency_seconds_bucket{le="0.001023"} 3
kvtier_disk_load_latency_seconds_bucket{le="0.002047"} 3
kvtier_disk_load_latency_seconds_bucket{le="0.004095"} 3
kvtier_disk_load_latency_seconds_bucket{le="0.008191"} 4
kvtier_disk_load_latency_seconds_bucket{le="0.016383"} 4
kvtier_disk_load_latency_seconds_bucket{le="0.032767"} 4
kvtier_disk_load_latency_seconds_bucket{le="0.065535"} 4
kvtier_disk_load_latency_seconds_bucket{le="0.131071"} 4
kvtier_disk_load_latency_seconds_bucket{le="0.262143"} 4
kvtier_disk_load_latency_seconds_bucket{le="0.524287"} 4
kvtier_disk_load_latency_seconds_bucket{le="1.04858"} 4
kvtier_disk_load_latency_seconds_bucket{le="2.09715"} 4
kvtier_disk_load_latency_seconds_bucket{le="4.1943"} 4
kvtier_disk_load_latency_seconds_bucket{le="8.38861"} 4
kvtier_disk_load_latency_seconds_bucket{le="16.7772"} 4
kvtier_disk_load_latency_seconds_bucket{le="33.5544"} 4
kvtier_disk_load_latency_seconds_bucket{le="67.1089"} 4
kvtier_disk_load_latency_seconds_bucket{le="134.218"} 4
kvtier_disk_load_latency_seconds_bucket{le="268.435"} 4
kvtier_disk_load_latency_seconds_bucket{le="536.871"} 4
kvtier_disk_load_latency_seconds_bucket{le="1073.74"} 4
kvtier_disk_load_latency_seconds_bucket{le="2147.48"} 4
kvtier_disk_load_latency_seconds_bucket{le="4294.97"} 4
kvtier_disk_load_latency_seconds_bucket{le="8589.93"} 4
kvtier_disk_load_latency_seconds_bucket{le="17179.9"} 4
kvtier_disk_load_latency_seconds_bucket{le="34359.7"} 4
kvtier_disk_load_latency_seconds_bucket{le="68719.5"} 4
kvtier_disk_load_latency_seconds_bucket{le="137439"} 4
kvtier_disk_load_latency_seconds_bucket{le="274878"} 4
kvtier_disk_load_latency_seconds_bucket{le="+Inf"} 4
kvtier_disk_load_latency_seconds_sum 0.007029
kvtier_disk_load_latency_seconds_count 4
# HELP kvtier_disk_write_latency_seconds time of one block's write + rename + commit, in seconds
# TYPE kvtier_disk_write_latency_seconds histogram
kvtier_disk_write_latency_seconds_bucket{le="0"} 1
kvtier_disk_write_latency_seconds_bucket{le="1e-06"} 1
kvtier_disk_write_latency_seconds_bucket{le="3e-06"} 1
kvtier_disk_write_latency_seconds_bucket{le="7e-06"} 1
kvtier_disk_write_latency_seconds_bucket{le="1.5e-05"} 2
kvtier_disk_write_latency_seconds_bucket{le="3.1e-05"} 2
kvtier_disk_write_latency_seconds_bucket{le="6.3e-05"} 3
kvtier_disk_write_latency_seconds_bucket{le="0.000127"} 3
kvtier_disk_write_latency_seconds_bucket{le="0.000255"} 3
kvtier_disk_write_latency_seconds_bucket{le="0.000511"} 3
kvtier_disk_write_latency_seconds_bucket{le="0.001023"} 3
kvtier_disk_write_latency_seconds_bucket{le="0.002047"} 3
kvtier_disk_write_latency_seconds_bucket{le="0.004095"} 3
kvtier_disk_write_latency_seconds_bucket{le="0.008191"} 3
kvtier_disk_write_latency_seconds_bucket{le="0.016383"} 4
kvtier_disk_write_latency_seconds_bucket{le="0.032767"} 4
kvtier_disk_write_latency_seconds_bucket{le="0.065535"} 4
kvtier_disk_write_latency_seconds_bucket{le="0.131071"} 4
kvtier_disk_write_latency_seconds_bucket{le="0.262143"} 4
kvtier_disk_write_latency_seconds_bucket{le="0.524287"} 4
kvtier_disk_write_latency_seconds_bucket{le="1.04858"} 4
kvtier_disk_write_latency_seconds_bucket{le="2.09715"} 4
kvtier_disk_write_latency_seconds_bucket{le="4.1943"} 4
kvtier_disk_write_latency_seconds_bucket{le="8.38861"} 4
kvtier_disk_write_latency_seconds_bucket{le="16.7772"} 4
kvtier_disk_write_latency_seconds_bucket{le="33.5544"} 4
kvtier_disk_write_latency_seconds_bucket{le="67.1089"} 4
kvtier_disk_write_latency_seconds_bucket{le="134.218"} 4
kvtier_disk_write_latency_seconds_bucket{le="268.435"} 4
kvtier_disk_write_latency_seconds_bucket{le="536.871"} 4
kvtier_disk_write_latency_seconds_bucket{le="1073.74"} 4
kvtier_disk_write_latency_seconds_bucket{le="2147.48"} 4
kvtier_disk_write_latency_seconds_bucket{le="4294.97"} 4
kvtier_disk_write_latency_seconds_bucket{le="8589.93"} 4
kvtier_disk_write_latency_seconds_bucket{le="17179.9"} 4
kvtier_disk_write_latency_seconds_bucket{le="34359.7"} 4
kvtier_disk_write_latency_seconds_bucket{le="68719.5"} 4
kvtier_disk_write_latency_seconds_bucket{le="137439"} 4
kvtier_disk_write_latency_seconds_bucket{le="274878"} 4
kvtier_disk_write_latency_seconds_bucket{le="+Inf"} 4
kvtier_disk_write_latency_seconds_sum 0.011045
kvtier_disk_write_latency_seconds_count 4
# HELP kvtier_disk_signature_blocks indexed block files per layout signature; compatible="true" for the signature of this tier's layout (kvtier stats: of --layout's)
# TYPE kvtier_disk_signature_blocks gauge
kvtier_disk_signature_blocks{signature="sig\"a\\b\nc",compatible="true"} 1030
kvtier_disk_signature_blocks{signature="other",compatible="false"} 1032
# HELP kvtier_disk_signature_bytes bytes of the indexed block files per layout signature; compatible="true" for the signature of this tier's layout (kvtier stats: of --layout's)
# TYPE kvtier_disk_signature_bytes gauge
kvtier_disk_signature_bytes{signature="sig\"a\\b\nc",compatible="true"} 1031
kvtier_disk_signature_bytes{signature="other",compatible="false"} 1033
)golden";

// DiskTierStats::ToPrometheus("kvtier_disk", DiskStatsScope::kFolderOnly).
const std::string kDiskFolderPrometheus = R"golden(# HELP kvtier_disk_entries indexed block files, all signatures
# TYPE kvtier_disk_entries gauge
kvtier_disk_entries 1023
# HELP kvtier_disk_bytes bytes of the indexed block files (file lengths), all signatures
# TYPE kvtier_disk_bytes gauge
kvtier_disk_bytes 1024
# HELP kvtier_disk_allocated_bytes bytes the indexed block files take from the disk (whole file system blocks), estimated
# TYPE kvtier_disk_allocated_bytes gauge
kvtier_disk_allocated_bytes 0
# HELP kvtier_disk_compatible_entries indexed block files of this tier's layout signature (kvtier stats: of --layout's)
# TYPE kvtier_disk_compatible_entries gauge
kvtier_disk_compatible_entries 1025
# HELP kvtier_disk_compatible_bytes bytes of the indexed block files of this tier's layout signature (kvtier stats: of --layout's)
# TYPE kvtier_disk_compatible_bytes gauge
kvtier_disk_compatible_bytes 1026
# HELP kvtier_disk_quarantine_files files in quarantine/
# TYPE kvtier_disk_quarantine_files gauge
kvtier_disk_quarantine_files 1029
# HELP kvtier_disk_signature_blocks indexed block files per layout signature; compatible="true" for the signature of this tier's layout (kvtier stats: of --layout's)
# TYPE kvtier_disk_signature_blocks gauge
kvtier_disk_signature_blocks{signature="sig\"a\\b\nc",compatible="true"} 1030
kvtier_disk_signature_blocks{signature="other",compatible="false"} 1032
# HELP kvtier_disk_signature_bytes bytes of the indexed block files per layout signature; compatible="true" for the signature of this tier's layout (kvtier stats: of --layout's)
# TYPE kvtier_disk_signature_bytes gauge
kvtier_disk_signature_bytes{signature="sig\"a\\b\nc",compatible="true"} 1031
kvtier_disk_signature_bytes{signature="other",compatible="false"} 1033
)golden";

// RemoteTierStats::ToPrometheus() of PopulatedRemote().
const std::string kRemotePrometheus = R"golden(# HELP kvtier_remote_exists_calls_total Exists() calls
# TYPE kvtier_remote_exists_calls_total counter
kvtier_remote_exists_calls_total 2000
# HELP kvtier_remote_exists_keys_total keys Exists() calls asked about
# TYPE kvtier_remote_exists_keys_total counter
kvtier_remote_exists_keys_total 2001
# HELP kvtier_remote_exists_found_total keys Exists() calls found
# TYPE kvtier_remote_exists_found_total counter
kvtier_remote_exists_found_total 2002
# HELP kvtier_remote_exists_late_total keys Exists() gave up on at lookup_budget_ms (a miss for that call)
# TYPE kvtier_remote_exists_late_total counter
kvtier_remote_exists_late_total 0
# HELP kvtier_remote_lookups_total keys asked of Get/GetMany/GetInto
# TYPE kvtier_remote_lookups_total counter
kvtier_remote_lookups_total 2003
# HELP kvtier_remote_hits_total lookups served a verified block
# TYPE kvtier_remote_hits_total counter
kvtier_remote_hits_total 2004
# HELP kvtier_remote_misses_total lookups that served nothing (any reason)
# TYPE kvtier_remote_misses_total counter
kvtier_remote_misses_total 2005
# HELP kvtier_remote_misses_unavailable_total misses because the node was down, timed out or its breaker open
# TYPE kvtier_remote_misses_unavailable_total counter
kvtier_remote_misses_unavailable_total 2006
# HELP kvtier_remote_bad_values_total values that failed verification (bad, partial, foreign, wrong type)
# TYPE kvtier_remote_bad_values_total counter
kvtier_remote_bad_values_total 2007
# HELP kvtier_remote_bad_values_deleted_total values deleted from the server: bad_values and mac_failures
# TYPE kvtier_remote_bad_values_deleted_total counter
kvtier_remote_bad_values_deleted_total 2008
# HELP kvtier_remote_mac_failures_total values not signed by one of mac_keys (deleted too)
# TYPE kvtier_remote_mac_failures_total counter
kvtier_remote_mac_failures_total 0
# HELP kvtier_remote_too_small_total GetInto() calls whose buffer was too small
# TYPE kvtier_remote_too_small_total counter
kvtier_remote_too_small_total 2009
# HELP kvtier_remote_alloc_failures_total LoadBuffers() values whose allocator failed
# TYPE kvtier_remote_alloc_failures_total counter
kvtier_remote_alloc_failures_total 2010
# HELP kvtier_remote_bytes_read_total block bytes served (partial reads: bytes read)
# TYPE kvtier_remote_bytes_read_total counter
kvtier_remote_bytes_read_total 2011
# HELP kvtier_remote_puts_total blocks accepted by Put() (queued)
# TYPE kvtier_remote_puts_total counter
kvtier_remote_puts_total 2012
# HELP kvtier_remote_puts_deduplicated_total Put() of a key already queued
# TYPE kvtier_remote_puts_deduplicated_total counter
kvtier_remote_puts_deduplicated_total 2013
# HELP kvtier_remote_stored_total blocks written to the server
# TYPE kvtier_remote_stored_total counter
kvtier_remote_stored_total 2014
# HELP kvtier_remote_skipped_existing_total blocks not sent: the server had them
# TYPE kvtier_remote_skipped_existing_total counter
kvtier_remote_skipped_existing_total 2015
# HELP kvtier_remote_drops_queue_full_total copies dropped: queue full
# TYPE kvtier_remote_drops_queue_full_total counter
kvtier_remote_drops_queue_full_total 2016
# HELP kvtier_remote_drops_unavailable_total copies dropped: node down, breaker open, timeout
# TYPE kvtier_remote_drops_unavailable_total counter
kvtier_remote_drops_unavailable_total 2017
# HELP kvtier_remote_drops_oom_total copies dropped: -OOM from the server
# TYPE kvtier_remote_drops_oom_total counter
kvtier_remote_drops_oom_total 2018
# HELP kvtier_remote_drops_error_total copies dropped: another error reply, too many redirects
# TYPE kvtier_remote_drops_error_total counter
kvtier_remote_drops_error_total 2019
# HELP kvtier_remote_drops_closed_total copies dropped by Close()
# TYPE kvtier_remote_drops_closed_total counter
kvtier_remote_drops_closed_total 2020
# HELP kvtier_remote_bytes_written_total block bytes written
# TYPE kvtier_remote_bytes_written_total counter
kvtier_remote_bytes_written_total 2021
# HELP kvtier_remote_erases_total blocks Erase() removed
# TYPE kvtier_remote_erases_total counter
kvtier_remote_erases_total 2022
# HELP kvtier_remote_connects_total connections opened (handshake done)
# TYPE kvtier_remote_connects_total counter
kvtier_remote_connects_total 2023
# HELP kvtier_remote_connect_failures_total connects or handshakes that failed
# TYPE kvtier_remote_connect_failures_total counter
kvtier_remote_connect_failures_total 2024
# HELP kvtier_remote_auth_failures_total connect failures: the server refused the credentials
# TYPE kvtier_remote_auth_failures_total counter
kvtier_remote_auth_failures_total 2025
# HELP kvtier_remote_tls_failures_total connect failures: the TLS handshake or certificate check failed
# TYPE kvtier_remote_tls_failures_total counter
kvtier_remote_tls_failures_total 0
# HELP kvtier_remote_timeouts_total round trips or connects past their deadline
# TYPE kvtier_remote_timeouts_total counter
kvtier_remote_timeouts_total 2026
# HELP kvtier_remote_protocol_errors_total replies that broke the protocol or a bound
# TYPE kvtier_remote_protocol_errors_total counter
kvtier_remote_protocol_errors_total 2027
# HELP kvtier_remote_io_errors_total sockets that failed or closed mid-reply
# TYPE kvtier_remote_io_errors_total counter
kvtier_remote_io_errors_total 2028
# HELP kvtier_remote_error_replies_total error replies not handled otherwise
# TYPE kvtier_remote_error_replies_total counter
kvtier_remote_error_replies_total 2029
# HELP kvtier_remote_moved_total MOVED redirects followed
# TYPE kvtier_remote_moved_total counter
kvtier_remote_moved_total 2030
# HELP kvtier_remote_asked_total ASK redirects followed
# TYPE kvtier_remote_asked_total counter
kvtier_remote_asked_total 2031
# HELP kvtier_remote_retries_total TRYAGAIN / CLUSTERDOWN / LOADING backoffs
# TYPE kvtier_remote_retries_total counter
kvtier_remote_retries_total 2032
# HELP kvtier_remote_redirect_limit_total keys given up after 5 redirects
# TYPE kvtier_remote_redirect_limit_total counter
kvtier_remote_redirect_limit_total 2033
# HELP kvtier_remote_topology_refreshes_total slot maps loaded (CLUSTER SHARDS / SLOTS)
# TYPE kvtier_remote_topology_refreshes_total counter
kvtier_remote_topology_refreshes_total 2034
# HELP kvtier_remote_topology_failures_total refreshes that found no answering node
# TYPE kvtier_remote_topology_failures_total counter
kvtier_remote_topology_failures_total 2035
# HELP kvtier_remote_breaker_opens_total times a node's breaker opened
# TYPE kvtier_remote_breaker_opens_total counter
kvtier_remote_breaker_opens_total 2036
# HELP kvtier_remote_breaker_rejections_total node calls refused by an open breaker
# TYPE kvtier_remote_breaker_rejections_total counter
kvtier_remote_breaker_rejections_total 2037
# HELP kvtier_remote_queue_bytes bytes queued or being written
# TYPE kvtier_remote_queue_bytes gauge
kvtier_remote_queue_bytes 2038
# HELP kvtier_remote_queue_blocks blocks queued or being written
# TYPE kvtier_remote_queue_blocks gauge
kvtier_remote_queue_blocks 2039
# HELP kvtier_remote_nodes nodes known (1 for one server)
# TYPE kvtier_remote_nodes gauge
kvtier_remote_nodes 2040
# HELP kvtier_remote_nodes_down nodes whose breaker is open now
# TYPE kvtier_remote_nodes_down gauge
kvtier_remote_nodes_down 2041
# HELP kvtier_remote_connections connections open now
# TYPE kvtier_remote_connections gauge
kvtier_remote_connections 2042
# HELP kvtier_remote_exists_latency_seconds time of one Exists() call, in seconds
# TYPE kvtier_remote_exists_latency_seconds histogram
kvtier_remote_exists_latency_seconds_bucket{le="0"} 1
kvtier_remote_exists_latency_seconds_bucket{le="1e-06"} 1
kvtier_remote_exists_latency_seconds_bucket{le="3e-06"} 1
kvtier_remote_exists_latency_seconds_bucket{le="7e-06"} 1
kvtier_remote_exists_latency_seconds_bucket{le="1.5e-05"} 2
kvtier_remote_exists_latency_seconds_bucket{le="3.1e-05"} 2
kvtier_remote_exists_latency_seconds_bucket{le="6.3e-05"} 3
kvtier_remote_exists_latency_seconds_bucket{le="0.000127"} 3
kvtier_remote_exists_latency_seconds_bucket{le="0.000255"} 3
kvtier_remote_exists_latency_seconds_bucket{le="0.000511"} 3
kvtier_remote_exists_latency_seconds_bucket{le="0.001023"} 3
kvtier_remote_exists_latency_seconds_bucket{le="0.002047"} 3
kvtier_remote_exists_latency_seconds_bucket{le="0.004095"} 3
kvtier_remote_exists_latency_seconds_bucket{le="0.008191"} 3
kvtier_remote_exists_latency_seconds_bucket{le="0.016383"} 4
kvtier_remote_exists_latency_seconds_bucket{le="0.032767"} 4
kvtier_remote_exists_latency_seconds_bucket{le="0.065535"} 4
kvtier_remote_exists_latency_seconds_bucket{le="0.131071"} 4
kvtier_remote_exists_latency_seconds_bucket{le="0.262143"} 4
kvtier_remote_exists_latency_seconds_bucket{le="0.524287"} 4
kvtier_remote_exists_latency_seconds_bucket{le="1.04858"} 4
kvtier_remote_exists_latency_seconds_bucket{le="2.09715"} 4
kvtier_remote_exists_latency_seconds_bucket{le="4.1943"} 4
kvtier_remote_exists_latency_seconds_bucket{le="8.38861"} 4
kvtier_remote_exists_latency_seconds_bucket{le="16.7772"} 4
kvtier_remote_exists_latency_seconds_bucket{le="33.5544"} 4
kvtier_remote_exists_latency_seconds_bucket{le="67.1089"} 4
kvtier_remote_exists_latency_seconds_bucket{le="134.218"} 4
kvtier_remote_exists_latency_seconds_bucket{le="268.435"} 4
kvtier_remote_exists_latency_seconds_bucket{le="536.871"} 4
kvtier_remote_exists_latency_seconds_bucket{le="1073.74"} 4
kvtier_remote_exists_latency_seconds_bucket{le="2147.48"} 4
kvtier_remote_exists_latency_seconds_bucket{le="4294.97"} 4
kvtier_remote_exists_latency_seconds_bucket{le="8589.93"} 4
kvtier_remote_exists_latency_seconds_bucket{le="17179.9"} 4
kvtier_remote_exists_latency_seconds_bucket{le="34359.7"} 4
kvtier_remote_exists_latency_seconds_bucket{le="68719.5"} 4
kvtier_remote_exists_latency_seconds_bucket{le="137439"} 4
kvtier_remote_exists_latency_seconds_bucket{le="274878"} 4
kvtier_remote_exists_latency_seconds_bucket{le="+Inf"} 4
kvtier_remote_exists_latency_seconds_sum 0.013053
kvtier_remote_exists_latency_seconds_count 4
# HELP kvtier_remote_get_latency_seconds time of one Get/GetMany/GetInto call, in seconds
# TYPE kvtier_remote_get_latency_seconds histogram
kvtier_remote_get_latency_seconds_bucket{le="0"} 1
kvtier_remote_get_latency_seconds_bucket{le="1e-06"} 1
kvtier_remote_get_latency_seconds_bucket{le="3e-06"} 1
kvtier_remote_get_latency_seconds_bucket{le="7e-06"} 1
kvtier_remote_get_latency_seconds_bucket{le="1.5e-05"} 1
kvtier_remote_get_latency_seconds_bucket{le="3.1e-05"} 2
kvtier_remote_get_latency_seconds_bucket{le="6.3e-05"} 3
kvtier_remote_get_latency_seconds_bucket{le="0.000127"} 3
kvtier_remote_get_latency_seconds_bucket{le="0.000255"} 3
kvtier_remote_get_latency_seconds_bucket{le="0.000511"} 3
kvtier_remote_get_latency_seconds_bucket{le="0.001023"} 3
kvtier_remote_get_latency_seconds_bucket{le="0.002047"} 3
kvtier_remote_get_latency_seconds_bucket{le="0.004095"} 3
kvtier_remote_get_latency_seconds_bucket{le="0.008191"} 3
kvtier_remote_get_latency_seconds_bucket{le="0.016383"} 3
kvtier_remote_get_latency_seconds_bucket{le="0.032767"} 4
kvtier_remote_get_latency_seconds_bucket{le="0.065535"} 4
kvtier_remote_get_latency_seconds_bucket{le="0.131071"} 4
kvtier_remote_get_latency_seconds_bucket{le="0.262143"} 4
kvtier_remote_get_latency_seconds_bucket{le="0.524287"} 4
kvtier_remote_get_latency_seconds_bucket{le="1.04858"} 4
kvtier_remote_get_latency_seconds_bucket{le="2.09715"} 4
kvtier_remote_get_latency_seconds_bucket{le="4.1943"} 4
kvtier_remote_get_latency_seconds_bucket{le="8.38861"} 4
kvtier_remote_get_latency_seconds_bucket{le="16.7772"} 4
kvtier_remote_get_latency_seconds_bucket{le="33.5544"} 4
kvtier_remote_get_latency_seconds_bucket{le="67.1089"} 4
kvtier_remote_get_latency_seconds_bucket{le="134.218"} 4
kvtier_remote_get_latency_seconds_bucket{le="268.435"} 4
kvtier_remote_get_latency_seconds_bucket{le="536.871"} 4
kvtier_remote_get_latency_seconds_bucket{le="1073.74"} 4
kvtier_remote_get_latency_seconds_bucket{le="2147.48"} 4
kvtier_remote_get_latency_seconds_bucket{le="4294.97"} 4
kvtier_remote_get_latency_seconds_bucket{le="8589.93"} 4
kvtier_remote_get_latency_seconds_bucket{le="17179.9"} 4
kvtier_remote_get_latency_seconds_bucket{le="34359.7"} 4
kvtier_remote_get_latency_seconds_bucket{le="68719.5"} 4
kvtier_remote_get_latency_seconds_bucket{le="137439"} 4
kvtier_remote_get_latency_seconds_bucket{le="274878"} 4
kvtier_remote_get_latency_seconds_bucket{le="+Inf"} 4
kvtier_remote_get_latency_seconds_sum 0.017069
kvtier_remote_get_latency_seconds_count 4
# HELP kvtier_remote_write_latency_seconds time of one writer batch (EXISTS + SETs), in seconds
# TYPE kvtier_remote_write_latency_seconds histogram
kvtier_remote_write_latency_seconds_bucket{le="0"} 1
kvtier_remote_write_latency_seconds_bucket{le="1e-06"} 1
kvtier_remote_write_latency_seconds_bucket{le="3e-06"} 1
kvtier_remote_write_latency_seconds_bucket{le="7e-06"} 1
kvtier_remote_write_latency_seconds_bucket{le="1.5e-05"} 1
kvtier_remote_write_latency_seconds_bucket{le="3.1e-05"} 2
kvtier_remote_write_latency_seconds_bucket{le="6.3e-05"} 3
kvtier_remote_write_latency_seconds_bucket{le="0.000127"} 3
kvtier_remote_write_latency_seconds_bucket{le="0.000255"} 3
kvtier_remote_write_latency_seconds_bucket{le="0.000511"} 3
kvtier_remote_write_latency_seconds_bucket{le="0.001023"} 3
kvtier_remote_write_latency_seconds_bucket{le="0.002047"} 3
kvtier_remote_write_latency_seconds_bucket{le="0.004095"} 3
kvtier_remote_write_latency_seconds_bucket{le="0.008191"} 3
kvtier_remote_write_latency_seconds_bucket{le="0.016383"} 3
kvtier_remote_write_latency_seconds_bucket{le="0.032767"} 4
kvtier_remote_write_latency_seconds_bucket{le="0.065535"} 4
kvtier_remote_write_latency_seconds_bucket{le="0.131071"} 4
kvtier_remote_write_latency_seconds_bucket{le="0.262143"} 4
kvtier_remote_write_latency_seconds_bucket{le="0.524287"} 4
kvtier_remote_write_latency_seconds_bucket{le="1.04858"} 4
kvtier_remote_write_latency_seconds_bucket{le="2.09715"} 4
kvtier_remote_write_latency_seconds_bucket{le="4.1943"} 4
kvtier_remote_write_latency_seconds_bucket{le="8.38861"} 4
kvtier_remote_write_latency_seconds_bucket{le="16.7772"} 4
kvtier_remote_write_latency_seconds_bucket{le="33.5544"} 4
kvtier_remote_write_latency_seconds_bucket{le="67.1089"} 4
kvtier_remote_write_latency_seconds_bucket{le="134.218"} 4
kvtier_remote_write_latency_seconds_bucket{le="268.435"} 4
kvtier_remote_write_latency_seconds_bucket{le="536.871"} 4
kvtier_remote_write_latency_seconds_bucket{le="1073.74"} 4
kvtier_remote_write_latency_seconds_bucket{le="2147.48"} 4
kvtier_remote_write_latency_seconds_bucket{le="4294.97"} 4
kvtier_remote_write_latency_seconds_bucket{le="8589.93"} 4
kvtier_remote_write_latency_seconds_bucket{le="17179.9"} 4
kvtier_remote_write_latency_seconds_bucket{le="34359.7"} 4
kvtier_remote_write_latency_seconds_bucket{le="68719.5"} 4
kvtier_remote_write_latency_seconds_bucket{le="137439"} 4
kvtier_remote_write_latency_seconds_bucket{le="274878"} 4
kvtier_remote_write_latency_seconds_bucket{le="+Inf"} 4
kvtier_remote_write_latency_seconds_sum 0.019077
kvtier_remote_write_latency_seconds_count 4
)golden";

TEST(StatsOutputTest, CacheJson) { EXPECT_EQ(PopulatedCache().ToJson(), kCacheJson); }

TEST(StatsOutputTest, DiskJson) {
  EXPECT_EQ(PopulatedDisk().ToJson(), kDiskJson);
  // The cache nests the same text.
  EXPECT_NE(kCacheJson.find("\"disk\":" + kDiskJson), std::string::npos);
}

TEST(StatsOutputTest, RemoteJson) {
  EXPECT_EQ(PopulatedRemote().ToJson(), kRemoteJson);
  EXPECT_NE(kCacheJson.find("\"remote\":" + kRemoteJson), std::string::npos);
}

TEST(StatsOutputTest, CachePrometheus) {
  EXPECT_EQ(PopulatedCache().ToPrometheus(),
            kCacheHostPrometheus + kDiskPrometheus + kRemotePrometheus);
}

TEST(StatsOutputTest, DiskPrometheus) {
  const DiskTierStats s = PopulatedDisk();
  EXPECT_EQ(s.ToPrometheus(), kDiskPrometheus);
  EXPECT_EQ(s.ToPrometheus("kvtier_disk", DiskStatsScope::kFolderOnly), kDiskFolderPrometheus);
}

TEST(StatsOutputTest, RemotePrometheus) {
  EXPECT_EQ(PopulatedRemote().ToPrometheus(), kRemotePrometheus);
}

}  // namespace
}  // namespace kvtier
