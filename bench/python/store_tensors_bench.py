#!/usr/bin/python3
"""Cache.store_tensors (both engine backends' store) into the RAM tier,
against memcpy, in the same run.

Per run: store_tensors of one prefix (--tokens of --layout, default a
32k-token qwen2.5-0.5b prefix) under keys of that run's own into a
host-only cache, one block loaded back and compared, then every block
erased (--full instead: a RAM tier that holds one prefix, so each store
evicts one block of the run before, as a full tier does); `memcpy` is
np.copyto of the same bytes in RAM. A store encodes into new memory, which
the kernel faults in unless the allocator reuses what the erased or
evicted blocks freed (docs/tiers.md, "Stores"). Prints one JSON object:
GB/s of each per run and the median of store / memcpy.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/store_tensors_bench.py
"""

import argparse
import json
import statistics
import time

import numpy as np

import kvtier


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", default="qwen2.5-0.5b")
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--full", action="store_true",
                        help="a RAM tier of one prefix, nothing erased")
    parser.add_argument("--config", default="{}", help="more kvtier options (JSON)")
    args = parser.parse_args()

    layout = kvtier.Layout(args.layout)
    infos = layout.tensors()
    rng = np.random.default_rng(1)
    tensors = [rng.integers(0, 256, t.nbytes, dtype=np.uint8) for t in infos]
    total_blocks = args.tokens // layout.block_tokens
    total = total_blocks * sum(t.nbytes for t in infos)
    a, b = np.ones(total, np.uint8), np.ones(total, np.uint8)
    runs = []
    host = total + (16 << 20) if args.full else 2 * total + (64 << 20)
    options = dict({"host_bytes": host}, **json.loads(args.config))
    with kvtier.Cache(layout, **options) as cache:
        for r in range(args.runs):
            chain = kvtier.KeyChain("store-bench-%d" % r, layout)
            keys = chain.keys(range(args.tokens))
            t0 = time.perf_counter()
            parent = chain.namespace
            for key in keys:
                cache.store_tensors(key, parent, chain.namespace, tensors)
                parent = key
            store_s = time.perf_counter() - t0
            last = cache.load(keys[-1])
            got = kvtier.decode_block(np.frombuffer(last, np.uint8), layout, keys[-1])
            if [g.tobytes() for g in got] != [t.tobytes() for t in tensors]:
                raise SystemExit(f"run {r}: the stored block loads other bytes")
            if not args.full:
                for key in keys:
                    cache.erase(key)
            t0 = time.perf_counter()
            np.copyto(b, a)
            memcpy_s = time.perf_counter() - t0
            runs.append({"store_GBps": round(total / 1e9 / store_s, 3),
                         "memcpy_GBps": round(total / 1e9 / memcpy_s, 3),
                         "store_vs_memcpy": round(memcpy_s / store_s, 3)})
        stats = cache.stats()
    out = {"layout": args.layout, "tokens": args.tokens, "full": args.full,
           "blocks": total_blocks, "bytes": total, "evictions": stats["host"]["evictions"],
           "runs": runs}
    for name in ("store_GBps", "memcpy_GBps", "store_vs_memcpy"):
        out[name + "_median"] = statistics.median(r[name] for r in runs)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
