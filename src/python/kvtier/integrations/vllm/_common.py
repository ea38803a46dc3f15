"""What both vLLM routes share: the options of the connector's extra config,
vLLM's block hashes as kvtier keys, the process's caches (one per layout and
options, reopened in a forked child) and block verification."""

import collections
import hashlib
import importlib
import itertools
import json
import logging
import os
import threading

import kvtier
from kvtier.integrations import _served

from ._block_buffers import BUFFERS

logger = logging.getLogger("kvtier")

MEDIUM = "KVTIER"
_KEY_DOMAIN = b"kvtier-vllm-block-v1\0"
# Keys of the connector's extra config that vLLM reads itself (the handler route).
_VLLM_KEYS = ("spec_name", "spec_module_path", "block_size")
# kvtier options the backend derives from vLLM's configuration.
_BACKEND_SET = ("layout", "block_tokens", "key_extra")
# vLLM's prefix_caching_hash_algo values whose hashes are equal in every
# process given the same PYTHONHASHSEED.
REPRODUCIBLE_HASHES = ("sha256", "sha256_cbor")


def vllm_attr(module, name):
    """vLLM's `module.name`, or None when vLLM (or that name) is not there."""
    try:
        return getattr(importlib.import_module(module), name, None)
    except Exception:  # not installed, or a vLLM that fails to import here
        return None


def first_attr(name, *modules):
    for module in modules:
        found = vllm_attr(module, name)
        if found is not None:
            return found
    return None


def default_disk_dir():
    """The per-user default cache folder: $XDG_CACHE_HOME/kvtier/vllm."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kvtier", "vllm")


def kvtier_option_names():
    return {o["name"] for o in kvtier.options()}


def cache_options(extra, *, keep_only_kvtier=False):
    """The kvtier.Cache options of the connector's extra config (checked by
    kvtier's options parser), defaults filled in (none with `server`: the
    daemon has the tiers, and host_bytes, disk_dir and remote are refused).
    The handler route leaves out vLLM's own keys and refuses any other
    unknown key; the current route (keep_only_kvtier) shares the extra config
    with vLLM's many keys, so it takes kvtier's names only and logs the keys
    it leaves to vLLM."""
    extra = dict(extra or {})
    if keep_only_kvtier:
        names = kvtier_option_names() | set(_BACKEND_SET)
        options = {k: v for k, v in extra.items() if k in names}
        rest = sorted(k for k in extra if k not in names)
        if rest:
            logger.info("vllm: extra config keys left to vLLM: %s", ", ".join(rest))
    else:
        options = {k: v for k, v in extra.items() if k not in _VLLM_KEYS}
    for name in _BACKEND_SET:
        if name in options:
            raise kvtier.InvalidArgument(
                "vllm: %s: set by the backend from vLLM's KV cache configuration; leave it "
                "out of kv_connector_extra_config" % name)
    if _served.served(options):  # the daemon's tiers (kvtier serve): no defaults to fill
        _served.check_served_options(options, "vllm")
    else:
        options.setdefault("host_bytes", 1 << 30)
        if "disk_dir" not in options:
            options["disk_dir"] = default_disk_dir()
            os.makedirs(options["disk_dir"], mode=0o700, exist_ok=True)
    kvtier._kvtier._check_options(options)
    return options


def check_reproducible_hashing(vllm_config, environ=None):
    """Raises kvtier.FailedPrecondition unless vLLM's block hashes are equal
    in every process for the same tokens: a SHA-256 algorithm and a fixed
    PYTHONHASHSEED (vLLM seeds its hash chain from it, else from os.urandom)."""
    environ = os.environ if environ is None else environ
    algo = str(getattr(vllm_config.cache_config, "prefix_caching_hash_algo", "sha256"))
    if algo not in REPRODUCIBLE_HASHES:
        raise kvtier.FailedPrecondition(
            "vllm: prefix_caching_hash_algo %r is not SHA-256: kvtier shares blocks between "
            "processes and hosts by vLLM's block hashes, so it needs one of %s "
            "(--prefix-caching-hash-algo sha256)" % (algo, ", ".join(REPRODUCIBLE_HASHES)))
    if not environ.get("PYTHONHASHSEED"):
        raise kvtier.FailedPrecondition(
            "vllm: PYTHONHASHSEED is not set: vLLM then seeds its block hashes with random "
            "bytes per process, so no other process (or this one after a restart) could "
            "find the blocks kvtier stores; start vLLM with the same PYTHONHASHSEED "
            "everywhere (e.g. PYTHONHASHSEED=0)")
    return algo


def dtype_name(dtype):
    name = str(dtype)
    return name[len("torch."):] if name.startswith("torch.") else name


def hash_bytes(block_hash):
    """The bytes of a vLLM block hash: BlockHash is bytes (32, SHA-256); older
    vLLMs had a (hash_value: int, token_ids, extra_keys) tuple."""
    if isinstance(block_hash, (bytes, bytearray, memoryview)):
        return bytes(block_hash)
    value = getattr(block_hash, "hash_value", block_hash)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 256:
        return value.to_bytes(32, "big")
    raise kvtier.InvalidArgument("vllm: not a block hash: %r" % (block_hash,))


def block_key(namespace, block_hash):
    """The kvtier key of a vLLM block hash under a key namespace."""
    return hashlib.sha256(_KEY_DOMAIN + namespace + hash_bytes(block_hash)).digest()


def decodes(data, layout, key):
    try:
        kvtier.decode_block(data, layout, key)
        return True
    except kvtier.Error as e:
        logger.warning("vllm: block %s failed verification: %s", key.hex()[:16], e)
        return False


# --- The process's caches -------------------------------------------------------
# vLLM forks its workers (multiprocessing's default on Linux). A kvtier.Cache
# belongs to the process that opened it: its threads do not exist in a forked
# child, so the child must not call it, close it or let it be destroyed. The
# child drops the parent's entries (keeping the objects alive, never touched)
# and opens its own caches on first use.

_caches = {}
_cache_pids = {}
_caches_lock = threading.Lock()
_inherited = []  # the parent's caches in a forked child: kept, never called


def _after_fork_in_child():
    global _caches_lock
    _caches_lock = threading.Lock()  # the parent's may have been held at fork
    _inherited.extend(_caches.values())
    _caches.clear()
    _cache_pids.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def shared_cache(layout, options):
    """One kvtier.Cache per (layout, options) in a process, so that vLLM's
    scheduler and a worker in the same process (TP=1) share one RAM tier. A
    cache opened by another process (a fork that bypassed the fork hook) is
    left alone and a new one opened here."""
    tag = (layout.signature, json.dumps(options, sort_keys=True, default=str))
    pid = os.getpid()
    with _caches_lock:
        cache = _caches.get(tag)
        owner = _cache_pids.get(tag, pid)
        if cache is not None and owner != pid:
            logger.info("vllm: the kvtier cache of %s was opened by pid %d; pid %d opens its "
                        "own", layout.name, owner, pid)
            _inherited.append(cache)
            cache = None
        if cache is None or cache.closed:
            cache = _caches[tag] = _served.open_cache(layout, options, "vllm")
            _cache_pids[tag] = pid
        return cache


# --- Blocks promised to vLLM ------------------------------------------------------

def _frozen(data):
    if isinstance(data, bytes):
        return data
    flags = getattr(data, "flags", None)
    if flags is not None and not flags.writeable:
        return data
    return bytes(data)


class PinnedBlocks:
    """The verified bytes of blocks promised to vLLM (prepare_load, a tier's
    lookup HIT), held in this process until the promise ends, so eviction, gc
    or another process removing the files cannot fail the transfer. Counted
    per key (two requests may promise one block). Thread-safe: one lock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held = {}  # kvtier key -> [bytes, count]

    def hold(self, key, data):
        """One more promise of `key`, holding `data` (the block just read and
        verified; it replaces what an earlier promise held). Bytes and
        read-only arrays (read_verified's) are held as they are, anything
        else as a copy."""
        data = _frozen(data)
        with self._lock:
            entry = self._held.get(key)
            if entry is None:
                self._held[key] = [data, 1]
            else:
                entry[0] = data
                entry[1] += 1

    def get(self, key):
        with self._lock:
            entry = self._held.get(key)
            return None if entry is None else entry[0]

    def release(self, key):
        with self._lock:
            entry = self._held.get(key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._held[key]

    def clear(self):
        """Ends every promise (a test's teardown; vLLM's reset)."""
        with self._lock:
            self._held.clear()

    def __len__(self):
        with self._lock:
            return len(self._held)

    def nbytes(self):
        with self._lock:
            return sum(len(e[0]) for e in self._held.values())


PINS = PinnedBlocks()
# Workers (handlers) made in this process: when there is one, a promise is
# held here only; otherwise its bytes also travel in the load spec to the
# worker process.
_local_workers = [0]


def register_local_worker():
    _local_workers[0] += 1


def local_worker():
    return _local_workers[0] > 0


def carried_blocks(blocks):
    """What a load spec carries of the promised blocks: nothing when a worker
    runs in this process (it reads PINS), else a copy of each block file as
    bytes for the worker process (whatever way vLLM sends the spec there)."""
    if local_worker():
        return None
    return {key: bytes(data) for key, data in blocks.items()}


def _read_into_buffers(cache, layout, keys):
    """Per key its block file as a read-only uint8 array over a buffer of
    BUFFERS (one load_many), or None where kvtier has none."""
    bufs = [BUFFERS.take(layout.max_file_bytes) for _ in keys]
    sizes = cache.load_many(keys, bufs)
    out = []
    for buf, size in zip(bufs, sizes):
        block = None
        if size:
            block = buf[:size]
            block.flags.writeable = False
        out.append(block)
    return out


def read_verified(cache, layout, keys, chunk=16):
    """{key: block file} of the keys whose blocks load and verify now, each a
    read-only uint8 array over a buffer that is reused once nothing holds
    it (BUFFERS); read `chunk` blocks per load_many."""
    out = {}
    keys = list(keys)
    for start in range(0, len(keys), chunk):
        part = keys[start:start + chunk]
        for key, block in zip(part, _read_into_buffers(cache, layout, part)):
            if block is not None and decodes(block, layout, key):
                out[key] = block
    return out


def stacked(per_layer, skip=0):
    """Per layer, its blocks' rows (a list of (k, width) uint8 arrays) one
    after another from row `skip` on, each layer's in a buffer of BUFFERS
    (the size a store's gather of as many GPU blocks takes, so loads and
    stores share them), so a load copies into memory already faulted in
    rather than into a fresh array per layer."""
    import numpy as np
    out = []
    for parts in per_layer:
        rows = sum(part.shape[0] for part in parts)
        width = parts[0].shape[1]
        layer = BUFFERS.take(rows * width).reshape(rows, width)
        np.concatenate(parts, out=layer)
        out.append(layer[skip:])
    return out


def load_promised(cache, layout, keys, carried=None):
    """Per key its block's tensors (decode_block's views), from the bytes a
    load spec carried, this process's pins, else kvtier (one load_many);
    from the first block that is missing or fails verification on (a
    warning names it), None: a load stops there. A pinned block was
    verified in full when it was pinned and is
    read-only since: only its header is checked again, its data is not
    hashed a second time. Carried bytes (they crossed a process boundary)
    and fresh reads are verified in full."""
    import numpy as np
    carried = carried or {}
    found, missing = [None] * len(keys), []
    for i, key in enumerate(keys):
        data = carried.get(key)
        if data is not None:
            found[i] = (np.frombuffer(data, np.uint8), False)
            continue
        data = PINS.get(key)
        if data is not None:
            found[i] = (np.frombuffer(data, np.uint8), True)
        else:
            missing.append(i)
    if missing:
        got = _read_into_buffers(cache, layout, [keys[i] for i in missing])
        for i, block in zip(missing, got):
            found[i] = None if block is None else (block, False)
    out = [None] * len(keys)
    for i, (key, entry) in enumerate(zip(keys, found)):
        if entry is None:
            logger.warning("vllm: block %s missing or damaged at load (kvtier verifies "
                           "every block it reads)", key.hex()[:16])
            break
        data, verified = entry
        decode = kvtier._kvtier._decode_block_verified if verified else kvtier.decode_block
        try:
            out[i] = decode(data, layout, key)
        except kvtier.Error as e:
            logger.warning("vllm: block %s failed verification at load: %s", key.hex()[:16], e)
            break
    return out


class Announcer:
    """The stored/removed events of one manager or tier for vLLM's event
    publisher, batched per take(): one stored event for the keys stored or
    found since the last take, then one removed event for the announced keys
    a sweep finds gone (eviction, erase, another process; at most `sweep`
    keys checked per take). Thread-safe: one lock, never held across kvtier
    calls."""

    def __init__(self, make_event, max_keys=1 << 16, sweep=256):
        self._make_event = make_event  # (keys, removed) -> a vLLM event
        self._max, self._sweep = max_keys, sweep
        self._lock = threading.Lock()
        self._announced = collections.OrderedDict()
        self._stored = []

    def stored(self, keys, only_new=False):
        with self._lock:
            if only_new:
                keys = [k for k in keys if k not in self._announced]
            for k in keys:
                if k not in self._announced:
                    self._stored.append(k)
                self._announced[k] = True
                self._announced.move_to_end(k)
            while len(self._announced) > self._max:
                self._announced.popitem(last=False)

    def take(self, present):
        """The events since the last call (present(key) -> whether kvtier
        still holds it)."""
        with self._lock:
            events = [self._make_event(self._stored, False)] if self._stored else []
            self._stored = []
            batch = list(itertools.islice(self._announced, self._sweep))
        try:
            gone = [k for k in batch if not present(k)]
        except Exception as e:
            logger.warning("vllm: the removal sweep failed: %s", e)
            gone = []
        with self._lock:
            for k in batch:
                if k in self._announced:
                    self._announced.move_to_end(k)
            gone = [k for k in gone if self._announced.pop(k, None)]
        if gone:
            events.append(self._make_event(gone, True))
        return events

    def clear(self):
        with self._lock:
            self._announced.clear()
            self._stored = []
