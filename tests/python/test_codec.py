"""encode_block / decode_block: round trips, zero-copy views, hostile corpus."""

import gc
import json
import os

import numpy as np
import pytest

import kvtier
from conftest import make_blocks, run_cli


def test_round_trip_tiny():
    layout = kvtier.Layout("tiny")
    keys, blocks, tensors = make_blocks(layout, "codec", list(range(48)), seed=3)
    assert len(keys) == 3
    for key, block, want in zip(keys, blocks, tensors):
        got = kvtier.decode_block(block, layout, key)
        assert len(got) == layout.tensor_count == 4
        for g, w, info in zip(got, want, layout.tensors()):
            assert g.dtype == np.float16 and g.shape == info.shape == (2, 16, 16)
            assert g.tobytes() == w.tobytes()
            assert not g.flags.writeable  # views into immutable bytes


def test_round_trip_mixed_layout(source_dir):
    layout = kvtier.Layout(os.path.join(source_dir, "docs", "examples", "hybrid.json"))
    infos = layout.tensors()
    assert len({t.dtype for t in infos}) > 1  # several dtypes, non-attention layers
    keys, blocks, tensors = make_blocks(layout, "hybrid", list(range(layout.block_tokens)))
    got = kvtier.decode_block(blocks[0], layout, keys[0])
    for g, w, info in zip(got, tensors[0], infos):
        assert g.dtype == info.numpy_dtype and g.shape == info.shape
        assert g.tobytes() == w.tobytes()
    # A dict by tensor name encodes the same bytes.
    chain = kvtier.KeyChain("hybrid", layout)
    by_name = {info.name: t for info, t in zip(infos, tensors[0])}
    again = kvtier.encode_block(layout, keys[0], chain.namespace, chain.namespace, by_name,
                                created_at=1_700_000_000)
    assert again == blocks[0]


def test_decode_returns_views_not_copies():
    layout = kvtier.Layout("tiny")
    keys, blocks, _ = make_blocks(layout, "views", list(range(16)))
    data = bytearray(blocks[0])
    arrays = kvtier.decode_block(data, layout, keys[0])
    whole = np.frombuffer(data, np.uint8)
    lo, hi = whole.ctypes.data, whole.ctypes.data + len(data)
    for a in arrays:
        assert np.shares_memory(a, whole)
        assert lo <= a.ctypes.data and a.ctypes.data + a.nbytes <= hi
        assert a.flags.writeable  # a bytearray is writable, so are its views
    # Writing through a view changes the caller's bytes.
    arrays[0].flat[0] = np.float16(1.5)
    assert np.frombuffer(data, np.uint8)[arrays[0].ctypes.data - lo:][:2].tobytes() == \
        np.float16(1.5).tobytes()
    # The views keep the buffer exported: it cannot be resized under them.
    with pytest.raises(BufferError):
        data.extend(b"x")
    # ... and alive: the arrays outlive every other reference to the bytes.
    first = bytes(arrays[1].tobytes())
    del data, whole
    gc.collect()
    assert arrays[1].tobytes() == first


def test_decode_matches_cli_synth(cli, tmp_path):
    out = tmp_path / "files"
    run_cli(cli, "synth", "--layout", "tiny", "--random", "64", "--seed", "5", "--out", str(out))
    files = sorted(os.listdir(out))
    assert len(files) == 4
    layout = kvtier.Layout("tiny")
    for name in files:
        key = bytes.fromhex(name.split(".")[0])
        data = (out / name).read_bytes()
        arrays = kvtier.decode_block(data, layout, key)
        assert b"".join(a.tobytes() for a in arrays) == data[-layout.block_bytes:]


def corpus_cases(source_dir):
    corpus = os.path.join(source_dir, "tests", "corpus")
    with open(os.path.join(corpus, "expected.json")) as f:
        expected = json.load(f)
    return corpus, expected


def test_valid_corpus_decodes(source_dir):
    corpus, expected = corpus_cases(source_dir)
    layout = kvtier.Layout("tiny")
    for name in ("tiny_block0.safetensors", "tiny_block1.safetensors"):
        data = open(os.path.join(corpus, "valid", name), "rb").read()
        header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
        key = bytes.fromhex(header["__metadata__"]["key"])
        assert len(kvtier.decode_block(data, layout, key)) == 4


def test_hostile_corpus_raises_corruption(source_dir):
    corpus, expected = corpus_cases(source_dir)
    block0 = open(os.path.join(corpus, "valid", "tiny_block0.safetensors"), "rb").read()
    header = json.loads(block0[8:8 + int.from_bytes(block0[:8], "little")])
    default_key = bytes.fromhex(header["__metadata__"]["key"])
    names = sorted(expected["hostile"])
    assert len(names) == len(os.listdir(os.path.join(corpus, "hostile"))) >= 50
    for name in names:
        want = expected["hostile"][name]
        data = open(os.path.join(corpus, "hostile", name), "rb").read()
        key = bytes.fromhex(want.get("expected_key", default_key.hex()))
        layout = kvtier.Layout("tiny")
        if "expected_signature" in want:  # tiny's tensors, another block size
            layout = same_tensors_other_block_tokens(32)
            assert layout.signature == want["expected_signature"]
        with pytest.raises(kvtier.Corruption) as info:
            kvtier.decode_block(data, layout, key)
        assert "[%s]" % want["reason"] in str(info.value), name


def same_tensors_other_block_tokens(block_tokens):
    """The tiny layout's tensors ([2, 16, 16] F16 K and V, two layers) under
    another block_tokens: equal tensors, another signature."""
    state = '{"role": "%s", "dtype": "F16", "shape": [2, 16, 16]}'
    return kvtier.Layout.from_json(
        '{"name": "t", "block_tokens": %d, "layers": [{"repeat": 2, "cache_type": "attention", '
        '"states": [%s, %s]}]}' % (block_tokens, state % "keys", state % "values"))


def test_bad_encode_arguments():
    layout = kvtier.Layout("tiny")
    chain = kvtier.KeyChain("bad", layout)
    key = chain.keys(range(16))[0]
    good = [np.zeros(t.shape, t.numpy_dtype) for t in layout.tensors()]
    ns = chain.namespace
    with pytest.raises(kvtier.InvalidArgument, match="4 tensors"):
        kvtier.encode_block(layout, key, ns, ns, good[:3])
    wrong_size = good[:3] + [np.zeros((2, 16, 15), np.float16)]
    with pytest.raises(kvtier.InvalidArgument, match=r"tensors\[3\].*bytes"):
        kvtier.encode_block(layout, key, ns, ns, wrong_size)
    wrong_dtype = good[:3] + [np.zeros((2, 16, 8), np.float32)]  # same bytes, 4-byte elements
    with pytest.raises(kvtier.InvalidArgument, match="element size 4"):
        kvtier.encode_block(layout, key, ns, ns, wrong_dtype)
    strided = good[:3] + [np.zeros((2, 16, 32), np.float16)[:, :, ::2]]
    with pytest.raises(kvtier.InvalidArgument, match="C-contiguous"):
        kvtier.encode_block(layout, key, ns, ns, strided)
    with pytest.raises(kvtier.InvalidArgument, match="key"):
        kvtier.encode_block(layout, "00" * 32, ns, ns, good)
    with pytest.raises(kvtier.InvalidArgument, match="no entry 'layer_0_state_0'"):
        kvtier.encode_block(layout, key, ns, ns, {"x": good[0]})
    with pytest.raises(kvtier.InvalidArgument, match="layout"):
        kvtier.encode_block(42, key, ns, ns, good)


def test_decode_wrong_key_or_layout_is_corruption():
    layout = kvtier.Layout("tiny")
    keys, blocks, _ = make_blocks(layout, "wrong", list(range(32)))
    with pytest.raises(kvtier.Corruption, match=r"\[key_mismatch\]"):
        kvtier.decode_block(blocks[0], layout, keys[1])
    with pytest.raises(kvtier.Corruption, match=r"\[signature_mismatch\]"):
        kvtier.decode_block(blocks[0], same_tensors_other_block_tokens(32), keys[0])
    with pytest.raises(kvtier.Corruption, match=r"\[layout_mismatch\]"):
        kvtier.decode_block(blocks[0], kvtier.Layout("tiny", block_tokens=8), keys[0])
    with pytest.raises(kvtier.InvalidArgument, match="data"):
        kvtier.decode_block("text", layout, keys[0])
