#!/usr/bin/python3
"""Cache.load_many from Python against its limits, in the same run.

Stores one prefix (--tokens of --layout, default a 32k-token qwen2.5-0.5b
prefix) in a disk-tier folder, then per run:
  pread      a plain pread loop (os.preadv on --threads threads, the disk
             tier's read threads by default) over the same block files,
             page cache dropped first (--drop-caches, root only);
  direct     the same files read with O_DIRECT on 16 threads (queue depth
             16), page cache dropped the same way. The disk's limit is the
             faster of the two loops (as in `kvtier bench pool`);
  cold       load_many(keys, outs) on a freshly opened cache (empty RAM),
             page cache dropped the same way, into preallocated numpy
             buffers (one restore, GIL released);
  host       load_many of the same keys again: host hits (the cold load
             promoted them);
  memcpy     np.copyto of the same bytes from RAM on one thread: the host
             limit.
Prints one JSON object: GB/s of each per run, and the medians of cold /
limit and host / memcpy.

Without --drop-caches the figures compare unlike reads: the disk tier reads
blocks of 1 MiB or more with O_DIRECT by default (docs/options.md,
disk_direct_io_reads), from the device whatever the page cache holds, while
the pread loop reads the page cache.

--prefault opens the cache with read_buffer_prefault_bytes (and a read
buffer pool) of the prefix's size, as an engine that restores into RAM at
startup would: the cold load reads into buffers already faulted in,
instead of paying a page fault (and the kernel's zeroing) per fresh page.

    sudo PYTHONPATH=build/release/python /usr/bin/python3 \\
        bench/python/load_many_bench.py --layout qwen2.5-0.5b --tokens 32768 --drop-caches
"""

import argparse
import concurrent.futures
import json
import mmap
import os
import statistics
import tempfile
import time

import numpy as np

import kvtier


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    except OSError as e:
        raise SystemExit(f"--drop-caches: cannot write /proc/sys/vm/drop_caches (needs root): {e}")


def block_files(folder, keys):
    want = {k.hex() + ".safetensors" for k in keys}
    found = {}
    for root, _, names in os.walk(os.path.join(folder, "blocks")):
        for n in names:
            if n in want:
                found[n] = os.path.join(root, n)
    if len(found) != len(keys):
        raise SystemExit(f"expected {len(keys)} block files, found {len(found)}")
    return [found[k.hex() + ".safetensors"] for k in keys]


DIRECT_DEPTH = 16
PAGE = 4096


def pread_loop(files, sizes, threads, direct=False):
    """Seconds for `threads` threads to read every file whole into one reused buffer each
    (with O_DIRECT if `direct`: page-aligned buffers, whole pages, the last one short)."""
    room = -(-max(sizes) // PAGE) * PAGE
    bufs = [mmap.mmap(-1, room) for _ in range(threads)]  # page-aligned
    for b in bufs:
        b.write(b"\1" * room)  # faulted in

    def work(t):
        buf = memoryview(bufs[t])
        for i in range(t, len(files), threads):
            fd = os.open(files[i], os.O_RDONLY | (os.O_DIRECT if direct else 0))
            try:
                done = 0
                want = -(-sizes[i] // PAGE) * PAGE if direct else sizes[i]
                while done < sizes[i]:
                    n = os.preadv(fd, [buf[done:want]], done)
                    if n <= 0:
                        raise OSError(f"short read of {files[i]}")
                    done += n
            finally:
                os.close(fd)

    try:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            t0 = time.perf_counter()
            list(pool.map(work, range(threads)))
            return time.perf_counter() - t0
    finally:
        for b in bufs:
            b.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", default="qwen2.5-0.5b")
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--dir", help="the cache folder (default: a new temporary one)")
    parser.add_argument("--drop-caches", action="store_true")
    parser.add_argument("--prefault", action="store_true",
                        help="open with read_buffer_prefault_bytes = the prefix's bytes")
    args = parser.parse_args()

    layout = kvtier.Layout(args.layout)
    chain = kvtier.KeyChain("bench", layout)
    keys = chain.keys(range(args.tokens))
    tmp = None
    folder = args.dir
    if folder is None:
        tmp = tempfile.TemporaryDirectory(prefix="kvtier_load_many_")
        folder = tmp.name
    rng = np.random.default_rng(1)
    # Written through a small RAM tier: the blocks reach the folder as they
    # are evicted, and close() writes the rest.
    with kvtier.Cache(layout, host_bytes=64 << 20, disk_dir=folder) as cache:
        parent = chain.namespace
        for key in keys:
            tensors = [rng.integers(0, 256, t.nbytes, dtype=np.uint8) for t in layout.tensors()]
            cache.store(key, kvtier.encode_block(layout, key, parent, chain.namespace, tensors))
            parent = key
    files = block_files(folder, keys)
    sizes = [os.path.getsize(f) for f in files]
    total = sum(sizes)
    gb = total / 1e9
    arena = np.ones(total, np.uint8)  # the caller's buffers, faulted in once
    copy = np.ones(total, np.uint8)
    offsets = np.cumsum([0] + sizes)
    outs = [arena[offsets[i]:offsets[i + 1]] for i in range(len(keys))]

    runs = []
    for _ in range(args.runs):
        if args.drop_caches:
            drop_caches()
        pread_s = pread_loop(files, sizes, args.threads)
        if args.drop_caches:
            drop_caches()
        direct_s = pread_loop(files, sizes, DIRECT_DEPTH, direct=True)
        limit_s = min(pread_s, direct_s)
        extra = {}
        if args.prefault:
            # Room for every block's buffer, whatever its header's rounding.
            extra = {"read_buffer_pool_bytes": total + len(keys) * (1 << 20),
                     "read_buffer_prefault_bytes": total}
        with kvtier.Cache(layout, host_bytes=2 * total + (64 << 20), disk_dir=folder,
                          **extra) as cache:
            if args.drop_caches:
                drop_caches()
            t0 = time.perf_counter()
            got = cache.load_many(keys, outs)
            cold_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            again = cache.load_many(keys, outs)
            host_s = time.perf_counter() - t0
            s = cache.stats()
            if args.prefault and s["read_buffers_reused"] != len(keys):
                raise SystemExit(f"--prefault: {s['read_buffers_reused']} of {len(keys)} reads "
                                 "found a prefaulted buffer")
        if got != sizes or again != sizes:
            raise SystemExit("load_many did not return every block")
        if s["hits_host"] != len(keys):
            raise SystemExit(f"expected {len(keys)} host hits in the second pass, got "
                             f"{s['hits_host']}")
        t0 = time.perf_counter()
        np.copyto(copy, arena)
        memcpy_s = time.perf_counter() - t0
        runs.append({"cold_GBps": round(gb / cold_s, 3), "pread_GBps": round(gb / pread_s, 3),
                     "direct_GBps": round(gb / direct_s, 3),
                     "host_GBps": round(gb / host_s, 3), "memcpy_GBps": round(gb / memcpy_s, 3),
                     "cold_vs_limit": round(limit_s / cold_s, 3),
                     "host_vs_memcpy": round(memcpy_s / host_s, 3)})
    out = {"layout": args.layout, "tokens": args.tokens, "blocks": len(keys), "bytes": total,
           "threads": args.threads, "direct_depth": DIRECT_DEPTH, "drop_caches": args.drop_caches, "prefault": args.prefault,
           "runs": runs}
    for name in ("cold_GBps", "pread_GBps", "direct_GBps", "host_GBps", "memcpy_GBps",
                 "cold_vs_limit", "host_vs_memcpy"):
        out[name + "_median"] = statistics.median(r[name] for r in runs)
    print(json.dumps(out))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
