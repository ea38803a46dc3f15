"""The block and header sizes the docs state are what the build writes."""

import os
import re

import numpy as np

import kvtier

# layout: (data bytes, 8 + N, file bytes), as docs/block-format.md's table.
SIZES = {
    "tiny": (4096, 1136, 5232),
    "qwen2.5-0.5b": (3145728, 7392, 3153120),
    "llama3-8b": (33554432, 9856, 33564288),
}


def encoded(name):
    layout = kvtier.Layout(name)
    chain = kvtier.KeyChain("doc-sizes", layout)
    key = chain.keys(range(layout.block_tokens))[0]
    tensors = [np.zeros(t.nbytes, np.uint8) for t in layout.tensors()]
    return layout, kvtier.encode_block(layout, key, chain.namespace, chain.namespace, tensors)


def test_sizes_match_the_build():
    for name, (data, header, total) in SIZES.items():
        layout, block = encoded(name)
        n = int.from_bytes(block[:8], "little")
        assert layout.block_bytes == data, name
        assert 8 + n == header, name
        assert len(block) == total == data + header, name


def test_docs_state_these_sizes(source_dir):
    with open(os.path.join(source_dir, "docs", "block-format.md"), encoding="utf-8") as f:
        fmt = f.read()
    for name, (data, header, total) in SIZES.items():
        row = re.search(r"^\| `%s` \| (\d+)[^|]*\| (\d+) \(N = (\d+)\) \| (\d+) \|$"
                        % re.escape(name), fmt, re.M)
        assert row, name
        assert [int(g) for g in row.groups()] == [data, header, header - 8, total], name
    assert "spaces up to N = %d." % (SIZES["tiny"][1] - 8) in fmt
    with open(os.path.join(source_dir, "docs", "operations.md"), encoding="utf-8") as f:
        ops = f.read()
    for name, (data, header, total) in SIZES.items():
        assert "%d" % header in ops, name
    with open(os.path.join(source_dir, "docs", "c-api.md"), encoding="utf-8") as f:
        assert "(`tiny`: %d bytes)" % SIZES["tiny"][2] in f.read()


def test_pages_state_the_tiny_file_size(source_dir, cli):
    """disk-tier.md, remote-tier.md and replay.md state tiny's block file size
    (issue 33 item 12: they still said 5,024, 5,016 and 4,960): the size
    today, which replay's own blocks have too."""
    import json
    import subprocess
    total = "{:,}".format(SIZES["tiny"][2])
    for page, phrase in (("disk-tier.md", "a %s-byte `tiny` block" % total),
                         ("remote-tier.md", "layout `tiny` (%s-byte block files today;" % total),
                         ("replay.md", "(%s-byte block files today, `block_file_bytes`" % total)):
        with open(os.path.join(source_dir, "docs", page), encoding="utf-8") as f:
            text = " ".join(f.read().split())
        assert phrase in text, page
    trace = os.path.join(source_dir, "tests", "data", "mooncake", "synthetic_trace.jsonl")
    out = subprocess.run([cli, "replay", trace, "--ram-tokens", "100000", "--limit", "5",
                          "--json"], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout)["block_file_bytes"] == SIZES["tiny"][2]


def test_last_error_lifetime_is_what_header_and_docs_say(source_dir):
    """kvtier_last_error(): the header and docs/c-api.md say the same as the
    code does (issue 33 item 12): the text stays until the next failing call
    on the thread; calls that succeed leave it alone."""
    import ctypes
    # By its soname: in a wheel (scripts/wheels) libkvtier_c.so is a linker script.
    lib = ctypes.CDLL(os.path.join(os.environ["KVTIER_BUILD_DIR"], "libkvtier_c.so.0"))
    lib.kvtier_last_error.restype = ctypes.c_char_p
    cache = ctypes.c_void_p()
    assert lib.kvtier_cache_open(b"{not json", ctypes.byref(cache)) != 0
    failed = lib.kvtier_last_error()
    assert failed.startswith(b"kvtier_cache_open"), failed
    sig = ctypes.create_string_buffer(4096)
    n = ctypes.c_size_t()
    assert lib.kvtier_layout_signature(b"tiny", sig, 4096, ctypes.byref(n)) == 0
    assert lib.kvtier_last_error() == failed
    with open(os.path.join(source_dir, "include", "kvtier", "kvtier_c.h"), encoding="utf-8") as f:
        header = " ".join(w for w in f.read().split() if w != "*")  # comment lines joined
    assert ("its text stays until the next failing call on this thread (calls that succeed "
            "leave it alone)") in header
    with open(os.path.join(source_dir, "docs", "c-api.md"), encoding="utf-8") as f:
        doc = " ".join(f.read().split())
    assert ("stays until the next failing call on that thread (calls that succeed leave it "
            "alone;") in doc
