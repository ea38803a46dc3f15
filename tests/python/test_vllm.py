"""kvtier.integrations.vllm driven as vLLM's OffloadingConnector drives it.

vLLM is not installed here: vllm_harness registers stand-in `vllm` modules
written from the signatures and call shapes read from vLLM's source
(vllm_harness.SOURCES names path and commit of each; TABLE, FIELDS, CALLS and
FACTS are the facts). These tests fail when the stand-ins or the backend
differ from that table, then drive the backend through the connector's calls
with CPU torch tensors in vLLM's FlashAttention shape: threads, a dead Redis,
a full disk and damaged blocks.
"""

import glob
import hashlib
import importlib
import inspect
import logging
import os
import re
import subprocess
import sys

import pytest
import torch

import kvtier
import vllm_harness as vh
from conftest import fill_up

kv = vh.install_fake_vllm()

LAYERS, HEADS, HEAD_DIM, BLOCK, NUM_BLOCKS = 2, 2, 8, 4, 64


@pytest.fixture(autouse=True)
def hash_seed(monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    yield
    for cache in list(kv._caches.values()):  # each test starts with empty RAM tiers
        cache.close()
    kv._caches.clear()
    kv.PINS.clear()  # and no block promised by another test


def make_spec(tmp_path, extra=None, *, dtype=torch.float16, **cfg):
    extra = dict({"spec_name": "KvtierOffloadingSpec",
                  "spec_module_path": "kvtier.integrations.vllm",
                  "disk_dir": str(tmp_path / "kv"), "host_bytes": 1 << 22}, **(extra or {}))
    config = vh.vllm_config(extra, block_size=BLOCK, **cfg)
    kvcc = vh.kv_cache_config(LAYERS, NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM, dtype)
    return vh.OffloadingSpecFactory.create_spec(config, kvcc), kvcc


def make_connector(tmp_path, extra=None, seed=0, dtype=torch.float16, **cfg):
    spec, kvcc = make_spec(tmp_path, extra, dtype=dtype, **cfg)
    caches = vh.torch_kv_caches(kvcc.kv_cache_groups[0].layer_names, NUM_BLOCKS, BLOCK, HEADS,
                                HEAD_DIM, dtype, seed=seed)
    return vh.Connector(spec, caches), caches


def gpu_bytes(caches, block_ids):
    """The bytes vLLM's GPU blocks hold, per layer K then V."""
    return b"".join(t[kv_].index_select(0, torch.tensor(block_ids)).numpy().tobytes()
                    for t in caches.values() for kv_ in (0, 1))


# --- The table ------------------------------------------------------------------

def _params(fn, skip_first=True):
    params = list(inspect.signature(fn).parameters.values())
    if skip_first and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return tuple((p.name, vh.REQUIRED if p.default is p.empty else p.default) for p in params)


def test_sources_name_commits():
    for path, commit in vh.SOURCES.values():
        assert path.startswith("vllm/") and path.endswith(".py")
        assert re.fullmatch(r"[0-9a-f]{40}", commit)
    used = {entry[3] for entry in vh.TABLE.values()} | {f[1] for f in vh.FIELDS.values()} \
        | {c[2] for calls in vh.CALLS.values() for c in calls} | {f[0] for f in vh.FACTS}
    assert used <= set(vh.SOURCES)


def test_standins_follow_the_table():
    for (module, cls, method), (params, static, abstract, _) in vh.TABLE.items():
        klass = getattr(sys.modules[module], cls)
        fn = klass.__dict__[method]
        assert isinstance(fn, staticmethod) == static, (cls, method)
        assert getattr(fn, "__isabstractmethod__", False) == abstract, (cls, method)
        assert _params(getattr(klass, method), not static) == params, (cls, method)
    for (module, cls), (fields, _) in vh.FIELDS.items():
        import dataclasses
        got = tuple((f.name, vh.REQUIRED if f.default is dataclasses.MISSING else f.default)
                    for f in dataclasses.fields(getattr(sys.modules[module], cls)))
        assert got == fields, cls


# The backend's class for each vLLM class, and where its signature may differ
# from the declared one (to take every recorded call shape).
BACKEND = {"LoadStoreSpec": "KvtierLoadStoreSpec", "OffloadingManager": "KvtierOffloadingManager",
           "OffloadingHandler": "KvtierOffloadingHandler", "OffloadingSpec": "KvtierOffloadingSpec"}
WIDENED = {
    ("OffloadingSpec", "__init__"): (("vllm_config", vh.REQUIRED), ("kv_cache_config", None)),
    ("OffloadingSpec", "get_handlers"): (("kv_caches", vh.REQUIRED), ("attn_backends", None)),
}


@pytest.mark.parametrize("backend_module", ["fake", "standalone"])
def test_backend_follows_the_table(backend_module):
    # "standalone": the module's own stand-in bases (used without vLLM).
    for (module, cls, method), (params, static, _, _) in vh.TABLE.items():
        mine = getattr(kv, BACKEND[cls] if backend_module == "fake" else "_" + cls)
        want = WIDENED.get((cls, method), params)
        assert isinstance(inspect.getattr_static(mine, method), staticmethod) == static
        assert _params(getattr(mine, method), not static) == want, (cls, method)
        base = getattr(sys.modules[module], cls)
        if backend_module == "fake":
            assert issubclass(mine, base), cls
    for (cls, method), shapes in vh.CALLS.items():
        fn = getattr(getattr(kv, BACKEND[cls]), method)
        for positional, keywords, _, _ in shapes:
            args = [None] * (positional + (0 if method == "__init__" else 1))
            inspect.signature(fn).bind(*args, **{k: None for k in keywords})
    for (module, cls), (fields, _) in vh.FIELDS.items():
        assert getattr(kv, cls) is getattr(sys.modules[module], cls)
        import dataclasses
        got = tuple(f.name for f in dataclasses.fields(getattr(kv, "_" + cls)))
        assert got == tuple(name for name, _ in fields)
    assert kv.KvtierLoadStoreSpec.medium() == "KVTIER"
    assert kv.GPULoadStoreSpec is vh.installed("vllm.v1.kv_offload.mediums", "GPULoadStoreSpec")


def test_without_vllm_the_module_stands_alone(tmp_path):
    code = ("import sys, kvtier.integrations.vllm as kv\n"
            "assert 'vllm' not in sys.modules\n"
            "assert kv.OffloadingSpecBase is kv._OffloadingSpec\n"
            "assert kv.OffloadingManagerBase is kv._OffloadingManager\n"
            "assert kv.KvtierLoadStoreSpec.medium() == 'KVTIER'\n"
            "print(kv.PrepareStoreOutput.__name__, kv.TransferResult)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=vh.seed_env(), check=True)
    assert out.stdout.split() == ["_PrepareStoreOutput", "None"]


# --- Configuration --------------------------------------------------------------

def test_factory_builds_the_spec(tmp_path):
    spec, _ = make_spec(tmp_path, {"write_policy": "write_through"})
    assert isinstance(spec, kv.KvtierOffloadingSpec)
    assert spec.offloaded_block_size == BLOCK and spec.gpu_block_size in (BLOCK, (BLOCK,))
    assert spec.options["write_policy"] == "write_through"
    assert "spec_name" not in spec.options and "spec_module_path" not in spec.options
    with pytest.raises(kvtier.InvalidArgument, match="disk_dirr|disk_dir"):
        make_spec(tmp_path, {"disk_dirr": "x"})
    for name in ("layout", "block_tokens", "key_extra"):
        with pytest.raises(kvtier.InvalidArgument, match=name):
            make_spec(tmp_path, {name: "x"})


def test_unreproducible_hashing_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONHASHSEED")
    with pytest.raises(kvtier.FailedPrecondition, match="PYTHONHASHSEED is not set"):
        make_spec(tmp_path)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    for algo in ("builtin", "xxhash", "sha256_cbor_64bit"):
        with pytest.raises(kvtier.FailedPrecondition, match="is not SHA-256"):
            make_spec(tmp_path, algo=algo)
    assert make_spec(tmp_path, algo="sha256_cbor")[0].plan.hash_algo == "sha256_cbor"


def test_unsupported_configurations_are_refused(tmp_path):
    with pytest.raises(kvtier.FailedPrecondition, match="pipeline_parallel_size"):
        make_spec(tmp_path, pp=2)
    spec, kvcc = make_spec(tmp_path)
    spec.vllm_config.parallel_config.decode_context_parallel_size = 2
    with pytest.raises(kvtier.FailedPrecondition, match="decode_context_parallel_size"):
        kv.KvtierOffloadingSpec(spec.vllm_config, kvcc)
    spec.vllm_config.parallel_config.decode_context_parallel_size = 1
    with pytest.raises(kvtier.FailedPrecondition, match="kv_cache_config"):
        kv.KvtierOffloadingSpec(spec.vllm_config, None)
    with pytest.raises(kvtier.InvalidArgument, match="not a multiple"):  # before vLLM's assert
        make_spec(tmp_path, {"block_size": 6})
    spec, kvcc = make_spec(tmp_path)
    with pytest.raises(kvtier.InvalidArgument, match="not a multiple"):
        kv.BlockPlan(spec.vllm_config, kvcc, {"block_size": 6}, spec.options, "sha256")
    config = vh.vllm_config({"spec_name": "KvtierOffloadingSpec",
                             "spec_module_path": "kvtier.integrations.vllm",
                             "disk_dir": str(tmp_path)}, block_size=BLOCK)
    kvcc = vh.kv_cache_config(LAYERS, NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM, torch.float16)
    kvcc.kv_cache_groups.append(kvcc.kv_cache_groups[0])
    with pytest.raises(kvtier.FailedPrecondition, match="2 KV cache groups"):
        kv.KvtierOffloadingSpec(config, kvcc)
    spec, kvcc = make_spec(tmp_path)
    caches = vh.torch_kv_caches(["ALL_LAYERS"], NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM,
                                torch.float16)
    with pytest.raises(kvtier.FailedPrecondition, match="cross-layer"):
        list(spec.get_handlers(caches, {}))


def test_keys_hold_model_layout_and_shard(tmp_path):
    h = vh.block_hashes(list(range(BLOCK)), BLOCK)[0]
    spec, _ = make_spec(tmp_path, tp=2)
    plan = spec.plan
    ns0 = kvtier.KeyChain("numpy-llama-seed1", plan.layout, extra=b"vllm:sha256",
                          shard="tp=0/2").namespace
    assert plan.key_chain(0).namespace == ns0
    assert kv.block_key(ns0, h) == hashlib.sha256(b"kvtier-vllm-block-v1\0" + ns0 + h).digest()
    assert spec.get_manager().namespaces == [plan.key_chain(0).namespace,
                                             plan.key_chain(1).namespace]
    keys = {kv.block_key(plan.key_chain(r).namespace, h) for r in (0, 1)}
    keys.add(kv.block_key(make_spec(tmp_path, tp=2, use_mla=True)[0].plan.key_chain(1)
                          .namespace, h))
    keys.add(kv.block_key(make_spec(tmp_path, dtype=torch.bfloat16)[0].plan.key_chain(0)
                          .namespace, h))
    keys.add(kv.block_key(make_spec(tmp_path, model="other")[0].plan.key_chain(0).namespace, h))
    keys.add(kv.block_key(make_spec(tmp_path, algo="sha256_cbor")[0].plan.key_chain(0)
                          .namespace, h))
    keys.add(kv.block_key(make_spec(tmp_path, {"key_salt": "tenant"})[0].plan.key_chain(0)
                          .namespace, h))
    assert len(keys) == 7
    mla = make_spec(tmp_path, tp=2, use_mla=True)[0]
    assert mla.plan.shard(1) == "" and mla.get_manager().namespaces == \
        [mla.plan.key_chain(0).namespace]
    # A vLLM of the NamedTuple era (hash_value: int) maps to the same bytes.
    old = type("BlockHash", (), {"hash_value": int.from_bytes(h, "big")})()
    assert kv.hash_bytes(old) == h
    with pytest.raises(kvtier.InvalidArgument):
        kv.hash_bytes("abc")


# --- Driven as the connector drives it -----------------------------------------

def test_store_then_load_as_vllm(tmp_path):
    conn, caches = make_connector(tmp_path)
    tokens = list(range(5 * BLOCK + 2))
    hashes = vh.block_hashes(tokens, BLOCK)
    assert conn.matched_blocks(hashes) == (0, 0)
    src_ids = [3, 9, 4, 20, 7]
    assert conn.store(hashes, 0, src_ids) == 5
    want = gpu_bytes(caches, src_ids)
    events = conn.events()
    assert [(sorted(e.block_hashes), e.block_size, e.medium, e.removed) for e in events] == \
        [(sorted(hashes), BLOCK, "KVTIER", False)]
    assert conn.store(hashes, 0, src_ids) == 0  # already held: nothing to store
    assert conn.matched_blocks(hashes) == (0, 5)
    dst_ids = [40, 41, 42, 43, 44]
    assert conn.load(hashes, 0, 5, dst_ids)
    assert gpu_bytes(caches, dst_ids) == want
    # Two blocks already in vLLM's GPU prefix cache: the rest is loaded.
    dst2 = [50, 51, 52, 53, 54]
    for t in caches.values():
        t[:, dst2] = 0
    start, hits = conn.matched_blocks(hashes, gpu_computed_blocks=2)
    assert (start, hits) == (2, 3)
    assert conn.load(hashes, start, hits, dst2, gpu_computed_blocks=2)
    assert gpu_bytes(caches, dst2[2:]) == gpu_bytes(caches, dst_ids[2:])
    assert gpu_bytes(caches, dst2[:2]) == bytes(len(want) // 5 * 2)
    assert conn.failed == []


def test_offloaded_blocks_of_several_gpu_blocks(tmp_path):
    conn, caches = make_connector(tmp_path, {"block_size": 2 * BLOCK})
    assert conn.factor == 2 and conn.spec.plan.block_tokens == 2 * BLOCK
    tokens = list(range(100, 100 + 6 * BLOCK))
    hashes = vh.block_hashes(tokens, BLOCK)  # 6 GPU blocks = 3 kvtier blocks
    src = [1, 2, 3, 4, 5, 6]
    assert conn.store(hashes, 0, src) == 3
    assert sorted(conn.events()[0].block_hashes) == sorted(hashes[1::2])
    # The GPU cache holds the first GPU block: the load starts inside block 0.
    dst = [30, 31, 32, 33, 34, 35]
    start, hits = conn.matched_blocks(hashes, gpu_computed_blocks=1)
    assert (start, hits) == (0, 3)
    assert conn.load(hashes, start, hits, dst, gpu_computed_blocks=1)
    assert gpu_bytes(caches, dst[1:]) == gpu_bytes(caches, src[1:])


def test_worker_threads_concurrently(tmp_path):
    conn, caches = make_connector(tmp_path)
    handler = next(iter(conn.worker.handlers))
    requests = [vh.block_hashes([r] * 3 * BLOCK, BLOCK) for r in range(6)]
    outs = [conn.manager.prepare_store(h) for h in requests]

    def store(i):
        ids = [3 * i, 3 * i + 1, 3 * i + 2]
        assert handler.transfer_async(100 + i, (vh.gpu_spec(ids), outs[i].store_spec))

    assert vh.run_threads(6, store) == []
    handler.wait(set(range(100, 106)))
    assert sorted(vh.pairs(handler.get_finished())) == [(100 + i, True) for i in range(6)]
    for h in requests:
        conn.manager.complete_store(h)
    assert [conn.manager.lookup(h) for h in requests] == [3] * 6

    def load(i):
        ids = [30 + 3 * i, 31 + 3 * i, 32 + 3 * i]
        spec = conn.manager.prepare_load(requests[i])
        assert handler.transfer_async(200 + i, (spec, vh.gpu_spec(ids)))

    assert vh.run_threads(6, load) == []
    handler.wait(set(range(200, 206)))
    assert sorted(vh.pairs(handler.get_finished())) == [(200 + i, True) for i in range(6)]
    for i in range(6):
        assert gpu_bytes(caches, [30 + 3 * i + j for j in range(3)]) == \
            gpu_bytes(caches, [3 * i + j for j in range(3)])


def test_restart_and_another_process_find_the_blocks(tmp_path):
    conn, caches = make_connector(tmp_path)
    hashes = vh.block_hashes(list(range(4 * BLOCK)), BLOCK)
    assert conn.store(hashes, 0, [0, 1, 2, 3]) == 4
    want = gpu_bytes(caches, [0, 1, 2, 3])
    for cache in kv._caches.values():
        cache.close()
    kv._caches.clear()
    conn2, caches2 = make_connector(tmp_path, seed=1)  # a restart: new RAM, other GPU bytes
    assert conn2.matched_blocks(hashes) == (0, 4)
    assert conn2.load(hashes, 0, 4, [10, 11, 12, 13])
    assert gpu_bytes(caches2, [10, 11, 12, 13]) == want
    # Found, not stored by this process: announced once, as stored in KVTIER.
    assert [(e.block_hashes, e.removed, e.medium) for e in conn2.events()] == \
        [(hashes, False, "KVTIER")]
    assert conn2.matched_blocks(hashes) == (0, 4) and conn2.events() == []
    conn2.manager.cache.erase(kv.block_key(conn2.manager.namespaces[0], hashes[2]))
    assert conn2.matched_blocks(hashes) == (0, 2)
    assert [(e.block_hashes, e.removed) for e in conn2.events()] == [([hashes[2]], True)]
    conn2.store(hashes, 2, [0, 1, 2, 3])
    assert [(e.block_hashes, e.removed) for e in conn2.events()] == [([hashes[2]], False)]
    # Another process with the same PYTHONHASHSEED computes the same hashes.
    code = ("import vllm_harness as vh; print(vh.block_hashes(list(range(%d)), %d)[-1].hex())"
            % (4 * BLOCK, BLOCK))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(__file__), env=vh.seed_env(), check=True)
    assert out.stdout.strip() == hashes[-1].hex()


def test_dead_redis_is_misses_not_errors(tmp_path, caplog):
    extra = {"remote": "redis://127.0.0.1:1", "remote_command_timeout": "200ms",
             "disk_dir": None}
    conn, caches = make_connector(tmp_path, extra)
    hashes = vh.block_hashes(list(range(3 * BLOCK)), BLOCK)
    assert conn.store(hashes, 0, [0, 1, 2]) == 3  # RAM keeps them
    assert conn.matched_blocks(hashes) == (0, 3)
    for cache in kv._caches.values():
        cache.close()
    kv._caches.clear()
    conn2, _ = make_connector(tmp_path, extra)  # nothing but the dead server
    assert conn2.matched_blocks(hashes) == (0, 0)
    assert conn2.store(hashes, 0, [0, 1, 2]) == 3
    assert conn2.failed == [] and conn.failed == []


def test_full_disk_is_a_logged_later_miss(tmp_path, small_disk, caplog):
    caplog.set_level(logging.WARNING, logger="kvtier")
    extra = {"disk_dir": str(small_disk / "kv"), "write_policy": "write_through",
             "host_bytes": 1 << 22}
    conn, caches = make_connector(tmp_path, extra)
    fill_up(small_disk)
    hashes = vh.block_hashes(list(range(8 * BLOCK)), BLOCK)
    assert conn.store(hashes, 0, list(range(8))) == 8  # the job finishes: vLLM asserts it
    assert conn.failed == []
    for cache in kv._caches.values():
        cache.flush()
        cache.close()
    kv._caches.clear()
    os.remove(small_disk / "filler")  # room again, for the restarted cache's index
    conn2, caches2 = make_connector(tmp_path, extra, seed=3)
    start, hits = conn2.matched_blocks(hashes)
    assert (start, hits) == (0, 0)  # the disk had room for none: misses, vLLM computes
    # kvtier's disk tier says so (ENOSPC on the write, or its free-space check first).
    assert any("no space left for a block file" in r.getMessage()
               or "exceeds the disk tier's effective limit of 0 bytes" in r.getMessage()
               for r in caplog.records)
    # With room again, the same engine stores and finds them.
    assert conn2.store(hashes, 0, list(range(8))) == 8
    assert conn2.matched_blocks(hashes) == (0, 8)
    assert conn2.load(hashes, 0, 8, list(range(20, 28)))
    assert gpu_bytes(caches2, list(range(20, 28))) == gpu_bytes(caches2, list(range(8)))


def _block_files(folder):
    return glob.glob(os.path.join(folder, "**", "*.safetensors"), recursive=True)


def test_damaged_block_is_a_miss_then_recomputed(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="kvtier")
    extra = {"write_policy": "write_through"}
    conn, caches = make_connector(tmp_path, extra)
    hashes = vh.block_hashes(list(range(3 * BLOCK)), BLOCK)
    assert conn.store(hashes, 0, [0, 1, 2]) == 3
    for cache in kv._caches.values():
        cache.close()
    kv._caches.clear()
    files = sorted(_block_files(str(tmp_path / "kv")))
    assert len(files) == 3
    for path in files:  # damage every block's payload
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 100)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
    conn2, caches2 = make_connector(tmp_path, extra, seed=5)
    # A worker with a cache of its own (another process) that meets the damage
    # at load: a failed job, nothing written.
    plan = conn2.spec.plan
    worker = kv.KvtierOffloadingHandler(kvtier.Cache(plan.layout, **conn2.spec.options), plan,
                                        plan.key_chain(0).namespace,
                                        kv.gpu_regions(caches2, plan))
    before = gpu_bytes(caches2, [30, 31, 32])
    assert worker.transfer_async(5, (kv.KvtierLoadStoreSpec(hashes),
                                     vh.gpu_spec([30, 31, 32])))
    worker.wait({5})
    assert vh.pairs(worker.get_finished()) == [(5, False)]
    assert gpu_bytes(caches2, [30, 31, 32]) == before
    assert any("missing or damaged at load" in r.getMessage() for r in caplog.records)
    worker.shutdown()
    worker.cache.close()
    assert conn2.matched_blocks(hashes) == (0, 0)  # the scheduler: a miss, vLLM computes
    # A block gone after lookup said hit, before prepare_load could pin it:
    # the job fails and writes nothing.
    conn3, caches3 = make_connector(tmp_path, extra, seed=6)
    assert conn3.store(hashes, 0, [0, 1, 2]) == 3
    before = gpu_bytes(caches3, [30, 31, 32])
    handler = next(iter(conn3.worker.handlers))
    assert conn3.matched_blocks(hashes) == (0, 3)
    for cache in kv._caches.values():
        for h in hashes:
            cache.erase(kv.block_key(conn3.manager.namespaces[0], h))
    spec = conn3.manager.prepare_load(hashes)
    assert handler.transfer_async(7, (spec, vh.gpu_spec([30, 31, 32])))
    handler.wait({7})
    assert vh.pairs(handler.get_finished()) == [(7, False)]
    assert gpu_bytes(caches3, [30, 31, 32]) == before
    assert any("missing or damaged at load" in r.getMessage() for r in caplog.records)


def test_nothing_raises_into_vllm(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="kvtier")
    conn, caches = make_connector(tmp_path)
    m = conn.manager
    handler = next(iter(conn.worker.handlers))
    assert m.lookup(["not a hash"]) == 0
    assert m.prepare_store([object()]) is None
    m.complete_store([object()])
    m.complete_store(None)
    assert handler.transfer_async(1, None) is False
    assert handler.transfer_async(2, (vh.gpu_spec([0]), vh.gpu_spec([1]))) \
        is False
    hashes = vh.block_hashes(list(range(2 * BLOCK)), BLOCK)
    out = m.prepare_store(hashes)
    # Wrong GPU block count, block ids out of range: failed jobs, not exceptions.
    assert handler.transfer_async(3, (vh.gpu_spec([0]), out.store_spec))
    assert handler.transfer_async(4, (vh.gpu_spec([0, 10 ** 6]), out.store_spec))
    handler.wait({3, 4})
    assert sorted(vh.pairs(handler.get_finished())) == [(3, False), (4, False)]
    messages = " ".join(r.getMessage() for r in caplog.records)
    for text in ("lookup failed", "prepare_store failed", "not started", "no kvtier transfer",
                 "store of 2 blocks got 1", "job 4 failed"):
        assert text in messages


def test_tensor_parallel_ranks_keep_their_own_blocks(tmp_path):
    spec, kvcc = make_spec(tmp_path, tp=2)
    manager = spec.get_manager()
    plan = spec.plan
    names = kvcc.kv_cache_groups[0].layer_names
    gpus = [vh.torch_kv_caches(names, NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM, torch.float16,
                               seed=10 + r) for r in (0, 1)]
    workers = [kv.KvtierOffloadingHandler(manager.cache, plan, plan.key_chain(r).namespace,
                                          kv.gpu_regions(gpus[r], plan)) for r in (0, 1)]
    hashes = vh.block_hashes(list(range(3 * BLOCK)), BLOCK)
    out = manager.prepare_store(hashes)

    def transfer(rank, job, spec_pair):
        assert workers[rank].transfer_async(job, spec_pair)
        workers[rank].wait({job})
        return vh.pairs(workers[rank].get_finished())

    assert transfer(0, 1, (vh.gpu_spec([0, 1, 2]), out.store_spec)) == [(1, True)]
    assert manager.lookup(hashes) == 0  # rank 1 has not stored yet: not loadable
    assert transfer(1, 2, (vh.gpu_spec([0, 1, 2]), out.store_spec)) == [(2, True)]
    manager.complete_store(hashes)
    assert manager.lookup(hashes) == 3
    load = manager.prepare_load(hashes)
    for rank in (0, 1):
        assert transfer(rank, 10 + rank, (load, vh.gpu_spec([40, 41, 42]))) == \
            [(10 + rank, True)]
        assert gpu_bytes(gpus[rank], [40, 41, 42]) == gpu_bytes(gpus[rank], [0, 1, 2])
    assert gpu_bytes(gpus[0], [0, 1, 2]) != gpu_bytes(gpus[1], [0, 1, 2])
    for w in workers:
        w.shutdown()


# --- Found by driving vLLM's own code (issue 31): each failed on 1229907 -------------

def test_a_tuple_transfer_result_is_answered_with_pairs(tmp_path):
    # vLLMs that declare `TransferResult = tuple[int, bool]` in worker.py: not a
    # class to construct; the connector unpacks (job_id, success).
    worker_module = sys.modules["vllm.v1.kv_offload.worker.worker"]
    worker_module.TransferResult = tuple[int, bool]
    try:
        importlib.reload(kv)
        conn, caches = make_connector(tmp_path)
        hashes = vh.block_hashes(list(range(2 * BLOCK)), BLOCK)
        out = conn.manager.prepare_store(hashes)
        assert conn.worker.transfer_async(7, (vh.gpu_spec([0, 1]), out.store_spec))
        conn.worker.wait({7})
        assert conn.worker.get_finished() == [(7, True)]
    finally:
        del worker_module.TransferResult
        importlib.reload(kv)


def canonical_kv_halves(caches):
    """vLLM's CanonicalKVCaches over FlashAttention tensors: two refs per layer,
    the K half and the V half of each page, (num_blocks, page / 2) int8."""
    tensors, refs = [], []
    for t in caches.values():
        for half in (t[0], t[1]):
            view = half.reshape(half.shape[0], -1).view(torch.int8)
            tensors.append(vh.ns(tensor=view, page_size_bytes=int(view.shape[1])))
            refs.append(vh.ns(tensor_idx=len(tensors) - 1, page_size_bytes=int(view.shape[1])))
    return vh.ns(tensors=tensors, group_data_refs=[refs])


def test_canonical_caches_with_kv_half_refs_round_trip(tmp_path):
    spec, kvcc = make_spec(tmp_path)
    caches = vh.torch_kv_caches(kvcc.kv_cache_groups[0].layer_names, NUM_BLOCKS, BLOCK, HEADS,
                                HEAD_DIM, torch.float16, seed=21)
    conn = vh.Connector(spec, canonical_kv_halves(caches))
    hashes = vh.block_hashes(list(range(3 * BLOCK)), BLOCK)
    assert conn.store(hashes, 0, [4, 5, 6]) == 3
    assert conn.matched_blocks(hashes) == (0, 3)
    assert conn.load(hashes, 0, 3, [20, 21, 22])
    assert gpu_bytes(caches, [20, 21, 22]) == gpu_bytes(caches, [4, 5, 6])
    # The same bytes as the per-layer K/V tensors' blocks: another process
    # with vLLM's dict of tensors loads them.
    conn2, caches2 = make_connector(tmp_path, seed=22)
    assert conn2.load(hashes, 0, 3, [1, 2, 3])
    assert gpu_bytes(caches2, [1, 2, 3]) == gpu_bytes(caches, [4, 5, 6])


def test_blocks_evicted_after_prepare_load_still_load(tmp_path):
    conn, caches = make_connector(tmp_path, seed=23)
    hashes = vh.block_hashes(list(range(3 * BLOCK)), BLOCK)
    assert conn.store(hashes, 0, [0, 1, 2]) == 3
    assert conn.matched_blocks(hashes) == (0, 3)
    src = conn.manager.prepare_load(hashes)
    for h in hashes:  # eviction, gc or another process sharing the folder
        conn.manager.cache.erase(kv.block_key(conn.manager.namespaces[0], h))
    assert conn.matched_blocks(hashes) == (0, 0)
    conn._run(src, vh.gpu_spec([30, 31, 32]))
    conn.manager.complete_load(hashes)
    assert conn.failed == []
    assert gpu_bytes(caches, [30, 31, 32]) == gpu_bytes(caches, [0, 1, 2])
    assert [kv.PINS.get(kv.block_key(conn.manager.namespaces[0], h)) for h in hashes] == \
        [None] * 3  # complete_load ended the promise


def test_evictions_are_announced_as_one_removed_event(tmp_path):
    conn, caches = make_connector(tmp_path, seed=24)
    hashes = vh.block_hashes(list(range(4 * BLOCK)), BLOCK)
    assert conn.store(hashes, 0, [0, 1, 2, 3]) == 4
    assert [e.removed for e in conn.events()] == [False]
    for h in hashes[1:3]:
        conn.manager.cache.erase(kv.block_key(conn.manager.namespaces[0], h))
    # No lookup in between: the manager finds the evictions itself.
    assert [(sorted(e.block_hashes), e.removed, e.medium) for e in conn.events()] == \
        [(sorted(hashes[1:3]), True, "KVTIER")]
    assert conn.events() == []


@pytest.mark.fork
def test_a_forked_child_opens_its_own_cache_and_reads_the_parents_blocks(tmp_path):
    conn, caches = make_connector(tmp_path, seed=25)
    hashes = vh.block_hashes(list(range(BLOCK)), BLOCK)
    assert conn.store(hashes, 0, [0]) == 1
    cache = conn.manager.cache
    key = kv.block_key(conn.manager.namespaces[0], hashes[0])
    want = cache.load(key)
    cache.flush()
    got = vh.load_in_forked_child(conn.spec.plan.layout, conn.spec.options, key)
    assert got is not None, "the forked child hung"
    cache_id, pid, data = got
    assert cache_id != "error", pid
    assert pid != os.getpid() and cache_id != id(cache)
    assert data == want
