"""kvtier as a vLLM offloading backend: the current route (vLLM 0.26 and
later). Written against vllm/v1/kv_offload/base.py at 0105e232 and config.py
at 006f89ac, and the connector worker
(distributed/kv_transfer/kv_connector/v1/offloading/worker.py at 0078e9d2)
that builds CanonicalKVCaches and asserts every TransferResult.success.

vLLM's factory builds ``KvtierOffloadingSpec(config: OffloadingConfig)``; its
extra config (``config.extra_config``) holds kvtier's options next to
vLLM's own keys (kvtier takes the names in ``kvtier.options()``). The
scheduler gets a ``KvtierOffloadingManager`` keyed by ``OffloadKey`` (block
hash + 4-byte KV cache group index), each worker a ``KvtierOffloadingWorker``
over ``CanonicalKVCaches``.

Keys. A kvtier block holds one OffloadKey's chunk (``blocks_per_chunk`` GPU
blocks) of one group on one worker: per layer of the group, the layer's
pages of those GPU blocks in order (a layer split in several canonical refs,
e.g. K and V halves, is the refs' rows concatenated, the same bytes as one
whole-page ref). Its key is ``SHA-256("kvtier-vllm-block-v1\\0" ||
namespace || block hash)`` where the namespace (DESIGN.md §3) covers the
model (``key_model_id``, else the config's model name), the group's layout
(layers, bytes per token, tokens per chunk, dtype), ``key_salt``,
``key_adapter_id``, the extra ``vllm:g=<group index>`` (two groups never
share a block) and the shard ``tp=<rank>/<size>`` (left out when vLLM says
the layout is replicated, e.g. MLA).

Failures never raise into vLLM: lookup answers MISS, prepare_store None, a
job that fails reports success False (vLLM's worker asserts success, so a
lookup answers HIT only for a block whose verified bytes it holds: it starts
the read on kvtier's threads and answers RETRY, _lookup_holds; prepare_load
pins those bytes until complete_load, and a load spec carries them when the
worker is another process).
"""

import collections
import dataclasses
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait as _wait_futures

import numpy as np

import kvtier

from . import _common, _lookup_holds, _stats
from ._common import (MEDIUM, PINS, Announcer, block_key, cache_options, carried_blocks, dtype_name,
                      load_promised, logger, read_verified, register_local_worker, shared_cache,
                      stacked)
from ._regions import as_bytes, gather, region_bytes, scatter

_B = "vllm.v1.kv_offload.base"
OffloadingSpecBase = _common.vllm_attr(_B, "OffloadingSpec")
OffloadingManagerBase = _common.vllm_attr(_B, "OffloadingManager")
OffloadingWorkerBase = _common.vllm_attr(_B, "OffloadingWorker")
LoadStoreSpecBase = _common.vllm_attr(_B, "LoadStoreSpec")
PrepareStoreOutput = _common.vllm_attr(_B, "PrepareStoreOutput")
OffloadingEvent = _common.vllm_attr(_B, "OffloadingEvent")
LookupResult = _common.vllm_attr(_B, "LookupResult")
Medium = _common.vllm_attr(_B, "Medium")
Locality = _common.vllm_attr(_B, "Locality")
TransferResult = _common.vllm_attr(_B, "TransferResult")
GPULoadStoreSpec = _common.vllm_attr(_B, "GPULoadStoreSpec")
RequestOffloadingContext = _common.vllm_attr(_B, "RequestOffloadingContext")
get_offload_block_hash = _common.vllm_attr(_B, "get_offload_block_hash")
get_offload_group_idx = _common.vllm_attr(_B, "get_offload_group_idx")


def make(cls, **fields):
    """cls(**fields) with only the fields this vLLM's dataclass has (a
    TransferResult declared as tuple[int, bool]: the pair)."""
    if not dataclasses.is_dataclass(cls):
        return (fields["job_id"], fields["success"])
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


class KvtierLoadStoreSpec(LoadStoreSpecBase):
    """kvtier's side of a transfer: the OffloadKeys, in the order of the GPU
    spec's groups; a load spec made where no worker runs also carries the
    promised blocks' files ({kvtier key: bytes})."""

    def __init__(self, keys, blocks=None):
        self.keys = list(keys)
        self.blocks = blocks or {}

    @staticmethod
    def medium():
        return MEDIUM

    def __repr__(self):
        return "KvtierLoadStoreSpec(%d keys)" % len(self.keys)


# --- Configuration ------------------------------------------------------------

class GroupPlan:
    """One KV cache group's kvtier layout and namespaces."""

    def __init__(self, index, layers, tokens, chunk, page_bytes, dtype):
        self.index, self.layers, self.chunk, self.page_bytes = index, layers, chunk, page_bytes
        self.per_token, rest = divmod(page_bytes, tokens)
        if rest:
            raise kvtier.FailedPrecondition(
                "vllm: group %d: a %d-byte page is not whole bytes per token of %d-token "
                "blocks (the kvtier backend takes attention groups)" % (index, page_bytes, tokens))
        self.layout = kvtier.Layout.from_json(json.dumps({
            "name": "vllm-%s" % dtype, "block_tokens": tokens * chunk,
            "layers": [{"repeat": layers, "cache_type": "vllm_%s" % dtype,
                        "states": [{"role": "kv", "dtype": "U8",
                                    "shape": ["T", self.per_token]}]}]}))


class OffloadPlan:
    """The layouts and key namespaces of every group, from OffloadingConfig
    alone (the same in the scheduler and in every worker)."""

    def __init__(self, config, options):
        parallel = config.parallel
        for name in ("pp_size", "pcp_size", "dcp_size"):
            if int(getattr(parallel, name, 1) or 1) > 1:
                raise kvtier.FailedPrecondition(
                    "vllm: %s > 1 is not supported by the kvtier backend (each stage or rank "
                    "would hold other layers or tokens under one key)" % name)
        groups = list(config.groups)
        total = sum(len(g.layer_names) for g in groups)
        page, rest = divmod(int(config.worker_kv_bytes_per_block), max(total, 1))
        if not groups or total == 0 or rest:
            raise kvtier.FailedPrecondition(
                "vllm: %d bytes per block over %d layers is not one page size per layer"
                % (config.worker_kv_bytes_per_block, total))
        self.chunk = int(config.cache.blocks_per_chunk)
        dtype = dtype_name(config.model.dtype)
        self.groups = [GroupPlan(i, len(g.layer_names), int(g.tokens_per_block), self.chunk,
                                 page, dtype) for i, g in enumerate(groups)]
        self.model_id = str(options.get("key_model_id") or config.model.name)
        salt = options.get("key_salt", b"")
        self.salt = salt.encode() if isinstance(salt, str) else bytes(salt)
        self.adapter = str(options.get("key_adapter_id", ""))
        self.tp_size = int(getattr(parallel, "tp_size", 1) or 1)
        self.rank = int(getattr(parallel, "rank", 0) or 0)
        self.replicated = bool(getattr(config, "replicated_layout", False))
        self._namespaces = {}

    def shard_ranks(self):
        """The TP ranks whose blocks a lookup must find (one when replicated)."""
        return [0] if self.replicated or self.tp_size == 1 else list(range(self.tp_size))

    def namespace(self, group, rank):
        tag = (group, rank)
        if tag not in self._namespaces:
            shard = "" if self.replicated or self.tp_size == 1 else "tp=%d/%d" % (rank,
                                                                                  self.tp_size)
            self._namespaces[tag] = kvtier.KeyChain(
                self.model_id, self.groups[group].layout, salt=self.salt, adapter=self.adapter,
                extra=b"vllm:g=%d" % group, shard=shard).namespace
        return self._namespaces[tag]

    def group_of(self, key):
        g = get_offload_group_idx(key)
        if not 0 <= g < len(self.groups):
            raise kvtier.InvalidArgument("vllm: OffloadKey of group %d; the config has %d"
                                         % (g, len(self.groups)))
        return g

    def kv_keys(self, key, ranks=None):
        """The kvtier keys of an OffloadKey, one per shard rank."""
        g = self.group_of(key)
        h = get_offload_block_hash(key)
        return [block_key(self.namespace(g, r), h)
                for r in (self.shard_ranks() if ranks is None else ranks)]


class KvtierOffloadingSpec(OffloadingSpecBase):
    """vLLM OffloadingSpec (spec_name "KvtierOffloadingSpec", spec_module_path
    "kvtier.integrations.vllm") over kvtier caches, one per group layout."""

    @classmethod
    def build_metric_definitions(cls, extra_config):
        """The metrics get_stats() reports (vLLM's Prometheus side asserts
        that every reported name was declared here)."""
        return _stats.metric_definitions()

    def __init__(self, config):
        super().__init__(config)
        self.options = cache_options(config.extra_config, keep_only_kvtier=True)
        self.plan = OffloadPlan(config, self.options)
        self._manager = None

    def caches(self):
        return [shared_cache(g.layout, self.options) for g in self.plan.groups]

    def get_manager(self):
        if self._manager is None:
            self._manager = KvtierOffloadingManager(self.plan, self.caches(), self.options)
        return self._manager

    def get_worker(self, kv_caches):
        return KvtierOffloadingWorker(self.plan, self.caches(), kv_caches)


# --- The scheduler side -------------------------------------------------------

class KvtierOffloadingManager(OffloadingManagerBase):
    """vLLM's scheduler-side manager: answers from the kvtier caches (so
    blocks other processes or earlier runs stored count) and keeps only the
    bookkeeping vLLM's calls need (stores in flight, promises, events).
    Thread-safe: one lock over that bookkeeping, never held across kvtier."""

    def __init__(self, plan, caches, options):
        self.plan = plan
        self.caches = caches
        self.medium = Medium.STORAGE
        self.locality = None if options.get("remote") else getattr(Locality, "LOCAL", None)
        self._lock = threading.Lock()
        self._storing = collections.Counter()
        self._stats = _stats.StatsReporter(caches)
        self._holds = _lookup_holds.LookupHolds(
            self._read_all, lambda key: self._blocks(key) * self._layout(key).max_file_bytes)
        self._events = Announcer(lambda keys, removed: make(
            OffloadingEvent, keys=keys, medium=self.medium, removed=removed,
            locality=self.locality))

    def _present(self, key):
        cache = self.caches[self.plan.group_of(key)]
        return all(cache.contains(k) is not None for k in self.plan.kv_keys(key))

    def _layout(self, key):
        return self.plan.groups[self.plan.group_of(key)].layout

    def _blocks(self, key):
        return len(self.plan.shard_ranks())

    def _verified(self, key):
        g = self.plan.group_of(key)
        keys = self.plan.kv_keys(key)
        return read_verified(self.caches[g], self.plan.groups[g].layout, keys)

    def _read_all(self, key):
        """Every shard's verified block file of `key`, or None (on the
        lookup pool's threads)."""
        blocks = self._verified(key)
        return blocks if len(blocks) == self._blocks(key) else None

    def lookup(self, key, req_context):
        """HIT when this request holds the key's verified blocks; a key
        kvtier's index has (contains only: no block is read on vLLM's
        scheduler thread) starts their verified read on kvtier's threads and
        answers RETRY, a later lookup HIT or, if a block was missing or
        damaged, MISS."""
        try:
            answer = self._holds.lookup(_req_id(req_context), key, self._present)
            if answer == _lookup_holds.HIT:
                self._events.stored([key], only_new=True)
                return LookupResult.HIT
            return LookupResult.RETRY if answer == _lookup_holds.RETRY else LookupResult.MISS
        except Exception as e:
            logger.warning("vllm: lookup failed, answering a miss: %s", e)
            return LookupResult.MISS

    def has_pending_work(self):
        """True while a read a lookup started runs (vLLM keeps stepping)."""
        return self._holds.busy()

    def prepare_load(self, keys, req_context):
        """Pins what vLLM will load: the verified block files the lookups
        read (read now only for a key no lookup of this request holds) are
        held (PINS, and in the spec when no worker runs here) until
        complete_load."""
        keys = list(keys)
        carried = {}
        try:
            for key in keys:
                blocks = self._holds.take(_req_id(req_context), key)
                for kv_key, data in (blocks or self._verified(key)).items():
                    PINS.hold(kv_key, data)
                    carried[kv_key] = data
            want = len(keys) * len(self.plan.shard_ranks())
            if len(carried) < want:
                logger.warning("vllm: %d of %d promised blocks were gone at prepare_load",
                               want - len(carried), want)
        except Exception as e:
            logger.warning("vllm: prepare_load could not pin its blocks: %s", e)
        return KvtierLoadStoreSpec(keys, carried_blocks(carried))

    def touch(self, keys, req_context):
        return  # kvtier's tiers keep their own recency (loads count as uses)

    def complete_load(self, keys, req_context):
        try:
            for key in keys:
                for kv_key in self.plan.kv_keys(key):
                    PINS.release(kv_key)
        except Exception as e:
            logger.warning("vllm: complete_load failed: %s", e)

    def prepare_store(self, keys, req_context):
        try:
            keys = list(keys)
            with self._lock:
                busy = {k for k in keys if self._storing[k]}
            to_store = [k for k in keys if k not in busy and not self._present(k)]
            with self._lock:
                for k in to_store:
                    self._storing[k] += 1
            return PrepareStoreOutput(keys_to_store=to_store,
                                      store_spec=KvtierLoadStoreSpec(to_store), evicted_keys=[])
        except Exception as e:
            logger.warning("vllm: prepare_store failed, not storing: %s", e)
            return None

    def complete_store(self, keys, req_context, success=True):
        try:
            keys = list(keys)
            with self._lock:
                for k in keys:
                    self._storing[k] -= 1
                    if self._storing[k] <= 0:
                        del self._storing[k]
            # Announce only what kvtier holds now (a worker that could not
            # store, e.g. on a full disk, still finishes its job).
            self._events.stored([k for k in keys if success and self._present(k)])
        except Exception as e:
            logger.warning("vllm: complete_store failed: %s", e)

    def on_new_request(self, req_context):
        self._holds.drop(_req_id(req_context))  # a request id seen again: a new request
        return RequestOffloadingContext()

    def on_request_finished(self, req_context):
        self._holds.drop(_req_id(req_context))

    def take_events(self):
        yield from self._events.take(self._present)

    def reset_cache(self):
        """Evicts every block of this backend's layouts from every tier."""
        for cache in self.caches:
            try:
                cache.clear()
            except kvtier.Error as e:
                logger.warning("vllm: reset_cache: %s", e)
        self._holds.clear()
        self._events.clear()

    def get_stats(self):
        """vLLM's OffloadingConnectorStats filled from the kvtier caches'
        counters (increases since the last payload; _stats.METRICS), or None
        when nothing is new."""
        return self._stats.take()

    def shutdown(self):
        self._holds.close()
        for cache in self.caches:
            try:
                cache.flush()
            except kvtier.Error as e:
                logger.warning("vllm: shutdown flush: %s", e)


def _req_id(req_context):
    return getattr(req_context, "req_id", None)


# --- The worker side ----------------------------------------------------------

def canonical_regions(kv_caches, group, num_layers):
    """Per layer of a KV cache group, the byte views of CanonicalKVCaches'
    refs of that layer: one (num_blocks, page) ref per layer, or several (K
    and V halves of FlashAttention's page), in ref order."""
    refs = list(kv_caches.group_data_refs[group])
    if num_layers <= 0 or len(refs) % num_layers:
        raise kvtier.FailedPrecondition(
            "vllm: KV cache group %d has %d layers and %d canonical refs (not a whole number "
            "per layer; a packed cross-layer page is not supported)"
            % (group, num_layers, len(refs)))
    per = len(refs) // num_layers
    views = [as_bytes(kv_caches.tensors[r.tensor_idx].tensor)[:, :int(r.page_size_bytes)]
             for r in refs]
    return [views[i * per:(i + 1) * per] for i in range(num_layers)]


class KvtierOffloadingWorker(OffloadingWorkerBase):
    """vLLM's worker-side transfers for the kvtier medium, on kvtier's own
    threads; nothing raises into vLLM's threads. A load writes the GPU
    blocks only after every block of it loaded and verified."""

    def __init__(self, plan, caches, kv_caches, threads=2):
        self.plan = plan
        self.caches = caches
        self.regions = []
        for g in plan.groups:
            regions = canonical_regions(kv_caches, g.index, g.layers)
            for r, parts in enumerate(regions):
                if region_bytes(parts) != g.page_bytes:
                    raise kvtier.FailedPrecondition(
                        "vllm: group %d layer %d: %d bytes per GPU block, the offloading "
                        "config says %d" % (g.index, r, region_bytes(parts), g.page_bytes))
            self.regions.append(regions)
        self.namespaces = [plan.namespace(g.index, plan.rank) for g in plan.groups]
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kvtier-vllm")
        self._lock = threading.Lock()
        self._finished = []
        self._jobs = {}
        register_local_worker()

    def _submit(self, job_id, run, gpu_spec, kv_spec):
        try:
            with self._lock:
                self._jobs[job_id] = self._pool.submit(self._run, job_id, run, gpu_spec, kv_spec)
            return True
        except Exception as e:
            logger.warning("vllm: job %s not started: %s", job_id, e)
            return False

    def submit_store(self, job_id, src_spec, dst_spec):
        return self._submit(job_id, self._store, src_spec, dst_spec)

    def submit_load(self, job_id, src_spec, dst_spec):
        return self._submit(job_id, self._load, dst_spec, src_spec)

    def _run(self, job_id, run, gpu_spec, kv_spec):
        start = time.monotonic()
        try:
            size = run(gpu_spec, kv_spec)
        except Exception as e:
            logger.warning("vllm: job %s failed: %s", job_id, e)
            size = None
        result = make(TransferResult, job_id=job_id, success=size is not None,
                      transfer_size=size, transfer_time=time.monotonic() - start)
        with self._lock:
            self._finished.append(result)

    def get_finished(self):
        with self._lock:
            done, self._finished = self._finished, []
            for r in done:
                self._jobs.pop(r[0] if isinstance(r, tuple) else r.job_id, None)
        return done

    def wait(self, job_ids):
        job_ids = set(job_ids)
        with self._lock:
            futures = [f for j, f in self._jobs.items() if j in job_ids]
        _wait_futures(futures)

    def shutdown(self):
        self._pool.shutdown(wait=True)

    def _by_group(self, gpu_spec, keys):
        """[(group, its OffloadKeys, its GPU block ids, GPU blocks of the first
        chunk to skip)] of a transfer, groups in the GPU spec's order."""
        if getattr(gpu_spec, "block_offsets", None) is not None:
            raise kvtier.InvalidArgument(
                "vllm: a transfer of parts of GPU blocks (hybrid offloading's block_offsets) "
                "is not supported by the kvtier backend")
        ids = [int(i) for i in np.asarray(gpu_spec.block_ids).reshape(-1)]
        sizes = list(getattr(gpu_spec, "group_sizes", None) or [len(ids)])
        starts = list(getattr(gpu_spec, "block_indices", None) or [0] * len(sizes))
        per_group = collections.defaultdict(list)
        for key in keys:
            per_group[self.plan.group_of(key)].append(key)
        out, at = [], 0
        for g, size in enumerate(sizes):
            group_ids = ids[at:at + size]
            at += size
            if not size and not per_group.get(g):
                continue
            skip = int(starts[g]) % self.plan.chunk
            if len(per_group.get(g, ())) * self.plan.chunk - skip != size:
                raise kvtier.InvalidArgument(
                    "vllm: group %d: %d keys of %d GPU blocks for %d GPU blocks (skip %d)"
                    % (g, len(per_group.get(g, ())), self.plan.chunk, size, skip))
            out.append((g, per_group.get(g, []), group_ids, skip))
        return out

    def _store(self, gpu_spec, kv_spec):
        """GPU blocks -> kvtier blocks; the bytes read. A block kvtier could
        not keep (full disk, ...) is logged and is a later miss, not a failed
        job (vLLM takes no failed jobs)."""
        total = 0
        for g, keys, ids, skip in self._by_group(gpu_spec, kv_spec.keys):
            if skip:
                raise kvtier.InvalidArgument("vllm: a store starting inside a chunk")
            plan, namespace = self.plan.groups[g], self.namespaces[g]
            data = [a.reshape(len(keys), plan.layout.block_tokens, plan.per_token)
                    for a in self._gather_chunks(g, ids, len(keys))]
            kv_keys = [block_key(namespace, get_offload_block_hash(k)) for k in keys]
            for i, key in enumerate(kv_keys):
                parent = kv_keys[i - 1] if i else namespace
                try:
                    self.caches[g].store_tensors(key, parent, namespace, [d[i] for d in data])
                    total += plan.layout.block_bytes
                except kvtier.Error as e:
                    logger.warning("vllm: block %s not stored: %s", key.hex()[:16], e)
        return total

    def _gather_chunks(self, g, ids, n):
        """Per layer, (n, chunk * page) bytes: each key's GPU blocks in order."""
        return [a.reshape(n, -1) for a in gather(self.regions[g], ids)]

    def _load(self, gpu_spec, kv_spec):
        """kvtier blocks -> GPU blocks; the bytes written, None (a failed job,
        nothing written) unless every block loaded and verified."""
        plans = self._by_group(gpu_spec, kv_spec.keys)
        writes, total = [], 0
        for g, keys, ids, skip in plans:
            plan, namespace = self.plan.groups[g], self.namespaces[g]
            kv_keys = [block_key(namespace, get_offload_block_hash(k)) for k in keys]
            per_layer = [[] for _ in range(plan.layers)]
            for tensors in load_promised(self.caches[g], plan.layout, kv_keys, kv_spec.blocks):
                if tensors is None:
                    return None  # load_promised said which and why
                for r, t in enumerate(tensors):
                    per_layer[r].append(t.reshape(self.plan.chunk, plan.page_bytes))
            rows = stacked(per_layer, skip)
            writes.append((g, ids, rows))
            total += sum(r.nbytes for r in rows)
        for g, ids, rows in writes:
            scatter(self.regions[g], ids, rows)
        return total
