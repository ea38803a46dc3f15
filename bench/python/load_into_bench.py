#!/usr/bin/python3
"""Host-hit Cache.load_into from Python vs numpy's own copy of the same bytes.

Stores N block files of a layout (default qwen2.5-0.5b: 3 MiB) in a RAM-only
kvtier.Cache, then times, in the same run and alternating:
  load_into  cache.load_into(key, out) for every key (a host hit: one copy
             from the host tier's buffer into `out`, GIL released);
  numpy      np.copyto(out, block) for the same N blocks (already numpy
             arrays over the block bytes): the copy numpy itself does.
Prints one JSON object with GB/s of each per run and the ratio
load_into / numpy (median of the runs).

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/load_into_bench.py
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
    parser.add_argument("--blocks", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=20, help="passes over the blocks per timing")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    layout = kvtier.Layout(args.layout)
    chain = kvtier.KeyChain("bench", layout)
    keys = chain.keys(range(args.blocks * layout.block_tokens))
    rng = np.random.default_rng(1)
    blocks = []
    parent = chain.namespace
    for key in keys:
        tensors = [rng.integers(0, 256, t.nbytes, dtype=np.uint8) for t in layout.tensors()]
        blocks.append(kvtier.encode_block(layout, key, parent, chain.namespace, tensors))
        parent = key
    size = len(blocks[0])
    cache = kvtier.Cache(layout, host_bytes=2 * size * args.blocks)
    for key, block in zip(keys, blocks):
        cache.store(key, block)
    sources = [np.frombuffer(b, np.uint8) for b in blocks]
    out = np.ones(size, np.uint8)  # faulted in before timing

    def time_load_into():
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            for key in keys:
                cache.load_into(key, out)
        return time.perf_counter() - t0

    def time_numpy():
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            for src in sources:
                np.copyto(out, src)
        return time.perf_counter() - t0

    time_load_into()  # warm up both paths
    time_numpy()
    total = size * args.blocks * args.rounds
    runs = []
    for _ in range(args.runs):
        li, npc = time_load_into(), time_numpy()
        runs.append({"load_into_GBps": round(total / li / 1e9, 2),
                     "numpy_copy_GBps": round(total / npc / 1e9, 2),
                     "ratio": round(npc / li, 3)})
    cache.close()
    stats = {"layout": args.layout, "block_bytes": size, "blocks": args.blocks,
             "rounds": args.rounds, "runs": runs,
             "ratio_median": statistics.median(r["ratio"] for r in runs)}
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
