"""kvtier.Cache: store/match/load across host and disk, in-place loads, the
GIL, threads, and bad input."""

import os
import sys
import threading
import time

import numpy as np
import pytest

import kvtier
from conftest import make_blocks


def tiny_blocks(n, seed=0, model="cache"):
    layout = kvtier.Layout("tiny")
    keys, blocks, tensors = make_blocks(layout, model, list(range(16 * n)), seed=seed)
    return layout, keys, blocks, tensors


def test_store_match_load_across_host_and_disk(tmp_path):
    layout, keys, blocks, _ = tiny_blocks(8)
    size = len(blocks[0])
    assert all(len(b) == size for b in blocks)
    # RAM for two blocks: the others are written back to disk as they are evicted.
    with kvtier.Cache("tiny", host_bytes=2 * size + 100, disk_dir=tmp_path / "c") as cache:
        assert cache.layout == layout
        for k, b in zip(keys, blocks):
            cache.store(k, b)
        assert cache.match(keys) == 8
        assert cache.match(keys[:3] + [bytes(32)] + keys[4:]) == 3
        out = np.empty(size + 64, np.uint8)
        for k, b in zip(keys, blocks):
            assert cache.load_into(k, out) == size
            assert out[:size].tobytes() == b
        s = cache.stats()
        assert s["lookups"] == 8 and s["misses"] == 0
        assert s["hits_host"] + s["hits_disk"] == 8
        assert s["hits_disk"] >= 6  # at most two blocks stayed in RAM
        assert s["disk"] is not None
        # load(): the same bytes as a new bytes object, from whichever tier.
        for k, b in zip(keys, blocks):
            got = cache.load(k)
            assert type(got) is bytes and got == b
        assert cache.load(bytes(32)) is None
    # Reopened: every block comes from disk.
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=str(tmp_path / "c")) as cache:
        assert cache.match(keys) == 8
        out = np.empty(size, np.uint8)
        for k, b in zip(keys, blocks):
            assert cache.load_into(k, out) == size
            assert out.tobytes() == b
        s = cache.stats()
        assert (s["hits_disk"], s["hits_host"], s["misses"]) == (8, 0, 0)


def test_ram_only_cache_and_misses():
    _, keys, blocks, _ = tiny_blocks(2)
    cache = kvtier.Cache(kvtier.Layout("tiny"), host_bytes=1 << 20)
    assert cache.stats()["disk"] is None
    assert cache.match(keys) == 0
    out = np.full(8192, 7, np.uint8)
    assert cache.load_into(keys[0], out) == 0  # a miss is 0, not an error
    cache.store(keys[0], blocks[0])
    assert cache.match(keys) == 1
    assert cache.load_into(keys[0], memoryview(out)) == len(blocks[0])
    assert cache.load_into(keys[0], bytearray(8192)) == len(blocks[0])
    cache.close()
    assert cache.closed


def test_load_into_writes_in_place():
    _, keys, blocks, _ = tiny_blocks(1)
    n = len(blocks[0])
    with kvtier.Cache("tiny", host_bytes=1 << 20) as cache:
        cache.store(keys[0], blocks[0])
        backing = np.zeros(3 * n, np.uint8)
        out = backing[n:2 * n + 10]  # a view into a larger array
        address = out.ctypes.data
        assert cache.load_into(keys[0], out) == n
        assert out.ctypes.data == address
        assert np.shares_memory(out, backing)
        assert backing[n:2 * n].tobytes() == blocks[0]  # landed in the caller's memory
        assert not backing[:n].any() and not backing[2 * n:].any()  # nothing else touched


def test_load_tensors_into_caller_arrays(tmp_path):
    layout, keys, blocks, tensors = tiny_blocks(3, seed=5)
    size = len(blocks[0])
    with kvtier.Cache(layout, host_bytes=size + 100, disk_dir=tmp_path / "c") as cache:
        for k, b in zip(keys, blocks):
            cache.store(k, b)  # RAM holds one block: the others go to disk
        for i in (2, 0, 1):  # the last one stored is the one in RAM
            k = keys[i]
            outs = [np.zeros(t.shape, t.numpy_dtype) for t in layout.tensors()]
            addresses = [o.ctypes.data for o in outs]
            assert cache.load_tensors(k, outs) is True
            assert [o.ctypes.data for o in outs] == addresses  # filled in place
            assert [o.tobytes() for o in outs] == [t.tobytes() for t in tensors[i]]
        s = cache.stats()
        assert (s["hits_host"], s["hits_disk"]) == (1, 2)
        # A dict by name, byte views of a larger pool: all the same.
        pool = np.zeros(4 * layout.block_bytes, np.uint8)
        views = {}
        for j, t in enumerate(layout.tensors()):
            views[t.name] = pool[j * t.nbytes:(j + 1) * t.nbytes]
        assert cache.load_tensors(keys[1], views) is True
        assert pool[:layout.block_bytes].tobytes() == b"".join(t.tobytes() for t in tensors[1])
        assert not pool[layout.block_bytes:].any()
        # A miss leaves the arrays alone.
        outs = [np.full(t.shape, 3, t.numpy_dtype) for t in layout.tensors()]
        assert cache.load_tensors(bytes(32), outs) is False
        assert all((o == 3).all() for o in outs)
        # Wrong shapes or dtypes are refused before anything is read.
        bad = [np.zeros(t.shape, t.numpy_dtype) for t in layout.tensors()]
        with pytest.raises(kvtier.InvalidArgument, match=r"tensors\[1\].*bytes"):
            cache.load_tensors(keys[0], bad[:1] + [np.zeros(5, np.float16)] + bad[2:])
        with pytest.raises(kvtier.InvalidArgument, match="element size 4"):
            cache.load_tensors(keys[0], bad[:3] + [np.zeros((2, 16, 8), np.float32)])
        with pytest.raises(kvtier.InvalidArgument, match="writable"):
            cache.load_tensors(keys[0], bad[:3] + [bytes(layout.tensors()[3].nbytes)])
        with pytest.raises(kvtier.InvalidArgument, match="4 tensors"):
            cache.load_tensors(keys[0], bad[:3])


def test_load_many_tensors_copies_each_block_into_its_own_buffers(tmp_path):
    layout, keys, blocks, tensors = tiny_blocks(6, seed=11)
    size = len(blocks[0])
    # RAM for two blocks: the other four are read from disk, in one batch,
    # and copied on the disk tier's read threads.
    with kvtier.Cache(layout, host_bytes=2 * size + 100, disk_dir=tmp_path / "c") as cache:
        for k, b in zip(keys, blocks):
            cache.store(k, b)
        cache.flush()
        outs = [[np.zeros(t.shape, t.numpy_dtype) for t in layout.tensors()] for _ in keys]
        missed = [np.full(t.shape, 3, t.numpy_dtype) for t in layout.tensors()]
        addresses = [[o.ctypes.data for o in per] for per in outs]
        got = cache.load_many_tensors(keys + [bytes(32)], outs + [missed])
        assert got == [True] * 6 + [False]
        assert [[o.ctypes.data for o in per] for per in outs] == addresses  # in place
        for i in range(6):
            assert [o.tobytes() for o in outs[i]] == [t.tobytes() for t in tensors[i]], i
        assert all((o == 3).all() for o in missed)  # a miss leaves its buffers alone
        s = cache.stats()
        assert (s["hits_host"], s["hits_disk"], s["misses"]) == (2, 4, 1)
        # A dict by name of byte views into one pool, as an engine's pages.
        pool = np.zeros(3 * layout.block_bytes, np.uint8)
        per_key = []
        for b in range(2):
            base = b * layout.block_bytes
            per_key.append({t.name: pool[base + j * t.nbytes:base + (j + 1) * t.nbytes]
                            for j, t in enumerate(layout.tensors())})
        assert cache.load_many_tensors([keys[4], keys[1]], per_key) == [True, True]
        want = b"".join(t.tobytes() for t in tensors[4] + tensors[1])
        assert pool[:2 * layout.block_bytes].tobytes() == want
        assert not pool[2 * layout.block_bytes:].any()
        assert cache.load_many_tensors([], []) == []
        # Every buffer is checked before anything is read: no lookup counted.
        lookups = cache.stats()["lookups"]
        good = [np.zeros(t.shape, t.numpy_dtype) for t in layout.tensors()]
        short = good[:1] + [np.zeros(5, np.float16)] + good[2:]
        with pytest.raises(kvtier.InvalidArgument, match=r"^outs\[1\]: tensors\[1\].*bytes"):
            cache.load_many_tensors(keys[:2], [good, short])
        with pytest.raises(kvtier.InvalidArgument, match=r"outs\[0\]: .*writable"):
            cache.load_many_tensors(keys[:1], [good[:3] + [bytes(layout.tensors()[3].nbytes)]])
        with pytest.raises(kvtier.InvalidArgument, match="2 entries for 1 keys"):
            cache.load_many_tensors(keys[:1], [good, good])
        with pytest.raises(kvtier.InvalidArgument, match="one list"):
            cache.load_many_tensors(keys[:1], {"a": good})
        assert cache.stats()["lookups"] == lookups
        assert all(not o.any() for o in good)


def test_load_many_tensors_prefix_group_writes_the_leading_run_only(tmp_path):
    layout, keys, blocks, tensors = tiny_blocks(8, seed=12)
    size = len(blocks[0])
    # RAM for one block: the rest land from the disk tier's read threads, in
    # any order, and wait for their turn.
    with kvtier.Cache(layout, host_bytes=size + 100, disk_dir=tmp_path / "c") as cache:
        for k, b in zip(keys, blocks):
            cache.store(k, b)
        cache.flush()

        def fresh(n):
            return [[np.full(t.shape, 7, t.numpy_dtype) for t in layout.tensors()]
                    for _ in range(n)]

        def written(per):
            return [i for i, p in enumerate(per) if not all((o == 7).all() for o in p)]

        miss = bytes(32)
        # Groups of 2: [0 1] [2 3] [4 miss] [6 7]: two groups copied, the third
        # (half found) and the fourth (after it) not written at all.
        ks = keys[:4] + [keys[4], miss] + keys[6:8]
        outs = fresh(8)
        assert cache.load_many_tensors(ks, outs, prefix_group=2) == [True] * 4 + [False] * 4
        assert written(outs) == [0, 1, 2, 3]
        for i in range(4):
            assert [o.tobytes() for o in outs[i]] == [t.tobytes() for t in tensors[i]], i
        # Groups of 1: the run ends at the first miss.
        outs = fresh(5)
        got = cache.load_many_tensors([keys[7], keys[6], miss, keys[5], keys[4]], outs,
                                      prefix_group=1)
        assert got == [True, True, False, False, False]
        assert written(outs) == [0, 1]
        # A group larger than the batch: all or nothing; no miss: every block.
        outs = fresh(3)
        assert cache.load_many_tensors(keys[:2] + [miss], outs, prefix_group=4) == [False] * 3
        assert written(outs) == []
        outs = fresh(8)
        assert cache.load_many_tensors(keys, outs, prefix_group=3) == [True] * 8
        assert written(outs) == list(range(8))
        # Without it, every block found is written, past a miss too.
        outs = fresh(3)
        assert cache.load_many_tensors([keys[0], miss, keys[2]], outs) == [True, False, True]
        assert written(outs) == [0, 2]
        outs = fresh(2)  # a group as large as an int64 holds: the whole batch
        assert cache.load_many_tensors(keys[:2], outs, prefix_group=2**63 - 1) == [True] * 2
        assert written(outs) == [0, 1]
        for bad in (-1, 2**63, 2**80):
            with pytest.raises(kvtier.InvalidArgument, match="prefix_group"):
                cache.load_many_tensors(keys[:1], fresh(1), prefix_group=bad)


def test_store_tensors_equals_encode_and_store(tmp_path):
    layout, keys, blocks, tensors = tiny_blocks(2, seed=9)
    chain = kvtier.KeyChain("cache", layout)
    with kvtier.Cache(layout, host_bytes=1 << 20) as cache:
        cache.store_tensors(keys[1], keys[0], chain.namespace, tensors[1],
                            created_at=1_700_000_000)
        out = np.empty(len(blocks[1]), np.uint8)
        assert cache.load_into(keys[1], out) == len(blocks[1])
        assert out.tobytes() == blocks[1]
        with pytest.raises(kvtier.InvalidArgument, match="tensors"):
            cache.store_tensors(keys[0], chain.namespace, chain.namespace, tensors[0][:2])


def test_refuses_blocks_that_do_not_match():
    _, keys, blocks, _ = tiny_blocks(2)
    with kvtier.Cache("tiny", host_bytes=1 << 20) as cache:
        with pytest.raises(kvtier.InvalidArgument):
            cache.store(keys[1], blocks[0])  # the header names keys[0]
        with pytest.raises(kvtier.InvalidArgument):
            cache.store(keys[0], b"not a block file")
    qwen_layout = kvtier.Layout("tiny", block_tokens=8)
    with kvtier.Cache(qwen_layout, host_bytes=1 << 20) as cache:
        with pytest.raises(kvtier.InvalidArgument):
            cache.store(keys[0], blocks[0])  # another layout signature


def test_bad_input_raises_clear_errors(tmp_path):
    _, keys, blocks, _ = tiny_blocks(1)
    n = len(blocks[0])
    cache = kvtier.Cache("tiny", host_bytes=1 << 20)
    cache.store(keys[0], blocks[0])
    cases = [
        (lambda: cache.load_into(keys[0], np.empty(n - 1, np.uint8)),
         r"smaller than block [0-9a-f]{64} \(%d bytes\)" % n),
        (lambda: cache.load_into(keys[0], np.empty(n, np.float32)), "byte buffer"),
        (lambda: cache.load_into(keys[0], np.empty(n, np.uint16)), "byte buffer"),
        (lambda: cache.load_into(keys[0], np.empty(2 * n, np.uint8)[::2]), "C-contiguous"),
        (lambda: cache.load_into(keys[0], blocks[0] + b"x" * 10), "writable"),
        (lambda: cache.load_into(keys[0], 12345), "buffer"),
        (lambda: cache.load_into(keys[0].hex(), np.empty(n, np.uint8)), "got str"),
        (lambda: cache.load_into(1234, np.empty(n, np.uint8)), "got int"),
        (lambda: cache.load_into(keys[0][:31], np.empty(n, np.uint8)), "expected 32 bytes"),
        (lambda: cache.store("key", blocks[0]), "got str"),
        (lambda: cache.store(keys[0], "block text"), "got str"),
        (lambda: cache.match(keys[0]), "list of 32-byte keys"),
        (lambda: cache.match([keys[0], "x"]), r"keys\[1\]"),
        (lambda: kvtier.Cache("tiny", host_bytes=0), "host_bytes"),
        (lambda: kvtier.Cache("tiny", host_bytes=-5), "host_bytes"),
        (lambda: kvtier.Cache("tiny", host_bytes="1G"), "host_bytes"),
        (lambda: kvtier.Cache("tiny", host_bytes=2 ** 70), "64 bits"),
        (lambda: kvtier.Cache("no-such-preset", host_bytes=1), "layout"),
        (lambda: kvtier.Cache("tiny", host_bytes=1, disk_dir=5), "disk_dir"),
        (lambda: kvtier.Cache("tiny", host_bytes=1, remote=5), "remote"),
    ]
    for call, needle in cases:
        with pytest.raises(kvtier.InvalidArgument, match=needle):
            call()
    with pytest.raises(kvtier.InvalidArgument, match="host_bytes: is required"):
        kvtier.Cache("tiny")  # host_bytes is a required option
    with pytest.raises(kvtier.NotFound):
        kvtier.Cache(str(tmp_path / "missing.json"), host_bytes=1 << 20)
    # The failed calls changed nothing.
    out = np.empty(n, np.uint8)
    assert cache.load_into(keys[0], out) == n and out.tobytes() == blocks[0]
    cache.close()
    cache.close()  # idempotent
    for call in (lambda: cache.load_into(keys[0], out), lambda: cache.store(keys[0], blocks[0]),
                 lambda: cache.load(keys[0]), lambda: cache.load_tensors(keys[0], []),
                 lambda: cache.match(keys), cache.flush, cache.stats):
        with pytest.raises(kvtier.FailedPrecondition, match="closed"):
            call()


def test_two_caches_share_blocks_over_tls(tls_server):
    url, folder = tls_server
    model = "remote-tls-%d-%d" % (os.getpid(), time.time_ns())
    layout = kvtier.Layout("tiny")
    keys, blocks, _ = make_blocks(layout, model, list(range(16 * 3)))
    ca = os.path.join(folder, "ca.crt")
    with kvtier.Cache("tiny", host_bytes=1 << 20, remote=url, remote_tls_ca_file=ca) as a, \
            kvtier.Cache("tiny", host_bytes=1 << 20, remote=url, remote_tls_ca_file=ca) as b:
        for k, blk in zip(keys, blocks):
            a.store(k, blk)
        a.flush()
        assert a.stats()["remote"]["stored"] == 3
        assert b.match(keys) == 3
        for k, blk in zip(keys, blocks):
            assert b.load(k) == blk
        assert b.stats()["remote"]["tls_failures"] == 0
        for k in keys:
            assert a.erase(k)
    # A CA that did not sign the server's certificate: the cache does not open.
    with pytest.raises(kvtier.InvalidArgument, match="certificate rejected"):
        kvtier.Cache("tiny", host_bytes=1 << 20, remote=url,
                     remote_tls_ca_file=os.path.join(folder, "other-ca.crt"))
    with pytest.raises(kvtier.InvalidArgument, match="remote_tls_ca_file: '/nonexistent/ca.pem'"):
        kvtier.Cache("tiny", host_bytes=1 << 20, remote=url, remote_tls_ca_file="/nonexistent/ca.pem")


def test_two_caches_share_blocks_through_redis(tmp_path, redis_url):
    # A model name no other run uses: the keys are new to the shared server.
    model = "remote-%d-%d" % (os.getpid(), time.time_ns())
    layout = kvtier.Layout("tiny")
    keys, blocks, _ = make_blocks(layout, model, list(range(16 * 6)))
    size = len(blocks[0])
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=tmp_path / "a",
                      remote=redis_url) as a, \
            kvtier.Cache("tiny", host_bytes=1 << 20, remote=redis_url) as b:
        assert b.match(keys) == 0
        for k, blk in zip(keys, blocks):
            a.store(k, blk)
        a.flush()  # the remote queue too
        s = a.stats()
        assert s["remote_puts_queued"] == 6 and s["remote_puts_dropped"] == 0
        assert s["remote"]["stored"] == 6
        # Host b never saw these blocks: they come from Redis, verified.
        assert b.match(keys) == 6
        assert b.stats()["match_remote_found"] == 6
        out = np.empty(size, np.uint8)
        assert b.load_into(keys[0], out) == size and out.tobytes() == blocks[0]
        for k, blk in zip(keys[1:], blocks[1:]):
            assert b.load(k) == blk
        s = b.stats()
        assert (s["hits_remote"], s["hits_host"], s["misses"]) == (6, 0, 0)
        assert s["remote_promotions"] == 6
        # Promoted: the second load is a host hit, Redis is not asked again.
        for k, blk in zip(keys, blocks):
            assert b.load(k) == blk
        s = b.stats()
        assert (s["hits_remote"], s["hits_host"]) == (6, 6)
        assert s["remote"]["lookups"] == 6


def test_remote_url_errors():
    for bad, needle in (("http://127.0.0.1:1", "remote.url"), ("", "remote")):
        with pytest.raises(kvtier.InvalidArgument, match=needle):
            kvtier.Cache("tiny", host_bytes=1 << 20, remote=bad)


def test_dead_remote_server_is_misses_not_errors():
    # Nothing listens on port 1: the cache opens, Redis lookups are misses.
    with kvtier.Cache("tiny", host_bytes=1 << 20, remote="redis://127.0.0.1:1") as c:
        _, keys, blocks, _ = tiny_blocks(2, model="dead-remote")
        c.store(keys[0], blocks[0])
        assert c.load(keys[0]) == blocks[0]
        assert c.load(keys[1]) is None
        assert c.match(keys) == 1
        s = c.stats()
        assert (s["hits_host"], s["misses"], s["remote_misses"]) == (1, 1, 1)
        assert s["remote"]["misses_unavailable"] == 1


def test_other_thread_runs_during_a_long_load(tmp_path):
    # 3 MiB blocks; each load_into copies one from RAM or disk.
    layout = kvtier.Layout("qwen2.5-0.5b")
    keys, blocks, _ = make_blocks(layout, "gil", list(range(2 * layout.block_tokens)))
    cache = kvtier.Cache(layout, host_bytes=64 << 20, disk_dir=tmp_path / "c")
    for k, b in zip(keys, blocks):
        cache.store(k, b)
    cache.flush()
    out = np.empty(len(blocks[0]), np.uint8)

    progress = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            progress[0] += 1
            os.sched_yield()  # a blocking call: hands the GIL back at once

    old = sys.getswitchinterval()
    # With a 1000 s switch interval the interpreter never takes the GIL from
    # this thread: the spinner runs only while this thread releases it.
    sys.setswitchinterval(1000)
    spinner = threading.Thread(target=spin)
    try:
        spinner.start()
        # Control: pure Python holds the GIL, so the spinner cannot move.
        before = progress[0]
        total = 0
        for i in range(200_000):
            total += i
        assert progress[0] == before
        # A load releases the GIL: the spinner moves while one is running.
        before = progress[0]
        loads = 0
        while progress[0] == before and loads < 5000:
            assert cache.load_into(keys[loads % 2], out) == len(blocks[0])
            loads += 1
        assert progress[0] > before, "no other thread ran during %d loads" % loads
    finally:
        stop.set()
        sys.setswitchinterval(old)
        spinner.join()
        cache.close()


def test_threads_store_different_bytes_for_one_key(tmp_path):
    """Threads store the same key with different bytes (other created_at):
    every load returns exactly one of the versions, never a mix."""
    layout = kvtier.Layout("tiny")
    versions = [make_blocks(layout, "race", list(range(16)), seed=7, created_at=t)[1][0]
                for t in range(1_700_000_000, 1_700_000_004)]
    key = kvtier.block_keys("race", layout.signature, 16, range(16))[0]
    assert len(set(versions)) == 4
    cache = kvtier.Cache(layout, host_bytes=1 << 20, disk_dir=tmp_path / "c")
    errors = []
    seen = set()

    def writer(v):
        try:
            for _ in range(50):
                cache.store(key, versions[v])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def reader():
        out = np.empty(len(versions[0]), np.uint8)
        try:
            for _ in range(200):
                n = cache.load_into(key, out)
                if n:
                    seen.add(out[:n].tobytes())
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(v,)) for v in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert seen and seen <= set(versions)
    cache.close()


def test_close_while_other_threads_load():
    _, keys, blocks, _ = tiny_blocks(4)
    cache = kvtier.Cache("tiny", host_bytes=1 << 20)
    for k, b in zip(keys, blocks):
        cache.store(k, b)
    started = threading.Barrier(3)
    outcomes = []

    def loader():
        out = np.empty(8192, np.uint8)
        started.wait()
        for i in range(100_000):
            try:
                n = cache.load_into(keys[i % 4], out)
                assert out[:n].tobytes() == blocks[i % 4]
            except kvtier.FailedPrecondition:
                outcomes.append("closed")
                return
        outcomes.append("never closed")

    threads = [threading.Thread(target=loader) for _ in range(2)]
    for t in threads:
        t.start()
    started.wait()
    cache.close()
    for t in threads:
        t.join()
    assert outcomes == ["closed", "closed"]


def test_store_refuses_a_block_that_fails_its_own_checksum(tmp_path):
    # Issue 33 item 7: such a block was stored and every RAM hit handed it out.
    layout, keys, blocks, _ = tiny_blocks(1, model="checksum")
    bad = bytearray(blocks[0])
    bad[-1] ^= 1  # the last byte of the data section
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=tmp_path / "c") as cache:
        with pytest.raises(kvtier.InvalidArgument, match="bad block file: .*checksum"):
            cache.store(keys[0], bad)
        assert cache.contains(keys[0]) is None and cache.load(keys[0]) is None
        cache.store(keys[0], blocks[0])
        assert cache.load(keys[0]) == blocks[0]
    # Off, the header check alone remains (the caller vouches for the data).
    with kvtier.Cache("tiny", host_bytes=1 << 20, verify_store_checksums=False) as cache:
        cache.store(keys[0], bad)
        assert cache.contains(keys[0]) == "host"


def test_bad_calls_are_invalid_argument_not_type_error():
    # Issue 33 item 11: pybind11's bare TypeErrors.
    with pytest.raises(kvtier.InvalidArgument,
                       match=r"Cache\(\): the layout is the only positional argument \(got 2\)"):
        kvtier.Cache("tiny", 1 << 20)
    with pytest.raises(kvtier.InvalidArgument, match="layout: is required"):
        kvtier.Cache(host_bytes=1 << 20)
    with pytest.raises(kvtier.InvalidArgument, match="name: is required"):
        kvtier.Layout.attention(layers=2, kv_heads=2, head_dim=16, dtype="F16", block_tokens=16)
    with pytest.raises(kvtier.InvalidArgument, match="block_tokens: is required"):
        kvtier.Layout.attention("a", 2, 2, 16, "F16")
    with pytest.raises(kvtier.InvalidArgument, match=r"layers: -1 is not in 0\.\.4294967295"):
        kvtier.Layout.attention("a", -1, 2, 16, "F16", 16)
    with pytest.raises(kvtier.InvalidArgument, match="head_dim: expected an int, got str"):
        kvtier.Layout.attention("a", 2, 2, "16", "F16", 16)
    with pytest.raises(kvtier.InvalidArgument, match="dtype: expected a str"):
        kvtier.Layout.attention("a", 2, 2, 16, 2, 16)
    made = kvtier.Layout.attention("a", 2, 2, 16, "F16", 16)
    assert made.signature == kvtier.Layout.attention(name="a", layers=2, kv_heads=2, head_dim=16,
                                                     dtype="F16", block_tokens=16).signature
    with pytest.raises(kvtier.InvalidArgument, match="text: expected a str"):
        kvtier.Layout.from_json(b"{}")
    with pytest.raises(kvtier.InvalidArgument, match="options: expected a dict"):
        kvtier._kvtier._check_options([("host_bytes", 1)])
    with pytest.raises(kvtier.InvalidArgument, match=r"block_tokens: 0 is not in 1\.\.4294967295"):
        kvtier.block_keys("m", "sig", 0, [1, 2])
    with pytest.raises(kvtier.InvalidArgument, match="block_tokens: expected an int, got float"):
        kvtier.Layout("tiny", 16.0)
