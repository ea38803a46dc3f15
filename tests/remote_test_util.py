"""Shared by the CLI tests that need Redis (replay_remote_test.py,
demo_remote_test.py): a runner that counts checks, and the servers.

Servers: KVTIER_TEST_REDIS_URL / KVTIER_TEST_REDIS_CLUSTER_URL (scripts/test
starts them with scripts/redis-servers), or else the test starts its own
with scripts/redis-servers and stops them on exit.
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Runner:
    def __init__(self, cli):
        self.cli = cli
        self.passed = 0
        self.failed = 0

    def run(self, *args, expect_rc=0, timeout=600):
        p = subprocess.run([self.cli, *args], capture_output=True, text=True, timeout=timeout)
        if p.returncode != expect_rc:
            self.fail("%s: exit %d, wanted %d; stderr: %s" %
                      (" ".join(args), p.returncode, expect_rc, p.stderr.strip()[-600:]))
        return p

    def json(self, *args, expect_rc=0):
        p = self.run(*args, "--json", expect_rc=expect_rc)
        try:
            return json.loads(p.stdout)
        except json.JSONDecodeError:
            self.fail("%s: stdout is not one JSON object: %r" % (" ".join(args), p.stdout[:200]))
            return {}

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.fail(what)

    def fail(self, what):
        self.failed += 1
        print("FAIL:", what)

    def one_line_error(self, *args, expect_rc=2):
        p = self.run(*args, expect_rc=expect_rc)
        lines = p.stderr.strip().splitlines()
        self.check(len(lines) == 1 and lines[0].startswith("kvtier: ") and p.stdout == "",
                   "%s: wanted one 'kvtier: ...' line and no stdout, got %r / %r" %
                   (" ".join(args), p.stderr, p.stdout))

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.exit(1 if self.failed else 0)


def unique_prefix(test):
    """A key prefix no other test run uses: tests sharing a server never see
    each other's blocks."""
    return "kvtier:test:%s:%d:%d:" % (test, os.getpid(), time.time_ns())


class Servers:
    """The single server's and the cluster's URLs, and the TLS server's with
    its certificate folder (scripts/redis-servers); starts them all if the
    environment does not name them."""

    def __init__(self, work):
        self.work = None
        env = os.environ
        if not all(env.get(k) for k in ("KVTIER_TEST_REDIS_URL", "KVTIER_TEST_REDIS_CLUSTER_URL",
                                        "KVTIER_TEST_REDIS_TLS_URL", "KVTIER_TEST_TLS_DIR")):
            out = subprocess.run([os.path.join(ROOT, "scripts", "redis-servers"), "start", work],
                                 capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                sys.exit("no Redis servers: set KVTIER_TEST_REDIS_URL, "
                         "KVTIER_TEST_REDIS_CLUSTER_URL, KVTIER_TEST_REDIS_TLS_URL and "
                         "KVTIER_TEST_TLS_DIR (scripts/redis-servers start DIR prints "
                         "them) or install redis-server: " + out.stderr.strip())
            env = dict(line.split(" ", 1)[1].split("=", 1) for line in out.stdout.splitlines())
            self.work = work
        self.single = env["KVTIER_TEST_REDIS_URL"]
        self.cluster = env["KVTIER_TEST_REDIS_CLUSTER_URL"]
        self.tls = env["KVTIER_TEST_REDIS_TLS_URL"]
        self.tls_dir = env["KVTIER_TEST_TLS_DIR"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.work:
            subprocess.run([os.path.join(ROOT, "scripts", "redis-servers"), "stop", self.work],
                           timeout=60)
