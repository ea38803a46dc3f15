#!/usr/bin/python3
"""Cache.load_many_tensors (the SGLang backend's load) from the host's
`kvtier serve`, against memcpy, in the same run.

Starts `kvtier serve` (an arena only, room for the prefix) on a socket in a
temporary folder, stores one prefix (--tokens of --layout, default a
32k-token qwen2.5-0.5b prefix, different bytes per block) through a
kvtier.Cache with `server`, then per run:
  tensors   load_many_tensors(keys, outs) of the prefix into preallocated
            per-tensor numpy buffers (an engine's host pages), every block
            from the daemon's arena (copied out and verified by the client);
  memcpy    np.copyto of the same bytes in RAM on one thread: the limit.
The first run's tensors are compared with the stored ones byte for byte.
Prints one JSON object: GB/s of each per run and the median of
tensors / memcpy.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/served_tensors_bench.py \\
        --kvtier build/release/kvtier
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time

import numpy as np

import kvtier


def start_daemon(cli, sock, layout, host_bytes, err):
    proc = subprocess.Popen([cli, "serve", "--server", "unix:" + sock, "--layout", layout,
                             "--host-bytes", str(host_bytes)],
                            stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(sock)
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"kvtier serve exited with {proc.returncode}")
            time.sleep(0.02)
        finally:
            s.close()
    proc.kill()
    raise SystemExit("kvtier serve did not listen within 120 s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", default="qwen2.5-0.5b")
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kvtier", default="build/release/kvtier", help="the kvtier command")
    args = parser.parse_args()

    layout = kvtier.Layout(args.layout)
    chain = kvtier.KeyChain("bench", layout)
    keys = chain.keys(range(args.tokens))
    infos = layout.tensors()
    per_block = sum(t.nbytes for t in infos)
    total = per_block * len(keys)
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(prefix="kvtier_served_bench_") as tmp:
        sock = os.path.join(tmp, "s.sock")
        with open(os.path.join(tmp, "daemon.err"), "w") as err:
            daemon = start_daemon(args.kvtier, sock, args.layout,
                                  2 * len(keys) * layout.max_file_bytes + (64 << 20), err)
        try:
            want = np.empty(total, np.uint8)
            with kvtier.Cache(layout, server="unix:" + sock) as cache:
                parent = chain.namespace
                for i, key in enumerate(keys):
                    tensors = [rng.integers(0, 256, t.nbytes, dtype=np.uint8) for t in infos]
                    np.concatenate(tensors, out=want[i * per_block:(i + 1) * per_block])
                    cache.store(key, kvtier.encode_block(layout, key, parent, chain.namespace,
                                                         tensors))
                    parent = key
                arena = np.ones(total, np.uint8)  # the engine's pages, faulted in once
                outs, offset = [], 0
                for _ in keys:
                    block = []
                    for t in infos:
                        block.append(arena[offset:offset + t.nbytes])
                        offset += t.nbytes
                    outs.append(block)
                copy = np.ones(total, np.uint8)
                runs = []
                for r in range(args.runs):
                    arena[:] = 0
                    t0 = time.perf_counter()
                    found = cache.load_many_tensors(keys, outs)
                    load_s = time.perf_counter() - t0
                    if not all(found):
                        raise SystemExit(f"run {r}: {found.count(False)} blocks missed")
                    if r == 0 and not np.array_equal(arena, want):
                        raise SystemExit("the loaded tensors differ from the stored ones")
                    t0 = time.perf_counter()
                    np.copyto(copy, arena)
                    memcpy_s = time.perf_counter() - t0
                    runs.append({"tensors_GBps": round(total / 1e9 / load_s, 3),
                                 "memcpy_GBps": round(total / 1e9 / memcpy_s, 3),
                                 "tensors_vs_memcpy": round(memcpy_s / load_s, 3)})
                stats = cache.stats()
        finally:
            daemon.terminate()
            daemon.wait()
    out = {"layout": args.layout, "tokens": args.tokens, "blocks": len(keys), "bytes": total,
           "read_buffers": stats.get("read_buffers"),
           "read_buffers_reused": stats.get("read_buffers_reused"), "runs": runs}
    for name in ("tensors_GBps", "memcpy_GBps", "tensors_vs_memcpy"):
        out[name + "_median"] = statistics.median(r[name] for r in runs)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
