"""kvtier as a secondary tier of vLLM's multi-tier offloading (vLLM's own CPU
tier is primary and does every GPU <-> host copy; kvtier keeps its blocks in
RAM, on disk and in Redis). Written against
vllm/v1/kv_offload/tiering/base.py (SecondaryTierManager, JobMetadata,
JobResult with successful_keys) and the fs tier
(tiering/fs/manager.py at 0255eeaa: a primary slot is primary_kv_view.strides[0]
bytes at block_id * that offset), with base.py at 0105e232.

Driven through vLLM's own TieringOffloadingSpec / TieringOffloadingManager /
SecondaryTierFactory at neuralmagic/vllm 017e9f44 (a fork that tracks
vllm-project/vllm main; tiering/base.py there: TransferJob, JobResult with
successful_keys, build_metric_definitions, get_stats).

Configure it as a secondary tier ``{"type": "KvtierSecondaryTier",
"module_path": "kvtier.integrations.vllm", ...}``: vLLM imports nothing of
kvtier before it builds its tiers, so its factory finds the class through
``module_path``. (``register_secondary_tier`` also registers the short type
"kvtier" when this module is imported first.) The tier's config keys other
than ``type`` and ``module_path`` are kvtier options.

A kvtier block holds one primary slot (one OffloadKey's chunk, all workers'
bytes as vLLM's CPU tier lays them out). Its key is
``SHA-256("kvtier-vllm-block-v1\\0" || namespace || block hash)`` with the
extra ``vllm-tier:g=<group>`` (and the parallel sizes unless vLLM says the
layout is parallelism-agnostic) in the namespace.

A lookup HIT is a promise: its verified block is held (PINS) until the
request's load completes or the request finishes. A load writes each slot
only from a verified block; a partial failure reports successful_keys.
"""

import collections
import inspect
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait as _wait_futures

import numpy as np

import kvtier

from . import _common, _stats
from ._common import (PINS, Announcer, block_key, cache_options, load_promised, logger,
                      read_verified, shared_cache)
from ._offload_route import LookupResult, Locality, Medium, OffloadingEvent, \
    RequestOffloadingContext, get_offload_block_hash, get_offload_group_idx, make

_T = "vllm.v1.kv_offload.tiering.base"
SecondaryTierManagerBase = _common.vllm_attr(_T, "SecondaryTierManager")
JobResult = _common.vllm_attr(_T, "JobResult")
TIER_TYPE = "kvtier"
TIER_NEEDS = ("get_finished_jobs", "drain_jobs", "on_new_request")


def tier_refusal():
    """None when this vLLM's SecondaryTierManager is the one this tier
    implements, else the one-line refusal."""
    if SecondaryTierManagerBase is None or JobResult is None:
        return ("kvtier.integrations.vllm: this vLLM has no %s.SecondaryTierManager; the "
                "kvtier secondary tier needs vLLM's multi-tier offloading (vLLM 0.26 and "
                "later)" % _T)
    missing = [n for n in TIER_NEEDS if not hasattr(SecondaryTierManagerBase, n)]
    if missing:
        return ("kvtier.integrations.vllm: this vLLM's SecondaryTierManager lacks %s; the "
                "kvtier secondary tier supports the interface of vLLM 0.26 and later"
                % ", ".join(missing))
    return None


# Keywords some vLLM tier factories pass every tier besides its config
# (neuralmagic/vllm's backpressure branch, 0b736e0f: backpressure_detector,
# earlier backpressure): they go to vLLM's base class when it takes them,
# never into kvtier's options (whose check refuses unknown names).
_BASE_KEYWORDS = ("backpressure_detector", "backpressure")


def _base_keywords(options):
    """Takes _BASE_KEYWORDS out of `options`; returns those the base's
    __init__ accepts. One it does not accept is dropped (logged when set)."""
    try:
        accepted = inspect.signature(SecondaryTierManagerBase.__init__).parameters
    except (TypeError, ValueError):
        accepted = {}
    out = {}
    for name in _BASE_KEYWORDS:
        if name not in options:
            continue
        value = options.pop(name)
        if name in accepted:
            out[name] = value
        elif value is not None:
            logger.warning("vllm: this vLLM's SecondaryTierManager takes no %s; ignored", name)
    return out


def _locality(value, remote):
    """The tier's Locality: the config's "locality" ("LOCAL" or "REMOTE", as
    vLLM's fs tier takes it); without one, LOCAL for a cache without a remote
    tier and None (not said) for one with a remote tier."""
    if value is None:
        return None if remote else getattr(Locality, "LOCAL", None)
    try:
        return Locality(value)
    except (TypeError, ValueError):
        names = [m.value for m in Locality] if Locality is not None else []
        raise kvtier.InvalidArgument("locality: %r is not one of %s" % (value, names)) from None


def _slot_ids(job):
    """The primary slots of a tier job: TransferJob.chunk_ids in vLLM's newer
    tiering/base.py, block_ids before."""
    ids = getattr(job, "chunk_ids", None)
    return job.block_ids if ids is None else ids


class _StandIn:
    def __init__(self, *args, **kwargs):
        raise kvtier.FailedPrecondition(tier_refusal())


class KvtierSecondaryTier(SecondaryTierManagerBase if tier_refusal() is None else _StandIn):
    """vLLM SecondaryTierManager over a kvtier.Cache. Every method runs on
    vLLM's scheduler thread and returns at once; copies run on kvtier's own
    threads. Thread-safe: one lock over the job and promise tables."""

    @classmethod
    def build_metric_definitions(cls, extra_config):
        """The metrics get_stats() reports."""
        return _stats.metric_definitions()

    def __init__(self, offloading_spec, primary_kv_view, tier_type=TIER_TYPE, **options):
        super().__init__(offloading_spec, primary_kv_view, tier_type, **_base_keywords(options))
        config = offloading_spec.config
        self.medium = Medium.STORAGE
        locality = options.pop("locality", None)
        self.options = cache_options(options)
        self.locality = _locality(locality, bool(self.options.get("remote")))
        self._slot = int(primary_kv_view.strides[0])
        self._view = np.frombuffer(primary_kv_view, dtype=np.uint8)
        self.layout = kvtier.Layout.from_json(json.dumps({
            "name": "vllm-primary-slot", "block_tokens": 1,
            "layers": [{"repeat": 1, "cache_type": "vllm_primary_slot",
                        "states": [{"role": "kv", "dtype": "U8", "shape": ["T", self._slot]}]}]}))
        self.cache = shared_cache(self.layout, self.options)
        self._stats = _stats.StatsReporter([self.cache])
        p = config.parallel
        self._parallel = b"" if getattr(p, "is_parallelism_agnostic", False) else (
            b";tp=%d;pp=%d;pcp=%d;dcp=%d" % (p.tp_size, p.pp_size, p.pcp_size, p.dcp_size))
        salt = self.options.get("key_salt", b"")
        self._salt = salt.encode() if isinstance(salt, str) else bytes(salt)
        self._model = str(self.options.get("key_model_id") or config.model.name)
        self._namespaces = {}
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kvtier-vllm-tier")
        self._lock = threading.Lock()
        self._jobs = {}
        self._finished = []
        self._promised = collections.defaultdict(set)  # req_id -> kvtier keys held
        self._reading = {}  # (req_id, kvtier key) -> a lookup's read in flight
        self._events = Announcer(lambda keys, removed: make(
            OffloadingEvent, keys=keys, medium=self.medium, removed=removed,
            locality=self.locality, ownership=self.tier_type))

    # --- keys

    def _namespace(self, group):
        if group not in self._namespaces:
            self._namespaces[group] = kvtier.KeyChain(
                self._model, self.layout, salt=self._salt,
                adapter=str(self.options.get("key_adapter_id", "")),
                extra=b"vllm-tier:g=%d" % group + self._parallel).namespace
        return self._namespaces[group]

    def kv_key(self, key):
        return block_key(self._namespace(get_offload_group_idx(key)),
                         get_offload_block_hash(key))

    def _present(self, key):
        return self.cache.contains(self.kv_key(key)) is not None

    # --- lookups and promises

    def lookup(self, key, req_context):
        """MISS when kvtier has no such block; otherwise the block is read and
        verified on kvtier's threads (RETRY meanwhile: vLLM's scheduler thread
        never waits on a disk or Redis read), then HIT with its bytes held
        for this request, or MISS if it did not verify."""
        try:
            kv_key = self.kv_key(key)
            req = getattr(req_context, "req_id", None)
            with self._lock:
                if kv_key in self._promised.get(req, ()):
                    return LookupResult.HIT
                reading = self._reading.get((req, kv_key))
            if reading is None:
                if self.cache.contains(kv_key) is None:
                    return LookupResult.MISS
                reading = self._pool.submit(read_verified, self.cache, self.layout, [kv_key])
                with self._lock:
                    self._reading[(req, kv_key)] = reading
            if not reading.done():
                return LookupResult.RETRY
            with self._lock:
                self._reading.pop((req, kv_key), None)
            data = reading.result().get(kv_key)
            if data is None:
                return LookupResult.MISS
            PINS.hold(kv_key, data)
            with self._lock:
                self._promised[req].add(kv_key)
            self._events.stored([key], only_new=True)
            return LookupResult.HIT
        except Exception as e:
            logger.warning("vllm: tier lookup failed, answering a miss: %s", e)
            return LookupResult.MISS

    def _release(self, req, only=None):
        """Ends the request's promises (those of `only`, if given)."""
        with self._lock:
            if only is None:  # the request is over: its reads in flight too
                for tag in [t for t in self._reading if t[0] == req]:
                    del self._reading[tag]
            held = self._promised.get(req, set())
            keys = set(held) if only is None else held & only
            held -= keys
            if not held:
                self._promised.pop(req, None)
        for kv_key in keys:
            PINS.release(kv_key)

    def on_new_request(self, req_context):
        return RequestOffloadingContext()

    def on_request_finished(self, req_context):
        self._release(getattr(req_context, "req_id", None))

    request_finished = on_request_finished

    def touch(self, keys, req_context):
        return  # kvtier's tiers keep their own recency (loads count as uses)

    # --- jobs

    def _submit(self, job, run):
        try:
            with self._lock:
                self._jobs[job.job_id] = self._pool.submit(self._run, job, run)
        except Exception as e:
            logger.warning("vllm: tier job %s not started: %s", job.job_id, e)
            with self._lock:
                self._finished.append(make(JobResult, job_id=job.job_id, success=False))

    def submit_store(self, job_metadata):
        self._submit(job_metadata, self._store)

    def submit_load(self, job_metadata):
        self._submit(job_metadata, self._load)

    def _run(self, job, run):
        start = time.monotonic()
        keys = list(job.keys)
        try:
            done = run(keys, [int(b) for b in np.asarray(_slot_ids(job)).reshape(-1)])
        except Exception as e:
            logger.warning("vllm: tier job %s failed: %s", job.job_id, e)
            done = []
        ok = len(done) == len(keys)
        result = make(JobResult, job_id=job.job_id, success=ok,
                      successful_keys=None if ok or not done else tuple(done),
                      transfer_time=time.monotonic() - start,
                      transfer_size=len(done) * self._slot, transfer_bytes=len(done) * self._slot)
        if run == self._load:  # the promises of this load end with it
            self._release(getattr(job.req_context, "req_id", None),
                          {self.kv_key(k) for k in keys})
        with self._lock:
            self._finished.append(result)

    def _slot_bytes(self, block_id):
        if self._view is None:
            raise kvtier.FailedPrecondition("vllm: the tier is shut down")
        return self._view[block_id * self._slot:(block_id + 1) * self._slot]

    def _store(self, keys, block_ids):
        """Primary slots -> kvtier blocks; the keys kvtier now holds."""
        if len(keys) != len(block_ids):
            raise kvtier.InvalidArgument("%d keys for %d slots" % (len(keys), len(block_ids)))
        stored = []
        for key, bid in zip(keys, block_ids):
            kv_key = self.kv_key(key)
            namespace = self._namespace(get_offload_group_idx(key))
            try:
                self.cache.store_tensors(kv_key, namespace, namespace,
                                         [self._slot_bytes(bid).reshape(1, self._slot)])
                stored.append(key)
            except kvtier.Error as e:
                logger.warning("vllm: block %s not stored: %s", kv_key.hex()[:16], e)
        self._events.stored(stored)
        return stored

    def _load(self, keys, block_ids):
        """kvtier blocks -> primary slots, each slot written only from a
        verified block; the keys written, in order, up to the first failure."""
        if len(keys) != len(block_ids):
            raise kvtier.InvalidArgument("%d keys for %d slots" % (len(keys), len(block_ids)))
        kv_keys = [self.kv_key(k) for k in keys]
        loaded = []
        for key, bid, tensors in zip(keys, block_ids,
                                     load_promised(self.cache, self.layout, kv_keys)):
            if tensors is None:
                break  # load_promised said which and why
            (tensor,) = tensors
            self._slot_bytes(bid)[:] = tensor.reshape(-1)
            loaded.append(key)
        return loaded

    def get_finished_jobs(self):
        with self._lock:
            done, self._finished = self._finished, []
            for r in done:
                self._jobs.pop(r.job_id, None)
        return done

    def drain_jobs(self):
        with self._lock:
            futures = list(self._jobs.values()) + list(self._reading.values())
        _wait_futures(futures)

    def take_events(self):
        yield from self._events.take(self._present)

    def get_stats(self):
        """vLLM's OffloadingConnectorStats from the cache's counters, or None."""
        return self._stats.take()

    def shutdown(self):
        """Drains, lets go of vLLM's primary view (vLLM closes its mmap after
        this; an array kept over it would stop that close), flushes."""
        self.drain_jobs()
        self._pool.shutdown(wait=True)
        self._view = None
        for req in list(self._promised):
            self._release(req)
        try:
            self.cache.flush()
        except kvtier.Error as e:
            logger.warning("vllm: tier shutdown flush: %s", e)


def register_secondary_tier():
    """Registers tier type "kvtier" with vLLM's SecondaryTierFactory (once)."""
    factory = _common.vllm_attr("vllm.v1.kv_offload.tiering.factory", "SecondaryTierFactory")
    registry = getattr(factory, "_registry", None)
    if factory is None or tier_refusal() is not None or TIER_TYPE in (registry or {}):
        return False
    factory.register_tier(TIER_TYPE, "kvtier.integrations.vllm", "KvtierSecondaryTier")
    return True


register_secondary_tier()
