"""docs/operations.md's systemd unit and daemon config are the files in
examples/systemd/, and `kvtier serve` starts with that config (its paths
and sizes overridden by flags, which win over the file) and stops cleanly on
SIGTERM, as the unit's KillSignal expects."""

import os
import signal
import socket
import subprocess
import time

LONG_S = 120


def read(source_dir, *parts):
    with open(os.path.join(source_dir, *parts), encoding="utf-8") as f:
        return f.read()


def test_the_docs_show_the_example_files(source_dir):
    doc = read(source_dir, "docs", "operations.md")
    unit = read(source_dir, "examples", "systemd", "kvtier-serve.service")
    config = read(source_dir, "examples", "systemd", "serve.json")
    assert "```ini\n" + unit + "```" in doc
    assert "```json\n" + config + "```" in doc
    assert "ExecStart=/usr/bin/kvtier serve --config /etc/kvtier/serve.json\n" in unit


def test_the_daemon_runs_with_the_example_config(cli, source_dir, tmp_path):
    config = os.path.join(source_dir, "examples", "systemd", "serve.json")
    sock = tmp_path / "kvtier.sock"
    err = open(tmp_path / "daemon.err", "w")
    proc = subprocess.Popen(
        [cli, "serve", "--config", config, "--server", "unix:" + str(sock),
         "--host-bytes", "64MiB", "--disk-dir", str(tmp_path / "cache"),
         "--server-socket-group", str(os.getegid())],
        stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        deadline = time.monotonic() + LONG_S
        while True:
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(str(sock))
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "daemon.err").read_text()
                assert time.monotonic() < deadline, "kvtier serve did not listen"
                time.sleep(0.02)
            finally:
                s.close()
        st = os.stat(sock)
        assert st.st_mode & 0o777 == 0o660
        assert st.st_gid == os.getegid()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=LONG_S)
        assert proc.returncode == 0, (tmp_path / "daemon.err").read_text()
        assert out == "kvtier serve: wrote 0 blocks to the tiers below (0 dropped)\n"
        assert not sock.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(LONG_S)
