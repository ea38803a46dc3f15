#!/usr/bin/python3
"""`kvtier demo --remote URL`: a second host that shares only Redis.

Against the single server and the 3-master cluster, each under a key prefix
of its own (an empty keyspace), `kvtier demo --quick --remote URL --json`
must exit 0 and report, exactly (for the default model, `--model hybrid`
and `--model hybrid --kv-bits 8`):
  - every request bit-exact (the first host's against a recomputation, the
    second host's against the first host's logits);
  - one second-host request per conversation, each with its reused prefix
    from Redis but for the system prompt's blocks, which later requests
    share in the pool: remote_blocks > 0, no host or disk block, reused =
    (pool + remote blocks) × block_tokens; the totals add up;
  - the first host's requests took nothing from Redis (its own tiers hold
    everything it stored), and the caches wrote blocks to Redis;
  - the second host's folder exists and is not the first host's.
The text output names the second host's hits from Redis and says the logits
are identical. Bad input: --remote-prefix without --remote, a bad URL, a
server nobody runs: exit 2, one line.

    /usr/bin/python3 tests/demo_remote_test.py --cli build/dev/kvtier

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import os
import re
import tempfile

from remote_test_util import Runner, Servers, unique_prefix

QUICK_CONVERSATIONS = 3  # QuickDemoOptions


def check_json(r, j, url, folder, hybrid=False):
    what = "demo --remote %s" % url
    reqs = j.get("requests", [])
    first = [q for q in reqs if q.get("host") == 1]
    second = [q for q in reqs if q.get("host") == 2]
    bt = j.get("block_tokens", 0)
    r.check(j.get("remote") is True and j.get("bit_exact") is True and
            j.get("mismatched_requests") == 0, "%s: remote/bit_exact: %r" % (what, j))
    r.check(len(second) == QUICK_CONVERSATIONS and
            [q["conversation"] for q in second] == list(range(QUICK_CONVERSATIONS)),
            "%s: second-host requests %r" % (what, second))
    for i, q in enumerate(second):
        # The first finds nothing local; later ones share the system
        # prompt's blocks with it in the pool. A hybrid model's blocks
        # restored for a prefix hold only what that prefix needs (the
        # window, the last block's recurrent state): the pool does not share
        # them, and a partial read from Redis is never promoted into the
        # host tier (docs/tiers.md), so every request reads its prefix's
        # needed tensors from Redis again.
        if hybrid:
            ok = (q["pool_blocks"] == 0 and q["host_blocks"] == 0 and
                  q["reused_tokens"] == q["remote_blocks"] * bt and q["source"] == "remote")
        else:
            ok = (q["host_blocks"] == 0 and
                  q["reused_tokens"] == (q["pool_blocks"] + q["remote_blocks"]) * bt and
                  q["source"] == ("remote" if i == 0 else "pool+remote"))
        r.check(ok and q["remote_blocks"] > 0 and q["disk_blocks"] == 0 and q["bit_exact"] and
                q["logits_compared"] == j["requests"][0]["logits_compared"],
                "%s: second-host request %r" % (what, q))
    # It serves each conversation's last prompt again: same prompt lengths.
    last = {q["conversation"]: q["prompt_tokens"] for q in first}
    r.check(all(q["prompt_tokens"] == last[q["conversation"]] for q in second),
            "%s: second host's prompts differ from the first host's last ones" % what)
    r.check(all(q["remote_blocks"] == 0 for q in first),
            "%s: the first host read from Redis: %r" % (what, first))
    r.check(j.get("second_host_remote_blocks") == sum(q["remote_blocks"] for q in second) and
            j.get("remote_blocks_hit") == j.get("second_host_remote_blocks") and
            j.get("remote_blocks_stored", 0) > 0,
            "%s: totals %r" % (what, {k: j.get(k) for k in (
                "second_host_remote_blocks", "remote_blocks_hit", "remote_blocks_stored")}))
    r.check(os.path.isdir(os.path.join(folder, "host2", "cache")) and
            os.path.isdir(os.path.join(folder, "cache")),
            "%s: cache folders missing under %s" % (what, folder))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Runner(args.cli)
    with tempfile.TemporaryDirectory() as tmp, Servers(os.path.join(tmp, "redis")) as servers:
        # The default model, the hybrid one (attention, sliding window, gated
        # linear attention: the second host resumes the recurrent state from
        # Redis) and the hybrid with 8-bit quantized K/V.
        runs = [(servers.single, []), (servers.cluster, []),
                (servers.single, ["--model", "hybrid"]), (servers.cluster, ["--model", "hybrid"]),
                (servers.single, ["--model", "hybrid", "--kv-bits", "8"])]
        for n, (url, model) in enumerate(runs):
            folder = os.path.join(tmp, "demo%d" % n)
            j = r.json("demo", "--quick", "--quiet", "--dir", folder, "--remote", url,
                       "--remote-prefix", unique_prefix("demo"), *model)
            check_json(r, j, "%s %s" % (url, " ".join(model)), folder, hybrid=bool(model))
            if model:
                r.check(j.get("model", {}).get("mixers") == ["attention", "sliding", "linear"] and
                        j["model"].get("kv_bits") == (8 if "--kv-bits" in model else 0),
                        "demo %s: model %r" % (model, j.get("model")))

        folder = os.path.join(tmp, "text")
        p = r.run("demo", "--quick", "--dir", folder, "--remote", servers.single,
                  "--remote-prefix", unique_prefix("demo"))
        m = re.search(r"^second host: (\d+) prefix blocks from Redis", p.stdout, re.M)
        r.check(m is not None and int(m.group(1)) > 0,
                "demo text: no second-host line: %r" % p.stdout[-1500:])
        host2 = [ln for ln in p.stdout.splitlines() if "host 2 conversation" in ln]
        r.check(len(host2) == QUICK_CONVERSATIONS and
                all("logits identical (vs the first host's)" in ln for ln in host2),
                "demo text: second-host progress lines %r" % host2)
        r.check("identical, bit for bit, in every request" in p.stdout,
                "demo text: no bit-exact summary")

        r.one_line_error("demo", "--quick", "--dir", os.path.join(tmp, "bad"),
                         "--remote-prefix", "x:")
        r.one_line_error("demo", "--quick", "--dir", os.path.join(tmp, "bad"),
                         "--remote", "http://127.0.0.1:1")
        r.one_line_error("demo", "--quick", "--dir", os.path.join(tmp, "bad"),
                         "--remote", "redis://127.0.0.1:1")
    r.finish()


if __name__ == "__main__":
    main()
