"""kvtier.Cache's events reach logging.getLogger("kvtier") (DESIGN.md §7, §8),
from kvtier's own threads, without raising into them or deadlocking."""

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import kvtier
from conftest import make_blocks


def damaged_block_on_disk(tmp_path):
    """A cache folder holding one block whose file has a flipped data byte."""
    layout = kvtier.Layout("tiny")
    keys, blocks, _ = make_blocks(layout, "logger", list(range(16)))
    folder = tmp_path / "c"
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=folder) as cache:
        cache.store(keys[0], blocks[0])
        cache.flush()
    hexkey = keys[0].hex()
    path = folder / "blocks" / hexkey[:2] / (hexkey + ".safetensors")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    return folder, keys[0], hexkey


def test_quarantine_event_reaches_logging(tmp_path, caplog):
    folder, key, hexkey = damaged_block_on_disk(tmp_path)
    caplog.set_level(logging.DEBUG, logger="kvtier")
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=folder) as cache:
        assert cache.load(key) is None  # a damaged block is a miss
    records = [r for r in caplog.records if r.name == "kvtier"]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].levelno == logging.WARNING
    assert "quarantine" in records[0].getMessage()
    assert hexkey in records[0].getMessage()


class Raising(logging.Handler):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def emit(self, record):
        self.calls += 1
        raise RuntimeError("a broken handler")


def test_a_raising_handler_does_not_reach_kvtier(tmp_path):
    folder, key, _ = damaged_block_on_disk(tmp_path)
    log = logging.getLogger("kvtier")
    handler = Raising()
    log.addHandler(handler)
    old_level = log.level
    log.setLevel(logging.DEBUG)
    old_hook = sys.unraisablehook
    seen = []
    sys.unraisablehook = seen.append
    try:
        with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=folder) as cache:
            assert cache.load(key) is None
            assert cache.load(key) is None  # the cache still works
    finally:
        sys.unraisablehook = old_hook
        log.removeHandler(handler)
        log.setLevel(old_level)
    assert handler.calls == 1
    # Reported as unraisable on the kvtier thread that logged, not raised.
    assert len(seen) == 1 and isinstance(seen[0].exc_value, RuntimeError)


def test_exit_with_an_open_cache_does_not_hang(tmp_path):
    folder, key, _ = damaged_block_on_disk(tmp_path)
    # A process that leaves its cache open, with a logging handler, and
    # exits: the atexit hook stops the forwarding; the cache's threads may
    # still be logging while the interpreter finalizes.
    script = textwrap.dedent(f"""
        import logging, kvtier
        logging.basicConfig(level=logging.DEBUG)
        c = kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir={str(folder)!r})
        assert c.load(bytes.fromhex({key.hex()!r})) is None
        print("loaded", flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    assert "loaded" in out.stdout
    assert "WARNING:kvtier:disk:" in out.stderr and "quarantine" in out.stderr


class Blocking(logging.Handler):
    """Holds the line until the test releases it (or 10 s pass)."""
    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.go = threading.Event()
        self.released_in_time = []

    def emit(self, record):
        self.entered.set()
        self.released_in_time.append(self.go.wait(10))


def test_logging_is_off_the_callers_thread(tmp_path):
    # A handler that blocks (a slow stream, a lock) must not hold up the
    # call that logged: load() returns while the handler still waits, and
    # the test, not the 10 s timeout, releases it. Logged synchronously,
    # load() would wait the 10 s inside the handler.
    folder, key, _ = damaged_block_on_disk(tmp_path)
    log = logging.getLogger("kvtier")
    handler = Blocking()
    log.addHandler(handler)
    old_level = log.level
    log.setLevel(logging.DEBUG)
    try:
        cache = kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=folder)
        assert cache.load(key) is None  # the quarantine line is logged here
        handler.go.set()
        cache.close()  # waits for the line to reach logging
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
    assert handler.entered.is_set()
    assert handler.released_in_time == [True]


class Collecting(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.mark.fork
def test_a_forked_child_delivers_its_own_lines(tmp_path):
    # The parent's delivery thread is inside a handler (Blocking) when the
    # process forks: the child has no such thread and inherits a logger that
    # believes it has one. Its cache's quarantine line must still reach the
    # child's logging before close() returns. Before the fork handlers the
    # line never arrived (close() gave up after 5 s).
    (tmp_path / "p").mkdir()
    (tmp_path / "k").mkdir()
    parent_folder, parent_key, _ = damaged_block_on_disk(tmp_path / "p")
    child_folder, child_key, child_hex = damaged_block_on_disk(tmp_path / "k")
    log = logging.getLogger("kvtier")
    blocking = Blocking()
    log.addHandler(blocking)
    old_level = log.level
    log.setLevel(logging.DEBUG)
    cache = kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=parent_folder)
    try:
        assert cache.load(parent_key) is None
        assert blocking.entered.wait(60)  # the delivery thread is in the handler now
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 if its line arrived
            code = 1
            try:
                log.removeHandler(blocking)
                mine = Collecting()
                log.addHandler(mine)
                with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=child_folder) as own:
                    assert own.load(child_key) is None
                code = 0 if any(child_hex in line and "quarantine" in line
                                for line in mine.lines) else 3
            finally:
                os._exit(code)
        blocking.go.set()
        status = wait_child(pid, 120)
    finally:
        blocking.go.set()
        cache.close()
        log.removeHandler(blocking)
        log.setLevel(old_level)
    assert status == 0, "the child's exit status %r (3: its line did not arrive)" % status


def wait_child(pid, limit_s):
    """The child's exit status, or kills it after limit_s (a hang) and says so."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"
