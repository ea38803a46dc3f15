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

BLOCK = 5232  # a `tiny` block file: 4096 data bytes + header (tensor_checksums, meta_checksum)


class Runner:
    def __init__(self, cli):
        self.cli = cli
        self.passed = 0
        self.failed = 0

    def run(self, *args, expect_rc=0):
        p = subprocess.run([self.cli, *args], capture_output=True, text=True, timeout=300)
        if expect_rc is not None and p.returncode != expect_rc:
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


def drop_rows(cache, n):
    """Deletes n index rows, keeping their files: what kill -9 between a
    block's publish and its commit leaves."""
    import sqlite3
    db = sqlite3.connect(os.path.join(cache, "index.sqlite"))
    db.execute("DELETE FROM blocks WHERE key IN (SELECT key FROM blocks LIMIT ?)", (n,))
    db.commit()
    db.close()


def orphan_count(r, cache):
    j = r.json("verify", cache, expect_rc=None)
    return sum(1 for f in j.get("files", []) if f["reason"] == "no_index_row")


def orphans_and_hostile_index(r, tmp):
    # Orphaned files: the next writer's open adopts them; gc adopts before
    # it enforces its limit, so the limit holds for every file.
    cache = os.path.join(tmp, "orphans")
    r.json("synth", "--layout", "tiny", "--random", "640", "--seed", "5", "--cache", cache)
    drop_rows(cache, 15)
    r.check(orphan_count(r, cache) == 15, "15 orphans made")
    # What a kill -9 leaves heals itself: valid files without their row are
    # their own outcome ("adopt") and pass, unless --strict; a summary
    # counts each outcome.
    j = r.json("verify", cache)
    adopt = [f for f in j.get("files", []) if f.get("outcome") == "adopt"]
    r.check(j.get("summary") == {"files": 40, "ok": 25, "adopt": 15, "failed": 0} and
            len(adopt) == 15 and all(f["ok"] and f["reason"] == "no_index_row" for f in adopt),
            "verify after a kill: adopt is not a failure: %s" % j.get("summary"))
    r.json("verify", cache, "--strict", expect_rc=1)
    text = r.run("verify", cache).stdout.splitlines()
    r.check(sum(1 for t in text if t.startswith("ADOPT  ")) == 15 and
            text[-1].startswith("40 files: 25 ok, 15 to adopt (valid, no index row yet") and
            text[-1].endswith("), 0 failed"), "verify text summary: %r" % text[-1:])
    r.json("synth", "--layout", "tiny", "--random", "16", "--seed", "6", "--cache", cache)
    r.check(orphan_count(r, cache) == 0 and r.json("stats", cache).get("entries") == 41,
            "a writer's open adopts orphans")
    drop_rows(cache, 30)
    alloc = os.stat(next(iter(block_files(cache).values()))).st_blocks * 512
    r.json("gc", cache, "--max-bytes", str(20 * alloc))
    s = r.json("stats", cache)
    r.check(len(block_files(cache)) == 20 and s.get("entries") == 20 and
            s.get("allocated_bytes", 1 << 60) <= 20 * alloc,
            "gc adopts then enforces: %d files, %s" % (len(block_files(cache)), s))
    r.check(r.json("verify", cache).get("files") is not None, "verify after gc")

    # An index that is a symlink, a folder, a FIFO or garbage: every command
    # names it; gc and synth set it aside and rebuild from the files.
    for kind in ("symlink", "folder", "fifo", "garbage"):
        cache = os.path.join(tmp, "index-" + kind)
        r.json("synth", "--layout", "tiny", "--random", "320", "--seed", "3", "--cache", cache)
        index = os.path.join(cache, "index.sqlite")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(index + suffix):
                os.remove(index + suffix)
        if kind == "symlink":
            os.symlink("/dev/zero", index)
            what = "is a symlink, not a regular file"
        elif kind == "folder":
            os.mkdir(index)
            what = "is a folder, not a regular file"
        elif kind == "fifo":
            os.mkfifo(index)
            what = "is a FIFO, not a regular file"
        else:
            with open(index, "wb") as f:
                f.write(b"x" * 8192)
            what = "is not a usable SQLite database"
        named = "index %s %s" % (index, what)
        p = r.run("stats", cache, expect_rc=2)
        r.check(named in p.stderr and len(p.stderr.strip().splitlines()) == 1,
                "%s: stats names the index: %r" % (kind, p.stderr))
        j = r.json("verify", cache, expect_rc=1)
        r.check(any(named in f.get("message", "") and f.get("reason") == "bad_index"
                    for f in j.get("files", [])),
                "%s: verify names the index, reason bad_index: %s" % (kind, j))
        first = "gc" if kind in ("symlink", "fifo") else "synth"
        if first == "gc":
            r.json("gc", cache, "--keep-quarantine")
        else:
            r.json("synth", "--layout", "tiny", "--random", "320", "--seed", "3", "--cache", cache)
        r.check(os.path.isfile(index) and not os.path.islink(index) and
                len(os.listdir(os.path.join(cache, "quarantine"))) >= 1,
                "%s: %s set the index aside" % (kind, first))
        if first == "synth":
            r.json("gc", cache)
        s = r.json("stats", cache)
        r.check(s.get("entries") == 20, "%s: rebuilt with every block: %s" % (kind, s))
        r.check(r.json("verify", cache).get("files") and
                all(f["ok"] for f in r.json("verify", cache).get("files", [])),
                "%s: verify accepts the rebuilt folder" % kind)


def full_disk(r, tmp):
    """Two writers on an 8 MiB tmpfs with 2 MiB taken: no write fails; gc on
    the disk filled to the last byte works and leaves a folder that verifies.
    Needs root (mount); skipped otherwise."""
    mnt = os.path.join(tmp, "t8")
    os.mkdir(mnt)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt],
                                           capture_output=True).returncode != 0:
        print("full_disk: skipped (no tmpfs mount)")
        return
    try:
        with open(os.path.join(mnt, "fill"), "wb") as f:
            f.write(b"\0" * (2 << 20))
        cache = os.path.join(mnt, "c")
        ps = [subprocess.Popen([r.cli, "synth", "--layout", "tiny", "--random", "64000", "--seed",
                                str(seed), "--cache", cache, "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for seed in (1, 2)]
        for p in ps:
            out, err = p.communicate(timeout=300)
            r.check(p.returncode == 0 and json.loads(out or "{}").get("missing") == 0,
                    "full disk: a writer lost blocks: rc %d %s %s" % (p.returncode, out, err[:200]))
        def fill_up(name):
            st = os.statvfs(mnt)
            with open(os.path.join(mnt, name), "wb") as f:
                try:
                    f.write(b"\0" * (st.f_bavail * st.f_frsize))
                except OSError:
                    pass
        # A writer opening the folder on a disk filled to the last byte (no
        # room for SQLite's -shm and WAL): it evicts to open, and stores.
        fill_up("fill2")
        p = subprocess.run([r.cli, "synth", "--layout", "tiny", "--random", "16000", "--seed", "3",
                            "--cache", cache, "--json"], capture_output=True, text=True,
                           timeout=300)
        r.check(p.returncode == 0 and json.loads(p.stdout or "{}").get("missing") == 0 and
                "failed" not in p.stderr,
                "a writer on a full disk: rc %d %s %s" % (p.returncode, p.stdout, p.stderr[:300]))
        j = r.json("verify", cache)
        r.check(j.get("files") and all(f["ok"] for f in j["files"]),
                "verify after a writer on a full disk")
        fill_up("fill3")
        j = r.json("gc", cache, "--max-bytes", "1M")
        r.check(j.get("removed", 0) > 0, "gc on a full disk removed blocks: %s" % j)
        j = r.json("verify", cache)
        r.check(j.get("files") and all(f["ok"] for f in j["files"]), "verify after gc on a full disk")
        s = r.json("stats", cache)
        r.check(s.get("allocated_bytes", 1 << 60) <= 1 << 20, "gc's limit on a full disk: %s" % s)
    finally:
        subprocess.run(["umount", mnt])


def add_rows(cache, n, seed):
    """n index rows without files (ls reads only the index), access times with ties."""
    import random
    import sqlite3
    rng = random.Random(seed)
    db = sqlite3.connect(os.path.join(cache, "index.sqlite"))
    sig = db.execute("SELECT id FROM signatures LIMIT 1").fetchone()[0]
    db.executemany("INSERT INTO blocks(key, sig, size, created_at, last_access) VALUES(?,?,?,?,?)",
                   ((rng.randbytes(32), sig, BLOCK, 1_700_000_000_000_000,
                     1_700_000_000_000_000 + rng.randrange(n // 4 + 1)) for _ in range(n)))
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def ls_peak_rss(r, cache, *extra, command="ls", rc=0):
    """(parsed stdout or text, peak RSS in KiB) of `kvtier COMMAND CACHE EXTRA`."""
    with tempfile.TemporaryFile() as out:
        # ASan keeps freed memory aside (256 MB by default) before reusing it:
        # without that quarantine the peak is what the command holds.
        env = dict(os.environ, ASAN_OPTIONS="quarantine_size_mb=0")
        proc = subprocess.Popen([r.cli, command, cache, *extra], stdout=out,
                                stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    r.check(proc.returncode == rc, "%s %s: exit %d" % (command, " ".join(extra), proc.returncode))
    return text, usage.ru_maxrss


def ls_streams(r, tmp):
    """ls keeps one entry in memory at a time (issue 32: 448 MB for 200,000 files): the peak
    RSS over 200,000 rows stays within 32 MiB of the peak over 2,000, in both outputs; the
    entries come oldest access first, ties in key order, and the totals count every row."""
    small, big = os.path.join(tmp, "ls-small"), os.path.join(tmp, "ls-big")
    for d, n in ((small, 2_000), (big, 200_000)):
        r.json("synth", "--layout", "tiny", "--random", "16", "--seed", "9", "--cache", d)
        add_rows(d, n, n)
    text, small_kib = ls_peak_rss(r, small, "--json")
    text, big_kib = ls_peak_rss(r, big, "--json")
    j = json.loads(text)
    entries = j.get("entries", [])
    r.check(j.get("count") == 200_001 and len(entries) == 200_001 and
            j.get("bytes") == 200_001 * BLOCK, "ls --json totals: %s" %
            {k: v for k, v in j.items() if k != "entries"})
    order = [(e["last_access"], e["key"]) for e in entries]
    r.check(order == sorted(order), "ls --json: oldest access first, ties in key order")
    r.check(big_kib - small_kib < 32 * 1024,
            "ls --json peak RSS: %d KiB for 200,001 rows, %d KiB for 2,001" % (big_kib, small_kib))
    text, small_kib = ls_peak_rss(r, small)
    text, big_kib = ls_peak_rss(r, big)
    lines = text.splitlines()
    r.check(len(lines) == 200_003 and lines[-1] == "200001 blocks, %d bytes" % (200_001 * BLOCK),
            "ls: header, 200,001 rows, total: %r" % lines[-1:])
    r.check(big_kib - small_kib < 32 * 1024,
            "ls peak RSS: %d KiB for 200,001 rows, %d KiB for 2,001" % (big_kib, small_kib))
    # verify streams too: one blocks/ subfolder's rows at a time, each verdict
    # printed as it comes. The rows have no files: each is a missing_file
    # verdict, after the one valid block, in key order.
    text, small_kib = ls_peak_rss(r, small, "--json", command="verify", rc=1)
    text, big_kib = ls_peak_rss(r, big, "--json", command="verify", rc=1)
    j = json.loads(text)
    files = j.get("files", [])
    missing = [f["path"] for f in files if f.get("reason") == "missing_file"]
    r.check(j.get("summary") == {"files": 200_001, "ok": 1, "adopt": 0, "failed": 200_000} and
            len(missing) == 200_000 and missing == sorted(missing),
            "verify --json: %s" % j.get("summary"))
    r.check(big_kib - small_kib < 32 * 1024,
            "verify --json peak RSS: %d KiB for 200,001 rows, %d KiB for 2,001" %
            (big_kib, small_kib))
    # stats counts file by file.
    text, small_kib = ls_peak_rss(r, small, "--json", command="stats")
    text, big_kib = ls_peak_rss(r, big, "--json", command="stats")
    r.check(json.loads(text).get("entries") == 200_001, "stats --json entries")
    r.check(big_kib - small_kib < 32 * 1024,
            "stats --json peak RSS: %d KiB for 200,001 rows, %d KiB for 2,001" %
            (big_kib, small_kib))
    # gc streams too (issue 32: about 970 bytes a block before): one blocks/
    # subfolder's rows at a time, then the index oldest first. Every row but
    # the valid block's has no file (missing_file, in key order); a budget of
    # 1 byte then takes the one block there is (over_budget).
    for extra in (("--dry-run",), ()):
        text, small_kib = ls_peak_rss(r, small, "--json", "--max-bytes", "1", *extra,
                                      command="gc")
        text, big_kib = ls_peak_rss(r, big, "--json", "--max-bytes", "1", *extra, command="gc")
        j = json.loads(text)
        items = j.get("items", [])
        missing = [i["path"] for i in items if i["reason"] == "missing_file"]
        dry = bool(extra)
        r.check(len(items) == 200_001 and len(missing) == 200_000 and missing == sorted(missing)
                and items[-1]["reason"] == "over_budget" and items[-1]["bytes"] == BLOCK and
                j.get("totals", {}).get("entries") == 200_001 and
                j.get("removed") == (0 if dry else 200_001) and j.get("dry_run") == dry,
                "gc %s --json: %s" % (extra, {k: v for k, v in j.items() if k != "items"}))
        r.check(big_kib - small_kib < 32 * 1024,
                "gc %s --json peak RSS: %d KiB for 200,001 rows, %d KiB for 2,001" %
                (extra, big_kib, small_kib))
    j = r.json("ls", big)
    r.check(j.get("count") == 0, "ls after gc --max-bytes 1: %s" % j.get("count"))


def gc_fails_midway(r, tmp):
    """gc --json stays one object when it fails after its walk began: here
    the index is locked by another connection (BEGIN EXCLUSIVE) when gc comes
    to delete the row of a block whose file is gone. The items before the
    error are in it, with "error" and "code"; exit 1, one line on stderr."""
    import sqlite3
    cache = os.path.join(tmp, "gc-locked")
    r.json("synth", "--layout", "tiny", "--random", "64", "--seed", "5", "--cache", cache)
    files = block_files(cache)
    gone_key = sorted(files)[0]
    os.remove(files[gone_key])
    db = sqlite3.connect(os.path.join(cache, "index.sqlite"), isolation_level=None, timeout=1)
    try:
        db.execute("BEGIN EXCLUSIVE")
        p = r.run("gc", cache, "--json", expect_rc=1)  # waits out the 10 s busy timeout
        db.execute("ROLLBACK")
    finally:
        db.close()
    try:
        j = json.loads(p.stdout)
    except json.JSONDecodeError:
        r.fail("gc on a locked index: stdout is not one JSON object: %r" % p.stdout[:300])
        return
    r.check(j.get("items") == [{"path": files[gone_key], "reason": "missing_file", "bytes": 0}] and
            j.get("totals", {}).get("entries") == 1 and j.get("removed") == 1 and
            j.get("code") == "Unavailable" and "database is locked" in j.get("error", ""),
            "gc on a locked index: %s" % j)
    r.check(p.stderr.count("\n") == 1 and p.stderr.startswith("kvtier: gc: index: "),
            "gc on a locked index: stderr %r" % p.stderr)
    # Unlocked, the next gc removes the row.
    j = r.json("gc", cache)
    r.check(j.get("items") == [{"path": files[gone_key], "reason": "missing_file", "bytes": 0}],
            "gc after the lock: %s" % j)
    j = r.json("ls", cache)
    r.check(j.get("count") == 3, "ls after gc: %s" % j.get("count"))


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
        r.check(len(text) == 22 and text[0] == "key  bytes  created  last_access  signature" and
                text[-1] == "20 blocks, %d bytes" % (20 * BLOCK), "ls text, with its header")
        text = r.run("ls", cache, "--layout", "tiny").stdout.splitlines()
        r.check(text[0] == "key  bytes  created  last_access  layout  signature" and
                text[1].split("  ")[4] == "compatible", "ls --layout header: %r" % text[:2])
        text = r.run("ls", cache, "--no-header").stdout.splitlines()
        r.check(len(text) == 21 and text[0].split("  ")[0] in want_keys,
                "ls --no-header: entries only: %r" % text[:1])

        # stats: totals per layout, compatible or not, quarantine.
        j = r.json("stats", cache, "--layout", "tiny")
        r.check(j.get("entries") == 20 and j.get("bytes") == 20 * BLOCK, "stats totals: %s" % j)
        allocated = sum(os.stat(p).st_blocks * 512 for p in block_files(cache).values())
        r.check(j.get("allocated_bytes") == allocated, "stats allocated_bytes: %s vs %d (du)" %
                (j.get("allocated_bytes"), allocated))
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
        # gc's budget counts space as the file system allocates it (issue 25).
        alloc = os.stat(block_files(cache)[want_keys[5]]).st_blocks * 512
        j = r.json("gc", cache, "--max-bytes", str(10 * alloc), "--dry-run")
        # 20 rows: one without a file (dropped first), then 19 down to 10.
        reasons = [i["reason"] for i in j.get("items", [])]
        r.check(j.get("dry_run") is True and j.get("removed") == 0 and
                reasons.count("over_budget") == 9 and reasons.count("missing_file") == 1,
                "gc --dry-run: %s" % reasons)
        r.check(any(i["reason"] == "quarantined" and i["path"] == q for i in j.get("items", [])),
                "gc lists quarantined files")
        items = j.get("items", [])
        by_reason = {}
        for i in items:
            t = by_reason.setdefault(i["reason"], {"entries": 0, "bytes": 0})
            t["entries"] += 1
            t["bytes"] += i["bytes"]
        r.check(j.get("totals") == {"entries": len(items), "bytes": sum(i["bytes"] for i in items),
                                    "by_reason": by_reason} and
                by_reason.get("over_budget") == {"entries": 9, "bytes": 9 * BLOCK} and
                by_reason.get("quarantined") == {"entries": 1, "bytes": 100},
                "gc --dry-run totals: %s" % j.get("totals"))
        r.check(os.path.exists(q) and r.json("stats", cache).get("entries") == 20,
                "dry run removed nothing")
        j = r.json("gc", cache, "--max-bytes", str(10 * alloc))
        r.check(j.get("bytes_freed") == 9 * BLOCK + 100, "gc bytes freed: %s" % j.get("bytes_freed"))
        s = r.json("stats", cache)
        r.check(s.get("entries") == 10 and s.get("bytes") == 10 * BLOCK, "stats after gc: %s" % s)
        r.check(not os.path.exists(q), "gc removed the quarantined file")
        r.check(len(block_files(cache)) == 10, "10 block files after gc")
        j = r.json("gc", cache, "--drop-other-layouts", "--signature", "nothing-matches")
        r.check(j.get("removed") == 10 and r.json("stats", cache).get("entries") == 0,
                "gc --drop-other-layouts")

        orphans_and_hostile_index(r, tmp)
        full_disk(r, tmp)

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

        ls_streams(r, tmp)
        gc_fails_midway(r, tmp)

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
