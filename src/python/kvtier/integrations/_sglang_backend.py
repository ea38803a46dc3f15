"""The body of kvtier.integrations.sglang's KvtierHiCacheStorage (see there).

SglangBackend has every method of SGLang's HiCacheStorage (the table in
tests/python/sglang_fakes.py names them, with the commit they were read at);
kvtier.integrations.sglang puts SGLang's base class under it.
"""

import hashlib
import importlib
import inspect
import logging
import os
import sys
import threading
import time
import weakref

import kvtier
from kvtier.integrations import _served, _sglang_pages as pages_mod
from kvtier.integrations._sglang_pages import FlatPages, PoolPages, Refused, byte_view, pool_key

logger = logging.getLogger("kvtier")

_KEY_DOMAIN = b"kvtier-sglang-page-v1\0"
# Keys of the extra config that SGLang reads itself (tp_lcm_size: its
# controller pops it before the backend sees the config; tolerated anyway).
_SGLANG_KEYS = ("backend_name", "module_path", "class_name", "interface_v1", "tp_lcm_size")
# kvtier options the backend sets from SGLang's host pool and position.
_BACKEND_SET = ("layout", "block_tokens", "key_shard")
_STORAGE_MODULE = "sglang.srt.mem_cache.hicache_storage"
_METRICS_MODULE = "sglang.srt.metrics.collector"
# Pools whose pages are the same on every TP rank of a rank-replicated (MLA)
# model: the latent KV and what follows its layout (SGLang's HiCacheFile
# leaves these without a tp rank too). Every other pool of such a model (Mamba
# state, SWA, ...) is TP-sharded and keeps the rank in its shard.
_REPLICATED_POOLS = ("kv", "indexer", "draft", "draft_indexer")
_LOG_EVERY_S = 30.0
# The key suffix of the draft model's pages on the copying interface:
# "<page hash>.draft" (SGLang's controller, _draft_page_set_generic, after
# HiCacheStorage's "<key>.<pool>" convention; PoolName's str() is its value).
_DRAFT_POOL = "draft"
_METRICS_MAX = 4096  # samples kept between two get_stats calls


def default_disk_dir():
    """The per-user default cache folder: $XDG_CACHE_HOME/kvtier/sglang."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kvtier", "sglang")


def cache_options(extra):
    """The kvtier.Cache options of an SGLang extra config (checked by kvtier's
    options parser): SGLang's own keys left out, defaults filled in (none
    with `server`: the daemon has the tiers, and host_bytes, disk_dir and
    remote are refused)."""
    options = {k: v for k, v in dict(extra or {}).items() if k not in _SGLANG_KEYS}
    for name in _BACKEND_SET:
        if name in options:
            raise kvtier.InvalidArgument(
                "sglang: %s: set by the backend from SGLang's host pool (page layout, page "
                "size, parallel position); leave it out of the extra config" % name)
    if _served.served(options):
        _served.check_served_options(options, "sglang")
    else:
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
        self.disk_dir = self.options.get("disk_dir")  # none with server: the daemon's
        self._default_dir = "disk_dir" not in extra
        self.interface_v1 = bool(extra.get("interface_v1", 0))
        self.model_id = self.options.get("key_model_id") \
            or getattr(storage_config, "model_name", None) or "sglang"
        self.replicated = bool(getattr(storage_config, "is_mla_model", False))
        self.mem_pool_host = None
        self._stores = {}
        self._lock = threading.Lock()  # registration vs. the I/O threads
        self._metrics = _Metrics(bool(getattr(storage_config, "enable_storage_metrics", False)))
        self._last_log = {}
        self._pid = os.getpid()  # the process the caches were opened in
        self._draft_error = None  # (type, message): why the draft cache could not open
        _LIVE.add(self)

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
        if name == "kv" and not self.interface_v1:
            _check_flat_pages(pool, name)
        pages = PoolPages(name, pool, split)
        if name == "kv" and not self.interface_v1 and not pages.flat_ok():
            pages = PoolPages(name, pool, split, flat=True)
        chains = [self._chain(name, pages.layout, split, j) for j in range(split)]
        self._own_process()
        with self._lock:
            old = self._stores.get(name)
            if old is not None and old.pages.layout.signature == pages.layout.signature:
                self._stores[name] = _Store(pages, old.cache, chains)
                return
            self._stores[name] = _Store(pages, self._open_cache(pages.layout), chains)
        if old is not None:
            old.cache.close()

    def _open_cache(self, layout):
        if self.disk_dir is not None and self._default_dir:
            os.makedirs(self.disk_dir, mode=0o700, exist_ok=True)
        return _served.open_cache(layout, self.options, "sglang")

    def _own_process(self):
        """Reopens the caches in a process other than the one that opened them
        (SGLang's or the user's fork): the inherited ones belong to the
        parent's threads, and using or closing them here would hang or crash.
        They are kept, unused, in _INHERITED; the folder and Redis are shared,
        so the child sees what the parent stored."""
        pid = os.getpid()
        if pid == self._pid:
            return
        with self._lock:
            if pid == self._pid:
                return
            logger.warning("sglang backend: opened in process %d, used in process %d: "
                           "reopening its kvtier caches here", self._pid, pid)
            for name, store in list(self._stores.items()):
                cache = self._open_cache(store.pages.layout)
                _INHERITED.append(store.cache)
                self._stores[name] = _Store(store.pages, cache, store.chains)
            self._pid = pid

    def _shard(self, name, split, j):
        c = self.config
        fields = []
        # A rank-replicated (MLA) model's KV pages are the same on every tp
        # rank and shared; its TP-sharded side pools (Mamba state) are not.
        if not (self.replicated and name in _REPLICATED_POOLS):
            rank, size = int(getattr(c, "tp_rank", 0)), int(getattr(c, "tp_size", 1))
            fields.append(("tp", rank * split + j, size * split))
        fields += [("pp", int(getattr(c, "pp_rank", 0)), int(getattr(c, "pp_size", 1))),
                   ("cp", int(getattr(c, "attn_cp_rank", 0)), int(getattr(c, "attn_cp_size", 1)))]
        return ";".join("%s=%d/%d" % f for f in fields if f[2] > 1)

    def _chain(self, name, layout, split, j):
        o = self.options
        return kvtier.KeyChain(self.model_id, layout, salt=_as_bytes(o.get("key_salt", b"")),
                               adapter=o.get("key_adapter_id", ""),
                               extra=_as_bytes(o.get("key_extra", b"")),
                               shard=self._shard(name, split, j))

    def kvtier_key(self, key, pool="kv", split=0):
        """The kvtier block key of an SGLang page key in a pool (see the module comment)."""
        chain = self._store_of(pool).chains[split]
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
        self._own_process()
        store = self._stores.get(pool_key(name))
        if store is None:
            raise kvtier.FailedPrecondition("sglang: no %s host pool registered" % pool_key(name))
        return store

    @property
    def supports_zero_copy_page_io(self):
        """Whether the zero-copy calls (batch_get_v1 / batch_set_v1 and the
        v2 ones) are this backend's page I/O: what ``interface_v1`` chose.
        Newer SGLang bases have the property (default False: the copying
        calls); no controller found yet chooses by it instead of
        ``interface_v1``, and this one answers the same either way."""
        return self.interface_v1

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
        """SGLang's per-pool prefix: the longest KV prefix that every extra
        pool can restore, i.e. the greatest endpoint common to all pools (not
        the minimum of each pool's best one: a trailing pool's legal endpoints
        have holes, SGLang issue 39147). restorable_prefix_pages, where
        SGLang's PoolTransferResult has it, lists every common endpoint."""
        kv_name = self._pool_name("KV", "kv")
        try:
            kv_pages = self._leading(self._store_of("kv"), keys)
            hits = {kv_name: kv_pages} if kv_pages else {}
            endpoints = set(range(1, kv_pages + 1))
            for transfer in pool_transfers or []:
                if not endpoints:
                    break
                legal = self._pool_endpoints(transfer, keys, kv_pages)
                if legal:
                    hits[transfer.name] = max(legal)
                endpoints &= legal
            return self._transfer_result(endpoints, hits)
        except Exception as e:
            self._log("batch_exists_v2", "batch_exists_v2: %s: %s", type(e).__name__, e)
            return self._transfer_result(set(), {})

    def _pool_endpoints(self, transfer, keys, kv_pages):
        """The prefix lengths (1..kv_pages) this pool can restore: all_pages,
        each one up to its leading run; trailing_pages, each one whose last
        len(transfer.keys) pages (fewer at the start) it holds."""
        store = self._store_of(transfer.name)
        policy = str(getattr(transfer.hit_policy, "value", transfer.hit_policy))
        if policy != "trailing_pages":
            return set(range(1, self._leading(store, keys[:kv_pages]) + 1))
        window = max(1, len(transfer.keys) if transfer.keys else 1)
        legal, run = set(), 0
        for end in range(1, kv_pages + 1):
            run = run + 1 if self._present(store, keys[end - 1]) else 0
            if run >= min(window, end):
                legal.add(end)
        return legal

    def _pool_name(self, member, default):
        module = sys.modules.get(_STORAGE_MODULE)
        names = getattr(module, "PoolName", None)
        return getattr(names, member, default) if names is not None else default

    def _transfer_result(self, endpoints, extra):
        final, ordered = (max(endpoints) if endpoints else 0), sorted(endpoints)
        module = sys.modules.get(_STORAGE_MODULE)
        cls = getattr(module, "PoolTransferResult", None)
        if cls is None:
            return _PoolTransferResult(final, extra, ordered)
        if _takes(cls, "restorable_prefix_pages"):
            return cls(final, extra, restorable_prefix_pages=ordered)
        return cls(final, extra)

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
        # SGLang passes v2 calls the operation's prefix (PR 39567), which need
        # not end on the page before a transfer's first key (a trailing pool
        # holds some of the operation's pages): not used as their parent.
        return {t.name: self._set_zero_copy(t.name, t.keys or [], t.host_indices, None,
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
            if len(targets) != len(keys) or any(t is None for t in targets):
                raise kvtier.InvalidArgument("sglang batch_get: %d keys, %d target pages"
                                             % (len(keys), len(targets)))
            store = self._copying_store(keys, targets)
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
            values = list(values or [])
            if len(values) != len(keys) or any(v is None for v in values):
                raise kvtier.InvalidArgument("sglang batch_set: %d keys, %d pages"
                                             % (len(keys), len(values)))
            store = self._copying_store(keys, values)
            blocks = [store.pages.flat_regions(byte_view(v)) for v in values]
            return all(self._save(store, keys, blocks, None))
        except Exception as e:
            self._log("batch_set", "batch_set: %s: %s", type(e).__name__, e)
            return False

    def _copying_store(self, keys, pages):
        """The store of a copying call: the KV pages', or the draft model's
        for keys "<hash>.draft" (a batch is all one or all the other)."""
        drafts = sum(str(k).endswith("." + _DRAFT_POOL) for k in keys)
        if drafts == 0:
            return self._flat_store()
        if drafts != len(keys):
            raise kvtier.InvalidArgument("sglang: a batch of %d draft and %d other pages"
                                         % (drafts, len(keys) - drafts))
        return self._draft_store(pages[0])

    def _draft_store(self, page):
        """The draft pages' store, opened on their first call with the layout
        of that flat page (its bytes and dtype; the KV pool's tokens per
        page): SGLang registers no draft pool with a backend of this kind.
        A cache that cannot be opened (a daemon of another layout) is not
        asked again: its error is raised for every later call."""
        self._own_process()
        store = self._stores.get(_DRAFT_POOL)
        if store is not None:
            return store
        if self._draft_error is not None:  # a new exception each time: no traceback grows
            raise self._draft_error[0](self._draft_error[1])
        kv = self._store_of("kv")
        pages = FlatPages(_DRAFT_POOL, kv.pages.page_size, byte_view(page).nbytes,
                          getattr(page, "dtype", "unknown"))
        chains = [self._chain(_DRAFT_POOL, pages.layout, 1, 0)]
        with self._lock:
            store = self._stores.get(_DRAFT_POOL)
            if store is None:
                try:
                    store = _Store(pages, self._open_cache(pages.layout), chains)
                except kvtier.Error as e:
                    self._draft_error = (type(e), str(e))
                    raise
                self._stores[_DRAFT_POOL] = store
        return store

    def _flat_store(self):
        store = self._store_of("kv")
        if not store.pages.flat_ok():
            raise kvtier.FailedPrecondition(
                "sglang: %s: its %s pages are kept for the zero-copy interface (interface_v1)"
                % (store.pages.what, store.pages.host_layout))
        return store

    # --- Loads and stores -------------------------------------------------------------

    def _load(self, store, keys, blocks):
        """Loads the pages of `keys` into `blocks` (per block, its region views):
        one batched load (parallel disk and Redis reads) that copies each block's
        tensors straight into its regions (no staging copy; the header checked
        against the key and layout, the checksum verified where the block
        entered the process). True for the leading pages found; a page is
        written only when all of it was found, and nothing past the first
        page with a miss is written (prefix_group)."""
        start = time.perf_counter()
        split = store.pages.split
        kv_keys = self._block_keys(store, keys)
        found = store.cache.load_many_tensors(kv_keys, blocks, prefix_group=split)
        done = 0
        while done < len(keys) and all(found[done * split:(done + 1) * split]):
            done += 1
        self._metrics.record("prefetch", done, done * store.pages.page_bytes,
                             time.perf_counter() - start)
        return [True] * done + [False] * (len(keys) - done)

    def _save(self, store, keys, blocks, extra_info):
        start = time.perf_counter()
        split = store.pages.split
        parents = self._first_parents(store, keys, extra_info)
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

    def _first_parents(self, store, keys, extra_info):
        """Each chain's parent of the first page: the page before it when
        SGLang passes the prefix (prefix_keys, hicache_storage_pass_prefix_keys),
        else the namespace (DESIGN.md §4). A prefix that is not a list of page
        keys, or that already holds the first key, is not used."""
        prefix = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        last = prefix[-1] if isinstance(prefix, (list, tuple)) and prefix else None
        if isinstance(last, str) and keys and last not in keys:
            return self._block_keys(store, [last])
        return [chain.namespace for chain in store.chains]

    # --- Maintenance -----------------------------------------------------------------

    def clear(self):
        """Erases this backend's blocks (every registered pool's layout) from
        every tier (SGLang's /clear_hicache_storage_backend). True on success."""
        try:
            self._own_process()
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
        return self._store_of(pool).cache.stats()

    def close(self):
        if os.getpid() != self._pid:  # a fork's copy: the caches are the parent's
            _INHERITED.extend(store.cache for store in self._stores.values())
            self._stores = {}
            return
        for store in list(self._stores.values()):
            try:
                store.cache.close()
            except Exception as e:
                self._log("close", "close: %s: %s", type(e).__name__, e)


class _PoolTransferResult:
    """SGLang's PoolTransferResult fields, for use without SGLang loaded."""

    def __init__(self, kv_hit_pages, extra_pool_hit_pages, restorable_prefix_pages=None):
        self.kv_hit_pages, self.extra_pool_hit_pages = kv_hit_pages, extra_pool_hit_pages
        self.restorable_prefix_pages = restorable_prefix_pages


def _takes(cls, name):
    try:
        return name in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def _check_flat_pages(pool, name):
    """With interface_v1 off SGLang's controller copies flat pages: the pool's
    get_data_page on the backup thread, get_dummy_flat_data_page on the
    prefetch thread. A pool without them (the asymmetric MHA pool, MLA
    page_first_kv_split) would raise there and end the thread for the
    server's life: refused here instead, with one log line."""
    try:
        pool.get_dummy_flat_data_page()
        pool.get_data_page(0, flat=True)
    except Exception as e:
        message = ("sglang: %s pool %s (layout %s) has no flat pages for the copying interface "
                   "(%s: %s); set \"interface_v1\": 1 in the extra config"
                   % (name, type(pool).__name__, getattr(pool, "layout", "unknown"),
                      type(e).__name__, e))
        logger.error("sglang backend: %s", message)
        raise Refused(message) from None


# Fork: every backend of this process, and the caches a forked child inherited
# (never used nor closed there: they belong to the parent's threads).
_LIVE = weakref.WeakSet()
_INHERITED = []


def _reset_locks_in_child():
    # A lock another thread held at fork time stays held in the child.
    for backend in list(_LIVE):
        backend._lock = threading.Lock()
        backend._metrics.lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_locks_in_child)


def _storage_metrics_class():
    module = sys.modules.get(_METRICS_MODULE)
    if module is None and "sglang" in sys.modules:  # SGLang runs: its metrics module exists
        try:
            module = importlib.import_module(_METRICS_MODULE)
        except Exception:
            module = None
    return getattr(module, "StorageMetrics", None)
