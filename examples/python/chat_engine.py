#!/usr/bin/python3
"""A small Llama-style engine in numpy that keeps its KV cache in kvtier.

The model (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU,
tied embedding/head; byte tokens) has random weights drawn from a seed: it
says nothing sensible, but its logits depend on every K/V byte, so a wrong
cached block would show. Several chats share a system prompt. For each
request the engine asks kvtier how many leading blocks of the prompt it
already has (in RAM or on disk, also from before a restart), loads those
K/V instead of computing them, computes the rest, and stores the blocks it
filled. Half way the engine and the cache are closed and reopened from the
disk folder (a restart). Every request is also run without the cache, and
the logits of its last prompt token are compared bit for bit.

With --model hybrid the layers cycle through full attention, sliding-window
attention (the last --window tokens) and gated linear attention, whose
cache is not K/V but one recurrent state per layer, S [kv_heads, head_dim,
head_dim] in float32 (S = g * S + k v^T, o = q S, g a decay in (0.55,
0.95)): each block holds the state after its last token, and a prefix of n
cached blocks resumes from block n's state alone (docs/layouts.md).

    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/chat_engine.py \
        [--dir D] [--model hybrid]

Prints one line per request and exits 0 iff every request's logits were
identical with and without the cache.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

import kvtier


ATTENTION, SLIDING, LINEAR = "attention", "sliding", "linear"


class Model:
    """Weights and the per-token forward pass. Math in float32; K and V are
    rounded to float16 when written, so a token sees the same K/V whether
    they were computed now or loaded from the cache. A linear layer's state
    stays float32, so a resumed state is the computed one."""

    def __init__(self, seed=1, layers=4, heads=4, kv_heads=2, head_dim=32, hidden=128, ffn=384,
                 vocab=256, max_tokens=4096, mixers=None, window=48):
        self.layers, self.heads, self.kv_heads, self.head_dim = layers, heads, kv_heads, head_dim
        self.hidden, self.vocab = hidden, vocab
        self.mixers = list(mixers) if mixers else [ATTENTION] * layers
        assert len(self.mixers) == layers and any(m != LINEAR for m in self.mixers)
        self.window = window
        rng = np.random.default_rng(seed)

        def w(*shape):
            return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

        self.embed = w(vocab, hidden)
        self.blocks = [dict(attn_norm=np.ones(hidden, np.float32), wq=w(heads * head_dim, hidden),
                            wk=w(kv_heads * head_dim, hidden), wv=w(kv_heads * head_dim, hidden),
                            wo=w(hidden, heads * head_dim), mlp_norm=np.ones(hidden, np.float32),
                            w_gate=w(ffn, hidden), w_up=w(ffn, hidden), w_down=w(hidden, ffn))
                       for _ in range(layers)]
        for b, mixer in zip(self.blocks, self.mixers):
            if mixer == LINEAR:
                b["w_decay"] = w(kv_heads, hidden)
        self.final_norm = np.ones(hidden, np.float32)
        inv = 1.0 / (10000.0 ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
        angles = np.arange(max_tokens, dtype=np.float64)[:, None] * inv[None, :]
        self.cos = np.cos(angles).astype(np.float32)
        self.sin = np.sin(angles).astype(np.float32)

    def kv_layout(self, block_tokens):
        """The kvtier layout of one block: per attention or sliding layer K and V
        [kv_heads, block, head_dim], F16; per linear layer its state after the
        block's last token, [kv_heads, head_dim, head_dim] F32 (no "T": its size
        does not depend on the block)."""
        if all(m == ATTENTION for m in self.mixers):
            return kvtier.Layout.attention("numpy-llama", self.layers, self.kv_heads,
                                           self.head_dim, "F16", block_tokens)
        kv_shape = [self.kv_heads, "T", self.head_dim]
        layers = []
        for mixer in self.mixers:
            if mixer == LINEAR:
                layers.append({"cache_type": "linear_attention", "states": [
                    {"role": "state", "dtype": "F32",
                     "shape": [self.kv_heads, self.head_dim, self.head_dim]}]})
                continue
            entry = {"cache_type": "attention" if mixer == ATTENTION else "sliding_window",
                     "states": [{"role": "keys", "dtype": "F16", "shape": kv_shape},
                                {"role": "values", "dtype": "F16", "shape": kv_shape}]}
            if mixer == SLIDING:  # in the signature: another window never reads these blocks
                entry["window"] = self.window
                entry["meta_state"] = ["window=%d" % self.window]
            layers.append(entry)
        return kvtier.Layout.from_json(json.dumps(
            {"name": "numpy-hybrid", "block_tokens": block_tokens, "layers": layers}))

    @staticmethod
    def _rms(x, weight):
        return x / np.sqrt(np.mean(x * x) + np.float32(1e-5)) * weight

    def _rope(self, x, pos):  # x: [n_heads, head_dim], rotating (even, odd) pairs
        c, s = self.cos[pos], self.sin[pos]
        out = np.empty_like(x)
        out[:, 0::2] = x[:, 0::2] * c - x[:, 1::2] * s
        out[:, 1::2] = x[:, 0::2] * s + x[:, 1::2] * c
        return out

    def _linear(self, kv, layer, b, h, pos):
        """Gated linear attention: S = g * S + k v^T per KV head, o = q S."""
        q = (b["wq"] @ h).reshape(self.heads, self.head_dim)
        k = (b["wk"] @ h).reshape(self.kv_heads, self.head_dim)
        k = k * np.float32(1.0 / np.sqrt(self.head_dim))
        v = (b["wv"] @ h).reshape(self.kv_heads, self.head_dim)
        a = b["w_decay"] @ h
        g = np.float32(0.75) + np.float32(0.2) * (a / (np.float32(1) + np.abs(a)))
        state = kv.state[layer]
        state *= g[:, None, None]
        state += k[:, :, None] * v[:, None, :]
        kv.wrote_state(layer, pos)
        group = self.heads // self.kv_heads
        return np.stack([q[head] @ state[head // group] for head in range(self.heads)])

    def step(self, kv, token, pos):
        """Runs token at position pos: writes its K/V (or a linear layer's
        state) into kv, returns logits."""
        x = self.embed[token].copy()
        group = self.heads // self.kv_heads
        scale = np.float32(1.0 / np.sqrt(self.head_dim))
        for layer, b in enumerate(self.blocks):
            h = self._rms(x, b["attn_norm"])
            if self.mixers[layer] == LINEAR:
                att = self._linear(kv, layer, b, h, pos)
                x = x + b["wo"] @ att.reshape(-1)
                h = self._rms(x, b["mlp_norm"])
                gate = b["w_gate"] @ h
                x = x + b["w_down"] @ (gate / (np.float32(1) + np.exp(-gate)) * (b["w_up"] @ h))
                continue
            q = self._rope((b["wq"] @ h).reshape(self.heads, self.head_dim), pos)
            k = self._rope((b["wk"] @ h).reshape(self.kv_heads, self.head_dim), pos)
            v = (b["wv"] @ h).reshape(self.kv_heads, self.head_dim)
            kv.write(layer, pos, k, v)
            keys, values = kv.view(layer, pos + 1)  # float32 copies of the float16 K/V
            if self.mixers[layer] == SLIDING:  # only the last `window` tokens
                first = max(0, pos + 1 - self.window)
                keys, values = keys[:, first:], values[:, first:]
            att = np.empty((self.heads, self.head_dim), np.float32)
            for head in range(self.heads):
                g = head // group
                scores = keys[g] @ q[head] * scale
                e = np.exp(scores - scores.max())
                att[head] = (e / e.sum()) @ values[g]
            x = x + b["wo"] @ att.reshape(-1)
            h = self._rms(x, b["mlp_norm"])
            gate = b["w_gate"] @ h
            x = x + b["w_down"] @ (gate / (np.float32(1) + np.exp(-gate)) * (b["w_up"] @ h))
        return self.embed @ self._rms(x, self.final_norm)


class KV:
    """One sequence's cache: K/V float16 as stored (and cached), float32 for
    the math; a linear layer's live state and its snapshot after each full
    block (what that block stores)."""

    def __init__(self, model, capacity, block_tokens):
        shape = (model.layers, model.kv_heads, capacity, model.head_dim)
        self.k16, self.v16 = np.zeros(shape, np.float16), np.zeros(shape, np.float16)
        self.k32, self.v32 = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        self.mixers, self.bt = model.mixers, block_tokens
        state_shape = (model.kv_heads, model.head_dim, model.head_dim)
        self.state = {layer: np.zeros(state_shape, np.float32)
                      for layer, m in enumerate(self.mixers) if m == LINEAR}
        self.snapshots = {layer: {} for layer in self.state}  # layer -> {block: state}

    def wrote_state(self, layer, pos):
        if (pos + 1) % self.bt == 0:
            self.snapshots[layer][pos // self.bt] = self.state[layer].copy()

    def write(self, layer, pos, k, v):
        self.k16[layer, :, pos], self.v16[layer, :, pos] = k, v
        self.k32[layer, :, pos] = self.k16[layer, :, pos]
        self.v32[layer, :, pos] = self.v16[layer, :, pos]

    def view(self, layer, n):
        return self.k32[layer, :, :n], self.v32[layer, :, :n]

    def set_block(self, block, block_tokens, tensors):
        """Fills positions of `block` from a cached block's tensors (K, V per
        attention layer, the state per linear layer: loading blocks in order
        leaves each linear layer at the last one's state)."""
        span = slice(block * block_tokens, (block + 1) * block_tokens)
        tensors = iter(tensors)
        for layer, mixer in enumerate(self.mixers):
            if mixer == LINEAR:
                self.state[layer][...] = next(tensors)
                self.snapshots[layer][block] = self.state[layer].copy()
                continue
            self.k16[layer, :, span] = next(tensors)
            self.v16[layer, :, span] = next(tensors)
            self.k32[layer, :, span] = self.k16[layer, :, span]
            self.v32[layer, :, span] = self.v16[layer, :, span]

    def block_tensors(self, block, block_tokens):
        span = slice(block * block_tokens, (block + 1) * block_tokens)
        out = []
        for layer, mixer in enumerate(self.mixers):
            if mixer == LINEAR:
                out.append(self.snapshots[layer][block])
                continue
            out += [np.ascontiguousarray(self.k16[layer, :, span]),
                    np.ascontiguousarray(self.v16[layer, :, span])]
        return out


class Engine:
    """Serves prompts with a kvtier.Cache under the model's K/V."""

    def __init__(self, model, cache, model_id, max_tokens=4096):
        self.model, self.cache, self.layout = model, cache, cache.layout
        self.bt = self.layout.block_tokens
        self.chain = kvtier.KeyChain(model_id, self.layout)
        self.max_tokens = max_tokens
        self.buf = np.empty(self.layout.max_file_bytes, np.uint8)  # one load at a time

    def _load_prefix(self, kv, keys, limit):
        """Loads up to `limit` leading blocks into kv; returns (blocks, from RAM, from disk)."""
        before = self.cache.stats()
        loaded = 0
        for key in keys[:min(self.cache.match(keys), limit)]:
            n = self.cache.load_into(key, self.buf)
            if n == 0:  # gone since match() (evicted by another process): compute it
                break
            kv.set_block(loaded, self.bt, kvtier.decode_block(self.buf[:n], self.layout, key))
            loaded += 1
        after = self.cache.stats()
        return loaded, after["hits_host"] - before["hits_host"], \
            after["hits_disk"] - before["hits_disk"]

    def serve(self, prompt, new_tokens):
        """Prefill (reusing cached blocks) and greedy decode. Returns a dict."""
        kv = KV(self.model, self.max_tokens, self.bt)
        keys = self.chain.keys(prompt)
        # The last prompt token is always computed: its logits are the answer.
        reusable = (len(prompt) - 1) // self.bt
        blocks, ram, disk = self._load_prefix(kv, keys, reusable)
        start = blocks * self.bt
        for pos in range(start, len(prompt)):
            logits = self.model.step(kv, prompt[pos], pos)
        prompt_logits = logits
        tokens = list(prompt)
        for _ in range(new_tokens):
            tokens.append(int(np.argmax(logits)))
            logits = self.model.step(kv, tokens[-1], len(tokens) - 1)
        # Store the full blocks this request computed (their K/V are final).
        all_keys = self.chain.keys(tokens)
        for b in range(max(blocks, self.cache.match(all_keys)), len(all_keys)):
            parent = all_keys[b - 1] if b else self.chain.namespace
            self.cache.store_tensors(all_keys[b], parent, self.chain.namespace,
                                     kv.block_tensors(b, self.bt))
        return dict(reused=start, ram_blocks=ram, disk_blocks=disk,
                    computed=len(prompt) - start, logits=prompt_logits,
                    reply=tokens[len(prompt):])

    def logits_without_cache(self, prompt):
        kv = KV(self.model, self.max_tokens, self.bt)
        for pos, token in enumerate(prompt):
            logits = self.model.step(kv, token, pos)
        return logits


SYSTEM = ("You are kvtier's demo assistant. You answer questions about caches, disks and "
          "memory in short sentences. Every conversation starts with this same system prompt, "
          "so its key-value cache is computed once and then reused from RAM or from disk, also "
          "after the engine restarts. ") * 3

CHATS = [
    ["What is a KV cache?", "Why keep it on disk?", "And after a restart?"],
    ["How big is one block?", "Who reads it back?", "Is it checked?"],
    ["Can two processes share a folder?", "What if a file is corrupt?", "Thanks."],
]


def encode(text):
    return list(text.encode())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="cache folder (default: a temporary one, removed at exit)")
    parser.add_argument("--block-tokens", type=int, default=16)
    parser.add_argument("--host-bytes", type=int, default=0,
                        help="RAM tier budget (default 64 blocks, 1 MiB for the default model: "
                             "small, so that older blocks go to disk)")
    parser.add_argument("--new-tokens", type=int, default=8, help="tokens generated per reply")
    parser.add_argument("--model", choices=("default", "hybrid"), default="default",
                        help="hybrid: 6 layers cycling attention, sliding window, linear")
    parser.add_argument("--window", type=int, default=48,
                        help="the sliding layers' window in tokens (--model hybrid)")
    args = parser.parse_args(argv)

    folder = args.dir or tempfile.mkdtemp(prefix="kvtier-chat-")
    if args.model == "hybrid":
        model = Model(layers=6, mixers=[ATTENTION, SLIDING, LINEAR] * 2, window=args.window)
        model_id = "numpy-hybrid-seed1-window%d" % args.window
    else:
        model, model_id = Model(), "numpy-llama-seed1"
    print("model: %s" % ", ".join(
        m + (" %d" % model.window if m == SLIDING else "") for m in model.mixers))
    layout = model.kv_layout(args.block_tokens)
    args.host_bytes = args.host_bytes or 64 * layout.block_bytes
    histories = [encode("<system>" + SYSTEM + "</system>") for _ in CHATS]
    cache = kvtier.Cache(layout, host_bytes=args.host_bytes, disk_dir=folder)
    engine = Engine(model, cache, model_id)
    all_identical = True
    totals = dict(reused=0, computed=0, ram_blocks=0, disk_blocks=0)
    request = 0
    print("req chat turn  prompt  reused (RAM/disk blocks)  computed  logits vs no cache")
    try:
        for turn in range(3):
            if turn == 2:  # restart: drop everything in memory, keep the folder
                cache.close()
                cache = kvtier.Cache(layout, host_bytes=args.host_bytes, disk_dir=folder)
                engine = Engine(model, cache, model_id)
                print("--- restart: engine and cache closed and reopened from %s ---" % folder)
            for chat, messages in enumerate(CHATS):
                prompt = histories[chat] + encode("<user>" + messages[turn] + "</user><assistant>")
                r = engine.serve(prompt, args.new_tokens)
                same = np.array_equal(r["logits"].view(np.uint32),
                                      engine.logits_without_cache(prompt).view(np.uint32))
                all_identical &= same
                request += 1
                for name in totals:
                    totals[name] += r[name]
                print("%3d %4d %4d  %6d  %6d (%3d/%3d)          %8d  %s" % (
                    request, chat, turn + 1, len(prompt), r["reused"], r["ram_blocks"],
                    r["disk_blocks"], r["computed"], "identical" if same else "DIFFERENT"))
                histories[chat] = prompt + r["reply"] + encode("</assistant>")
    finally:
        cache.close()
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)
    print("requests %d: prompt tokens reused %d, computed %d; blocks from RAM %d, from disk %d"
          % (request, totals["reused"], totals["computed"], totals["ram_blocks"],
             totals["disk_blocks"]))
    print("logits with the cache vs without: %s" % (
        "identical, bit for bit, in every request" if all_identical else "DIFFERENT"))
    return 0 if all_identical else 1


if __name__ == "__main__":
    sys.exit(main())
