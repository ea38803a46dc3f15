"""kvtier.integrations.sglang driven the way SGLang's HiCache drives a storage
backend, on numpy host pages, without sglang or torch installed.

The stand-ins below are written from SGLang's interface (hicache_storage.py,
storage/backend_factory.py, managers/cache_controller.py on its main branch):
an abstract HiCacheStorage base, the storage config dataclass, the dynamic
backend loader (import the module, check issubclass, call cls(config, kwargs))
and a page_first MHA/MLA host pool whose get_page_buffer_meta hands out raw
page pointers. The call sequence is the controller's: batch_exists on the page
hashes, batch_get_v1 into host pages (prefetch), batch_set_v1 from host pages
(backup); and the copying batch_get/batch_set of the default path.
"""

import abc
import dataclasses
import hashlib
import importlib
import os
import sys
import types

import numpy as np
import pytest

import kvtier


@dataclasses.dataclass
class StorageConfig:
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    enable_storage_metrics: bool = False
    is_page_first_layout: bool = True
    model_name: str = "Qwen/Qwen2.5-0.5B"
    extra_config: dict = None


@dataclasses.dataclass
class ExtraInfo:
    prefix_keys: list = None
    extra_info: dict = None


class HiCacheStorageStandIn(abc.ABC):
    """The abstract surface SGLang's factory checks against."""

    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host

    @abc.abstractmethod
    def get(self, key, target_location=None, target_sizes=None): ...

    @abc.abstractmethod
    def batch_get(self, keys, target_locations=None, target_sizes=None): ...

    @abc.abstractmethod
    def set(self, key, value=None, target_location=None, target_sizes=None): ...

    @abc.abstractmethod
    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None): ...

    @abc.abstractmethod
    def exists(self, key): ...


class HostPool:
    """A page_first host KV pool in numpy: kv_buffer [2, size, layers, heads, dim]
    (MHA) or [size, layers, 1, dim] (MLA)."""

    def __init__(self, pages, page_size=4, layers=3, heads=2, dim=8, dtype=np.float16, mla=False,
                 seed=None):
        self.page_size, self.size, self.dtype, self.mla = page_size, pages * page_size, dtype, mla
        self.layout = "page_first"
        self.token_shape = (layers, 1, dim) if mla else (layers, heads, dim)
        shape = ((self.size,) if mla else (2, self.size)) + self.token_shape
        self.kv_buffer = np.zeros(shape, dtype)
        if seed is not None:
            raw = np.random.default_rng(seed).integers(0, 1 << 16, self.kv_buffer.size,
                                                       dtype=np.uint16)
            self.kv_buffer[...] = raw.view(np.float16).reshape(shape).astype(dtype)
        self.token_bytes = int(np.prod(self.token_shape)) * np.dtype(dtype).itemsize

    def get_page_buffer_meta(self, indices):
        base = self.kv_buffer.ctypes.data
        v_offset = self.size * self.token_bytes
        ptrs = []
        for i in range(0, len(indices), self.page_size):
            k = base + int(indices[i]) * self.token_bytes
            ptrs += [k] if self.mla else [k, k + v_offset]
        return ptrs, [self.page_size * self.token_bytes] * len(ptrs)

    def page(self, index):
        s = slice(index, index + self.page_size)
        return self.kv_buffer[s] if self.mla else self.kv_buffer[:, s]

    def get_dummy_flat_data_page(self):
        return np.zeros(self.page(0).size, self.dtype)

    def get_data_page(self, index, flat=True):
        return np.ascontiguousarray(self.page(int(index))).reshape(-1)

    def set_from_flat_data_page(self, index, data_page):
        self.page(int(index))[...] = data_page.reshape(self.page(0).shape)


def page_hashes(tokens, page_size, prior=None):
    """SGLang-style page keys: a SHA-256 hex chain over each page's token ids."""
    out = []
    for i in range(0, len(tokens) - len(tokens) % page_size, page_size):
        h = hashlib.sha256()
        if prior:
            h.update(bytes.fromhex(prior))
        for t in tokens[i:i + page_size]:
            h.update(int(t).to_bytes(4, "little"))
        prior = h.hexdigest()
        out.append(prior)
    return out


@pytest.fixture
def sglang_module(monkeypatch):
    """Installs the stand-in sglang storage module and (re)imports the backend
    the way SGLang's dynamic factory does."""
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    storage = types.ModuleType("sglang.srt.mem_cache.hicache_storage")
    storage.HiCacheStorage = HiCacheStorageStandIn
    monkeypatch.setitem(sys.modules, storage.__name__, storage)
    sys.modules.pop("kvtier.integrations.sglang", None)
    yield storage
    sys.modules.pop("kvtier.integrations.sglang", None)


def create_dynamic_backend(config):
    """What SGLang's StorageBackendFactory does for --hicache-storage-backend dynamic."""
    extra = config.extra_config
    for field in ("backend_name", "module_path", "class_name"):
        assert field in extra
    cls = getattr(importlib.import_module(extra["module_path"]), extra["class_name"])
    if not issubclass(cls, HiCacheStorageStandIn):
        raise TypeError("Backend class must inherit from HiCacheStorage")
    return cls(config, {})


def make_config(tmp_path, **overrides):
    extra = {"backend_name": "kvtier", "module_path": "kvtier.integrations.sglang",
             "class_name": "KvtierHiCacheStorage", "interface_v1": 1,
             "disk_dir": str(tmp_path / "kvtier"), "host_bytes": 1 << 20}
    extra.update(overrides.pop("extra", {}))
    return StorageConfig(extra_config=extra, **overrides)


def open_backend(tmp_path, pool, **overrides):
    backend = create_dynamic_backend(make_config(tmp_path, **overrides))
    backend.register_mem_pool_host(pool)
    return backend


def indices_of(pages, page_size, first_page=0):
    return np.arange(first_page * page_size, (first_page + pages) * page_size, dtype=np.int64)


@pytest.mark.parametrize("mla", [False, True])
def test_prefetch_and_backup_call_sequence(sglang_module, tmp_path, mla):
    src = HostPool(pages=16, mla=mla, seed=1)
    backend = open_backend(tmp_path, src, is_mla_model=mla)
    assert isinstance(backend, HiCacheStorageStandIn)  # the factory's issubclass check passed
    tokens = list(range(1000, 1000 + 10 * src.page_size + 3))
    keys = page_hashes(tokens, src.page_size)
    assert len(keys) == 10
    assert backend.batch_exists(keys, ExtraInfo()) == 0

    # Backup: pages 2..11 of the source pool go to storage (zero-copy set).
    assert backend.batch_set_v1(keys, indices_of(10, src.page_size, 2), ExtraInfo()) == [True] * 10
    assert backend.batch_exists(keys) == 10
    assert backend.batch_exists(keys[:4] + ["0" * 64] + keys[5:]) == 4
    assert backend.exists(keys[9]) and not backend.exists("f" * 64)

    # Prefetch into another pool's pages 5..14: byte for byte the source pages.
    dst = HostPool(pages=16, mla=mla)
    backend.register_mem_pool_host(dst)  # the same backend object, a fresh pool
    assert backend.batch_get_v1(keys, indices_of(10, dst.page_size, 5)) == [True] * 10
    for i in range(10):
        assert dst.page((5 + i) * dst.page_size).tobytes() == \
            src.page((2 + i) * src.page_size).tobytes()
    assert not dst.page(0).any() and not dst.page(15 * dst.page_size).any()  # nothing else written
    # A miss stops the batch: only the leading hits are True.
    mixed = keys[:3] + ["e" * 64] + keys[4:6]
    assert backend.batch_get_v1(mixed, indices_of(6, dst.page_size)) == [True] * 3 + [False] * 3
    backend.close()

    # Restart: a new backend on the same folder finds every page on disk.
    again = open_backend(tmp_path, HostPool(pages=16, mla=mla), is_mla_model=mla)
    assert again.batch_exists(keys) == 10
    assert again.batch_get_v1(keys[:2], indices_of(2, src.page_size, 0)) == [True, True]
    assert again.mem_pool_host.page(0).tobytes() == src.page(2 * src.page_size).tobytes()
    stats = again.kvtier_stats()
    assert stats["hits_disk"] == 2 and stats["hits_host"] == 0
    again.close()


def test_copying_interface_matches_zero_copy(sglang_module, tmp_path):
    src = HostPool(pages=8, seed=2)
    backend = open_backend(tmp_path, src, extra={"interface_v1": 0})
    keys = page_hashes(list(range(8 * src.page_size)), src.page_size)
    # _generic_page_set: flat pages from get_data_page.
    pages = [src.get_data_page(i * src.page_size) for i in range(8)]
    assert backend.batch_set(keys, pages) is True
    # _generic_page_get: dummy flat pages, then set_from_flat_data_page.
    dst = HostPool(pages=8)
    got = backend.batch_get(keys, [dst.get_dummy_flat_data_page() for _ in keys])
    assert all(g is not None for g in got)
    for i, g in enumerate(got):
        dst.set_from_flat_data_page(i * dst.page_size, g)
    assert dst.kv_buffer.tobytes() == src.kv_buffer.tobytes()
    # The two interfaces read each other's pages (same layout, same keys).
    zc = HostPool(pages=8)
    backend.register_mem_pool_host(zc)
    assert backend.batch_get_v1(keys, indices_of(8, zc.page_size)) == [True] * 8
    assert zc.kv_buffer.tobytes() == src.kv_buffer.tobytes()
    assert backend.get("d" * 64, dst.get_dummy_flat_data_page()) is None
    backend.close()


def test_ranks_dtypes_and_models_do_not_share_pages(sglang_module, tmp_path):
    pool = HostPool(pages=4, seed=3)
    keys = page_hashes(list(range(4 * pool.page_size)), pool.page_size)
    rank0 = open_backend(tmp_path, pool, tp_rank=0, tp_size=2)
    assert all(rank0.batch_set_v1(keys, indices_of(4, pool.page_size)))
    rank0.close()
    # Another TP rank holds other heads: it must not get rank 0's pages.
    rank1 = open_backend(tmp_path, HostPool(pages=4), tp_rank=1, tp_size=2)
    assert rank1.batch_exists(keys) == 0
    rank1.close()
    # Another KV dtype or model: another layout or namespace, no hits.
    other_dtype = open_backend(tmp_path, HostPool(pages=4, dtype=np.float32), tp_rank=0, tp_size=2)
    assert other_dtype.batch_exists(keys) == 0
    other_dtype.close()
    other = open_backend(tmp_path, HostPool(pages=4), tp_rank=0, tp_size=2,
                         model_name="other/model")
    assert other.batch_exists(keys) == 0
    other.close()
    same = open_backend(tmp_path, HostPool(pages=4), tp_rank=0, tp_size=2)
    assert same.batch_exists(keys) == 4
    same.close()


def test_bad_calls_fail_softly(sglang_module, tmp_path):
    pool = HostPool(pages=4, seed=4)
    backend = open_backend(tmp_path, pool)
    keys = page_hashes(list(range(2 * pool.page_size)), pool.page_size)
    # Indices that do not cover the pages: all False, no exception into SGLang's thread.
    assert backend.batch_set_v1(keys, indices_of(1, pool.page_size)) == [False, False]
    assert backend.batch_get_v1(keys, indices_of(3, pool.page_size)) == [False, False]
    with pytest.raises(kvtier.InvalidArgument, match="page has"):
        backend.set(keys[0], np.zeros(3, np.float16))
    backend.close()


def test_standalone_import_without_sglang():
    sys.modules.pop("kvtier.integrations.sglang", None)
    assert "sglang.srt.mem_cache.hicache_storage" not in sys.modules
    module = importlib.import_module("kvtier.integrations.sglang")
    assert module.KvtierHiCacheStorage.__mro__[1] is object
    assert not any(name == "sglang" or name.startswith("sglang.") for name in sys.modules)
    assert "torch" not in sys.modules
    sys.modules.pop("kvtier.integrations.sglang", None)



def test_extra_config_goes_through_kvtier_options(sglang_module, tmp_path, monkeypatch):
    # Unknown keys and bad values are errors, named, when the backend is made.
    for extra, needle in (({"disk_max_byte": 1}, "did you mean 'disk_max_bytes'"),
                          ({"write_policy": "sometimes"}, "write_policy"),
                          ({"host_bytes": -1}, "host_bytes"),
                          ({"layout": "tiny"}, "layout: set by the backend"),
                          ({"key_extra": "x"}, "key_extra"),
                          ({"model_id": "a", "key_model_id": "b"}, "not both")):
        with pytest.raises(kvtier.InvalidArgument, match=needle):
            create_dynamic_backend(make_config(tmp_path, extra=extra))
    # Every option of the table reaches the cache: write-through with fsync,
    # a disk limit with a unit, the model id under its old name.
    pool = HostPool(pages=4, seed=3)
    keys = page_hashes(list(range(4 * pool.page_size)), pool.page_size)
    backend = open_backend(tmp_path, pool, extra={
        "write_policy": "write_through", "disk_durability": "fsync",
        "disk_max_bytes": "64MiB", "model_id": "other-model", "host_bytes": "1MiB"})
    assert backend.model_id == "other-model"
    assert all(backend.batch_set_v1(keys, indices_of(4, pool.page_size)))
    assert backend.kvtier_stats()["disk"]["saves"] == 4  # written through, no flush
    backend.close()
    # Without disk_dir: a per-user folder (0700), not /tmp.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    config = make_config(tmp_path)
    del config.extra_config["disk_dir"]
    backend = create_dynamic_backend(config)
    assert backend.disk_dir == str(tmp_path / "xdg" / "kvtier" / "sglang")
    backend.register_mem_pool_host(HostPool(pages=4))
    assert os.stat(backend.disk_dir).st_mode & 0o777 == 0o700
    backend.close()
    # null: RAM only.
    backend = open_backend(tmp_path, HostPool(pages=4), extra={"disk_dir": None})
    assert backend.kvtier_stats().get("disk") is None
    backend.close()
