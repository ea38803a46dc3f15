"""kvtier as a vLLM offloading backend: the handler route (vLLM 0.14-0.19:
vllm/v1/kv_offload/abstract.py, spec.py, mediums.py, worker/worker.py, the
OffloadingConnector calling get_handlers). Chosen by the package when that
interface is present; docs/vllm.md has the details.

Keys. vLLM's block hash is SHA-256 (or SHA-256 over CBOR) of (parent hash,
token ids, extra keys), seeded by ``PYTHONHASHSEED`` or by 32 random bytes per
process; it covers no model, dtype, layout or shard. The kvtier key of a block
is ``SHA-256("kvtier-vllm-block-v1\\0" || namespace || vLLM block hash bytes)``
where ``namespace`` is kvtier's key namespace (DESIGN.md §3) of the model id
(``key_model_id``, else vLLM's model and ``@revision``), the block layout's
signature (page bytes, dtype, layer count, block tokens), ``key_salt``,
``key_adapter_id``, the extra ``vllm:<hash algorithm>`` and the shard
``tp=<rank>/<size>`` (left out for MLA). The spec refuses to start when vLLM's
hashes are not reproducible across processes: no ``PYTHONHASHSEED`` in the
environment, or a ``prefix_caching_hash_algo`` other than sha256/sha256_cbor.

Failures never raise into vLLM: a lookup that fails is 0 (a miss), a
``prepare_store`` that fails is None (vLLM skips the store), a transfer that
cannot start is False, a load that misses or fails verification is a failed
job; each is a log line on ``logging.getLogger("kvtier")``. Loads never write
bytes that did not verify: a job writes the GPU blocks only after every block
of it decoded. ``lookup`` loads and verifies the blocks it reports;
``prepare_load`` holds the verified bytes of the blocks it promises until
``complete_load`` (_common.PINS), so eviction in between cannot fail the load.
"""

import abc
import collections
import dataclasses
import inspect
import json
import threading
from concurrent.futures import ThreadPoolExecutor, wait as _wait_futures

import numpy as np

import kvtier

from ._common import (  # noqa: F401 (the module's names since 0.1)
    MEDIUM, PINS, REPRODUCIBLE_HASHES, Announcer, _caches, block_key, cache_options,
    check_reproducible_hashing, decodes as _decodes, default_disk_dir,
    dtype_name as _dtype_name, first_attr as _first_attr, hash_bytes, load_promised,
    carried_blocks, local_worker, logger, read_verified, register_local_worker, shared_cache,
    stacked, vllm_attr as _vllm_attr)
from ._regions import as_bytes, gather, region_bytes, scatter

GPU_MEDIUM = "GPU"
_VERIFY_CHUNK = 16  # blocks per load_many in lookup (bounds the scratch buffers)


# --- vLLM's base classes, or stand-ins of the same shape ----------------------
# (tests/python/test_vllm.py holds the table of vLLM's signatures these follow.)

class _LoadStoreSpec(abc.ABC):
    @staticmethod
    @abc.abstractmethod
    def medium() -> str:
        """The medium's name, which routes transfers to handlers."""


class _OffloadingManager(abc.ABC):
    @abc.abstractmethod
    def lookup(self, block_hashes):
        """The number of leading blocks that are offloaded."""

    @abc.abstractmethod
    def prepare_load(self, block_hashes):
        """A LoadStoreSpec locating the blocks for the worker."""

    def touch(self, block_hashes):
        return

    def complete_load(self, block_hashes):
        return

    @abc.abstractmethod
    def prepare_store(self, block_hashes):
        """A PrepareStoreOutput, or None when the blocks cannot be stored."""

    def complete_store(self, block_hashes, success=True):
        return

    def take_events(self):
        return ()


class _OffloadingHandler(abc.ABC):
    @abc.abstractmethod
    def transfer_async(self, job_id, spec):
        """Starts a transfer; True if it was submitted."""

    @abc.abstractmethod
    def get_finished(self):
        """(job_id, success) of the transfers finished since the last call."""

    @abc.abstractmethod
    def wait(self, job_ids):
        """Blocks until the jobs finished."""

    def shutdown(self):
        return


class _OffloadingSpec(abc.ABC):
    def __init__(self, vllm_config, kv_cache_config=None):
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        self.extra_config = vllm_config.kv_transfer_config.kv_connector_extra_config
        self.gpu_block_size = vllm_config.cache_config.block_size
        self.offloaded_block_size = int(self.extra_config.get("block_size",
                                                              self.gpu_block_size))

    @abc.abstractmethod
    def get_manager(self):
        """The scheduler side's OffloadingManager."""

    @abc.abstractmethod
    def get_handlers(self, kv_caches, attn_backends=None):
        """Yields (src spec type, dst spec type, OffloadingHandler)."""


@dataclasses.dataclass
class _PrepareStoreOutput:
    block_hashes_to_store: list
    store_spec: object
    block_hashes_evicted: list


@dataclasses.dataclass
class _OffloadingEvent:
    block_hashes: list
    block_size: int
    medium: str
    removed: bool


class _GPULoadStoreSpec(_LoadStoreSpec):
    def __init__(self, block_ids):
        self.block_ids = np.array(block_ids, dtype=np.int64)

    @staticmethod
    def medium():
        return GPU_MEDIUM


_ABSTRACT = "vllm.v1.kv_offload.abstract"
_BASE = "vllm.v1.kv_offload.base"  # later vLLMs gather the classes here
LoadStoreSpecBase = _first_attr("LoadStoreSpec", _ABSTRACT, _BASE) or _LoadStoreSpec
OffloadingManagerBase = _first_attr("OffloadingManager", _ABSTRACT, _BASE) or _OffloadingManager
PrepareStoreOutput = _first_attr("PrepareStoreOutput", _ABSTRACT, _BASE) or _PrepareStoreOutput
OffloadingEvent = _first_attr("OffloadingEvent", _ABSTRACT, _BASE) or _OffloadingEvent
OffloadingHandlerBase = _first_attr("OffloadingHandler", "vllm.v1.kv_offload.worker.worker",
                                    _BASE) or _OffloadingHandler
OffloadingSpecBase = _first_attr("OffloadingSpec", "vllm.v1.kv_offload.spec", _BASE) \
    or _OffloadingSpec
GPULoadStoreSpec = _first_attr("GPULoadStoreSpec", "vllm.v1.kv_offload.mediums", _BASE) \
    or _GPULoadStoreSpec
# What get_finished returns per job: vLLM's TransferResult dataclass where
# it has one, else (job_id, success) pairs; some vLLMs declare the alias
# `TransferResult = tuple[int, bool]`, which is not a class to construct.
TransferResult = _first_attr("TransferResult", "vllm.v1.kv_offload.worker.worker", _BASE)


def transfer_result(job_id, success):
    if isinstance(TransferResult, type) and dataclasses.is_dataclass(TransferResult):
        return TransferResult(job_id=job_id, success=success)
    return (job_id, success)


class KvtierLoadStoreSpec(LoadStoreSpecBase):
    """kvtier's medium: the vLLM block hashes of the blocks to load or store
    (each worker maps them to its own shard's kvtier keys). A load spec made
    in a process without a worker also carries the promised blocks' bytes
    ({kvtier key: block file}), since the worker cannot see this process's
    pins."""

    def __init__(self, block_hashes, blocks=None):
        self.block_hashes = list(block_hashes)
        self.blocks = blocks or {}

    @staticmethod
    def medium():
        return MEDIUM

    def __repr__(self):
        return "KvtierLoadStoreSpec(%d blocks)" % len(self.block_hashes)


# --- Configuration ------------------------------------------------------------

class BlockPlan:
    """What one kvtier block holds for this vLLM engine, from vLLM's KV cache
    configuration (the same in the scheduler and in every worker): one region
    per attention layer, `factor` GPU blocks of `page_bytes` each."""

    def __init__(self, vllm_config, kv_cache_config, extra, options, hash_algo):
        if kv_cache_config is None:
            raise kvtier.FailedPrecondition(
                "vllm: this vLLM does not pass kv_cache_config to the offloading spec; "
                "kvtier needs it for the block layout")
        groups = list(kv_cache_config.kv_cache_groups)
        if len(groups) != 1:
            raise kvtier.FailedPrecondition(
                "vllm: %d KV cache groups (a hybrid model: sliding window, Mamba, ...); the "
                "kvtier backend supports one group of full attention layers" % len(groups))
        spec = groups[0].kv_cache_spec
        self.layer_names = list(groups[0].layer_names)
        self.num_blocks = int(getattr(kv_cache_config, "num_blocks", 0))
        self.gpu_block_size = int(spec.block_size)
        self.page_bytes = int(spec.page_size_bytes)
        self.dtype = _dtype_name(spec.dtype)
        self.block_tokens = int(extra.get("block_size", self.gpu_block_size))
        if self.block_tokens % self.gpu_block_size:
            raise kvtier.InvalidArgument(
                "vllm: block_size %d is not a multiple of vLLM's GPU block size %d"
                % (self.block_tokens, self.gpu_block_size))
        self.factor = self.block_tokens // self.gpu_block_size
        per_token, rest = divmod(self.page_bytes, self.gpu_block_size)
        if rest:
            raise kvtier.FailedPrecondition(
                "vllm: a GPU page of %d bytes is not whole bytes per token of %d-token blocks"
                % (self.page_bytes, self.gpu_block_size))
        self.layout = kvtier.Layout.from_json(json.dumps({
            "name": "vllm-%s" % self.dtype, "block_tokens": self.block_tokens,
            "layers": [{"repeat": len(self.layer_names), "cache_type": "vllm_%s" % self.dtype,
                        "states": [{"role": "kv", "dtype": "U8", "shape": ["T", per_token]}]}]}))
        self.region_bytes = self.factor * self.page_bytes  # one layer's bytes of a block
        self.hash_algo = hash_algo
        model_config = getattr(vllm_config, "model_config", None)
        model = str(getattr(model_config, "model", "") or "vllm")
        revision = getattr(model_config, "revision", None)
        self.model_id = str(options.get("key_model_id") or (
            "%s@%s" % (model, revision) if revision else model))
        salt = options.get("key_salt", b"")
        self.salt = salt.encode() if isinstance(salt, str) else bytes(salt)
        self.adapter = str(options.get("key_adapter_id", ""))
        parallel = getattr(vllm_config, "parallel_config", None)
        self.tp_size = int(getattr(parallel, "tensor_parallel_size", 1) or 1)
        for name in ("pipeline_parallel_size", "decode_context_parallel_size"):
            if int(getattr(parallel, name, 1) or 1) > 1:
                raise kvtier.FailedPrecondition(
                    "vllm: %s > 1 is not supported by the kvtier backend (each stage or rank "
                    "would hold other layers or tokens under one key)" % name)
        self.mla = bool(getattr(model_config, "use_mla", False))

    def shard(self, tp_rank):
        """The canonical shard of a TP rank (none for MLA or a single rank)."""
        if self.mla or self.tp_size == 1:
            return ""
        return "tp=%d/%d" % (tp_rank, self.tp_size)

    def shard_ranks(self):
        """The TP ranks whose blocks a lookup must find (one for MLA)."""
        return [0] if self.mla or self.tp_size == 1 else list(range(self.tp_size))

    def key_chain(self, tp_rank):
        return kvtier.KeyChain(self.model_id, self.layout, salt=self.salt,
                               adapter=self.adapter, extra=b"vllm:" + self.hash_algo.encode(),
                               shard=self.shard(tp_rank))


def _tp_rank(vllm_config):
    """This worker's tensor-parallel rank."""
    get_rank = _vllm_attr("vllm.distributed.parallel_state", "get_tensor_model_parallel_rank")
    if get_rank is not None:
        try:
            return int(get_rank())
        except Exception:  # the parallel state is not initialised (one process)
            pass
    parallel = getattr(vllm_config, "parallel_config", None)
    tp = int(getattr(parallel, "tensor_parallel_size", 1) or 1)
    return int(getattr(parallel, "rank", 0) or 0) % tp


# --- The spec -----------------------------------------------------------------

class KvtierOffloadingSpec(OffloadingSpecBase):
    """vLLM OffloadingSpec (spec_name "KvtierOffloadingSpec", spec_module_path
    "kvtier.integrations.vllm") over a kvtier.Cache."""

    def __init__(self, vllm_config, kv_cache_config=None):
        # kvtier's checks first: their one-line refusals, not an error from
        # vLLM's base class on the same configuration.
        extra = dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})
        algo = check_reproducible_hashing(vllm_config)
        self.options = cache_options(extra)
        self.plan = BlockPlan(vllm_config, kv_cache_config, extra, self.options, algo)
        base_init = OffloadingSpecBase.__init__
        if base_init is not object.__init__:
            params = list(inspect.signature(base_init).parameters)
            if len(params) >= 3:
                base_init(self, vllm_config, kv_cache_config)
            else:  # vLLMs whose spec took only the config
                base_init(self, vllm_config)
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        self._manager = None

    def get_manager(self):
        if self._manager is None:
            cache = shared_cache(self.plan.layout, self.options)
            self._manager = KvtierOffloadingManager(cache, self.plan)
        return self._manager

    def get_handlers(self, kv_caches, attn_backends=None):
        cache = shared_cache(self.plan.layout, self.options)
        chain = self.plan.key_chain(_tp_rank(self.vllm_config))
        regions = gpu_regions(kv_caches, self.plan)
        handler = KvtierOffloadingHandler(cache, self.plan, chain.namespace, regions)
        yield GPULoadStoreSpec, KvtierLoadStoreSpec, handler
        yield KvtierLoadStoreSpec, GPULoadStoreSpec, handler


# --- The scheduler side -------------------------------------------------------

class KvtierOffloadingManager(OffloadingManagerBase):
    """vLLM's scheduler-side manager: answers from the kvtier cache itself (so
    blocks other processes or earlier runs stored count), and keeps only the
    bookkeeping vLLM's calls need (stores in flight, events)."""

    def __init__(self, cache, plan):
        self.cache = cache
        self.plan = plan
        self.namespaces = [plan.key_chain(r).namespace for r in plan.shard_ranks()]
        self._lock = threading.Lock()
        self._storing = collections.Counter()
        self._events = Announcer(lambda hashes, removed: OffloadingEvent(
            block_hashes=hashes, block_size=plan.block_tokens, medium=MEDIUM, removed=removed))
        self._scratch = np.empty((_VERIFY_CHUNK, plan.layout.max_file_bytes), np.uint8)

    def _verified_prefix(self, namespace, hashes):
        """Leading blocks present and verified (loaded, decoded) under one shard."""
        keys = [block_key(namespace, h) for h in hashes]
        present = self.cache.match(keys)
        good = 0
        while good < present:
            chunk = keys[good:min(present, good + _VERIFY_CHUNK)]
            with self._lock:  # one scratch arena
                sizes = self.cache.load_many(chunk, [self._scratch[i] for i in range(len(chunk))])
                for i, (key, size) in enumerate(zip(chunk, sizes)):
                    if size == 0 or not _decodes(self._scratch[i, :size], self.plan.layout, key):
                        return good + i
            good += len(chunk)
        return good

    def lookup(self, block_hashes):
        try:
            hashes = list(block_hashes)
            hits = len(hashes)
            for namespace in self.namespaces:
                if hits == 0:
                    break
                hits = min(hits, self._verified_prefix(namespace, hashes[:hits]))
            # Blocks kvtier holds that this process has not announced (stored by
            # another process or before a restart) are announced now; removals
            # are found by take_events' sweep.
            self._events.stored([hash_bytes(h) for h in hashes[:hits]], only_new=True)
            return hits
        except Exception as e:
            logger.warning("vllm: lookup failed, answering a miss: %s", e)
            return 0

    def _promised_keys(self, block_hashes):
        return [block_key(ns, h) for h in block_hashes for ns in self.namespaces]

    def prepare_load(self, block_hashes):
        """Pins the blocks vLLM will load: their verified bytes are held (in
        PINS, and in the spec when the worker is another process) until
        complete_load, whatever kvtier evicts or another process removes in
        between. A block already gone is left out; its job then fails
        cleanly at the worker."""
        hashes = list(block_hashes)
        try:
            keys = self._promised_keys(hashes)
            got = read_verified(self.cache, self.plan.layout, keys)
            for key, data in got.items():
                PINS.hold(key, data)
            if len(got) < len(keys):
                logger.warning("vllm: %d of %d promised blocks were gone at prepare_load",
                               len(keys) - len(got), len(keys))
            return KvtierLoadStoreSpec(hashes, carried_blocks(got))
        except Exception as e:
            logger.warning("vllm: prepare_load could not pin its blocks: %s", e)
            return KvtierLoadStoreSpec(hashes)

    def touch(self, block_hashes):
        # kvtier's tiers keep their own recency (loads count as uses).
        return

    def complete_load(self, block_hashes):
        try:
            for key in self._promised_keys(list(block_hashes)):
                PINS.release(key)
        except Exception as e:
            logger.warning("vllm: complete_load failed: %s", e)

    def _stored(self, block_hash):
        return all(self.cache.contains(block_key(ns, block_hash)) is not None
                   for ns in self.namespaces)

    def prepare_store(self, block_hashes):
        try:
            hashes = list(block_hashes)
            with self._lock:
                busy = set(h for h in hashes if self._storing[hash_bytes(h)])
            to_store = [h for h in hashes if h not in busy and not self._stored(h)]
            with self._lock:
                for h in to_store:
                    self._storing[hash_bytes(h)] += 1
            return PrepareStoreOutput(block_hashes_to_store=to_store,
                                      store_spec=KvtierLoadStoreSpec(to_store),
                                      block_hashes_evicted=[])
        except Exception as e:
            logger.warning("vllm: prepare_store failed, not storing: %s", e)
            return None

    def complete_store(self, block_hashes, success=True):
        try:
            hashes = list(block_hashes)
            with self._lock:
                for h in hashes:
                    b = hash_bytes(h)
                    self._storing[b] -= 1
                    if self._storing[b] <= 0:
                        del self._storing[b]
            # Announce only what kvtier holds now (a worker that could not
            # store, e.g. on a full disk, still finishes its job).
            self._events.stored([hash_bytes(h) for h in hashes if success and self._stored(h)])
        except Exception as e:
            logger.warning("vllm: complete_store failed: %s", e)

    def take_events(self):
        yield from self._events.take(self._stored)


# --- The worker side ----------------------------------------------------------

def gpu_regions(kv_caches, plan):
    """Per layer of the plan, the byte views of vLLM's KV cache: a list of
    (num_blocks, n) uint8 tensors whose rows, concatenated, are one GPU block
    of that layer (two for a (2, num_blocks, ...) K/V tensor)."""
    tensors = getattr(kv_caches, "tensors", None)
    if tensors is not None:  # later vLLMs: CanonicalKVCaches, (num_blocks, page) int8 tensors
        regions = canonical_regions(kv_caches, 0, len(plan.layer_names))
    else:
        kv = dict(kv_caches)
        if set(kv) != set(plan.layer_names):
            raise kvtier.FailedPrecondition(
                "vllm: the KV caches name layers %s, vLLM's KV cache config %s (a cross-layer "
                "KV cache is not supported)" % (sorted(kv)[:4], plan.layer_names[:4]))
        regions = []
        for name in plan.layer_names:
            t = kv[name]
            if t.dim() >= 2 and t.shape[0] == 2 and t.shape[1] == plan.num_blocks:
                regions.append([as_bytes(t[0]), as_bytes(t[1])])  # K blocks, V blocks
            else:
                regions.append([as_bytes(t)])
    for name, parts in zip(plan.layer_names, regions):
        if region_bytes(parts) != plan.page_bytes:
            raise kvtier.FailedPrecondition(
                "vllm: layer %s: %d bytes per GPU block, vLLM's KV cache spec says %d"
                % (name, region_bytes(parts), plan.page_bytes))
    if len(regions) != len(plan.layer_names):
        raise kvtier.FailedPrecondition("vllm: %d KV regions for %d layers"
                                        % (len(regions), len(plan.layer_names)))
    return regions


def canonical_regions(kv_caches, group, num_layers):
    """Per layer of a KV cache group, the byte views of CanonicalKVCaches'
    refs of that layer: one (num_blocks, page) ref per layer, or several (K
    and V halves: FlashAttention's page split in two refs), in ref order."""
    refs = list(kv_caches.group_data_refs[group])
    if num_layers <= 0 or len(refs) % num_layers:
        raise kvtier.FailedPrecondition(
            "vllm: KV cache group %d has %d layers and %d canonical refs (not a whole number "
            "per layer)" % (group, num_layers, len(refs)))
    per = len(refs) // num_layers
    views = [as_bytes(kv_caches.tensors[r.tensor_idx].tensor)[:, :int(r.page_size_bytes)]
             for r in refs]
    return [views[i * per:(i + 1) * per] for i in range(num_layers)]


class KvtierOffloadingHandler(OffloadingHandlerBase):
    """vLLM's worker-side handler for both directions. Transfers run on
    kvtier's own threads (kvtier releases the GIL while it reads and writes);
    nothing raises into vLLM's threads."""

    def __init__(self, cache, plan, namespace, regions, threads=2):
        self.cache = cache
        self.plan = plan
        self.namespace = namespace
        self.regions = regions
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kvtier-vllm")
        self._lock = threading.Lock()
        self._finished = []
        self._jobs = {}
        register_local_worker()

    def transfer_async(self, job_id, spec):
        try:
            src, dst = spec
            route = (src.medium(), dst.medium())
            if route == (GPU_MEDIUM, MEDIUM):
                run = self._store
            elif route == (MEDIUM, GPU_MEDIUM):
                run = self._load
            else:
                logger.warning("vllm: job %s: no kvtier transfer from %s to %s", job_id, *route)
                return False
            with self._lock:
                self._jobs[job_id] = self._pool.submit(self._run, job_id, run, src, dst)
            return True
        except Exception as e:
            logger.warning("vllm: job %s not started: %s", job_id, e)
            return False

    def _run(self, job_id, run, src, dst):
        try:
            ok = bool(run(src, dst))
        except Exception as e:
            logger.warning("vllm: job %s failed: %s", job_id, e)
            ok = False
        with self._lock:
            self._finished.append((job_id, ok))

    def get_finished(self):
        with self._lock:
            done, self._finished = self._finished, []
            for job_id, _ in done:
                self._jobs.pop(job_id, None)
        return [transfer_result(j, ok) for j, ok in done]

    def wait(self, job_ids):
        with self._lock:
            futures = [f for j, f in self._jobs.items() if j in set(job_ids)]
        _wait_futures(futures)

    def shutdown(self):
        self._pool.shutdown(wait=True)

    def _keys(self, hashes):
        return [block_key(self.namespace, h) for h in hashes]

    def _gather(self, block_ids):
        return gather(self.regions, block_ids)

    def _store(self, src, dst):
        """GPU blocks -> kvtier blocks. True once the GPU blocks were read:
        a block kvtier could not keep (full disk, ...) is logged and is a
        later miss, never a failed job (vLLM does not take failed jobs)."""
        hashes = dst.block_hashes
        ids = [int(i) for i in np.asarray(src.block_ids).reshape(-1)]
        f = self.plan.factor
        if len(ids) != len(hashes) * f:
            logger.warning("vllm: store of %d blocks got %d GPU blocks (want %d each)",
                           len(hashes), len(ids), f)
            return False
        per_token = self.plan.page_bytes // self.plan.gpu_block_size
        data = [a.reshape(len(hashes), self.plan.block_tokens, per_token)
                for a in self._gather(ids)]
        keys = self._keys(hashes)
        for i, key in enumerate(keys):
            parent = keys[i - 1] if i else self.namespace
            try:
                self.cache.store_tensors(key, parent, self.namespace, [d[i] for d in data])
            except kvtier.Error as e:
                logger.warning("vllm: block %s not stored: %s", key.hex()[:16], e)
        return True

    def _load(self, src, dst):
        """kvtier blocks -> GPU blocks. Writes the GPU blocks only when every
        block loaded and decoded; otherwise a failed job, nothing written."""
        hashes = src.block_hashes
        ids = [int(i) for i in np.asarray(dst.block_ids).reshape(-1)]
        f = self.plan.factor
        skip = len(hashes) * f - len(ids)  # GPU blocks of the first one vLLM already has
        if not hashes or not 0 <= skip < f:
            logger.warning("vllm: load of %d blocks into %d GPU blocks", len(hashes), len(ids))
            return False
        keys = self._keys(hashes)
        per_region = [[] for _ in self.regions]
        for tensors in load_promised(self.cache, self.plan.layout, keys,
                                     getattr(src, "blocks", None)):
            if tensors is None:
                return False  # load_promised said which and why
            for r, t in enumerate(tensors):
                per_region[r].append(t.reshape(f, self.plan.page_bytes))

        scatter(self.regions, ids, stacked(per_region, skip))
        return True
