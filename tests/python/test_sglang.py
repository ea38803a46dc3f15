"""kvtier.integrations.sglang driven as SGLang's HiCache controller drives a
storage backend, with CPU torch host pools laid out as SGLang's.

sglang_fakes.py holds the facts read from SGLang's source (files and commits
named there): the HiCacheStorage method table, HiCacheStorageConfig, the
factory's loading steps, the controller's call order, and the host pools'
buffers and get_page_buffer_meta. SGLang itself is not installed here; its
storage module is generated from that table.
"""

import inspect
import logging
import os
import subprocess
import sys

import pytest
import torch

import kvtier
import sglang_fakes as fakes
from conftest import fill_up, start_daemon
from kvtier.integrations import _served

BACKEND = "kvtier.integrations.sglang"


@pytest.fixture
def sglang(monkeypatch):
    """SGLang's storage and metrics modules (stand-ins), the backend module
    imported afresh after them."""
    storage, collector = fakes.install(monkeypatch)
    for name in (BACKEND,):
        sys.modules.pop(name, None)
    yield storage
    sys.modules.pop(BACKEND, None)


def extra_config(tmp_path, **overrides):
    extra = {"backend_name": "kvtier", "module_path": BACKEND,
             "class_name": "KvtierHiCacheStorage", "interface_v1": 1,
             "disk_dir": str(tmp_path / "kvtier"), "host_bytes": 1 << 20}
    if "server" in overrides:  # a client of `kvtier serve` has the daemon's tiers
        del extra["disk_dir"], extra["host_bytes"]
    extra.update(overrides)
    return {k: v for k, v in extra.items() if v is not None or k == "disk_dir"}


def open_backend(storage, tmp_path, pool, extra=None, **config):
    layout = getattr(pool, "layout", "page_first")
    cfg = fakes.make_config(storage, extra_config(tmp_path, **(extra or {})), host_layout=layout,
                            **config)
    return fakes.create_dynamic(storage, cfg, pool)


def indices(pages, page_size, first=0):
    return torch.arange(first * page_size, (first + pages) * page_size, dtype=torch.int64)


def page_keys(n, salt="s"):
    return ["%s%063d" % (salt, i) for i in range(n)]


def page_bytes(pool, index):
    """One page's bytes, read from the pool's regions (its get_page_buffer_meta)."""
    ptrs, sizes = pool.get_page_buffer_meta(indices(1, pool.page_size, index // pool.page_size))
    from kvtier.integrations._sglang_pages import pointer_view
    return b"".join(pointer_view(p, s).tobytes() for p, s in zip(ptrs, sizes))


# --- The interface, against SGLang's table ---------------------------------

def test_methods_match_sglangs_signatures(sglang):
    from kvtier.integrations._sglang_backend import SglangBackend
    for name, params, _ in fakes.SIGNATURES:
        got = [(p.name, fakes.REQUIRED if p.default is inspect.Parameter.empty else p.default)
               for p in list(inspect.signature(getattr(SglangBackend, name)).parameters.values())[1:]]
        assert got == params, name
        base = list(inspect.signature(getattr(sglang.HiCacheStorage, name)).parameters)[1:]
        assert base == [p for p, _ in params], name  # the stand-in follows the table too
    assert list(inspect.signature(SglangBackend.__init__).parameters) == \
        ["self", "storage_config", "kwargs"]  # the factory calls cls(storage_config, kwargs)
    assert [f.name for f in __import__("dataclasses").fields(sglang.HiCacheStorageConfig)] == \
        [f for f, _ in fakes.CONFIG_FIELDS]


@pytest.mark.parametrize("interface_v1", [0, 1])
def test_zero_copy_page_io_is_what_interface_v1_chose(sglang, tmp_path, interface_v1):
    """Newer HiCacheStorage bases have supports_zero_copy_page_io (default
    False, which keeps a caller on the copying calls)."""
    backend = open_backend(sglang, tmp_path, fakes.MHAPool(),
                           extra={"interface_v1": interface_v1})
    assert backend.supports_zero_copy_page_io is bool(interface_v1)
    backend.close()


def test_base_class_whatever_the_import_order(monkeypatch, tmp_path):
    # kvtier's module first, SGLang's storage module after it.
    sys.modules.pop(BACKEND, None)
    module = __import__(BACKEND, fromlist=["x"])
    assert module.KvtierHiCacheStorage.__mro__[1] is object  # no SGLang: a plain class
    storage, _ = fakes.install(monkeypatch)
    cls = fakes.load_backend_class(storage, BACKEND, "KvtierHiCacheStorage")  # issubclass passes
    assert issubclass(cls, storage.HiCacheStorage)
    assert fakes.load_backend_class(storage, BACKEND, "KvtierHiCacheStorage") is cls  # one class
    backend = open_backend(storage, tmp_path, fakes.MHAPool())
    assert isinstance(backend, storage.HiCacheStorage)
    backend.close()
    # SGLang's module replaced (another server in the process): a class for it.
    storage2, _ = fakes.install(monkeypatch)
    assert issubclass(fakes.load_backend_class(storage2, BACKEND, "KvtierHiCacheStorage"),
                      storage2.HiCacheStorage)
    sys.modules.pop(BACKEND, None)
    # SGLang's module first (the factory's order).
    assert issubclass(fakes.load_backend_class(storage2, BACKEND, "KvtierHiCacheStorage"),
                      storage2.HiCacheStorage)
    sys.modules.pop(BACKEND, None)


def test_module_imports_neither_sglang_nor_torch():
    code = ("import sys, kvtier.integrations.sglang as m\n"
            "assert m.KvtierHiCacheStorage.__mro__[1] is object\n"
            "assert not [n for n in sys.modules if n == 'sglang' or n.startswith('sglang.')]\n"
            "assert 'torch' not in sys.modules\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


# --- The controller's call order, per host pool -------------------------------

POOLS = {
    "mha_page_first": lambda **k: fakes.MHAPool(layout="page_first", **k),
    "mha_page_first_direct": lambda **k: fakes.MHAPool(layout="page_first_direct", **k),
    "mha_page_head": lambda **k: fakes.MHAPool(layout="page_head", **k),
    "mha_layer_first": lambda **k: fakes.MHAPool(layout="layer_first", **k),
    "mha_bf16": lambda **k: fakes.MHAPool(dtype=torch.bfloat16, **k),
    "asym_page_first": lambda **k: fakes.AsymmetricMHAPool(pages=16, **k),
    "asym_page_first_direct": lambda **k: fakes.AsymmetricMHAPool(
        pages=16, layout="page_first_direct", **k),
    "mla_page_first": lambda **k: fakes.MLAPool(pages=16, **k),
    "mla_page_first_direct": lambda **k: fakes.MLAPool(pages=16, layout="page_first_direct", **k),
    "mla_layer_first": lambda **k: fakes.MLAPool(pages=16, layout="layer_first", **k),
    "mla_kv_split": lambda **k: fakes.MLAPool(pages=16, layout="page_first_kv_split", **k),
}


@pytest.mark.parametrize("kind", sorted(POOLS))
def test_prefetch_and_backup_call_order(sglang, tmp_path, kind):
    mla = kind.startswith("mla")
    src = POOLS[kind](seed=1)
    backend = open_backend(sglang, tmp_path, src, is_mla_model=mla)
    keys = page_keys(10)
    info = sglang.HiCacheStorageExtraInfo()
    assert backend.batch_exists(keys, info) == 0  # prefetch thread: the hit query
    # Backup thread: pages 2..11 of the pool, one batch.
    assert backend.batch_set_v1(keys, indices(10, src.page_size, 2), info) == [True] * 10
    assert backend.batch_exists(keys, info) == 10
    assert backend.batch_exists(keys[:4] + ["0" * 64] + keys[5:]) == 4
    assert backend.exists(keys[9]) and not backend.exists("f" * 64)
    backend.close()

    # Restart: a new backend on the folder, a fresh pool; prefetch-io thread.
    dst = POOLS[kind]()
    again = open_backend(sglang, tmp_path, dst, is_mla_model=mla)
    assert again.batch_exists(keys) == 10
    assert again.batch_get_v1(keys, indices(10, dst.page_size, 5), info) == [True] * 10
    for i in range(10):
        assert page_bytes(dst, (5 + i) * dst.page_size) == page_bytes(src, (2 + i) * src.page_size)
    zero = bytes(len(page_bytes(dst, 0)))
    assert page_bytes(dst, 0) == zero and page_bytes(dst, 15 * dst.page_size) == zero
    # A miss ends the run: the pages after it are not loaded.
    mixed = keys[:3] + ["e" * 64] + keys[4:6]
    assert again.batch_get_v1(mixed, indices(6, dst.page_size, 0)) == [True] * 3 + [False] * 3
    assert page_bytes(dst, 3 * dst.page_size) == zero and page_bytes(dst, 4 * dst.page_size) == zero
    # The 10 pages came from disk; the mixed batch is one load_many: 3 + 2 RAM
    # hits (promoted by the first load), the 2 after the miss read but not copied.
    stats = again.kvtier_stats()
    assert (stats["hits_disk"], stats["hits_host"]) == (10, 5)
    again.close()


def test_sglang_pool_facts_hold_for_the_stand_ins():
    # The MHA stand-in's regions (from its get_page_buffer_meta, as SGLang's)
    # are its pages: K then V for page_first, page_first_direct, page_head.
    for layout in ("page_first", "page_first_direct", "page_head"):
        pool = fakes.MHAPool(layout=layout, seed=3)
        for page in (0, 5):
            assert page_bytes(pool, page * 4) == fakes.raw(pool.page(page * 4))
    pool = fakes.MHAPool(layout="layer_first", seed=3)  # per layer K, V: not the flat order
    assert page_bytes(pool, 4) != fakes.raw(pool.page(4))
    assert sorted(page_bytes(pool, 4)) == sorted(fakes.raw(pool.page(4)))


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct", "page_head"])
def test_copying_interface_and_zero_copy_share_pages(sglang, tmp_path, layout):
    src = fakes.MHAPool(pages=8, layout=layout, seed=2)
    backend = open_backend(sglang, tmp_path, src, extra={"interface_v1": 0})
    keys = page_keys(8)
    # _generic_page_set: flat pages from get_data_page.
    assert backend.batch_set(keys, [src.get_data_page(i * 4) for i in range(8)]) is True
    # _generic_page_get: dummy flat pages, then set_from_flat_data_page.
    dst = fakes.MHAPool(pages=8, layout=layout)
    got = backend.batch_get(keys, [dst.get_dummy_flat_data_page() for _ in keys])
    assert all(g is not None for g in got)
    for i, g in enumerate(got):
        dst.set_from_flat_data_page(i * 4, g)
    assert fakes.raw(dst.kv_buffer) == fakes.raw(src.kv_buffer)
    # The zero-copy interface reads the same blocks.
    zc = fakes.MHAPool(pages=8, layout=layout)
    backend.register_mem_pool_host(zc)
    assert backend.batch_get_v1(keys, indices(8, 4)) == [True] * 8
    assert fakes.raw(zc.kv_buffer) == fakes.raw(src.kv_buffer)
    assert backend.get("d" * 64, dst.get_dummy_flat_data_page()) is None
    assert backend.set(keys[0], src.get_data_page(0)) is True
    backend.close()


@pytest.mark.parametrize("interface_v1", [0, 1])
def test_draft_pages_of_the_copying_interface_have_a_store_of_their_own(sglang, tmp_path, caplog,
                                                                        interface_v1):
    """Under speculative decoding SGLang's controller (upstream main 17313cf4,
    2026-08-20: _draft_page_set_generic / _draft_page_get_generic, for every
    backend but mooncake) stores the draft model's pages through batch_set
    and loads them through batch_get, under "<page hash>.draft", as flat
    pages of the draft host pool (another size than the target's). They went
    to the KV pages' store, which refused them: never stored, an error
    logged."""
    target = fakes.MHAPool(pages=8, seed=2)
    draft = fakes.MHAPool(pages=8, layers=1, heads=1, seed=7)  # a one-layer draft model
    hashes = page_keys(4)
    draft_keys = ["%s.draft" % h for h in hashes]
    extra = {"interface_v1": interface_v1}
    with caplog.at_level(logging.ERROR, logger="kvtier"):
        backend = open_backend(sglang, tmp_path, target, extra=extra)
        assert backend.batch_set(draft_keys, [draft.get_data_page(i * 4) for i in range(4)])
        backend.close()
        # A new backend on the folder (a restarted server): the draft pages from disk.
        backend = open_backend(sglang, tmp_path, fakes.MHAPool(pages=8), extra=extra)
        dst = fakes.MHAPool(pages=8, layers=1, heads=1)
        got = backend.batch_get(draft_keys, [dst.get_dummy_flat_data_page() for _ in draft_keys])
        assert all(g is not None for g in got)
        for i, g in enumerate(got):
            dst.set_from_flat_data_page(i * 4, g)
        for i in range(4):
            assert fakes.raw(dst.get_data_page(i * 4)) == fakes.raw(draft.get_data_page(i * 4))
    assert not [r for r in caplog.records if r.name == "kvtier"]
    # The target's pages are not the draft's, nor the other way round.
    assert backend.batch_exists(hashes) == 0
    assert backend.batch_get(["%s.draft" % h for h in page_keys(2, salt="t")],
                             [dst.get_dummy_flat_data_page()] * 2) == [None, None]
    stats = backend.kvtier_stats("draft")
    assert (stats["stores"], stats["hits_disk"]) == (0, 4)
    # A batch of both kinds, and a draft page of another size: misses, logged.
    with caplog.at_level(logging.ERROR, logger="kvtier"):
        assert backend.batch_set([hashes[0], draft_keys[1]],
                                 [target.get_data_page(0), draft.get_data_page(4)]) is False
        backend._last_log.clear()
        assert backend.batch_get(draft_keys[:1], [target.get_dummy_flat_data_page()]) == [None]
    messages = [r.getMessage() for r in caplog.records if r.name == "kvtier"]
    assert any("a batch of 1 draft and 1 other pages" in m for m in messages), messages
    assert any("a flat page has" in m for m in messages), messages
    backend.close()


def test_layer_first_keeps_one_interface(sglang, tmp_path):
    src = fakes.MHAPool(pages=4, layout="layer_first", seed=5)
    keys = page_keys(4)
    # Copying interface (interface_v1 0): flat pages, zero-copy calls refused.
    flat = open_backend(sglang, tmp_path, src, extra={"interface_v1": 0})
    assert flat.batch_set(keys, [src.get_data_page(i * 4) for i in range(4)]) is True
    assert flat.batch_get_v1(keys, indices(4, 4)) == [False] * 4
    assert flat.batch_set_v1(keys, indices(4, 4)) == [False] * 4
    dst = fakes.MHAPool(pages=4, layout="layer_first")
    got = flat.batch_get(keys, [dst.get_dummy_flat_data_page() for _ in keys])
    for i, g in enumerate(got):
        dst.set_from_flat_data_page(i * 4, g)
    assert fakes.raw(dst.kv_buffer) == fakes.raw(src.kv_buffer)
    flat.close()
    # Zero-copy (interface_v1 1): its own signature, the flat pages are not its.
    zc = open_backend(sglang, tmp_path, fakes.MHAPool(pages=4, layout="layer_first"))
    assert zc.batch_exists(keys) == 0
    assert zc.batch_get(keys, [dst.get_dummy_flat_data_page() for _ in keys]) == [None] * 4
    assert zc.batch_set_v1(keys, indices(4, 4)) == [True] * 4
    zc.close()


def test_pools_it_cannot_store_are_refused_at_registration(sglang, tmp_path):
    with pytest.raises(kvtier.InvalidArgument, match=r"kv pool MXFP8Pool .*no page regions"):
        open_backend(sglang, tmp_path, fakes.MXFP8Pool())
    with pytest.raises(kvtier.InvalidArgument, match="DeepSeek-V4"):
        open_backend(sglang, tmp_path, fakes.DeepSeekV4TokenToKVPoolHost(), is_mla_model=True)
    backend = open_backend(sglang, tmp_path, fakes.MHAPool())
    with pytest.raises(kvtier.InvalidArgument, match="DeepSeek-V4"):
        backend.register_mem_host_pool_v2(fakes.MLAPool(), sglang.PoolName.DEEPSEEK_V4_C4)
    with pytest.raises(kvtier.InvalidArgument, match="mamba pool MHAPool .*Unsupported layout"):
        bad = fakes.MHAPool()
        bad.layout = "weird"
        bad.get_page_buffer_meta = lambda idx: (_ for _ in ()).throw(ValueError(
            "Unsupported layout: weird"))
        backend.register_mem_host_pool_v2(bad, sglang.PoolName.MAMBA)
    backend.close()


def test_tp_ranks_dtypes_and_models_do_not_share(sglang, tmp_path):
    pool = fakes.MHAPool(pages=4, seed=3)
    keys = page_keys(4)
    rank0 = open_backend(sglang, tmp_path, pool, tp_rank=0, tp_size=2)
    assert all(rank0.batch_set_v1(keys, indices(4, 4)))
    rank0.close()
    for other in (dict(tp_rank=1, tp_size=2), dict(tp_rank=0, tp_size=2, pp_rank=1, pp_size=2),
                  dict(tp_rank=0, tp_size=2, model_name="other/model")):
        b = open_backend(sglang, tmp_path, fakes.MHAPool(pages=4), **other)
        assert b.batch_exists(keys) == 0, other
        b.close()
    b = open_backend(sglang, tmp_path, fakes.MHAPool(pages=4, dtype=torch.bfloat16),
                     tp_rank=0, tp_size=2)
    assert b.batch_exists(keys) == 0
    b.close()
    same = open_backend(sglang, tmp_path, fakes.MHAPool(pages=4), tp_rank=0, tp_size=2)
    assert same.batch_exists(keys) == 4
    # The shard is in the namespace (DESIGN §3), not in key_extra.
    chain = kvtier.KeyChain("Qwen/Qwen2.5-0.5B", same._stores["kv"].pages.layout, shard="tp=0/2")
    assert same._stores["kv"].chains[0].namespace == chain.namespace
    same.close()
    # MLA: the same pages on every tp rank.
    mla0 = open_backend(sglang, tmp_path, fakes.MLAPool(seed=4), tp_rank=0, tp_size=2,
                        is_mla_model=True, extra={"write_policy": "write_through", "disk_writer_threads": 0})
    assert all(mla0.batch_set_v1(keys, indices(4, 4)))
    mla1 = open_backend(sglang, tmp_path, fakes.MLAPool(), tp_rank=1, tp_size=2,
                        is_mla_model=True)
    assert mla1.batch_exists(keys) == 4
    mla0.close()
    mla1.close()


def test_split_heads_share_pages_across_tp_sizes(sglang, tmp_path):
    # tp_lcm_size 2: a TP=1 server (4 heads, split in 2) and the two ranks of a
    # TP=2 server (2 heads each) store and read the same head slices.
    keys = page_keys(3)
    whole = fakes.MHAPool(pages=4, heads=4, layout="page_head", seed=7)
    one = open_backend(sglang, tmp_path, whole, extra={"tp_lcm_size": 2,
                                                        "write_policy": "write_through", "disk_writer_threads": 0})
    assert one.config.should_split_heads and one._stores["kv"].pages.split == 2
    assert one.batch_set_v1(keys, indices(3, 4)) == [True] * 3
    for rank in (0, 1):
        half = fakes.MHAPool(pages=4, heads=2, layout="page_head")
        two = open_backend(sglang, tmp_path, half, tp_rank=rank, tp_size=2,
                           extra={"tp_lcm_size": 2, "write_policy": "write_through", "disk_writer_threads": 0})
        assert not two.config.should_split_heads
        assert two.batch_exists(keys) == 3
        assert two.batch_get_v1(keys, indices(3, 4, 1)) == [True] * 3
        for page in range(3):
            for kv in (0, 1):
                assert fakes.raw(half.kv_buffer[kv, page + 1]) == \
                    fakes.raw(whole.kv_buffer[kv, page, 2 * rank:2 * rank + 2])
        two.close()
    # And back: the TP=1 server reads what the two ranks hold.
    reader = fakes.MHAPool(pages=4, heads=4, layout="page_head")
    again = open_backend(sglang, tmp_path, reader, extra={"tp_lcm_size": 2})
    assert again.batch_get_v1(keys, indices(3, 4)) == [True] * 3
    assert fakes.raw(reader.kv_buffer[:, :3]) == fakes.raw(whole.kv_buffer[:, :3])
    again.close()
    one.close()


# --- The v2 interface: hybrid pools -------------------------------------------

def test_v2_mamba_and_sidecar_pools(sglang, tmp_path):
    kv = fakes.MHAPool(pages=16, seed=11)
    mamba, indexer = fakes.MambaPool(seed=12), fakes.MHAPool(pages=16, heads=1, seed=13)
    # A hybrid model's host pool is a HostPoolGroup: the KV pages are its anchor's.
    backend = open_backend(sglang, tmp_path, fakes.HostPoolGroup(kv, mamba=mamba))
    backend.register_mem_host_pool_v2(mamba, sglang.PoolName.MAMBA)
    backend.register_mem_host_pool_v2(indexer, sglang.PoolName.INDEXER)
    backend.register_mem_host_pool_v2(kv, sglang.PoolName.KV)  # the anchor again: same store
    keys = page_keys(10)
    T = sglang.PoolTransfer
    # Backup: the KV pages, the Mamba state of the last page, the indexer's first 6.
    assert backend.batch_set_v1(keys, indices(10, 4)) == [True] * 10
    out = backend.batch_set_v2([T(name=sglang.PoolName.MAMBA, keys=keys[-1:],
                                  host_indices=torch.tensor([3])),
                                T(name=sglang.PoolName.INDEXER, keys=keys[:6],
                                  host_indices=indices(6, 4))])
    assert out == {sglang.PoolName.MAMBA: [True], sglang.PoolName.INDEXER: [True] * 6}
    trailing = T(name=sglang.PoolName.MAMBA, keys=["x"],
                 hit_policy=sglang.PoolHitPolicy.TRAILING_PAGES)
    r = backend.batch_exists_v2(keys, [trailing])
    assert isinstance(r, sglang.PoolTransferResult)
    assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (10, {sglang.PoolName.KV: 10,
                                                             sglang.PoolName.MAMBA: 10})
    r = backend.batch_exists_v2(keys[:7], [trailing])  # no state at page 7: nothing usable
    assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (0, {sglang.PoolName.KV: 7})
    r = backend.batch_exists_v2(keys, [T(name=sglang.PoolName.INDEXER, keys=keys)])
    assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (6, {sglang.PoolName.KV: 10,
                                                            sglang.PoolName.INDEXER: 6})
    # Prefetch into fresh pools after a restart.
    backend.close()
    kv2, mamba2 = fakes.MHAPool(pages=16), fakes.MambaPool()
    indexer2 = fakes.MHAPool(pages=16, heads=1)
    again = open_backend(sglang, tmp_path, kv2)
    again.register_mem_host_pool_v2(mamba2, sglang.PoolName.MAMBA)
    again.register_mem_host_pool_v2(indexer2, sglang.PoolName.INDEXER)
    got = again.batch_get_v2([T(name=sglang.PoolName.MAMBA, keys=keys[-1:],
                                host_indices=torch.tensor([5])),
                              T(name=sglang.PoolName.INDEXER, keys=keys[:8],
                                host_indices=indices(8, 4))])
    assert got == {sglang.PoolName.MAMBA: [True],
                   sglang.PoolName.INDEXER: [True] * 6 + [False] * 2}
    assert mamba2.slot_bytes(5) == mamba.slot_bytes(3)
    assert fakes.raw(indexer2.kv_buffer[:, :24]) == fakes.raw(indexer.kv_buffer[:, :24])
    # Bad transfers are misses: an unregistered pool, indices that do not fit.
    assert again.batch_get_v2([T(name=sglang.PoolName.SWA, keys=keys[:2],
                                 host_indices=indices(2, 4))]) == {sglang.PoolName.SWA: [False] * 2}
    assert again.batch_set_v2([T(name=sglang.PoolName.MAMBA, keys=keys[:2],
                                 host_indices=torch.tensor([1]))]) == \
        {sglang.PoolName.MAMBA: [False, False]}
    again.close()


# --- clear, get_stats ------------------------------------------------------------

def test_clear_erases_this_backends_pages_in_every_tier(sglang, tmp_path):
    kv = fakes.MHAPool(pages=8, seed=21)
    backend = open_backend(sglang, tmp_path, kv, extra={"write_policy": "write_through", "disk_writer_threads": 0})
    mamba = fakes.MambaPool(seed=22)
    backend.register_mem_host_pool_v2(mamba, sglang.PoolName.MAMBA)
    other = open_backend(sglang, tmp_path, fakes.MHAPool(pages=8, dtype=torch.float32, seed=23))
    keys = page_keys(6)
    assert all(backend.batch_set_v1(keys, indices(6, 4)))
    assert all(other.batch_set_v1(keys, indices(6, 4)))
    T = sglang.PoolTransfer
    assert backend.batch_set_v2([T(name="mamba", keys=keys[-1:], host_indices=torch.tensor([0]))])
    assert backend.clear() is True
    assert backend.batch_exists(keys) == 0
    assert backend.batch_get_v2([T(name="mamba", keys=keys[-1:],
                                   host_indices=torch.tensor([1]))]) == {"mamba": [False]}
    backend.close()
    again = open_backend(sglang, tmp_path, fakes.MHAPool(pages=8))  # nothing left on disk
    assert again.batch_exists(keys) == 0
    again.close()
    assert other.batch_exists(keys) == 6  # another layout's pages are kept
    other.close()


def test_get_stats_returns_sglangs_storage_metrics(sglang, tmp_path):
    from sglang.srt.metrics.collector import StorageMetrics
    pool = fakes.MHAPool(pages=8, seed=31)
    backend = open_backend(sglang, tmp_path, pool, enable_storage_metrics=True)
    keys = page_keys(4)
    assert backend.get_stats() == StorageMetrics()
    assert all(backend.batch_set_v1(keys, indices(4, 4)))
    assert backend.batch_get_v1(keys[:3], indices(3, 4, 4)) == [True] * 3
    stats = backend.get_stats()
    assert type(stats) is StorageMetrics
    assert (stats.prefetch_pgs, stats.backup_pgs) == ([3], [4])
    assert len(stats.prefetch_bandwidth) == 1 and stats.prefetch_bandwidth[0] > 0
    assert len(stats.backup_bandwidth) == 1 and stats.backup_bandwidth[0] > 0
    assert backend.get_stats() == StorageMetrics()  # each call takes what came since the last
    backend.close()


def test_get_stats_is_none_without_sglang(tmp_path):
    sys.modules.pop(BACKEND, None)
    from kvtier.integrations._sglang_backend import SglangBackend
    config = type("Config", (), {"extra_config": {"disk_dir": None, "host_bytes": 1 << 20},
                                 "enable_storage_metrics": True})()
    backend = SglangBackend(config)
    assert backend.get_stats() is None
    backend.register_mem_pool_host(fakes.MHAPool())
    assert backend.batch_set_v1(page_keys(1), indices(1, 4)) == [True]
    assert backend.get_stats() is None
    assert backend.batch_exists_v2(page_keys(1)).kv_hit_pages == 1
    backend.close()


# --- Failures never reach SGLang's threads -------------------------------------------

class Exploding:
    """Every call raises: what SGLang's threads must never see."""

    def __init__(self, error):
        self.error = error

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise self.error
        return fail


@pytest.mark.parametrize("error", [kvtier.Internal("boom"), RuntimeError("boom"),
                                   MemoryError("boom")])
def test_no_exception_escapes_any_method(sglang, tmp_path, caplog, error):
    pool = fakes.MHAPool(pages=8, seed=41)
    backend = open_backend(sglang, tmp_path, pool)
    mamba = fakes.MambaPool()
    backend.register_mem_host_pool_v2(mamba, "mamba")
    keys = page_keys(2)
    real = {name: store.cache for name, store in backend._stores.items()}
    for store in backend._stores.values():
        store.cache = Exploding(error)
    T = sglang.PoolTransfer
    with caplog.at_level(logging.ERROR, logger="kvtier"):
        assert backend.batch_exists(keys) == 0 and backend.exists(keys[0]) is False
        assert backend.batch_get_v1(keys, indices(2, 4)) == [False, False]
        assert backend.batch_set_v1(keys, indices(2, 4)) == [False, False]
        assert backend.get(keys[0], pool.get_dummy_flat_data_page()) is None
        assert backend.batch_get(keys, [pool.get_dummy_flat_data_page()] * 2) == [None, None]
        assert backend.set(keys[0], pool.get_data_page(0)) is False
        assert backend.batch_set(keys, [pool.get_data_page(0)] * 2) is False
        r = backend.batch_exists_v2(keys, [T(name="mamba", keys=keys)])
        assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (0, {})
        assert backend.batch_get_v2([T(name="mamba", keys=keys[:1],
                                       host_indices=torch.tensor([0]))]) == {"mamba": [False]}
        assert backend.batch_set_v2([T(name="mamba", keys=keys[:1],
                                       host_indices=torch.tensor([0]))]) == {"mamba": [False]}
        assert backend.clear() is False
        backend.close()
    assert any(r.name == "kvtier" and "sglang backend" in r.getMessage() for r in caplog.records)
    for name, store in backend._stores.items():
        store.cache = real[name]
        store.cache.close()


def test_bad_calls_are_misses(sglang, tmp_path):
    pool = fakes.MHAPool(pages=4, seed=42)
    backend = open_backend(sglang, tmp_path, pool)
    keys = page_keys(2)
    assert backend.batch_set_v1(keys, indices(1, 4)) == [False, False]  # indices too few
    assert backend.batch_get_v1(keys, indices(3, 4)) == [False, False]
    assert backend.set(keys[0], torch.zeros(3, dtype=torch.float16)) is False  # wrong size
    assert backend.get(keys[0]) is None  # no target
    assert backend.batch_set(keys, None) is False
    pool.get_page_buffer_meta = lambda idx: (_ for _ in ()).throw(ValueError("pool broke"))
    assert backend.batch_set_v1(keys, indices(2, 4)) == [False, False]
    assert backend.batch_get_v1([], indices(0, 4)) == [] and backend.batch_exists([]) == 0
    unregistered = type(backend)(backend.config, {})
    assert unregistered.batch_get_v1(keys, indices(2, 4)) == [False, False]
    assert unregistered.batch_exists(keys) == 0
    backend.close()


def test_dead_redis_is_misses_not_errors(sglang, tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    pool = fakes.MHAPool(pages=8, seed=51)
    backend = open_backend(sglang, tmp_path, pool, extra={
        "remote": "redis://127.0.0.1:%d" % port, "remote_connect_timeout": "100ms",
        "remote_command_timeout": "200ms"})
    keys = page_keys(4)
    assert backend.batch_set_v1(keys, indices(4, 4)) == [True] * 4
    assert backend.batch_exists(keys) == 4  # RAM and disk still answer
    dst = fakes.MHAPool(pages=8)
    backend.register_mem_pool_host(dst)
    assert backend.batch_get_v1(keys, indices(4, 4)) == [True] * 4
    assert fakes.raw(dst.kv_buffer[:, :16]) == fakes.raw(pool.kv_buffer[:, :16])
    assert backend.batch_exists(page_keys(2, "m")) == 0  # asks the dead server: a miss
    backend.close()


def test_full_disk_drops_pages_never_raises(sglang, tmp_path):
    pool = fakes.MHAPool(pages=16, seed=61)
    probe = open_backend(sglang, tmp_path / "probe", pool, extra={"write_policy": "write_through", "disk_writer_threads": 0})
    assert probe.batch_set_v1(page_keys(1, "p"), indices(1, 4)) == [True]
    probe.close()
    block = max(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tmp_path / "probe")
                for f in fs if f.endswith(".safetensors"))
    # 3.5 block files' length: on disk, whose limit counts allocated bytes
    # (4 KiB per small file), room for 1; in RAM about 3.
    backend = open_backend(sglang, tmp_path, pool, extra={
        "disk_max_bytes": 3 * block + block // 2, "host_bytes": 3 * block + block // 2,
        "write_policy": "write_through", "disk_writer_threads": 0})
    keys = page_keys(12)
    results = backend.batch_set_v1(keys, indices(12, 4))
    assert len(results) == 12 and all(isinstance(r, bool) for r in results)
    backend.close()
    dst = fakes.MHAPool(pages=16)
    again = open_backend(sglang, tmp_path, dst)
    present = [again.exists(k) for k in keys]
    assert sum(present) <= 3 and present[-1]  # the newest pages stayed, the old ones went
    first = present.index(True)
    assert all(present[first:])
    n = 12 - first
    assert again.batch_get_v1(keys[first:], indices(n, 4)) == [True] * n
    assert fakes.raw(dst.kv_buffer[:, :4 * n]) == fakes.raw(pool.kv_buffer[:, 4 * first:48])
    assert again.batch_exists(keys) == 0  # the leading page is gone: the engine recomputes
    again.close()


def test_real_enospc_drops_pages_never_raises(sglang, tmp_path, small_disk, caplog):
    """A disk that is really full (ENOSPC from the file system, not a
    configured limit): the backup thread's batch_set_v1 still returns a
    bool per page, the disk tier says why in the log, a restarted server
    finds none of those pages (SGLang recomputes), and with room again the
    same pages are stored and read back byte for byte."""
    caplog.set_level(logging.WARNING, logger="kvtier")
    pool = fakes.MHAPool(pages=16, seed=67)
    extra = {"disk_dir": str(small_disk / "kv"), "write_policy": "write_through",
             "disk_writer_threads": 0, "host_bytes": 1 << 16}
    backend = open_backend(sglang, tmp_path, pool, extra=extra)
    fill_up(small_disk)
    keys = page_keys(8, "f")
    results = backend.batch_set_v1(keys, indices(8, 4))
    assert len(results) == 8 and all(isinstance(r, bool) for r in results)
    backend.close()
    assert any("no space left for a block file" in r.getMessage()
               or "exceeds the disk tier's effective limit" in r.getMessage()
               for r in caplog.records)
    os.remove(small_disk / "filler")  # room again
    again = open_backend(sglang, tmp_path, pool, extra=extra)
    assert again.batch_exists(keys) == 0  # none reached the disk: SGLang recomputes
    assert again.batch_set_v1(keys, indices(8, 4)) == [True] * 8
    again.close()
    dst = fakes.MHAPool(pages=16)
    third = open_backend(sglang, tmp_path, dst, extra=extra)
    assert third.batch_exists(keys) == 8  # on disk now
    assert third.batch_get_v1(keys, indices(8, 4, first=8)) == [True] * 8
    assert fakes.raw(dst.kv_buffer[:, 32:64]) == fakes.raw(pool.kv_buffer[:, :32])
    assert not dst.kv_buffer[:, :32].any()
    third.close()


def test_damaged_block_is_a_miss(sglang, tmp_path):
    pool = fakes.MHAPool(pages=8, seed=71)
    backend = open_backend(sglang, tmp_path, pool, extra={"write_policy": "write_through", "disk_writer_threads": 0})
    keys = page_keys(4)
    assert all(backend.batch_set_v1(keys, indices(4, 4)))
    victim = backend.kvtier_key(keys[1]).hex()
    backend.close()
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "kvtier") for f in fs
             if victim in f]
    assert len(files) == 1
    with open(files[0], "r+b") as f:  # flip one payload byte
        f.seek(-7, os.SEEK_END)
        b = f.read(1)
        f.seek(-7, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x40]))
    dst = fakes.MHAPool(pages=8)
    again = open_backend(sglang, tmp_path, dst)
    assert again.batch_get_v1(keys, indices(4, 4)) == [True, False, False, False]
    assert fakes.raw(dst.kv_buffer[:, :4]) == fakes.raw(pool.kv_buffer[:, :4])
    assert not dst.kv_buffer[:, 4:].any()  # nothing of the damaged page (or later) written
    assert again.batch_exists(keys) == 1  # found damaged, dropped: the engine recomputes it
    again.close()


def test_controller_threads_concurrently(sglang, tmp_path):
    import threading
    src = fakes.MHAPool(pages=64, seed=81)
    backend = open_backend(sglang, tmp_path, src, extra={"host_bytes": 4 << 20},
                           enable_storage_metrics=True)
    keys = page_keys(32)
    errors = []

    def backup():  # backup thread: pages 0..31, in batches of 8
        for start in range(0, 32, 8):
            if backend.batch_set_v1(keys[start:start + 8], indices(8, 4, start)) != [True] * 8:
                errors.append("set %d" % start)

    def prefetch():  # prefetch + prefetch-io threads: what is there, into pages 32..
        for _ in range(30):
            n = backend.batch_exists(keys)
            if backend.batch_get_v1(keys[:n], indices(n, 4, 32)) != [True] * n:
                errors.append("get_v1 %d" % n)
            for i in range(n):
                if page_bytes(src, (32 + i) * 4) != page_bytes(src, i * 4):
                    errors.append("bytes of page %d" % i)

    def copying_reader():  # another server's copying path on the same cache
        for _ in range(30):
            n = backend.batch_exists(keys)
            got = backend.batch_get(keys[:n], [src.get_dummy_flat_data_page() for _ in range(n)])
            for i, page in enumerate(got):
                if page is None or fakes.raw(page) != fakes.raw(src.get_data_page(i * 4)):
                    errors.append("batch_get page %d" % i)

    def scheduler():
        for _ in range(30):
            backend.get_stats()

    threads = [threading.Thread(target=f) for f in (backup, prefetch, copying_reader, scheduler)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert backend.batch_exists(keys) == 32
    dst = fakes.MHAPool(pages=64)
    backend.register_mem_pool_host(dst)
    assert backend.batch_get_v1(keys, indices(32, 4)) == [True] * 32
    assert fakes.raw(dst.kv_buffer[:, :128]) == fakes.raw(src.kv_buffer[:, :128])
    backend.close()


# --- The extra config: kvtier's options by their names --------------------------------

def test_extra_config_goes_through_kvtier_options(sglang, tmp_path, monkeypatch):
    for extra, needle in (({"disk_max_byte": 1}, "did you mean 'disk_max_bytes'"),
                          ({"write_policy": "sometimes"}, "write_policy"),
                          ({"host_bytes": -1}, "host_bytes"),
                          ({"layout": "tiny"}, "layout: set by the backend"),
                          ({"block_tokens": 4}, "block_tokens: set by the backend"),
                          ({"key_shard": "tp=0/2"}, "key_shard: set by the backend"),
                          ({"model_id": "a"}, "model_id")):
        with pytest.raises(kvtier.InvalidArgument, match=needle):
            open_backend(sglang, tmp_path, None, extra=extra)
    pool = fakes.MHAPool(pages=4, seed=3)
    keys = page_keys(4)
    backend = open_backend(sglang, tmp_path, pool, extra={
        "write_policy": "write_through", "disk_writer_threads": 0, "disk_durability": "fsync", "disk_max_bytes": "64MiB",
        "key_model_id": "other-model", "key_extra": "x", "host_bytes": "1MiB"})
    assert backend.model_id == "other-model"
    assert all(backend.batch_set_v1(keys, indices(4, 4)))
    assert backend.kvtier_stats()["disk"]["saves"] == 4  # written through, no flush
    plain = open_backend(sglang, tmp_path, fakes.MHAPool(pages=4), extra={
        "key_model_id": "other-model"})
    assert plain.batch_exists(keys) == 0  # key_extra is in the namespace
    plain.close()
    backend.close()
    # Without disk_dir: a per-user folder (0700), not /tmp.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    extra = extra_config(tmp_path)
    del extra["disk_dir"]
    cfg = fakes.make_config(sglang, extra)
    backend = fakes.create_dynamic(sglang, cfg, fakes.MHAPool(pages=4))
    assert backend.disk_dir == str(tmp_path / "xdg" / "kvtier" / "sglang")
    assert os.stat(backend.disk_dir).st_mode & 0o777 == 0o700
    backend.close()
    backend = open_backend(sglang, tmp_path, fakes.MHAPool(pages=4), extra={"disk_dir": None})
    assert backend.kvtier_stats().get("disk") is None
    backend.close()


# --- With the server option: a client of `kvtier serve` (docs/server.md) --------------

# Process A: SGLang's backend over its own host pool (seed 3) backs up pages
# 2..7 under six page keys through the daemon.
SERVED_WRITER = """
import sys
sys.path.insert(0, {here!r})
import torch
import sglang_fakes as fakes
storage, _ = fakes.install()
extra = {{"backend_name": "kvtier", "module_path": "kvtier.integrations.sglang",
          "class_name": "KvtierHiCacheStorage", "interface_v1": 1, "server": {server!r}}}
backend = fakes.create_dynamic(storage, fakes.make_config(storage, extra),
                               fakes.MHAPool(pages=8, seed=3))
keys = ["s%063d" % i for i in range(6)]
stored = backend.batch_set_v1(keys, torch.arange(8, 32)).count(True)
stats = backend.kvtier_stats()
print(stored, stats["stores"], stats["bytes_stored"])
backend.close()
"""


def serve_for_the_kv_pool(cli, tmp_path, pool):
    """`kvtier serve` with the layout of the pool's pages and no tier below its
    arena (a hit can only come from the arena); its "unix:PATH"."""
    from kvtier.integrations._sglang_pages import PoolPages
    layout = tmp_path / "layout.json"
    layout.write_text(PoolPages("kv", pool, 1).layout.to_json())
    sock = tmp_path / "s.sock"
    return start_daemon(cli, sock, tmp_path, layout=layout), "unix:" + str(sock)


def test_a_second_process_loads_the_first_ones_pages_from_the_daemons_arena(sglang, cli,
                                                                           tmp_path):
    src = fakes.MHAPool(pages=8, seed=3)  # process A's pool, made again here
    daemon, server = serve_for_the_kv_pool(cli, tmp_path, src)
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run([sys.executable, "-c", SERVED_WRITER.format(here=here,
                                                                         server=server)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        from kvtier.integrations._sglang_pages import PoolPages
        block = PoolPages("kv", src, 1).layout.block_file_bytes
        assert out.stdout.split() == ["6", "6", str(6 * block)]
        # Process B (this one: not a fork of A), an empty pool: pages 0..5.
        dst = fakes.MHAPool(pages=8)
        backend = open_backend(sglang, tmp_path, dst, extra={"server": server})
        assert backend.disk_dir is None and "host_bytes" not in backend.options
        keys = page_keys(6)
        assert backend.batch_exists(keys + ["0" * 64]) == 6
        assert backend.batch_get_v1(keys, indices(6, 4)) == [True] * 6
        for i in range(6):
            assert page_bytes(dst, i * 4) == page_bytes(src, (2 + i) * 4)
        stats = backend.kvtier_stats()
        assert (stats["lookups"], stats["hits_host"], stats["misses"]) == (6, 6, 0)
        assert (stats["bytes_loaded_host"], stats["bytes_stored"]) == (6 * block, 0)
        backend.close()
    finally:
        daemon.terminate()
        out, _ = daemon.communicate(timeout=120)
    # No tier below the arena: A's 6 blocks were there until the end.
    assert out.strip() == "kvtier serve: wrote 0 blocks to the tiers below (6 dropped)"


def test_a_daemon_killed_before_the_second_backend_is_misses_not_exceptions(sglang, cli,
                                                                             tmp_path, caplog):
    # Backend 1 stores (a second process costs a torch import, and the test
    # above has one); the daemon is killed; backend 2, a new client, finds
    # nothing and raises nothing into SGLang's threads.
    src = fakes.MHAPool(pages=8, seed=4)
    daemon, server = serve_for_the_kv_pool(cli, tmp_path, src)
    keys = page_keys(4)
    try:
        first = open_backend(sglang, tmp_path, src, extra={"server": server})
        assert first.batch_set_v1(keys, indices(4, 4)) == [True] * 4
        assert first.kvtier_stats()["stores"] == 4
        first.close()
    finally:
        daemon.kill()
        daemon.wait(120)
    caplog.set_level("WARNING", logger="kvtier")
    dst = fakes.MHAPool(pages=8)
    backend = open_backend(sglang, tmp_path, dst, extra={"server": server})
    assert "does not answer" in caplog.text  # at registration: logged, not raised
    assert backend.batch_exists(keys) == 0
    assert backend.exists(keys[0]) is False
    assert backend.batch_get_v1(keys, indices(4, 4)) == [False] * 4
    assert backend.batch_set_v1(page_keys(2, "t"), indices(2, 4)) == [False] * 2
    assert page_bytes(dst, 0) == bytes(len(page_bytes(dst, 0)))
    stats = backend.kvtier_stats()
    assert (stats["lookups"], stats["misses"], stats["hits_host"]) == (4, 4, 0)
    assert (stats["stores"], stats["store_errors"]) == (0, 2)
    backend.close()


def test_with_server_the_daemons_options_and_another_layout_are_refused(sglang, cli, tmp_path):
    server = "unix:" + str(tmp_path / "s.sock")
    for name, value in (("host_bytes", "1GiB"), ("disk_dir", str(tmp_path / "d")),
                        ("remote", "redis://127.0.0.1:1")):
        with pytest.raises(kvtier.InvalidArgument, match="sglang: %s: not with server" % name):
            open_backend(sglang, tmp_path, None, extra={"server": server, name: value})
    daemon = start_daemon(cli, tmp_path / "s.sock", tmp_path)  # serves "tiny"
    try:
        pool = fakes.MHAPool(pages=4)
        with pytest.raises(kvtier.FailedPrecondition, match="does not serve this layout") as e:
            open_backend(sglang, tmp_path, pool, extra={"server": server})
        from kvtier.integrations._sglang_pages import PoolPages
        assert str(e.value).endswith(_served.layout_json(PoolPages("kv", pool, 1).layout))
    finally:
        daemon.kill()
        daemon.wait(120)


def test_with_a_daemon_of_the_kv_layout_draft_pages_are_misses_asked_once(sglang, cli, tmp_path,
                                                                         caplog, monkeypatch):
    """A daemon serves one layout, the target's: the draft pages' cache is
    refused when first opened, and their later calls are misses without
    asking the daemon again (each asking opens a connection)."""
    target = fakes.MHAPool(pages=8, seed=3)
    draft = fakes.MHAPool(pages=8, layers=1, heads=1, seed=4)
    daemon, server = serve_for_the_kv_pool(cli, tmp_path, target)
    try:
        backend = open_backend(sglang, tmp_path, target, extra={"server": server})
        opened = []
        real = backend._open_cache
        monkeypatch.setattr(backend, "_open_cache",
                            lambda layout: opened.append(layout) or real(layout))
        keys = ["%s.draft" % k for k in page_keys(2)]
        with caplog.at_level(logging.ERROR, logger="kvtier"):
            assert backend.batch_set(keys, [draft.get_data_page(i * 4) for i in range(2)]) is False
            backend._last_log.clear()
            assert backend.batch_get(keys, [draft.get_dummy_flat_data_page()] * 2) == [None] * 2
        assert len(opened) == 1
        messages = [r.getMessage() for r in caplog.records if r.name == "kvtier"]
        assert len(messages) == 2, messages
        assert all("FailedPrecondition" in m and "sglang_draft_flat_float16_flat" in m
                   for m in messages), messages
        # The target's pages still go to the daemon.
        assert backend.batch_set_v1(page_keys(2), indices(2, 4)) == [True, True]
        backend.close()
    finally:
        daemon.terminate()
        daemon.communicate(timeout=120)
