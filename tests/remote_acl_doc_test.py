#!/usr/bin/python3
"""The ACL users docs/remote-tier.md gives ("Authentication and ACLs") can
do what it says they are for: the tier's user stores, checks and clears
blocks (`synth --remote --check`, `clear`), and the bench's user runs
`kvtier bench remote`, which reads the server's CPU time with `INFO cpu`
(the line lacked `+info`: the bench failed with NOPERM).

The lines are read from the doc, their user names and passwords replaced,
and applied to a redis-server this test starts (its own: ACL users are
server-wide).

    /usr/bin/python3 tests/remote_acl_doc_test.py --cli build/dev/kvtier

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import os
import re
import shlex
import socket
import subprocess
import tempfile
import time

from remote_test_util import Runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def acl_lines():
    with open(os.path.join(ROOT, "docs", "remote-tier.md"), encoding="utf-8") as f:
        return {m.group(1): m.group(0) for m in
                re.finditer(r"^ACL SETUSER (\S+) on .*$", f.read(), re.M)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Runner(args.cli)
    lines = acl_lines()
    r.check(set(lines) == {"kvtier", "kvtier-bench"}, "ACL users in the doc: %r" % sorted(lines))
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                   "--dir", tmp, "--save", "", "--appendonly", "no"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            cli = ["redis-cli", "-p", str(port)]
            for _ in range(200):
                if subprocess.run(cli + ["ping"], capture_output=True, text=True).stdout.strip() == "PONG":
                    break
                time.sleep(0.05)
            users = {}
            for name, line in lines.items():
                words = shlex.split(line)
                password = "pw-%s-%d" % (name, os.getpid())
                words = [">" + password if w.startswith(">") else w for w in words]
                out = subprocess.run(cli + words, capture_output=True, text=True)
                r.check(out.stdout.strip() == "OK", "%s: %r" % (line, out.stdout + out.stderr))
                users[name] = "redis://%s:%s@127.0.0.1:%d" % (name, password, port)
            if "kvtier" in users:
                j = r.json("synth", "--layout", "tiny", "--random", "500", "--seed", "7",
                           "--remote", users["kvtier"], "--check")
                r.check(j.get("blocks", 0) > 0 and j.get("present") == j.get("blocks") and
                        j.get("wrong") == 0, "synth --remote --check as kvtier: %r" % j)
            if "kvtier-bench" in users:
                j = r.json("bench", "remote", "--remote", users["kvtier-bench"], "--layout", "tiny",
                           "--blocks", "20", "--rounds", "1")
                r.check(j.get("blocks") == 20 and j.get("raw_set_GBps", 0) > 0,
                        "bench remote as kvtier-bench: %r" % j)
        finally:
            server.kill()
            server.wait()
    r.finish()


if __name__ == "__main__":
    main()
