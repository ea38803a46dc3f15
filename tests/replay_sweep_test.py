#!/usr/bin/python3
"""`kvtier replay --sweep` and `--plot`, and the limits on replay capacities.

On the repository's copy of the Mooncake trace (tests/data/mooncake/):
  - a sweep over three RAM sizes with both policies gives one row per
    (policy, size) in the documented order, each equal to the single-point
    `--payload none` replay of the same flags to the last bit (hit_ratio,
    its RAM/disk split, belady_hit_ratio), with and without a disk tier
    (src/replay/sweep_test.cc checks every row of many more sweeps);
  - --plot writes an SVG that parses as XML and that rsvg-convert renders to
    a PNG of the SVG's size showing each policy's line colour, the
    unbounded-capacity line and, with a disk tier, the shaded gain;
  - bad sweep flags exit 2 with one line naming the flag;
  - the committed pictures (docs/images/*.svg) are, byte for byte, what the
    commands docs/replay.md gives for them draw now;
  - a --config file's disk_dir is the real-payload sweep's disk folder
    (D/<policy>-<N> replays into it), and one given to a `--payload none`
    sweep is refused naming --config's disk_dir;
  - capacities over 2^40 tokens exit 2 naming the option; a capacity at the
    limit replays fine with memory that follows the trace (the child's peak
    RSS stays within twice that of a small capacity's run).

    /usr/bin/python3 tests/replay_sweep_test.py --cli build/dev/kvtier [--trace FILE]

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from replay_test import TRACE, Runner  # noqa: E402 (after the line above)

SIZES = [500000, 3000000, 1000000]
ROW_FIELDS = {"policy", "ram_tokens", "disk_tokens", "hit_ratio", "hit_ratio_ram",
              "hit_ratio_disk", "belady_hit_ratio"}
DISK_TOKENS = 6000000  # a disk tier that leaves the lines apart and below the maximum
# Colours the plot draws with (src/replay/sweep_plot.cc), and the LRU
# band's fill (18% of its colour over white).
LRU_RGB = (0x1f, 0x77, 0xb4)
REUSE_RGB = (0xd6, 0x27, 0x28)
MAX_RGB = (0x2c, 0xa0, 0x2c)
LRU_BAND_RGB = tuple(round(0.82 * 255 + 0.18 * c) for c in LRU_RGB)


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB/RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace != 0:
                raise ValueError("unexpected PNG format %r" % ((depth, ctype, interlace),))
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xff
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xff
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xff
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xff
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def count_near(rows, rgb, tol=12):
    return sum(1 for row in rows for px in row
               if all(abs(px[k] - rgb[k]) <= tol for k in range(3)))


def single(runner, trace, policy, ram, disk=None):
    args = [trace, "--ram-tokens", str(ram), "--payload", "none", "--policy", policy]
    if disk is not None:
        args += ["--disk-tokens", str(disk)]
    return runner.replay_json("single %s %d" % (policy, ram), args)


def check_sweep(runner, trace, tmp, disk):
    what = "sweep" + (" + disk" if disk else "")
    plot = os.path.join(tmp, "sweep%s.svg" % ("-disk" if disk else ""))
    args = [trace, "--sweep", ",".join(map(str, SIZES)), "--policy", "all", "--plot", plot]
    if disk:
        args += ["--disk-tokens", str(disk)]
    j = runner.replay_json(what, args)
    if j is None:
        return None
    rows = j["rows"]
    runner.expect_eq(what + ": rows", [(r["policy"], r["ram_tokens"]) for r in rows],
                     [(p, s) for p in ("lru", "reuse") for s in SIZES])
    runner.expect_eq(what + ": payload", j["payload"], "none")
    runner.expect_eq(what + ": plot", j["plot"], plot)
    for i, r in enumerate(rows):
        name = "%s %s %d" % (what, r["policy"], r["ram_tokens"])
        runner.check(name + ": fields", ROW_FIELDS <= set(r), repr(sorted(r)))
        runner.expect_eq(name + ": disk_tokens", r["disk_tokens"], disk or 0)
        if disk and i % 2 == 1:
            continue  # src/replay/sweep_test.cc checks every row; here the CLI's plumbing
        s = single(runner, trace, r["policy"], r["ram_tokens"], disk)
        if s is None:
            continue
        # Exactly, not within a tolerance: the same replay.
        for field in ("hit_ratio", "hit_ratio_ram", "hit_ratio_disk", "belady_hit_ratio",
                      "hit_tokens"):
            runner.expect_eq(name + ": " + field + " = single point", r[field], s[field])
        runner.expect_eq(name + ": max_hit_ratio", j["max_hit_ratio"], s["max_hit_ratio"])
    lru3m = [r for r in rows if r["policy"] == "lru" and r["ram_tokens"] == 3000000][0]
    print("%-12s LRU at 3,000,000: %.7f (RAM %.7f, disk %.7f)  max %.5f  %.1f s" %
          (what, lru3m["hit_ratio"], lru3m["hit_ratio_ram"], lru3m["hit_ratio_disk"],
           j["max_hit_ratio"], j["seconds"]))
    if not disk:
        runner.expect_close("sweep: lead's LRU 0.31509", lru3m["hit_ratio"], 0.31509, 5e-6)
    return plot


def check_plot(runner, plot, disk):
    what = "plot" + (" + disk" if disk else "")
    try:
        root = ET.parse(plot).getroot()
    except (OSError, ET.ParseError) as e:
        runner.check(what + ": SVG parses as XML", False, str(e))
        return
    runner.expect_eq(what + ": root", root.tag, "{http://www.w3.org/2000/svg}svg")
    width, height = int(root.get("width")), int(root.get("height"))
    polygons = root.findall("{http://www.w3.org/2000/svg}polygon")
    runner.expect_eq(what + ": shaded disk gains", len(polygons), 2 if disk else 0)
    rsvg = shutil.which("rsvg-convert")
    if rsvg is None:
        runner.check(what + ": rsvg-convert installed (scripts/bootstrap)", False)
        return
    png = plot[:-4] + ".png"
    p = subprocess.run([rsvg, plot, "-o", png], capture_output=True, text=True)
    runner.check(what + ": rsvg-convert exit 0", p.returncode == 0, p.stderr.strip())
    if p.returncode != 0:
        return
    runner.check(what + ": PNG non-empty", os.path.getsize(png) > 1000, repr(os.path.getsize(png)))
    w, h, rows = read_png(png)
    runner.expect_eq(what + ": PNG size = SVG size", (w, h), (width, height))
    white = count_near(rows, (255, 255, 255), 0)
    runner.check(what + ": something drawn", white < 0.97 * w * h, "%d of %d white" % (white, w * h))
    colours = [("lru line", LRU_RGB, 150), ("reuse line", REUSE_RGB, 150),
               ("max line", MAX_RGB, 150)]
    if disk:
        colours.append(("lru disk gain band", LRU_BAND_RGB, 1000))
    for name, rgb, least in colours:
        n = count_near(rows, rgb, 6)
        runner.check("%s: %s drawn" % (what, name), n >= least, "%d pixels" % n)
    print("%-12s %dx%d PNG, %d bytes, %d non-white pixels" %
          (what, w, h, os.path.getsize(png), w * h - white))


def check_bad_sweeps(runner, trace, tmp):
    cases = [
        ("both sizes", ["--ram-tokens", "4096", "--sweep", "4096"], "not both"),
        ("neither size", ["--payload", "none"], "give --ram-tokens N"),
        ("policy all alone", ["--ram-tokens", "4096", "--policy", "all"],
         "--policy all needs --sweep"),
        ("plot alone", ["--ram-tokens", "4096", "--plot", os.path.join(tmp, "x.svg")],
         "--plot needs --sweep"),
        ("empty sweep", ["--sweep", ""], "--sweep: expected token counts"),
        ("empty item", ["--sweep", "1000,,2000"], "--sweep: expected token counts"),
        ("small item", ["--sweep", "1000,100"], "--sweep: 100 is less than one 512-token block"),
        ("word item", ["--sweep", "1000,2M"], "--sweep: expected an integer 512..1099511627776"),
        ("repeat", ["--sweep", "1000,2000,1000"], "--sweep: 1000 appears twice"),
        ("many", ["--sweep", ",".join(str(1000 + i) for i in range(65))], "at most 64"),
        ("huge item", ["--sweep", "2199023255552"], "--sweep: 2199023255552 is over the limit"),
        ("policy", ["--sweep", "4096", "--policy", "lfu"], "--policy: expected lru, reuse or all"),
        ("plot folder", ["--sweep", "4096", "--plot", os.path.join(tmp, "nope", "x.svg")],
         "--plot: folder"),
        ("real disk without dir", ["--sweep", "4096", "--payload", "real", "--disk-tokens",
                                   "4096"], "give both --disk-dir and --disk-tokens"),
        ("payload", ["--sweep", "4096", "--payload", "some"], "--payload: expected real"),
    ]
    for what, args, needle in cases:
        runner.expect_usage_error("sweep " + what, [trace] + args, needle)


SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def doc_plot_commands():
    """(svg path, [replay args]) for each `--plot docs/images/X.svg` command
    of docs/replay.md, its continuation lines joined."""
    text = open(os.path.join(SOURCE, "docs", "replay.md"), encoding="utf-8").read()
    text = text.replace("\\\n", " ")
    out = []
    for m in re.finditer(r"^build/release/kvtier replay \$T (.*--plot (docs/images/\S+\.svg).*)$",
                         text, re.M):
        out.append((m.group(2), m.group(1).split()))
    return out


def check_committed_pictures(runner, trace, tmp):
    # The pictures docs/replay.md shows are the output of its commands
    # (the same sweep always draws the same bytes); on 1229907's tree the
    # RAM-only picture predated the drawing order of 0fc71dd (lru over
    # the other lines) and differed. The same sweeps (with --json) give
    # the hit ratios docs/replay.md and docs/operations.md quote from them.
    commands = doc_plot_commands()
    runner.expect_eq("docs/replay.md: commands drawing the committed pictures", len(commands), 2)
    sweeps = {}
    for svg, args in commands:
        out = os.path.join(tmp, os.path.basename(svg))
        args = [out if a == svg else a for a in args]
        p = runner.run([trace] + args + ["--json"])
        runner.check("%s: exit 0" % svg, p.returncode == 0, p.stderr[:300])
        with open(os.path.join(SOURCE, svg), "rb") as f:
            committed = f.read()
        drawn = open(out, "rb").read() if os.path.exists(out) else b""
        runner.check("%s: the command draws the committed bytes" % svg, drawn == committed,
                     "%d bytes drawn, %d committed" % (len(drawn), len(committed)))
        if p.returncode == 0:
            sweeps["disk" if "--disk-tokens" in args else "ram"] = json.loads(p.stdout)
    if len(sweeps) == 2:
        check_quoted_sweep_figures(runner, sweeps)


def doc_text(name):
    with open(os.path.join(SOURCE, "docs", name), encoding="utf-8") as f:
        return " ".join(f.read().split())


def check_quoted_sweep_figures(runner, sweeps):
    """The figures replay.md and operations.md quote from the two sweeps of
    the pictures, each rounded as the page rounds it."""
    def ratio(sweep, policy, ram, part="hit_ratio"):
        row = [r for r in sweeps[sweep]["rows"] if (r["policy"], r["ram_tokens"]) == (policy, ram)]
        return row[0][part] if row else None

    def expect(what, shown, got):
        digits = len(shown.split(".")[1])
        runner.expect_eq(what, None if got is None else "%.*f" % (digits, got), shown)

    def num(text):
        return int(text.replace(",", ""))

    replay, ops = doc_text("replay.md"), doc_text("operations.md")
    m = re.search(r"the dashed green line is the unbounded capacity's hit ratio \(([\d.]+)\)",
                  replay)
    expect("replay.md: unbounded capacity", m.group(1), sweeps["ram"]["max_hit_ratio"])
    m = re.search(r"At ([\d,]+) RAM tokens a disk tier of ([\d,]+) lifts LRU from ([\d.]+) to "
                  r"([\d.]+); at ([\d,]+) from ([\d.]+) to ([\d.]+)\.", replay)
    runner.expect_eq("replay.md: the disk sweep's disk tier", num(m.group(2)),
                     sweeps["disk"]["rows"][0]["disk_tokens"])
    for ram, before, after in (m.group(1, 3, 4), m.group(5, 6, 7)):
        expect("replay.md: LRU at %s, RAM only" % ram, before, ratio("ram", "lru", num(ram)))
        expect("replay.md: LRU at %s with disk" % ram, after, ratio("disk", "lru", num(ram)))
    m = re.search(r"`reuse` closes part of it \(on the repository's trace ([\d.]+) against LRU's "
                  r"([\d.]+) at ([\d,]+) tokens\)", ops)
    expect("operations.md: reuse", m.group(1), ratio("ram", "reuse", num(m.group(3))))
    expect("operations.md: LRU", m.group(2), ratio("ram", "lru", num(m.group(3))))
    m = re.search(r"a ([\d,]+)-token disk tier lifts LRU at ([\d,]+) RAM tokens from ([\d.]+) to "
                  r"([\d.]+), close to what ([\d,]+) tokens of RAM alone give \(([\d.]+)\)", ops)
    runner.expect_eq("operations.md: the disk sweep's disk tier", num(m.group(1)),
                     sweeps["disk"]["rows"][0]["disk_tokens"])
    expect("operations.md: LRU, RAM only", m.group(3), ratio("ram", "lru", num(m.group(2))))
    expect("operations.md: LRU with disk", m.group(4), ratio("disk", "lru", num(m.group(2))))
    expect("operations.md: RAM alone", m.group(6), ratio("ram", "lru", num(m.group(5))))
    m = re.search(r"\((\d+) points and (\d+) Belady references over its", ops)
    rows = sweeps["ram"]["rows"]
    runner.expect_eq("operations.md: points", len(rows), int(m.group(1)))
    runner.expect_eq("operations.md: Belady references", len({r["ram_tokens"] for r in rows}),
                     int(m.group(2)))


def check_figures_table(runner, trace):
    """docs/replay.md's "Figures" table (--payload none, full trace): one
    sweep of its RAM sizes, both policies, rounded as the page rounds, and
    the reuse figures it gives at 1,000 and 10,000 blocks."""
    text = open(os.path.join(SOURCE, "docs", "replay.md"), encoding="utf-8").read()
    head = "| `--ram-tokens` | blocks | LRU | reuse | gain | Belady (MIN) |"
    lines = text[text.index(head):].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([c.strip().strip("*").replace(",", "") for c in line.strip("|").split("|")])
    flat = " ".join(text.split())
    m = re.search(r"\(([\d,]+) and ([\d,]+) blocks: ([\d.]+) vs [\d.]+, ([\d.]+) vs [\d.]+\)", flat)
    ghost = [(int(m.group(i).replace(",", "")) * 512, m.group(j)) for i, j in ((1, 3), (2, 4))]
    sizes = [int(r[0]) for r in rows] + [t for t, _ in ghost if t not in [int(r[0]) for r in rows]]
    j = runner.replay_json("docs/replay.md figures", [trace, "--sweep", ",".join(map(str, sizes)),
                                                      "--policy", "all"])
    if j is None:
        return
    got = {(r["policy"], r["ram_tokens"]): r for r in j["rows"]}
    for tokens, blocks, lru, reuse, _, belady in rows:
        n = int(tokens)
        for policy, shown, field in (("lru", lru, "hit_ratio"), ("reuse", reuse, "hit_ratio"),
                                     ("lru", belady, "belady_hit_ratio")):
            runner.expect_eq("figures %s %s %s" % (tokens, policy, field),
                             "%.5f" % got[(policy, n)][field], shown)
        runner.expect_eq("figures %s blocks" % tokens, got[("lru", n)]["ram_blocks"], int(blocks))
    m = re.search(r"`max_hit_ratio` \(unbounded\) is ([\d.]+)\.", flat)
    runner.expect_eq("figures max_hit_ratio", "%.5f" % j["max_hit_ratio"], m.group(1))
    for tokens, shown in ghost:
        runner.expect_eq("ghost factor 4 at %d tokens" % tokens,
                         "%.4f" % got[("reuse", tokens)]["hit_ratio"], shown)


def check_config_disk_dir(runner, trace, tmp):
    # --config's disk_dir is the sweep's disk folder: D/<policy>-<N>.
    disk = os.path.join(tmp, "config-disk")
    cfg = os.path.join(tmp, "sweep-disk.json")
    with open(cfg, "w") as f:
        json.dump({"disk_dir": disk}, f)
    j = runner.replay_json("sweep --config disk_dir", [
        trace, "--sweep", "4096,8192", "--payload", "real", "--disk-tokens", "65536",
        "--limit", "40", "--config", cfg])
    if j is not None:
        runner.expect_eq("sweep --config disk_dir: rows", len(j.get("rows", [])), 2)
        runner.expect_eq("sweep --config disk_dir: wrong", [r.get("wrong") for r in j["rows"]],
                         [0, 0])
    runner.expect_eq("sweep --config disk_dir: the folders",
                     sorted(os.listdir(disk)) if os.path.isdir(disk) else None,
                     ["lru-4096", "lru-8192"])
    runner.expect_usage_error("sweep --payload none, --config disk_dir", [
        trace, "--sweep", "4096", "--config", cfg],
        "--config's disk_dir is only used with --payload real")
    runner.expect_usage_error("sweep --payload real, --config disk_dir, no --disk-tokens", [
        trace, "--sweep", "4096", "--payload", "real", "--config", cfg],
        "give both --disk-dir and --disk-tokens for a disk tier, or neither (the folder is "
        "--config's disk_dir)")


def peak_rss_kib(cli, args):
    """Runs the CLI; returns (exit code, stdout, its own peak RSS in KiB)."""
    p = subprocess.Popen([cli, "replay"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, out, usage.ru_maxrss


def check_limits(runner, trace, tmp):
    limit = 1 << 40
    for flag, value in (("--ram-tokens", "18446744073709551615"), ("--ram-tokens", str(2 << 40)),
                        ("--disk-tokens", "99999999999999999999999")):
        args = [trace, "--payload", "none", flag, value]
        if flag == "--disk-tokens":
            args += ["--ram-tokens", "4096"]
        runner.expect_usage_error("huge %s %s" % (flag, value[:8]), args,
                                  "%s: %s is over the limit of %d tokens" % (flag, value, limit))
    # At the limit: RAM and disk far larger than the trace act as unbounded,
    # and nothing is sized by the option (a real payload's Match index and
    # host budget included).
    base = [trace, "--payload", "real", "--limit", "300", "--json"]
    rc, out, rss_huge = peak_rss_kib(runner.cli, base + [
        "--ram-tokens", str(limit), "--disk-tokens", str(limit),
        "--disk-dir", os.path.join(tmp, "huge")])
    runner.expect_eq("at the limit: exit", rc, 0)
    if rc == 0:
        j = json.loads(out)
        runner.expect_eq("at the limit: unbounded hit ratio", j["hit_ratio"], j["max_hit_ratio"])
        runner.expect_eq("at the limit: ram_blocks as given", j["ram_blocks"], limit // 512)
        runner.expect_eq("at the limit: wrong", j["wrong"], 0)
    rc, _, rss_small = peak_rss_kib(runner.cli, base + ["--ram-tokens", "3000000"])
    runner.expect_eq("small RAM: exit", rc, 0)
    runner.check("at the limit: memory follows the trace", rss_huge <= 2 * rss_small,
                 "peak RSS %d KiB vs %d KiB at 3,000,000 tokens" % (rss_huge, rss_small))
    print("limits       peak RSS %d KiB at 2^40 tokens, %d KiB at 3,000,000" %
          (rss_huge, rss_small))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--trace", default=TRACE)
    args = ap.parse_args()
    runner = Runner(args.cli)
    tmp = tempfile.mkdtemp(prefix="kvtier-sweep-test-")
    try:
        for disk in (None, DISK_TOKENS):
            plot = check_sweep(runner, args.trace, tmp, disk)
            if plot is not None:
                check_plot(runner, plot, disk)
        check_bad_sweeps(runner, args.trace, tmp)
        check_config_disk_dir(runner, args.trace, tmp)
        if os.path.abspath(args.trace) == os.path.abspath(TRACE):
            check_committed_pictures(runner, args.trace, tmp)
            check_figures_table(runner, args.trace)
        check_limits(runner, args.trace, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (runner.passed, runner.failed))
    return 1 if runner.failed or runner.passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
