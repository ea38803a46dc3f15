"""kvtier.integrations.sglang on a disk that is really full: what
batch_exists claims must load (issue 31: it said 8, every load failed, the
next check said 0: a failed disk write left a hint that claimed the block).
Fails on 1229907 (8 claimed, 1 loaded)."""


import sglang_fakes as fakes
from conftest import fill_up
from test_sglang import indices, open_backend, page_keys, sglang  # noqa: F401


def test_batch_exists_after_failed_disk_writes_counts_only_loadable_pages(
        sglang, tmp_path, small_disk):
    # Pages of 32 KiB, the default write policy (RAM first, written back by
    # the disk writer), a RAM tier for about two of the eight: the others are
    # claimed only if the failed writes left hints behind.
    shape = dict(pages=16, layers=4, heads=8, head_dim=64)
    pool = fakes.MHAPool(seed=68, **shape)
    extra = {"disk_dir": str(small_disk / "kv"), "host_bytes": 70000}
    backend = open_backend(sglang, tmp_path, pool, extra=extra)
    fill_up(small_disk)
    keys = page_keys(8, "h")
    results = backend.batch_set_v1(keys, indices(8, 4))
    assert len(results) == 8 and all(isinstance(r, bool) for r in results)
    # Every write settled (written or failed): a write still in flight is
    # readable and rightly claimed; one that failed must not be.
    for store in backend._stores.values():
        store.cache.flush()
    claimed = backend.batch_exists(keys)
    # The RAM tier kept the last pages stored; the first ones went to the
    # full disk and failed: no leading page is loadable.
    assert claimed == 0
    dst = fakes.MHAPool(**shape)
    backend.register_mem_pool_host(dst)
    assert backend.batch_get_v1(keys[:claimed], indices(claimed, 4)) == [True] * claimed
    assert backend.batch_exists(keys) == claimed  # the next check says the same
    assert fakes.raw(dst.kv_buffer[:, :4 * claimed]) == fakes.raw(pool.kv_buffer[:, :4 * claimed])
    assert not dst.kv_buffer[:, 4 * claimed:].any()
    backend.close()
