#!/usr/bin/python3
"""The logger's events on the CLI's stderr (issue 25 item 6, DESIGN.md §7):
`kvtier replay --remote URL` against a redis-server this test starts, kills
(SIGKILL) during the replay and starts again on the same port. Checks:
  - stderr has exactly one line saying the server is down
    (`kvtier: warning: remote: redis HOST:PORT is down ...`), and exactly
    one saying it is back up (`kvtier: info: ... is back up`), in that
    order, however many calls failed in between;
  - no other line about the remote tier (the failed probes while it was
    down are debug lines, not printed).
The replay (the whole Mooncake trace, longer than the test needs) is
stopped once the second line is there.

    /usr/bin/python3 tests/replay_remote_events_test.py --cli build/dev/kvtier

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from remote_test_util import ROOT, Runner, unique_prefix

TRACE = os.path.join(ROOT, "tests", "data", "mooncake", "synthetic_trace.jsonl")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(port, work):
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--dir", work],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    sys.exit("redis-server did not start on port %d" % port)


def wait_for_keys(port, seconds):
    """True once the server holds a key (DBSIZE > 0), within `seconds`."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                s.sendall(b"DBSIZE\r\n")
                reply = s.recv(64)
                if reply.startswith(b":") and int(reply[1:].split(b"\r")[0]) > 0:
                    return True
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    return False


class Lines:
    """Collects a stream's lines on a thread; wait_for() blocks until one
    contains a text."""

    def __init__(self, stream):
        self.lines = []
        self.cv = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for line in stream:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()

    def wait_for(self, text, seconds):
        deadline = time.time() + seconds
        with self.cv:
            while not any(text in l for l in self.lines):
                left = deadline - time.time()
                if left <= 0:
                    return False
                self.cv.wait(left)
            return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Runner(args.cli)
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not installed (scripts/bootstrap installs it)")
    work = tempfile.mkdtemp(prefix="kvtier-events-")
    port = free_port()
    address = "127.0.0.1:%d" % port
    server = start_redis(port, work)
    replay = subprocess.Popen(
        [args.cli, "replay", TRACE, "--ram-tokens", "300000", "--remote",
         "redis://" + address, "--remote-prefix", unique_prefix("events"), "--json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(replay.stderr)
    try:
        # Killed only once the replay has stored into Redis (a busy machine may
        # take seconds to open the cache: a kill before that is an open failure).
        r.check(wait_for_keys(port, 120), "the replay stored nothing into Redis in 120 s")
        r.check(replay.poll() is None, "the replay ended before the server was killed")
        server.kill()
        server.wait()
        r.check(err.wait_for(address + " is down", 60),
                "no 'is down' line within 60 s of the kill: %r" % err.lines)
        time.sleep(1.0)  # calls keep failing (breaker open, probes refused)
        server = start_redis(port, work)
        r.check(err.wait_for(address + " is back up", 90),
                "no 'is back up' line within 90 s of the restart: %r" % err.lines)
        r.check(replay.poll() is None, "the replay ended before the server came back")
    finally:
        replay.send_signal(signal.SIGKILL)
        replay.wait()
        server.kill()
        server.wait()
        err.thread.join(10)
        shutil.rmtree(work, ignore_errors=True)

    remote = [l for l in err.lines if "remote:" in l]
    print("\n".join(remote))
    down = [i for i, l in enumerate(remote) if l.startswith("kvtier: warning: remote: redis " +
                                                            address + " is down")]
    up = [i for i, l in enumerate(remote) if l == "kvtier: info: remote: redis " + address +
          " is back up"]
    r.check(len(down) == 1 and len(up) == 1 and down[0] < up[0],
            "wanted one 'down' line, then one 'back up' line: %r" % remote)
    r.check(len(remote) == 2, "wanted no other remote line: %r" % remote)
    r.finish()


if __name__ == "__main__":
    main()
