"""Shards in the key namespace (DESIGN.md §3, TLV 0x07): the vectors of
docs/block-key.md, the canonical form, and two tensor-parallel ranks in two
processes sharing one folder (and Redis when KVTIER_TEST_REDIS_URL is set)
that never read each other's blocks."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kvtier
from conftest import run_cli

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from block_key_vectors import VECTORS, compute, parse_tokens  # noqa: E402


def test_vectors_with_and_without_shard():
    """Every vector of docs/block-key.md, old ones (no shard) unchanged."""
    for v in VECTORS:
        name, model, sig, bt, salt, adapter, extra, tokens, bextra, shard = v
        if bextra:
            continue  # per-block extras: KeyChain.next, tested in test_keys.py
        ns, keys = compute(v)
        chain = kvtier.KeyChain(model, sig, bt, salt=salt, adapter=adapter, extra=extra,
                                shard=shard)
        assert chain.namespace == ns, name
        assert chain.keys(parse_tokens(tokens)) == keys, name
        assert kvtier.block_keys(model, sig, bt, parse_tokens(tokens), salt=salt,
                                 adapter=adapter, extra=extra, shard=shard) == keys, name


def test_shard_equals_cli(cli):
    sig = kvtier.layout_signature("tiny")
    tokens = list(range(40))
    for shard in ("tp=0/2", "tp=1/2", "pp=3/4", "tp=7/8;pp=1/2;cp=0/2"):
        out = run_cli(cli, "key", "--model", "m", "--signature", sig, "--block-tokens", "16",
                      "--shard", shard, "--tokens", ",".join(map(str, tokens)))
        chain = kvtier.KeyChain("m", sig, 16, shard=shard)
        assert out["namespace"] == chain.namespace.hex()
        assert out["keys"] == [k.hex() for k in chain.keys(tokens)]
    # "" is no shard: the keys from before the field existed.
    assert kvtier.block_keys("m", sig, 16, tokens, shard="") == kvtier.block_keys(
        "m", sig, 16, tokens)


@pytest.mark.parametrize("shard,needle", [
    ("tp=0/1", "leave it out"),
    ("pp=0/2;tp=0/2", "in the order tp, pp, cp"),
    ("tp=2/2", "rank must be < size"),
    ("tp=01/2", "leading zeros"),
    ("tp=0/2;", "no '='"),
    (" tp=0/2", "unknown field"),
    ("dp=0/2", "unknown field 'dp'"),
])
def test_non_canonical_shard_raises(shard, needle):
    with pytest.raises(kvtier.InvalidArgument, match=needle):
        kvtier.block_keys("m", "s", 4, [1, 2, 3, 4], shard=shard)
    with pytest.raises(kvtier.InvalidArgument, match="shard"):
        kvtier.KeyChain("m", "s", 4, shard=shard)


def test_bad_argument_types_raise_invalid_argument():
    with pytest.raises(kvtier.InvalidArgument, match="shard"):
        kvtier.block_keys("m", "s", 4, [1, 2, 3, 4], shard=2)
    for bt in (-1, 2**32, 1.5, "4", None):
        with pytest.raises(kvtier.InvalidArgument, match="block_tokens"):
            kvtier.block_keys("m", "s", bt, [1, 2, 3, 4])
    with pytest.raises(kvtier.InvalidArgument, match="block_tokens"):
        kvtier.KeyChain("m", "s", -1)
    for bt in (-1, 2**32, 2.0, "16"):
        with pytest.raises(kvtier.InvalidArgument, match="block_tokens"):
            kvtier.Layout("tiny", bt)
    assert kvtier.Layout("tiny", 0).block_tokens == 16
    assert kvtier.Layout("tiny", 32).block_tokens == 32


# One rank's process: `store` puts its blocks into the shared cache, `check`
# loads them back and compares them with what that rank wrote; both print
# how many of its keys the cache matched before they started.
RANK = textwrap.dedent("""
    import sys
    import numpy as np
    import kvtier

    mode, rank, folder, remote = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] or None
    layout = kvtier.Layout("tiny")
    chain = kvtier.KeyChain("shard-test-model", layout, shard="tp=%d/2" % rank)
    tokens = [int(t) for t in sys.argv[5].split(",")]
    keys = chain.keys(tokens)

    def tensors(i):
        rng = np.random.default_rng([rank, i])
        return [rng.integers(0, 256, size=t.nbytes, dtype=np.uint8).view(t.numpy_dtype)
                .reshape(t.shape) for t in layout.tensors()]

    with kvtier.Cache(layout, host_bytes=1 << 20, disk_dir=folder, remote=remote) as c:
        print(c.match(keys))
        parent = chain.namespace
        for i, key in enumerate(keys):
            if mode == "store":
                c.store(key, kvtier.encode_block(layout, key, parent, chain.namespace,
                                                 tensors(i)))
            else:
                block = c.load(key)
                assert block is not None, "rank %d: block %d missing" % (rank, i)
                got = kvtier.decode_block(block, layout, key)
                for a, b in zip(got, tensors(i)):
                    # Bytes, not values: random bits include NaNs.
                    assert a.tobytes() == b.tobytes(), "rank %d: block %d: other bytes" % (rank, i)
            parent = key
        c.flush()
""")


def run_rank(tmp_path, mode, rank, remote, tokens):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    out = subprocess.run([sys.executable, str(script), mode, str(rank),
                          str(tmp_path / "shared"), remote or "", ",".join(map(str, tokens))],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[0])


def test_two_ranks_share_a_folder(tmp_path):
    remote = os.environ.get("KVTIER_TEST_REDIS_URL") or None
    # New tokens each run, so that the keys are new to a shared Redis server.
    rng = np.random.default_rng()
    tokens = [int(t) for t in rng.integers(0, 2**32, size=4 * 16)]
    layout = kvtier.Layout("tiny")
    # Without a shard, the two ranks would name their different bytes alike.
    assert kvtier.KeyChain("shard-test-model", layout).keys(tokens) == kvtier.KeyChain(
        "shard-test-model", layout).keys(tokens)
    k0 = kvtier.KeyChain("shard-test-model", layout, shard="tp=0/2").keys(tokens)
    k1 = kvtier.KeyChain("shard-test-model", layout, shard="tp=1/2").keys(tokens)
    assert not set(k0) & set(k1)

    assert run_rank(tmp_path, "store", 0, remote, tokens) == 0
    # Rank 1 finds nothing of rank 0's in the folder (or Redis) ...
    assert run_rank(tmp_path, "store", 1, remote, tokens) == 0
    # ... and each rank, in a new process, reads back its own bytes only.
    assert run_rank(tmp_path, "check", 0, remote, tokens) == 4
    assert run_rank(tmp_path, "check", 1, remote, tokens) == 4
