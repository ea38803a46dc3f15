#!/usr/bin/python3
"""`kvtier replay` against an independent simulation of DESIGN.md §6.

The simulation below uses no kvtier code. It replays the Mooncake trace
(the repository's copy, tests/data/mooncake/synthetic_trace.jsonl, or
--trace) with 512-token blocks:
requests in file order; a request's match is the longest run of its leading
hash ids present in the cache (any tier) on arrival; its hit tokens are
min(512 × match, input_length), split by the tier each matched block was
found in; then each block, in order, is touched (RAM: most recent; disk:
promoted to RAM) or inserted into RAM. RAM victims move to the disk tier
(LRU) when there is one. Tiers are exclusive (docs/replay.md).

Checks, on the full trace with --payload none and 3,000,000 RAM tokens:
  - LRU: hit_ratio within 0.005 of the simulation (and the exact token
    counts: the semantics are deterministic), max_hit_ratio likewise;
  - the reuse policy likewise, and that it beats LRU;
  - Belady's MIN likewise;
  - with --disk-tokens 50000000: the simulation's figures, and
    hit_ratio >= 0.99 × max_hit_ratio;
  - the figures the lead's own simulation gave (max 0.65124, LRU 0.31509,
    Belady 0.56003) within 0.005.
Then --payload real on the first 300 requests (--limit 300) with --layout
tiny, a small RAM tier and a disk tier: every loaded block verified, none wrong, disk hits
present, hit_ratio within 0.005 of the simulation. Then bad input: exit 2,
one line on stderr, nothing on stdout.

    /usr/bin/python3 tests/replay_test.py --cli build/dev/kvtier [--trace FILE]

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import collections
import heapq
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = os.path.join(REPO, "tests", "data", "mooncake", "synthetic_trace.jsonl")
BLOCK = 512
RAM_TOKENS = 3000000
DISK_TOKENS = 50000000
GHOST_PER_ENTRY = 4  # the reuse policy remembers 4 × entries evicted keys
TOLERANCE = 0.005

# --- The independent simulation ------------------------------------------


def load_trace(path, limit=None):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            out.append((r["input_length"], r["hash_ids"]))
            if limit is not None and len(out) == limit:
                break
    return out


def block_tokens(input_length, i):
    return max(0, min(BLOCK, input_length - BLOCK * i))


class Lru:
    """Plain LRU over block ids."""

    def __init__(self, cap):
        self.cap = cap
        self.d = collections.OrderedDict()

    def __contains__(self, x):
        return x in self.d

    def __len__(self):
        return len(self.d)

    def touch(self, x):
        self.d.move_to_end(x)

    def victim(self):
        return next(iter(self.d))

    def remove(self, x, evicted):
        del self.d[x]

    def add(self, x, reused):
        self.d[x] = True


class Reuse:
    """Blocks not yet reused go first (LRU among them), then reused ones
    (LRU). A block is reused once touched, promoted, or re-inserted while a
    bounded ghost list of evicted ids still remembers it."""

    def __init__(self, cap):
        self.cap = cap
        self.once = collections.OrderedDict()
        self.again = collections.OrderedDict()
        self.ghost = collections.OrderedDict()

    def __contains__(self, x):
        return x in self.once or x in self.again

    def __len__(self):
        return len(self.once) + len(self.again)

    def touch(self, x):
        if x in self.once:
            del self.once[x]
        else:
            del self.again[x]
        self.again[x] = True

    def victim(self):
        return next(iter(self.once)) if self.once else next(iter(self.again))

    def remove(self, x, evicted):
        self.once.pop(x, None)
        self.again.pop(x, None)
        if evicted:
            self.ghost.pop(x, None)
            self.ghost[x] = True
            while len(self.ghost) > GHOST_PER_ENTRY * (len(self) + 1):
                self.ghost.popitem(last=False)

    def add(self, x, reused):
        if x in self.ghost:
            del self.ghost[x]
            reused = True
        (self.again if reused else self.once)[x] = True


def simulate(trace, ram_blocks, disk_blocks=0, policy=Lru):
    ram = policy(ram_blocks)
    disk = collections.OrderedDict()
    out = collections.Counter()

    def insert_ram(x, reused):
        if len(ram) >= ram_blocks:
            v = ram.victim()
            ram.remove(v, True)
            if disk_blocks:
                if len(disk) >= disk_blocks:
                    disk.popitem(last=False)
                disk[v] = True
        ram.add(x, reused)

    for input_length, ids in trace:
        out["input"] += input_length
        for i, x in enumerate(ids):
            if x in ram:
                out["ram"] += block_tokens(input_length, i)
            elif x in disk:
                out["disk"] += block_tokens(input_length, i)
            else:
                break
        for x in ids:
            if x in ram:
                ram.touch(x)
            elif x in disk:
                del disk[x]
                insert_ram(x, True)
            else:
                insert_ram(x, False)
    out["hit"] = out["ram"] + out["disk"]
    return out


def max_hits(trace):
    seen = set()
    hit = 0
    for input_length, ids in trace:
        for i, x in enumerate(ids):
            if x not in seen:
                break
            hit += block_tokens(input_length, i)
        seen.update(ids)
    return hit


def belady_hits(trace, cap):
    seq = [x for _, ids in trace for x in ids]
    never = len(seq) + 1
    nxt = [never] * len(seq)
    last = {}
    for p in range(len(seq) - 1, -1, -1):
        nxt[p] = last.get(seq[p], never)
        last[seq[p]] = p
    cached = {}  # id -> next use
    heap = []  # (-next use, id), stale entries skipped
    hit = 0
    p = 0
    for input_length, ids in trace:
        for i, x in enumerate(ids):
            if x not in cached:
                break
            hit += block_tokens(input_length, i)
        for x in ids:
            if x not in cached and len(cached) >= cap:
                while True:
                    use, y = heapq.heappop(heap)
                    if cached.get(y) == -use:
                        del cached[y]
                        break
            cached[x] = nxt[p]
            heapq.heappush(heap, (-nxt[p], x))
            p += 1
    return hit


# --- Running the CLI ------------------------------------------------------


class Runner:
    def __init__(self, cli):
        self.cli = cli
        self.passed = 0
        self.failed = 0

    def run(self, args):
        return subprocess.run([self.cli, "replay"] + args, capture_output=True, text=True)

    def check(self, what, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL %s %s" % (what, detail))

    def replay_json(self, what, args):
        p = self.run(args + ["--json"])
        self.check(what + ": exit 0", p.returncode == 0, p.stderr.strip())
        # Not a terminal: no progress bar, nothing on stderr.
        self.check(what + ": quiet stderr", p.stderr == "", repr(p.stderr[:200]))
        try:
            return json.loads(p.stdout)
        except ValueError:
            self.check(what + ": JSON output", False, repr(p.stdout[:200]))
            return None

    def expect_close(self, what, got, want, tol=TOLERANCE):
        self.check(what, got is not None and abs(got - want) <= tol,
                   "got %r want %r (tolerance %g)" % (got, want, tol))

    def expect_eq(self, what, got, want):
        self.check(what, got == want, "got %r want %r" % (got, want))

    def expect_usage_error(self, what, args, needle):
        p = self.run(args)
        lines = p.stderr.strip().split("\n")
        self.check(what + ": exit 2", p.returncode == 2,
                   "exit %d stderr %r" % (p.returncode, p.stderr[:300]))
        self.check(what + ": one line", len(lines) == 1 and lines[0].startswith("kvtier: "),
                   repr(p.stderr[:300]))
        self.check(what + ": names the problem", needle in p.stderr, repr(p.stderr[:300]))
        self.check(what + ": nothing on stdout", p.stdout == "", repr(p.stdout[:200]))


def check_metadata(runner, trace_path, trace):
    ram_blocks = RAM_TOKENS // BLOCK
    disk_blocks = DISK_TOKENS // BLOCK
    total = sum(t for t, _ in trace)
    want_max = max_hits(trace)
    sims = {
        "lru": simulate(trace, ram_blocks),
        "reuse": simulate(trace, ram_blocks, policy=Reuse),
    }
    want_belady = belady_hits(trace, ram_blocks)
    figures = {}
    results = {}  # the runs' JSON, for check_doc_figures
    for policy, sim in sims.items():
        j = runner.replay_json("none/" + policy, [trace_path, "--ram-tokens", str(RAM_TOKENS),
                                                  "--payload", "none", "--policy", policy])
        if j is None:
            continue
        figures[policy] = j["hit_ratio"]
        results[policy] = j
        runner.expect_eq(policy + ": requests", j["requests"], len(trace))
        runner.expect_eq(policy + ": ram_blocks", j["ram_blocks"], ram_blocks)
        runner.expect_close(policy + ": hit_ratio", j["hit_ratio"], sim["hit"] / total)
        runner.expect_close(policy + ": max_hit_ratio", j["max_hit_ratio"], want_max / total)
        runner.expect_close(policy + ": belady_hit_ratio", j["belady_hit_ratio"],
                            want_belady / total)
        runner.expect_eq(policy + ": hit_tokens", j["hit_tokens"], sim["hit"])
        runner.expect_eq(policy + ": hit_tokens_ram", j["hit_tokens_ram"], sim["hit"])
        runner.expect_eq(policy + ": hit_tokens_disk", j["hit_tokens_disk"], 0)
        runner.expect_eq(policy + ": input_tokens", j["input_tokens"], total)
        runner.expect_eq(policy + ": belady_hit_tokens", j["belady_hit_tokens"], want_belady)
        runner.expect_eq(policy + ": max_hit_tokens", j["max_hit_tokens"], want_max)
        print("%-6s hit_ratio %.5f (simulation %.5f)  max %.5f  belady %.5f" %
              (policy, j["hit_ratio"], sim["hit"] / total, j["max_hit_ratio"],
               j["belady_hit_ratio"]))
    if "lru" in figures and "reuse" in figures:
        runner.check("reuse beats lru", figures["reuse"] > figures["lru"],
                     "%r vs %r" % (figures["reuse"], figures["lru"]))
        # The lead's own simulation (issue 6 brief), a third opinion.
        runner.expect_close("lead: LRU 0.31509", figures["lru"], 0.31509)
        runner.expect_close("lead: max 0.65124", want_max / total, 0.65124)
        runner.expect_close("lead: Belady 0.56003", want_belady / total, 0.56003)

    for policy in ("lru", "reuse"):
        sim = simulate(trace, ram_blocks, disk_blocks,
                       policy=Lru if policy == "lru" else Reuse)
        what = "none/%s+disk" % policy
        j = runner.replay_json(what, [trace_path, "--ram-tokens", str(RAM_TOKENS),
                                      "--disk-tokens", str(DISK_TOKENS), "--payload", "none",
                                      "--policy", policy])
        if j is None:
            continue
        results[policy + "+disk"] = j
        runner.expect_eq(what + ": disk_blocks", j["disk_blocks"], disk_blocks)
        runner.expect_close(what + ": hit_ratio", j["hit_ratio"], sim["hit"] / total)
        runner.expect_close(what + ": hit_ratio_ram", j["hit_ratio_ram"], sim["ram"] / total)
        runner.expect_close(what + ": hit_ratio_disk", j["hit_ratio_disk"], sim["disk"] / total)
        runner.expect_eq(what + ": hit_tokens_ram", j["hit_tokens_ram"], sim["ram"])
        runner.expect_eq(what + ": hit_tokens_disk", j["hit_tokens_disk"], sim["disk"])
        runner.check(what + ": hit_ratio >= 0.99 max",
                     j["hit_ratio"] >= 0.99 * j["max_hit_ratio"],
                     "%r vs %r" % (j["hit_ratio"], j["max_hit_ratio"]))
        print("%-12s hit_ratio %.5f (RAM %.5f, disk %.5f; simulation %.5f)  max %.5f" %
              (policy + "+disk", j["hit_ratio"], j["hit_ratio_ram"], j["hit_ratio_disk"],
               sim["hit"] / total, j["max_hit_ratio"]))
    return results


def check_real(runner, trace_path, trace, tmp):
    # First 300 requests; 1,500,000 RAM tokens (2,929 blocks) so that some
    # blocks go down to disk and come back (67 in the simulation).
    limit = 300
    ram_tokens = 1500000
    head = trace[:limit]
    total = sum(t for t, _ in head)
    sim = simulate(head, ram_tokens // BLOCK, DISK_TOKENS // BLOCK)
    disk_dir = os.path.join(tmp, "disk")
    j = runner.replay_json("real", [trace_path, "--ram-tokens", str(ram_tokens), "--disk-tokens",
                                    str(DISK_TOKENS), "--disk-dir", disk_dir, "--payload", "real",
                                    "--layout", "tiny", "--limit", str(limit)])
    if j is None:
        return None
    runner.expect_eq("real: requests", j["requests"], limit)
    runner.expect_eq("real: wrong", j["wrong"], 0)
    runner.check("real: verified every loaded block",
                 j["verified"] > 0 and j["verified"] == j["ram_hits"] + j["disk_hits"],
                 "verified %r, ram_hits %r, disk_hits %r" %
                 (j["verified"], j["ram_hits"], j["disk_hits"]))
    runner.check("real: disk served blocks", j["disk_hits"] > 0 and j["hit_tokens_disk"] > 0,
                 repr(j["disk_hits"]))
    runner.check("real: bytes loaded", j["bytes_loaded"] == j["verified"] * j["block_file_bytes"],
                 "%r vs %r × %r" % (j["bytes_loaded"], j["verified"], j["block_file_bytes"]))
    runner.expect_close("real: hit_ratio", j["hit_ratio"], sim["hit"] / total)
    runner.expect_close("real: max_hit_ratio", j["max_hit_ratio"], max_hits(head) / total)
    runner.check("real: load_GBps", isinstance(j["load_GBps"], float) and j["load_GBps"] > 0,
                 repr(j["load_GBps"]))
    print("real   hit_ratio %.5f (simulation %.5f)  verified %d  wrong %d  load %.3f GB/s" %
          (j["hit_ratio"], sim["hit"] / total, j["verified"], j["wrong"], j["load_GBps"]))
    # The folder now holds blocks: a second replay into it is refused.
    runner.expect_usage_error("real: used disk dir",
                              [trace_path, "--ram-tokens", "1024", "--disk-tokens", "1024",
                               "--disk-dir", disk_dir, "--limit", "1"], "is not empty")
    return j


def doc_text(name):
    with open(os.path.join(REPO, "docs", name), encoding="utf-8") as f:
        return " ".join(f.read().split())


def check_doc_figures(runner, results, real):
    """What docs/replay.md and docs/remote-tier.md quote from these runs of
    the repository's trace (3,000,000 RAM tokens, LRU and reuse, with and
    without a 50,000,000-token disk tier; the real run's first 300
    requests), rounded as the pages round them. The real-payload and
    two-process tables report the simulator's counts (the pages say so):
    verified = blocks found (RAM hits, plus disk or remote hits), stored =
    blocks inserted."""
    def expect(what, shown, got):
        if "." in shown:
            got = "%.*f" % (len(shown.split(".")[1]), got)
        else:
            shown = int(shown.replace(",", ""))
        runner.expect_eq(what, got, shown)

    lru, reuse = results.get("lru"), results.get("reuse")
    lru_disk, reuse_disk = results.get("lru+disk"), results.get("reuse+disk")
    if None in (lru, reuse, lru_disk, reuse_disk, real):
        runner.check("doc figures: every run gave its JSON", False)
        return
    replay, remote = doc_text("replay.md"), doc_text("remote-tier.md")
    m = re.search(r"The LRU point at 3,000,000 tokens is (\d\.\d+), the same double", replay)
    runner.expect_eq("replay.md: the LRU double", repr(lru["hit_ratio"]), m.group(1))
    m = re.search(r"`hit_ratio` = `max_hit_ratio` = ([\d.]+) for both policies: LRU RAM ([\d.]+) "
                  r"\+ disk ([\d.]+); reuse RAM ([\d.]+) \+ disk ([\d.]+)\.", replay)
    for j in (lru_disk, reuse_disk):
        expect("replay.md: disk run hit_ratio", m.group(1), j["hit_ratio"])
        expect("replay.md: disk run max", m.group(1), j["max_hit_ratio"])
    for j, ram, disk in ((lru_disk, m.group(2), m.group(3)), (reuse_disk, m.group(4), m.group(5))):
        expect("replay.md: disk run RAM part", ram, j["hit_ratio_ram"])
        expect("replay.md: disk run disk part", disk, j["hit_ratio_disk"])
    # The --payload real table: hit_ratio, RAM / disk, verified, wrong.
    runs = re.findall(r"\| `--ram-tokens 3000000( --policy reuse| --disk-tokens 50000000 "
                      r"--disk-dir D)?`(?: \(lru\))? \| ([\d.]+) \| ([\d.]+) / ([\d.]+) \| "
                      r"([\d,]+) \| (\d+) \|", replay)
    runner.expect_eq("replay.md: real-payload rows", len(runs), 3)
    for flags, hit, ram, disk, verified, wrong in runs:
        j = reuse if "reuse" in flags else lru_disk if "disk" in flags else lru
        expect("replay.md real%s: hit_ratio" % flags, hit, j["hit_ratio"])
        expect("replay.md real%s: RAM" % flags, ram, j["hit_ratio_ram"])
        if disk != "0":
            expect("replay.md real%s: disk" % flags, disk, j["hit_ratio_disk"])
        expect("replay.md real%s: verified" % flags, verified, j["ram_hits"] + j["disk_hits"])
        runner.expect_eq("replay.md real%s: wrong" % flags, wrong, "0")
    m = re.search(r"RAM 1,500,000 tokens so that (\d+) blocks come back from disk; .* most of it "
                  r"the disk tier writing the 300 requests' ([\d,]+) blocks", replay)
    expect("replay.md: blocks back from disk (300 requests)", m.group(1), real["disk_hits"])
    expect("replay.md: blocks written (300 requests)", m.group(2), real["inserts"])
    # Two processes sharing a server: the first finds in Redis what an
    # unbounded disk tier would hold; the second finds every block there.
    rows = re.findall(r"\| (?:one server|cluster|cluster, resharding) \| (first|second)[^|]* \| "
                      r"([\d.]+)(?: ×3)? \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| 0(?: ×3)? \| "
                      r"([\d,]+) \| ([\d,]+) \|", remote)
    runner.expect_eq("remote-tier.md: two-process rows", len(rows), 6)
    for process, hit, ram, from_redis, most, verified, stored in rows:
        first = process == "first"
        expect("remote-tier.md %s: hit_ratio" % process, hit,
               lru_disk["hit_ratio"] if first else 1.0)
        expect("remote-tier.md %s: RAM" % process, ram, lru["hit_ratio"])
        expect("remote-tier.md %s: remote" % process, from_redis,
               lru_disk["hit_ratio_disk"] if first else 1.0 - lru["hit_ratio"])
        expect("remote-tier.md %s: max_hit_ratio" % process, most, lru["max_hit_ratio"])
        expect("remote-tier.md %s: verified" % process, verified,
               lru_disk["ram_hits"] + lru_disk["disk_hits"] if first else lru["block_accesses"])
        expect("remote-tier.md %s: stored" % process, stored, lru_disk["inserts"] if first else 0)
    m = re.search(r"its hit ratio is 1\.0, ([\d.]+) × `max_hit_ratio`", remote)
    expect("remote-tier.md: the second's ratio", m.group(1), 1.0 / lru["max_hit_ratio"])


def check_bad_input(runner, trace_path, tmp):
    def write(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    good = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n'
    cases = [
        ("missing field", write("a.jsonl", good + '{"timestamp": 1, "input_length": 5}\n'),
         "line 2: missing field output_length"),
        ("negative", write("b.jsonl", good.replace("600", "-600")),
         "line 1: input_length must be a non-negative integer"),
        ("unknown field", write("c.jsonl", good.replace('"timestamp"', '"time"')),
         'line 1: unknown field "time"'),
        ("not json", write("d.jsonl", good + "hello\n"), "line 2: not a JSON object"),
        ("empty", write("e.jsonl", ""), "no request"),
        ("huge line", write("f.jsonl", good + "[" + "1," * 600000 + "1]\n"),
         "line 2: longer than the limit of 1048576 bytes"),
        ("huge array", write("g.jsonl", '{"timestamp": 0, "input_length": 1, "output_length": 1, '
                             '"hash_ids": [' + ",".join(["7"] * 70000) + "]}\n"),
         "line 1: hash_ids has 70000 entries, over the limit of 65536"),
        ("missing file", os.path.join(tmp, "nope.jsonl"), "nope.jsonl"),
    ]
    for what, path, needle in cases:
        runner.expect_usage_error(what, [path, "--ram-tokens", "4096", "--payload", "none"],
                                  needle)
    flags = [
        ("ram below a block", ["--ram-tokens", "511"], "less than one 512-token block"),
        ("ram not a number", ["--ram-tokens", "3e6"], "--ram-tokens: expected an integer"),
        ("policy", ["--ram-tokens", "4096", "--policy", "lfu"], "unknown eviction policy 'lfu'"),
        ("payload", ["--ram-tokens", "4096", "--payload", "some"], "--payload: expected real"),
        ("disk dir without real", ["--ram-tokens", "4096", "--payload", "none", "--disk-dir",
                                   tmp, "--disk-tokens", "4096"], "--disk-dir is only used"),
        ("real disk without dir", ["--ram-tokens", "4096", "--payload", "real", "--disk-tokens",
                                   "4096"], "give both --disk-dir and --disk-tokens"),
        ("disk below a block", ["--ram-tokens", "4096", "--payload", "none", "--disk-tokens",
                                "100"], "--disk-tokens: 100 is less than"),
        ("limit zero", ["--ram-tokens", "4096", "--limit", "0"], "--limit: expected an integer 1"),
        ("layout", ["--ram-tokens", "4096", "--layout", "nosuch"], "--layout"),
        ("no ram", ["--payload", "none"], "--ram-tokens"),
    ]
    for what, args, needle in flags:
        runner.expect_usage_error(what, [trace_path] + args, needle)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--trace", default=TRACE, help="default: " + os.path.relpath(TRACE, REPO))
    args = ap.parse_args()
    runner = Runner(args.cli)
    trace = load_trace(args.trace)
    tmp = tempfile.mkdtemp(prefix="kvtier-replay-test-")
    try:
        results = check_metadata(runner, args.trace, trace)
        real = check_real(runner, args.trace, trace, tmp)
        if os.path.abspath(args.trace) == os.path.abspath(TRACE):
            check_doc_figures(runner, results, real)
        check_bad_input(runner, args.trace, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (runner.passed, runner.failed))
    return 1 if runner.failed or runner.passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
