#!/usr/bin/python3
"""Times Cache.match() against a paused Redis (SIGSTOP): issue 23's check
that no match waits longer than remote_lookup_budget (plus 5 ms).

Starts its own redis-server on a free port, opens a kvtier.Cache on it,
stores nothing, pauses the server and times N match() calls of keys no
tier holds (so each must ask Redis), then resumes it. Prints one line per
call and a summary; a timing for a report, not a test assertion.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/match_paused_timing.py \\
        [--calls 20] [--budget 20ms] [--no-log]
"""
import argparse
import os
import signal
import socket
import subprocess
import tempfile
import time

import kvtier


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--budget", default="20ms")
    ap.add_argument("--keys", type=int, default=8, help="keys per match() call")
    ap.add_argument("--no-log", action="store_true",
                    help="drop the kvtier logger's lines (what Python logging costs the call "
                         "that opens the breaker)")
    args = ap.parse_args()
    if args.no_log:
        import logging
        logging.getLogger("kvtier").disabled = True
    port = free_port()
    with tempfile.TemporaryDirectory() as work:
        server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                                   "--appendonly", "no", "--dir", work],
                                  stdout=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            cache = kvtier.Cache("tiny", host_bytes=1 << 26, remote="redis://127.0.0.1:%d" % port,
                                 remote_lookup_budget=args.budget)
            os.kill(server.pid, signal.SIGSTOP)
            times = []
            for i in range(args.calls):
                keys = [os.urandom(32) for _ in range(args.keys)]
                t0 = time.perf_counter()
                n = cache.match(keys)
                ms = (time.perf_counter() - t0) * 1e3
                times.append(ms)
                print("match %2d: %7.2f ms, %d blocks" % (i + 1, ms, n))
            remote = cache.stats()["remote"]
            os.kill(server.pid, signal.SIGCONT)
            cache.close()
            print("budget %s: max %.2f ms, median %.2f ms over %d calls; exists_late %d, "
                  "breaker_opens %d, breaker_rejections %d" %
                  (args.budget, max(times), sorted(times)[len(times) // 2], len(times),
                   remote["exists_late"], remote["breaker_opens"], remote["breaker_rejections"]))
        finally:
            try:
                os.kill(server.pid, signal.SIGCONT)
            except OSError:
                pass
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
