"""kvtier's counters as vLLM's offloading stats: what ``get_stats()`` of the
current route's manager and of the secondary tier returns, and the metric
definitions the spec (and the tier class) declare for them.

Written against vLLM's ``OffloadingConnectorStats`` in
vllm/backends/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py
at a8f1d798 (the old path vllm/distributed/.../offloading/metrics.py is a
sys.modules alias of it at 055e47c2) and base.py at 0105e232
(``OffloadingCounterMetadata`` / ``OffloadingGaugeMetadata(documentation,
labelnames)``, ``OffloadingSpec.build_metric_definitions``). The payload is
self-describing: ``increase_counter(name, value, labelvalues)`` and
``set_gauge(name, value, labelvalues)``; vLLM sums counters over payloads
and keeps a gauge's latest value, and its Prometheus side asserts that every
name is one the spec declared, with that many label values. So counters
carry the increase since the previous payload, and every name below is
declared by ``metric_definitions()``.
"""

import threading
import time

from . import _common

_B = "vllm.v1.kv_offload.base"
_METRICS_MODULES = ("vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics",
                    "vllm.backends.distributed.kv_transfer.kv_connector.v1.offloading.metrics")

_P = "vllm:kv_offload_kvtier_"
COUNTER, GAUGE = "counter", "gauge"
# name -> (kind, label names, documentation, {label values: path in Cache.stats()}).
METRICS = {
    _P + "hits": (COUNTER, ("tier",), "Blocks kvtier loaded, by the tier that had them.",
                  {("host",): ("hits_host",), ("disk",): ("hits_disk",),
                   ("remote",): ("hits_remote",)}),
    _P + "misses": (COUNTER, (), "Block loads kvtier found in no tier.", {(): ("misses",)}),
    _P + "stores": (COUNTER, (), "Blocks stored into kvtier.", {(): ("stores",)}),
    _P + "stored_bytes": (COUNTER, (), "Bytes of the blocks stored into kvtier.",
                          {(): ("bytes_stored",)}),
    _P + "loaded_bytes": (COUNTER, ("tier",), "Bytes kvtier loaded, by tier.",
                          {("host",): ("bytes_loaded_host",), ("disk",): ("bytes_loaded_disk",),
                           ("remote",): ("bytes_loaded_remote",)}),
    _P + "errors": (COUNTER, ("op",), "kvtier loads and stores that failed.",
                    {("load",): ("load_errors",), ("store",): ("store_errors",)}),
    _P + "evictions": (COUNTER, ("tier",), "Blocks kvtier evicted, by tier.",
                       {("host",): ("host", "evictions"), ("disk",): ("disk", "evictions")}),
    _P + "bytes": (GAUGE, ("tier",), "Bytes kvtier holds now, by tier.",
                   {("host",): ("host", "bytes"), ("disk",): ("disk", "bytes")}),
}


def metric_definitions():
    """{name: vLLM's metric metadata} of every metric kvtier reports (empty
    when this vLLM's base.py has no metric metadata types)."""
    counter = _common.vllm_attr(_B, "OffloadingCounterMetadata")
    gauge = _common.vllm_attr(_B, "OffloadingGaugeMetadata")
    if counter is None or gauge is None:
        return {}
    return {name: (counter if kind == COUNTER else gauge)(documentation=doc, labelnames=labels)
            for name, (kind, labels, doc, _) in METRICS.items()}


def stats_class():
    """vLLM's OffloadingConnectorStats, or None where this vLLM has none."""
    return _common.first_attr("OffloadingConnectorStats", *_METRICS_MODULES)


def _read(stats, path):
    for part in path:
        stats = stats.get(part) if isinstance(stats, dict) else None
    return stats if isinstance(stats, (int, float)) and not isinstance(stats, bool) else None


def snapshot(caches):
    """{(name, label values): value} summed over the distinct caches."""
    out = {}
    for cache in {id(c): c for c in caches}.values():
        stats = cache.stats()
        for name, (_, _, _, paths) in METRICS.items():
            for labels, path in paths.items():
                value = _read(stats, path)
                if value is not None:
                    out[(name, labels)] = out.get((name, labels), 0) + value
    return out


class StatsReporter:
    """Turns the kvtier caches' counters into vLLM stats payloads: each
    counter's increase since the previous payload, each gauge's value.
    Cache.stats() is read at most once per `interval` seconds (vLLM asks at
    every scheduler step; between reads there is nothing new: None).
    Thread-safe: one lock over the previous snapshot."""

    def __init__(self, caches, interval=1.0, clock=time.monotonic):
        self._caches = list(caches)
        self._interval, self._clock = interval, clock
        self._lock = threading.Lock()
        self._last = {}
        self._last_read = None
        self._cls = None

    def take(self):
        """vLLM's OffloadingConnectorStats, or None (nothing new, or no such
        type in this vLLM). Never raises."""
        try:
            if self._cls is None:
                self._cls = stats_class() or False
            if not self._cls:
                return None
            now = self._clock()
            with self._lock:
                if self._last_read is not None and now - self._last_read < self._interval:
                    return None
                self._last_read = now
            current = snapshot(self._caches)
            with self._lock:
                previous, self._last = self._last, current
            payload = self._cls()
            for (name, labels), value in sorted(current.items()):
                if METRICS[name][0] == GAUGE:
                    payload.set_gauge(name, value, labels)
                else:
                    before = previous.get((name, labels), 0)
                    # A counter that went down is a cache reopened (a forked
                    # child): its counters started again from 0.
                    increase = value - before if value >= before else value
                    if increase:
                        payload.increase_counter(name, increase, labels)
            return payload
        except Exception as e:
            _common.logger.warning("vllm: get_stats failed: %s", e)
            return None
