#!/usr/bin/python3
"""What the `kvtier` CLI refuses up front, applies from --config, walks, and
draws on a terminal (issue 33 items 8 and 9):

  1. RAM guards: `bench pool`, `bench cache` and `bench remote` with sizes
     inside their flags' ranges but beyond this machine's MemAvailable exit
     2 at once with one line naming the bytes needed and available (`bench
     pool --tokens 16777216` grew to 23.7 GB and met the OOM killer);
  2. `kvtier bench foo` names the unknown command and the known ones;
     `kvtier bench` alone likewise;
  3. `demo --pool-blocks 3` and `--block-tokens 4096` are refused before the
     demo runs, with the bounds;
  4. `--round-bytes` takes units (1MiB), as every size option;
  5. `verify DIR` walks a folder that is not a cache folder: `synth --out`
     output (each file against the key its name gives), an empty folder
     (exit 0: the documented quarantine recipe `kvtier verify
     DIR/quarantine` on a healthy cache), a damaged file found at depth;
  6. --config: `gc` takes disk_dir; `replay` applies layout and host_policy
     and refuses host_bytes and disk_*; `synth --cache` refuses cache
     options it cannot apply; read_buffer_prefault_bytes (an engine's
     option) is refused by name by every command; nothing is dropped
     silently;
  7. progress on a terminal: `synth` draws a bar on stderr when stderr is a
     terminal (a pty), exact shape; nothing with --json or into a pipe;
     stats', verify's and gc's walk of a folder (verify and gc only when
     their stdout is not the terminal).

    /usr/bin/python3 tests/cli_guard_test.py --cli build/dev/kvtier

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import json
import os
import pty
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = os.path.join(ROOT, "tests", "data", "mooncake", "synthetic_trace.jsonl")
RAM_LINE = re.compile(r"kvtier: (.*) needs (\d+) bytes of RAM; (\d+) are available "
                      r"\(MemAvailable\)\n")


class Runner:
    def __init__(self, cli):
        self.cli = cli
        self.passed = 0
        self.failed = 0

    def run(self, *args, timeout=300):
        return subprocess.run([self.cli, *args], capture_output=True, text=True, timeout=timeout)

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what)

    def expect_json(self, what, p, rc=0):
        self.check(p.returncode == rc, "%s: exit %d, wanted %d; stderr %r" %
                   (what, p.returncode, rc, p.stderr[:400]))
        try:
            return json.loads(p.stdout)
        except json.JSONDecodeError:
            self.check(False, "%s: stdout is not one JSON object: %r" % (what, p.stdout[:200]))
            return {}

    def expect_error(self, what, p, line):
        """Exit 2, nothing on stdout, exactly `line` (with its newline) on stderr."""
        self.check(p.returncode == 2 and p.stdout == "" and p.stderr == line,
                   "%s: wanted exit 2 and %r, got %d, %r, stdout %r" %
                   (what, line, p.returncode, p.stderr[:400], p.stdout[:100]))


def test_ram_guards(r):
    # qwen2.5-0.5b: 256-token blocks of 3,145,728 bytes; the bench holds the
    # prefix four times, with 64 KiB of header room a block.
    p = r.run("bench", "pool", "--layout", "qwen2.5-0.5b", "--tokens", "16777216", timeout=60)
    m = RAM_LINE.fullmatch(p.stderr)
    r.check(p.returncode == 2 and p.stdout == "" and m is not None,
            "bench pool --tokens 16777216: exit %d, stderr %r" % (p.returncode, p.stderr[:300]))
    if m:
        r.check(m.group(1) == "--tokens 16777216 (65536 blocks of qwen2.5-0.5b)",
                "bench pool: what %r" % m.group(1))
        r.check(int(m.group(2)) == 4 * 65536 * (3145728 + 65536),
                "bench pool: needed %s" % m.group(2))
        r.check(int(m.group(3)) < int(m.group(2)), "bench pool: available %s" % m.group(3))
    # bench remote: every block in RAM, and one batch (16) of read buffers;
    # refused before any connect (nothing listens on port 1).
    p = r.run("bench", "remote", "--remote", "redis://127.0.0.1:1", "--block-bytes", "535822336",
              "--blocks", "1000000", timeout=60)
    m = RAM_LINE.fullmatch(p.stderr)
    r.check(p.returncode == 2 and m is not None,
            "bench remote: exit %d, stderr %r" % (p.returncode, p.stderr[:300]))
    if m:
        # The one-tensor layout's data plus 64 KiB a block.
        r.check(m.group(1) == "--blocks 1000000 of 535822336 bytes", "bench remote: %r" % m.group(1))
        r.check(int(m.group(2)) == (1000000 + 16) * (535822336 + 65536),
                "bench remote: needed %s" % m.group(2))
    # bench cache: 100M indexed blocks of llama3-8b with 512-token blocks.
    p = r.run("bench", "cache", "--layout", "llama3-8b", "--blocks", "100000000",
              "--block-tokens", "32768", timeout=60)
    m = RAM_LINE.fullmatch(p.stderr)
    r.check(p.returncode == 2 and m is not None,
            "bench cache: exit %d, stderr %r" % (p.returncode, p.stderr[:300]))
    if m:
        r.check(m.group(1) == "--blocks 100000000 of llama3-8b", "bench cache: %r" % m.group(1))
        r.check(int(m.group(3)) < int(m.group(2)), "bench cache: %s vs %s" % m.groups()[1:])


def test_command_names(r):
    p = r.run("bench", "foo")
    r.expect_error("bench foo", p,
                   "kvtier: unknown bench command 'foo' (one of: cache, disk, folder, pool, remote, serve)\n")
    p = r.run("bench")
    r.expect_error("bench alone", p,
                   "kvtier: 'bench' needs a command (one of: cache, disk, folder, pool, remote, serve)\n")
    # --help still reaches the group.
    p = r.run("bench", "--help")
    r.check(p.returncode == 0 and "pool" in p.stdout, "bench --help: %d" % p.returncode)


def test_demo_bounds(r, tmp):
    d = os.path.join(tmp, "demo-bounds")
    p = r.run("demo", "--dir", d, "--pool-blocks", "3", timeout=120)
    m = re.fullmatch(r"kvtier: pool_blocks 3: the longest conversation needs (\d+) blocks of 16 "
                     r"tokens; give 0 \(sized for it\) or at least \1\n", p.stderr)
    r.check(p.returncode == 2 and m is not None and not os.path.exists(d),
            "demo --pool-blocks 3: exit %d, stderr %r, folder made %s" %
            (p.returncode, p.stderr[:300], os.path.exists(d)))
    p = r.run("demo", "--dir", d, "--block-tokens", "4096", timeout=120)
    m = re.fullmatch(r"kvtier: block_tokens 4096: more than the 1507-token system prompt every "
                     r"conversation shares, so no block would be cached; give 1\.\.1507\n",
                     p.stderr)
    r.check(p.returncode == 2 and m is not None and not os.path.exists(d),
            "demo --block-tokens 4096: exit %d, stderr %r" % (p.returncode, p.stderr[:300]))


def test_round_bytes_units(r):
    j = r.expect_json("bench cache --round-bytes 1MiB",
                      r.run("bench", "cache", "--layout", "tiny", "--blocks", "64", "--samples",
                            "10", "--round-bytes", "1MiB", "--json"))
    r.check(j.get("blocks") == 64, "bench cache --round-bytes 1MiB: %s" % j)
    p = r.run("bench", "cache", "--layout", "tiny", "--blocks", "64", "--round-bytes", "65GiB")
    r.check(p.returncode == 2 and "--round-bytes" in p.stderr and p.stderr.count("\n") == 1,
            "--round-bytes 65GiB: %d %r" % (p.returncode, p.stderr))


def test_verify_folders(r, tmp):
    out = os.path.join(tmp, "out")
    j = r.expect_json("synth --out", r.run("synth", "--layout", "tiny", "--random", "64",
                                           "--out", out, "--json"))
    r.check(j.get("present") == 4, "synth --out: %s" % j)
    names = sorted(os.listdir(out))
    j = r.expect_json("verify DIR of synth --out", r.run("verify", out, "--json"))
    r.check([(os.path.basename(f["path"]), f["outcome"]) for f in j.get("files", [])] ==
            [(n, "ok") for n in names] and j.get("summary") ==
            {"files": 4, "ok": 4, "adopt": 0, "failed": 0}, "verify synth --out: %s" % j)
    # A block under another key's name, one folder down: found, and failed
    # for its key.
    deep = os.path.join(out, "a", "b")
    os.makedirs(deep)
    shutil.copy(os.path.join(out, names[0]), os.path.join(deep, "1-2-3-" + names[1]))
    j = r.expect_json("verify DIR with a renamed block", r.run("verify", out, "--json"), rc=1)
    files = j.get("files", [])
    bad = [f for f in files if f["outcome"] != "ok"]
    r.check(len(files) == 5 and len(bad) == 1 and
            bad[0]["path"] == os.path.join(deep, "1-2-3-" + names[1]) and
            bad[0]["reason"] == "key_mismatch" and j["summary"]["failed"] == 1,
            "verify renamed block: %s" % bad)
    # The documented quarantine recipe on a healthy cache: exit 0.
    cache = os.path.join(tmp, "cache")
    r.expect_json("synth --cache", r.run("synth", "--layout", "tiny", "--random", "64",
                                         "--cache", cache, "--json"))
    os.makedirs(os.path.join(cache, "quarantine"), exist_ok=True)
    p = r.run("verify", os.path.join(cache, "quarantine"))
    r.check(p.returncode == 0 and p.stdout.endswith(
        "0 files: 0 ok, 0 to adopt (valid, no index row yet: the next open adopts them), "
        "0 failed\n"), "verify DIR/quarantine: %d %r %r" % (p.returncode, p.stdout, p.stderr))


def write_config(tmp, name, obj):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def test_config(r, tmp):
    cache = os.path.join(tmp, "gc-cache")
    r.expect_json("synth --cache", r.run("synth", "--layout", "tiny", "--random", "160",
                                         "--cache", cache, "--json"))
    cfg = write_config(tmp, "gc.json", {"disk_dir": cache, "disk_max_bytes": 1})
    j = r.expect_json("gc --config with disk_dir", r.run("gc", "--config", cfg, "--dry-run",
                                                        "--json"))
    r.check(j.get("totals", {}).get("by_reason", {}).get("over_budget", {}).get("entries") == 10,
            "gc --config disk_dir: %s" % j.get("totals"))
    p = r.run("gc", "--dry-run")
    r.expect_error("gc without a folder", p,
                   "kvtier: give the cache folder DIR (or --config with disk_dir)\n")

    # replay: layout and host_policy apply; host_bytes and disk_* refused.
    cfg = write_config(tmp, "replay.json", {"layout": "qwen2.5-0.5b", "host_policy": "reuse"})
    j = r.expect_json("replay --config layout", r.run(
        "replay", TRACE, "--ram-tokens", "100000", "--payload", "none", "--limit", "50",
        "--config", cfg, "--json"))
    r.check(j.get("policy") == "reuse" and j.get("block_bytes") == 3145728,
            "replay --config: policy %r block_bytes %r" % (j.get("policy"), j.get("block_bytes")))
    for option, value in (("host_bytes", "1GiB"), ("disk_max_bytes", "1GiB")):
        cfg = write_config(tmp, "replay-%s.json" % option, {option: value})
        p = r.run("replay", TRACE, "--ram-tokens", "100000", "--config", cfg)
        r.expect_error("replay --config %s" % option, p,
                       "kvtier: --config %s: replay cannot apply option %s (replay sizes its "
                       "tiers with --ram-tokens and --disk-tokens; it applies layout, "
                       "host_policy, disk_dir, remote and remote_*)\n" % (cfg, option))
    cfg = write_config(tmp, "synth.json", {"host_bytes": "1GiB"})
    p = r.run("synth", "--layout", "tiny", "--random", "32", "--cache",
              os.path.join(tmp, "c2"), "--config", cfg)
    r.expect_error("synth --cache --config host_bytes", p,
                   "kvtier: --config %s: synth --cache cannot apply option host_bytes (it writes "
                   "through the disk tier alone: disk_* apply)\n" % cfg)

    # read_buffer_prefault_bytes: no command applies it, each says so by name
    # (1229907 dropped it silently: the commands ran without it).
    cfg = write_config(tmp, "prefault.json", {"read_buffer_prefault_bytes": "1MiB"})
    for words, args in (("bench pool", ["bench", "pool", "--layout", "tiny"]),
                        ("bench cache", ["bench", "cache", "--layout", "tiny", "--blocks", "64"]),
                        ("gc", ["gc", cache, "--dry-run"]),
                        ("replay", ["replay", TRACE, "--ram-tokens", "100000"])):
        p = r.run(*args, "--config", cfg)
        r.expect_error("%s --config read_buffer_prefault_bytes" % words, p,
                       "kvtier: --config %s: %s cannot apply option read_buffer_prefault_bytes (it "
                       "is for an engine's cache opened from Python or C; the commands size their "
                       "read buffers themselves)\n" % (cfg, words))


def run_on_pty(cli, args, stdout_too=False):
    """Runs with stderr on a pty and stdout into a pipe: (rc, stdout,
    stderr); with stdout_too, both on the pty: (rc, "", what it showed)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([cli, *args], stdout=slave if stdout_too else subprocess.PIPE,
                         stderr=slave)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        err += chunk
    out = b"" if stdout_too else p.stdout.read()
    rc = p.wait()
    os.close(master)
    # The terminal turns "\n" into "\r\n".
    return rc, out.decode(), err.decode().replace("\r\n", "\n")


def test_progress(r, tmp):
    args = ["synth", "--layout", "tiny", "--random", "320", "--out", os.path.join(tmp, "bar")]
    rc, out, err = run_on_pty(r.cli, args)
    r.check(rc == 0 and out == "blocks 20, present 20, missing 0, wrong 0\n",
            "synth on a pty: %d %r" % (rc, out))
    frames = err.split("\r")
    r.check(frames[0] == "" and len(frames) == 21, "synth bar: %d frames %r" %
            (len(frames), err[:200]))
    r.check(frames[-1] == "[" + "#" * 40 + "] 100.0% 20/20 blocks\n",
            "synth bar: last frame %r" % frames[-1])
    r.check(len(frames) > 2 and frames[1] == "[##" + " " * 38 + "]   5.0% 1/20 blocks",
            "synth bar: first frame %r" % frames[1:2])
    rc, out, err = run_on_pty(r.cli, args + ["--json"])
    r.check(rc == 0 and err == "" and json.loads(out)["present"] == 20,
            "synth --json on a pty: %d %r" % (rc, err[:200]))
    p = r.run(*args)
    r.check(p.returncode == 0 and p.stderr == "", "synth into a pipe: %r" % p.stderr[:200])
    # gc steps, one line each.
    cache = os.path.join(tmp, "gc-bar")
    r.expect_json("synth --cache", r.run("synth", "--layout", "tiny", "--random", "64",
                                         "--cache", cache, "--json"))
    # stats, verify and gc walk blocks/ subfolder by subfolder: a bar of
    # subfolders; gc then one of the bytes over its budget (issue 32 item 4).
    subs = len(os.listdir(os.path.join(cache, "blocks")))
    walk = "".join("\r[%s%s] %5.1f%% %d/%d subfolders" %
                   ("#" * (i * 40 // subs), " " * (40 - i * 40 // subs), i * 100.0 / subs, i, subs)
                   for i in range(1, subs + 1)) + "\n"
    rc, out, err = run_on_pty(r.cli, ["stats", cache])
    r.check(rc == 0 and err == walk and out.startswith(cache + ": 4 blocks,"),
            "stats on a pty: %d %r %r" % (rc, err, out[:100]))
    rc, out, err = run_on_pty(r.cli, ["verify", cache])
    r.check(rc == 0 and err == walk and out.endswith("4 files: 4 ok, 0 to adopt (valid, no index "
                                                     "row yet: the next open adopts them), 0 "
                                                     "failed\n"),
            "verify on a pty: %d %r %r" % (rc, err, out[-100:]))
    # With stdout on the terminal too, verify's own lines are the progress:
    # no bar; stats prints at the end, so it draws one.
    rc, _, both = run_on_pty(r.cli, ["verify", cache], stdout_too=True)
    r.check(rc == 0 and "subfolders" not in both and both.endswith(" 0 failed\n"),
            "verify, stdout on the pty: %d %r" % (rc, both[-300:]))
    rc, _, both = run_on_pty(r.cli, ["stats", cache], stdout_too=True)
    r.check(rc == 0 and both.startswith(walk + cache + ": 4 blocks,"),
            "stats, stdout on the pty: %d %r" % (rc, both[:300]))
    rc, out, err = run_on_pty(r.cli, ["stats", cache, "--json"])
    r.check(rc == 0 and err == "", "stats --json on a pty: %r" % err[:200])
    rc, out, err = run_on_pty(r.cli, ["gc", cache, "--max-bytes", "1"])
    # The bytes over: what the file system allocates for 4 blocks, less 1.
    r.check(rc == 0 and re.fullmatch(
        r"kvtier gc: removing from %s\.\.\.\n%s(\r\[[# ]{40}\] +[0-9.]+%% \d+/(\d+) bytes "
        r"over the budget)*\r\[#{40}\] 100\.0%% (\d+)/\3 bytes over the budget\n" %
        (re.escape(cache), re.escape(walk)), err) is not None, "gc on a pty: %d %r" % (rc, err))
    r.check(re.search(r"^4 entries, \d+ bytes freed\n\Z", out, re.M) is not None,
            "gc on a pty: stdout %r" % out[-200:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Runner(os.path.abspath(args.cli))
    tmp = tempfile.mkdtemp(prefix="kvtier_cli_guard_test_")
    try:
        test_ram_guards(r)
        test_command_names(r)
        test_demo_bounds(r, tmp)
        test_round_bytes_units(r)
        test_verify_folders(r, tmp)
        test_config(r, tmp)
        test_progress(r, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (r.passed, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
