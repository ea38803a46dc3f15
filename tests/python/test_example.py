"""examples/python/chat_engine.py: a numpy engine serving chats through kvtier,
with a restart in the middle; every request's logits equal the no-cache ones,
for the default model and for --model hybrid."""

import os
import re
import subprocess
import sys

import pytest


@pytest.mark.parametrize("model", ["default", "hybrid"])
def test_chat_engine_example(source_dir, tmp_path, model):
    # hybrid: attention, sliding-window and gated linear attention layers;
    # a linear layer resumes from the last cached block's recurrent state.
    script = os.path.join(source_dir, "examples", "python", "chat_engine.py")
    out = subprocess.run([sys.executable, script, "--dir", str(tmp_path / "cache"),
                          "--model", model],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    rows = [re.match(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) \(\s*(\d+)/\s*(\d+)\)\s+(\d+)\s+(\S+)$",
                     line) for line in lines]
    rows = [tuple(int(g) if g.isdigit() else g for g in m.groups()) for m in rows if m]
    assert len(rows) == 9
    restart = next(i for i, line in enumerate(lines) if line.startswith("--- restart"))
    assert all(r[-1] == "identical" for r in rows)
    for req, chat, turn, prompt, reused, ram, disk, computed, _ in rows:
        assert reused + computed == prompt
        assert reused == (ram + disk) * 16
    before = [r for r in rows if r[2] < 3]
    after = [r for r in rows if r[2] == 3]
    assert before[0][4] == 0  # the first request computes everything
    assert all(r[4] > 0 for r in rows[1:])  # every later one reuses the system prompt
    assert sum(r[5] for r in before) > 0 and sum(r[6] for r in before) > 0  # RAM and disk
    assert all(r[5] == 0 and r[6] > 0 for r in after)  # after the restart: all from disk
    assert lines.index(next(l for l in lines if l.startswith("  7"))) > restart
    assert lines[-1] == "logits with the cache vs without: identical, bit for bit, in every request"
