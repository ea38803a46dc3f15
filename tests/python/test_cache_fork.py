"""A kvtier.Cache in a forked child (issue 31 item 7): the tiers' threads do
not survive fork(), so the child gets a clear FailedPrecondition naming both
processes, never a hang on load/flush or a crash on close; the parent's cache
keeps working."""

import multiprocessing
import os
import signal
import time

import pytest

import kvtier
from conftest import make_blocks

# Far past what any call here takes on a busy machine; only a hang reaches it.
CHILD_LIMIT_S = 120


def wait_child(pid, limit_s=CHILD_LIMIT_S + 30):
    """The child's exit status; a child still running after `limit_s` (hung
    before its own alarm was set: a sanitizer's allocator lock that a parent
    thread held at fork) is killed and the test fails, instead of waiting
    out ctest's limit."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child still ran after %d s (killed)" % limit_s)


def child_checks(cache, key, block, report):
    """Runs in the child: every call gives the clear error; close releases."""
    parent, me = os.getppid(), os.getpid()
    results = []
    for name, call in (("load", lambda: cache.load(key)),
                       ("flush", cache.flush),
                       ("store", lambda: cache.store(key, block)),
                       ("match", lambda: cache.match([key])),
                       ("stats", cache.stats)):
        try:
            call()
            results.append("%s: no error" % name)
        except kvtier.FailedPrecondition as e:
            text = str(e)
            ok = ("opened by process %d" % parent) in text and ("process %d" % me) in text
            results.append("%s: ok" % name if ok else "%s: %s" % (name, text))
        except Exception as e:  # noqa: BLE001 - reported to the parent
            results.append("%s: %s %s" % (name, type(e).__name__, e))
    cache.close()  # releases the handle; joins nothing
    results.append("closed" if cache.closed else "not closed")
    try:
        cache.load(key)
        results.append("load after close: no error")
    except kvtier.FailedPrecondition as e:
        results.append("load after close: ok" if "closed" in str(e) else str(e))
    report(results)


def expected():
    return ["load: ok", "flush: ok", "store: ok", "match: ok", "stats: ok", "closed",
            "load after close: ok"]


def open_cache(tmp_path):
    layout = kvtier.Layout("tiny")
    keys, blocks, _ = make_blocks(layout, "fork", list(range(64)))
    # Two blocks of RAM: the others are on disk, so a load needs the disk
    # tier's threads (what hung in the child).
    cache = kvtier.Cache(layout, host_bytes=2 * len(blocks[0]) + 100, disk_dir=tmp_path / "c")
    for k, b in zip(keys, blocks):
        cache.store(k, b)
    cache.flush()
    return cache, keys, blocks


def parent_still_works(cache, keys, blocks):
    for k, b in zip(keys, blocks):
        assert cache.load(k) == b
    cache.store(keys[0], blocks[0])
    cache.flush()
    assert cache.match(keys) == len(keys)


@pytest.mark.fork
def test_os_fork_child_gets_failed_precondition(tmp_path):
    cache, keys, blocks = open_cache(tmp_path)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            os.close(read_end)
            signal.alarm(CHILD_LIMIT_S)

            def report(results):
                os.write(write_end, "\n".join(results).encode())

            child_checks(cache, keys[0], blocks[0], report)
            del cache  # the destructor in the child must not join either
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    status = wait_child(pid)  # a few lines: the pipe holds them until read
    with os.fdopen(read_end) as f:
        lines = f.read().split("\n")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert lines == expected()
    parent_still_works(cache, keys, blocks)
    cache.close()


def mp_child(cache, key, block, queue):
    child_checks(cache, key, block, queue.put)


@pytest.mark.fork
def test_multiprocessing_fork_child_gets_failed_precondition(tmp_path):
    cache, keys, blocks = open_cache(tmp_path)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=mp_child, args=(cache, keys[0], blocks[0], queue), daemon=True)
    proc.start()
    lines = queue.get(timeout=CHILD_LIMIT_S)
    proc.join(CHILD_LIMIT_S)
    assert proc.exitcode == 0
    assert lines == expected()
    parent_still_works(cache, keys, blocks)
    cache.close()


@pytest.mark.fork
def test_a_cache_opened_in_the_child_works_there(tmp_path):
    cache, keys, blocks = open_cache(tmp_path)
    cache.flush()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()

    def reopen(q):
        with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=tmp_path / "c") as own:
            q.put([own.load(k) == b for k, b in zip(keys, blocks)])

    proc = ctx.Process(target=reopen, args=(queue,), daemon=True)
    proc.start()
    assert queue.get(timeout=CHILD_LIMIT_S) == [True] * len(keys)
    proc.join(CHILD_LIMIT_S)
    assert proc.exitcode == 0
    cache.close()


@pytest.mark.fork
def test_a_cache_dropped_unclosed_in_a_forked_child_exits_cleanly(tmp_path):
    cache, keys, blocks = open_cache(tmp_path)
    pid = os.fork()
    if pid == 0:  # the child: its only reference goes, the destructor runs
        code = 1
        try:
            signal.alarm(CHILD_LIMIT_S)
            del cache
            code = 0
        finally:
            os._exit(code)
    status = wait_child(pid)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    parent_still_works(cache, keys, blocks)
    cache.close()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
