"""examples/python/chat_engine.py's model served through the SGLang backend
(sglang_engine.py: page_first host pool, the controller's calls): pages reused
across two processes and across a restart, logits identical bit for bit to a
run without any cache."""

import os
import re
import subprocess
import sys

import sglang_engine


def test_reuse_across_processes_and_restart(tmp_path, monkeypatch):
    folder = str(tmp_path / "kvtier")
    here = os.path.dirname(os.path.abspath(__file__))
    # Process 1 serves chats 0 and 1 (chat 1 reuses chat 0's system prompt pages).
    out = subprocess.run([sys.executable, os.path.join(here, "sglang_engine.py"), folder, "0", "1"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [re.match(r"chat (\d) reused (\d+) computed (\d+) hits_disk (\d+) (\S+)$", line)
             for line in out.stdout.splitlines()]
    child = [(int(m[1]), int(m[2]), int(m[3]), int(m[4]), m[5]) for m in lines if m]
    assert [c[0] for c in child] == [0, 1] and all(c[4] == "identical" for c in child)
    assert child[0][1] == 0 and child[1][1] > 0 and child[1][3] == 0  # RAM of process 1

    # This process: another process on the same folder, then a restart.
    ce = sglang_engine.example()
    server = sglang_engine.SglangServer(ce, folder, monkeypatch)
    again = server.serve(sglang_engine.prompt_of(ce, 0))
    prompt = len(sglang_engine.prompt_of(ce, 0))
    assert again["same"]
    assert again["reused"] == (prompt - 1) // 16 * 16  # every full page from process 1's disk
    assert again["hits_disk"] == (prompt - 1) // 16
    other = server.serve(sglang_engine.prompt_of(ce, 2))  # chat 2: the shared system prompt
    assert other["same"] and other["reused"] == child[1][1]
    server.close()
    restarted = sglang_engine.SglangServer(ce, folder, monkeypatch)
    r = restarted.serve(sglang_engine.prompt_of(ce, 2))
    assert r["same"] and r["reused"] == (len(sglang_engine.prompt_of(ce, 2)) - 1) // 16 * 16
    assert r["hits_disk"] == r["reused"] // 16
    restarted.close()
