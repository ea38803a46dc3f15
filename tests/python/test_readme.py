"""The README's Python and C examples, run as written: the Python one stores a
block, then the C one (compiled with -Wall -Wextra -Werror against
libkvtier_c.so) finds it in the same folder."""

import os
import re
import shlex
import socket
import subprocess
import sys
import time

import pytest


def readme_block(source_dir, heading, lang):
    text = open(os.path.join(source_dir, "README.md")).read()
    section = text[text.index(heading):]
    match = re.search(r"```%s\n(.*?)```" % lang, section, re.S)
    assert match, "no %s block under %s" % (lang, heading)
    return match.group(1)


def test_readme_python_then_c(source_dir, tmp_path):
    python = readme_block(source_dir, "## Using kvtier from Python", "python")
    assert len([l for l in python.splitlines() if l.strip()]) <= 8
    subprocess.run([sys.executable, "-c", python], cwd=tmp_path, check=True)
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "kvtier-cache" / "blocks")
             for f in fs if f.endswith(".safetensors")]
    assert len(files) == 1  # the one block, written to disk when the cache closed

    c_source = tmp_path / "readme.c"
    c_source.write_text(readme_block(source_dir, "## Using kvtier from C", "c"))
    build = os.environ["KVTIER_BUILD_DIR"]
    cc = os.environ.get("KVTIER_C_COMPILER") or "cc"
    sanitize = os.environ.get("KVTIER_SANITIZE")
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(source_dir, "include"),
           str(c_source), "-o", str(tmp_path / "readme_c"), "-L", build, "-lkvtier_c",
           "-Wl,-rpath," + build]
    if sanitize:
        cmd.append("-fsanitize=" + sanitize)
    subprocess.run(cmd, check=True)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([str(tmp_path / "readme_c")], cwd=tmp_path, capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "1 of 4 blocks cached\nblock 0: %d bytes\n" % os.path.getsize(files[0])


def readme_demo_lines(text):
    """The README's "What the demo shows" output blocks, as lists of lines."""
    section = text[text.index("## What the demo shows"):text.index("## Using kvtier from an engine")]
    blocks, current = [], []
    for line in section.splitlines():
        if line.startswith("    "):
            current.append(line[4:])
        elif current and line == "":
            continue
        elif current:
            blocks.append(current)
            current = []
    return blocks + [current] if current else blocks


DEMO_ROW = re.compile(r"^\s*\d+\s+\d+\s+\d+\s+\d+\s+(\d+)\s+\S+\s+(\d+)\s+(\d+)\s+(\d+)\s+"
                      r"(\d+)\s+(\d+)\s.*\s(identical|DIFFER)$")


@pytest.mark.parametrize("model", ["default", "hybrid"])
def test_readme_demo_output_is_the_demos(source_dir, cli, redis_url, tmp_path, model):
    """The README's demo figures, from a live run of the full demo with
    --remote (issue 33 item 12; the default's second-host count had drifted
    to the hybrid model's 449): the --remote lines the page shows are printed
    verbatim, and the page's requests line without --remote is the sum of the
    first host's 12 rows (the remote tier sits below disk, so the first host
    reads nothing from it and serves as a run without --remote does). Timing
    lines are measured, not determined: not checked."""
    readme = open(os.path.join(source_dir, "README.md")).read()
    default, default_remote, hybrid = readme_demo_lines(readme)
    if model == "default":
        plain = default
        remote = [l for l in default_remote if not l.startswith("time to first token")]
        args = []
    else:
        plain = hybrid[1:]
        second = next(i for i, l in enumerate(hybrid) if l.startswith("second host: "))
        remote = hybrid[second:second + 2]
        args = ["--model", "hybrid"]
    assert plain[0].startswith("requests 12: ") and remote[-1].startswith("logits"), (plain, remote)
    prefix = "readme-demo-%d-%d:" % (os.getpid(), time.monotonic_ns())
    out = subprocess.run([cli, "demo", "--quiet", "--dir", str(tmp_path / "demo"),
                          "--remote", redis_url, "--remote-prefix", prefix] + args,
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stdout + out.stderr
    printed = out.stdout.splitlines()
    for line in remote:
        assert line in printed, (line, out.stdout)

    first_host = out.stdout[:out.stdout.index("second host: empty RAM")]
    rows, restart = [], None
    for l in first_host.splitlines():
        if " restart " in l:
            restart = len(rows)  # rows[restart:] ran after the restart
        m = DEMO_ROW.match(l)
        if m:
            rows.append(m)
    assert [m.group(7) for m in rows] == ["identical"] * len(rows)
    reused, pool, host, disk, remote_blocks, computed = (
        sum(int(m.group(g)) for m in rows) for g in range(1, 7))
    assert restart is not None, out.stdout
    disk_after = sum(int(m.group(4)) for m in rows[restart:])
    assert remote_blocks == 0  # nothing from Redis on the first host
    line = ("requests %d: prompt tokens reused %d, computed %d; prefix blocks from pool %d, host %d, "
            "disk %d (%d after the restart)" % (len(rows), reused, computed, pool, host, disk,
                                                disk_after))
    assert line == plain[0], (line, out.stdout)
    assert plain[1].startswith("time to first token: ")
    assert plain[2] == "logits with the cache vs without: identical, bit for bit, in every request"


def test_readme_serve_then_two_processes(source_dir, tmp_path):
    """The `kvtier serve` section as written (the socket moved into tmp_path):
    the first process computes and stores the block, the second finds it in
    the arena (were its match 0, it would exit with "not in the arena") and
    loads the same bytes; SIGTERM then writes the block down to the disk
    folder, whose one file has the size both printed."""
    sock = str(tmp_path / "kvtier.sock")
    command = readme_block(source_dir, "## One RAM tier per host", "sh").strip()
    assert command.endswith("&")
    argv = shlex.split(command[:-1].replace("/tmp/kvtier.sock", sock))
    assert argv[0] == "kvtier"
    argv[0] = os.environ["KVTIER_CLI"]
    daemon = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert daemon.poll() is None, daemon.stderr.read()
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(sock)
                break
            except OSError:
                assert time.monotonic() < deadline, "kvtier serve did not listen in 120 s"
                time.sleep(0.02)
            finally:
                s.close()
        python = readme_block(source_dir, "## One RAM tier per host", "python")
        python = python.replace("/tmp/kvtier.sock", sock)
        # The second process must not compute: its match() finds the block.
        kv_line = "        kv = ["
        assert python.count(kv_line) == 1
        second = python.replace(kv_line, "        raise SystemExit('not in the arena')\n" + kv_line)
        printed = []
        for run, script in (("computes", python), ("finds", second)):
            out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, (run, out.stderr)
            printed.append(out.stdout)
        daemon.terminate()
        stdout, stderr = daemon.communicate(timeout=120)
        assert daemon.returncode == 0, stderr
        assert "wrote 1 blocks" in stdout, stdout
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "kvtier-cache" / "blocks")
             for f in fs if f.endswith(".safetensors")]
    assert len(files) == 1
    assert printed == ["%d bytes\n" % os.path.getsize(files[0])] * 2
