"""Copies between vLLM's KV cache tensors and host bytes, for both routes.

A region is one layer's bytes of one GPU block, split over one or more
(num_blocks, n) uint8 views of vLLM's tensors (the K and V halves of a
FlashAttention page, or CanonicalKVCaches' refs of that layer); its bytes
are the views' rows concatenated in order."""

import numpy as np

from ._block_buffers import BUFFERS


def as_bytes(t):
    """A (num_blocks, n) uint8 view of a tensor whose first dimension is blocks."""
    import torch
    t = t.reshape(t.shape[0], -1)
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def on_device(regions, work):
    """Runs work() on a side CUDA stream (after the default stream's work,
    finished before returning) when the KV cache is on a GPU."""
    import torch
    device = regions[0][0].device
    if device.type != "cuda":
        return work()
    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.default_stream(device))
    with torch.cuda.stream(stream):
        result = work()
    stream.synchronize()
    return result


def _cpu_ids(regions, block_ids):
    """block_ids as numpy indices, each checked against the blocks of every
    region (an index out of range raises, as torch's indexing does)."""
    ids = np.asarray(block_ids, dtype=np.int64).reshape(-1)
    if ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        blocks = min(int(p.shape[0]) for parts in regions for p in parts)
        if lo < 0 or hi >= blocks:
            raise IndexError("GPU block ids %d..%d out of range for %d blocks" % (lo, hi, blocks))
    return ids


def gather(regions, block_ids):
    """Per region, the bytes of these GPU blocks as a CPU numpy array
    (len(block_ids), region bytes)."""
    import torch

    if regions[0][0].device.type == "cpu":
        # vLLM's CPU backend (and the tests): numpy's take into a reused
        # buffer (about 30x torch's index_select and cat of uint8 rows into
        # fresh tensors here).
        ids = _cpu_ids(regions, block_ids)
        out = []
        for parts in regions:
            row_bytes = region_bytes(parts)
            rows = BUFFERS.take(len(ids) * row_bytes).reshape(len(ids), row_bytes)
            start = 0
            for p in parts:
                width = int(p.shape[1])
                np.take(p.numpy(), ids, axis=0, out=rows[:, start:start + width], mode="clip")
                start += width
            out.append(rows)
        return out

    def work():
        out = []
        for parts in regions:
            idx = torch.as_tensor(block_ids, dtype=torch.long, device=parts[0].device)
            rows = torch.cat([p.index_select(0, idx) for p in parts], dim=1)
            out.append(rows.cpu().numpy())
        return out
    return on_device(regions, work)


def scatter(regions, block_ids, rows):
    """Writes rows[r] ((len(block_ids), region bytes) numpy) into region r
    of these GPU blocks."""
    import torch

    if regions[0][0].device.type == "cpu":
        # vLLM's CPU backend (and the tests): numpy's row assignment copies
        # about 15x faster than torch's index_copy_ of uint8 rows here.
        ids = _cpu_ids(regions, block_ids)
        for parts, data in zip(regions, rows):
            start = 0
            for p in parts:
                width = int(p.shape[1])
                p.numpy()[ids] = data[:, start:start + width]
                start += width
        return

    def work():
        for parts, data in zip(regions, rows):
            device = parts[0].device
            src = torch.from_numpy(np.ascontiguousarray(data)).to(device)
            idx = torch.as_tensor(block_ids, dtype=torch.long, device=device)
            start = 0
            for p in parts:
                width = int(p.shape[1])
                p.index_copy_(0, idx, src[:, start:start + width].contiguous())
                start += width
    on_device(regions, work)


def region_bytes(parts):
    return sum(int(p.shape[1]) for p in parts)
