"""examples/python/chat_engine.py's model served the way vLLM serves it with
the kvtier offloading backend: K/V live in GPU-style block tensors (torch,
vLLM's FlashAttention shape), vLLM's block hashes name the blocks, and the
OffloadingConnector's calls (vllm_harness.Connector) move blocks between the
"GPU" and kvtier. Used by test_vllm_e2e.py, one process per run:

    PYTHONHASHSEED=0 python3 vllm_chat.py --dir D --turns 0,1 --state S

serves the turns of every chat of chat_engine.CHATS (continuing from state S
if it exists, writing it back), prints one JSON line per request (prompt,
reply, blocks reused, whether the logits equal those computed without any
cache, bit for bit) and exits 0.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python"))
sys.path.insert(0, HERE)

import chat_engine  # noqa: E402
import vllm_harness as vh  # noqa: E402

BLOCK = 16
NUM_BLOCKS = 4096 // BLOCK


class VllmStyleEngine:
    def __init__(self, folder, host_bytes):
        self.model = chat_engine.Model()
        m = self.model
        kvcc = vh.kv_cache_config(m.layers, NUM_BLOCKS, BLOCK, m.kv_heads, m.head_dim,
                                  torch.float16)
        extra = {"spec_name": "KvtierOffloadingSpec",
                 "spec_module_path": "kvtier.integrations.vllm",
                 "disk_dir": folder, "host_bytes": host_bytes}
        config = vh.vllm_config(extra, block_size=BLOCK, model="numpy-llama-seed1")
        spec = vh.OffloadingSpecFactory.create_spec(config, kvcc)
        self.layers = kvcc.kv_cache_groups[0].layer_names
        self.gpu = {name: torch.zeros((2, NUM_BLOCKS, BLOCK, m.kv_heads, m.head_dim),
                                      dtype=torch.float16) for name in self.layers}
        self.conn = vh.Connector(spec, self.gpu)

    def _gpu_to_kv(self, kv, block, block_id):
        tensors = []
        for name in self.layers:
            for side in (0, 1):  # (BLOCK, heads, dim) -> (heads, BLOCK, dim)
                tensors.append(self.gpu[name][side, block_id].numpy().transpose(1, 0, 2))
        kv.set_block(block, BLOCK, tensors)

    def _kv_to_gpu(self, kv, block, block_id):
        tensors = kv.block_tensors(block, BLOCK)
        for layer, name in enumerate(self.layers):
            for side in (0, 1):
                t = tensors[2 * layer + side].transpose(1, 0, 2)
                self.gpu[name][side, block_id] = torch.from_numpy(np.ascontiguousarray(t))

    def serve(self, prompt, new_tokens):
        m = self.model
        kv = chat_engine.KV(m, 4096, BLOCK)
        reusable = (len(prompt) - 1) // BLOCK  # the last prompt token is always computed
        hashes = vh.block_hashes(prompt, BLOCK)[:reusable]
        block_ids = list(range(NUM_BLOCKS))  # one request at a time: all blocks are its
        start, hits = self.conn.matched_blocks(hashes)
        if hits:
            assert self.conn.load(hashes, start, hits, block_ids), "load job failed"
            for b in range(hits):
                self._gpu_to_kv(kv, b, block_ids[b])
        for pos in range(hits * BLOCK, len(prompt)):
            logits = m.step(kv, prompt[pos], pos)
        prompt_logits = logits
        tokens = list(prompt)
        for _ in range(new_tokens):
            tokens.append(int(np.argmax(logits)))
            logits = m.step(kv, tokens[-1], len(tokens) - 1)
        full = len(tokens) // BLOCK
        for b in range(hits, full):
            self._kv_to_gpu(kv, b, block_ids[b])
        all_hashes = vh.block_hashes(tokens, BLOCK)
        stored = self.conn.store(all_hashes, hits, block_ids)
        same = np.array_equal(prompt_logits.view(np.uint32), self._plain_logits(prompt))
        return dict(prompt=prompt, reply=tokens[len(prompt):], reused=hits, stored=stored,
                    identical=bool(same))

    def _plain_logits(self, prompt):
        kv = chat_engine.KV(self.model, 4096, BLOCK)
        for pos, token in enumerate(prompt):
            logits = self.model.step(kv, token, pos)
        return logits.view(np.uint32)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--turns", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--chats", default="0,1,2")
    parser.add_argument("--host-bytes", type=int, default=1 << 20)
    args = parser.parse_args(argv)
    vh.install_fake_vllm()
    engine = VllmStyleEngine(args.dir, args.host_bytes)
    chats = [int(c) for c in args.chats.split(",")]
    if os.path.exists(args.state):
        with open(args.state) as f:
            histories = {int(k): v for k, v in json.load(f).items()}
    else:
        histories = {c: chat_engine.encode("<system>" + chat_engine.SYSTEM + "</system>")
                     for c in chats}
    for turn in (int(t) for t in args.turns.split(",")):
        for chat in chats:
            text = "<user>" + chat_engine.CHATS[chat][turn] + "</user><assistant>"
            prompt = histories[chat] + chat_engine.encode(text)
            r = engine.serve(prompt, 8)
            r.update(chat=chat, turn=turn, failed_jobs=engine.conn.failed)
            print(json.dumps(r), flush=True)
            histories[chat] = prompt + r["reply"] + chat_engine.encode("</assistant>")
    with open(args.state, "w") as f:
        json.dump(histories, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
