#!/usr/bin/python3
"""scripts/check-layers against copies of this checkout's sources.

Copies include/, src/, tools/, bench/ and tests/' sources into a temporary
folder and checks that the script exits 0 on the clean copy, then, one at a
time, plants an include that breaks each kind of rule and checks that it
exits 1 naming that file:line and the rule:
  - src/cache/ including the disk tier's private "disk/folder_layout.h";
  - src/core/ including "kvtier/tiered_cache.h" (the cache is above core);
  - src/core/ including "cache/block_index.h" (above, and private);
  - src/host/ including "disk/..." (beside it);
  - a public header including a src/ header;
  - library code including src/testing/;
  - tools/ including the engine's own "engine/model.h";
  - a bench including a private header its BENCH_SUBJECTS entry does not name;
  - a tests/ file that tests no one component including "disk/...".

    /usr/bin/python3 tests/check_layers_test.py [--cli PATH (ignored)]

Prints "N passed, M failed" last and exits non-zero on any failure.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SCRIPT = os.path.join(ROOT, "scripts", "check-layers")
SOURCE_EXTS = (".h", ".hh", ".hpp", ".inc", ".c", ".cc", ".cpp")

passed = 0
failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def copy_sources(dst):
    """The C and C++ files of the folders the script reads (no build output,
    no data)."""
    for top in ("include", "src", "tools", "bench", "tests"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            for name in filenames:
                if name.endswith(SOURCE_EXTS):
                    src = os.path.join(dirpath, name)
                    rel = os.path.relpath(src, ROOT)
                    os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
                    shutil.copy2(src, os.path.join(dst, rel))


def run(root):
    p = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def plant(root, rel, include, at_line=None):
    """Writes `#include "<include>"` into `rel` (a new file when it does not
    exist, else after its first line); returns the line number it is on."""
    path = os.path.join(root, rel)
    if os.path.exists(path):
        with open(path) as f:
            lines = f.read().split("\n")
        lines.insert(1, f'#include "{include}"')
        lineno = 2
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lines = ["// planted by tests/check_layers_test.py", f'#include "{include}"', ""]
        lineno = 2
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return lineno


CASES = [
    # (file, include, rule)
    ("src/cache/cache_core.cc", "disk/folder_layout.h", "private-header"),
    ("src/core/status.cc", "kvtier/tiered_cache.h", "direction"),
    ("src/core/layout.cc", "cache/block_index.h", "private-header"),
    ("src/host/host_tier.cc", "disk/disk_tier_impl.h", "private-header"),
    ("src/host/host_arena.h", "kvtier/disk_tier.h", "direction"),
    ("src/pool/planted_layers.cc", "kvtier/tiered_cache.h", "direction"),
    ("include/kvtier/status.h", "core/mutex.h", "public-includes-private"),
    ("include/kvtier/layout.h", "kvtier/disk_tier.h", "direction"),
    ("src/disk/capacity.cc", "testing/memory_env.h", "testing-is-test-only"),
    ("tools/cmd_ls.cc", "engine/model.h", "private-header"),
    ("tools/cmd_ls.cc", "disk/folder_layout.h", "private-header"),
    ("src/replay/simulator.cc", "engine/demo.h", "direction"),
    ("src/python/module.cc", "synth/block_generator.h", "public-only"),
    ("bench/host_bench.cc", "disk/folder_layout.h", "private-header"),
    ("tests/dashboard_test.cc", "disk/disk_test_util.h", "private-header"),
    ("tests/planted_test.cc", "cache/block_index.h", "private-header"),
]

# Includes the rules allow, planted all at once into the clean copy.
ALLOWED = [
    ("src/disk/disk_index_test.cc", "disk/folder_layout.h"),  # own tests
    ("src/pool/paged_pool_test.cc", "testing/memory_env.h"),  # tests use testing
    ("src/core/block_key_test.cc", "synth/block_generator.h"),  # ... and synth
    ("src/cache/cache_core.cc", "core/mutex.h"),  # core's base
    ("tests/disk_planted_test.cc", "disk/folder_layout.h"),  # tests/disk_* test the disk
    ("bench/index_bench.cc", "cache/block_index.h"),  # its BENCH_SUBJECTS entry
    ("tools/cmd_ls.cc", "replay/trace_reader.h"),  # replay's interface
    ("src/capi/kvtier_c.cc", "bindings/cache_spec.h"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", help="ignored (ctest passes the kvtier binary to every python test)")
    ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="check-layers-") as tmp:
        clean = os.path.join(tmp, "clean")
        copy_sources(clean)
        rc, out, err = run(clean)
        check(rc == 0, f"clean copy: exit {rc}, want 0\n{out}{err}")
        check("OK" in out, f"clean copy: no OK line\n{out}")

        allowed = os.path.join(tmp, "allowed")
        shutil.copytree(clean, allowed)
        for rel, inc in ALLOWED:
            plant(allowed, rel, inc)
        rc, out, err = run(allowed)
        check(rc == 0, f"allowed includes: exit {rc}, want 0\n{out}{err}")

        for i, (rel, inc, rule) in enumerate(CASES):
            case = os.path.join(tmp, f"case{i}")
            shutil.copytree(clean, case)
            lineno = plant(case, rel, inc)
            rc, out, err = run(case)
            where = f"{rel}:{lineno}: {rule}:"
            check(rc == 1, f'{rel} including "{inc}": exit {rc}, want 1\n{out}{err}')
            lines = out.strip().split("\n") if out.strip() else []
            check(len(lines) == 1 and lines[0].startswith(where) and inc in lines[0],
                  f'{rel} including "{inc}": want one line starting "{where}", got\n{out}')
            shutil.rmtree(case)

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
