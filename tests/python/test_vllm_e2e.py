"""End to end on CPU: examples/python/chat_engine.py's model served through
the vLLM backend's manager and handler (tests/python/vllm_chat.py drives the
OffloadingConnector's calls), across restarts and across processes (two of
them at once on one folder): the blocks one process stored are reused by the
next ones, the number reused is
exactly the longest stored prefix, and every request's logits equal those
computed without any cache, bit for bit.
"""

import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 16


def start(folder, state, turns, chats="0,1,2", seed="0"):
    env = dict(os.environ, PYTHONHASHSEED=seed)
    return subprocess.Popen([sys.executable, os.path.join(HERE, "vllm_chat.py"), "--dir",
                             folder, "--turns", turns, "--state", state, "--chats", chats],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(proc):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines()]


def run(*args, **kw):
    return finish(start(*args, **kw))


def doc_table():
    """docs/vllm.md's per-request table: (chat, turn, prompt, reused, stored,
    logits) per row, in order."""
    path = os.path.join(HERE, "..", "..", "docs", "vllm.md")
    text = open(path, encoding="utf-8").read()
    block = text[text.index("    chat turn prompt reused stored"):]
    block = block[:block.index("\n\n")]
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\w+)$", block, re.M)
    return [tuple(int(v) for v in r[:5]) + (r[5],) for r in rows]


def expected_reuse(requests, stored):
    """Per request, the longest prefix of whole blocks (the last prompt token
    excluded) that an earlier request stored; updates `stored`."""
    want = []
    for r in requests:
        prompt, tokens = r["prompt"], r["prompt"] + r["reply"]
        reusable = (len(prompt) - 1) // BLOCK
        k = 0
        while k < reusable and tuple(prompt[:BLOCK * (k + 1)]) in stored:
            k += 1
        want.append(k)
        for b in range(len(tokens) // BLOCK):
            stored.add(tuple(tokens[:BLOCK * (b + 1)]))
    return want


def test_reuse_across_a_restart_and_processes_bit_for_bit(tmp_path):
    folder, state = str(tmp_path / "kv"), str(tmp_path / "state.json")
    first = run(folder, state, "0,1")  # process 1: two turns of three chats
    # Processes 2 and 3 at once (restarts: empty RAM), then 4: the third turn.
    states = [str(tmp_path / ("state%d.json" % i)) for i in range(3)]
    for path in states:
        shutil.copy(state, path)
    both = [start(folder, states[0], "2", chats="0"), start(folder, states[1], "2", chats="1")]
    second = finish(both[0]) + finish(both[1]) + run(folder, states[2], "2", chats="2")
    stored = set()
    assert [r["reused"] for r in first] == expected_reuse(first, stored)
    assert [r["reused"] for r in second] == expected_reuse(second, stored)
    assert all(r["identical"] and r["failed_jobs"] == [] for r in first + second)
    assert first[0]["reused"] == 0 and min(r["reused"] for r in first[1:]) > 0
    # Those started with empty RAM: what they reuse came from process 1, by disk.
    assert min(r["reused"] for r in second) > 0
    # docs/vllm.md shows these very rows (the runs are deterministic).
    got = [(r["chat"], r["turn"], len(r["prompt"]), r["reused"], r["stored"],
            "identical" if r["identical"] else "differ") for r in first + second]
    assert got == doc_table()
    # A third process with another PYTHONHASHSEED computes other block hashes:
    # it reuses nothing (and is still exact).
    other = run(folder, str(tmp_path / "other.json"), "0", chats="0", seed="1")
    assert [r["reused"] for r in other] == [0] and other[0]["identical"]
