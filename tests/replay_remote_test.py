#!/usr/bin/python3
"""`kvtier replay --remote URL`: two processes share a Redis server (issue 10).

For the single server and for the 3-master cluster, under a key prefix of
its own (so that it starts from an empty keyspace): replay the first
LIMIT requests of the repository's Mooncake trace with a RAM tier of
RAM_TOKENS, then replay them again in a second process. The first process
stores every block it computes into Redis; the second starts with an empty
RAM tier, so every block it finds comes from Redis. Checks, exactly:
  - both: wrong = 0, every loaded block verified, no remote copy dropped,
    no bad value; hit tokens split RAM + disk + remote = total;
  - the first: the same hit tokens as a replay without --remote or better
    (Redis holds what RAM evicted), and it stored blocks;
  - the second: hit_ratio >= 0.99 × max_hit_ratio (Redis holds every block
    the first computed), hit_ratio_remote > 0, and it stored nothing new
    (no insert: the server had every block).
Then bad input: --remote with --payload none or --sweep, --remote-prefix
without --remote, a bad URL, a server nobody runs: exit 2, one line.

The slice (LIMIT requests, RAM_TOKENS) keeps the ASan build to seconds;
docs/remote-tier.md has the full-trace figures on the release build.

    /usr/bin/python3 tests/replay_remote_test.py --cli build/dev/kvtier

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import os
import tempfile

from remote_test_util import ROOT, Runner, Servers, unique_prefix

TRACE = os.path.join(ROOT, "tests", "data", "mooncake", "synthetic_trace.jsonl")
LIMIT = "300"
# Small enough that the RAM tier evicts within the slice, so that the first
# process also gets hits from Redis.
RAM_TOKENS = "300000"


def replay(r, url, prefix, *extra):
    return r.json("replay", TRACE, "--limit", LIMIT, "--ram-tokens", RAM_TOKENS, "--remote", url,
                  "--remote-prefix", prefix, *extra)


def check_run(r, j, what):
    r.check(j.get("wrong") == 0 and j.get("verified", 0) > 0,
            "%s: wrong %r, verified %r" % (what, j.get("wrong"), j.get("verified")))
    r.check(j.get("hit_tokens_ram", -1) + j.get("hit_tokens_disk", -1) +
            j.get("hit_tokens_remote", -1) == j.get("hit_tokens"),
            "%s: hit tokens RAM + disk + remote != total: %r" % (what, j))
    r.check(j.get("remote_dropped") == 0 and j.get("remote_bad_values") == 0,
            "%s: dropped %r, bad values %r" % (what, j.get("remote_dropped"),
                                               j.get("remote_bad_values")))


def two_processes(r, url, local):
    prefix = unique_prefix("replay")
    first = replay(r, url, prefix)
    second = replay(r, url, prefix)
    what = "replay --remote %s" % url
    check_run(r, first, what + " (first)")
    check_run(r, second, what + " (second)")
    r.check(first.get("remote") is True and first.get("remote_stored", 0) > 0,
            "%s (first): stored %r" % (what, first.get("remote_stored")))
    r.check(first.get("hit_tokens", 0) >= local.get("hit_tokens", 1 << 62),
            "%s (first): %r hit tokens, %r without Redis" %
            (what, first.get("hit_tokens"), local.get("hit_tokens")))
    r.check(first.get("hit_tokens_remote", 0) > 0,
            "%s (first): no remote hit though RAM evicts: %r" % (what, first))
    r.check(second.get("max_hit_ratio") == first.get("max_hit_ratio") and
            second.get("hit_ratio", 0) >= 0.99 * second.get("max_hit_ratio", 2),
            "%s (second): hit_ratio %r, max_hit_ratio %r" %
            (what, second.get("hit_ratio"), second.get("max_hit_ratio")))
    r.check(second.get("hit_ratio_remote", 0) > 0,
            "%s (second): hit_ratio_remote %r" % (what, second.get("hit_ratio_remote")))
    # Redis has every block the first process computed: nothing to compute
    # or store again.
    r.check(second.get("inserts") == 0 and second.get("remote_stored") == 0,
            "%s (second): %r inserts, %r blocks stored" %
            (what, second.get("inserts"), second.get("remote_stored")))
    print("%s: first hit_ratio %.5f (remote %.5f), second %.5f (remote %.5f), max %.5f" %
          (what, first.get("hit_ratio", -1), first.get("hit_ratio_remote", -1),
           second.get("hit_ratio", -1), second.get("hit_ratio_remote", -1),
           second.get("max_hit_ratio", -1)))


def bad_input(r, url):
    base = ("replay", TRACE, "--limit", "5")
    r.one_line_error(*base, "--ram-tokens", "3000000", "--payload", "none", "--remote", url)
    r.one_line_error(*base, "--sweep", "3000000,6000000", "--remote", url)
    r.one_line_error(*base, "--sweep", "3000000,6000000", "--remote-prefix", "x:")
    r.one_line_error(*base, "--ram-tokens", "3000000", "--remote-prefix", "x:")
    r.one_line_error(*base, "--ram-tokens", "3000000", "--remote", "http://127.0.0.1:1")
    r.one_line_error(*base, "--ram-tokens", "3000000", "--remote", url, "--remote-prefix", "a{b")
    # Nobody listens on port 1: a clear error at once, not a replay of misses.
    r.one_line_error(*base, "--ram-tokens", "3000000", "--remote", "redis://127.0.0.1:1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Runner(args.cli)
    with tempfile.TemporaryDirectory() as tmp, Servers(os.path.join(tmp, "redis")) as servers:
        local = r.json("replay", TRACE, "--limit", LIMIT, "--ram-tokens", RAM_TOKENS)
        for url in (servers.single, servers.cluster):
            two_processes(r, url, local)
        bad_input(r, servers.single)
    r.finish()


if __name__ == "__main__":
    main()
