"""kvtier.Cache: load_many, contains, erase, clear and prometheus, per tier
(host only, disk, Redis), and a folder shared with another process; the
Prometheus text of the cache and of `kvtier stats --prometheus`, every
family with its HELP line."""

import os
import re
import subprocess
import sys
import textwrap
import threading
import uuid

import numpy as np
import pytest

import kvtier
from conftest import make_blocks


def tiny_blocks(n, seed=0, model="ops"):
    layout = kvtier.Layout("tiny")
    keys, blocks, tensors = make_blocks(layout, model, list(range(16 * n)), seed=seed)
    return layout, keys, blocks, tensors


def prometheus_families(text):
    r"""{name: (type, help)} of Prometheus text (format 0.0.4), the help
    unescaped. Fails at the first line that breaks how kvtier writes it:
    every family opens with `# HELP NAME TEXT` and, on the very next line,
    `# TYPE NAME TYPE`; TEXT is not empty and escapes only \\ and \n (a raw
    newline in it would leave a line between the two); a family comes once;
    every other line is a sample of the family opened last."""
    assert text.endswith("\n"), "no final newline: %r" % text[-80:]
    lines = text[:-1].split("\n")
    families, family, kind = {}, None, None
    i = 0
    while i < len(lines):
        where = "line %d: %r" % (i + 1, lines[i])
        if lines[i].startswith("# HELP "):
            name, _, help_ = lines[i][7:].partition(" ")
            assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name), "a metric name? " + where
            assert re.fullmatch(r"(?:[^\\]|\\[\\n])+", help_), "empty or bad escape: " + where
            assert name not in families, "a family printed twice: " + where
            m = re.fullmatch(r"# TYPE (\S+) (counter|gauge|histogram)",
                             lines[i + 1] if i + 1 < len(lines) else "")
            assert m and m.group(1) == name, "HELP not followed by its TYPE: " + where
            family, kind = name, m.group(2)
            families[name] = (kind, re.sub(r"\\([\\n])",
                                           lambda e: "\n" if e.group(1) == "n" else "\\", help_))
            i += 2
            continue
        assert not lines[i].startswith("#"), "TYPE without its HELP right before: " + where
        sample = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)", lines[i])
        assert family is not None and sample, where
        ours = ({family + "_bucket", family + "_sum", family + "_count"}
                if kind == "histogram" else {family})
        assert sample.group(1) in ours, "not a sample of %s: %s" % (family, where)
        float(sample.group(3))
        i += 1
    return families


def test_prometheus_families_finds_a_family_without_help():
    good = ("# HELP a_total calls, a \\\\ and a \\n\n# TYPE a_total counter\na_total 1\n"
            "# HELP h_seconds time\n# TYPE h_seconds histogram\n"
            'h_seconds_bucket{le="+Inf"} 1\nh_seconds_sum 0.5\nh_seconds_count 1\n')
    assert prometheus_families(good) == {"a_total": ("counter", "calls, a \\ and a \n"),
                                         "h_seconds": ("histogram", "time")}
    for bad in ["# TYPE a gauge\na 1\n",  # no HELP
                "# HELP a two\nlines\n# TYPE a gauge\na 1\n",  # a raw newline in the help
                "# HELP a x\\y\n# TYPE a gauge\na 1\n",  # a backslash not escaped
                "# HELP a \n# TYPE a gauge\na 1\n",  # an empty help
                "# HELP a x\n# TYPE b gauge\nb 1\n",  # another family's TYPE
                "# HELP a x\n# TYPE a gauge\nb 1\n",  # a sample of no family
                "# HELP a x\n# TYPE a gauge\na 1"]:  # no final newline
        with pytest.raises(AssertionError):
            prometheus_families(bad)


def test_load_many_fills_the_callers_buffers(tmp_path):
    _, keys, blocks, _ = tiny_blocks(6)
    size = len(blocks[0])
    # RAM for two blocks: the other four are read from disk, in one batch.
    with kvtier.Cache("tiny", host_bytes=2 * size + 100, disk_dir=tmp_path / "c") as cache:
        for k, b in zip(keys, blocks):
            cache.store(k, b)
        cache.flush()
        pool = np.zeros(7 * size, np.uint8)
        outs = [pool[i * size:(i + 1) * size] for i in range(6)] + [bytearray(size)]
        addresses = [o.ctypes.data for o in outs[:6]]
        got = cache.load_many(keys + [bytes(32)], outs)
        assert got == [size] * 6 + [0]  # the last key is a miss
        assert [o.ctypes.data for o in outs[:6]] == addresses  # in place
        assert pool[:6 * size].tobytes() == b"".join(blocks)
        assert not any(outs[6])
        s = cache.stats()
        assert s["hits_disk"] >= 4 and s["misses"] == 1
        assert cache.load_many([], []) == []
        with pytest.raises(kvtier.InvalidArgument, match="2 buffers for 1 keys"):
            cache.load_many(keys[:1], outs[:2])
        with pytest.raises(kvtier.InvalidArgument, match="writable"):
            cache.load_many(keys[:1], [bytes(size)])
        with pytest.raises(kvtier.InvalidArgument, match="byte buffer"):
            cache.load_many(keys[:1], [np.zeros(size, np.float32)])
        with pytest.raises(kvtier.InvalidArgument, match="smaller"):
            cache.load_many(keys[:2], [bytearray(size), bytearray(10)])
        with pytest.raises(kvtier.InvalidArgument, match="list of writable buffers"):
            cache.load_many(keys[:1], bytearray(size))


def test_prefaulted_read_buffers_serve_the_cold_restore(tmp_path):
    # read_buffer_prefault_bytes: buffers for 6 blocks (tiny: 4096 data
    # bytes each) faulted in at open; the cold restore reads into them.
    _, keys, blocks, _ = tiny_blocks(6)
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=tmp_path / "c") as cache:
        for k, b in zip(keys, blocks):
            cache.store(k, b)
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=tmp_path / "c",
                      read_buffer_prefault_bytes=6 * 4096) as cache:
        s = cache.stats()
        assert s["read_buffers_prefaulted"] == 6
        assert s["read_buffers_reused"] == 0
        outs = [bytearray(len(b)) for b in blocks]
        assert cache.load_many(keys, outs) == [len(b) for b in blocks]
        assert [bytes(o) for o in outs] == blocks
        s = cache.stats()
        assert s["hits_disk"] == 6 and s["read_buffers"] == 6 and s["read_buffers_reused"] == 6
    with pytest.raises(kvtier.InvalidArgument, match="read_buffer_prefault_bytes: .* raise "
                                                     "read_buffer_pool_bytes too"):
        kvtier.Cache("tiny", host_bytes=1 << 20, read_buffer_pool_bytes="1MiB",
                     read_buffer_prefault_bytes="2MiB")
    # More than the machine has (64 TiB): refused at open before a buffer
    # is faulted in, naming MemAvailable, instead of growing until the OOM
    # killer ends the process (issue 33 item 8).
    with pytest.raises(kvtier.ResourceExhausted,
                       match=r"read_buffer_prefault_bytes: .* bytes of RAM; \d+ are available "
                             r"\(MemAvailable\)"):
        kvtier.Cache("tiny", host_bytes=1 << 20, read_buffer_pool_bytes="64TiB",
                     read_buffer_prefault_bytes="64TiB")


def test_load_many_releases_the_gil(tmp_path):
    _, keys, blocks, _ = tiny_blocks(32)
    size = len(blocks[0])
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=tmp_path / "c") as cache:
        for k, b in zip(keys, blocks):
            cache.store(k, b)
        outs = [bytearray(size) for _ in keys]
        ticks = []
        stop = threading.Event()

        def count():
            while not stop.is_set():
                ticks.append(1)

        t = threading.Thread(target=count)
        t.start()
        try:
            for _ in range(50):
                assert cache.load_many(keys, outs) == [size] * len(keys)
        finally:
            stop.set()
            t.join()
        assert ticks  # the other thread ran while the loads did
        assert b"".join(outs) == b"".join(blocks)


def test_contains_erase_clear_host_only():
    _, keys, blocks, _ = tiny_blocks(4)
    with kvtier.Cache("tiny", host_bytes=1 << 20) as cache:
        for k, b in zip(keys, blocks):
            cache.store(k, b)
        assert [cache.contains(k) for k in keys] == ["host"] * 4
        assert cache.contains(bytes(32)) is None
        assert cache.stats()["lookups"] == 0  # reads no data
        assert cache.erase(keys[0]) is True
        assert cache.erase(keys[0]) is False
        assert cache.contains(keys[0]) is None
        assert cache.load(keys[0]) is None
        assert cache.clear() == 3
        assert [cache.contains(k) for k in keys] == [None] * 4
        assert cache.match(keys[1:]) == 0
        text = cache.prometheus()
        assert isinstance(text, str)
        families = prometheus_families(text)
        # The cache's, the host tier's and its budget's: no disk, no remote.
        assert len(families) == 72
        assert all(re.match("kvtier_(cache|host)_", n) for n in families)
        assert families["kvtier_cache_stores_total"] == ("counter", "blocks accepted by Store()")
        assert families["kvtier_cache_load_latency_seconds"] == (
            "histogram", "time from a Load() call until its future is ready, in seconds")
        assert "\nkvtier_cache_stores_total 4\n" in text
    with pytest.raises(kvtier.FailedPrecondition):
        cache.contains(keys[0])
    with pytest.raises(kvtier.InvalidArgument):
        kvtier.Cache("tiny", host_bytes=1 << 20).contains(b"short")


def test_contains_erase_clear_disk_keeps_other_layouts(tmp_path, cli):
    _, keys, blocks, _ = tiny_blocks(5)
    size = len(blocks[0])
    other = kvtier.Layout("tiny", block_tokens=8)  # another block size: another signature
    okeys, oblocks, _ = make_blocks(other, "ops", list(range(8 * 3)))
    folder = tmp_path / "shared"
    with kvtier.Cache("tiny", host_bytes=size + 100, disk_dir=folder) as cache, \
            kvtier.Cache(other, host_bytes=1 << 20, disk_dir=folder) as o:
        for k, b in zip(okeys, oblocks):
            o.store(k, b)
        o.flush()
        for k, b in zip(keys, blocks):
            cache.store(k, b)
        cache.flush()
        assert cache.contains(keys[-1]) == "host"
        assert [cache.contains(k) for k in keys[:-1]] == ["disk"] * 4
        assert cache.erase(keys[0]) is True
        assert cache.contains(keys[0]) is None
        assert cache.clear() == 4
        assert [cache.contains(k) for k in keys] == [None] * 5
        assert [o.contains(k) for k in okeys] == ["host"] * 3
        families = prometheus_families(cache.prometheus())
        assert len(families) == 72 + 37  # and the disk tier's
        assert families["kvtier_disk_signature_blocks"][0] == "gauge"
    # The other layout's files survived the clear.
    with kvtier.Cache(other, host_bytes=1 << 20, disk_dir=folder) as o:
        assert [o.contains(k) for k in okeys] == ["disk"] * 3
        assert [o.load(k) for k in okeys] == oblocks
    # `kvtier stats --prometheus` of the folder: the index's gauges and what
    # the scan finds; with --layout also the compatible ones.
    folder_gauges = {"kvtier_disk_" + n for n in [
        "entries", "bytes", "allocated_bytes", "quarantine_files", "signature_blocks",
        "signature_bytes", "quarantine_bytes", "temp_files", "foreign_files"]}
    for args, judged in [([], set()), (["--layout", "tiny"],
                                       {"kvtier_disk_compatible_entries",
                                        "kvtier_disk_compatible_bytes"})]:
        text = subprocess.run([cli, "stats", str(folder), "--prometheus"] + args, check=True,
                              capture_output=True, text=True).stdout
        families = prometheus_families(text)
        assert set(families) == folder_gauges | judged, text
        assert all(t == "gauge" and h for t, h in families.values())
        assert "\nkvtier_disk_entries 3\n" in text


CHILD = textwrap.dedent("""
    import sys
    import kvtier
    folder, keys_hex = sys.argv[1], sys.argv[2].split(",")
    keys = [bytes.fromhex(h) for h in keys_hex]
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=folder) as c:
        seen = [c.contains(k) for k in keys]
        loaded = [c.load(k) is not None for k in keys]
        print(",".join(str(s) for s in seen), ",".join(str(x) for x in loaded))
""")


def run_child(folder, keys):
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), ",".join(k.hex() for k in keys)],
                         check=True, capture_output=True, text=True, env=os.environ.copy())
    seen, loaded = out.stdout.split()
    return seen.split(","), loaded.split(",")


def test_shared_folder_with_another_process(tmp_path):
    _, keys, blocks, _ = tiny_blocks(4)
    folder = tmp_path / "shared"
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=folder) as a:
        for k, b in zip(keys, blocks):
            a.store(k, b)
        a.flush()
        # Process B sees what A stored...
        assert run_child(folder, keys) == (["disk"] * 4, ["True"] * 4)
        # ... and stops seeing what A erased or cleared.
        assert a.erase(keys[0]) is True
        assert run_child(folder, keys) == (["None"] + ["disk"] * 3, ["False"] + ["True"] * 3)
        assert a.clear() == 3
        assert run_child(folder, keys) == (["None"] * 4, ["False"] * 4)


def test_erase_and_clear_reach_redis(redis_url):
    # A prefix of its own: clear() erases every tiny block under its prefix,
    # and other tests share the server.
    run = uuid.uuid4().hex
    _, keys, blocks, _ = tiny_blocks(4, model="ops-" + run)
    _, only_b, only_b_blocks, _ = tiny_blocks(1, model="ops-b-" + run)
    size = len(blocks[0])
    opts = {"host_bytes": 1 << 20, "remote": redis_url, "remote_prefix": "ops-" + run + ":"}
    with kvtier.Cache("tiny", **opts) as a, kvtier.Cache("tiny", **opts) as b:
        for k, b_ in zip(keys, blocks):
            a.store(k, b_)
        a.flush()
        assert [b.contains(k) for k in keys] == ["remote"] * 4
        outs = [bytearray(size) for _ in keys]
        assert b.load_many(keys, outs) == [size] * 4  # from Redis, in one batch
        assert [bytes(o) for o in outs] == blocks
        assert b.contains(keys[0]) == "host"  # promoted
        assert a.erase(keys[0]) is True  # A's RAM and Redis; B's RAM keeps its copy
        assert a.contains(keys[0]) is None
        assert b.erase(keys[0]) is True and b.contains(keys[0]) is None
        b.store(only_b[0], only_b_blocks[0])  # a block A never held
        b.flush()
        # A's RAM held 3: erased in Redis too; B's block is found by the
        # scan of Redis (same layout, same prefix) and erased there.
        assert a.clear() == 4
        assert [a.contains(k) for k in keys + only_b] == [None] * 5
        assert b.erase(keys[1]) is True  # B's RAM copy
        assert b.contains(only_b[0]) == "host"  # B's own RAM is B's
        with kvtier.Cache("tiny", **opts) as c:
            assert [c.contains(k) for k in keys + only_b] == [None] * 5
        families = prometheus_families(a.prometheus())
        assert len(families) == 72 + 49  # and the remote tier's
        assert families["kvtier_remote_stored_total"] == ("counter", "blocks written to the server")


def test_io_error_is_an_os_error():
    assert issubclass(kvtier.IOError, kvtier.Error)
    assert issubclass(kvtier.IOError, OSError)
    with pytest.raises(OSError):
        raise kvtier.IOError("x")


def test_store_tensors_checks_parent_and_namespace():
    layout, keys, _, tensors = tiny_blocks(2)
    chain = kvtier.KeyChain("ops", layout)
    with kvtier.Cache(layout, host_bytes=1 << 20) as cache:
        with pytest.raises(kvtier.InvalidArgument, match="parent: equals key"):
            cache.store_tensors(keys[1], keys[1], chain.namespace, tensors[1])
        with pytest.raises(kvtier.InvalidArgument, match="namespace: equals key"):
            cache.store_tensors(keys[0], chain.namespace, keys[0], tensors[0])
        cache.store_tensors(keys[0], chain.namespace, chain.namespace, tensors[0])
        assert cache.contains(keys[0]) == "host"


def test_help_reads_as_python():
    # Cache.__init__ and the key functions are left to the options and
    # shard work (their signatures change there).
    docs = [getattr(kvtier.Cache, n).__doc__ or "" for n in dir(kvtier.Cache)
            if not n.startswith("__") or n in ("__enter__", "__exit__")]
    docs += [kvtier.encode_block.__doc__, kvtier.decode_block.__doc__,
             kvtier.layout_signature.__doc__, kvtier.Layout.__init__.__doc__,
             kvtier.Layout.__eq__.__doc__, kvtier.KeyChain.keys.__doc__,
             kvtier.KeyChain.next.__doc__, kvtier.KeyChain.sequence.__doc__,
             kvtier.KeySequence.append.__doc__]
    text = "".join(docs)
    for word in ("handle", "std::", "kvtier::", "uint32_t", ": object", "-> object"):
        assert word not in text, word
    assert "load_many(self: kvtier._kvtier.Cache, keys: Iterable[bytes], outs: Sequence[Buffer]) " \
        "-> List[int]" in text
    assert "contains(self: kvtier._kvtier.Cache, key: bytes) -> str | None" in text
    assert "-> kvtier._kvtier.KeySequence" in text
