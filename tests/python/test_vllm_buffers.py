"""The vLLM backend's reused block buffers (kvtier.integrations.vllm
._block_buffers): a buffer is handed out again only once nothing views it,
at most keep_bytes of them wait free, and sizes fall into few classes."""

import gc

import numpy as np
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


def test_at_most_keep_bytes_wait_free():
    pool = BlockBuffers(keep_bytes=2 * MiB)
    bufs = [pool.take(MiB) for _ in range(3)]
    del bufs
    gc.collect()
    assert pool.free_bytes() == 2 * MiB
    pool.clear()
    assert pool.free_bytes() == 0
    pool.take(MiB)
    assert (pool.mapped, pool.reused) == (4, 0)


def test_sizes_fall_into_classes_at_most_an_eighth_larger():
    assert [size_class(n) for n in (1, 4096, 4097, MiB, MiB + 1, 3 * MiB, 3 * MiB + 5)] == \
        [4096, 4096, 8192, MiB, MiB + MiB // 8, 3 * MiB, 3 * MiB + MiB // 4]
    pool = BlockBuffers()
    a = pool.take(3 * MiB + 5)
    assert a.nbytes == 3 * MiB + 5
    del a
    b = pool.take(3 * MiB + 200_000)  # the same class: the same buffer
    assert (pool.mapped, pool.reused, b.nbytes) == (1, 1, 3 * MiB + 200_000)
