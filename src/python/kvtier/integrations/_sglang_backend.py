"""The body of kvtier.integrations.sglang's KvtierHiCacheStorage (see there).

SglangBackend has every method of SGLang's HiCacheStorage (the table in
tests/python/sglang_fakes.py names them, with the commit they were read at);
kvtier.integrations.sglang puts SGLang's base class under it.
"""

import hashlib
import importlib
import logging
import os
import sys
import threading
import time

import numpy as np

import kvtier
from kvtier.integrations import _sglang_pages as pages_mod
from kvtier.integrations._sglang_pages import PoolPages, Refused, byte_view, pool_key

logger = logging.getLogger("kvtier")

_KEY_DOMAIN = b"kvtier-sglang-page-v1\0"
# Keys of the extra config that SGLang reads itself (tp_lcm_size: its
# controller pops it before the backend sees the config; tolerated anyway).
_SGLANG_KEYS = ("backend_name", "module_path", "class_name", "interface_v1", "tp_lcm_size")
# kvtier options the backend sets from SGLang's host pool and position.
_BACKEND_SET = ("layout", "block_tokens", "key_shard")
_STORAGE_MODULE = "sglang.srt.mem_cache.hicache_storage"
_METRICS_MODULE = "sglang.srt.metrics.collector"
_LOG_EVERY_S = 30.0
_METRICS_MAX = 4096  # samples kept between two get_stats calls


def default_disk_dir():
    """The per-user default cache folder: $XDG_CACHE_HOME/kvtier/sglang."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kvtier", "sglang")


def cache_options(extra):
    """The kvtier.Cache options of an SGLang extra config (checked by kvtier's
    options parser): SGLang's own keys left out, defaults filled in."""
    options = {k: v for k, v in dict(extra or {}).items() if k not in _SGLANG_KEYS}
    for name in _BACKEND_SET:
        if name in options:
            raise kvtier.InvalidArgument(
                "sglang: %s: set by the backend from SGLang's host pool (page layout, page "
                "size, parallel position); leave it out of the extra config" % name)
    options.setdefault("host_bytes", 1 << 30)
    if "disk_dir" not in options:
        options["disk_dir"] = default_disk_dir()
    kvtier._kvtier._check_options(options)
    return options


def _as_bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value or b"")


class _Store:
    """One registered pool: its pages, its kvtier.Cache, one key chain per head split."""

    def __init__(self, pages, cache, chains):
        self.pages, self.cache, self.chains = pages, cache, chains


class _Metrics:
    """SGLang's StorageMetrics samples: pages and GB/s per prefetch and backup call."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.lock = threading.Lock()
        self.samples = {"prefetch": ([], []), "backup": ([], [])}

    def record(self, kind, pages, nbytes, seconds):
        if not self.enabled or pages == 0:
            return
        with self.lock:
            pgs, bw = self.samples[kind]
            if len(pgs) < _METRICS_MAX:
                pgs.append(pages)
                bw.append(nbytes / 1e9 / max(seconds, 1e-9))

    def take(self):
        with self.lock:
            taken = {k: (list(p), list(b)) for k, (p, b) in self.samples.items()}
            for p, b in self.samples.values():
                p.clear()
                b.clear()
        return taken


class SglangBackend:
    """SGLang HiCacheStorage backed by kvtier.Cache objects (RAM over a disk
    folder, optionally over Redis): one per registered host pool."""

    def __init__(self, storage_config, kwargs=None):
        extra = getattr(storage_config, "extra_config", None) or {}
        self.options = cache_options(extra)
        self.config = storage_config
        self.disk_dir = self.options["disk_dir"]
        self._default_dir = "disk_dir" not in extra
        self.interface_v1 = bool(extra.get("interface_v1", 0))
        self.model_id = self.options.get("key_model_id") \
            or getattr(storage_config, "model_name", None) or "sglang"
        self.replicated = bool(getattr(storage_config, "is_mla_model", False))
        self.mem_pool_host = None
        self._stores = {}
        self._lock = threading.Lock()  # registration vs. the I/O threads
        self._metrics = _Metrics(bool(getattr(storage_config, "enable_storage_metrics", False)))
        self._staging = threading.local()
        self._last_log = {}

    # --- Registration (scheduler thread; a refusal stops the server's start) ---

    def register_mem_pool_host(self, mem_pool_host):
        """Registers SGLang's KV host pool (v1 interface)."""
        self.mem_pool_host = mem_pool_host
        self._register(mem_pool_host, "kv", self._kv_split())

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        """Registers a host pool of a hybrid model (v2 interface): Mamba, SWA,
        DSA indexer, ...; DeepSeek-V4's pools are refused."""
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool
        name = pool_key(host_pool_name)
        current = self._stores.get(name)
        if current is not None and current.pages.pool is host_pool:
            return
        self._register(host_pool, name, self._kv_split() if name == "kv" else 1)

    def _kv_split(self):
        c = self.config
        lcm = getattr(c, "tp_lcm_size", None)
        if not getattr(c, "should_split_heads", False) or not lcm:
            return 1
        tp_size = int(getattr(c, "tp_size", 1))
        if lcm % tp_size:
            raise Refused("sglang: tp_lcm_size %d is not a multiple of tp_size %d"
                          % (lcm, tp_size))
        return lcm // tp_size

    def _register(self, pool, name, split):
        if pages_mod.is_deepseek_v4(pool, name):
            raise Refused("sglang: %s pool %s: DeepSeek-V4's compressed host pools are not "
                          "supported by kvtier yet; run without an L3 storage backend"
                          % (name, type(pool).__name__))
        pages = PoolPages(name, pool, split)
        if name == "kv" and not self.interface_v1 and not pages.flat_ok():
            pages = PoolPages(name, pool, split, flat=True)
        chains = [self._chain(pages.layout, split, j) for j in range(split)]
        with self._lock:
            old = self._stores.get(name)
            if old is not None and old.pages.layout.signature == pages.layout.signature:
                self._stores[name] = _Store(pages, old.cache, chains)
                return
            if self.disk_dir is not None and self._default_dir:
                os.makedirs(self.disk_dir, mode=0o700, exist_ok=True)
            self._stores[name] = _Store(pages, kvtier.Cache(pages.layout, **self.options), chains)
        if old is not None:
            old.cache.close()

    def _shard(self, split, j):
        c = self.config
        fields = []
        if not self.replicated:  # rank-replicated (MLA) pages are shared by all tp ranks
            rank, size = int(getattr(c, "tp_rank", 0)), int(getattr(c, "tp_size", 1))
            fields.append(("tp", rank * split + j, size * split))
        fields += [("pp", int(getattr(c, "pp_rank", 0)), int(getattr(c, "pp_size", 1))),
                   ("cp", int(getattr(c, "attn_cp_rank", 0)), int(getattr(c, "attn_cp_size", 1)))]
        return ";".join("%s=%d/%d" % f for f in fields if f[2] > 1)

    def _chain(self, layout, split, j):
        o = self.options
        return kvtier.KeyChain(self.model_id, layout, salt=_as_bytes(o.get("key_salt", b"")),
                               adapter=o.get("key_adapter_id", ""),
                               extra=_as_bytes(o.get("key_extra", b"")),
                               shard=self._shard(split, j))

    def kvtier_key(self, key, pool="kv", split=0):
        """The kvtier block key of an SGLang page key in a pool (see the module comment)."""
        chain = self._stores[pool].chains[split]
        return hashlib.sha256(_KEY_DOMAIN + chain.namespace + key.encode()).digest()

    def _block_keys(self, store, keys):
        return [hashlib.sha256(_KEY_DOMAIN + chain.namespace + k.encode()).digest()
                for k in keys for chain in store.chains]

    # --- Never raising into SGLang's threads ----------------------------------

    def _log(self, kind, message, *args):
        """logger.error at most once per 30 s per kind: a dead server or a full
        disk would otherwise log every page."""
        now = time.monotonic()
        last = self._last_log.get(kind)
        if last is None or now - last >= _LOG_EVERY_S:
            self._last_log[kind] = now
            logger.error("sglang backend: " + message, *args)

    def _store_of(self, name):
        store = self._stores.get(pool_key(name))
        if store is None:
            raise kvtier.FailedPrecondition("sglang: no %s host pool registered" % pool_key(name))
        return store

    # --- Existence --------------------------------------------------------------

    def exists(self, key):
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys, extra_info=None):
        """The number of leading pages kvtier holds (any tier); 0 on a failure."""
        try:
            return self._leading(self._store_of("kv"), keys)
        except Exception as e:
            self._log("batch_exists", "batch_exists: %s: %s", type(e).__name__, e)
            return 0

    def _leading(self, store, keys):
        if not keys:
            return 0
        return store.cache.match(self._block_keys(store, keys)) // store.pages.split

    def _present(self, store, key):
        return all(store.cache.contains(k) is not None for k in self._block_keys(store, [key]))

    def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
        """SGLang's per-pool prefix: the KV prefix, cut to where every extra
        pool has its pages (all of them, or the trailing ones)."""
        kv_name = self._pool_name("KV", "kv")
        try:
            kv_pages = self._leading(self._store_of("kv"), keys)
            hits = {kv_name: kv_pages} if kv_pages else {}
            final = kv_pages
            for transfer in pool_transfers or []:
                if final == 0:
                    break
                boundary = self._pool_boundary(transfer, keys, kv_pages)
                if boundary:
                    hits[transfer.name] = boundary
                final = min(final, boundary)
            return self._transfer_result(final, hits)
        except Exception as e:
            self._log("batch_exists_v2", "batch_exists_v2: %s: %s", type(e).__name__, e)
            return self._transfer_result(0, {})

    def _pool_boundary(self, transfer, keys, kv_pages):
        store = self._store_of(transfer.name)
        policy = str(getattr(transfer.hit_policy, "value", transfer.hit_policy))
        if policy != "trailing_pages":
            return self._leading(store, keys[:kv_pages])
        trailing = max(1, len(transfer.keys) if transfer.keys else 1)
        present = {}
        for end in range(kv_pages, 0, -1):
            window = range(max(0, end - trailing), end)
            for i in window:
                if i not in present:
                    present[i] = self._present(store, keys[i])
            if all(present[i] for i in window):
                return end
        return 0

    def _pool_name(self, member, default):
        module = sys.modules.get(_STORAGE_MODULE)
        names = getattr(module, "PoolName", None)
        return getattr(names, member, default) if names is not None else default

    def _transfer_result(self, kv_hit_pages, extra):
        module = sys.modules.get(_STORAGE_MODULE)
        cls = getattr(module, "PoolTransferResult", None)
        if cls is not None:
            return cls(kv_hit_pages, extra)
        return _PoolTransferResult(kv_hit_pages, extra)

    # --- Zero-copy interface: v1 (KV pool) and v2 (any registered pool) --------

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Loads pages into the KV host pool at host_indices: True for the
        leading run of hits, False from the first miss on."""
        return self._get_zero_copy("kv", keys, host_indices, "batch_get_v1")

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Stores the KV host pool's pages at host_indices."""
        return self._set_zero_copy("kv", keys, host_indices, extra_info, "batch_set_v1")

    def batch_get_v2(self, transfers, extra_info=None):
        return {t.name: self._get_zero_copy(t.name, t.keys or [], t.host_indices, "batch_get_v2")
                for t in transfers}

    def batch_set_v2(self, transfers, extra_info=None):
        return {t.name: self._set_zero_copy(t.name, t.keys or [], t.host_indices, extra_info,
                                            "batch_set_v2")
                for t in transfers}

    def _get_zero_copy(self, name, keys, host_indices, what):
        try:
            store = self._store_of(name)
            if not store.pages.zero_copy_ok():
                raise kvtier.FailedPrecondition(
                    "sglang: %s: the %s layout's flat pages are kept for the copying interface; "
                    "set interface_v1 to use this one" % (store.pages.what,
                                                          store.pages.host_layout))
            blocks = store.pages.pages_of(len(keys), host_indices)
            return self._load(store, keys, blocks)
        except Exception as e:
            self._log(what, "%s: %s: %s", what, type(e).__name__, e)
            return [False] * len(keys)

    def _set_zero_copy(self, name, keys, host_indices, extra_info, what):
        try:
            store = self._store_of(name)
            if not store.pages.zero_copy_ok():
                raise kvtier.FailedPrecondition("sglang: %s: set interface_v1 to use %s"
                                                % (store.pages.what, what))
            blocks = store.pages.pages_of(len(keys), host_indices)
            return self._save(store, keys, blocks, extra_info)
        except Exception as e:
            self._log(what, "%s: %s: %s", what, type(e).__name__, e)
            return [False] * len(keys)

    # --- Copying interface (flat pages) -------------------------------------------

    def get(self, key, target_location=None, target_sizes=None):
        """Loads a page into target_location (a flat page tensor); None on a miss."""
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        targets = list(target_locations or [None] * len(keys))
        try:
            store = self._flat_store()
            if len(targets) != len(keys) or any(t is None for t in targets):
                raise kvtier.InvalidArgument("sglang batch_get: %d keys, %d target pages"
                                             % (len(keys), len(targets)))
            blocks = [store.pages.flat_regions(byte_view(t)) for t in targets]
            found = self._load(store, keys, blocks)
            return [t if ok else None for t, ok in zip(targets, found)]
        except Exception as e:
            self._log("batch_get", "batch_get: %s: %s", type(e).__name__, e)
            return [None] * len(keys)

    def set(self, key, value=None, target_location=None, target_sizes=None):
        """Stores one flat page tensor."""
        return self.batch_set([key], [value])

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        try:
            store = self._flat_store()
            values = list(values or [])
            if len(values) != len(keys) or any(v is None for v in values):
                raise kvtier.InvalidArgument("sglang batch_set: %d keys, %d pages"
                                             % (len(keys), len(values)))
            blocks = [store.pages.flat_regions(byte_view(v)) for v in values]
            return all(self._save(store, keys, blocks, None))
        except Exception as e:
            self._log("batch_set", "batch_set: %s: %s", type(e).__name__, e)
            return False

    def _flat_store(self):
        store = self._store_of("kv")
        if not store.pages.flat_ok():
            raise kvtier.FailedPrecondition(
                "sglang: %s: its %s pages are kept for the zero-copy interface (interface_v1)"
                % (store.pages.what, store.pages.host_layout))
        return store

    # --- Loads and stores -------------------------------------------------------------

    def _arena(self, count, block_bytes):
        buf = getattr(self._staging, "buf", None)
        if buf is None or buf.nbytes < count * block_bytes:
            buf = np.empty(count * block_bytes, np.uint8)
            self._staging.buf = buf
        return [buf[i * block_bytes:(i + 1) * block_bytes] for i in range(count)]

    def _load(self, store, keys, blocks):
        """Loads the pages of `keys` into `blocks` (per block, its region views):
        one batched load (parallel disk and Redis reads) into a staging arena,
        then each verified block's tensors into its regions. True for the
        leading pages found; a page is copied only when all of it is."""
        start = time.perf_counter()
        split = store.pages.split
        kv_keys = self._block_keys(store, keys)
        outs = self._arena(len(kv_keys), store.pages.layout.max_file_bytes)
        sizes = store.cache.load_many(kv_keys, outs)
        done = 0
        for page in range(len(keys)):
            span = range(page * split, (page + 1) * split)
            if any(sizes[b] == 0 for b in span):
                break
            try:
                tensors = [kvtier.decode_block(outs[b][:sizes[b]], store.pages.layout, kv_keys[b])
                           for b in span]
            except kvtier.Error as e:  # not the block it claims to be: a miss
                self._log("decode", "page %s: %s", keys[page], e)
                break
            for b, block_tensors in zip(span, tensors):
                for dst, src in zip(blocks[b], block_tensors):
                    np.copyto(dst, src.reshape(-1).view(np.uint8))
            done += 1
        self._metrics.record("prefetch", done, done * store.pages.page_bytes,
                             time.perf_counter() - start)
        return [True] * done + [False] * (len(keys) - done)

    def _save(self, store, keys, blocks, extra_info):
        start = time.perf_counter()
        split = store.pages.split
        prefix = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        parents = self._block_keys(store, prefix[-1:]) if prefix else \
            [chain.namespace for chain in store.chains]
        kv_keys = self._block_keys(store, keys)
        results = []
        for page, key in enumerate(keys):
            ok = True
            for j in range(split):
                b = page * split + j
                try:
                    store.cache.store_tensors(kv_keys[b], parents[j], store.chains[j].namespace,
                                              blocks[b])
                except Exception as e:
                    self._log("store", "storing page %s: %s: %s", key, type(e).__name__, e)
                    ok = False
                parents[j] = kv_keys[b]
            results.append(ok)
        stored = sum(results)
        self._metrics.record("backup", stored, stored * store.pages.page_bytes,
                             time.perf_counter() - start)
        return results

    # --- Maintenance -----------------------------------------------------------------

    def clear(self):
        """Erases this backend's blocks (every registered pool's layout) from
        every tier (SGLang's /clear_hicache_storage_backend). True on success."""
        try:
            erased = sum(store.cache.clear() for store in list(self._stores.values()))
            logger.info("sglang backend: clear erased %d blocks", erased)
            return True
        except Exception as e:
            self._log("clear", "clear: %s: %s", type(e).__name__, e)
            return False

    def get_stats(self):
        """SGLang's StorageMetrics (pages and GB/s of each prefetch and backup
        call since the last get_stats) when SGLang is loaded, else None."""
        try:
            cls = _storage_metrics_class()
            taken = self._metrics.take()
            if cls is None:
                return None
            return cls(prefetch_pgs=taken["prefetch"][0], backup_pgs=taken["backup"][0],
                       prefetch_bandwidth=taken["prefetch"][1],
                       backup_bandwidth=taken["backup"][1])
        except Exception as e:
            self._log("get_stats", "get_stats: %s: %s", type(e).__name__, e)
            return None

    def kvtier_stats(self, pool="kv"):
        """kvtier's counters (hits per tier, bytes, disk usage) of a pool's cache."""
        return self._stores[pool].cache.stats()

    def close(self):
        for store in list(self._stores.values()):
            try:
                store.cache.close()
            except Exception as e:
                self._log("close", "close: %s: %s", type(e).__name__, e)


class _PoolTransferResult:
    """SGLang's PoolTransferResult fields, for use without SGLang loaded."""

    def __init__(self, kv_hit_pages, extra_pool_hit_pages):
        self.kv_hit_pages, self.extra_pool_hit_pages = kv_hit_pages, extra_pool_hit_pages


def _storage_metrics_class():
    module = sys.modules.get(_METRICS_MODULE)
    if module is None and "sglang" in sys.modules:  # SGLang runs: its metrics module exists
        try:
            module = importlib.import_module(_METRICS_MODULE)
        except Exception:
            module = None
    return getattr(module, "StorageMetrics", None)
