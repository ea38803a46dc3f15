"""What survives a process that dies without closing its cache (kill -9, or
os._exit here): docs/tiers.md "What a crash can lose". A child process opens
a cache, stores 50 blocks and dies with os._exit(0); the parent reopens the
folder and looks for every block, byte for byte."""

import json
import os
import subprocess
import sys

import kvtier
from conftest import make_blocks

N = 50

CHILD = r"""
import json, os, sys
import kvtier
path, options, flush = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"
data = open(path, "rb").read()
n, size = %d, len(data) // %d
cache = kvtier.Cache("tiny", **options)
for i in range(n):
    rec = data[i * size:(i + 1) * size]
    cache.store(rec[:32], rec[32:])
if flush:
    cache.flush()
os._exit(0)  # no close(), no destructors: as a kill -9 would leave it
""" % (N, N)


def run_child(tmp_path, options, flush):
    layout = kvtier.Layout("tiny")
    keys, blocks, _ = make_blocks(layout, "crash-%d" % os.getpid(), list(range(16 * N)))
    assert len({len(b) for b in blocks}) == 1
    path = tmp_path / "blocks.bin"
    path.write_bytes(b"".join(k + b for k, b in zip(keys, blocks)))
    subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(options),
                    "1" if flush else "0"], check=True, timeout=120)
    found = 0
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=options["disk_dir"]) as cache:
        for k, b in zip(keys, blocks):
            got = cache.load(k)
            if got is not None:
                assert got == b
                found += 1
    return found


def test_write_back_then_flush_survives_exit(tmp_path):
    options = {"host_bytes": "64MiB", "disk_dir": str(tmp_path / "c"),
               "write_policy": "write_back"}
    assert run_child(tmp_path, options, flush=True) == N


def test_write_through_inline_survives_exit_without_flush(tmp_path):
    # write_through with no writer threads: store() returns once the file is
    # in place and indexed.
    options = {"host_bytes": "64MiB", "disk_dir": str(tmp_path / "c"),
               "write_policy": "write_through", "disk_writer_threads": 0}
    assert run_child(tmp_path, options, flush=False) == N


def test_write_through_fsync_then_flush_survives_exit(tmp_path):
    options = {"host_bytes": "64MiB", "disk_dir": str(tmp_path / "c"),
               "write_policy": "write_through", "disk_durability": "fsync"}
    assert run_child(tmp_path, options, flush=True) == N


def test_write_back_without_flush_loses_what_ram_held(tmp_path):
    # The counter-check: the 50 blocks fit the RAM budget, so nothing was
    # evicted and nothing flushed. Their only copy died with the process.
    options = {"host_bytes": "64MiB", "disk_dir": str(tmp_path / "c"),
               "write_policy": "write_back"}
    assert run_child(tmp_path, options, flush=False) == 0
