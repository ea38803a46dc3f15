#!/usr/bin/python3
"""A prefix restore through the vLLM backend, end to end, against memcpy.

Drives kvtier.integrations.vllm's current route (vLLM 0.26 and later) as
vLLM's OffloadingConnector does, through tests/python/vllm_current_harness
(the stand-ins of vLLM's interface, or vLLM's own files with
KVTIER_VLLM_SRC): one request's lookups until every key is a HIT (the
blocks read and verified on kvtier's threads), prepare_load, the worker's
load job into other "GPU" blocks (CPU tensors here: no GPU on this
machine) and complete_load. The prefix: --tokens of a qwen2.5-0.5b-shaped
model (24 layers, 2 KV heads of 64, float16), 16-token GPU blocks, 16 per
kvtier block (3 MiB each).

Per run: `host` restores from kvtier's RAM tier (the blocks stored just
before), `disk` from the folder after the caches were reopened (an engine
restarted: empty RAM, the page cache warm unless --drop-caches); `memcpy`
is np.copyto of the same bytes in RAM, the limit. Every run checks the
restored GPU blocks byte for byte; `store` then stores the same GPU blocks
under new keys (the worker's store job: gather, store_tensors), erased
after. Before the runs, `first_store_s` is the first store of the
process. Prints one JSON object: per run the seconds of each phase, and
host / memcpy.

With --device cuda (a machine with a GPU) the GPU blocks are CUDA tensors,
each run also times `h2d`: one copy of the same bytes from a numpy array
into a CUDA tensor (pageable memory, as the backend's scatter copies), and
prints host / h2d.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/vllm_load_bench.py
    ... --config '{"read_buffer_prefault_bytes": "448MiB", "read_buffer_pool_bytes": "704MiB"}'
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from load_many_bench import drop_caches

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "python"))
import vllm_current_harness as vc  # noqa: E402

LAYERS, HEADS, HEAD_DIM, TOKENS, CHUNK = 24, 2, 64, 16, 16


def restore(conn, keys, dst, req):
    """Seconds of (lookups until all HIT, prepare_load, load job, complete_load)."""
    t0 = time.perf_counter()
    hits = conn.lookup(keys, req=req)
    t1 = time.perf_counter()
    if hits != len(keys):
        raise SystemExit(f"{req}: {hits} of {len(keys)} keys hit")
    src = conn.prepare_load(keys, req=req)
    t2 = time.perf_counter()
    if not conn.transfer_load(keys, src, [(dst, 0)], req=req):
        raise SystemExit(f"{req}: the load job failed")
    t3 = time.perf_counter()
    return {"lookup_s": t1 - t0, "prepare_s": t2 - t1, "load_s": t3 - t2, "total_s": t3 - t0}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--drop-caches", action="store_true")
    parser.add_argument("--config", default="{}",
                        help="more kvtier options of the connector's extra config (JSON)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="where the GPU blocks live: cpu (this machine), or cuda; with "
                        "cuda each run also times the copy of the same bytes from a numpy "
                        "array into a CUDA tensor (h2d_s, the host restore's limit there)")
    args = parser.parse_args()

    kv, _ = vc.install()
    n_keys = args.tokens // (TOKENS * CHUNK)
    gpu_blocks = n_keys * CHUNK
    tmp = tempfile.TemporaryDirectory(prefix="kvtier_vllm_bench_")
    page = 2 * TOKENS * HEADS * HEAD_DIM * 2
    total = gpu_blocks * page * LAYERS
    extra = {"spec_name": "KvtierOffloadingSpec", "spec_module_path": "kvtier.integrations.vllm",
             "offload_prompt_only": True, "disk_dir": os.path.join(tmp.name, "kv"),
             "host_bytes": 2 * total + (256 << 20)}
    extra.update(json.loads(args.config))
    config = vc.offloading_config(extra, layers=(LAYERS,), tokens=TOKENS, chunk=CHUNK,
                                  heads=HEADS, head_dim=HEAD_DIM)
    tensors = vc.layer_tensors(LAYERS, 2 * gpu_blocks, TOKENS, HEADS, HEAD_DIM, seed=1,
                               device=args.device)
    caches, pages = vc.canonical([tensors], split_kv=True)
    conn = vc.Connector(kv.KvtierOffloadingSpec(config), caches)
    keys = [vc.make_offload_key(vc.block_hash(i), 0) for i in range(n_keys)]
    src_ids = list(range(gpu_blocks))
    dst_ids = list(range(gpu_blocks, 2 * gpu_blocks))
    t0 = time.perf_counter()
    if conn.store(keys, [(src_ids, 0)]) != keys:
        raise SystemExit("not every key was stored")
    store_s = time.perf_counter() - t0
    want = vc.gpu_bytes(pages, 0, src_ids)
    if len(want) != total:
        raise SystemExit(f"expected {total} bytes of GPU blocks, got {len(want)}")
    a = np.ones(total, np.uint8)
    b = np.ones(total, np.uint8)

    def check(what):
        if vc.gpu_bytes(pages, 0, dst_ids) != want:
            raise SystemExit(f"{what}: the restored GPU blocks differ from the stored ones")
        for t in tensors:  # the next run writes them again
            t[:, gpu_blocks:].zero_()

    runs = []
    for r in range(args.runs):
        run = {"host": restore(conn, keys, dst_ids, f"host{r}")}
        check("host")
        # A restarted engine: its caches opened again, the blocks in the folder only.
        conn.worker.shutdown()
        for cache in list(kv._caches.values()):
            cache.flush()
            cache.close()
        kv._caches.clear()
        if args.drop_caches:
            drop_caches()
        conn = vc.Connector(kv.KvtierOffloadingSpec(config), caches)
        run["disk"] = restore(conn, keys, dst_ids, f"disk{r}")
        check("disk")
        # The same GPU blocks stored again under keys of their own (then
        # erased, which keeps the RAM tier's size from run to run).
        again = [vc.make_offload_key(vc.block_hash(i, b"run%d" % r), 0) for i in range(n_keys)]
        t0 = time.perf_counter()
        if conn.store(again, [(src_ids, 0)], req=f"store{r}") != again:
            raise SystemExit(f"store{r}: not every key was stored")
        run["store_s"] = time.perf_counter() - t0
        plan = conn.spec.plan
        for key in again:
            for kv_key in plan.kv_keys(key):
                conn.spec.caches()[plan.group_of(key)].erase(kv_key)
        t0 = time.perf_counter()
        np.copyto(b, a)
        run["memcpy_s"] = time.perf_counter() - t0
        run["host_vs_memcpy"] = round(run["memcpy_s"] / run["host"]["total_s"], 4)
        if args.device != "cpu":
            import torch
            on_device = torch.empty(total, dtype=torch.uint8, device=args.device)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            on_device.copy_(torch.from_numpy(a))
            torch.cuda.synchronize()
            run["h2d_s"] = time.perf_counter() - t0
            run["host_vs_h2d"] = round(run["h2d_s"] / run["host"]["total_s"], 4)
            del on_device
        runs.append(run)
    out = {"tokens": args.tokens, "device": args.device, "config": json.loads(args.config),
           "keys": n_keys,
           "bytes": total, "first_store_s": round(store_s, 4),
           "drop_caches": args.drop_caches, "runs": runs}
    for tier in ("host", "disk"):
        out[tier + "_GBps_median"] = round(
            total / 1e9 / statistics.median(r[tier]["total_s"] for r in runs), 3)
    out["store_GBps_median"] = round(total / 1e9 / statistics.median(r["store_s"] for r in runs), 3)
    out["memcpy_GBps_median"] = round(total / 1e9 / statistics.median(r["memcpy_s"] for r in runs), 3)
    out["host_vs_memcpy_median"] = statistics.median(r["host_vs_memcpy"] for r in runs)
    if args.device != "cpu":
        out["h2d_GBps_median"] = round(
            total / 1e9 / statistics.median(r["h2d_s"] for r in runs), 3)
        out["host_vs_h2d_median"] = statistics.median(r["host_vs_h2d"] for r in runs)
    print(json.dumps(out))
    conn.worker.shutdown()
    for cache in list(kv._caches.values()):
        cache.close()
    kv._caches.clear()
    tmp.cleanup()


if __name__ == "__main__":
    main()
