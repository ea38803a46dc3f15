#!/usr/bin/python3
"""The remote-tier commands of `kvtier`: synth --remote [--check] against one
server and a cluster, bench remote's output keys, and bad input (exit 2, one
line) or an unreachable server (exit 1, one line).

Servers: KVTIER_TEST_REDIS_URL / KVTIER_TEST_REDIS_CLUSTER_URL (scripts/test
starts them with scripts/redis-servers), or else this test starts its own
with scripts/redis-servers and stops them on exit.

    /usr/bin/python3 tests/remote_cli_test.py --cli build/dev/kvtier

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import json
import os
import tempfile

from remote_test_util import Runner, Servers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = os.path.join(ROOT, "tests", "data", "mooncake", "synthetic_trace.jsonl")
BENCH_KEYS = {"set_GBps", "get_GBps", "raw_set_GBps", "raw_get_GBps", "exists_us_per_key"}
TLS_KEYS = {"tls_set_GBps", "tls_get_GBps", "tls_set_ratio", "tls_get_ratio", "raw_tls_set_GBps",
            "raw_tls_get_GBps", "tls_set_raw_ratio", "tls_get_raw_ratio",
            "raw_server_set_cpu_s_per_GB", "raw_server_get_cpu_s_per_GB",
            "raw_tls_server_set_cpu_s_per_GB", "raw_tls_server_get_cpu_s_per_GB",
            "server_tls_set_ratio", "server_tls_get_ratio"}
SIGNED_KEYS = {"signed_set_GBps", "signed_get_GBps", "signed_set_ratio", "signed_get_ratio",
               "hmac_GBps", "cores", "set_cpu_s_per_GB", "get_cpu_s_per_GB",
               "signed_set_bound_GBps", "signed_get_bound_GBps", "signed_set_bound_ratio",
               "signed_get_bound_ratio", "signed_set_cores_busy", "signed_get_cores_busy"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Runner(args.cli)
    with tempfile.TemporaryDirectory() as tmp:
        work = os.path.join(tmp, "redis")
        with Servers(work) as srv:
            single, cluster = srv.single, srv.cluster
            for url in (single, cluster):
                # A seed unique to this run: fresh keys on a shared server.
                seed = str(os.getpid())
                j = r.json("synth", "--layout", "tiny", "--random", "2000", "--seed", seed,
                           "--remote", url, "--check")
                r.check(j == {"blocks": 125, "present": 125, "missing": 0, "wrong": 0},
                        "synth --remote %s --check: %r" % (url, j))
            j = r.json("bench", "remote", "--remote", single, "--layout", "tiny", "--blocks", "20",
                       "--rounds", "1")
            r.check(BENCH_KEYS <= set(j), "bench remote keys: %r" % sorted(j))
            r.check(all(j.get(k, 0) > 0 for k in BENCH_KEYS), "bench remote figures: %r" % j)
            r.check(j.get("blocks") == 20 and j.get("parts") == 1, "bench remote: %r" % j)
            # --tls: the tier over TLS too, against the plaintext tier.
            config = os.path.join(tmp, "tls.json")
            with open(config, "w") as f:
                json.dump({"remote_tls_ca_file": os.path.join(srv.tls_dir, "ca.crt")}, f)
            j = r.json("bench", "remote", "--remote", single, "--tls", srv.tls, "--config", config,
                       "--layout", "tiny", "--blocks", "20", "--rounds", "1")
            r.check(all(j.get(k, 0) > 0 for k in TLS_KEYS), "bench remote --tls: %r" % j)
            r.one_line_error("bench", "remote", "--remote", single, "--tls", single,
                             "--layout", "tiny", "--blocks", "2", expect_rc=2)
            # Its raw loop needs one TLS server, not a cluster.
            r.one_line_error("bench", "remote", "--remote", single, "--tls",
                             srv.tls.replace("rediss://", "rediss-cluster://"),
                             "--config", config, "--layout", "tiny", "--blocks", "2",
                             expect_rc=2)
            # --signed: signed against unsigned, and against the bound that
            # HMAC-SHA256 on this machine's cores sets (never above the
            # unsigned phase).
            j = r.json("bench", "remote", "--remote", single, "--signed", "--layout", "tiny",
                       "--blocks", "20", "--rounds", "1")
            r.check(all(j.get(k, 0) > 0 for k in SIGNED_KEYS), "bench remote --signed: %r" % j)
            r.check(j.get("signed_get_bound_GBps", 1e9) <= j.get("get_GBps", 0) and
                    j.get("signed_set_bound_GBps", 1e9) <= j.get("set_GBps", 0),
                    "bench remote --signed bounds: %r" % j)
            j = r.json("bench", "remote", "--remote", single, "--block-bytes", "20000",
                       "--blocks", "4", "--rounds", "1")
            r.check(j.get("block_bytes", 0) > 20000, "bench remote --block-bytes: %r" % j)

            # Bad input: exit 2, one line.
            r.one_line_error("bench", "remote", "--remote", cluster, "--layout", "tiny",
                             "--blocks", "2", expect_rc=2)
            r.one_line_error("bench", "remote", "--remote", "http://x:1", "--layout", "tiny",
                             "--blocks", "2", expect_rc=2)
            r.one_line_error("bench", "remote", "--remote", single, "--layout", "tiny",
                             "--block-bytes", "10", "--blocks", "2", expect_rc=2)
            r.one_line_error("bench", "remote", "--remote", single, "--layout", "tiny",
                             "--blocks", "0", expect_rc=2)
            r.one_line_error("synth", "--layout", "tiny", "--tokens", "1,2", "--remote",
                             "redis://h:99999", expect_rc=2)
            r.one_line_error("synth", "--layout", "tiny", "--tokens", "1,2", "--remote", single,
                             "--out", tmp, expect_rc=2)
            # Nobody listens on port 1: a clear error, not a hang.
            r.one_line_error("synth", "--layout", "tiny", "--random", "32", "--remote",
                             "redis://127.0.0.1:1", expect_rc=2)
            # The same refused connection is the same exit code in every
            # command (docs/replay.md: a server that does not answer is bad
            # input, exit 2); bench remote used to exit 1.
            r.one_line_error("bench", "remote", "--remote", "redis://127.0.0.1:1", "--layout",
                             "tiny", "--blocks", "2", expect_rc=2)
            r.one_line_error("replay", TRACE, "--limit", "5", "--ram-tokens", "3000000",
                             "--remote", "redis://127.0.0.1:1", expect_rc=2)
    r.finish()


if __name__ == "__main__":
    main()
