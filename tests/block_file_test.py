#!/usr/bin/python3
"""Independent block-file reader and cross-checks against the kvtier CLI.

Usage: /usr/bin/python3 tests/block_file_test.py --cli PATH_TO_kvtier

The reader below implements the safetensors rules and DESIGN.md section 4 /
docs/block-format.md from the text alone (json, numpy, xxhash; no kvtier
code). The test then
  1. makes block files with `kvtier synth --out` (tiny, qwen2.5-0.5b with 2
     blocks, docs/examples/hybrid.json) and checks every rule on them: keys
     against hashlib, dtypes as numpy arrays (BF16 and F8 as raw integers),
     content against the generator spec of src/synth/block_generator.h, and
     meta_checksum on every file;
  2. checks the reader accepts tests/corpus/valid/ and rejects every file of
     tests/corpus/hostile/ (and the generated cases) with the reason in
     tests/corpus/expected.json;
  3. checks `kvtier verify` exits 1 with that reason for every hostile file
     (plus a symlink, a FIFO and a folder) and 0 for every valid one, and that
     `kvtier inspect --json` agrees with the reader.
Prints "N passed, M failed" and exits non-zero on any failure.
"""

import argparse
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import traceback

import numpy as np
import xxhash

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "corpus")

MAX_HEADER = 1 << 20
MAX_TENSORS = 65536
MAX_DEPTH = 4
MAX_RANK = 8
U64 = 1 << 64

# safetensors dtype -> (numpy dtype, element size). numpy has no bfloat16 or
# float8, so those are read as raw unsigned integers of the same width.
DTYPES = {
    "F16": (np.float16, 2), "BF16": (np.uint16, 2), "F32": (np.float32, 4),
    "F64": (np.float64, 8), "I8": (np.int8, 1), "I16": (np.int16, 2), "I32": (np.int32, 4),
    "I64": (np.int64, 8), "U8": (np.uint8, 1), "U16": (np.uint16, 2), "U32": (np.uint32, 4),
    "U64": (np.uint64, 8), "BOOL": (np.bool_, 1), "F8_E4M3": (np.uint8, 1),
    "F8_E5M2": (np.uint8, 1),
}
NAME_RE = re.compile(r"layer_(0|[1-9][0-9]*)_state_(0|[1-9][0-9]*)")
HEX64_RE = re.compile(r"[0-9a-f]{64}")
CHECKSUM_RE = re.compile(r"xxh3-128:([0-9a-f]{32})")
UINT_RE = re.compile(r"0|[1-9][0-9]*")
INT_RE = re.compile(r"0|-?[1-9][0-9]*")
REQUIRED = ["key", "parent", "namespace", "token_count", "layout_signature",
            "layer_cache_types", "layer_meta_states", "created_at", "checksum"]


class Reject(Exception):
    def __init__(self, reason, detail=""):
        super().__init__("%s: %s" % (reason, detail))
        self.reason = reason


class Duplicate(Exception):
    pass


def _pairs(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise Duplicate(keys)
    return dict(pairs)


def _no_constants(name):
    raise ValueError("not JSON: " + name)


def _walk(v, depth):
    """Max container depth; rejects strings holding NUL or lone surrogates."""
    if isinstance(v, str):
        if "\0" in v:
            raise Reject("header_nul", "escaped NUL")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise Reject("json_syntax", "lone surrogate escape")
        return depth
    if isinstance(v, list):
        return max([_walk(x, depth + 1) for x in v] + [depth + 1])
    if isinstance(v, dict):
        return max([_walk(k, depth + 1) for k in v] + [_walk(x, depth + 1) for x in v.values()] +
                   [depth + 1])
    return depth


def strict_json(text):
    """Parses `text` strictly: one value, only whitespace after it."""
    dec = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_no_constants)
    start = len(text) - len(text.lstrip(" \t\r\n"))
    try:
        value, end = dec.raw_decode(text, start)
    except Duplicate as e:
        raise Reject("duplicate_key", str(e)[:80])
    except ValueError as e:
        raise Reject("json_syntax", str(e))
    if text[end:].strip(" \t\r\n"):
        raise Reject("json_trailing", repr(text[end:end + 16]))
    return value


def is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < U64


# The tiny preset as DESIGN.md section 6 describes it: 2 layers of attention,
# 2 KV heads, head dim 16, F16, 16-token blocks; keys and values per layer.
TINY_LAYOUT = {"block_tokens": 16, "cache_types": ["attention", "attention"],
               "states": [[("F16", [2, 16, 16]), ("F16", [2, 16, 16])]] * 2}
LAYOUTS = {"tiny": TINY_LAYOUT}


def meta_checksum_of(meta, tensors):
    """DESIGN.md section 4: the metadata but meta_checksum, bytewise key order,
    as key NUL value NUL; then each tensor in file order as name NUL dtype NUL
    shape (decimals joined by ',') NUL begin NUL end NUL."""
    text = b""
    for k, v in sorted((k.encode(), v.encode()) for k, v in meta.items() if k != "meta_checksum"):
        text += k + b"\0" + v + b"\0"
    for t in tensors:
        for f in (t["name"], t["dtype"], ",".join(str(d) for d in t["shape"]), str(t["begin"]),
                  str(t["end"])):
            text += f.encode() + b"\0"
    return xxhash.xxh3_128_hexdigest(text)


def read_block(data, expected_key=None, expected_signature=None, expected_layout=None):
    """Validates a block file; returns (metadata dict, [tensor dicts], data section).
    Raises Reject(reason) on the first rule broken, in docs/block-format.md order.
    expected_layout: a dict like TINY_LAYOUT."""
    if len(data) < 8:
        raise Reject("file_too_short")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER:
        raise Reject("header_too_large", n)
    if 8 + n > len(data):
        raise Reject("header_past_eof", n)
    if n % 8:
        raise Reject("header_misaligned", n)
    raw = data[8:8 + n]
    if b"\0" in raw:
        raise Reject("header_nul")
    try:
        text = raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        raise Reject("header_not_utf8", str(e))
    header = strict_json(text)
    if _walk(header, 0) > MAX_DEPTH:
        raise Reject("json_too_deep")
    if not isinstance(header, dict):
        raise Reject("header_not_object")
    names = [k for k in header if k != "__metadata__"]
    if len(names) > MAX_TENSORS:
        raise Reject("too_many_tensors", len(names))

    tensors = []
    for name in names:
        m = NAME_RE.fullmatch(name)
        if not m or int(m.group(1)) >= 1 << 32 or int(m.group(2)) >= 1 << 32:
            raise Reject("bad_tensor_name", name)
        e = header[name]
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise Reject("bad_tensor_entry", name)
        if not isinstance(e["dtype"], str):
            raise Reject("bad_tensor_entry", name)
        if e["dtype"] not in DTYPES:
            raise Reject("unknown_dtype", e["dtype"])
        shape = e["shape"]
        if not isinstance(shape, list) or len(shape) > MAX_RANK:
            raise Reject("bad_shape", name)
        if not all(is_uint(d) and d >= 1 for d in shape):
            raise Reject("bad_shape", name)
        nbytes = DTYPES[e["dtype"]][1]
        for d in shape:
            nbytes *= d
        if nbytes >= U64:
            raise Reject("shape_overflow", name)
        off = e["data_offsets"]
        if not isinstance(off, list) or len(off) != 2 or not all(is_uint(x) for x in off):
            raise Reject("bad_offsets", name)
        tensors.append({"name": name, "layer": int(m.group(1)), "state": int(m.group(2)),
                        "dtype": e["dtype"], "shape": shape, "begin": off[0], "end": off[1],
                        "nbytes": nbytes})
    if not tensors:
        raise Reject("missing_tensor", "no tensors")
    tensors.sort(key=lambda t: (t["layer"], t["state"]))
    layer, state = 0, 0
    for i, t in enumerate(tensors):
        if i > 0:
            if t["layer"] == layer:
                state += 1
            else:
                layer, state = layer + 1, 0
        if (t["layer"], t["state"]) != (layer, state):
            raise Reject("missing_tensor", "layer_%d_state_%d" % (layer, state))
    layers = layer + 1
    data_size = len(data) - 8 - n
    cursor = 0
    for i, t in enumerate(tensors):
        if t["end"] < t["begin"]:
            raise Reject("offsets_reversed", t["name"])
        if t["end"] - t["begin"] != t["nbytes"]:
            raise Reject("shape_size_mismatch", t["name"])
        if i == 0 and t["begin"] != 0:
            raise Reject("first_offset_nonzero")
        if t["begin"] > cursor:
            raise Reject("offsets_gap", t["name"])
        if t["begin"] < cursor:
            raise Reject("offsets_overlap", t["name"])
        cursor = t["end"]
    if cursor < data_size:
        raise Reject("trailing_bytes")
    if cursor > data_size:
        raise Reject("data_truncated")

    if "__metadata__" not in header:
        raise Reject("missing_metadata")
    meta = header["__metadata__"]
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise Reject("metadata_not_strings")
    if meta.get("kvtier_format") != "1":
        raise Reject("unsupported_format", meta.get("kvtier_format"))
    for f in REQUIRED:
        if f not in meta:
            raise Reject("metadata_missing_field", f)
    for f in ("key", "parent", "namespace"):
        if not HEX64_RE.fullmatch(meta[f]):
            raise Reject("metadata_bad_field", f)
    tc = meta["token_count"]
    if not UINT_RE.fullmatch(tc) or not 1 <= int(tc) < 1 << 32:
        raise Reject("metadata_bad_field", "token_count")
    if not meta["layout_signature"]:
        raise Reject("metadata_bad_field", "layout_signature")
    try:
        types = strict_json(meta["layer_cache_types"])
        states = strict_json(meta["layer_meta_states"])
    except Reject as e:
        raise Reject("metadata_bad_field", str(e))
    if (not isinstance(types, list) or len(types) != layers or
            not all(isinstance(x, str) for x in types)):
        raise Reject("metadata_bad_field", "layer_cache_types")
    if (not isinstance(states, list) or len(states) != layers or
            not all(isinstance(s, list) and all(isinstance(x, str) for x in s) for s in states)):
        raise Reject("metadata_bad_field", "layer_meta_states")
    ca = meta["created_at"]
    if not INT_RE.fullmatch(ca) or not -(1 << 63) <= int(ca) < 1 << 63:
        raise Reject("metadata_bad_field", "created_at")
    cm = CHECKSUM_RE.fullmatch(meta["checksum"])
    if not cm:
        raise Reject("metadata_bad_field", "checksum")
    sums = None
    if "tensor_checksums" in meta:
        # One xxh3-128 per tensor in file order (DESIGN.md section 4).
        try:
            sums = strict_json(meta["tensor_checksums"])
        except Reject as e:
            raise Reject("metadata_bad_field", str(e))
        if (not isinstance(sums, list) or len(sums) != len(tensors) or
                not all(isinstance(x, str) and CHECKSUM_RE.fullmatch(x) for x in sums)):
            raise Reject("metadata_bad_field", "tensor_checksums")
    if "meta_checksum" in meta:
        mm = CHECKSUM_RE.fullmatch(meta["meta_checksum"])
        if not mm:
            raise Reject("metadata_bad_field", "meta_checksum")
        if meta_checksum_of(meta, tensors) != mm.group(1):
            raise Reject("meta_checksum_mismatch")
    if expected_layout is not None:
        want = [(dtype, shape) for layer in expected_layout["states"] for dtype, shape in layer]
        got = [(t["dtype"], t["shape"]) for t in tensors]
        per_layer = [sum(1 for t in tensors if t["layer"] == i) for i in range(layers)]
        if (layers != len(expected_layout["states"]) or got != want or
                per_layer != [len(x) for x in expected_layout["states"]]):
            raise Reject("layout_mismatch", "tensors")
        if types != expected_layout["cache_types"]:
            raise Reject("layout_mismatch", "layer_cache_types")
        if int(tc) > expected_layout["block_tokens"]:
            raise Reject("layout_mismatch", "token_count")
    if expected_key is not None and meta["key"] != expected_key:
        raise Reject("key_mismatch")
    if expected_signature is not None and meta["layout_signature"] != expected_signature:
        raise Reject("signature_mismatch")
    section = data[8 + n:]
    if xxhash.xxh3_128_hexdigest(section) != cm.group(1):
        raise Reject("checksum_mismatch")
    if sums is not None:
        # The whole file verified, so a mismatch here is the writer's fault:
        # each entry must be the tensor's own hash for partial readers.
        for t, want in zip(tensors, sums):
            got = xxhash.xxh3_128_hexdigest(section[t["begin"]:t["end"]])
            if got != CHECKSUM_RE.fullmatch(want).group(1):
                raise Reject("tensor_checksum_mismatch", t["name"])
    for t in tensors:
        np_dtype = DTYPES[t["dtype"]][0]
        arr = np.frombuffer(section, dtype=np_dtype, count=t["nbytes"] // DTYPES[t["dtype"]][1],
                            offset=t["begin"]).reshape(t["shape"])
        assert arr.nbytes == t["nbytes"]
        t["array"] = arr
    meta = dict(meta)
    meta["layer_cache_types"], meta["layer_meta_states"] = types, states
    return meta, tensors, section, n


# ---------------------------------------------------------------------------
# Keys (DESIGN.md section 3) and the content generator (block_generator.h)

def namespace(model_id, signature, block_tokens):
    def tlv(tag, b):
        return bytes([tag]) + struct.pack("<I", len(b)) + b
    return hashlib.sha256(b"kvtier-ns-v1\0" + tlv(1, model_id.encode()) +
                          tlv(2, signature.encode()) +
                          tlv(3, struct.pack("<I", block_tokens))).digest()


def chain_keys(ns, tokens, bt):
    keys, parent = [], ns
    for b in range(len(tokens) // bt):
        parent = hashlib.sha256(b"kvtier-blk-v1\0" + parent + struct.pack("<I", bt) +
                                struct.pack("<%dI" % bt, *tokens[b * bt:(b + 1) * bt])).digest()
        keys.append(parent)
    return keys


M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix_int(z):
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mix_np(z):
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def generated(key, index, size):
    s = 0
    for j in range(4):
        s = mix_int(s ^ int.from_bytes(key[8 * j:8 * j + 8], "little"))
    s = mix_int(s ^ (((index + 1) * GOLDEN) & M64))
    w = np.arange(1, (size + 7) // 8 + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        words = mix_np(np.uint64(s) + w * np.uint64(GOLDEN))
    return words.astype("<u8").tobytes()[:size]


def random_tokens(n, seed):
    return [mix_int((seed + (i + 1) * GOLDEN) & M64) >> 33 for i in range(n)]


def generated_cases():
    """The cases expected.json lists under "generated" that are bytes."""
    def pack(text, data=b""):
        h = text.encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        return struct.pack("<Q", len(h)) + h + data
    many = "{" + ",".join('"%d":0' % i for i in range(65537)) + "}"
    million = "{" + ",".join(
        '"layer_%d_state_0":{"dtype":"F16","shape":[1],"data_offsets":[%d,%d]}' %
        (i, 2 * i, 2 * i + 2) for i in range(1000000)) + "}"
    return {"tensors_65537": pack(many), "tensors_1000000": pack(million, bytes(2000000))}


# ---------------------------------------------------------------------------
# The test

class Runner:
    def __init__(self, cli):
        self.cli = cli
        self.passed = 0
        self.failed = 0

    def check(self, name, fn):
        try:
            fn()
            self.passed += 1
        except Exception as e:  # noqa: BLE001 - report and keep going
            self.failed += 1
            print("FAIL %s: %s" % (name, e))
            if not isinstance(e, AssertionError):
                traceback.print_exc()

    def kvtier(self, *args):
        p = subprocess.run([self.cli] + list(args), capture_output=True, text=True, timeout=300)
        return p.returncode, p.stdout, p.stderr


def expect_reason(fn, reason):
    try:
        fn()
    except Reject as e:
        assert e.reason == reason, "rejected as %s, expected %s (%s)" % (e.reason, reason, e)
        return
    raise AssertionError("accepted, expected %s" % reason)


def check_synth_file(path, key, parent, ns, bt):
    with open(path, "rb") as f:
        data = f.read()
    meta, tensors, section, n = read_block(data, expected_key=key.hex())
    assert data[8:8 + n].rstrip(b" ").endswith(b"}"), "padding is not spaces"
    assert meta["parent"] == parent.hex(), "parent"
    assert meta["namespace"] == ns.hex(), "namespace"
    assert meta["token_count"] == str(bt), "token_count"
    assert namespace("synth", meta["layout_signature"], bt) == ns, "namespace from signature"
    for i, t in enumerate(tensors):
        assert t["array"].tobytes() == generated(key, i, t["nbytes"]), "content of " + t["name"]
    return meta, tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Runner(os.path.abspath(args.cli))
    with open(os.path.join(CORPUS, "expected.json")) as f:
        expected = json.load(f)
    work = tempfile.mkdtemp(prefix="kvtier_block_file_test_")

    # The committed corpus is exactly what its script makes.
    def corpus_fresh():
        p = subprocess.run([sys.executable, os.path.join(CORPUS, "make_corpus.py"), "--check"],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    r.check("corpus matches make_corpus.py", corpus_fresh)

    # 1. Files made by kvtier synth.
    synth_runs = [
        ("tiny", ["--layout", "tiny", "--tokens", ",".join(str(i) for i in range(40))],
         list(range(40)), 16),
        ("qwen", ["--layout", "qwen2.5-0.5b", "--random", "600", "--seed", "9"],
         random_tokens(600, 9), 256),
        ("hybrid", ["--layout", os.path.join(ROOT, "docs", "examples", "hybrid.json"),
                    "--random", "130"], random_tokens(130, 0), 64),
    ]
    synth_files = []
    for name, flags, tokens, bt in synth_runs:
        out = os.path.join(work, name)

        def run_synth(name=name, flags=flags, tokens=tokens, bt=bt, out=out):
            rc, stdout, stderr = r.kvtier("synth", *flags, "--out", out, "--json")
            assert rc == 0, "synth exit %d: %s" % (rc, stderr)
            report = json.loads(stdout)
            nblocks = len(tokens) // bt
            assert report == {"blocks": nblocks, "present": nblocks, "missing": 0, "wrong": 0}, report
            files = sorted(os.listdir(out))
            assert len(files) == nblocks, files
            # The signature is only in the files: take it from the first, then
            # recompute every key independently.
            with open(os.path.join(out, files[0]), "rb") as f:
                first = f.read()
            (n,) = struct.unpack("<Q", first[:8])
            sig = json.loads(first[8:8 + n])["__metadata__"]["layout_signature"]
            ns = namespace("synth", sig, bt)
            keys = chain_keys(ns, tokens, bt)
            assert sorted(k.hex() + ".safetensors" for k in keys) == files
            for i, k in enumerate(keys):
                path = os.path.join(out, k.hex() + ".safetensors")
                meta, tensors = check_synth_file(path, k, ns if i == 0 else keys[i - 1], ns, bt)
                synth_files.append((path, meta, tensors))
        r.check("synth %s: files follow every rule" % name, run_synth)

    def hybrid_meta():
        metas = [m for p, m, _ in synth_files if "/hybrid/" in p]
        assert metas, "no hybrid files"
        m = metas[0]
        assert m["layer_cache_types"] == ["attention", "attention", "sliding_window",
                                          "quantized_attention", "mamba", "mamba"], m
        assert m["layer_meta_states"][2] == ["keep=0", "window=512"], m
        assert m["layer_meta_states"][3] == ["bits=4", "group_size=32"], m
        tensors = [t for p, _, ts in synth_files if "/hybrid/" in p for t in ts]
        assert {t["dtype"] for t in tensors} == {"BF16", "U32", "F16", "F32"}
    r.check("hybrid layout metadata", hybrid_meta)

    def inspect_agrees():
        path, meta, tensors = synth_files[0]
        rc, stdout, stderr = r.kvtier("inspect", path, "--json")
        assert rc == 0, stderr
        j = json.loads(stdout)
        assert j["ok"] is True and j["checksum_ok"] is True
        for f in ("key", "parent", "namespace", "layout_signature", "checksum", "meta_checksum"):
            assert j["metadata"][f] == meta[f], f
        assert j["metadata"]["token_count"] == int(meta["token_count"])
        assert j["metadata"]["layer_cache_types"] == meta["layer_cache_types"]
        got = [(t["name"], t["dtype"], t["shape"], t["data_offsets"]) for t in j["tensors"]]
        want = [(t["name"], t["dtype"], t["shape"], [t["begin"], t["end"]]) for t in tensors]
        assert got == want, (got, want)
    r.check("inspect --json agrees with the reader", inspect_agrees)

    # 2. The reader on the corpus.
    for name in sorted(expected["valid"]):
        def valid(name=name):
            with open(os.path.join(CORPUS, "valid", name), "rb") as f:
                read_block(f.read())
        r.check("reader accepts valid/" + name, valid)

    def hostile_args(entry):
        layout = entry.get("expected_layout")
        return (entry.get("expected_key"), entry.get("expected_signature"),
                LAYOUTS[layout] if layout else None)

    for name, entry in sorted(expected["hostile"].items()):
        def hostile(name=name, entry=entry):
            with open(os.path.join(CORPUS, "hostile", name), "rb") as f:
                data = f.read()
            key, sig, layout = hostile_args(entry)
            expect_reason(lambda: read_block(data, key, sig, layout), entry["reason"])
        r.check("reader rejects hostile/" + name, hostile)

    def meta_checksums():
        # Every file kvtier writes carries tensor_checksums the reader checked.
        assert all("tensor_checksums" in m for _, m, _ in synth_files)
        # Every file kvtier writes carries a meta_checksum the reader verified;
        # the legacy corpus file has none and is still accepted.
        assert synth_files and all("meta_checksum" in m for _, m, _ in synth_files)
        with open(os.path.join(CORPUS, "valid", "tiny_block0_no_meta_checksum.safetensors"),
                  "rb") as f:
            meta, _, _, _ = read_block(f.read(), expected_layout=TINY_LAYOUT)
        assert "meta_checksum" not in meta
        # The reader catches an edit the data checksum cannot see.
        path = [p for p, _, _ in synth_files if "/tiny/" in p][0]
        with open(path, "rb") as f:
            data = f.read()
        edited = data.replace(b'"created_at":"', b'"created_at":"1', 1)
        assert len(edited) == len(data) + 1
        (n,) = struct.unpack("<Q", data[:8])
        text = edited[8:8 + n + 1].rstrip(b" ")
        text += b" " * ((8 - len(text) % 8) % 8)
        repacked = struct.pack("<Q", len(text)) + text + data[8 + n:]
        expect_reason(lambda: read_block(repacked), "meta_checksum_mismatch")
        read_block(data, expected_layout=TINY_LAYOUT)
    r.check("meta_checksum on synth files and the legacy file", meta_checksums)

    gen = generated_cases()
    for name, data in gen.items():
        r.check("reader rejects generated " + name,
                lambda data=data, name=name: expect_reason(
                    lambda: read_block(data), expected["generated"][name]["reason"]))

    # 3. kvtier verify on the same files.
    def verify(paths, extra=()):
        rc, stdout, stderr = r.kvtier("verify", *paths, *extra, "--json")
        return rc, json.loads(stdout) if stdout.strip() else None, stderr

    def verify_valid():
        paths = [os.path.join(CORPUS, "valid", n) for n in sorted(expected["valid"])]
        paths += [p for p, _, _ in synth_files]
        rc, j, err = verify(paths)
        assert rc == 0, (rc, err, j)
        assert [f["ok"] for f in j["files"]] == [True] * len(paths), j
        assert all(f["reason"] is None for f in j["files"])
    r.check("verify accepts valid and synth files", verify_valid)

    def verify_layout():
        tiny = [p for p, _, _ in synth_files if "/tiny/" in p]
        rc, _, err = verify(tiny, ["--layout", "tiny"])
        assert rc == 0, err
        rc, j, _ = verify(tiny[:1], ["--layout", "qwen2.5-0.5b"])
        assert rc == 1 and j["files"][0]["reason"] == "layout_mismatch", j
        rc, j, _ = verify(tiny[:1], ["--key", "00" * 32])
        assert rc == 1 and j["files"][0]["reason"] == "key_mismatch", j
    r.check("verify --layout / --key", verify_layout)

    for name, entry in sorted(expected["hostile"].items()):
        def verify_hostile(name=name, entry=entry):
            extra = []
            if "expected_key" in entry:
                extra += ["--key", entry["expected_key"]]
            if "expected_signature" in entry:
                extra += ["--signature", entry["expected_signature"]]
            if "expected_layout" in entry:
                extra += ["--layout", entry["expected_layout"]]
            rc, j, err = verify([os.path.join(CORPUS, "hostile", name)], extra)
            assert rc == 1, "exit %d (%s)" % (rc, err)
            f = j["files"][0]
            assert f["ok"] is False and f["reason"] == entry["reason"], f
            assert f["message"], f
        r.check("verify rejects hostile/" + name, verify_hostile)

    for name, data in gen.items():
        def verify_generated(name=name, data=data):
            path = os.path.join(work, name + ".safetensors")
            with open(path, "wb") as f:
                f.write(data)
            rc, j, err = verify([path])
            assert rc == 1, err
            assert j["files"][0]["reason"] == expected["generated"][name]["reason"], j
        r.check("verify rejects generated " + name, verify_generated)

    def verify_special_files():
        good = os.path.join(CORPUS, "valid", "tiny_block0.safetensors")
        link = os.path.join(work, "link.safetensors")
        fifo = os.path.join(work, "fifo.safetensors")
        folder = os.path.join(work, "folder.safetensors")
        os.symlink(good, link)
        os.mkfifo(fifo)
        os.mkdir(folder)
        # A folder is walked (issue 33 item 9): an empty one adds no file.
        rc, j, err = verify([good, link, fifo, folder, os.path.join(work, "absent")])
        assert rc == 1, err
        got = [(f["ok"], f["reason"]) for f in j["files"]]
        assert got == [(True, None), (False, "not_regular_file"), (False, "not_regular_file"),
                       (False, "not_found")], got
    r.check("verify refuses symlink, FIFO; walks a folder", verify_special_files)

    def bad_arguments():
        good = os.path.join(CORPUS, "valid", "tiny_block0.safetensors")
        for argv in (["verify", good, "--key", "xyz"],
                     ["verify", good, "--layout", "tiny", "--signature", "s"],
                     ["verify", good, "--layout", "no-such-layout"],
                     ["verify"],
                     ["synth", "--layout", "tiny", "--tokens", "1,2"],
                     ["synth", "--layout", "tiny", "--out", work],
                     ["synth", "--layout", "tiny", "--tokens", "1", "--random", "3", "--out", work],
                     ["synth", "--layout", "tiny", "--tokens", "1,x", "--out", work],
                     ["inspect", os.path.join(work, "absent")]):
            rc, _, err = r.kvtier(*argv)
            assert rc == 2, "%s: exit %d" % (argv, rc)
            assert err.strip() and "\n" not in err.strip(), "%s: %r" % (argv, err)
    r.check("bad arguments exit 2 with a one-line error", bad_arguments)

    def inspect_damaged():
        rc, stdout, _ = r.kvtier("inspect", "--json",
                                 os.path.join(CORPUS, "hostile", "data_bit_flip.safetensors"))
        j = json.loads(stdout)
        assert rc == 1 and j["checksum_ok"] is False and j["reason"] == "checksum_mismatch", j
        rc, stdout, _ = r.kvtier("inspect", "--json",
                                 os.path.join(CORPUS, "hostile", "offsets_gap.safetensors"))
        j = json.loads(stdout)
        assert rc == 1 and j["ok"] is False and j["reason"] == "offsets_gap", j
    r.check("inspect reports damage", inspect_damaged)

    subprocess.run(["rm", "-rf", work])
    print("%d passed, %d failed" % (r.passed, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
