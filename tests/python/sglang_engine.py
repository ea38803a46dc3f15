"""examples/python/chat_engine.py's model served the way SGLang's HiCache does
it, through kvtier.integrations.sglang, for test_sglang_engine.py.

The engine's K/V pages live in a page_first MHA host pool laid out as
SGLang's (sglang_fakes.MHAPool). Per request, as SGLang's controller: the
page hashes of the prompt, batch_exists (prefetch thread), batch_get_v1 into
host pages (prefetch-io thread), the engine's K/V filled from those host
pages, the rest computed, and the new full pages written to host pages and
batch_set_v1 (backup thread) with the cached prefix as prefix_keys.

    python3 tests/python/sglang_engine.py FOLDER CHAT...   # serve, print one line each
"""

import hashlib
import importlib.util
import os
import sys

import numpy as np
import torch

import sglang_fakes as fakes

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "python",
                       "chat_engine.py")
PAGE = 16


def example():
    spec = importlib.util.spec_from_file_location("chat_engine", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_hashes(tokens):
    """SGLang-style page keys: a SHA-256 hex chain over each full page's token ids."""
    out, prior = [], b""
    for i in range(0, len(tokens) - len(tokens) % PAGE, PAGE):
        h = hashlib.sha256(prior)
        for t in tokens[i:i + PAGE]:
            h.update(int(t).to_bytes(4, "little"))
        out.append(h.hexdigest())
        prior = bytes.fromhex(out[-1])
    return out


def prompt_of(ce, chat):
    system = "<system>" + ce.SYSTEM[:len(ce.SYSTEM) // 3] + "</system>"
    return ce.encode(system + "<user>" + ce.CHATS[chat][0] + "</user><assistant>")


class SglangServer:
    """The numpy model behind SGLang's host pool and storage backend."""

    def __init__(self, ce, folder, monkeypatch=None):
        self.ce, self.model = ce, ce.Model()
        self.bt = PAGE  # what chat_engine's logits_without_cache reads (with max_tokens)
        m = self.model
        self.pool = fakes.MHAPool(pages=128, page_size=PAGE, layers=m.layers, heads=m.kv_heads,
                                  head_dim=m.head_dim, dtype=torch.float16, layout="page_first")
        self.storage, _ = fakes.install(monkeypatch)
        config = fakes.make_config(self.storage, {
            "backend_name": "kvtier", "module_path": "kvtier.integrations.sglang",
            "class_name": "KvtierHiCacheStorage", "interface_v1": 1, "disk_dir": folder,
            "host_bytes": 1 << 20}, model_name="numpy-llama-seed1")
        self.backend = fakes.create_dynamic(self.storage, config, self.pool)

    def _to_kv(self, kv, pages):
        """Host pages 0..pages-1 (page_first: [token, layer, head, dim]) into the engine's K/V."""
        n = pages * PAGE
        for layer in range(self.model.layers):
            for part, (k16, k32) in enumerate(((kv.k16, kv.k32), (kv.v16, kv.v32))):
                host = self.pool.kv_buffer[part, :n, layer].numpy()  # [n, heads, dim]
                k16[layer, :, :n] = host.transpose(1, 0, 2)
                k32[layer, :, :n] = k16[layer, :, :n]

    def _from_kv(self, kv, first, last):
        """The engine's K/V of pages first..last-1 into the same host pages."""
        span = slice(first * PAGE, last * PAGE)
        for layer in range(self.model.layers):
            for part, k16 in enumerate((kv.k16, kv.v16)):
                self.pool.kv_buffer[part, span, layer] = torch.from_numpy(
                    np.ascontiguousarray(k16[layer, :, span].transpose(1, 0, 2)))

    def serve(self, prompt, new_tokens=4):
        ce, b = self.ce, self.backend
        kv = ce.KV(self.model, 4096, PAGE)
        keys = page_hashes(prompt)
        reusable = (len(prompt) - 1) // PAGE  # the last token is always computed
        hit = b.batch_exists(keys[:reusable], self.storage.HiCacheStorageExtraInfo())
        got = b.batch_get_v1(keys[:hit], fakes_indices(hit))
        loaded = got.index(False) if False in got else len(got)
        self._to_kv(kv, loaded)
        for pos in range(loaded * PAGE, len(prompt)):
            logits = self.model.step(kv, prompt[pos], pos)
        prompt_logits, tokens = logits, list(prompt)
        for _ in range(new_tokens):
            tokens.append(int(np.argmax(logits)))
            logits = self.model.step(kv, tokens[-1], len(tokens) - 1)
        all_keys = page_hashes(tokens)
        self._from_kv(kv, loaded, len(all_keys))
        info = self.storage.HiCacheStorageExtraInfo(prefix_keys=all_keys[:loaded] or None)
        stored = b.batch_set_v1(all_keys[loaded:], fakes_indices(len(all_keys), loaded), info)
        assert stored == [True] * (len(all_keys) - loaded), stored
        same = np.array_equal(prompt_logits.view(np.uint32),
                              ce.Engine.logits_without_cache(self, prompt).view(np.uint32))
        return dict(reused=loaded * PAGE, computed=len(prompt) - loaded * PAGE, same=same,
                    hits_disk=b.kvtier_stats()["hits_disk"])

    max_tokens = 4096  # for Engine.logits_without_cache(self, ...)

    def close(self):
        self.backend.close()


def fakes_indices(end, first=0):
    return torch.arange(first * PAGE, end * PAGE, dtype=torch.int64)


def main(argv):
    folder, chats = argv[0], [int(c) for c in argv[1:]]
    server = SglangServer(example(), folder)
    try:
        for chat in chats:
            r = server.serve(prompt_of(server.ce, chat))
            print("chat %d reused %d computed %d hits_disk %d %s" % (
                chat, r["reused"], r["computed"], r["hits_disk"],
                "identical" if r["same"] else "DIFFERENT"))
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
