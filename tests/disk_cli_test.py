#!/usr/bin/python3
"""The cache-folder commands of `kvtier`: synth --cache [--check], ls, stats
(--json, --prometheus), verify DIR, gc, and bench disk, on a temporary
folder. Exact counts and keys are checked against `kvtier synth --out` of
the same tokens (the same keys, written as standalone files); damage made by
hand must be reported by verify with the right reason; bad input must exit 2
with a one-line error.

    /usr/bin/python3 tests/disk_cli_test.py --cli build/dev/kvtier

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

BLOCK = 5024  # a `tiny` block file: 4096 data bytes + header (meta_checksum included)


class Runner:
    def __init__(self, cli):
        self.cli = cli
        self.passed = 0
        self.failed = 0

    def run(self, *args, expect_rc=0):
        p = subprocess.run([self.cli, *args], capture_output=True, text=True, timeout=300)
        if p.returncode != expect_rc:
            self.fail("%s: exit %d, wanted %d; stderr: %s" %
                      (" ".join(args), p.returncode, expect_rc, p.stderr.strip()[:300]))
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


def block_files(d):
    out = {}
    for sub in sorted(os.listdir(os.path.join(d, "blocks"))):
        for name in sorted(os.listdir(os.path.join(d, "blocks", sub))):
            if name.endswith(".safetensors"):
                out[name[:64]] = os.path.join(d, "blocks", sub, name)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Runner(args.cli)
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        out = os.path.join(tmp, "out")

        # synth --cache writes 20 blocks; --check reads every one back.
        j = r.json("synth", "--layout", "tiny", "--random", "320", "--seed", "3", "--cache", cache)
        r.check(j == {"blocks": 20, "present": 20, "missing": 0, "wrong": 0}, "synth --cache: %s" % j)
        j = r.json("synth", "--layout", "tiny", "--random", "320", "--seed", "3", "--cache", cache,
                   "--check")
        r.check(j == {"blocks": 20, "present": 20, "missing": 0, "wrong": 0},
                "synth --check: %s" % j)
        r.json("synth", "--layout", "tiny", "--random", "320", "--seed", "3", "--out", out)
        want_keys = sorted(n[:64] for n in os.listdir(out))
        r.check(sorted(block_files(cache)) == want_keys, "cache files are the --out keys")

        # ls: the same keys, sizes, signature.
        j = r.json("ls", cache, "--layout", "tiny")
        keys = sorted(e["key"] for e in j.get("entries", []))
        r.check(j.get("count") == 20 and keys == want_keys, "ls keys")
        r.check(all(e["bytes"] == BLOCK and e["compatible"] for e in j.get("entries", [])),
                "ls sizes and compatibility")
        r.check(j.get("bytes") == 20 * BLOCK, "ls bytes")
        text = r.run("ls", cache).stdout.splitlines()
        r.check(len(text) == 21 and text[-1] == "20 blocks, %d bytes" % (20 * BLOCK), "ls text")

        # stats: totals per layout, compatible or not, quarantine.
        j = r.json("stats", cache, "--layout", "tiny")
        r.check(j.get("entries") == 20 and j.get("bytes") == 20 * BLOCK, "stats totals: %s" % j)
        r.check(j.get("compatible") == {"entries": 20, "bytes": 20 * BLOCK}, "stats compatible")
        r.check(j.get("incompatible") == {"entries": 0, "bytes": 0}, "stats incompatible")
        r.check(j.get("quarantined") == {"files": 0, "bytes": 0}, "stats quarantined")
        j = r.json("stats", cache, "--signature", "some-other-layout")
        r.check(j.get("incompatible") == {"entries": 20, "bytes": 20 * BLOCK},
                "stats against another signature")
        prom = r.run("stats", cache, "--prometheus").stdout
        r.check("kvtier_disk_entries 20\n" in prom and "kvtier_disk_bytes %d\n" % (20 * BLOCK) in prom,
                "stats --prometheus")
        # Without --layout nothing is judged: per signature, no "incompatible".
        r.check("compatible" not in prom and
                re.search(r'^kvtier_disk_signature_blocks\{signature="[^"]+"\} 20$', prom, re.M),
                "stats --prometheus without --layout judges nothing: %s" % prom)
        prom = r.run("stats", cache, "--prometheus", "--layout", "tiny").stdout
        r.check("kvtier_disk_compatible_entries 20\n" in prom and 'compatible="true"} 20\n' in prom,
                "stats --prometheus --layout tiny: %s" % prom)

        # verify DIR: all good, then each kind of damage is named.
        j = r.json("verify", cache)
        files = j.get("files", [])
        r.check(len(files) == 20 and all(f["ok"] for f in files), "verify of a sound folder")
        paths = block_files(cache)
        flipped = paths[want_keys[0]]
        with open(flipped, "r+b") as f:
            f.seek(-10, os.SEEK_END)
            b = f.read(1)
            f.seek(-10, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x40]))
        os.remove(paths[want_keys[1]])
        # An edited header the data checksum cannot see: one created_at digit.
        edited = paths[want_keys[3]]
        with open(edited, "r+b") as f:
            data = f.read()
            at = data.index(b'"created_at":"') + len(b'"created_at":"')
            f.seek(at)
            f.write(b"1" if data[at:at + 1] != b"1" else b"2")
        foreign = os.path.join(os.path.dirname(paths[want_keys[2]]), "notes.txt")
        with open(foreign, "w") as f:
            f.write("hello")
        j = r.json("verify", cache, expect_rc=1)
        reasons = {f["path"]: f["reason"] for f in j.get("files", []) if not f["ok"]}
        r.check(reasons == {flipped: "checksum_mismatch", paths[want_keys[1]]: "missing_file",
                            edited: "meta_checksum_mismatch", foreign: "foreign_file"},
                "verify reasons: %s" % reasons)
        os.remove(foreign)

        # gc: dry run changes nothing; then down to 10 blocks; quarantine goes.
        q = os.path.join(cache, "quarantine", "1700000000-1-1-x.safetensors")
        with open(q, "w") as f:
            f.write("x" * 100)
        j = r.json("gc", cache, "--max-bytes", str(10 * BLOCK), "--dry-run")
        # 20 rows: one without a file (dropped first), then 19 down to 10.
        reasons = [i["reason"] for i in j.get("items", [])]
        r.check(j.get("dry_run") is True and j.get("removed") == 0 and
                reasons.count("over_budget") == 9 and reasons.count("missing_file") == 1,
                "gc --dry-run: %s" % reasons)
        r.check(any(i["reason"] == "quarantined" and i["path"] == q for i in j.get("items", [])),
                "gc lists quarantined files")
        r.check(os.path.exists(q) and r.json("stats", cache).get("entries") == 20,
                "dry run removed nothing")
        j = r.json("gc", cache, "--max-bytes", str(10 * BLOCK))
        r.check(j.get("bytes_freed") == 9 * BLOCK + 100, "gc bytes freed: %s" % j.get("bytes_freed"))
        s = r.json("stats", cache)
        r.check(s.get("entries") == 10 and s.get("bytes") == 10 * BLOCK, "stats after gc: %s" % s)
        r.check(not os.path.exists(q), "gc removed the quarantined file")
        r.check(len(block_files(cache)) == 10, "10 block files after gc")
        j = r.json("gc", cache, "--drop-other-layouts", "--signature", "nothing-matches")
        r.check(j.get("removed") == 10 and r.json("stats", cache).get("entries") == 0,
                "gc --drop-other-layouts")

        # Bad input: exit 2 with one line on stderr.
        for bad in (["ls", tmp], ["stats", os.path.join(tmp, "nope")],
                    ["gc", cache, "--max-bytes", "lots"],
                    ["gc", cache, "--drop-other-layouts"],
                    ["stats", cache, "--layout", "tiny", "--signature", "x"],
                    ["synth", "--layout", "tiny", "--random", "16", "--out", out, "--cache", cache],
                    ["synth", "--layout", "tiny", "--random", "16", "--out", out, "--check"],
                    ["bench", "disk", "--dir", tmp, "--blocks", "1"],
                    ["bench", "disk", "--dir", tmp, "--layout", "tiny", "--blocks", "2",
                     "--durability", "maybe"]):
            p = r.run(*bad, expect_rc=2)
            r.check(len(p.stderr.strip().splitlines()) == 1 and p.stdout == "",
                    "%s: one-line error, got %r / %r" % (" ".join(bad), p.stderr, p.stdout))

        # bench disk: the contract's fields, positive figures, folders removed.
        bench_dir = os.path.join(tmp, "bench")
        j = r.json("bench", "disk", "--dir", bench_dir, "--layout", "tiny", "--blocks", "40",
                   "--rounds", "1")
        fields = ["blocks", "block_bytes", "write_GBps", "read_GBps", "reopen_s", "raw_write_GBps",
                  "raw_read_GBps"]
        r.check(all(k in j for k in fields), "bench disk fields: %s" % sorted(j))
        r.check(j.get("blocks") == 40 and j.get("block_bytes") == BLOCK, "bench disk sizes")
        r.check(all(j.get(k, 0) > 0 for k in fields), "bench disk figures are positive")
        r.check(os.listdir(bench_dir) == [], "bench disk cleans up")

    print("%d passed, %d failed" % (r.passed, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
