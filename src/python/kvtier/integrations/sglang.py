"""kvtier as an SGLang HiCache storage backend (L3), loaded dynamically.

Start SGLang with::

    --enable-hierarchical-cache --hicache-storage-backend dynamic \\
    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.integrations.sglang", "class_name": "KvtierHiCacheStorage",
        "interface_v1": 1, "disk_dir": "/var/cache/kvtier-sglang", "host_bytes": 4294967296}'

(``interface_v1: 1`` selects SGLang's zero-copy ``batch_get_v1``/``batch_set_v1``
calls, which need a ``page_first`` host pool layout; without it SGLang uses the
copying ``batch_get``/``batch_set``.) Besides SGLang's own keys (``backend_name``,
``module_path``, ``class_name``, ``interface_v1``), the extra config takes every
option of ``kvtier.Cache`` (docs/options.md), checked by the same parser: an
unknown key or a bad value raises ``kvtier.InvalidArgument`` when the backend is
created. The ones that matter most:

- ``disk_dir``: the kvtier cache folder; any number of SGLang processes may
  share it. Default: the per-user folder ``$XDG_CACHE_HOME/kvtier/sglang``
  (``~/.cache/kvtier/sglang``), created ``0700``; ``null`` for no disk tier.
- ``host_bytes``: kvtier's own RAM tier in front of the disk (default 1 GiB).
- ``remote``: a Redis URL for the remote tier shared by every SGLang host
  (``redis://host:port`` or ``redis-cluster://host:port,...``).
- ``key_model_id`` (or ``model_id``): overrides SGLang's model name in the key
  namespace; ``key_salt``, ``key_adapter_id`` go into the namespace too.
- ``write_policy``, ``disk_max_bytes``, ``disk_durability``, ``remote_prefix``, ...

``layout`` and ``block_tokens`` come from SGLang's host pool and ``key_extra``
holds the parallel position, so those three are refused.

This module never imports sglang (or torch). ``KvtierHiCacheStorage`` subclasses
SGLang's ``HiCacheStorage`` when ``sglang.srt.mem_cache.hicache_storage`` is
already loaded at import time (it is when SGLang's backend factory imports
this module), so the factory's ``issubclass`` check passes; elsewhere it is a
plain class with the same methods.

How pages become kvtier blocks
------------------------------
One SGLang page (``page_size`` tokens of every layer) is one kvtier block. Its
layout is one pseudo-layer of cache type ``sglang_<host pool layout>`` whose
state tensors are the page's regions as SGLang lays them out: ``k`` and ``v``
(MHA), or ``kv`` (MLA), each ``[page_size, E]`` of the pool's dtype, where E is
the number of elements per token of the region (layers x heads x head_dim). The
layout signature therefore pins page size, dtype, region sizes and the
host-pool layout: a process with any other one never gets these blocks.

SGLang names pages by a string (a SHA-256 hex chain of token ids). Its kvtier
key is::

    key = SHA-256("kvtier-sglang-page-v1\\0" || namespace || UTF-8 page key)

where ``namespace`` is kvtier's block-key namespace (DESIGN.md §3) of model id
``model_name`` (or ``model_id``), the page layout's signature, block_tokens =
``page_size``, and as its shard (TLV 0x07) the parallel position
``"tp=<rank>/<size>;pp=<rank>/<size>;cp=<rank>/<size>"`` in canonical form:
each field left out when its size is 1, and ``tp`` left out for MLA models,
whose pages are the same on every TP rank. Each page's block file
records the previous page of the same call (or of ``extra_info.prefix_keys``)
as its parent.
"""

import ctypes
import hashlib
import logging
import os
import sys

import numpy as np

import kvtier

logger = logging.getLogger(__name__)

_SGLANG_STORAGE_MODULE = "sglang.srt.mem_cache.hicache_storage"
_KEY_DOMAIN = b"kvtier-sglang-page-v1\0"
# Keys of the extra config that SGLang's backend factory reads itself.
_SGLANG_KEYS = ("backend_name", "module_path", "class_name", "interface_v1")
# kvtier options the backend sets from SGLang's host pool and position.
_BACKEND_SET = ("layout", "block_tokens", "key_extra")


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
    if "model_id" in options:  # the name before the options table had one
        if "key_model_id" in options:
            raise kvtier.InvalidArgument("sglang: give model_id or key_model_id, not both")
        options["key_model_id"] = options.pop("model_id")
    options.setdefault("host_bytes", 1 << 30)
    if "disk_dir" not in options:
        options["disk_dir"] = default_disk_dir()
    kvtier._kvtier._check_options(options)
    return options

# torch / numpy dtype names -> safetensors dtype names.
_DTYPES = {
    "float16": "F16", "half": "F16", "bfloat16": "BF16", "float32": "F32", "float": "F32",
    "float64": "F64", "int8": "I8", "uint8": "U8", "int16": "I16", "int32": "I32",
    "int64": "I64", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}


def _dtype_name(dtype):
    """The safetensors name of a torch or numpy dtype, without importing torch."""
    name = str(dtype)
    if name.startswith("torch."):
        name = name[len("torch."):]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            pass
    if name not in _DTYPES:
        raise kvtier.InvalidArgument("sglang: unsupported KV dtype %r" % (dtype,))
    return _DTYPES[name]


def _byte_view(obj):
    """A writable uint8 numpy view of a CPU tensor or array (no copy)."""
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise kvtier.InvalidArgument("sglang: page buffer is not contiguous")
        return obj.reshape(-1).view(np.uint8)
    if hasattr(obj, "data_ptr"):  # a torch tensor
        if not obj.is_contiguous() or getattr(obj, "is_cuda", False):
            raise kvtier.InvalidArgument("sglang: page tensor must be contiguous host memory")
        return _pointer_view(obj.data_ptr(), obj.numel() * obj.element_size())
    raise kvtier.InvalidArgument("sglang: expected a tensor or an array, got %s"
                                 % type(obj).__name__)


def _pointer_view(ptr, size):
    """A writable uint8 view of `size` bytes at address `ptr` (SGLang's host pool)."""
    return np.frombuffer((ctypes.c_char * size).from_address(ptr), dtype=np.uint8)


def _base_class():
    module = sys.modules.get(_SGLANG_STORAGE_MODULE)
    base = getattr(module, "HiCacheStorage", None) if module is not None else None
    return (base,) if isinstance(base, type) else ()


class KvtierHiCacheStorage(*_base_class()):
    """SGLang HiCacheStorage backed by a kvtier.Cache (RAM over a disk folder)."""

    def __init__(self, storage_config, kwargs=None):
        self.options = cache_options(getattr(storage_config, "extra_config", None))
        self.config = storage_config
        self.disk_dir = self.options["disk_dir"]
        self.model_id = self.options.get("key_model_id") \
            or getattr(storage_config, "model_name", None) or "sglang"
        self.mem_pool_host = None
        self.cache = None
        self.layout = None
        self.chain = None
        self.regions = 0
        self.page_size = 0

    # --- Setup --------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host):
        """Takes the host KV pool and opens the cache for its page layout."""
        self.mem_pool_host = mem_pool_host
        self.page_size = int(mem_pool_host.page_size)
        is_mla = bool(getattr(self.config, "is_mla_model", False))
        self.regions = 1 if is_mla else 2
        dtype = _dtype_name(mem_pool_host.dtype)
        itemsize = np.dtype(_numpy_dtype(dtype)).itemsize
        page_bytes = _byte_view(mem_pool_host.get_dummy_flat_data_page()).nbytes
        per_token, rest = divmod(page_bytes, self.regions * self.page_size * itemsize)
        if rest or per_token == 0:
            raise kvtier.InvalidArgument(
                "sglang: a page of %d bytes does not split into %d regions of %d tokens of %s"
                % (page_bytes, self.regions, self.page_size, dtype))
        pool_layout = str(getattr(mem_pool_host, "layout", "page_first"))
        roles = ["kv"] if is_mla else ["k", "v"]
        states = ",".join('{"role": "%s", "dtype": "%s", "shape": ["T", %d]}'
                          % (r, dtype, per_token) for r in roles)
        self.layout = kvtier.Layout.from_json(
            '{"name": "sglang-%s", "block_tokens": %d, "layers": [{"cache_type": "sglang_%s", '
            '"states": [%s]}]}' % (pool_layout, self.page_size, pool_layout, states))
        self.region_bytes = per_token * self.page_size * itemsize
        c = self.config
        fields = [] if is_mla else [("tp", "tp_rank", "tp_size")]
        fields += [("pp", "pp_rank", "pp_size"), ("cp", "attn_cp_rank", "attn_cp_size")]
        shard = ";".join("%s=%d/%d" % (name, int(getattr(c, rank, 0)), int(getattr(c, size, 1)))
                         for name, rank, size in fields if int(getattr(c, size, 1)) > 1)
        o = self.options
        salt = o.get("key_salt", b"")
        self.chain = kvtier.KeyChain(self.model_id, self.layout,
                                     salt=salt.encode() if isinstance(salt, str) else salt,
                                     adapter=o.get("key_adapter_id", ""),
                                     shard=shard)
        if self.disk_dir is not None and "disk_dir" not in (self.config.extra_config or {}):
            os.makedirs(self.disk_dir, mode=0o700, exist_ok=True)
        self.cache = kvtier.Cache(self.layout, **o)

    def kvtier_key(self, key):
        """The kvtier block key of an SGLang page key (see the module comment)."""
        return hashlib.sha256(_KEY_DOMAIN + self.chain.namespace + key.encode()).digest()

    def close(self):
        if self.cache is not None:
            self.cache.close()

    def kvtier_stats(self):
        """kvtier's counters (hits per tier, bytes, disk usage) as a dict."""
        return self.cache.stats()

    # --- Existence ----------------------------------------------------------

    def batch_exists(self, keys, extra_info=None):
        """The number of leading keys whose pages kvtier holds (any tier)."""
        return self.cache.match([self.kvtier_key(k) for k in keys])

    def exists(self, key):
        return self.batch_exists([key]) == 1

    # --- Zero-copy interface (extra_config "interface_v1": 1) ---------------

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Loads pages straight into the host pool at host_indices. Stops at the
        first miss: SGLang uses only the leading run of hits."""
        results = [False] * len(keys)
        try:
            pages = self._page_regions(keys, host_indices)
            for i, key in enumerate(keys):
                if not self._load_into_regions(self.kvtier_key(key), pages[i]):
                    break
                results[i] = True
        except kvtier.Error as e:  # SGLang's prefetch thread must not die of it
            logger.error("kvtier: batch_get_v1 failed: %s", e)
        return results

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Stores the pages at host_indices, encoding from the host pool's
        memory (one copy into the block file)."""
        try:
            pages = self._page_regions(keys, host_indices)
        except kvtier.Error as e:  # SGLang's backup thread must not die of it
            logger.error("kvtier: batch_set_v1 failed: %s", e)
            return [False] * len(keys)
        return self._store_pages(keys, pages, extra_info)

    # --- Copying interface ---------------------------------------------------

    def get(self, key, target_location=None, target_sizes=None):
        """Loads a page into target_location (a flat page tensor); None on a miss."""
        if target_location is None:
            raise kvtier.InvalidArgument("sglang get: target_location is required")
        flat = _byte_view(target_location)
        if flat.nbytes != self.regions * self.region_bytes:
            raise kvtier.InvalidArgument("sglang get: target page has %d bytes, want %d"
                                         % (flat.nbytes, self.regions * self.region_bytes))
        found = self._load_into_regions(self.kvtier_key(key), np.split(flat, self.regions))
        return target_location if found else None

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        return [self.get(k, t) for k, t in zip(keys, target_locations or [None] * len(keys))]

    def set(self, key, value=None, target_location=None, target_sizes=None):
        """Stores one flat page tensor."""
        flat = _byte_view(value)
        if flat.nbytes != self.regions * self.region_bytes:
            raise kvtier.InvalidArgument("sglang set: page has %d bytes, want %d"
                                         % (flat.nbytes, self.regions * self.region_bytes))
        return self._store_pages([key], [np.split(flat, self.regions)], None)[0]

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        return all(self.set(k, v) for k, v in zip(keys, values))

    # --- Internals -----------------------------------------------------------

    def _page_regions(self, keys, host_indices):
        """Per page, uint8 views of its regions in the host pool."""
        if len(host_indices) != len(keys) * self.page_size:
            raise kvtier.InvalidArgument("sglang: %d host indices for %d pages of %d tokens"
                                         % (len(host_indices), len(keys), self.page_size))
        if not keys:
            return []
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if len(ptrs) != len(keys) * self.regions or any(s != self.region_bytes for s in sizes):
            raise kvtier.InvalidArgument(
                "sglang: the host pool gives %d regions of %s bytes for %d pages; the zero-copy "
                "interface needs a page_first layout (%d regions of %d bytes per page)"
                % (len(ptrs), sorted(set(sizes)), len(keys), self.regions, self.region_bytes))
        views = [_pointer_view(p, s) for p, s in zip(ptrs, sizes)]
        return [views[i * self.regions:(i + 1) * self.regions] for i in range(len(keys))]

    def _load_into_regions(self, kv_key, regions):
        # One copy: from kvtier's verified block (a RAM hit is its own buffer)
        # straight into the page's regions.
        return self.cache.load_tensors(kv_key, regions)

    def _store_pages(self, keys, pages, extra_info):
        prefix = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        parent = self.kvtier_key(prefix[-1]) if prefix else self.chain.namespace
        results = []
        for key, regions in zip(keys, pages):
            kv_key = self.kvtier_key(key)
            try:
                self.cache.store_tensors(kv_key, parent, self.chain.namespace, regions)
                results.append(True)
            except kvtier.Error as e:
                logger.warning("kvtier: storing page %s failed: %s", key, e)
                results.append(False)
            parent = kv_key
        return results


def _numpy_dtype(name):
    """numpy dtype of a safetensors name, raw bits for the ones numpy lacks."""
    return {"F16": np.float16, "BF16": np.uint16, "F32": np.float32, "F64": np.float64,
            "I8": np.int8, "U8": np.uint8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
            "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}[name]
