#!/usr/bin/python3
"""Writes the block-file test corpus: tests/corpus/valid/ and tests/corpus/hostile/.

Deterministic (same bytes on every run) and independent of the C++ code: it
builds block files from DESIGN.md section 3 (keys, hashlib) and section 4
(format, xxhash), with tensor content from the generator spec in
src/synth/block_generator.h. Run it from anywhere with Debian's python3:

    /usr/bin/python3 tests/corpus/make_corpus.py            # rewrite the corpus
    /usr/bin/python3 tests/corpus/make_corpus.py --check    # exit 1 if it differs
    /usr/bin/python3 tests/corpus/make_corpus.py --vectors  # meta_checksum test vectors

Each hostile file breaks exactly one rule of docs/block-format.md and is
named for it; expected.json maps it to the reason code a reader reports.
Cases too big to commit (65,537 and 1,000,000 tensor entries) and the
symlink/FIFO/folder cases are built by the tests; expected.json lists them
under "generated" (see README.md).
"""

import argparse
import hashlib
import json
import os
import struct
import sys

import xxhash

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------
# Keys (DESIGN.md section 3)


def tlv(tag, data):
    return bytes([tag]) + struct.pack("<I", len(data)) + data


def namespace(model_id, signature, block_tokens):
    h = hashlib.sha256(b"kvtier-ns-v1\0")
    h.update(tlv(0x01, model_id.encode()))
    h.update(tlv(0x02, signature.encode()))
    h.update(tlv(0x03, struct.pack("<I", block_tokens)))
    return h.digest()


def chain(ns, tokens, block_tokens):
    keys, parent = [], ns
    for b in range(len(tokens) // block_tokens):
        block = tokens[b * block_tokens:(b + 1) * block_tokens]
        h = hashlib.sha256(b"kvtier-blk-v1\0" + parent + struct.pack("<I", block_tokens))
        h.update(struct.pack("<%dI" % block_tokens, *block))
        parent = h.digest()
        keys.append(parent)
    return keys


# ---------------------------------------------------------------------------
# Tensor content (src/synth/block_generator.h)

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix(z):
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def tensor_bytes(key, index, size):
    s = 0
    for j in range(4):
        s = mix(s ^ int.from_bytes(key[8 * j:8 * j + 8], "little"))
    s = mix(s ^ (((index + 1) * GOLDEN) & M64))
    words = (size + 7) // 8
    out = b"".join(mix((s + (w + 1) * GOLDEN) & M64).to_bytes(8, "little") for w in range(words))
    return out[:size]


# ---------------------------------------------------------------------------
# JSON text with full control (duplicate keys, raw numbers, key order)


class Obj(list):
    """A JSON object as a list of (key, value) pairs, duplicates allowed."""


class Raw(str):
    """Text inserted verbatim (numbers written oddly, broken tokens)."""


def dumps(v):
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, Obj):
        return "{" + ",".join(dumps(k) + ":" + dumps(x) for k, x in v) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(dumps(x) for x in v) + "]"
    if isinstance(v, bool) or v is None or isinstance(v, (int, float)):
        return json.dumps(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    raise TypeError(type(v))


# ---------------------------------------------------------------------------
# Block files

TINY_SIGNATURE = "kvtier-layout-v1;bt=16;L0-1=attention:keys:F16[2,16,16],values:F16[2,16,16]"
TINY_TENSORS = [("F16", [2, 16, 16])] * 4  # layer 0 keys, values; layer 1 keys, values
CREATED_AT = "1700000000"
DTYPE_SIZE = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8, "I8": 1, "I16": 2, "I32": 4, "I64": 8,
              "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def nbytes(dtype, shape):
    n = DTYPE_SIZE[dtype]
    for d in shape:
        n *= d
    return n


def metadata(key, parent, ns, signature, cache_types, meta_states, data, token_count="16"):
    return Obj([
        ("kvtier_format", "1"),
        ("key", key.hex()),
        ("parent", parent.hex()),
        ("namespace", ns.hex()),
        ("token_count", token_count),
        ("layout_signature", signature),
        ("layer_cache_types", dumps(cache_types)),
        ("layer_meta_states", dumps(meta_states)),
        ("created_at", CREATED_AT),
        ("checksum", "xxh3-128:" + xxhash.xxh3_128_hexdigest(data)),
    ])


def meta_checksum_input(meta, tensors):
    """The bytes meta_checksum covers (DESIGN.md section 4): every metadata
    entry but meta_checksum in bytewise key order as key NUL value NUL, then
    every tensor in file order as name NUL dtype NUL shape NUL begin NUL end NUL
    (shape: decimals joined by ',', empty for a scalar)."""
    out = b""
    for k, v in sorted((k.encode(), v.encode()) for k, v in meta if k != "meta_checksum"):
        out += k + b"\0" + v + b"\0"
    for layer, state, dtype, shape, begin, end in tensors:
        fields = ["layer_%d_state_%d" % (layer, state), dtype, ",".join(str(d) for d in shape),
                  str(begin), str(end)]
        out += b"".join(f.encode() + b"\0" for f in fields)
    return out


def with_tensor_sums(meta, tensors, data):
    """`meta` with tensor_checksums (DESIGN.md section 4) after checksum: a
    JSON array of one xxh3-128 per tensor in file order, over its bytes."""
    sums = ["xxh3-128:" + xxhash.xxh3_128_hexdigest(data[t[4]:t[5]]) for t in tensors]
    return Obj(list(meta) + [("tensor_checksums", dumps(sums))])


def seal(meta, tensors):
    """`meta` with meta_checksum appended (or replaced, in place)."""
    value = "xxh3-128:" + xxhash.xxh3_128_hexdigest(meta_checksum_input(meta, tensors))
    if any(k == "meta_checksum" for k, _ in meta):
        return set_meta(meta, "meta_checksum", value)
    return Obj(list(meta) + [("meta_checksum", value)])


def header_obj(meta, tensors):
    """tensors: list of (layer, state, dtype, shape, begin, end)."""
    pairs = [("__metadata__", meta)]
    for layer, state, dtype, shape, begin, end in tensors:
        pairs.append(("layer_%d_state_%d" % (layer, state),
                      Obj([("dtype", dtype), ("shape", shape), ("data_offsets", [begin, end])])))
    return Obj(pairs)


def pack(header_text, data, pad=True, length=None):
    h = header_text.encode("utf-8") if isinstance(header_text, str) else header_text
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def table(specs, layers_of=None):
    """Contiguous (layer, state, dtype, shape, begin, end) for (dtype, shape) specs,
    two states per layer unless `layers_of` gives (layer, state) per spec."""
    out, off = [], 0
    for i, (dtype, shape) in enumerate(specs):
        layer, state = layers_of[i] if layers_of else (i // 2, i % 2)
        n = nbytes(dtype, shape)
        out.append([layer, state, dtype, shape, off, off + n])
        off += n
    return out


class Tiny:
    """The valid tiny block file, kept as parts so cases can change one thing."""

    def __init__(self, block=0):
        self.ns = namespace("synth", TINY_SIGNATURE, 16)
        keys = chain(self.ns, list(range(32)), 16)
        self.key = keys[block]
        self.parent = self.ns if block == 0 else keys[block - 1]
        self.tensors = table(TINY_TENSORS)
        self.data = b"".join(tensor_bytes(self.key, i, nbytes(d, s))
                             for i, (d, s) in enumerate(TINY_TENSORS))
        self.meta = seal(with_tensor_sums(
            metadata(self.key, self.parent, self.ns, TINY_SIGNATURE, ["attention", "attention"],
                     [[], []], self.data), self.tensors, self.data), self.tensors)

    def header(self):
        return header_obj(self.meta, self.tensors)

    def file(self):
        return pack(dumps(self.header()), self.data)


def set_meta(meta, field, value):
    return Obj([(k, value if k == field else v) for k, v in meta])


def drop_meta(meta, field):
    return Obj([(k, v) for k, v in meta if k != field])


def hybrid_file():
    """A valid file of a mixed layout: sliding window with meta states that need
    escaping, quantized attention (U32 packed + BF16 scales), a mamba layer with
    F32 and F8 arrays."""
    specs = [("F16", [2, 4, 8]), ("F16", [2, 4, 8]),                       # sliding window
             ("U32", [2, 4, 2]), ("BF16", [2, 4, 1]), ("BF16", [2, 4, 1]),  # quantized K
             ("F32", [3, 5]), ("F8_E4M3", [7])]                             # mamba conv, ssm
    where = [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
    signature = ("kvtier-layout-v1;bt=4;L0=sliding_window:keys:F16[2,4,8],values:F16[2,4,8];"
                 "L1=quantized_attention:packed:U32[2,4,2],scales:BF16[2,4,1],"
                 "biases:BF16[2,4,1];L2=mamba:conv:F32[3,5],ssm:F8_E4M3[7]")
    ns = namespace("hybrid-test", signature, 4)
    key = chain(ns, [7, 7, 7, 7], 4)[0]
    tensors = table(specs, where)
    data = b"".join(tensor_bytes(key, i, nbytes(d, s)) for i, (d, s) in enumerate(specs))
    meta = seal(with_tensor_sums(
        metadata(key, ns, ns, signature, ["sliding_window", "quantized_attention", "mamba"],
                 [["window=4", "offset=\"3\"\tµ"], [], ["conv_len=3"]], data,
                 token_count="3"), tensors, data), tensors)
    return pack(dumps(header_obj(meta, tensors)), data)


def hostile_cases():
    """(file name, bytes, expected reason, extra expectations) for each case."""
    t = Tiny()
    good_json = dumps(t.header())
    cases = []

    def add(name, data, reason, **expect):
        cases.append((name + ".safetensors", data, reason, expect))

    def with_tensors(tensors, data=None):
        return pack(dumps(header_obj(t.meta, tensors)), t.data if data is None else data)

    def with_entry(index, entry):
        pairs = list(t.header())
        pairs[index + 1] = (pairs[index + 1][0], entry)
        return pack(dumps(Obj(pairs)), t.data)

    def entry(dtype="F16", shape=(2, 16, 16), offsets=(0, 1024)):
        return Obj([("dtype", dtype), ("shape", shape), ("data_offsets", offsets)])

    def with_meta(meta):
        return pack(dumps(header_obj(meta, t.tensors)), t.data)

    # Sizes and the length prefix.
    add("empty", b"", "file_too_short")
    add("seven_bytes", t.file()[:7], "file_too_short")
    hdr = pack(good_json, b"")
    add("header_len_past_eof", struct.pack("<Q", len(hdr) - 8 + 4096 + 8) + hdr[8:] + t.data,
        "header_past_eof")
    add("header_len_2pow63", struct.pack("<Q", 1 << 63) + t.file()[8:], "header_too_large")
    add("header_len_2pow64_minus_1", struct.pack("<Q", (1 << 64) - 1) + t.file()[8:],
        "header_too_large")
    add("header_len_over_1mib", struct.pack("<Q", (1 << 20) + 8) + t.file()[8:],
        "header_too_large")
    unpadded = good_json.encode()
    if len(unpadded) % 8 == 0:
        unpadded += b" "
    add("header_len_not_multiple_of_8", pack(unpadded, t.data, pad=False), "header_misaligned")

    # Bytes of the header.
    add("header_not_utf8", pack(good_json.replace("\"1700000000\"", "\"17\xff\"")
                                .encode("latin-1"), t.data), "header_not_utf8")
    add("header_overlong_utf8", pack(good_json.encode().replace(b"attention", b"att\xc0\xafntion", 1),
                                     t.data), "header_not_utf8")
    add("header_utf8_surrogate", pack(good_json.encode().replace(b"attention", b"att\xed\xa0\x80n", 1),
                                      t.data), "header_not_utf8")
    add("header_embedded_nul", pack(good_json.encode().replace(b"attention", b"atten\x00ion", 1),
                                    t.data), "header_nul")
    add("header_escaped_nul", with_meta(set_meta(t.meta, "created_at", "17\u0000")), "header_nul")

    # JSON syntax.
    add("json_truncated", pack(good_json[:len(good_json) // 2], t.data), "json_syntax")
    add("json_trailing_junk", pack(good_json + "xyz", t.data), "json_trailing")
    add("json_two_values", pack(good_json + "{}", t.data), "json_trailing")
    add("json_bad_escape", with_meta(set_meta(t.meta, "created_at", Raw("\"17\\x00\""))),
        "json_syntax")
    add("json_lone_surrogate_escape", with_meta(set_meta(t.meta, "created_at", Raw("\"\\ud800\""))),
        "json_syntax")
    add("json_too_deep", with_entry(0, entry(shape=Raw("[[[[2]]]]"))), "json_too_deep")
    add("header_not_object", pack("[1,2]", t.data), "header_not_object")

    # Duplicate keys at every level.
    pairs = list(t.header())
    add("duplicate_tensor_name", pack(dumps(Obj(pairs + [pairs[1]])), t.data), "duplicate_key")
    add("duplicate_metadata", pack(dumps(Obj(pairs + [pairs[0]])), t.data), "duplicate_key")
    add("duplicate_key_in_entry",
        with_entry(0, Obj(list(entry()) + [("dtype", "F16")])), "duplicate_key")
    add("duplicate_key_in_metadata", with_meta(Obj(list(t.meta) + [("key", t.key.hex())])),
        "duplicate_key")

    # Tensor table.
    pairs = list(t.header())
    pairs[1] = ("layer_00_state_0", pairs[1][1])
    add("bad_tensor_name", pack(dumps(Obj(pairs)), t.data), "bad_tensor_name")
    add("bad_tensor_entry_extra_field", with_entry(0, Obj(list(entry()) + [("note", "x")])),
        "bad_tensor_entry")
    add("bad_tensor_entry_not_object", with_entry(0, [1, 2]), "bad_tensor_entry")
    add("unknown_dtype", with_entry(0, entry(dtype="F17")), "unknown_dtype")
    add("shape_negative", with_entry(0, entry(shape=[2, -16, 16])), "bad_shape")
    add("shape_float", with_entry(0, entry(shape=[2, 16.0, 16])), "bad_shape")
    add("shape_string", with_entry(0, entry(shape=[2, "16", 16])), "bad_shape")
    add("shape_zero_dim", with_entry(0, entry(shape=[2, 0, 16])), "bad_shape")
    add("shape_product_overflow", with_entry(0, entry(shape=[1 << 32, 1 << 32, 2])),
        "shape_overflow")
    # 2^31 x 2^32 F16 elements = 2^64 bytes, which wraps to 0 in 64 bits; the
    # offsets and data agree with the wrapped size, so only the overflow check
    # can reject it.
    wrapped = [list(x) for x in t.tensors]
    wrapped[0][3], wrapped[0][5] = [1 << 31, 1 << 32], 0
    for x in wrapped[1:]:
        x[4] -= 1024
        x[5] -= 1024
    add("shape_product_wraps_to_zero", with_tensors(wrapped, t.data[1024:]), "shape_overflow")
    add("bad_offsets_one_value", with_entry(0, entry(offsets=[0])), "bad_offsets")
    add("bad_offsets_negative", with_entry(0, entry(offsets=[-1, 1023])), "bad_offsets")
    # Layer 0 keeps only its state 1: a layer with fewer states would still
    # be dense, a hole at state 0 is not.
    missing = [x for x in t.tensors if not (x[0] == 0 and x[1] == 0)]
    missing = table([(x[2], x[3]) for x in missing], [(x[0], x[1]) for x in missing])
    add("missing_tensor", with_tensors(missing, t.data[1024:]), "missing_tensor")
    add("shape_larger_than_offsets", with_entry(0, entry(shape=[2, 16, 32])),
        "shape_size_mismatch")
    add("shape_smaller_than_offsets", with_entry(0, entry(shape=[2, 16, 8])),
        "shape_size_mismatch")
    rev = [list(x) for x in t.tensors]
    rev[3][4], rev[3][5] = rev[3][5], rev[3][4]
    add("offsets_end_before_begin", with_tensors(rev), "offsets_reversed")
    overlap = [list(x) for x in t.tensors]
    for x in overlap[2:]:
        x[4] -= 512
        x[5] -= 512
    add("offsets_overlap", with_tensors(overlap, t.data[:-512]), "offsets_overlap")
    gap = [list(x) for x in t.tensors]
    for x in gap[2:]:
        x[4] += 8
        x[5] += 8
    add("offsets_gap", with_tensors(gap, t.data[:2048] + b"\0" * 8 + t.data[2048:]), "offsets_gap")
    first = [list(x) for x in t.tensors]
    for x in first:
        x[4] += 16
        x[5] += 16
    add("first_offset_nonzero", with_tensors(first, b"\0" * 16 + t.data), "first_offset_nonzero")
    add("trailing_bytes", t.file() + b"\0" * 8, "trailing_bytes")
    add("data_truncated", t.file()[:-8], "data_truncated")

    # Metadata.
    add("missing_metadata", pack(dumps(Obj(list(t.header())[1:])), t.data), "missing_metadata")
    add("metadata_not_object", pack(dumps(Obj([("__metadata__", ["1"])] + list(t.header())[1:])),
                                    t.data), "metadata_not_strings")
    add("metadata_value_not_string", with_meta(set_meta(t.meta, "token_count", 16)),
        "metadata_not_strings")
    add("unsupported_format", with_meta(set_meta(t.meta, "kvtier_format", "2")),
        "unsupported_format")
    add("metadata_missing_checksum", with_meta(drop_meta(t.meta, "checksum")),
        "metadata_missing_field")
    add("metadata_key_uppercase_hex", with_meta(set_meta(t.meta, "key", t.key.hex().upper())),
        "metadata_bad_field")
    add("metadata_token_count_zero", with_meta(set_meta(t.meta, "token_count", "0")),
        "metadata_bad_field")
    add("metadata_cache_types_wrong_length",
        with_meta(set_meta(t.meta, "layer_cache_types", '["attention"]')), "metadata_bad_field")
    add("metadata_meta_states_not_json",
        with_meta(set_meta(t.meta, "layer_meta_states", "[[],[]")), "metadata_bad_field")
    add("metadata_checksum_bad_prefix",
        with_meta(set_meta(t.meta, "checksum", "xxh64:" + "0" * 32)), "metadata_bad_field")
    sums = json.loads(dict(t.meta)["tensor_checksums"])
    add("metadata_tensor_checksums_short",
        with_meta(seal(set_meta(t.meta, "tensor_checksums", dumps(sums[:3])), t.tensors)),
        "metadata_bad_field")
    add("metadata_tensor_checksums_not_hex",
        with_meta(seal(set_meta(t.meta, "tensor_checksums",
                                dumps(sums[:3] + ["xxh3-128:" + "g" * 32])), t.tensors)),
        "metadata_bad_field")
    add("metadata_tensor_checksums_not_array",
        with_meta(seal(set_meta(t.meta, "tensor_checksums", sums[0]), t.tensors)),
        "metadata_bad_field")

    # Edits to a header that still parses: meta_checksum (DESIGN.md section 4)
    # is the only thing that can tell.
    edited = "meta_checksum_mismatch"
    add("meta_token_count_edited", with_meta(set_meta(t.meta, "token_count", "15")), edited)
    add("meta_meta_states_edited",
        with_meta(set_meta(t.meta, "layer_meta_states", '[["window=4"],[]]')), edited)
    add("meta_created_at_edited", with_meta(set_meta(t.meta, "created_at", "1700000001")), edited)
    add("meta_cache_types_edited",
        with_meta(set_meta(t.meta, "layer_cache_types", '["attention","mamba"]')), edited)
    add("meta_parent_edited", with_meta(set_meta(t.meta, "parent", t.key.hex())), edited)
    add("meta_extra_field_added", with_meta(Obj(list(t.meta) + [("note", "x")])), edited)
    add("meta_tensor_checksums_edited",
        with_meta(set_meta(t.meta, "tensor_checksums", dumps(sums[1:2] + sums[1:]))), edited)
    reshaped = [list(x) for x in t.tensors]
    reshaped[0][3] = [4, 8, 16]  # the same 1024 bytes seen as another shape
    add("meta_tensor_shape_edited", with_tensors(reshaped), edited)
    add("meta_checksum_wrong", with_meta(set_meta(t.meta, "meta_checksum", "xxh3-128:" + "0" * 32)),
        edited)
    add("meta_checksum_uppercase_hex",
        with_meta(set_meta(t.meta, "meta_checksum",
                           dict(t.meta)["meta_checksum"].upper().replace("XXH3-128", "xxh3-128"))),
        "metadata_bad_field")
    add("meta_checksum_garbled", with_meta(set_meta(t.meta, "meta_checksum", "xxh3-128:zz")),
        "metadata_bad_field")
    # Resealed edits pass the checksum; the reader's layout catches them.
    add("layout_cache_types_differ",
        with_meta(seal(set_meta(t.meta, "layer_cache_types", '["attention","mamba"]'), t.tensors)),
        "layout_mismatch", layout="tiny")
    add("layout_token_count_above_block",
        with_meta(seal(set_meta(t.meta, "token_count", "17"), t.tensors)),
        "layout_mismatch", layout="tiny")
    add("layout_shape_differs", pack(dumps(header_obj(seal(t.meta, reshaped), reshaped)), t.data),
        "layout_mismatch", layout="tiny")

    # Whole-file checks: expectations and the checksum.
    flipped = bytearray(t.file())
    flipped[-1000] ^= 0x10
    add("data_bit_flip", bytes(flipped), "checksum_mismatch")
    other = Tiny(block=1)
    add("key_mismatch", t.file(), "key_mismatch", key=other.key.hex())
    add("signature_mismatch", t.file(), "signature_mismatch",
        signature=TINY_SIGNATURE.replace("bt=16", "bt=32"))
    return cases


def legacy_file():
    """Tiny block 0 as written before meta_checksum (and tensor_checksums)
    existed: still valid."""
    t = Tiny(0)
    meta = drop_meta(drop_meta(t.meta, "meta_checksum"), "tensor_checksums")
    return pack(dumps(header_obj(meta, t.tensors)), t.data)


def no_tensor_sums_file():
    """Tiny block 0 as written after meta_checksum but before tensor_checksums
    existed: still valid (read whole)."""
    t = Tiny(0)
    return pack(dumps(header_obj(seal(drop_meta(t.meta, "tensor_checksums"), t.tensors),
                                 t.tensors)), t.data)


def valid_files():
    return [("tiny_block0.safetensors", Tiny(0).file()),
            ("tiny_block1.safetensors", Tiny(1).file()),
            ("hybrid.safetensors", hybrid_file()),
            ("tiny_block0_no_meta_checksum.safetensors", legacy_file()),
            ("tiny_block0_no_tensor_checksums.safetensors", no_tensor_sums_file())]


def build():
    """{relative path: bytes} of the whole corpus."""
    out = {}
    expected = {"valid": {}, "hostile": {}}
    for name, data in valid_files():
        out["valid/" + name] = data
        expected["valid"][name] = {"reason": None}
    for name, data, reason, expect in hostile_cases():
        entry = {"reason": reason}
        if "key" in expect:
            entry["expected_key"] = expect["key"]
        if "signature" in expect:
            entry["expected_signature"] = expect["signature"]
        if "layout" in expect:
            entry["expected_layout"] = expect["layout"]
        out["hostile/" + name] = data
        expected["hostile"][name] = entry
    expected["generated"] = {
        "tensors_65537": {"reason": "too_many_tensors",
                          "note": "header {\"0\":0,...,\"65536\":0}, no data; built by the tests"},
        "tensors_1000000": {"reason": "header_too_large",
                            "note": "1,000,000 tiny-layout tensor entries; built by the tests"},
        "symlink": {"reason": "not_regular_file", "note": "CLI only, made at test time"},
        "fifo": {"reason": "not_regular_file", "note": "CLI only, made at test time"},
        "folder": {"reason": "not_regular_file", "note": "CLI only, made at test time"},
    }
    out["expected.json"] = (json.dumps(expected, indent=1, sort_keys=True) + "\n").encode()
    return out


def print_vectors():
    """The meta_checksum test vectors of docs/block-format.md."""
    small_meta = Obj([("b", "2"), ("a", "1"), ("meta_checksum", "ignored")])
    small_tensors = [(0, 0, "F16", [2, 3], 0, 12), (0, 1, "F32", [], 12, 16)]
    t = Tiny(0)
    for name, meta, tensors in (("small", small_meta, small_tensors),
                                ("tiny_block0", t.meta, t.tensors)):
        data = meta_checksum_input(meta, tensors)
        print("%s: %d bytes, xxh3-128:%s" % (name, len(data), xxhash.xxh3_128_hexdigest(data)))
        print("  " + repr(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    ap.add_argument("--vectors", action="store_true",
                    help="print the meta_checksum test vectors and exit")
    args = ap.parse_args()
    if args.vectors:
        print_vectors()
        return 0
    files = build()
    bad = 0
    for rel, data in sorted(files.items()):
        path = os.path.join(HERE, rel)
        if args.check:
            try:
                with open(path, "rb") as f:
                    same = f.read() == data
            except OSError:
                same = False
            if not same:
                print("differs:", rel)
                bad += 1
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    if args.check:
        stale = []
        for sub in ("valid", "hostile"):
            for name in os.listdir(os.path.join(HERE, sub)):
                if sub + "/" + name not in files:
                    stale.append(sub + "/" + name)
        for rel in stale:
            print("not generated:", rel)
        bad += len(stale)
        print("corpus %s" % ("matches" if bad == 0 else "differs"))
        return 1 if bad else 0
    print("wrote %d files under %s" % (len(files), HERE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
