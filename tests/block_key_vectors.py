#!/usr/bin/python3
"""Block key v1 test vectors, computed independently of the C++ code.

A from-scratch implementation of DESIGN.md §3 with hashlib and struct. It
prints the vectors as the Markdown table in docs/block-key.md (default) or as
the C++ table in src/core/block_key_test.cc (--cpp). tests/block_key_test.py
imports ns_key() and block_key() from here to check the CLI.

    /usr/bin/python3 tests/block_key_vectors.py [--cpp]
"""
import hashlib
import struct
import sys

NS_DOMAIN = b"kvtier-ns-v1\x00"
BLK_DOMAIN = b"kvtier-blk-v1\x00"


def tlv(tag, data):
    return bytes([tag]) + struct.pack("<I", len(data)) + data


def ns_key(model, signature, block_tokens, salt=b"", adapter="", extra=b"", shard=""):
    msg = NS_DOMAIN
    msg += tlv(0x01, model.encode("utf-8"))
    msg += tlv(0x02, signature.encode("utf-8"))
    msg += tlv(0x03, struct.pack("<I", block_tokens))
    if salt:
        msg += tlv(0x04, salt)
    if adapter:
        msg += tlv(0x05, adapter.encode("utf-8"))
    if extra:
        msg += tlv(0x06, extra)
    if shard:
        msg += tlv(0x07, shard.encode("utf-8"))
    return hashlib.sha256(msg).digest()


def block_key(parent, block, block_extra=b""):
    msg = BLK_DOMAIN + parent + struct.pack("<I", len(block))
    msg += struct.pack("<%dI" % len(block), *block)
    if block_extra:
        msg += tlv(0x10, block_extra)
    return hashlib.sha256(msg).digest()


def chain(ns, tokens, block_tokens, block_extras=None):
    """Keys of the full blocks; block_extras maps block index -> bytes."""
    keys = []
    parent = ns
    for i in range(len(tokens) // block_tokens):
        extra = (block_extras or {}).get(i, b"")
        parent = block_key(parent, tokens[i * block_tokens:(i + 1) * block_tokens], extra)
        keys.append(parent)
    return keys


TINY_SIG = "kvtier-layout-v1;bt=16;L0-1=attention:keys:F16[2,16,16],values:F16[2,16,16]"
QWEN_SIG = "kvtier-layout-v1;bt=256;L0-23=attention:keys:BF16[2,256,64],values:BF16[2,256,64]"
IMAGE_HASH = hashlib.sha256(b"image-1").digest()

# name, model, signature, block_tokens, salt, adapter, extra, tokens (text),
# per-block extra (block index, bytes) or None, shard (canonical text, "" = none).
VECTORS = [
    ("empty", "m", "s", 4, b"", "", b"", "", None, ""),
    ("basic", "m", "s", 4, b"", "", b"", "1,2,3,4,5,6,7,8,9,10", None, ""),
    ("tiny", "tiny-model", TINY_SIG, 16, b"", "", b"", "1..35", None, ""),
    ("qwen-256", "Qwen/Qwen2.5-0.5B-Instruct", QWEN_SIG, 256, b"", "", b"", "0..599", None, ""),
    ("salt", "m", "s", 4, b"tenant-42", "", b"", "1,2,3,4,5,6,7,8", None, ""),
    ("adapter", "m", "s", 4, b"", "lora-sql-v2", b"", "1,2,3,4,5,6,7,8", None, ""),
    ("ns-extra", "m", "s", 4, b"", "", bytes([0x00, 0xFF, 0x10]), "1,2,3,4,5,6,7,8", None, ""),
    ("block-extra", "m", "s", 4, b"", "", b"", "1,2,3,4,5,6,7,8", (1, IMAGE_HASH), ""),
    ("all-fields", "llama3-8b", "sig", 2, bytes([0x00, 0x01]), "adapter-\u00e9", b"x",
     "4294967295,2147483648,256,1,0,65536", None, ""),
    ("utf8-model", "\u6a21\u578b-\u03b1", "s", 1, b"", "", b"", "7,7,7", None, ""),
    ("shard-tp", "m", "s", 4, b"", "", b"", "1,2,3,4,5,6,7,8", None, "tp=1/2"),
    ("shard-tp-pp-cp", "tiny-model", TINY_SIG, 16, b"", "", b"", "1..35", None,
     "tp=3/8;pp=0/2;cp=1/4"),
    ("shard-mla-pp", "m", "s", 4, b"tenant-42", "", b"", "1,2,3,4,5,6,7,8", None, "pp=1/4"),
]


def parse_tokens(text):
    if not text:
        return []
    if ".." in text:
        a, b = text.split("..")
        return list(range(int(a), int(b) + 1))
    return [int(t) for t in text.split(",")]


def compute(v):
    name, model, sig, bt, salt, adapter, extra, tokens, bextra, shard = v
    ns = ns_key(model, sig, bt, salt, adapter, extra, shard)
    extras = {bextra[0]: bextra[1]} if bextra else None
    return ns, chain(ns, parse_tokens(tokens), bt, extras)


def c_string(s):
    """A C++ string literal; octal escapes (at most 3 digits) are unambiguous."""
    out = '"'
    for b in s.encode("utf-8"):
        if 0x20 <= b < 0x7F and b not in (0x22, 0x5C, 0x3F):
            out += chr(b)
        else:
            out += "\\%03o" % b
    return out + '"'


def print_cpp():
    for v in VECTORS:
        name, model, sig, bt, salt, adapter, extra, tokens, bextra, shard = v
        ns, keys = compute(v)
        print("    {%s, %s," % (c_string(name), c_string(model)))
        print("     %s," % c_string(sig))
        print("     %d, \"%s\", %s, \"%s\", \"%s\", %d, \"%s\", %s," % (
            bt, salt.hex(), c_string(adapter), extra.hex(), tokens,
            bextra[0] if bextra else -1, bextra[1].hex() if bextra else "", c_string(shard)))
        print("     \"%s\"," % ns.hex())
        print("     {%s}}," % ", ".join('"%s"' % k.hex() for k in keys))


def print_markdown():
    for i, v in enumerate(VECTORS, 1):
        name, model, sig, bt, salt, adapter, extra, tokens, bextra, shard = v
        ns, keys = compute(v)
        print("### Vector %d: %s\n" % (i, name))
        print("| input | value |")
        print("|---|---|")
        print("| model_id | `%s` |" % model)
        print("| layout_signature | `%s` |" % sig)
        print("| block_tokens | %d |" % bt)
        print("| salt (hex) | %s |" % (("`%s`" % salt.hex()) if salt else "(empty)"))
        print("| adapter_id | %s |" % (("`%s`" % adapter) if adapter else "(empty)"))
        print("| extra (hex) | %s |" % (("`%s`" % extra.hex()) if extra else "(empty)"))
        print("| shard | %s |" % (("`%s`" % shard) if shard else "(empty)"))
        print("| tokens | %s |" % (("`%s`" % tokens) if tokens else "(none)"))
        if bextra:
            print("| per-block extra | block %d: `%s` |" % (bextra[0], bextra[1].hex()))
        print("\n```")
        print("namespace %s" % ns.hex())
        for j, k in enumerate(keys):
            print("key[%d]    %s" % (j, k.hex()))
        if not keys:
            print("(no keys)")
        print("```\n")


if __name__ == "__main__":
    if "--cpp" in sys.argv[1:]:
        print_cpp()
    else:
        print_markdown()
