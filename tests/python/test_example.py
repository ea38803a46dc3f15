"""examples/python/chat_engine.py: a numpy engine serving chats through kvtier,
with a restart in the middle; every request's logits equal the no-cache ones,
for the default model and for --model hybrid."""

import os
import re
import subprocess
import sys

import pytest

ROW = re.compile(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) \(\s*(\d+)/\s*(\d+)\)\s+(\d+)\s+(\S+)$")


def doc_output(source_dir, model):
    """The output docs/python.md shows for `model`: its indented lines."""
    text = open(os.path.join(source_dir, "docs", "python.md"), encoding="utf-8").read()
    intro = ("(dev build, `/usr/bin/python3 examples/python/chat_engine.py`):" if model == "default"
             else "Same run, `--model hybrid` (dev build):")
    block = text[text.index(intro) + len(intro):].lstrip("\n")
    block = block[:block.index("\n\n")]
    return [line[4:] for line in block.splitlines()]


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
    rows = [ROW.match(line) for line in lines]
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
    # docs/python.md shows this output: every line of it for the default
    # model, the first and the last two for hybrid ("..." between), equal
    # but for the temporary folder's name. (1229907's page showed requests
    # 5 and 6 of the default model served from RAM, 260/188 blocks in all;
    # they come from disk, 156/292.)
    doc = doc_output(source_dir, model)
    if model == "hybrid":
        assert doc[1] == "..."
        doc, lines = [doc[0]] + doc[2:], [lines[0]] + lines[-2:]
    folder = re.compile(r"(reopened from) \S+( ---)$")
    assert [folder.sub(r"\1 D\2", x) for x in lines] == [folder.sub(r"\1 D\2", x) for x in doc]
