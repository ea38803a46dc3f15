"""kvtier.integrations.vllm over vLLM's current offloading interface (0.26
and later) and its multi-tier route, driven as vLLM's connector drives them.

vllm_current_harness installs stand-ins of base.py, config.py and
tiering/base.py written from the names and signatures it records (SOURCES:
path and commit); with KVTIER_VLLM_SRC set it installs vLLM's own files
instead (the drive, docs/vllm.md). Each test here failed on 1229907, whose
backend knew only the handler route (checked by running this file against
that commit's vllm.py).
"""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kvtier
import vllm_current_harness as vc
import vllm_harness as vh
from conftest import start_daemon
from kvtier.integrations import _served

LAYERS, TOKENS, CHUNK, HEADS, HEAD_DIM, NUM_BLOCKS = 2, 4, 2, 2, 8, 32


@pytest.fixture(scope="module")
def kv():
    module, old = vc.install()
    yield module
    vc.uninstall(old)


@pytest.fixture(autouse=True)
def empty_ram(kv):
    yield
    for cache in list(kv._caches.values()):  # each test starts with empty RAM tiers
        cache.close()
    kv._caches.clear()
    kv.PINS.clear()  # and no block promised by another test


def make_spec(kv, tmp_path, extra=None, **cfg):
    base = {"spec_name": "KvtierOffloadingSpec", "spec_module_path": "kvtier.integrations.vllm",
            "offload_prompt_only": True}
    if "server" not in (extra or {}):  # a client of `kvtier serve` has the daemon's tiers
        base.update(disk_dir=str(tmp_path / "kv"), host_bytes=1 << 22)
    extra = dict(base, **(extra or {}))
    config = vc.offloading_config(extra, tokens=TOKENS, chunk=CHUNK, heads=HEADS,
                                  head_dim=HEAD_DIM, **cfg)
    spec_cls = getattr(__import__(extra["spec_module_path"], fromlist=["x"]), extra["spec_name"])
    assert issubclass(spec_cls, vc.module("vllm.v1.kv_offload.base").OffloadingSpec)
    return spec_cls(config)


def make_connector(kv, tmp_path, *, groups=(LAYERS,), seed=0, split_kv=True, extra=None, **cfg):
    spec = make_spec(kv, tmp_path, extra, layers=groups, **cfg)
    tensors = [vc.layer_tensors(n, NUM_BLOCKS, TOKENS, HEADS, HEAD_DIM, seed + 7 * g)
               for g, n in enumerate(groups)]
    caches, pages = vc.canonical(tensors, split_kv)
    return vc.Connector(spec, caches), pages


def keys_of(n, group=0, salt=b""):
    return [vc.make_offload_key(vc.block_hash(i, salt), group) for i in range(n)]


def test_the_current_route_is_chosen_and_its_first_calls_answer(kv, tmp_path):
    assert kv.ROUTE == "current"
    conn, _ = make_connector(kv, tmp_path)
    b = vc.module("vllm.v1.kv_offload.base")
    ctx = b.ReqContext(req_id="r")
    assert isinstance(conn.manager.on_new_request(ctx), b.RequestOffloadingContext)
    assert conn.manager.lookup(keys_of(1)[0], ctx) is b.LookupResult.MISS
    out = conn.manager.prepare_store(keys_of(2), ctx)
    assert out.keys_to_store == keys_of(2) and out.evicted_keys == []
    assert conn.spec.options["host_bytes"] == 1 << 22
    assert "offload_prompt_only" not in conn.spec.options


def test_store_then_load_byte_identical_with_chunks_of_two_gpu_blocks(kv, tmp_path):
    conn, pages = make_connector(kv, tmp_path, seed=1)
    keys = keys_of(3)
    src_ids = [5, 9, 2, 3, 30, 31]  # two GPU blocks per key
    assert conn.store(keys, [(src_ids, 0)]) == keys
    want = vc.gpu_bytes(pages, 0, src_ids)
    # A fresh process's view: empty RAM, another set of GPU tensors.
    for cache in list(kv._caches.values()):
        cache.close()
    kv._caches.clear()
    conn2, pages2 = make_connector(kv, tmp_path, seed=2)
    assert conn2.lookup(keys) == 3
    dst_ids = [10, 11, 12, 13, 14, 15]
    assert conn2.load(keys, [(dst_ids, 0)])
    assert vc.gpu_bytes(pages2, 0, dst_ids) == want
    assert conn2.failed == [] and all(r.transfer_size for r in conn2.results)


def test_the_interface_is_the_one_installed(kv):
    src = os.environ.get("KVTIER_VLLM_SRC")
    base = vc.module("vllm.v1.kv_offload.base")
    if src:  # the drive: vLLM's own base.py and config.py
        assert base.__file__.startswith(src)
        assert vc.module("vllm.v1.kv_offload.config").__file__.startswith(src)
    else:
        assert base.OffloadingSpec is vc.OffloadingSpec
    assert kv.OffloadingSpecBase is base.OffloadingSpec
    assert kv.OffloadingWorkerBase is base.OffloadingWorker


def test_stored_by_one_process_loaded_by_another_byte_identical(kv, tmp_path):
    code = ("import pathlib, sys, vllm_current_harness as vc, test_vllm_current as t\n"
            "kv, _ = vc.install()\n"
            "conn, _ = t.make_connector(kv, pathlib.Path(sys.argv[1]), seed=31)\n"
            "assert conn.store(t.keys_of(3), [([3, 4, 5, 6, 7, 8], 0)]) == t.keys_of(3)\n"
            "conn.worker.shutdown()\n"
            "for cache in kv._caches.values():\n"
            "    cache.close()\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, env=child_env(), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    _, want = make_connector(kv, tmp_path, seed=31)  # the other process's GPU bytes
    conn, pages = make_connector(kv, tmp_path, seed=32)
    assert conn.lookup(keys_of(3)) == 3
    assert conn.load(keys_of(3), [([20, 21, 22, 23, 24, 25], 0)])
    assert vc.gpu_bytes(pages, 0, [20, 21, 22, 23, 24, 25]) == \
        vc.gpu_bytes(want, 0, [3, 4, 5, 6, 7, 8])


def test_a_load_skips_the_gpu_blocks_of_the_first_chunk_vllm_has(kv, tmp_path):
    conn, pages = make_connector(kv, tmp_path, seed=3)
    keys = keys_of(2)
    assert conn.store(keys, [([1, 2, 3, 4], 0)]) == keys
    # vLLM holds GPU block 0 of the first chunk: block_indices = 1, three ids.
    assert conn.load(keys, [([20, 21, 22], 1)])
    assert vc.gpu_bytes(pages, 0, [20, 21, 22]) == vc.gpu_bytes(pages, 0, [2, 3, 4])


def test_kv_half_refs_and_whole_page_refs_hold_the_same_bytes(kv, tmp_path):
    halves, hp = make_connector(kv, tmp_path, seed=4, split_kv=True)
    assert halves.store(keys_of(2), [([0, 1, 2, 3], 0)]) == keys_of(2)
    whole, wp = make_connector(kv, tmp_path, seed=5, split_kv=False)
    assert whole.lookup(keys_of(2)) == 2
    assert whole.load(keys_of(2), [([8, 9, 10, 11], 0)])
    assert vc.gpu_bytes(wp, 0, [8, 9, 10, 11]) == vc.gpu_bytes(hp, 0, [0, 1, 2, 3])


def test_groups_never_share_a_block(kv, tmp_path):
    conn, pages = make_connector(kv, tmp_path, groups=(2, 1), seed=6)
    g0, g1 = keys_of(2, group=0), keys_of(2, group=1)  # the same block hashes
    assert vc.block_hash(0) == kv.get_offload_block_hash(g1[0])
    assert conn.store(g0, [([0, 1, 2, 3], 0), ([], 0)]) == g0
    assert conn.lookup(g1) == 0  # group 1 holds nothing under these hashes
    out = conn.manager.prepare_store(g1 + g0, None)
    assert out.keys_to_store == g1
    conn.manager.complete_store(out.keys_to_store, None, success=False)
    assert conn.store(g1, [([], 0), ([4, 5, 6, 7], 0)]) == g1
    assert conn.lookup(g0) == 2 and conn.lookup(g1) == 2
    assert conn.load(g0 + g1, [([10, 11, 12, 13], 0), ([14, 15, 16, 17], 0)])
    assert vc.gpu_bytes(pages, 0, [10, 11, 12, 13]) == vc.gpu_bytes(pages, 0, [0, 1, 2, 3])
    assert vc.gpu_bytes(pages, 1, [14, 15, 16, 17]) == vc.gpu_bytes(pages, 1, [4, 5, 6, 7])
    assert vc.gpu_bytes(pages, 1, [0, 1, 2, 3]) != vc.gpu_bytes(pages, 1, [14, 15, 16, 17])


def erase_everywhere(kv, conn, keys):
    """What eviction, gc or another process sharing the folder does to them."""
    plan = conn.spec.plan
    for key in keys:
        for kv_key in plan.kv_keys(key):
            conn.spec.caches()[plan.group_of(key)].erase(kv_key)


def test_blocks_evicted_after_prepare_load_still_load(kv, tmp_path):
    conn, pages = make_connector(kv, tmp_path, seed=8)
    keys = keys_of(3)
    assert conn.store(keys, [([0, 1, 2, 3, 4, 5], 0)]) == keys
    assert conn.lookup(keys) == 3
    src = conn.prepare_load(keys)
    erase_everywhere(kv, conn, keys)
    assert conn.lookup(keys) == 0
    assert conn.transfer_load(keys, src, [([20, 21, 22, 23, 24, 25], 0)])
    assert vc.gpu_bytes(pages, 0, [20, 21, 22, 23, 24, 25]) == \
        vc.gpu_bytes(pages, 0, [0, 1, 2, 3, 4, 5])
    assert [kv.PINS.get(k) for key in keys for k in conn.spec.plan.kv_keys(key)] == \
        [None] * 3  # complete_load ended the promise


def test_a_worker_in_another_process_gets_the_promised_bytes_in_the_spec(kv, tmp_path,
                                                                          monkeypatch):
    conn, pages = make_connector(kv, tmp_path, seed=9)
    keys = keys_of(2)
    assert conn.store(keys, [([0, 1, 2, 3], 0)]) == keys
    monkeypatch.setattr(kv._common, "_local_workers", [0])  # a scheduler-only process
    src = conn.prepare_load(keys)
    assert sorted(src.blocks) == sorted(k for key in keys for k in conn.spec.plan.kv_keys(key))
    conn.manager.complete_load(keys, None)  # the spec alone carries them now
    erase_everywhere(kv, conn, keys)
    assert conn.transfer_load(keys, src, [([8, 9, 10, 11], 0)])
    assert vc.gpu_bytes(pages, 0, [8, 9, 10, 11]) == vc.gpu_bytes(pages, 0, [0, 1, 2, 3])


def count_full_decodes(monkeypatch):
    """How many blocks kvtier.decode_block (the full check, data hashed)
    was asked to decode from now on."""
    calls = []
    real = kvtier.decode_block

    def counting(data, layout, key):
        calls.append(key)
        return real(data, layout, key)

    monkeypatch.setattr(kvtier, "decode_block", counting)
    return calls


def test_a_pinned_block_is_not_hashed_again_at_load(kv, tmp_path, monkeypatch):
    conn, pages = make_connector(kv, tmp_path, seed=31)
    keys = keys_of(2)
    assert conn.store(keys, [([0, 1, 2, 3], 0)]) == keys
    src = conn.prepare_load(keys)  # read and verified in full, then pinned
    full = count_full_decodes(monkeypatch)
    assert conn.transfer_load(keys, src, [([8, 9, 10, 11], 0)])
    assert full == []  # only the headers were checked again
    assert vc.gpu_bytes(pages, 0, [8, 9, 10, 11]) == vc.gpu_bytes(pages, 0, [0, 1, 2, 3])


def test_carried_bytes_are_verified_in_full_and_a_damaged_one_fails_the_job(kv, tmp_path,
                                                                           monkeypatch, caplog):
    conn, pages = make_connector(kv, tmp_path, seed=32)
    keys = keys_of(2)
    assert conn.store(keys, [([0, 1, 2, 3], 0)]) == keys
    monkeypatch.setattr(kv._common, "_local_workers", [0])  # a scheduler-only process
    src = conn.prepare_load(keys)
    conn.manager.complete_load(keys, None)  # the spec alone carries them now
    kv_keys = [k for key in keys for k in conn.spec.plan.kv_keys(key)]
    full = count_full_decodes(monkeypatch)
    assert conn.transfer_load(keys, src, [([8, 9, 10, 11], 0)])
    assert sorted(full) == sorted(kv_keys)
    # One byte of each block's data flipped on its way to the worker: the
    # headers still read, only the data's checksum can tell. The job stops
    # at the first (one warning) and writes nothing.
    assert len(kv_keys) == 2
    for k in kv_keys:
        damaged = bytearray(src.blocks[k])
        damaged[-1] ^= 0x01
        src.blocks[k] = bytes(damaged)
    before = vc.gpu_bytes(pages, 0, [12, 13, 14, 15])
    caplog.clear()
    assert not conn.transfer_load(keys, src, [([12, 13, 14, 15], 0)])
    assert vc.gpu_bytes(pages, 0, [12, 13, 14, 15]) == before
    assert [r.getMessage()[:len("vllm: block ") + 16] for r in caplog.records
            if "failed verification at load" in r.getMessage()] == \
        ["vllm: block " + kv_keys[0].hex()[:16]]


def test_a_load_that_still_fails_is_a_failed_job_and_writes_nothing(kv, tmp_path, caplog):
    conn, pages = make_connector(kv, tmp_path, seed=10)
    keys = keys_of(2)
    assert conn.store(keys, [([0, 1, 2, 3], 0)]) == keys
    erase_everywhere(kv, conn, keys[1:])  # gone before vLLM asked for it
    before = vc.gpu_bytes(pages, 0, [8, 9, 10, 11])
    assert not conn.load(keys, [([8, 9, 10, 11], 0)])
    assert len(conn.failed) == 1 and conn.results[-1].success is False
    assert vc.gpu_bytes(pages, 0, [8, 9, 10, 11]) == before
    assert "missing or damaged at load" in caplog.text


def test_a_transfer_of_parts_of_gpu_blocks_is_a_failed_job(kv, tmp_path, caplog):
    conn, pages = make_connector(kv, tmp_path, seed=16)
    keys = keys_of(1)
    assert conn.store(keys, [([0, 1], 0)]) == keys
    src = conn.prepare_load(keys)
    dst = conn.gpu_spec([([8, 9], 0)])
    dst.block_offsets, dst.block_counts = [0, 0], [1, 1]  # hybrid offloading's sub-blocks
    before = vc.gpu_bytes(pages, 0, [8, 9])
    assert conn.worker.submit_load(50, src, dst)
    conn.worker.wait({50})
    assert [(r.job_id, r.success) for r in conn.worker.get_finished()] == [(50, False)]
    assert vc.gpu_bytes(pages, 0, [8, 9]) == before
    assert "parts of GPU blocks" in caplog.text


def test_events_are_batched_with_medium_and_locality(kv, tmp_path):
    conn, _ = make_connector(kv, tmp_path, seed=11)
    b = vc.module("vllm.v1.kv_offload.base")
    keys = keys_of(3)
    assert conn.store(keys, [([0, 1, 2, 3, 4, 5], 0)]) == keys
    (stored,) = conn.events()
    assert (stored.keys, stored.removed, stored.medium, stored.locality) == \
        (keys, False, b.Medium.STORAGE, b.Locality.LOCAL)
    erase_everywhere(kv, conn, keys[:2])
    (removed,) = conn.events()
    assert (sorted(removed.keys), removed.removed) == (sorted(keys[:2]), True)
    assert conn.events() == []


def test_reset_cache_empties_every_tier(kv, tmp_path):
    conn, _ = make_connector(kv, tmp_path, seed=12)
    assert conn.store(keys_of(2), [([0, 1, 2, 3], 0)]) == keys_of(2)
    conn.manager.reset_cache()
    assert conn.lookup(keys_of(2)) == 0
    conn.manager.shutdown()


def test_tp_ranks_store_their_shards_and_a_lookup_needs_all(kv, tmp_path):
    r0, p0 = make_connector(kv, tmp_path, seed=13, tp=2, rank=0)
    r1, p1 = make_connector(kv, tmp_path, seed=14, tp=2, rank=1)
    keys = keys_of(1)
    # The scheduler (rank 0's manager) sees no block until both shards are in.
    out = r0.manager.prepare_store(keys, None)
    assert r0.worker.submit_store(0, r0.gpu_spec([([0, 1], 0)]), out.store_spec)
    r0.worker.wait({0})
    assert [r.success for r in r0.worker.get_finished()] == [True]
    assert r0.lookup(keys) == 0
    assert r1.worker.submit_store(0, r1.gpu_spec([([0, 1], 0)]), out.store_spec)
    r1.worker.wait({0})
    assert r0.lookup(keys) == 1
    assert r1.load(keys, [([5, 6], 0)])
    assert vc.gpu_bytes(p1, 0, [5, 6]) == vc.gpu_bytes(p1, 0, [0, 1])


# --- The supported range ----------------------------------------------------------

def child_env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__))] + sys.path))


def run_with(code, era):
    """Runs code in a fresh interpreter over the stand-ins of `era`."""
    prelude = ("import sys, vllm_current_harness as vc\n"
               "mods = vc.stand_in_modules(%s)\n"
               "sys.modules.update(mods)\n" % era)
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                          text=True, env=child_env(), timeout=120)


def test_an_interface_between_the_routes_is_refused_at_import_in_one_line():
    # vLLM 0.25: get_worker and OffloadingWorker, but OffloadingSpec(vllm_config,
    # kv_cache_config).
    era = ("{'OffloadingSpec': type('OffloadingSpec', (), {'__init__': "
           "lambda self, vllm_config, kv_cache_config: None})}")
    out = run_with("import kvtier.integrations.vllm\n", era)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: kvtier.integrations.vllm: this vLLM's offloading "
                           "interface is not one kvtier supports: missing "
                           "OffloadingSpec.__init__(self, config)")
    assert "vLLM 0.26 and later" in last and "vLLM 0.14-0.19" in last


def test_the_current_interface_imports_in_a_fresh_process():
    out = run_with("import kvtier.integrations.vllm as kv\nprint(kv.ROUTE, "
                   "kv.KvtierSecondaryTier.__mro__[1].__name__)\n", "None")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["current", "SecondaryTierManager"]


# --- Fork ---------------------------------------------------------------------------

@pytest.mark.fork
def test_a_forked_child_opens_its_own_cache_and_reads_the_parents_blocks(kv, tmp_path):
    conn, _ = make_connector(kv, tmp_path, seed=15)
    keys = keys_of(1)
    assert conn.store(keys, [([0, 1], 0)]) == keys
    plan = conn.spec.plan
    cache = conn.spec.caches()[0]
    kv_key = plan.kv_keys(keys[0])[0]
    want = cache.load(kv_key)
    cache.flush()
    got = vh.load_in_forked_child(plan.groups[0].layout, conn.spec.options, kv_key)
    assert got is not None, "the forked child hung"
    cache_id, pid, data = got
    assert cache_id != "error", pid
    assert pid != os.getpid() and cache_id != id(cache)
    assert data == want


# --- The multi-tier route -------------------------------------------------------------

SLOT = 256


def make_tier(kv, tmp_path, slots=8, seed=0, **extra):
    spec = make_spec(kv, tmp_path)
    rng = np.random.default_rng(seed)
    primary = rng.integers(0, 256, (slots, SLOT), dtype=np.uint8)
    factory = vc.module("vllm.v1.kv_offload.tiering.factory").SecondaryTierFactory
    config = dict({"type": "kvtier", "disk_dir": str(tmp_path / "tier"), "host_bytes": 1 << 20},
                  **extra)
    tier = factory.create_secondary_tier(config, memoryview(primary), spec)
    return tier, primary


def tier_job(tier, job_id, keys, slots, req="req-0"):
    t = vc.module("vllm.v1.kv_offload.tiering.base")
    b = vc.module("vllm.v1.kv_offload.base")
    # TransferJob in vLLM's tiering/base.py since a123159f (2026-08-10; JobMetadata before).
    job = getattr(t, "TransferJob", None) or t.JobMetadata
    return job(job_id=job_id, keys=keys, block_ids=np.array(slots), is_promotion=False,
               req_context=b.ReqContext(req_id=req))


def finished(tier):
    tier.drain_jobs()
    return {r.job_id: r for r in tier.get_finished_jobs()}


def tier_lookup(tier, key, ctx):
    """vLLM's retry of a tier lookup: RETRY while the tier reads the block."""
    b = vc.module("vllm.v1.kv_offload.base")
    result = tier.lookup(key, ctx)
    if result is b.LookupResult.RETRY:
        tier.drain_jobs()
        result = tier.lookup(key, ctx)
    return result


def test_the_tier_stores_primary_slots_and_loads_them_in_another_process(kv, tmp_path):
    tier, primary = make_tier(kv, tmp_path, seed=1)
    keys = keys_of(3)
    tier.submit_store(tier_job(tier, 1, keys, [0, 1, 2]))
    assert finished(tier)[1].success
    tier.shutdown()
    for cache in list(kv._caches.values()):
        cache.close()
    kv._caches.clear()
    tier2, primary2 = make_tier(kv, tmp_path, seed=2)
    b = vc.module("vllm.v1.kv_offload.base")
    ctx = b.ReqContext(req_id="req-0")
    first = [tier2.lookup(k, ctx) for k in keys]  # RETRY while read, or HIT if done
    assert set(first) <= {b.LookupResult.RETRY, b.LookupResult.HIT}
    assert [tier_lookup(tier2, k, ctx) for k in keys] == [b.LookupResult.HIT] * 3
    tier2.submit_load(tier_job(tier2, 2, keys, [5, 6, 7]))
    assert finished(tier2)[2].success
    assert primary2[5:8].tobytes() == primary[0:3].tobytes()


def test_a_tier_hit_stays_loadable_and_a_partial_load_names_its_keys(kv, tmp_path):
    tier, primary = make_tier(kv, tmp_path, seed=3)
    b = vc.module("vllm.v1.kv_offload.base")
    keys = keys_of(3)
    tier.submit_store(tier_job(tier, 1, keys, [0, 1, 2]))
    assert finished(tier)[1].success
    ctx = b.ReqContext(req_id="req-1")
    assert tier_lookup(tier, keys[0], ctx) is b.LookupResult.HIT  # promised
    for k in keys:
        tier.cache.erase(tier.kv_key(k))
    tier.submit_load(tier_job(tier, 2, [keys[0], keys[1], keys[2]], [4, 5, 6], req="req-1"))
    result = finished(tier)[2]
    assert (result.success, tuple(result.successful_keys)) == (False, (keys[0],))
    assert primary[4].tobytes() == primary[0].tobytes()
    assert kv.PINS.get(tier.kv_key(keys[0])) is None  # the load ended the promise


def test_the_tier_announces_its_stores_and_removals(kv, tmp_path):
    tier, _ = make_tier(kv, tmp_path, seed=4)
    b = vc.module("vllm.v1.kv_offload.base")
    keys = keys_of(2, group=1)
    tier.submit_store(tier_job(tier, 1, keys, [0, 1]))
    assert finished(tier)[1].success
    (stored,) = list(tier.take_events())
    assert (stored.keys, stored.removed, stored.medium) == (keys, False, b.Medium.STORAGE)
    # ownership: a field of OffloadingEvent at 0105e232, gone at 017e9f44.
    assert getattr(stored, "ownership", "kvtier") == "kvtier"
    tier.cache.erase(tier.kv_key(keys[1]))
    (removed,) = list(tier.take_events())
    assert (removed.keys, removed.removed) == ([keys[1]], True)
    # Group 1's blocks are not group 0's.
    ctx = b.ReqContext(req_id="r")
    assert tier_lookup(tier, keys_of(1, group=0)[0], ctx) is b.LookupResult.MISS


# --- get_stats and lookups without block reads --------------------------------

P = "vllm:kv_offload_kvtier_"


def counters(payload):
    """{name: {label values: value}} of a payload's counters."""
    data = payload.data
    return {n: v for n, v in data["data"].items() if data["types"][n] == "counter"}


def test_get_stats_is_vllms_stats_payload_filled_from_kvtier(kv, tmp_path):
    conn, _ = make_connector(kv, tmp_path, seed=40)
    definitions = type(conn.spec).build_metric_definitions(conn.spec.extra_config)
    now = [100.0]
    conn.manager._stats._clock = lambda: now[0]
    first = conn.manager.get_stats()
    stats_cls = vc.module(vc.METRICS_MODULE).OffloadingConnectorStats
    assert isinstance(first, stats_cls) and counters(first) == {}
    vc.observe(definitions, first)
    keys = keys_of(4)
    assert conn.store(keys, [(list(range(8)), 0)]) == keys
    now[0] += 0.5  # vLLM asks every step; kvtier's counters are read once a second
    assert conn.manager.get_stats() is None
    now[0] += 1.0
    stored = conn.manager.get_stats()
    vc.observe(definitions, stored)
    block = conn.spec.plan.groups[0].layout.block_file_bytes  # what kvtier writes
    assert counters(stored) == {P + "stores": {(): 4}, P + "stored_bytes": {(): 4 * block}}
    assert stored.data["data"][P + "bytes"][("host",)] >= 4 * block
    assert conn.load(keys, [(list(range(10, 18)), 0)])
    now[0] += 1.0
    loaded = counters(conn.manager.get_stats())  # only the increase since the last payload
    assert loaded[P + "hits"] == {("host",): 4} and P + "stores" not in loaded
    assert set(loaded) == {P + "hits", P + "loaded_bytes"}
    # Summed by vLLM's aggregate over payloads, the counters are kvtier's totals.
    total = stats_cls().aggregate(stored).aggregate(conn.manager.get_stats() or stats_cls())
    assert total.data["data"][P + "stores"] == {(): 4}


def reopen(kv):
    """Another process's view: the blocks on disk only."""
    for cache in list(kv._caches.values()):
        cache.flush()
        cache.close()
    kv._caches.clear()


def damage_on_disk(conn, key):
    """Flips the last byte of `key`'s block file (rank 0) in the disk tier."""
    hexkey = conn.spec.plan.kv_keys(key)[0].hex()
    path = os.path.join(conn.spec.options["disk_dir"], "blocks", hexkey[:2],
                        hexkey + ".safetensors")
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))


class ReadRecorder:
    """A kvtier.Cache that records the thread of every block read."""

    READS = ("load", "load_many", "load_into", "load_tensors")

    def __init__(self, cache):
        self._cache, self.reads = cache, []

    def __getattr__(self, name):
        attr = getattr(self._cache, name)
        if name not in self.READS:
            return attr

        def read(*args, **kwargs):
            self.reads.append((name, threading.get_ident(), threading.current_thread().name))
            return attr(*args, **kwargs)
        return read


def test_a_damaged_disk_block_is_never_a_hit_and_vllm_recomputes_it(kv, tmp_path):
    conn, pages = make_connector(kv, tmp_path, seed=41)
    keys = keys_of(3)
    assert conn.store(keys, [(list(range(6)), 0)]) == keys
    reopen(kv)
    damage_on_disk(conn, keys[1])
    conn2, pages2 = make_connector(kv, tmp_path, seed=42)
    answers = []
    # Every key is in kvtier's index: RETRY each (vLLM scans on), then the
    # verified reads decide: HIT for the good block, MISS for the damaged one.
    assert conn2.lookup(keys, answers=answers) == 1
    assert answers == [["RETRY"] * 3, ["HIT", "MISS"]]
    assert conn2.load(keys[:1], [([20, 21], 0)])  # vLLM loads the hit, recomputes the rest
    assert vc.gpu_bytes(pages2, 0, [20, 21]) == vc.gpu_bytes(pages, 0, [0, 1])
    assert conn2.failed == [] and kv.PINS.nbytes() == 0
    assert conn2.lookup(keys) == 1  # the damaged block stays a miss


def test_a_good_disk_block_is_retry_then_hit_and_loads_what_the_lookup_read(kv, tmp_path):
    conn, pages = make_connector(kv, tmp_path, seed=43)
    keys = keys_of(3)
    assert conn.store(keys, [(list(range(6)), 0)]) == keys
    reopen(kv)
    conn2, pages2 = make_connector(kv, tmp_path, seed=44)
    answers = []
    assert conn2.lookup(keys, answers=answers) == 3
    assert answers == [["RETRY"] * 3, ["HIT"] * 3]
    cache = conn2.spec.caches()[0]
    read = cache.stats()["lookups"]
    src = conn2.prepare_load(keys)  # the bytes the lookups verified: no second read
    assert cache.stats()["lookups"] == read
    erase_everywhere(kv, conn2, keys)
    assert conn2.transfer_load(keys, src, [(list(range(20, 26)), 0)])
    assert vc.gpu_bytes(pages2, 0, list(range(20, 26))) == vc.gpu_bytes(pages, 0, list(range(6)))
    assert conn2.manager._holds.held_bytes() == 0 and kv.PINS.nbytes() == 0


def test_held_blocks_are_the_read_buffers_and_a_second_load_reuses_them(kv, tmp_path):
    # A fresh array per block read and per load cost a page fault per 4 KiB:
    # holding a 32k-token qwen2.5-0.5b prefix took ~1 s against ~60 ms with
    # buffers reused (docs/vllm.md).
    conn, pages = make_connector(kv, tmp_path, seed=45)
    keys = keys_of(3)
    assert conn.store(keys, [(list(range(6)), 0)]) == keys
    buffers = kv._common.BUFFERS
    buffers.clear()
    taken = []
    for n, dst in enumerate((list(range(20, 26)), list(range(10, 16)))):
        before = (buffers.mapped, buffers.reused)
        assert conn.lookup(keys, req=f"r{n}") == 3
        src = conn.prepare_load(keys, req=f"r{n}")
        held = [kv.PINS.get(k) for key in keys for k in conn.spec.plan.kv_keys(key)]
        assert all(not h.flags.writeable for h in held)  # held as read, no copy
        del held
        assert conn.transfer_load(keys, src, [(dst, 0)], req=f"r{n}")
        assert vc.gpu_bytes(pages, 0, dst) == vc.gpu_bytes(pages, 0, list(range(6)))
        # 3 blocks read by the lookups, then a buffer of rows per layer.
        taken.append((buffers.mapped - before[0], buffers.reused - before[1]))
    assert taken == [(3 + LAYERS, 0), (0, 3 + LAYERS)]
    assert kv.PINS.nbytes() == 0


def test_a_lookup_reads_no_block_on_the_calling_thread(kv, tmp_path):
    conn, _ = make_connector(kv, tmp_path, seed=45)
    keys = keys_of(3)
    assert conn.store(keys, [(list(range(6)), 0)]) == keys  # in the host tier too
    recorder = conn.manager.caches[0] = ReadRecorder(conn.manager.caches[0])
    assert conn.lookup(keys) == 3
    assert conn.lookup(keys_of(2, salt=b"other"), req="other") == 0
    me = threading.get_ident()
    assert recorder.reads and all(t != me for _, t, _ in recorder.reads)
    assert {name.split("_")[0] for _, _, name in recorder.reads} == {"kvtier-vllm-lookup"}
    recorder.reads.clear()
    conn.prepare_load(keys)
    assert recorder.reads == []


def test_what_a_request_holds_ends_with_it_and_is_bounded(kv, tmp_path):
    conn, _ = make_connector(kv, tmp_path, seed=46)
    keys = keys_of(3)
    assert conn.store(keys, [(list(range(6)), 0)]) == keys
    b = vc.module("vllm.v1.kv_offload.base")
    holds = conn.manager._holds
    assert conn.lookup(keys, req="a") == 3
    block = conn.spec.plan.groups[0].layout.block_file_bytes
    assert holds.held_bytes() == 3 * block
    conn.manager.on_request_finished(b.ReqContext(req_id="a"))
    assert holds.held_bytes() == 0
    # A request gone while its read runs: the read's bytes are dropped.
    gate, read = threading.Event(), holds._read
    holds._read = lambda key: (gate.wait(300), read(key))[1]
    ctx = b.ReqContext(req_id="b")
    assert conn.manager.lookup(keys[0], ctx) is b.LookupResult.RETRY
    conn.manager.on_request_finished(ctx)
    gate.set()
    while conn.manager.has_pending_work():
        time.sleep(0.001)
    assert holds.held_bytes() == 0
    holds._read = read
    # At most max_bytes held or reserved: a lookup beyond is a miss.
    holds.max_bytes = conn.spec.plan.groups[0].layout.max_file_bytes
    assert conn.lookup(keys, req="c") == 1
    assert holds.held_bytes() == block
    # A request vLLM never finishes is dropped after max_idle seconds.
    now = time.monotonic() + holds.max_idle + 2.0
    holds._clock = lambda: now
    assert conn.manager.lookup(keys_of(1, salt=b"other")[0], ctx) is b.LookupResult.MISS
    assert holds.held_bytes() == 0


def test_the_tier_reports_its_stats_in_vllms_payload(kv, tmp_path):
    tier, _ = make_tier(kv, tmp_path, seed=42)
    now = [5.0]
    tier._stats._clock = lambda: now[0]
    tier.get_stats()
    keys = keys_of(3)
    tier.submit_store(tier_job(tier, 1, keys, [0, 1, 2]))
    assert finished(tier)[1].success
    now[0] += 2.0
    payload = tier.get_stats()
    vc.observe(type(tier).build_metric_definitions({}), payload)
    assert counters(payload) == {P + "stores": {(): 3},
                                 P + "stored_bytes": {(): 3 * tier.layout.block_file_bytes}}


# --- Found by the tier drive (vLLM's multi-tier code at 017e9f44, docs/vllm.md) --

def test_vllms_out_of_tree_tier_config_builds_the_kvtier_tier(kv, tmp_path):
    """vLLM imports nothing of kvtier before it builds its tiers, so "kvtier"
    (registered at kvtier's import) is unknown there; the class name with
    module_path is the config that works."""
    factory = vc.module("vllm.v1.kv_offload.tiering.factory").SecondaryTierFactory
    config = {"type": "KvtierSecondaryTier", "module_path": "kvtier.integrations.vllm",
              "disk_dir": str(tmp_path / "tier"), "host_bytes": 1 << 20}
    cls = factory.get_tier_class(config)
    assert cls is kv.KvtierSecondaryTier
    assert sorted(cls.build_metric_definitions(config)) == sorted(kv._stats.METRICS)
    primary = np.zeros((4, SLOT), np.uint8)
    tier = factory.create_secondary_tier(config, memoryview(primary), make_spec(kv, tmp_path))
    assert tier.tier_type == "KvtierSecondaryTier" and tier.options["host_bytes"] == 1 << 20
    tier.shutdown()


def test_a_tier_job_that_names_its_slots_chunk_ids_moves_them(kv, tmp_path):
    """vLLM's newer tiering/base.py (SOURCES "tiering_chunks") names a job's
    primary slots TransferJob.chunk_ids; the tier read block_ids only, so
    every job failed (nothing stored, every promotion failed)."""
    tier, primary = make_tier(kv, tmp_path, seed=11)
    b = vc.module("vllm.v1.kv_offload.base")
    keys = keys_of(3)
    job = vc.ChunkTransferJob(job_id=1, keys=keys, chunk_ids=np.array([0, 1, 2], np.int32),
                              is_promotion=False, req_context=b.ReqContext(req_id="req-0"))
    tier.submit_store(job)
    assert finished(tier)[1].success
    load = vc.ChunkTransferJob(job_id=2, keys=keys, chunk_ids=np.array([5, 6, 7], np.int32),
                               is_promotion=True, req_context=b.ReqContext(req_id="req-0"))
    tier.submit_load(load)
    assert finished(tier)[2].success
    assert primary[5:8].tobytes() == primary[0:3].tobytes()
    tier.shutdown()


def test_a_factory_that_passes_a_backpressure_detector_builds_the_tier(kv, tmp_path,
                                                                       monkeypatch):
    """The backpressure branch's factory (SOURCES "tiering_backpressure")
    passes backpressure_detector= to every tier and leaves 'locality' in its
    keywords: both reached kvtier's option check, which refused them
    (unknown option), so vLLM could not start. The detector goes to vLLM's
    base when it takes one; 'locality' sets the tier's events' locality."""
    primary = np.zeros((4, SLOT), np.uint8)
    config = {"type": "KvtierSecondaryTier", "module_path": "kvtier.integrations.vllm",
              "disk_dir": str(tmp_path / "tier"), "host_bytes": 1 << 20}
    b = vc.module("vllm.v1.kv_offload.base")
    # The base as it is (the stand-ins' and 017e9f44's have no detector
    # parameter: a None one is dropped; 0b736e0f's takes it).
    tier = vc.create_secondary_tier_with_backpressure(
        dict(config, locality="REMOTE"), memoryview(primary), make_spec(kv, tmp_path))
    assert tier.locality is b.Locality.REMOTE
    assert "locality" not in tier.options and "backpressure_detector" not in tier.options
    tier.shutdown()
    # The branch's base: the detector is the base's.
    base = vc.module("vllm.v1.kv_offload.tiering.base").SecondaryTierManager
    original = base.__init__

    def init(self, offloading_spec, primary_kv_view, tier_type, backpressure_detector=None):
        original(self, offloading_spec, primary_kv_view, tier_type)
        self._bp_detector = backpressure_detector

    monkeypatch.setattr(base, "__init__", init)
    detector = object()
    tier = vc.create_secondary_tier_with_backpressure(
        config, memoryview(primary), make_spec(kv, tmp_path), detector=detector)
    assert tier._bp_detector is detector and tier.locality is b.Locality.LOCAL
    tier.submit_store(tier_job(tier, 1, keys_of(2), [0, 1]))
    assert finished(tier)[1].success
    tier.shutdown()
    with pytest.raises(kvtier.InvalidArgument, match="locality: 'NEAR' is not one of"):
        vc.create_secondary_tier_with_backpressure(
            dict(config, locality="NEAR"), memoryview(primary), make_spec(kv, tmp_path))


def test_the_tier_lets_go_of_the_primary_view_at_shutdown(kv, tmp_path):
    """vLLM's primary tier closes its mmap after the tiers' shutdown(); an array
    the tier kept over the view made that close fail (BufferError, the region
    leaked)."""
    import gc
    import mmap
    mm = mmap.mmap(-1, 4 * SLOT)
    rows = np.frombuffer(mm, np.int8).reshape(4, SLOT)  # as vLLM's region builds it
    view = memoryview(rows)
    factory = vc.module("vllm.v1.kv_offload.tiering.factory").SecondaryTierFactory
    tier = factory.create_secondary_tier(
        {"type": "kvtier", "disk_dir": str(tmp_path / "tier"), "host_bytes": 1 << 20}, view,
        make_spec(kv, tmp_path))
    tier.submit_store(tier_job(tier, 1, keys_of(2), [0, 1]))
    assert finished(tier)[1].success
    tier.shutdown()
    view.release()
    del rows
    gc.collect()
    mm.close()  # BufferError while the tier holds an array over the view
    tier.submit_load(tier_job(tier, 2, keys_of(1), [2]))  # after shutdown: a failed job
    assert finished(tier)[2].success is False


# --- With the server option: a client of `kvtier serve` (docs/server.md) -------------

# Process A: a backend of its own (scheduler and worker) stores 3 keys' chunks
# of GPU blocks 3..8 (seed 33) through the daemon.
SERVED_WRITER = (
    "import pathlib, sys, vllm_current_harness as vc, test_vllm_current as t\n"
    "kv, _ = vc.install()\n"
    "conn, _ = t.make_connector(kv, pathlib.Path(sys.argv[1]), seed=33,\n"
    "                           extra={'server': sys.argv[2]})\n"
    "assert conn.store(t.keys_of(3), [([3, 4, 5, 6, 7, 8], 0)]) == t.keys_of(3)\n"
    "conn.worker.shutdown()\n"
    "print(conn.spec.caches()[0].stats()['stores'])\n")


def serve_for_the_backend(kv, cli, tmp_path):
    """`kvtier serve` with the layout of the backend's one group and no tier
    below its arena (a hit can only come from the arena); its "unix:PATH"."""
    sock = tmp_path / "s.sock"
    spec = make_spec(kv, tmp_path, {"server": "unix:" + str(sock)})
    layout = tmp_path / "layout.json"
    layout.write_text(spec.plan.groups[0].layout.to_json())
    return start_daemon(cli, sock, tmp_path, layout=layout), "unix:" + str(sock)


def run_served_writer(tmp_path, server):
    out = subprocess.run([sys.executable, "-c", SERVED_WRITER, str(tmp_path), server],
                         capture_output=True, text=True, env=child_env(), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["3"]


def test_a_second_process_loads_the_first_ones_prefix_from_the_daemons_arena(kv, cli,
                                                                             tmp_path):
    daemon, server = serve_for_the_backend(kv, cli, tmp_path)
    try:
        run_served_writer(tmp_path, server)
        # Process B (this one: not a fork of A): other GPU bytes, empty pages 20..25.
        conn, pages = make_connector(kv, tmp_path, seed=34, extra={"server": server})
        assert "host_bytes" not in conn.spec.options and "disk_dir" not in conn.spec.options
        cache = conn.spec.caches()[0]
        kv_keys = [k for key in keys_of(3) for k in conn.spec.plan.kv_keys(key)]
        assert [cache.contains(k) for k in kv_keys] == ["host"] * 3  # the arena
        assert conn.lookup(keys_of(3)) == 3
        assert conn.load(keys_of(3), [([20, 21, 22, 23, 24, 25], 0)])
        assert conn.failed == []
        a_pages = vc.canonical([vc.layer_tensors(LAYERS, NUM_BLOCKS, TOKENS, HEADS, HEAD_DIM,
                                                 33)], True)[1]
        assert vc.gpu_bytes(pages, 0, [20, 21, 22, 23, 24, 25]) == \
            vc.gpu_bytes(a_pages, 0, [3, 4, 5, 6, 7, 8])
        stats = cache.stats()
        assert (stats["lookups"], stats["hits_host"], stats["misses"]) == (3, 3, 0)
        block = conn.spec.plan.groups[0].layout.block_file_bytes
        assert counters(conn.manager.get_stats()) == {P + "hits": {("host",): 3},
                                                      P + "loaded_bytes": {("host",): 3 * block}}
    finally:
        daemon.terminate()
        out, _ = daemon.communicate(timeout=120)
    # No tier below the arena: A's 3 blocks were there until the end.
    assert out.strip() == "kvtier serve: wrote 0 blocks to the tiers below (3 dropped)"


def test_a_daemon_killed_before_the_second_backend_is_misses_not_exceptions(kv, cli, tmp_path,
                                                                             caplog):
    # Backend 1 stores (here: a second process costs a torch import, and the
    # test above has one); the daemon is killed; backend 2, a new client with
    # caches of its own, finds nothing and raises nothing.
    daemon, server = serve_for_the_backend(kv, cli, tmp_path)
    try:
        first, _ = make_connector(kv, tmp_path, seed=35, extra={"server": server})
        assert first.store(keys_of(3), [([3, 4, 5, 6, 7, 8], 0)]) == keys_of(3)
        assert first.spec.caches()[0].stats()["stores"] == 3
        first.worker.shutdown()
        reopen(kv)
    finally:
        daemon.kill()
        daemon.wait(120)
    caplog.set_level("WARNING", logger="kvtier")
    conn, _ = make_connector(kv, tmp_path, seed=36, extra={"server": server})
    assert "does not answer" in caplog.text  # at open: logged, not raised
    answers = []
    assert conn.lookup(keys_of(3), answers=answers) == 0
    assert answers == [["MISS"]]
    new = keys_of(2, salt=b"after")
    assert conn.store(new, [([0, 1, 2, 3], 0)]) == new  # the job succeeds: vLLM asserts it
    assert conn.failed == []
    stats = conn.spec.caches()[0].stats()
    assert (stats["stores"], stats["store_errors"], stats["hits_host"]) == (0, 2, 0)
    assert conn.events() == []  # nothing announced: nothing was kept


def test_with_server_the_daemons_options_and_another_layout_are_refused(kv, cli, tmp_path):
    server = "unix:" + str(tmp_path / "s.sock")
    for name, value in (("host_bytes", "1GiB"), ("disk_dir", str(tmp_path / "d")),
                        ("remote", "redis://127.0.0.1:1")):
        with pytest.raises(kvtier.InvalidArgument, match="vllm: %s: not with server" % name):
            make_spec(kv, tmp_path, {"server": server, name: value})
    daemon = start_daemon(cli, tmp_path / "s.sock", tmp_path)  # serves "tiny"
    try:
        spec = make_spec(kv, tmp_path, {"server": server})
        with pytest.raises(kvtier.FailedPrecondition,
                           match="does not serve this layout") as e:
            spec.get_manager()
        assert str(e.value).endswith(_served.layout_json(spec.plan.groups[0].layout))
        assert not kv._caches  # the refused cache is closed, not kept
    finally:
        daemon.kill()
        daemon.wait(120)

