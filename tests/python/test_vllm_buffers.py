"""The vLLM backend's host-side copies: its reused block buffers
(kvtier.integrations.vllm._block_buffers: a buffer is handed out again only
once nothing views it, at most keep_bytes of them wait free, sizes fall
into few classes) and the CPU tensors' gather and scatter (_regions)."""

import gc

import numpy as np
import pytest
import torch

from kvtier.integrations.vllm._block_buffers import BlockBuffers, size_class

MiB = 1 << 20


def test_a_buffer_comes_back_only_when_nothing_views_it():
    pool = BlockBuffers()
    a = pool.take(3 * MiB)
    a[:] = 7
    b = a[:10]  # a view of the array, then views of that view
    c = b[2:5]
    t = torch.from_numpy(c[1:])
    mv = memoryview(c)
    del a, b
    assert pool.free_bytes() == 0
    del c
    assert pool.free_bytes() == 0
    del t
    assert pool.free_bytes() == 0
    del mv
    assert pool.free_bytes() == 3 * MiB
    again = pool.take(3 * MiB)
    assert (pool.mapped, pool.reused, pool.free_bytes()) == (1, 1, 0)
    assert again.nbytes == 3 * MiB


def test_a_buffer_in_use_is_never_handed_out_twice():
    pool = BlockBuffers()
    held = pool.take(3 * MiB)
    held[:] = 1
    views = [held[i * MiB:(i + 1) * MiB] for i in range(3)]
    del held
    for round_ in range(3):  # buffers come and go around the held views
        other = pool.take(3 * MiB)
        assert not np.shares_memory(other, views[0])
        other[:] = 2 + round_
        del other
    assert all(int(v.min()) == 1 and int(v.max()) == 1 for v in views)
    assert (pool.mapped, pool.reused) == (2, 2)


def test_at_most_keep_bytes_wait_free_the_oldest_going_first():
    pool = BlockBuffers(keep_bytes=2 * MiB)
    small = [pool.take(MiB) for _ in range(2)]
    del small
    gc.collect()
    assert pool.free_bytes() == 2 * MiB
    big = pool.take(2 * MiB)  # a size none of the free ones has
    assert (pool.mapped, pool.reused) == (3, 0)
    del big  # the two freed before it make room
    assert pool.free_bytes() == 2 * MiB
    again = pool.take(2 * MiB)
    assert (pool.mapped, pool.reused, pool.free_bytes()) == (3, 1, 0)
    del again
    pool.take(MiB)  # the 1 MiB ones went: a new one, dropped at once, pushes out the 2 MiB
    assert (pool.mapped, pool.reused, pool.free_bytes()) == (4, 1, MiB)
    huge = pool.take(3 * MiB)
    del huge  # larger than keep_bytes: never kept
    assert pool.free_bytes() == MiB
    pool.clear()
    assert pool.free_bytes() == 0


def test_sizes_fall_into_classes_at_most_an_eighth_larger():
    assert [size_class(n) for n in (1, 4096, 4097, MiB, MiB + 1, 3 * MiB, 3 * MiB + 5)] == \
        [4096, 4096, 8192, MiB, MiB + MiB // 8, 3 * MiB, 3 * MiB + MiB // 4]
    pool = BlockBuffers()
    a = pool.take(3 * MiB + 5)
    assert a.nbytes == 3 * MiB + 5
    del a
    b = pool.take(3 * MiB + 200_000)  # the same class: the same buffer
    assert (pool.mapped, pool.reused, b.nbytes) == (1, 1, 3 * MiB + 200_000)


def _regions_of(seed):
    """Two regions (layers) of 6 GPU blocks, each split over two uint8 parts
    of widths 8 and 4 (a K and a V half), every byte different."""
    g = torch.Generator().manual_seed(seed)
    return [[torch.randint(0, 256, (6, w), generator=g, dtype=torch.uint8) for w in (8, 4)]
            for _ in range(2)]


def test_cpu_gather_and_scatter_move_exact_rows():
    from kvtier.integrations.vllm._regions import gather, scatter
    src, dst = _regions_of(1), _regions_of(2)
    rows = gather(src, [4, 1])
    for r, parts in enumerate(src):
        want = np.concatenate([p.numpy()[[4, 1]] for p in parts], axis=1)
        assert rows[r].tobytes() == want.tobytes()
    untouched = [[p.clone() for p in parts] for parts in dst]
    scatter(dst, [0, 5], rows)
    for r, parts in enumerate(dst):
        for p, s, before in zip(parts, src[r], untouched[r]):
            assert p[0].tolist() == s[4].tolist() and p[5].tolist() == s[1].tolist()
            assert p[1:5].tolist() == before[1:5].tolist()


def test_cpu_gather_and_scatter_refuse_block_ids_out_of_range():
    # numpy would wrap -1 to the last block, and take(mode="clip") would
    # clamp 6 to it: each must raise, as torch's indexing does, and write
    # nothing.
    from kvtier.integrations.vllm._regions import gather, scatter
    src, dst = _regions_of(3), _regions_of(4)
    rows = gather(src, [0, 1])
    before = [[p.clone() for p in parts] for parts in dst]
    for bad in ([0, 6], [-1, 2]):
        with pytest.raises(IndexError):
            gather(src, bad)
        with pytest.raises(IndexError):
            scatter(dst, bad, rows)
    assert all(p.tolist() == b.tolist() for parts, olds in zip(dst, before)
               for p, b in zip(parts, olds))
