#!/usr/bin/python3
"""What the `kvtier` CLI does with input a user may really give it (issue 12
item 5):

  1. a cache folder the user can read but not write: `ls`, `stats`, `verify`
     and `gc --dry-run` work and change nothing (run as `nobody` through
     setpriv when the test runs as root; with and without the index's -wal
     and -shm files, which SQLite cannot create there);
  2. a symlink to a folder works wherever a folder does;
  3. `gc --retention-seconds` with a retention whose microseconds overflow
     64 bits expires nothing;
  4. `synth --cache D [--check]` prints its counts also when some block
     writes fail (a file-size limit stands in for a full disk), in one line
     besides the disk tier's event;
  5. every integer option of every command takes plain decimal: negative,
     malformed, octal-looking and too-large values are refused by name with
     one line on stderr and exit 2 (a leading zero is decimal); an unknown
     option likewise; and nothing ever dies of a signal.

    /usr/bin/python3 tests/cli_input_test.py --cli build/dev/kvtier

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOBODY = 65534


class Runner:
    def __init__(self, cli):
        self.cli = cli
        self.passed = 0
        self.failed = 0

    def run(self, *args, as_nobody=False, preexec=None, timeout=300):
        cmd = [self.cli, *args]
        if as_nobody:
            cmd = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"] + cmd
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=preexec)

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what)

    def expect_json(self, what, p, rc=0):
        self.check(p.returncode == rc, "%s: exit %d, wanted %d; stderr %r" %
                   (what, p.returncode, rc, p.stderr[:300]))
        try:
            return json.loads(p.stdout)
        except json.JSONDecodeError:
            self.check(False, "%s: stdout is not one JSON object: %r" % (what, p.stdout[:200]))
            return {}

    def expect_usage_error(self, what, p, mention=None):
        lines = p.stderr.strip().splitlines()
        self.check(p.returncode == 2 and len(lines) == 1 and p.stdout == "" and
                   (mention is None or mention in lines[0]),
                   "%s: wanted exit 2 and one line naming %r, got %d, %r, %r" %
                   (what, mention, p.returncode, p.stderr[:300], p.stdout[:100]))


def tree_state(d):
    """Every path under d with its type, size, mode and mtime."""
    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            out[os.path.relpath(path, d)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def set_tree_mode(d, writable):
    for root, dirs, files in os.walk(d):
        for name in dirs + files + [""]:
            path = os.path.join(root, name) if name else root
            st = os.lstat(path)
            is_dir = os.path.isdir(path)
            mode = 0o755 if is_dir else 0o644
            if not writable:
                mode &= ~0o222
            if not os.path.islink(path):
                os.chmod(path, mode)


def test_read_only(r, tmp, cache, entries):
    """ls, stats, verify and gc --dry-run on a folder the caller cannot write."""
    as_nobody = os.geteuid() == 0
    if as_nobody and shutil.which("setpriv") is None:
        r.check(False, "running as root needs setpriv (util-linux) to drop to nobody")
        return
    for variant in ("with -wal/-shm", "index file only"):
        ro = os.path.join(tmp, "ro-" + variant.split()[0])
        shutil.copytree(cache, ro, symlinks=True)
        for suffix in ("-wal", "-shm"):
            side = os.path.join(ro, "index.sqlite" + suffix)
            if variant == "with -wal/-shm" and not os.path.exists(side):
                open(side, "wb").close()  # as a live writer leaves them
            if variant == "index file only" and os.path.exists(side):
                os.remove(side)
        set_tree_mode(ro, writable=False)
        before = tree_state(ro)
        what = "read-only folder (%s)" % variant
        j = r.expect_json(what + ": ls", r.run("ls", ro, "--json", as_nobody=as_nobody))
        r.check(sorted(e["key"] for e in j.get("entries", [])) == entries,
                what + ": ls lists every block")
        j = r.expect_json(what + ": stats", r.run("stats", ro, "--json", as_nobody=as_nobody))
        r.check(j.get("entries") == len(entries), what + ": stats counts %s" % j.get("entries"))
        j = r.expect_json(what + ": verify", r.run("verify", ro, "--json", as_nobody=as_nobody))
        files = j.get("files", [])
        r.check(len(files) == len(entries) and all(f["ok"] for f in files),
                what + ": verify finds every block valid: %s" % files[:2])
        j = r.expect_json(what + ": gc --dry-run",
                          r.run("gc", ro, "--dry-run", "--json", as_nobody=as_nobody))
        r.check(j.get("items") == [], what + ": gc --dry-run plans nothing")
        r.check(tree_state(ro) == before, what + ": nothing in the folder changed")
        set_tree_mode(ro, writable=True)


def test_symlinks(r, tmp, cache, entries):
    link = os.path.join(tmp, "link-to-cache")
    os.symlink(cache, link)
    j = r.expect_json("ls LINK", r.run("ls", link, "--json"))
    r.check(sorted(e["key"] for e in j.get("entries", [])) == entries, "ls through a symlink")
    j = r.expect_json("stats LINK", r.run("stats", link, "--json"))
    r.check(j.get("entries") == len(entries), "stats through a symlink")
    j = r.expect_json("verify LINK", r.run("verify", link, "--json"))
    r.check(len(j.get("files", [])) == len(entries) and all(f["ok"] for f in j["files"]),
            "verify through a symlink")
    j = r.expect_json("gc LINK --dry-run", r.run("gc", link, "--dry-run", "--json"))
    r.check(j.get("items") == [], "gc through a symlink")
    j = r.expect_json("synth --cache LINK --check",
                      r.run("synth", "--layout", "tiny", "--random", "320", "--seed", "3",
                            "--cache", link, "--check", "--json"))
    r.check(j == {"blocks": 20, "present": 20, "missing": 0, "wrong": 0},
            "synth --cache through a symlink: %s" % j)
    for option, args in (("--out", ["synth", "--layout", "tiny", "--random", "32"]),
                         ("--dir", ["bench", "disk", "--layout", "tiny", "--blocks", "4",
                                    "--rounds", "1"])):
        target = os.path.join(tmp, "target" + option)
        os.mkdir(target)
        link = os.path.join(tmp, "link" + option)
        os.symlink(target, link)
        p = r.run(*args, option, link, "--json")
        r.check(p.returncode == 0, "%s LINK: exit %d: %s" % (option, p.returncode, p.stderr[:200]))
        r.check(os.path.islink(link), "%s LINK: the link itself is left alone" % option)
    r.check(len(os.listdir(os.path.join(tmp, "target--out"))) == 2,
            "synth --out LINK wrote into the target folder")


def test_retention(r, cache, entries):
    for seconds in ("9223372036854775807", "9223372036854", "4611686018427387904"):
        j = r.expect_json("gc --retention-seconds " + seconds,
                          r.run("gc", cache, "--retention-seconds", seconds, "--dry-run", "--json"))
        expired = [i for i in j.get("items", []) if i["reason"] == "expired"]
        r.check(expired == [], "gc --retention-seconds %s expires nothing: %d items" %
                (seconds, len(expired)))
    # The blocks were written in the past, so a retention of 0 would expire
    # them all: it is refused instead, as is a negative one.
    for seconds in ("0", "-1", "-9223372036854775808"):
        r.expect_usage_error("gc --retention-seconds " + seconds,
                             r.run("gc", cache, "--retention-seconds", seconds, "--dry-run"),
                             "--retention-seconds")


def limit_file_size():
    # Writes past 1 MiB fail with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


def test_failed_writes(r, tmp):
    # qwen2.5-0.5b blocks are 3 MiB: under a 1 MiB file-size limit none can
    # be written, while the index (a few KiB) still can.
    d = os.path.join(tmp, "full")
    j = r.expect_json("synth 2 blocks", r.run("synth", "--layout", "qwen2.5-0.5b", "--random",
                                              "512", "--cache", d, "--json"))
    r.check(j == {"blocks": 2, "present": 2, "missing": 0, "wrong": 0}, "synth 2 blocks: %s" % j)
    for extra in ([], ["--check"]):
        p = r.run("synth", "--layout", "qwen2.5-0.5b", "--random", "1024", "--cache", d,
                  "--json", *extra, preexec=limit_file_size)
        what = "synth --cache %s with failing writes" % " ".join(extra)
        j = r.expect_json(what, p, rc=1)
        r.check(j == {"blocks": 4, "present": 2, "missing": 2, "wrong": 0},
                "%s: counts %s" % (what, j))
        # One line of the command's own (the failure count), besides the
        # disk tier's rate-limited event for the failed writes (issue 25
        # item 6: the logger's events are printed by every command).
        lines = p.stderr.strip().splitlines()
        own = [l for l in lines if not l.startswith("kvtier: error: disk: ")]
        r.check(len(own) == 1 and "failed" in own[0] and len(lines) <= 2,
                "%s: one line on stderr besides one event: %r" % (what, p.stderr))
    out = os.path.join(tmp, "full-out")
    p = r.run("synth", "--layout", "qwen2.5-0.5b", "--random", "1024", "--out", out, "--json",
              preexec=limit_file_size)
    j = r.expect_json("synth --out with failing writes", p, rc=1)
    r.check(j == {"blocks": 4, "present": 0, "missing": 4, "wrong": 0},
            "synth --out with failing writes: counts %s" % j)


# A parse-valid invocation of each command with integer options; the value
# under test is appended. Parsing rejects a bad value before anything runs.
BASE = {
    ("key",): ["--model", "m", "--signature", "s", "--block-tokens", "16", "--tokens", "1"],
    ("inspect",): ["x.safetensors"],
    ("ls",): ["DIR"],
    ("stats",): ["DIR"],
    ("replay",): ["TRACE", "--ram-tokens", "1024"],
    ("verify",): ["x.safetensors"],
    ("gc",): ["DIR", "--dry-run"],
    ("synth",): ["--layout", "tiny", "--out", "OUT", "--random", "16"],
    ("demo",): ["--quick", "--dir", "DEMO"],
    ("bench", "disk"): ["--dir", "BENCH", "--layout", "tiny", "--blocks", "2"],
    ("bench", "cache"): ["--layout", "tiny", "--blocks", "10"],
    ("bench", "folder"): ["--dir", "BENCH", "--blocks", "2"],
    ("bench", "pool"): ["--layout", "tiny"],
    # Nothing listens on port 1: parsing refuses the value before any connect.
    ("bench", "remote"): ["--remote", "redis://127.0.0.1:1", "--layout", "tiny", "--blocks", "2"],
    ("bench", "serve"): ["--layout", "tiny"],
}


def commands(r):
    """Every command path, from the help texts."""
    def subcommands(path):
        text = r.run(*path, "--help").stdout
        if "Subcommands:" not in text:
            return []
        block = text.split("Subcommands:", 1)[1]
        return [m.group(1) for m in re.finditer(r"^  (\S+)", block, re.M)]
    out = []
    for name in subcommands(()):
        subs = subcommands((name,))
        out += [(name, s) for s in subs] if subs else [(name,)]
    return out


def integer_options(r, path):
    text = r.run(*path, "--help").stdout
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^\s+(--[a-z-]+) (U?INT)\b", text, re.M)]


def test_numbers(r, tmp):
    cmds = commands(r)
    r.check(len(cmds) >= 12 and ("bench", "disk") in cmds and ("synth",) in cmds,
            "commands from the help: %s" % cmds)
    covered = 0
    trace = os.path.join(ROOT, "tests", "data", "mooncake", "synthetic_trace.jsonl")
    for path in cmds:
        base = [a.replace("DIR", tmp).replace("OUT", os.path.join(tmp, "o"))
                .replace("DEMO", os.path.join(tmp, "demo")).replace("TRACE", trace)
                .replace("BENCH", os.path.join(tmp, "bench")) for a in BASE.get(path, [])]
        # An unknown option is refused by every command.
        r.expect_usage_error(" ".join(path) + " --no-such-option",
                             r.run(*path, *base, "--no-such-option=1"), "--no-such-option")
        for option, kind in integer_options(r, path):
            r.check(path in BASE, "%s has integer options but no base invocation here" %
                    " ".join(path))
            bad = ["abc", "1.5", "1e3", "0x10", " 7", "", "99999999999999999999999"]
            bad += ["-5", "-0"] if kind == "UINT" else ["-99999999999999999999999"]
            for value in bad:
                p = r.run(*path, *base, option + "=" + value, timeout=60)
                r.expect_usage_error("%s %s=%r" % (" ".join(path), option, value), p, option)
                covered += 1
    r.check(covered >= 60, "integer options covered: %d" % covered)

    # A leading zero is decimal, not octal: 032 tokens are two tiny blocks.
    out = os.path.join(tmp, "octal")
    j = r.expect_json("synth --random 032",
                      r.run("synth", "--layout", "tiny", "--random", "032", "--out", out, "--json"))
    r.check(j.get("blocks") == 2, "--random 032 is 32 tokens: %s" % j)
    # Values that fit the type but not the command are refused by name.
    for args, option in ((["synth", "--layout", "tiny", "--random", "18446744073709551615",
                           "--out", out], "--random"),
                         (["demo", "--quick", "--dir", os.path.join(tmp, "demo"),
                           "--pool-blocks", "4000000000"], "--pool-blocks"),
                         (["bench", "cache", "--layout", "tiny", "--blocks", "10",
                           "--block-tokens", "0"], "--block-tokens"),
                         (["bench", "cache", "--layout", "tiny", "--blocks", "10",
                           "--round-bytes", "0"], "--round-bytes"),
                         (["bench", "cache", "--layout", "tiny", "--blocks", "10",
                           "--round-bytes", "18446744073709551615"], "--round-bytes"),
                         (["bench", "serve", "--layout", "tiny", "--tiny-samples",
                           "4000000000"], "--tiny-samples"),
                         (["bench", "serve", "--layout", "tiny", "--rounds", "4000000000"],
                          "--rounds"),
                         (["bench", "serve", "--layout", "tiny", "--kills", "4000000000"],
                          "--kills")):
        r.expect_usage_error(" ".join(args), r.run(*args, timeout=60), option)


def test_command_names(r):
    p = r.run("foo")
    r.check(p.returncode == 2 and p.stdout == "" and
            p.stderr == "kvtier: unknown command 'foo' (see --help)\n",
            "kvtier foo: one line naming it, exit 2 (%d, %r)" % (p.returncode, p.stderr))
    v = r.run("version")
    p = r.run("--version")
    r.check(p.returncode == 0 and p.stdout == v.stdout and
            p.stdout.startswith("kvtier 0.1.0 ") and p.stderr == "",
            "kvtier --version prints what kvtier version does (%r)" % p.stdout)


def test_bench_disk_ram_message(r, tmp):
    # More blocks than half the RAM holds: the message says the machine's
    # RAM and how many blocks fit, in one whole sentence.
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    block = 32 << 20  # llama3-8b
    p = r.run("bench", "disk", "--dir", os.path.join(tmp, "bench-ram"), "--layout", "llama3-8b",
              "--blocks", str(ram // block + 1))
    fit = ram // 2 // (block + 4096)
    r.check(p.returncode == 2 and p.stdout == "" and
            ("more than half of this machine's %d bytes; use fewer --blocks (at most %d of these)"
             % (ram, fit)) in p.stderr and len(p.stderr.strip().splitlines()) == 1,
            "bench disk --blocks past RAM: rc %d, %r" % (p.returncode, p.stderr))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Runner(os.path.abspath(args.cli))
    tmp = tempfile.mkdtemp(prefix="kvtier_cli_input_test_")
    try:
        os.chmod(tmp, 0o755)  # `nobody` must reach the read-only copies
        cache = os.path.join(tmp, "cache")
        j = r.expect_json("synth --cache", r.run("synth", "--layout", "tiny", "--random", "320",
                                                 "--seed", "3", "--cache", cache, "--json"))
        r.check(j == {"blocks": 20, "present": 20, "missing": 0, "wrong": 0}, "synth: %s" % j)
        entries = sorted(e["key"] for e in
                         r.expect_json("ls", r.run("ls", cache, "--json")).get("entries", []))
        r.check(len(entries) == 20, "20 entries")
        test_read_only(r, tmp, cache, entries)
        test_symlinks(r, tmp, cache, entries)
        test_retention(r, cache, entries)
        test_failed_writes(r, tmp)
        test_numbers(r, tmp)
        test_command_names(r)
        test_bench_disk_ram_message(r, tmp)
    finally:
        set_tree_mode(tmp, writable=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (r.passed, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
