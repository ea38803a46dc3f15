"""kvtier.integrations.sglang: hybrid models (v2 pools), the copying
interface's refusals, prefix metadata and fork, against SGLang's interface as
sglang_fakes.py records it (files and commits named there).

Cases found by driving the backend through SGLang's own factory, host pools
and HiCacheFile code (issue 31): an MLA model's TP-sharded Mamba state, the
endpoint table of SGLang issue 39147, pools without flat pages on the copying
interface, the prefix of PR 39567, a backend used in a forked child.
"""

import json
import logging
import os
import signal
import struct
import sys
import time

import pytest
import torch

import kvtier
import sglang_fakes as fakes
from test_sglang import BACKEND, indices, open_backend, page_keys, sglang  # noqa: F401

WRITE_THROUGH = {"write_policy": "write_through", "disk_writer_threads": 0}


def transfer(storage, name, keys, host_indices=None, trailing=False):
    policy = storage.PoolHitPolicy.TRAILING_PAGES if trailing else storage.PoolHitPolicy.ALL_PAGES
    return storage.PoolTransfer(name=name, keys=keys, host_indices=host_indices, hit_policy=policy)


# --- An MLA model's TP-sharded side pool --------------------------------------

def test_mla_model_keeps_the_tp_rank_of_its_mamba_state(sglang, tmp_path):
    """Kimi-Linear-like: MLA latent KV (the same on every TP rank, shared) and
    Mamba state (TP-sharded: each rank its own heads). Rank 1 must never load
    rank 0's state (issue 31: it did, as a hit)."""
    MAMBA, KV = sglang.PoolName.MAMBA, sglang.PoolName.KV
    keys = page_keys(4)

    def open_rank(rank):
        kv, mamba = fakes.MLAPool(pages=8, seed=100), fakes.MambaPool(seed=200 + 10 * rank)
        backend = open_backend(sglang, tmp_path, kv, extra=WRITE_THROUGH, is_mla_model=True,
                               tp_rank=rank, tp_size=2)
        backend.register_mem_host_pool_v2(mamba, MAMBA)
        return backend, mamba

    b0, mamba0 = open_rank(0)
    assert b0.batch_set_v1(keys, indices(4, 4)) == [True] * 4
    assert b0.batch_set_v2([transfer(sglang, MAMBA, keys[-1:], torch.tensor([2]))]) == \
        {MAMBA: [True]}
    b1, mamba1 = open_rank(1)
    ranks = [(b0, mamba0), (b1, mamba1)]
    assert mamba0.slot_bytes(2) != mamba1.slot_bytes(2)
    trailing = transfer(sglang, MAMBA, ["x"], trailing=True)
    assert b1.batch_exists(keys) == 4  # rank 0's latent pages serve rank 1
    r = b1.batch_exists_v2(keys, [trailing])
    assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (0, {KV: 4})  # no state of rank 1
    before = mamba1.slot_bytes(5)
    assert b1.batch_get_v2([transfer(sglang, MAMBA, keys[-1:], torch.tensor([5]))]) == \
        {MAMBA: [False]}
    assert mamba1.slot_bytes(5) == before
    # Rank 1 backs up its own state; each rank restores its own bytes.
    assert b1.batch_set_v2([transfer(sglang, MAMBA, keys[-1:], torch.tensor([2]))]) == \
        {MAMBA: [True]}
    for backend, mamba in ranks:
        assert backend.batch_exists_v2(keys, [trailing]).kv_hit_pages == 4
        fresh = fakes.MambaPool()
        backend.register_mem_host_pool_v2(fresh, MAMBA)
        assert backend.batch_get_v2([transfer(sglang, MAMBA, keys[-1:], torch.tensor([6]))]) == \
            {MAMBA: [True]}
        assert fresh.slot_bytes(6) == mamba.slot_bytes(2)
        backend.close()


# --- SGLang issue 39147: common endpoints, not the minimum of maxima ----------

# All three KV pages present; a trailing pool of window 1 can restore the
# prefix ending at page e exactly when it holds the state of page e.
ISSUE_39147 = [  # (SWA endpoints, Mamba endpoints, the greatest common one)
    ({3}, {3}, 3),
    ({3}, {2}, 0),
    ({1, 3}, {1, 2}, 1),
]


@pytest.mark.parametrize("restorable", [False, True], ids=["001067f", "pr39267"])
@pytest.mark.parametrize("swa_ends,mamba_ends,expected", ISSUE_39147)
def test_batch_exists_v2_counts_only_endpoints_every_pool_restores(
        monkeypatch, tmp_path, restorable, swa_ends, mamba_ends, expected):
    storage, _ = fakes.install(monkeypatch, restorable=restorable)
    sys.modules.pop(BACKEND, None)
    SWA, MAMBA, KV = storage.PoolName.SWA, storage.PoolName.MAMBA, storage.PoolName.KV
    swa, mamba = fakes.MHAPool(pages=8, seed=2), fakes.MambaPool(seed=3)
    backend = open_backend(storage, tmp_path, fakes.MHAPool(pages=8, seed=1))
    backend.register_mem_host_pool_v2(swa, SWA)
    backend.register_mem_host_pool_v2(mamba, MAMBA)
    keys = page_keys(3)
    assert backend.batch_set_v1(keys, indices(3, 4)) == [True] * 3
    for end in swa_ends:
        assert backend.batch_set_v2([transfer(storage, SWA, keys[end - 1:end],
                                              indices(1, 4, end - 1))]) == {SWA: [True]}
    for end in mamba_ends:
        assert backend.batch_set_v2([transfer(storage, MAMBA, keys[end - 1:end],
                                              torch.tensor([end - 1]))]) == {MAMBA: [True]}
    pools = [transfer(storage, SWA, ["w"], trailing=True),
             transfer(storage, MAMBA, ["m"], trailing=True)]
    for order in (pools, pools[::-1]):
        r = backend.batch_exists_v2(keys, order)
        assert r.kv_hit_pages == expected
        assert r.extra_pool_hit_pages == {KV: 3, SWA: max(swa_ends), MAMBA: max(mamba_ends)}
        if restorable:
            assert r.restorable_prefix_pages == sorted(swa_ends & mamba_ends)
        else:
            assert not hasattr(r, "restorable_prefix_pages")
    if expected:  # the controller loads the state at that endpoint: every pool has it
        got = backend.batch_get_v2([
            transfer(storage, SWA, keys[expected - 1:expected], indices(1, 4, 6)),
            transfer(storage, MAMBA, keys[expected - 1:expected], torch.tensor([6]))])
        assert got == {SWA: [True], MAMBA: [True]}
        assert mamba.slot_bytes(6) == mamba.slot_bytes(expected - 1)
    backend.close()


def test_batch_exists_v2_windows_and_all_pages_pools(monkeypatch, tmp_path):
    """A trailing window of 2 pages and an all_pages pool that cuts it: the
    endpoint is one both can restore (PR 39267's ALL_PAGES truncation case)."""
    storage, _ = fakes.install(monkeypatch, restorable=True)
    sys.modules.pop(BACKEND, None)
    SWA, INDEXER = storage.PoolName.SWA, storage.PoolName.INDEXER
    backend = open_backend(storage, tmp_path, fakes.MHAPool(pages=8, seed=1))
    backend.register_mem_host_pool_v2(fakes.MHAPool(pages=8, seed=2), SWA)
    backend.register_mem_host_pool_v2(fakes.MHAPool(pages=8, heads=1, seed=3), INDEXER)
    keys = page_keys(6)
    assert backend.batch_set_v1(keys, indices(6, 4)) == [True] * 6
    for page in (0, 1, 3, 4, 5):  # SWA, window 2: endpoints 1, 2, 5, 6
        assert backend.batch_set_v2([transfer(storage, SWA, keys[page:page + 1],
                                              indices(1, 4, page))]) == {SWA: [True]}
    assert backend.batch_set_v2([transfer(storage, INDEXER, keys[:4], indices(4, 4))]) == \
        {INDEXER: [True] * 4}  # endpoints 1..4
    swa = transfer(storage, SWA, ["a", "b"], trailing=True)
    r = backend.batch_exists_v2(keys, [swa, transfer(storage, INDEXER, keys)])
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (2, [1, 2])
    assert r.extra_pool_hit_pages == {storage.PoolName.KV: 6, SWA: 6, INDEXER: 4}
    r = backend.batch_exists_v2(keys, [swa])
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (6, [1, 2, 5, 6])
    r = backend.batch_exists_v2(keys)
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (6, [1, 2, 3, 4, 5, 6])
    backend.close()


# --- The copying interface needs flat pages ------------------------------------

def test_copying_interface_refuses_pools_without_flat_pages(sglang, tmp_path, caplog):
    """interface_v1 off: SGLang's backup thread calls the pool's get_data_page,
    which the asymmetric MHA pool and MLA page_first_kv_split do not have: it
    raised there and ended the thread. Refused at registration, one log line."""
    for pool, mla in ((fakes.AsymmetricMHAPool(pages=8, seed=4), False),
                      (fakes.MLAPool(pages=8, layout="page_first_kv_split", seed=5), True)):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="kvtier"):
            with pytest.raises(kvtier.InvalidArgument, match=r"kv pool %s \(layout page_first"
                               r".*no flat pages for the copying interface.*\"interface_v1\": 1"
                               % type(pool).__name__):
                open_backend(sglang, tmp_path, pool, extra={"interface_v1": 0}, is_mla_model=mla)
        assert [r.name for r in caplog.records] == ["kvtier"]
        zero_copy = open_backend(sglang, tmp_path, pool, is_mla_model=mla)  # interface_v1 1
        assert zero_copy.batch_set_v1(page_keys(2), indices(2, 4)) == [True, True]
        zero_copy.close()
    # MLA's other layouts have flat pages: the copying interface works.
    for layout in ("page_first", "page_first_direct", "layer_first"):
        src, dst = fakes.MLAPool(pages=8, layout=layout, seed=6), fakes.MLAPool(pages=8, layout=layout)
        flat = open_backend(sglang, tmp_path, src, extra={"interface_v1": 0}, is_mla_model=True)
        keys = page_keys(3, layout[-1])
        assert flat.batch_set(keys, [src.get_data_page(i * 4) for i in range(3)]) is True
        got = flat.batch_get(keys, [dst.get_dummy_flat_data_page() for _ in keys])
        for i, page in enumerate(got):
            dst.set_from_flat_data_page(i * 4, page)
        assert [dst.page_bytes(i * 4) for i in range(3)] == [src.page_bytes(i * 4)
                                                              for i in range(3)]
        flat.close()


# --- Prefix metadata (extra_info.prefix_keys) ---------------------------------------

def block_parent(folder, key):
    """The parent recorded in the block file of `key` (DESIGN.md §4)."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if key.hex() in f]
    assert len(files) == 1, files
    with open(files[0], "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        return bytes.fromhex(json.loads(f.read(size))["__metadata__"]["parent"])


def test_prefix_keys_give_each_chain_its_parent(sglang, tmp_path):
    MAMBA = sglang.PoolName.MAMBA
    backend = open_backend(sglang, tmp_path, fakes.MHAPool(pages=8, seed=7), extra=WRITE_THROUGH)
    backend.register_mem_host_pool_v2(fakes.MambaPool(seed=8), MAMBA)
    info = sglang.HiCacheStorageExtraInfo
    keys = page_keys(6)
    assert backend.batch_set_v1(keys[:2], indices(2, 4), info()) == [True] * 2
    assert backend.batch_set_v1(keys[2:4], indices(2, 4, 2), info(prefix_keys=keys[:2])) == \
        [True] * 2
    # SGLang before PR 39567 extended the list it had handed over: a prefix
    # that already holds the batch's first page is not its parent.
    assert backend.batch_set_v1(keys[4:], indices(2, 4, 4), info(prefix_keys=keys[:5])) == \
        [True] * 2
    folder, k = tmp_path / "kvtier", backend.kvtier_key
    namespace = backend._stores["kv"].chains[0].namespace
    assert [block_parent(folder, k(key)) for key in keys] == \
        [namespace, k(keys[0]), k(keys[1]), k(keys[2]), namespace, k(keys[4])]
    # v2 calls carry the operation's prefix (PR 39567): not the page before a
    # trailing pool's key, so not its parent.
    assert backend.batch_set_v2([transfer(sglang, MAMBA, keys[5:], torch.tensor([1]))],
                                info(prefix_keys=keys[:3])) == {MAMBA: [True]}
    assert block_parent(folder, k(keys[5], MAMBA.value)) == \
        backend._stores["mamba"].chains[0].namespace
    got = backend.batch_get_v2([transfer(sglang, MAMBA, keys[5:], torch.tensor([2]))],
                               info(prefix_keys=keys[:5]))
    assert got == {MAMBA: [True]}
    for bad in (info(prefix_keys=[None]), info(prefix_keys="abc"), object()):
        assert backend.batch_set_v1(keys[:1], indices(1, 4), bad) == [True]
    backend.close()


# --- Fork ----------------------------------------------------------------------

def run_in_child(body, timeout=120):
    """Runs body() in a forked child: its return value (a str, "" for success)
    comes back through a pipe; a child that hangs past `timeout` is killed."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read)
            os.write(write, (body() or "").encode())
        except BaseException as e:  # noqa: B902 - reported to the parent
            os.write(write, ("%s: %s" % (type(e).__name__, e)).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
        return "child hung for %d s" % timeout
    with os.fdopen(read, "rb") as pipe:
        return pipe.read().decode()


@pytest.mark.fork
def test_backend_used_in_a_forked_child_reopens_there(sglang, tmp_path, caplog):
    """Python's multiprocessing forks by default on Linux: a backend opened
    in the parent (its threads running, a load done) and used in the child.
    The child reopens its caches on the folder: it loads the parent's pages
    byte for byte and stores its own, which the parent then reads."""
    src = fakes.MHAPool(pages=16, seed=95)
    writer = open_backend(sglang, tmp_path, src, extra=WRITE_THROUGH)
    keys, child_keys = page_keys(4), page_keys(3, "c")
    assert writer.batch_set_v1(keys, indices(4, 4)) == [True] * 4
    writer.close()
    dst = fakes.MHAPool(pages=16)
    backend = open_backend(sglang, tmp_path, dst, extra=WRITE_THROUGH)
    assert backend.batch_get_v1(keys[:1], indices(1, 4, 8)) == [True]  # threads at work
    parent = os.getpid()

    def child():
        with caplog.at_level(logging.WARNING, logger="kvtier"):
            if backend.batch_exists(keys) != 4:
                return "batch_exists"
            if backend.batch_get_v1(keys, indices(4, 4)) != [True] * 4:
                return "batch_get_v1"
            if fakes.raw(dst.kv_buffer[:, :16]) != fakes.raw(src.kv_buffer[:, :16]):
                return "bytes"
            fakes.fill_random(dst.kv_buffer[:, 48:60], 77)  # the child's own pages
            if backend.batch_set_v1(child_keys, indices(3, 4, 12)) != [True] * 3:
                return "batch_set_v1"
            backend.close()
        said = [r.getMessage() for r in caplog.records if "reopening" in r.getMessage()]
        expected = "opened in process %d, used in process %d" % (parent, os.getpid())
        return "" if len(said) == 1 and expected in said[0] else "log: %r" % said

    with backend._lock:  # held at fork time: the child gets a fresh one
        pid_result = run_in_child(child)
    assert pid_result == ""
    assert backend.batch_exists(keys) == 4  # the parent's caches still work
    backend.close()
    again = open_backend(sglang, tmp_path, dst, extra=WRITE_THROUGH)
    assert again.batch_get_v1(child_keys, indices(3, 4, 4)) == [True] * 3
    expected = torch.zeros_like(dst.kv_buffer[:, 48:60])
    fakes.fill_random(expected, 77)
    assert fakes.raw(dst.kv_buffer[:, 16:28]) == fakes.raw(expected)
    again.close()
