"""Block keys from Python equal `kvtier key` (DESIGN.md §3)."""

import numpy as np
import pytest

import kvtier
from conftest import run_cli


SIG = kvtier.layout_signature("tiny")


def cli_keys(cli, model, signature, block_tokens, tokens, salt=None, adapter=None):
    args = ["key", "--model", model, "--signature", signature, "--block-tokens",
            str(block_tokens), "--tokens", ",".join(str(t) for t in tokens)]
    if salt is not None:
        args += ["--salt", salt]
    if adapter is not None:
        args += ["--adapter", adapter]
    out = run_cli(cli, *args)
    return out["namespace"], out["keys"]


@pytest.mark.parametrize("model,block_tokens,tokens,salt,adapter", [
    ("m", 4, list(range(10)), None, None),
    ("llama-3-8b", 16, [7] * 48, None, None),
    ("tenant-model", 3, [0, 4294967295, 5, 6, 7, 8], "tenant-a", None),
    ("adapted", 2, [9, 8, 7, 6, 5], None, "lora-1"),
    ("short", 8, [1, 2, 3], None, None),  # no full block: no keys
])
def test_keys_equal_cli(cli, model, block_tokens, tokens, salt, adapter):
    ns_hex, want = cli_keys(cli, model, SIG, block_tokens, tokens, salt, adapter)
    got = kvtier.block_keys(model, SIG, block_tokens, tokens,
                            salt=(salt or "").encode(), adapter=adapter or "")
    assert [k.hex() for k in got] == want
    assert all(isinstance(k, bytes) and len(k) == 32 for k in got)
    chain = kvtier.KeyChain(model, SIG, block_tokens, salt=(salt or "").encode(),
                            adapter=adapter or "")
    assert chain.namespace.hex() == ns_hex
    assert [k.hex() for k in chain.keys(tokens)] == want


def test_numpy_tokens_and_sequence_agree(cli):
    tokens = np.arange(1000, 1100, dtype=np.int64)
    _, want = cli_keys(cli, "np", SIG, 16, tokens.tolist())
    for arr in (tokens, tokens.astype(np.uint32), tokens.astype(np.int32), tokens.tolist(),
                range(1000, 1100)):
        assert [k.hex() for k in kvtier.block_keys("np", SIG, 16, arr)] == want

    chain = kvtier.KeyChain("np", kvtier.Layout("tiny"))  # block_tokens from the layout: 16
    seq = chain.sequence()
    got = []
    for piece in (tokens[:5], tokens[5:40], tokens[40:41], tokens[41:]):
        got += seq.append(piece)
    assert [k.hex() for k in got] == want
    assert [k.hex() for k in seq.keys] == want
    assert seq.pending_tokens == 100 % 16 and seq.num_tokens == 100 and len(seq) == 6
    assert seq.last_key.hex() == want[-1]
    # next() is the chain step the sequence takes.
    assert chain.next(chain.namespace, tokens[:16]).hex() == want[0]


@pytest.mark.parametrize("tokens,needle", [
    ([1, -1], "tokens[1]"),
    ([1, 2 ** 32], "tokens[1]"),
    (np.array([3, -5], dtype=np.int64), "negative"),
    (np.array([1.5, 2.5]), "integer array"),
    ("1,2,3", "got str"),
    ([1, "2"], "tokens[1]"),
    (7, "sequence"),
])
def test_bad_tokens_raise_invalid_argument(tokens, needle):
    with pytest.raises(kvtier.InvalidArgument, match=needle.replace("[", r"\[").replace("]", r"\]")):
        kvtier.block_keys("m", SIG, 4, tokens)


def test_bad_namespace_raises():
    with pytest.raises(kvtier.InvalidArgument):
        kvtier.block_keys("m", SIG, 0, [1, 2, 3])
    with pytest.raises(kvtier.InvalidArgument, match="model"):
        kvtier.block_keys(b"m", SIG, 4, [1, 2, 3, 4])
    with pytest.raises(kvtier.InvalidArgument, match="block_tokens"):
        kvtier.KeyChain("m", SIG)  # a str signature needs block_tokens
    with pytest.raises(kvtier.InvalidArgument, match="parent"):
        kvtier.KeyChain("m", SIG, 4).next(b"short", [1, 2, 3, 4])
    with pytest.raises(kvtier.InvalidArgument, match="expected 4 tokens"):
        kvtier.KeyChain("m", SIG, 4).next(bytes(32), [1, 2, 3])
    assert issubclass(kvtier.InvalidArgument, ValueError)
    assert issubclass(kvtier.InvalidArgument, kvtier.Error)
