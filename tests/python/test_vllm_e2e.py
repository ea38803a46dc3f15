"""End to end on CPU: examples/python/chat_engine.py's model served through
the vLLM backend's manager and handler (tests/python/vllm_chat.py drives the
OffloadingConnector's calls), across a restart and across processes: the
blocks one process stored are reused by the next, the number reused is
exactly the longest stored prefix, and every request's logits equal those
computed without any cache, bit for bit.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 16


def run(folder, state, turns, chats="0,1,2", seed="0"):
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run([sys.executable, os.path.join(HERE, "vllm_chat.py"), "--dir", folder,
                          "--turns", turns, "--state", state, "--chats", chats],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


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
    second = run(folder, state, "2")   # process 2 (a restart): the third turn, from disk
    stored = set()
    assert [r["reused"] for r in first] == expected_reuse(first, stored)
    assert [r["reused"] for r in second] == expected_reuse(second, stored)
    assert all(r["identical"] and r["failed_jobs"] == [] for r in first + second)
    assert first[0]["reused"] == 0 and min(r["reused"] for r in first[1:]) > 0
    # Process 2 started with empty RAM: what it reuses came from process 1, by disk.
    assert min(r["reused"] for r in second) > 0
    # A third process with another PYTHONHASHSEED computes other block hashes:
    # it reuses nothing (and is still exact).
    other = run(folder, str(tmp_path / "other.json"), "0", chats="0", seed="1")
    assert [r["reused"] for r in other] == [0] and other[0]["identical"]
