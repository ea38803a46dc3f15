"""SGLang's interface as facts, and stand-ins built from them, for test_sglang*.py.

Everything below was read (not copied) from SGLang's source with the search
tools over public repositories; each table names the file and the commit.
The stand-in module `sglang.srt.mem_cache.hicache_storage` is generated from
SIGNATURES (method names, parameters, defaults, which are abstract), so a
test that compares the backend with SIGNATURES fails when they differ.

Commits (sgl-project/sglang):
- 001067fffe33427bee0ed2f007fb7551a1d76b44 (the issue's 001067f):
  python/sglang/srt/mem_cache/hicache_storage.py,
  python/sglang/srt/mem_cache/storage/backend_factory.py,
  python/sglang/srt/managers/cache_controller.py.
- The host pools are not stored at 001067f (the index holds other versions of
  python/sglang/srt/mem_cache/pool_host/*.py; memory_pool_host.py, which the
  old docs cited, is not at 001067f either). Read at:
  pool_host/mha.py 0047d999bb3a3ad311df5a4b6356bfb5586e0d66 (MHATokenToKVPoolHost,
  AsymmetricMHATokenToKVPoolHost), pool_host/mla.py
  01c0ede38cc9645488fd2847dbea8a2f6a9241d8 (MLATokenToKVPoolHost),
  pool_host/mha_mxfp8.py 02d20b8bfc3d023a255f8ca70332fb035ee5d7b3,
  pool_host/mamba.py 02f0c2a0f8e4540dd6484b74f3d5b4ea4509f206,
  pool_host/group.py 0142dde6f8f9ca74d5572c9572da056ab912152e (the PoolEntry /
  HostPoolGroup form of SGLang PR 36232: entries, entry_map, the anchor
  entry (is_primary_index_anchor, else the first), layout and page_size of
  the anchor, no get_page_buffer_meta of its own). MLA's flat pages
  (get_data_page raising "Unsupported layout" for page_first_kv_split) from
  pool_host/mla.py 01c0ede38cc9.
- PoolTransferResult.restorable_prefix_pages (Optional[List[int]] = None, the
  common legal endpoints of every pool): in amdpilot-org/sglang
  8a734c448751940ab70fc84a66a1660e9faad880 hicache_storage.py and SGLang PR
  39267 (fixing issue 39147), not in upstream 001067f: build_modules(
  restorable=True) adds it.
- Prefix metadata on v2 calls: SGLang PR 39567 (merged): KV-derived
  batch_get_v2 calls get the KV batch's extra_info, hybrid batch_get_v2 /
  batch_set_v2 the operation's prefix.
- StorageMetrics: python/sglang/srt/metrics/collector.py
  00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538 (log_storage_metrics asserts
  isinstance(..., StorageMetrics); None is skipped).
"""

import abc
import dataclasses
import enum
import importlib
import sys
import types

import torch

REQUIRED = object()  # a parameter without a default

# hicache_storage.py @ 001067f: class HiCacheStorage(ABC). (name, [(param,
# default)], abstract). `self` left out.
SIGNATURES = [
    ("register_mem_pool_host", [("mem_pool_host", REQUIRED)], False),
    ("register_mem_host_pool_v2", [("host_pool", REQUIRED), ("host_pool_name", REQUIRED)], False),
    ("batch_exists_v2", [("keys", REQUIRED), ("pool_transfers", None), ("extra_info", None)],
     False),
    ("batch_get_v2", [("transfers", REQUIRED), ("extra_info", None)], False),
    ("batch_set_v2", [("transfers", REQUIRED), ("extra_info", None)], False),
    ("batch_get_v1", [("keys", REQUIRED), ("host_indices", REQUIRED), ("extra_info", None)],
     False),
    ("batch_set_v1", [("keys", REQUIRED), ("host_indices", REQUIRED), ("extra_info", None)],
     False),
    ("get", [("key", REQUIRED), ("target_location", None), ("target_sizes", None)], True),
    ("batch_get", [("keys", REQUIRED), ("target_locations", None), ("target_sizes", None)], True),
    ("set", [("key", REQUIRED), ("value", None), ("target_location", None),
             ("target_sizes", None)], True),
    ("batch_set", [("keys", REQUIRED), ("values", None), ("target_locations", None),
                   ("target_sizes", None)], True),
    ("exists", [("key", REQUIRED)], True),
    ("batch_exists", [("keys", REQUIRED), ("extra_info", None)], False),
    ("clear", [], False),
    ("get_stats", [], False),
]

# hicache_storage.py @ 001067f: @dataclass HiCacheStorageConfig, in order.
CONFIG_FIELDS = [
    ("tp_rank", REQUIRED), ("tp_size", REQUIRED), ("pp_rank", REQUIRED), ("pp_size", REQUIRED),
    ("attn_cp_rank", REQUIRED), ("attn_cp_size", REQUIRED), ("is_mla_model", REQUIRED),
    ("enable_storage_metrics", REQUIRED), ("is_page_first_layout", REQUIRED),
    ("model_name", REQUIRED), ("dp_rank", 0), ("dp_size", 1), ("tp_lcm_size", None),
    ("should_split_heads", False), ("extra_config", None),
]
EXTRA_INFO_FIELDS = [("prefix_keys", None), ("extra_info", None)]
POOL_NAMES = {"KV": "kv", "MAMBA": "mamba", "SWA": "swa", "INDEXER": "indexer",
              "DEEPSEEK_V4_C4": "deepseek_v4_c4",
              "DEEPSEEK_V4_C4_INDEXER": "deepseek_v4_c4_indexer",
              "DEEPSEEK_V4_C128": "deepseek_v4_c128",
              "DEEPSEEK_V4_C4_STATE": "deepseek_v4_c4_state",
              "DEEPSEEK_V4_C4_INDEXER_STATE": "deepseek_v4_c4_indexer_state",
              "DEEPSEEK_V4_C128_STATE": "deepseek_v4_c128_state",
              "DRAFT": "draft", "DRAFT_INDEXER": "draft_indexer", "DRAFT_SWA": "draft_swa"}
HIT_POLICIES = {"ALL_PAGES": "all_pages", "TRAILING_PAGES": "trailing_pages"}
# PoolTransfer: name, host_indices, device_indices, keys, hit_policy (ALL_PAGES),
# nodes_to_load, indices_from_pool. PoolTransferResult(kv_hit_pages, extra_pool_hit_pages).
STORAGE_BATCH_SIZE = 128  # pages per storage call (controller batches)
# metrics/collector.py @ 00ae9c1: @dataclass StorageMetrics, lists defaulting to [].
STORAGE_METRICS_FIELDS = ["prefetch_pgs", "backup_pgs", "prefetch_bandwidth", "backup_bandwidth"]


def _method(name, params, abstract):
    args = ", ".join(["self"] + [p if d is REQUIRED else "%s=%r" % (p, d) for p, d in params])
    scope = {}
    exec("def %s(%s):\n    raise NotImplementedError()\n" % (name, args), scope)
    fn = scope[name]
    return abc.abstractmethod(fn) if abstract else fn


def _dataclass(name, fields):
    spec = [(f, object) if d is REQUIRED else (f, object, dataclasses.field(default=d))
            for f, d in fields]
    return dataclasses.make_dataclass(name, spec)


def build_modules(restorable=False):
    """The stand-in modules, generated from the tables above (restorable:
    PoolTransferResult with restorable_prefix_pages, PR 39267's form)."""
    storage = types.ModuleType("sglang.srt.mem_cache.hicache_storage")
    body = {name: _method(name, params, abstract) for name, params, abstract in SIGNATURES}
    storage.HiCacheStorage = abc.ABCMeta("HiCacheStorage", (abc.ABC,), body)
    storage.HiCacheStorageConfig = _dataclass("HiCacheStorageConfig", CONFIG_FIELDS)
    storage.HiCacheStorageExtraInfo = _dataclass("HiCacheStorageExtraInfo", EXTRA_INFO_FIELDS)
    storage.PoolName = enum.Enum("PoolName", POOL_NAMES, type=str)
    storage.PoolHitPolicy = enum.Enum("PoolHitPolicy", HIT_POLICIES, type=str)
    storage.PoolTransfer = _dataclass("PoolTransfer", [
        ("name", REQUIRED), ("host_indices", None), ("device_indices", None), ("keys", None),
        ("hit_policy", storage.PoolHitPolicy.ALL_PAGES), ("nodes_to_load", None),
        ("indices_from_pool", None)])
    storage.PoolTransferResult = _dataclass("PoolTransferResult", [
        ("kv_hit_pages", REQUIRED), ("extra_pool_hit_pages", REQUIRED)]
        + ([("restorable_prefix_pages", None)] if restorable else []))
    storage.STORAGE_BATCH_SIZE = STORAGE_BATCH_SIZE
    collector = types.ModuleType("sglang.srt.metrics.collector")
    collector.StorageMetrics = dataclasses.make_dataclass("StorageMetrics", [
        (f, list, dataclasses.field(default_factory=list)) for f in STORAGE_METRICS_FIELDS])
    return storage, collector


def install(monkeypatch=None, restorable=False):
    """Puts the stand-ins into sys.modules (undone by monkeypatch, if given)."""
    storage, collector = build_modules(restorable)
    put = monkeypatch.setitem if monkeypatch is not None else \
        (lambda d, k, v: d.__setitem__(k, v))
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.metrics"):
        put(sys.modules, name, types.ModuleType(name))
    put(sys.modules, storage.__name__, storage)
    put(sys.modules, collector.__name__, collector)
    return storage, collector


def load_backend_class(storage, module_path, class_name):
    """backend_factory.py @ 001067f, _load_backend_class: import the module,
    getattr the class, issubclass(HiCacheStorage) or TypeError."""
    cls = getattr(importlib.import_module(module_path), class_name)
    if not issubclass(cls, storage.HiCacheStorage):
        raise TypeError("Backend class %s must inherit from HiCacheStorage" % class_name)
    return cls


def make_config(storage, extra, **fields):
    """cache_controller.py @ 001067f, _generate_storage_config: tp_lcm_size is
    popped from the extra config; should_split_heads = not rank-replicated and
    page_head and tp_lcm_size > tp_size."""
    extra = dict(extra)
    values = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                  is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                  model_name="Qwen/Qwen2.5-0.5B")
    layout = fields.pop("host_layout", "page_first")
    values.update(fields)
    lcm = extra.pop("tp_lcm_size", None)
    split = bool(lcm) and not values["is_mla_model"] and layout == "page_head" \
        and lcm > values["tp_size"]
    values["is_page_first_layout"] = layout == "page_first"
    return storage.HiCacheStorageConfig(tp_lcm_size=lcm, should_split_heads=split,
                                        extra_config=extra, **values)


def create_dynamic(storage, config, pool):
    """The controller's attach: factory creates (cls(storage_config, kwargs)),
    then register_mem_pool_host(host pool)."""
    extra = config.extra_config
    for field in ("backend_name", "module_path", "class_name"):
        if field not in extra:
            raise ValueError("Missing required field '%s'" % field)
    backend = load_backend_class(storage, extra["module_path"], extra["class_name"])(config, {})
    if pool is not None:
        backend.register_mem_pool_host(pool)
    return backend


# --- Host pools in CPU torch, laid out as SGLang's (files and commits above) ---

class MHAPool:
    """MHATokenToKVPoolHost: kv_buffer dims per layout; K = [0], V = [1]."""

    DIMS = {"layer_first": lambda s: (2, s.L, s.size, s.H, s.D),
            "page_first": lambda s: (2, s.size, s.L, s.H, s.D),
            "page_first_direct": lambda s: (2, s.pages, s.L, s.page_size, s.H, s.D),
            "page_head": lambda s: (2, s.pages, s.H, s.page_size, s.L, s.D)}

    def __init__(self, pages=16, page_size=4, layers=3, heads=2, head_dim=8,
                 dtype=torch.float16, layout="page_first", seed=None):
        self.pages, self.page_size, self.size = pages, page_size, pages * page_size
        self.L, self.H, self.D, self.dtype, self.layout = layers, heads, head_dim, dtype, layout
        self.kv_buffer = torch.zeros(self.DIMS[layout](self), dtype=dtype)
        if seed is not None:
            fill_random(self.kv_buffer, seed)

    @property
    def it(self):
        return self.kv_buffer.element_size()

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        base, idx = self.kv_buffer.data_ptr(), indices.tolist()
        v_off = self.L * self.size * self.H * self.D * self.it
        ptrs = []
        if self.layout == "layer_first":
            for i in range(0, len(idx), self.page_size):
                for layer in range(self.L):
                    k = base + idx[i] * self.H * self.D * self.it \
                        + layer * self.size * self.H * self.D * self.it
                    ptrs += [k, k + v_off]
            return ptrs, [self.it * self.page_size * self.H * self.D] * len(ptrs)
        for i in range(0, len(idx), self.page_size):
            k = base + idx[i] * self.L * self.H * self.D * self.it
            ptrs += [k, k + v_off]
        return ptrs, [self.L * self.it * self.page_size * self.H * self.D] * len(ptrs)

    def get_split_heads_page_buffer_meta(self, indices, split_factor):
        assert self.layout == "page_head" and self.H % split_factor == 0
        base, idx = self.kv_buffer.data_ptr(), indices.tolist()
        v_off = self.L * self.size * self.H * self.D * self.it
        ptrs = []
        for i in range(0, len(idx), self.page_size):
            for head in range(0, self.H, self.H // split_factor):
                k = base + idx[i] * self.L * self.H * self.D * self.it \
                    + head * self.page_size * self.L * self.D * self.it
                ptrs += [k, k + v_off]
        size = self.L * self.it * self.page_size * self.H * self.D // split_factor
        return ptrs, [size] * len(ptrs)

    def page(self, index):
        """The page at token index `index` (a view)."""
        if self.layout == "layer_first":
            return self.kv_buffer[:, :, index:index + self.page_size]
        if self.layout == "page_first":
            return self.kv_buffer[:, index:index + self.page_size]
        p = index // self.page_size
        return self.kv_buffer[:, p:p + 1]

    def get_data_page(self, index, flat=True):
        page = self.page(int(index))
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return torch.zeros((2, self.L, self.page_size, self.H, self.D), dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index, data_page):
        page = self.page(int(index))
        page[...] = data_page.reshape(page.shape)


class AsymmetricMHAPool:
    """AsymmetricMHATokenToKVPoolHost: K and V in two buffers, head dims differ;
    page_first or page_first_direct; no flat pages."""

    def __init__(self, pages=8, page_size=4, layers=2, heads=2, head_dim=8, v_head_dim=4,
                 dtype=torch.bfloat16, layout="page_first", seed=None):
        self.pages, self.page_size, self.size, self.dtype = pages, page_size, pages * page_size, dtype
        self.L, self.H, self.D, self.Dv, self.layout = layers, heads, head_dim, v_head_dim, layout
        if layout == "page_first":
            kd, vd = (self.size, layers, heads, head_dim), (self.size, layers, heads, v_head_dim)
        else:
            kd = (pages, layers, page_size, heads, head_dim)
            vd = (pages, layers, page_size, heads, v_head_dim)
        self.k_buffer, self.v_buffer = torch.zeros(kd, dtype=dtype), torch.zeros(vd, dtype=dtype)
        if seed is not None:
            fill_random(self.k_buffer, seed)
            fill_random(self.v_buffer, seed + 1)

    def get_page_buffer_meta(self, indices):
        it, idx = self.k_buffer.element_size(), indices.tolist()
        ks = self.L * it * self.page_size * self.H * self.D
        vs = self.L * it * self.page_size * self.H * self.Dv
        direct = self.layout == "page_first_direct"
        kstride = self.L * (self.page_size if direct else 1) * self.H * self.D
        vstride = self.L * (self.page_size if direct else 1) * self.H * self.Dv
        ptrs, sizes = [], []
        for i in range(0, len(idx), self.page_size):
            b = idx[i] // self.page_size if direct else idx[i]
            ptrs += [self.k_buffer.data_ptr() + b * kstride * it,
                     self.v_buffer.data_ptr() + b * vstride * it]
            sizes += [ks, vs]
        return ptrs, sizes

    def get_dummy_flat_data_page(self):
        raise NotImplementedError("head_dim != v_head_dim: no flat pages")

    def page_bytes(self, index):
        s = slice(index, index + self.page_size) if self.layout == "page_first" else \
            slice(index // self.page_size, index // self.page_size + 1)
        return self.k_buffer[s].numpy().tobytes() + self.v_buffer[s].numpy().tobytes()


class MLAPool:
    """MLATokenToKVPoolHost: one latent buffer; page_first_kv_split keeps k, v
    (rope), index_k and its F32 scales in four buffers of unequal sizes."""

    def __init__(self, pages=8, page_size=4, layers=3, kv_dim=12, dtype=torch.bfloat16,
                 layout="page_first", rope_dim=4, index_dim=6, index_layers=2, scales=True,
                 seed=None):
        self.pages, self.page_size, self.size = pages, page_size, pages * page_size
        self.L, self.D, self.dtype, self.layout = layers, kv_dim, dtype, layout
        self.buffers = []
        if layout == "page_first_kv_split":
            base = (pages, layers, page_size, 1)
            self.k_buffer = torch.zeros(base + (kv_dim - rope_dim,), dtype=dtype)
            self.v_buffer = torch.zeros(base + (rope_dim,), dtype=dtype)
            self.index_k_buffer = torch.zeros((pages, index_layers, page_size, 1, index_dim),
                                              dtype=dtype)
            self.index_k_scale_buffer = torch.zeros((pages, index_layers, page_size, 1, 1),
                                                    dtype=torch.float32) if scales else None
            self.buffers = [b for b in (self.k_buffer, self.v_buffer, self.index_k_buffer,
                                        self.index_k_scale_buffer) if b is not None]
            self.kv_buffer = self.k_buffer
        else:
            dims = {"layer_first": (layers, self.size, 1, kv_dim),
                    "page_first": (self.size, layers, 1, kv_dim),
                    "page_first_direct": (pages, layers, page_size, 1, kv_dim)}[layout]
            self.kv_buffer = torch.zeros(dims, dtype=dtype)
            self.buffers = [self.kv_buffer]
        if seed is not None:
            for n, b in enumerate(self.buffers):
                fill_random(b, seed + n)

    def get_page_buffer_meta(self, indices):
        idx, it = indices.tolist(), self.kv_buffer.element_size()
        ptrs, sizes = [], []
        if self.layout == "page_first_kv_split":
            for i in range(0, len(idx), self.page_size):
                for b in self.buffers:  # each (pages, layers, page_size, 1, width)
                    per_token = b.shape[1] * b.shape[-1] * b.element_size()
                    ptrs.append(b.data_ptr() + idx[i] * per_token)
                    sizes.append(per_token * self.page_size)
            return ptrs, sizes
        base = self.kv_buffer.data_ptr()
        if self.layout == "layer_first":
            for i in range(0, len(idx), self.page_size):
                for layer in range(self.L):
                    ptrs.append(base + idx[i] * self.D * it + layer * self.size * self.D * it)
            return ptrs, [it * self.page_size * self.D] * len(ptrs)
        if self.layout in ("page_first", "page_first_direct"):
            for i in range(0, len(idx), self.page_size):
                ptrs.append(base + idx[i] * self.L * self.D * it)
            return ptrs, [self.L * it * self.page_size * self.D] * len(ptrs)
        raise ValueError("Unsupported layout: %s" % self.layout)

    def get_data_page(self, index, flat=True):
        if self.layout == "page_first_kv_split":  # mla.py: no flat page of it
            raise ValueError("Unsupported layout: %s" % self.layout)
        p = int(index) // self.page_size
        page = {"layer_first": lambda: self.kv_buffer[:, index:index + self.page_size],
                "page_first": lambda: self.kv_buffer[index:index + self.page_size],
                "page_first_direct": lambda: self.kv_buffer[p:p + 1]}[self.layout]()
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return torch.zeros((self.L, self.page_size, 1, self.D), dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index, data_page):
        page = self.get_data_page(index, flat=False)
        page[...] = data_page.reshape(page.shape)

    def page_bytes(self, index):
        p = index // self.page_size
        if self.layout == "page_first_kv_split":
            return b"".join(raw(b[p]) for b in self.buffers)
        if self.layout == "page_first":
            page = self.kv_buffer[index:index + self.page_size]
        elif self.layout == "page_first_direct":
            page = self.kv_buffer[p:p + 1]
        else:
            page = self.kv_buffer[:, index:index + self.page_size]
        return raw(page)


class MambaPool:
    """MambaPoolHost, page_first: page_size 1; per slot one temporal state
    (F32 here) and conv states (pool dtype), each its own buffer."""

    def __init__(self, slots=8, layers=2, temporal_shape=(3, 4), conv_shapes=((2, 5), (6,)),
                 conv_dtype=torch.bfloat16, temporal_dtype=torch.float32, seed=None):
        self.page_size, self.size, self.layout, self.dtype = 1, slots, "page_first", conv_dtype
        self.temporal_buffer = torch.zeros((slots, layers, 1) + tuple(temporal_shape),
                                           dtype=temporal_dtype)
        self.conv_buffer = [torch.zeros((slots, layers, 1) + tuple(s), dtype=conv_dtype)
                            for s in conv_shapes]
        if seed is not None:
            for n, b in enumerate([self.temporal_buffer] + self.conv_buffer):
                fill_random(b, seed + n)

    def get_page_buffer_meta(self, indices):
        ptrs, sizes = [], []
        for i in indices.tolist():
            for b in [self.temporal_buffer] + self.conv_buffer:
                per_slot = b[0].numel() * b.element_size()
                ptrs.append(b.data_ptr() + i * per_slot)
                sizes.append(per_slot)
        return ptrs, sizes

    def slot_bytes(self, i):
        return b"".join(raw(b[i]) for b in [self.temporal_buffer] + self.conv_buffer)


class MXFP8Pool(MHAPool):
    """MHATokenToKVPoolMXFP8Host: its scales live outside kv_buffer, so it
    refuses get_page_buffer_meta (and flat pages)."""

    def get_page_buffer_meta(self, indices):
        raise NotImplementedError("MXFP8 KV host pool does not expose flat storage (L3) pages yet")


def pool_entry(name, host_pool, anchor=False):
    """PoolEntry (group.py): name, host_pool, device_pool, layer_mapper,
    is_primary_index_anchor, and evict/alloc callbacks (left out here)."""
    return types.SimpleNamespace(name=name, host_pool=host_pool, device_pool=None,
                                 layer_mapper=lambda layer: layer,
                                 is_primary_index_anchor=anchor)


class HostPoolGroup:
    """HostPoolGroup(entries): the anchor entry (is_primary_index_anchor, else
    the first); layout and page_size are the anchor's; no
    get_page_buffer_meta, no dtype, no flat pages of its own."""

    def __init__(self, anchor, **side):
        self.entries = [pool_entry("kv", anchor, anchor=True)] + \
            [pool_entry(k, v) for k, v in side.items()]
        self.entry_map = {e.name: e for e in self.entries}
        self.anchor_entry = self.entries[0]
        self.layout, self.page_size = anchor.layout, anchor.page_size

    def get_pool(self, name):
        return self.entry_map[name].host_pool


class DeepSeekV4TokenToKVPoolHost(MLAPool):
    """Named as SGLang's DeepSeek-V4 host pool (its own layout; refused)."""


def raw(tensor):
    """A tensor's bytes (any dtype, also bfloat16)."""
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def fill_random(tensor, seed):
    """Random bytes (finite floats) into a tensor, deterministic from seed."""
    g = torch.Generator().manual_seed(seed)
    tensor.copy_((torch.rand(tensor.shape, generator=g) * 8 - 4).to(tensor.dtype))
