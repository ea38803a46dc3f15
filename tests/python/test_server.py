"""kvtier.Cache(..., server="unix:PATH"): a client of `kvtier serve`
(docs/server.md). The daemon is the built `kvtier serve`; the writer is a
second Python process; blocks differ per key (make_blocks' seeded content)."""

import http.client
import os
import re
import subprocess
import sys
import time

import pytest

import kvtier
from conftest import make_blocks, start_daemon

HERE = os.path.dirname(os.path.abspath(__file__))
# Bounds that end a hung test on a busy machine; not what is measured.
LONG_S = 120


@pytest.fixture
def daemon(cli, tmp_path):
    sock = tmp_path / "s.sock"
    proc = start_daemon(cli, sock, tmp_path, "--disk-dir", str(tmp_path / "cache"))
    yield "unix:" + str(sock), proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(LONG_S)


WRITER = """
import sys
sys.path.insert(0, {here!r})
import kvtier
from conftest import make_blocks
keys, blocks, _ = make_blocks(kvtier.Layout("tiny"), "srv", list(range(16 * 6)), seed=7)
with kvtier.Cache("tiny", server={server!r}) as c:
    for k, b in zip(keys, blocks):
        c.store(k, b)
print("stored", len(keys))
"""


def test_a_second_process_loads_what_the_first_stored_byte_for_byte(daemon):
    server, _ = daemon
    # First in this process: without numpy (a wheel's venv) the test is
    # skipped here rather than failed by the writer's own make_blocks.
    keys, blocks, _ = make_blocks(kvtier.Layout("tiny"), "srv", list(range(16 * 6)), seed=7)
    out = subprocess.run([sys.executable, "-c", WRITER.format(here=HERE, server=server)],
                         capture_output=True, text=True, timeout=LONG_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "stored 6"
    with kvtier.Cache("tiny", server=server) as c:
        assert c.match(keys) == 6
        assert c.match(keys + [bytes(32)]) == 6
        for k, b in zip(keys, blocks):
            assert c.load(k) == b
        out_buf = bytearray(len(blocks[0]) + 10)
        assert c.load_into(keys[2], out_buf) == len(blocks[2])
        assert bytes(out_buf[:len(blocks[2])]) == blocks[2]
        assert c.contains(keys[0]) == "host"
        assert c.contains(bytes(32)) is None
        assert c.load(bytes(32)) is None
        assert c.erase(keys[5]) is True
        assert c.load(keys[5]) is None
        assert c.match(keys) == 5
        stats = c.stats()
        assert stats["lookups"] == 9
        assert stats["hits_host"] == 7
        assert stats["misses"] == 2
        assert stats["bytes_loaded_host"] == sum(map(len, blocks)) + len(blocks[2])
        assert (stats["stores"], stats["bytes_stored"]) == (0, 0)


def test_sigterm_writes_the_arena_to_disk_and_a_new_daemon_serves_it(cli, tmp_path):
    sock = tmp_path / "s.sock"
    folder = tmp_path / "cache"
    proc = start_daemon(cli, sock, tmp_path, "--disk-dir", str(folder))
    try:
        keys, blocks, _ = make_blocks(kvtier.Layout("tiny"), "srv", list(range(16 * 4)), seed=3)
        with kvtier.Cache("tiny", server="unix:" + str(sock)) as c:
            for k, b in zip(keys, blocks):
                c.store(k, b)
            assert (c.stats()["stores"], c.stats()["bytes_stored"]) == (4, sum(map(len, blocks)))
        proc.terminate()
        out, _ = proc.communicate(timeout=LONG_S)
        assert proc.returncode == 0
        assert out.strip() == "kvtier serve: wrote 4 blocks to the tiers below (0 dropped)"
        # The folder opens in-process with every block...
        with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=folder) as local:
            assert [local.load(k) for k in keys] == blocks
        # ... and a new daemon on it serves them (promoted from disk into its arena).
        proc = start_daemon(cli, sock, tmp_path, "--disk-dir", str(folder))
        with kvtier.Cache("tiny", server="unix:" + str(sock)) as c:
            assert c.match(keys) == 4
            assert [c.load(k) for k in keys] == blocks
            assert c.contains(keys[0]) == "host"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(LONG_S)


def test_a_daemon_that_is_not_there_is_misses_and_named_errors(tmp_path):
    server = "unix:" + str(tmp_path / "nobody.sock")
    keys, blocks, _ = make_blocks(kvtier.Layout("tiny"), "srv", list(range(16)), seed=1)
    with kvtier.Cache("tiny", server=server, server_timeout="200ms") as c:
        assert c.match(keys) == 0
        assert c.load(keys[0]) is None
        assert c.contains(keys[0]) is None
        with pytest.raises(kvtier.Unavailable):
            c.store(keys[0], blocks[0])
        with pytest.raises(kvtier.FailedPrecondition, match="not available with the server"):
            c.clear()


def test_options_the_daemon_owns_are_refused_by_name(tmp_path):
    server = "unix:" + str(tmp_path / "s.sock")
    with pytest.raises(kvtier.InvalidArgument, match="host_bytes: not with server"):
        kvtier.Cache("tiny", server=server, host_bytes=1 << 20)
    with pytest.raises(kvtier.InvalidArgument, match="disk_dir: not with server"):
        kvtier.Cache("tiny", server=server, disk_dir=tmp_path / "d")
    with pytest.raises(kvtier.InvalidArgument, match="server_namespace_quota: only `kvtier serve`"):
        kvtier.Cache("tiny", server=server, server_namespace_quota="1GiB")
    with pytest.raises(kvtier.InvalidArgument, match="server_namespace_quota: only `kvtier serve`"):
        kvtier.Cache("tiny", host_bytes=1 << 20, server_namespace_quota="1GiB")
    with pytest.raises(kvtier.InvalidArgument, match="server_socket_group: only `kvtier serve`"):
        kvtier.Cache("tiny", server=server, server_socket_group="kvtier")
    with pytest.raises(kvtier.InvalidArgument, match="server"):
        kvtier.Cache("tiny", server="tcp://127.0.0.1:1")


def http_address(proc, tmp_path):
    """HOST:PORT from the daemon's "kvtier serve: HTTP on http://HOST:PORT" line."""
    deadline = time.monotonic() + LONG_S
    while time.monotonic() < deadline:
        m = re.search(r"HTTP on http://(\S+) ", (tmp_path / "daemon.err").read_text())
        if m:
            return m.group(1)
        assert proc.poll() is None, (tmp_path / "daemon.err").read_text()
        time.sleep(0.02)
    pytest.fail("no HTTP line: " + (tmp_path / "daemon.err").read_text())


def http_get(address, path, method="GET"):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=LONG_S)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type"), r.read().decode()
    finally:
        conn.close()


def test_metrics_and_healthz_over_http_then_refused_after_sigterm(cli, tmp_path):
    sock = tmp_path / "s.sock"
    # Port 0: one the kernel picks, printed at start (a bare port is on 127.0.0.1).
    proc = start_daemon(cli, sock, tmp_path, "--disk-dir", str(tmp_path / "cache"),
                        "--server-http", "0")
    try:
        address = http_address(proc, tmp_path)
        assert address.startswith("127.0.0.1:")
        assert http_get(address, "/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
        keys, blocks, _ = make_blocks(kvtier.Layout("tiny"), "srv", list(range(16 * 2)), seed=5)
        with kvtier.Cache("tiny", server="unix:" + str(sock)) as c:
            for k, b in zip(keys, blocks):
                c.store(k, b)
            assert c.load(keys[0]) == blocks[0]
            assert c.load(bytes(32)) is None
            status, content_type, page = http_get(address, "/metrics")
        assert status == 200
        assert content_type == "text/plain; version=0.0.4; charset=utf-8"
        lines = page.splitlines()
        for family, kind, samples in [
            ("kvtier_server_stores_total", "counter", ['{tier="arena"} 2', '{tier="host"} 0',
                                                       '{tier="disk"} 0']),
            ("kvtier_server_hits_total", "counter", ['{tier="arena"} 1', '{tier="host"} 0',
                                                     '{tier="disk"} 0']),
            ("kvtier_server_misses_total", "counter", ['{tier="arena"} 1', '{tier="host"} 1',
                                                       '{tier="disk"} 1']),
            ("kvtier_server_blocks", "gauge", ['{tier="arena"} 2', '{tier="host"} 0',
                                               '{tier="disk"} 0']),
            ("kvtier_server_bytes", "gauge", ['{tier="arena"} %d' % (len(blocks[0]) * 2),
                                              '{tier="host"} 0', '{tier="disk"} 0']),
            ("kvtier_server_arena_dirty", "gauge", [" 2"]),
        ]:
            at = lines.index("# TYPE %s %s" % (family, kind))
            assert lines[at - 1].startswith("# HELP %s " % family)
            assert lines[at + 1:at + 1 + len(samples)] == [family + s for s in samples]
        # The Python client, labelled with its id and this process's pid.
        assert re.search(r'^kvtier_server_client_leases\{client="\d+",pid="%d"\} 0$' % os.getpid(),
                         page, re.M)
        assert http_get(address, "/nope")[0] == 404
        assert http_get(address, "/metrics", method="POST")[0] == 405
        proc.terminate()
        out, _ = proc.communicate(timeout=LONG_S)
        assert proc.returncode == 0
        assert out.strip() == "kvtier serve: wrote 2 blocks to the tiers below (0 dropped)"
        with pytest.raises(ConnectionRefusedError):
            http_get(address, "/healthz")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(LONG_S)


def test_server_http_is_checked_and_only_the_daemon_takes_it(cli, tmp_path):
    server = "unix:" + str(tmp_path / "s.sock")
    for bad in ["127.0.0.1:70000", "example.com:80"]:
        out = subprocess.run([cli, "serve", "--server", server, "--layout", "tiny",
                              "--host-bytes", "4MiB", "--server-http", bad],
                             capture_output=True, text=True, timeout=LONG_S)
        assert out.returncode != 0
        assert 'server_http: "%s" is not HOST:PORT or PORT' % bad in out.stderr
    assert not (tmp_path / "s.sock").exists()
    with pytest.raises(kvtier.InvalidArgument, match="server_http: only `kvtier serve` takes it"):
        kvtier.Cache("tiny", server=server, server_http="127.0.0.1:9464")
    with pytest.raises(kvtier.InvalidArgument, match="server_http: only `kvtier serve` takes it"):
        kvtier.Cache("tiny", host_bytes=1 << 20, server_http=9464)
    with pytest.raises(kvtier.InvalidArgument, match="server_http: expected"):
        kvtier.Cache("tiny", server=server, server_http=-1)
