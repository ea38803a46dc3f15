"""The deterministic figures of README.md and docs/ are what the build
produces (issue 33 item 12). Each test reads the figure from the page (a
table row, a code block, a phrase) and compares it with what the build
gives for the same input, so that a change on either side fails here.
Measured figures (speeds, times) are left to the pages; these are the
sizes, counts, defaults, messages and example outputs that a fixed input
always gives: layouts.md's preset tables, examples, signatures, messages
and limits; block-format.md's example header, meta_checksum and XXH3
vectors, corpus count and verify's JSON; block-key.md's note and JSON;
c-api.md's codes, version, nesting and error-length limits and test
counts; the options tables of disk-tier.md, tiers.md, remote-tier.md and
options.md against the headers' defaults; verify's and the folder
messages of disk-tier.md and operations.md; allocated bytes on tmpfs;
sizes derived from the presets (Redis parts and memory, prefix sizes);
replay.md's trace counts, table columns and messages; the README's demo
model lines; the partial-restore table of tiers.md; the flags of every
`kvtier ...` line shown. Elsewhere: the block tables' sizes in
test_doc_sizes.py, the README's examples in test_readme.py, the chat
example's output in test_example.py, the trace's hit ratios in
tests/replay_test.py and tests/replay_sweep_test.py, the block key vectors
in src/core/block_key_test.cc. About 10 s in the ASan build."""

import ctypes
import functools
import json
import logging
import os
import pty
import re
import subprocess
import time

import xxhash

import kvtier


def read(source_dir, *parts):
    with open(os.path.join(source_dir, *parts), encoding="utf-8") as f:
        return f.read()


def flat(text):
    """The text with every run of whitespace one space (wrapped lines joined)."""
    return " ".join(text.split())


def table(text, header):
    """The rows (lists of cells, stripped) of the Markdown table whose header
    line starts with `header`."""
    lines = text[text.index(header):].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    assert rows, header
    return rows


@functools.lru_cache(maxsize=None)
def file_bytes(layout):
    """Layout(layout).block_file_bytes (encodes a block: worth keeping)."""
    return kvtier.Layout(layout).block_file_bytes


def first_int(cell):
    return int(re.match(r"\**([\d,]+)", cell).group(1).replace(",", ""))


# --- Layouts ------------------------------------------------------------------


def test_layout_preset_tables(source_dir):
    """docs/layouts.md's two preset tables, the presets the README, c-api.md
    and `kvtier options` name, and the sizes derived from them elsewhere."""
    text = read(source_dir, "docs", "layouts.md")
    for name, layers, heads, head_dim, dtype, bt, block in table(text, "| name | layers | KV"):
        layout = kvtier.Layout(name.strip("`"))
        tensors = layout.tensors()
        assert layout.num_layers == int(layers), name
        assert layout.block_tokens == int(bt), name
        assert layout.block_bytes == first_int(block), name
        assert [t.role for t in tensors] == ["keys", "values"] * int(layers), name
        for t in tensors:
            assert (t.dtype, t.shape) == (dtype, (int(heads), int(bt), int(head_dim))), name
    for name, config, layers, block in table(text, "| name | model and config |"):
        layout = kvtier.Layout(name.strip("`"))
        assert layout.block_bytes == first_int(block), name
        assert layout.num_layers == int(re.search(r"`num_hidden_layers` (\d+)", config).group(1))
        # Every "DTYPE `[a, T, b]`" of the layers cell is a tensor of the preset.
        shapes = {(t.dtype, t.shape) for t in layout.tensors()}
        named = re.findall(r"\b([A-Z]+\d*) `\[([\dT, ]+)\]`", layers)
        assert named, name
        for dtype, dims in named:
            shape = tuple(layout.block_tokens if d.strip() == "T" else int(d) for d in
                          dims.split(","))
            assert (dtype, shape) in shapes, (name, dtype, shape)
        types = [t.cache_type for t in layout.tensors() if t.state == 0]
        if name == "`gpt-oss-20b`":
            m = re.search(r"even layers `(\w+)` with `window` (\d+), odd layers `(\w+)`", layers)
            assert types == [m.group(1), m.group(3)] * (len(types) // 2)
            assert "%s{window=%s}" % (m.group(1), m.group(2)) in layout.signature
        elif name == "`qwen3-next-80b`":
            m = re.search(r"layers 3, 7, \.\.\., (\d+) `(\w+)` .*the other (\d+) `(\w+)`", layers)
            assert [i for i, t in enumerate(types) if t == m.group(2)] == list(
                range(3, int(m.group(1)) + 1, 4))
            assert types.count(m.group(4)) == int(m.group(3)) == len(types) - len(
                range(3, int(m.group(1)) + 1, 4))
        else:
            m = re.search(r"(\d+) `(\w+)` layers, `quantization` \{(\w+), (\d+), (\d+)\}", layers)
            assert types == [m.group(2)] * int(m.group(1))
            assert "%s{quant=%s,bits=%s,group=%s}" % m.group(2, 3, 4, 5) in layout.signature
    m = re.search(r"`tiny` at (\d+) tokens is (\d+) bytes", flat(text))
    assert kvtier.Layout("tiny", int(m.group(1))).block_bytes == int(m.group(2))

    presets = kvtier.Layout.presets()
    readme = flat(read(source_dir, "README.md"))
    listed = re.search(r"Layout presets: (.*?), or any `FILE.json`", readme).group(1)
    assert re.findall(r"`([^`]+)`", listed) == presets
    capi = read(source_dir, "docs", "c-api.md")
    row = next(r for r in table(capi, "| name | type | meaning |") if r[0] == "`layout`")
    assert re.findall(r"`([^`]+)`", row[2].split(")")[0]) == presets
    doc = next(o for o in kvtier.options() if o["name"] == "layout")["doc"]
    assert re.findall(r"`([^`]+)`", doc.split(")")[0]) == presets

    # docs/operations.md: the formula and the sizes it gives.
    ops = flat(read(source_dir, "docs", "operations.md"))
    for name, tokens, mib in re.findall(r"`([\w.-]+)` at (\d+) tokens is (\d+) MiB per block",
                                        ops):
        layout = kvtier.Layout(name, int(tokens))
        t = layout.tensors()[0]
        size = layout.num_layers * 2 * t.shape[0] * int(tokens) * t.shape[2] * (
            t.nbytes // (t.shape[0] * t.shape[1] * t.shape[2]))
        assert size == layout.block_bytes == int(mib) << 20, name
    m = re.search(r"at (\d+)-token blocks of `([\w.-]+)` \((\d+) MiB\), ([\d,]+) tokens are "
                  r"([\d,]+) blocks, about (\d+) GiB", ops)
    layout = kvtier.Layout(m.group(2))
    blocks = -(-int(m.group(4).replace(",", "")) // int(m.group(1)))
    assert layout.block_tokens == int(m.group(1)) and layout.block_bytes == int(m.group(3)) << 20
    assert blocks == int(m.group(5).replace(",", ""))
    assert round(blocks * layout.block_bytes / (1 << 30)) == int(m.group(6))

    # docs/c-api.md: "`tiny`: 4 tensors of F16 `[2,16,16]`, 1024 bytes each".
    m = re.search(r"`tiny`: (\d+) tensors of (\w+) `\[([\d,]+)\]`, (\d+) bytes each", flat(capi))
    tiny = kvtier.Layout("tiny").tensors()
    assert len(tiny) == int(m.group(1))
    for t in tiny:
        assert (t.dtype, list(t.shape), t.nbytes) == (
            m.group(2), [int(x) for x in m.group(3).split(",")], int(m.group(4)))


def test_layout_examples(source_dir):
    """docs/layouts.md: each JSON example is its docs/examples file, with the
    block size, signature and rescaling the page states; the error
    messages, dtype names and limits it gives."""
    text = read(source_dir, "docs", "layouts.md")
    examples = os.path.join(source_dir, "docs", "examples")
    shown = []  # (JSON text, the file the page says it is: named after it, else before it)
    for m in re.finditer(r"```json\n(.*?)```\n", text, re.S):
        after = re.match(r"\n(?:This is |\()`docs/examples/([\w.-]+)`", text[m.end():])
        before = re.findall(r"`docs/examples/([\w.-]+)`", text[:m.start()].split("\n\n")[-2])
        shown.append((m.group(1), after.group(1) if after else before[-1]))
    assert sorted(f for _, f in shown) == sorted(
        f for f in os.listdir(examples) if f != "features.json")
    for body, name in shown:
        with open(os.path.join(examples, name), encoding="utf-8") as f:
            assert json.loads(body) == json.load(f), name
    path = lambda name: os.path.join(examples, name)  # noqa: E731
    assert kvtier.Layout(path("llama3-8b.json")).signature == kvtier.Layout("llama3-8b").signature
    m = re.search(r"\(`docs/examples/quantized.json`, (\d+) bytes a block", text)
    assert kvtier.Layout(path("quantized.json")).block_bytes == int(m.group(1))
    m = re.search(r"(\d+) bytes\s+a block at (\d+) tokens. With `--block-tokens (\d+)`", text)
    hybrid = kvtier.Layout(path("hybrid.json"))
    assert (hybrid.block_bytes, hybrid.block_tokens) == (int(m.group(1)), int(m.group(2)))
    doubled = kvtier.Layout(path("hybrid.json"), int(m.group(3)))
    for a, b in zip(hybrid.tensors(), doubled.tensors()):  # "the Mamba state does not"
        assert b.nbytes == (a.nbytes if a.cache_type == "mamba" else 2 * a.nbytes), a.name
    m = re.search(r"\((\d+)\s+bytes a block at (\d+) tokens\); its signature carries both "
                  r"features:\n\n```\n(.*?)\n```", text)
    features = kvtier.Layout(path("features.json"))
    assert (features.block_bytes, features.block_tokens) == (int(m.group(1)), int(m.group(2)))
    assert features.signature == m.group(3)
    examples_block = text[text.index("Examples:\n\n```\n"):]
    examples_block = examples_block[:examples_block.index("\n```\n", 14)]
    pairs = re.findall(r"^([\w./-]+):\n(kvtier-layout-v1;\S+)$", examples_block, re.M)
    assert len(pairs) == 4
    for name, signature in pairs:
        layout = name if "/" not in name else os.path.join(source_dir, name)
        assert kvtier.layout_signature(layout) == signature, name

    # The error messages of the schema section, from layouts that break them.
    attention = {"cache_type": "attention",
                 "states": [{"role": "keys", "dtype": "F16", "shape": [2, "T", 16]}]}
    bad = {"block_tokens": 16, "layers": [attention, {"cache_type": "attention", "states": [
        {"role": "keys", "dtype": "F17", "shape": [2, "T", 16]}]}]}
    m = re.search(r"`(layout JSON: layers\[1\]\.states\[0\]\.dtype: unknown dtype 'F17' "
                  r"\(known: )\.\.\.\)`", text)
    try:
        kvtier.Layout.from_json(json.dumps(bad))
        raise AssertionError("F17 accepted")
    except kvtier.InvalidArgument as e:
        assert str(e).startswith(m.group(1)), e
        known = str(e)[len(m.group(1)):-1].split(", ")
    # The fifteen dtype names, as block-format.md and layouts.md list them.
    names = re.search(r"exact case: `([A-Z0-9_ ]+)`", text).group(1).split()
    assert names == known and len(names) == 15
    fmt = flat(read(source_dir, "docs", "block-format.md"))
    assert re.search(r"`dtype` is a safetensors name: `([A-Z0-9_ ]+)`", fmt).group(1).split() \
        == names
    assert "the dtype is one of the fifteen names" in fmt

    # Limits: 4096 layers and 4096 state tensors in all, `repeat` 1..4096.
    m = re.search(r"after `repeat` expansion at most (\d+) layers", text)
    limit = int(m.group(1))
    assert "at most %d layers and %d state tensors in all" % (limit, limit) in flat(text)
    assert "| `repeat` | integer 1..%d |" % limit in text
    one = {"cache_type": "a", "states": [{"role": "k", "dtype": "U8", "shape": ["T"]}]}
    two = {"cache_type": "b", "states": [{"role": "k", "dtype": "U8", "shape": ["T"]},
                                         {"role": "v", "dtype": "U8", "shape": ["T"]}]}
    assert kvtier.Layout.from_json(json.dumps(
        {"block_tokens": 1, "layers": [dict(one, repeat=limit)]})).num_layers == limit
    for layers, needle in (([dict(one, repeat=limit + 1)], "repeat"),
                           ([dict(one, repeat=limit), one], "more than %d layers" % limit),
                           ([dict(two, repeat=limit // 2 + 1)],
                            "more than %d state tensors" % limit)):
        try:
            kvtier.Layout.from_json(json.dumps({"block_tokens": 1, "layers": layers}))
            raise AssertionError(needle)
        except kvtier.InvalidArgument as e:
            assert needle in str(e), e


# --- Block files -------------------------------------------------------------


NUL = "\u2400"  # how block-format.md writes a 0x00 byte


def header_of(block):
    n = int.from_bytes(block[:8], "little")
    return n, json.loads(block[8:8 + n])


def meta_bytes(header):
    """The byte string meta_checksum covers (block-format.md §2)."""
    out = b""
    meta = header["__metadata__"]
    for k in sorted(k for k in meta if k != "meta_checksum"):
        out += k.encode() + b"\0" + meta[k].encode() + b"\0"
    for name, t in ((k, v) for k, v in header.items() if k != "__metadata__"):
        out += b"\0".join([name.encode(), t["dtype"].encode(),
                           ",".join(map(str, t["shape"])).encode(),
                           str(t["data_offsets"][0]).encode(),
                           str(t["data_offsets"][1]).encode()]) + b"\0"
    return out


def matches(shown, value):
    """`shown` is `value` with "…" standing for elided characters."""
    return re.fullmatch(".*".join(re.escape(p) for p in shown.split("\u2026")), value,
                        re.S) is not None


def test_block_format_example_and_vectors(source_dir, cli, tmp_path):
    """block-format.md §2: the example header ("tiny layout, first block of
    tokens 0..15 with model id `synth`") is the one `kvtier synth` writes,
    given its created_at; the meta_checksum vectors and the XXH3 examples."""
    text = read(source_dir, "docs", "block-format.md")
    m = re.search(r"Example \(tiny layout, first block of tokens (\d+)\.\.(\d+) with model id "
                  r"`(\w+)`\):\n\n```\n(.*?)\n```", text, re.S)
    tokens = range(int(m.group(1)), int(m.group(2)) + 1)
    shown = m.group(4).replace("\n ", "")  # "wrapped here; the file holds one line"
    subprocess.run([cli, "synth", "--layout", "tiny", "--model", m.group(3), "--tokens",
                    ",".join(map(str, tokens)), "--out", str(tmp_path)], check=True,
                   capture_output=True)
    layout = kvtier.Layout("tiny")
    chain = kvtier.KeyChain(m.group(3), layout)
    key = chain.keys(tokens)[0]
    with open(tmp_path / (key.hex() + ".safetensors"), "rb") as f:
        written = f.read()
    n, header = header_of(written)
    # synth stamps the time; the example's created_at gives the example's bytes.
    created_at = int(re.search(r'"created_at":"(\d+)"', shown).group(1))
    data = written[8 + n:]
    tensors = [data[t["data_offsets"][0]:t["data_offsets"][1]] for k, t in header.items()
               if k != "__metadata__"]
    block = kvtier.encode_block(layout, key, chain.namespace, chain.namespace, tensors,
                                created_at=created_at)
    n, header = header_of(block)
    assert block[8 + n:] == data
    assert matches(shown, block[8:8 + n].decode().rstrip(" ")), shown
    meta = header["__metadata__"]
    assert meta["key"] == key.hex() and meta["parent"] == chain.namespace.hex()

    # The vector "the example file below: the 827 bytes ... hash to ...".
    m = re.search(r"the example file below: the (\d+) bytes\n\s*`([^`]+)`\n\s*hash to "
                  r"`xxh3-128:([0-9a-f]{32})`", text)
    covered = meta_bytes(header)
    assert len(covered) == int(m.group(1))
    assert matches(m.group(2).replace(NUL, "\0"), covered.decode())
    assert meta["meta_checksum"] == "xxh3-128:" + m.group(3)
    assert xxhash.xxh3_128_hexdigest(covered) == m.group(3)

    # The vector of two fields and two tensors, from its description.
    m = re.search(r"metadata `(\{.*?\})` and the tensors\s+`(\w+)` (\w+) `\[([\d,]*)\]` at "
                  r"`\[(\d+),(\d+)\)` and `(\w+)` (\w+) `\[\]`\s+\(a scalar\) at "
                  r"`\[(\d+),(\d+)\)`: "
                  r"the (\d+) bytes\s+`([^`]+)`\s+\(\S+ = 0x00\) hash to "
                  r"`xxh3-128:([0-9a-f]{32})`", text)
    fields = json.loads(m.group(1).replace("\u2026", '""'))
    header = {"__metadata__": fields,
              m.group(2): {"dtype": m.group(3), "shape": [int(x) for x in m.group(4).split(",")],
                           "data_offsets": [int(m.group(5)), int(m.group(6))]},
              m.group(7): {"dtype": m.group(8), "shape": [],
                           "data_offsets": [int(m.group(9)), int(m.group(10))]}}
    covered = meta_bytes(header)
    assert covered == m.group(12).replace(NUL, "\0").encode()
    assert len(covered) == int(m.group(11))
    assert xxhash.xxh3_128_hexdigest(covered) == m.group(13)

    # "XXH3-128 of the 6 bytes `kvtier` is ..., and of no bytes ...": the
    # checksum field of a block whose data section is those 6 bytes.
    m = re.search(r"XXH3-128 of the (\d+) bytes `(\w+)` is\s+`([0-9a-f]{32})`, and of no bytes\s+"
                  r"`([0-9a-f]{32})`", text)
    assert len(m.group(2)) == int(m.group(1))
    six = kvtier.Layout.from_json(json.dumps({"block_tokens": 1, "layers": [
        {"cache_type": "x", "states": [{"role": "r", "dtype": "U8", "shape": [6]}]}]}))
    chain = kvtier.KeyChain("m", six)
    key = chain.keys([1])[0]
    _, header = header_of(kvtier.encode_block(six, key, chain.namespace, chain.namespace,
                                              [m.group(2).encode()]))
    assert header["__metadata__"]["checksum"] == "xxh3-128:" + m.group(3)
    assert xxhash.xxh3_128_hexdigest(b"") == m.group(4)


def test_block_format_corpus_and_reasons(source_dir):
    """block-format.md §3 and §5: the hostile corpus's file count, and every
    reason the corpus expects is a reason the page lists."""
    text = read(source_dir, "docs", "block-format.md")
    m = re.search(r"`tests/corpus/hostile/` holds one file per rule broken \((\d+) files", text)
    hostile = os.listdir(os.path.join(source_dir, "tests", "corpus", "hostile"))
    with open(os.path.join(source_dir, "tests", "corpus", "expected.json"), encoding="utf-8") as f:
        expected = json.load(f)
    assert len(hostile) == len(expected["hostile"]) == int(m.group(1))
    rules = table(text, "| # | rule | reason |")
    assert [int(r[0]) for r in rules] == list(range(1, len(rules) + 1))
    listed = {r[2].strip("`") for r in rules}
    outside = flat(text[text.index("## 4. Reasons outside the file"):])
    listed |= set(re.findall(r"`(\w+)`", outside[:outside.index("Its JSON output")]))
    reasons = {v["reason"] for part in ("hostile", "generated") for v in expected[part].values()}
    assert reasons <= listed, reasons - listed


# --- Keys, the C API, versions -----------------------------------------------


def test_key_command_note_and_json(source_dir, cli):
    """block-key.md: the note on tokens that fill no block, `--json`'s
    fields, and the lengths of the two domain strings."""
    text = flat(read(source_dir, "docs", "block-key.md"))
    m = re.search(r"\(`(kvtier: note: the last (\d+) of (\d+) tokens fill no block of (\d+) and "
                  r"get no key)`\)", text)
    last, total, bt = (int(g) for g in m.group(2, 3, 4))
    tokens = ",".join(str(t) for t in range(1, total + 1))
    out = subprocess.run([cli, "key", "--model", "m", "--layout", "tiny", "--block-tokens",
                          str(bt), "--tokens", tokens, "--json"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr == m.group(1) + "\n", out.stderr
    assert last == total % bt
    fields = re.search(r"`--json` prints `\{([^}]*)\}`", text).group(1)
    keys = json.loads(out.stdout)
    assert sorted(keys) == sorted(re.findall(r'"(\w+)":', fields))
    assert len(keys["keys"]) == total // bt
    for domain, n in re.findall(r"`(kvtier-\w+-v1)\\0` is (\d+) bytes", text):
        assert len(domain.encode() + b"\0") == int(n), domain
    m = re.search(r"For (\d+)-token blocks the hashed message is (\d+) \+ (\d+) \+ (\d+) \+ "
                  r"(\d+) = (\d+) bytes", text)
    bt, domain, parent, count, tok, total = (int(g) for g in m.groups())
    assert (domain, parent, count, tok) == (len(b"kvtier-blk-v1\0"), 32, 4, 4 * bt)
    assert domain + parent + count + tok == total


def c_library():
    # By its soname: in a wheel (scripts/wheels) libkvtier_c.so is a linker script.
    lib = ctypes.CDLL(os.path.join(os.environ["KVTIER_BUILD_DIR"], "libkvtier_c.so.0"))
    for name in ("kvtier_last_error", "kvtier_version", "kvtier_error_name"):
        getattr(lib, name).restype = ctypes.c_char_p
    return lib


def test_c_api_codes_version_and_limits(source_dir, cli, tmp_path):
    """c-api.md: the error codes table (kvtier_c.h's values and
    kvtier_error_name's names), the version every page names, the options
    JSON's nesting limit (and python.md's for config files), and the
    length bound of kvtier_last_error()."""
    capi = read(source_dir, "docs", "c-api.md")
    header = read(source_dir, "include", "kvtier", "kvtier_c.h")
    lib = c_library()
    rows = table(capi, "| code | value | when |")
    for code, value, _ in rows:
        name = code.strip("`")
        assert re.search(r"\b%s = %s\b" % (name, value), header), name
        assert lib.kvtier_error_name(int(value)).decode() == name[len("KVTIER_E_"):]
    assert [int(r[1]) for r in rows] == list(range(1, len(rows) + 1))
    version = re.search(r'`"CORRUPTION"` etc\.; `"([\d.]+)"`', capi).group(1)
    assert lib.kvtier_version().decode() == version == kvtier.__version__
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True)
    assert version in out.stdout.split()
    for page in ("README.md", os.path.join("docs", "python.md")):
        named = re.findall(r"kvtier[-_](\d+\.\d+\.\d+)[-_.]", read(source_dir, page))
        assert named and set(named) == {version}, page

    # "JSON nested deeper than 32 levels ... KVTIER_E_INVALID_ARGUMENT".
    limit = int(re.search(r"JSON nested deeper than (\d+)\s+levels", capi).group(1))
    python = flat(read(source_dir, "docs", "python.md"))
    assert int(re.search(r"may nest at most (\d+) levels", python).group(1)) == limit

    def nested(levels):  # an object whose member nests lists to `levels` in all
        value = 1
        for _ in range(levels - 1):
            value = [value]
        return {"layout": "tiny", "host_bytes": 1 << 20, "remote_mac_keys": value}

    cache = ctypes.c_void_p()
    deep = "nested deeper than %d levels" % limit
    for levels, refused in ((limit, False), (limit + 1, True)):
        rc = lib.kvtier_cache_open(json.dumps(nested(levels)).encode(), ctypes.byref(cache))
        assert rc == 3  # a list is no key file either way; the message says which
        assert (deep in lib.kvtier_last_error().decode()) == refused, levels
        path = tmp_path / ("nested-%d.json" % levels)
        path.write_text(json.dumps(nested(levels)))
        try:
            kvtier.Cache.from_config(str(path))
            raise AssertionError(levels)
        except kvtier.InvalidArgument as e:
            assert (deep in str(e)) == refused, levels

    # "kvtier_last_error() is per thread, never NULL, at most 1023 bytes".
    most = int(re.search(r"never NULL, at most (\d+) bytes", flat(capi)).group(1))
    long_path = "/nonexistent/" + "d" * (2 * most) + ".json"
    assert lib.kvtier_cache_open(json.dumps({"config": long_path}).encode(),
                                 ctypes.byref(cache)) == 1
    assert len(lib.kvtier_last_error()) == most


WORDS = {"twenty": 20, "twenty-eight": 28, "three": 3}


def test_c_api_test_counts(source_dir):
    """c-api.md's "Tests" counts the cases of the C tests it describes."""
    text = flat(read(source_dir, "docs", "c-api.md"))
    m = re.search(r"([\w-]+) kinds of bad options JSON \((\w+) of them bad `remote` values", text)
    source = read(source_dir, "src", "capi", "c_api_test.c")
    body = source[source.index("kCases[] = {"):]
    body = body[:body.index("};")]
    cases = re.findall(r'^\s+\{"(.*?)",\s+KVTIER_E_\w+,\s+"([^"]*)"\}', body, re.M | re.S)
    assert len(cases) == WORDS[m.group(1)] == len(re.findall(r'^\s{6}\{"', body, re.M))
    assert len([n for _, n in cases if re.match(r"remote\b(?!_)", n)]) == WORDS[m.group(2)]
    m = re.search(r"and (\w+) bad\s+namespaces", text)
    source = read(source_dir, "src", "capi", "c_codec_test.c")
    body = source[source.index("kBad[] = {"):]
    body = body[:body.index("};")]
    assert len(re.findall(r'^\s{6}\{"', body, re.M)) == WORDS[m.group(1)]


# --- Option defaults -----------------------------------------------------------


def header_defaults(source_dir, header, struct):
    """{field: value} of the members of `struct` in include/kvtier/`header`
    that have a default initializer: integers, floats, bools, enum
    values (their name) and strings."""
    text = read(source_dir, "include", "kvtier", header)
    body = text[text.index("struct %s {" % struct):]
    body = body[:body.index("\n};")]
    out = {}
    for name, expr in re.findall(r"^  [\w:<>]+ (\w+) = (.+);", body, re.M):
        expr = expr.split("//")[0].strip()
        if expr in ("true", "false"):
            out[name] = expr == "true"
        elif expr.startswith('"'):
            out[name] = json.loads(expr)
        elif "::" in expr:
            out[name] = expr.split("::")[-1]
        else:
            expr = re.sub(r"u?int\d+_t\{(\d+)\}", r"\1", expr.replace("'", ""))
            expr = re.sub(r"(\d)(ull|ul|u)\b", r"\1", expr)
            expr = re.sub(r"\b0(\d+)\b", r"0o\1", expr)  # C octal: file modes
            assert re.fullmatch(r"[\d.xo <*+()-]+", expr), (name, expr)
            out[name] = eval(expr)  # digits and operators only (checked above)
    return out


UNITS = {"µs": 1e-6, "ms": 1e-3, "s": 1, "h": 3600, "days": 86400, "B": 1, "KiB": 1 << 10,
         "MiB": 1 << 20, "GiB": 1 << 30, "MiB/s": 1 << 20}


def doc_value(cell, field):
    """The value a table cell gives for `field`, in the field's own unit (its
    name's suffix: _micros, _ms, _seconds, bytes), or None for a cell that
    names no value ("required", "none", ...)."""
    cell = cell.strip("`* ")
    if cell in ("true", "false"):
        return cell == "true"
    if re.fullmatch(r"k[A-Z]\w*", cell):
        return cell
    if re.fullmatch(r"[\w:]+:", cell):  # a key prefix
        return cell
    m = re.match(r"(\d[\d.]*)(?: ?(µs|ms|s|h|days|KiB|MiB|GiB|MiB/s)\b)?", cell)
    if not m:
        return None
    if re.fullmatch(r"0[0-7]+", m.group(1)):
        return int(m.group(1), 8)
    number = float(m.group(1)) if "." in m.group(1) else int(m.group(1))
    unit = m.group(2)
    if unit is None:
        return number
    scale = UNITS[unit]
    if field.endswith("_micros"):
        scale /= 1e-6
    elif field.endswith("_ms"):
        scale /= 1e-3
    value = number * scale
    assert value == int(value), (cell, field)
    return int(value)


def check_defaults(rows, defaults):
    """Every row of an options table whose field has a default in the
    header states that default; a row whose field has one must name a
    value."""
    compared = 0
    for row in rows:
        cell = row[1] if len(row) == 3 else row[2]
        fields = re.findall(r"`([\w.]+)`", row[0])
        for field in fields:
            if field in defaults:
                assert doc_value(cell, field) == defaults[field], (field, row, defaults[field])
                compared += 1
        if not any(f in defaults for f in fields):  # no initializer: no value either
            assert doc_value(cell, "") is None, row
    return compared


def test_option_tables_state_the_headers_defaults(source_dir):
    """The options tables of disk-tier.md, tiers.md and remote-tier.md, and
    the defaults operations.md repeats, are the default initializers of
    DiskTierOptions, CacheOptions, HostTierOptions and RemoteTierOptions."""
    disk = header_defaults(source_dir, "disk_tier.h", "DiskTierOptions")
    rows = table(read(source_dir, "docs", "disk-tier.md"), "| field | unit | default | effect |")
    assert check_defaults(rows, disk) == len(disk)  # "Every field of DiskTierOptions"

    cache = header_defaults(source_dir, "tiered_cache.h", "CacheOptions")
    host = header_defaults(source_dir, "host_tier.h", "HostTierOptions")
    merged = dict(cache, **{"host." + k: v for k, v in host.items()})
    tiers = read(source_dir, "docs", "tiers.md")
    rows = table(tiers, "| field | default | meaning |")
    assert check_defaults(rows, merged) == 14

    remote = header_defaults(source_dir, "remote_tier.h", "RemoteTierOptions")
    rows = table(read(source_dir, "docs", "remote-tier.md"), "| option | default | effect |")
    assert check_defaults(rows, remote) == len(remote)
    m = re.search(r"within its own `remote\.close_timeout_ms`, default (\d+ \w+)\.", flat(tiers))
    assert doc_value(m.group(1), "close_timeout_ms") == remote["close_timeout_ms"]
    text = flat(read(source_dir, "docs", "remote-tier.md"))
    m = re.search(r"The default prefix is `([^`]+)` and the default `part_bytes` is "
                  r"(\d+ MiB)", text)
    assert m.group(1) == remote["key_prefix"]
    assert doc_value(m.group(2), "part_bytes") == remote["part_bytes"]
    m = re.search(r"`min_reply_rate` \(default (\d+ MiB/s)\)", text)
    assert doc_value(m.group(1), "min_reply_rate") == remote["min_reply_rate"]

    # docs/options.md (generated from the option table): each option whose
    # C++ field is one of these members has that member's default.
    structs = {"CacheOptions": cache, "HostTierOptions": host, "DiskTierOptions": disk,
               "RemoteTierOptions": remote}
    fields = dict((m.group(1), m.group(2, 3)) for m in re.finditer(
        r"^\| `(\w+)` \|.*\| `(\w+)::(\w+)` \|$", read(source_dir, "docs", "options.md"), re.M))
    compared = 0
    for option in kvtier.options():
        struct, member = fields.get(option["name"], (None, None))
        if member not in structs.get(struct, {}) or option["default"].startswith("(required"):
            continue
        want = structs[struct][member]
        if isinstance(want, str) and re.fullmatch(r"k[A-Z]\w*", want):  # write_back: kWriteBack
            got = "k" + "".join(w.capitalize() for w in option["default"].split("_"))
        else:
            got = doc_value(option["default"], member)
        assert got == want, (option["name"], option["default"], want)
        compared += 1
    assert compared >= 50

    ops = flat(read(source_dir, "docs", "operations.md"))
    for member, value in ((host["capacity_bytes"], "HostTierOptions::capacity_bytes"),
                          (disk["max_bytes"], "DiskTierOptions::max_bytes")):
        m = re.search(r"`%s` \(default ([^)]+)\)" % value, ops)
        assert doc_value(m.group(1), "bytes") == member, value
    m = re.search(r"`free_space_fraction` \((\d+)%\)", ops)
    assert int(m.group(1)) / 100 == disk["free_space_fraction"]
    m = re.search(r"\(`commit_batch_bytes`, (\d+ MiB) by default", ops)
    assert doc_value(m.group(1), "bytes") == disk["commit_batch_bytes"]


# --- Cache folders -------------------------------------------------------------


def test_verify_output_and_folder_messages(source_dir, cli, tmp_path):
    """`kvtier verify`'s JSON (block-format.md §4) and last line
    (disk-tier.md), and the messages disk-tier.md and operations.md give for
    an index that is a symlink, a FIFO or no database, and for a row whose
    file is gone: one verify of five folders, one of an empty quarantine."""
    fmt = flat(read(source_dir, "docs", "block-format.md"))
    disk = flat(read(source_dir, "docs", "disk-tier.md"))
    ops = flat(read(source_dir, "docs", "operations.md"))
    cache = tmp_path / "cache"
    subprocess.run([cli, "synth", "--layout", "tiny", "--random", "48", "--cache", str(cache)],
                   check=True, capture_output=True)
    files = sorted(p for p in (cache / "blocks").rglob("*.safetensors"))
    assert len(files) == 3
    files[0].unlink()  # a row whose file is gone, as a killed gc leaves it
    folders = {}
    for kind in ("symlink", "FIFO", "database"):
        folders[kind] = tmp_path / kind
        folders[kind].mkdir()
    (folders["symlink"] / "index.sqlite").symlink_to("/dev/zero")
    os.mkfifo(folders["FIFO"] / "index.sqlite")
    (folders["database"] / "index.sqlite").write_bytes(b"not a database\n")
    out = subprocess.run([cli, "verify", str(cache), *map(str, folders.values()), "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    got = json.loads(out.stdout)
    m = re.search(r'Its JSON output is `\{"files":\[\{([^}]*)\}\],"summary":\{([^}]*)\}\}`, '
                  r"`outcome` being `(\w+)`, `(\w+)` \(.*?\) or `(\w+)`", fmt)
    assert sorted(got) == ["files", "summary"]
    assert sorted(got["summary"]) == sorted(re.findall(r'"(\w+)"', m.group(2)))
    for f in got["files"]:
        assert sorted(f) == sorted(re.findall(r'"(\w+)"', m.group(1)))
        assert f["outcome"] in m.group(3, 4, 5)
    by_path = {f["path"]: f for f in got["files"]}
    assert by_path[str(files[0])]["reason"] == "missing_file"
    assert "`kvtier verify DIR` reports them as `missing_file` failures" in ops
    assert [by_path[str(files[1])]["ok"], by_path[str(files[2])]["ok"]] == [True, True]
    assert got["summary"] == {"files": 6, "ok": 2, "adopt": 0, "failed": 4}
    for kind, page, pattern in (
            ("symlink", disk, r"\(`(index DIR/index\.sqlite is a symlink, not a regular file)`\)"),
            ("FIFO", ops, r"\(`(index DIR/index\.sqlite is a FIFO, not a regular file)`\)"),
            ("database", disk, r"\(`\.\.\. (is not a usable SQLite database) \(\.\.\.\)`\)")):
        shown = re.search(pattern, page).group(1)
        verdict = by_path[str(folders[kind])]
        assert verdict["reason"] == "bad_index"
        if kind == "database":
            assert verdict["message"].startswith(
                "index %s/index.sqlite %s (" % (folders[kind], shown)), verdict
        else:
            assert verdict["message"] == shown.replace("DIR", str(folders[kind])), verdict
    assert "`bad_index` (its message names which)" in fmt

    # "`40 files: 25 ok, 15 to adopt (...), 0 failed`": an empty quarantine
    # folder is walked and exits 0 (operations.md: "exit 0 when it is empty").
    line = re.search(r"counts each outcome: `(\d+ files: \d+ ok, \d+ to adopt \(\.\.\.\), "
                     r"\d+ failed)`", disk).group(1)
    out = subprocess.run([cli, "verify", str(cache / "quarantine")], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    last = out.stdout.splitlines()[-1]
    pattern = re.escape(re.sub(r"\d+", "0", line)).replace(re.escape("(...)"), r"\(.+\)")
    assert re.fullmatch(pattern, last), (line, last)
    assert "`kvtier verify DIR/quarantine`" in ops and "exit 0 when it is empty" in ops


def test_allocated_bytes_of_a_tiny_block(source_dir, small_disk):
    """disk-tier.md: "a 5,232-byte `tiny` block takes 8 KiB on tmpfs or ext4"
    (the tier counts st_blocks × 512): one block on a tmpfs."""
    m = re.search(r"a ([\d,]+)-byte `(\w+)` block takes (\d+) KiB on tmpfs",
                  flat(read(source_dir, "docs", "disk-tier.md")))
    layout = kvtier.Layout(m.group(2))
    assert layout.block_file_bytes == int(m.group(1).replace(",", ""))
    chain = kvtier.KeyChain("doc-figures", layout)
    key = chain.keys(range(layout.block_tokens))[0]
    tensors = [bytes(t.nbytes) for t in layout.tensors()]
    folder = small_disk / "cache"
    with kvtier.Cache(layout, host_bytes=1 << 20, disk_dir=str(folder),
                      write_policy="write_through") as cache:
        cache.store_tensors(key, chain.namespace, chain.namespace, tensors)
        cache.flush()
        disk = cache.stats()["disk"]
        assert (disk["entries"], disk["bytes"]) == (1, layout.block_file_bytes)
        assert disk["allocated_bytes"] == int(m.group(3)) << 10
    path = folder / "blocks" / key.hex()[:2] / (key.hex() + ".safetensors")
    assert os.stat(path).st_blocks * 512 == int(m.group(3)) << 10


# --- Tiers, sizes derived from the layouts ---------------------------------------


def test_tier_sizes_and_messages(source_dir):
    """Sizes tiers.md, remote-tier.md, c-api.md and python.md derive from the
    presets (parts per Redis value, Redis memory, prefix sizes), and the
    option errors tiers.md quotes."""
    remote = flat(read(source_dir, "docs", "remote-tier.md"))
    part = header_defaults(source_dir, "remote_tier.h", "RemoteTierOptions")["part_bytes"]

    def parts(name):
        return -(-file_bytes(name) // part)

    m = re.search(r"a `([\w.-]+)` block \((\d+) MiB\) is one string; a `([\w.-]+)` block "
                  r"\((\d+) MiB\)\s+is (\w+) \((\w+) of (\d+) MiB and a last one of a few KiB\)",
                  remote)
    small, big = kvtier.Layout(m.group(1)), kvtier.Layout(m.group(3))
    assert (small.block_bytes, big.block_bytes) == (int(m.group(2)) << 20, int(m.group(4)) << 20)
    assert parts(m.group(1)) == 1
    assert parts(m.group(3)) == {"nine": 9}[m.group(5)] and m.group(6) == "eight"
    assert int(m.group(7)) << 20 == part
    assert 1024 < file_bytes(m.group(3)) - 8 * part < 16 * 1024  # "a few KiB"
    for name, mib, n in re.findall(r"\| ([\w.-]+) \((\d+) MiB, (\d+) parts?\), \d+ \|", remote):
        assert kvtier.Layout(name).block_bytes == int(mib) << 20 and parts(name) == int(n)
    # "Each block costs its file size plus about 100 bytes ... per part."
    m = re.search(r"about (\d+) bytes of key and Redis overhead per part\. ([\d ]+) `([\w.-]+)` "
                  r"blocks \((\d+) MiB each\) need about (\d+) GiB; the same number of "
                  r"(\d+)-token `([\w.-]+)` blocks need ([\d.]+) TiB", remote)
    overhead, count = int(m.group(1)), int(m.group(2).replace(" ", ""))

    def memory(name):
        return count * (file_bytes(name) + overhead * parts(name))

    assert kvtier.Layout(m.group(3)).block_bytes == int(m.group(4)) << 20
    assert round(memory(m.group(3)) / (1 << 30)) == int(m.group(5))
    assert kvtier.Layout(m.group(7)).block_tokens == int(m.group(6))
    digits = len(m.group(8).split(".")[1])
    assert round(memory(m.group(7)) / (1 << 40), digits) == float(m.group(8))

    # Prefix sizes: "qwen2.5-0.5b 32k (403 MB)", "(16 × 32 MiB, 537 MB)", ...
    pages = {p: flat(read(source_dir, "docs", p)) for p in ("c-api.md", "python.md", "tiers.md")}
    found = 0
    for page in ("c-api.md", "python.md"):
        for name, k, n, mib, mb in re.findall(r"\| ([\w.-]+) (\d+)k(?: tokens)? \((?:(\d+) × "
                                               r"(\d+) MiB, )?(\d+) MB\)", pages[page]):
            layout = kvtier.Layout(name)
            blocks = int(k) * 1024 // layout.block_tokens
            assert round(blocks * file_bytes(name) / 1e6) == int(mb), (page, name)
            if n:
                assert (blocks, layout.block_bytes) == (int(n), int(mib) << 20), (page, name)
            found += 1
    assert found == 4
    for name, tokens, blocks, mib in re.findall(r"\| ([\w.-]+), ([\dk]+) tokens, (\d+) blocks \| "
                                                 r"(\d+) MiB \|", pages["tiers.md"]):
        layout = kvtier.Layout(name)
        n = int(tokens.replace("k", "")) * (1024 if "k" in tokens else 1) // layout.block_tokens
        assert (n, n * layout.block_bytes) == (int(blocks), int(mib) << 20), name
    m = re.search(r"kvtier bench pool --layout ([\w.-]+) --block-tokens (\d+) --tokens (\d+) "
                  r"--json ``` \| (\d+) blocks of (\d+) KiB \|", pages["tiers.md"])
    layout = kvtier.Layout(m.group(1), int(m.group(2)))
    assert int(m.group(3)) // layout.block_tokens == int(m.group(4))
    assert layout.block_bytes == int(m.group(5)) << 10

    # The option errors tiers.md quotes, and the table's bounds.
    tiers = flat(read(source_dir, "docs", "tiers.md"))
    shown = re.search(r"a bad value there names the option \(`([^`]+)`\)", tiers).group(1)
    try:
        kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir="/nonexistent/never-made",
                     disk_max_unlinks_per_store=0)
        raise AssertionError("disk_max_unlinks_per_store=0 accepted")
    except kvtier.InvalidArgument as e:
        assert str(e) == shown, e
    most = int(re.search(r"`CacheOptions\.load_threads must be <= (\d+)`", tiers).group(1))
    assert "on the caller's thread; the future is ready when the call returns. At most %d." \
        % most in tiers
    m = re.search(r"0 = grow on demand\)\. At most 2\^(\d+)\.", tiers)
    for option, value, limit in (("load_threads", most + 1, most),
                                 ("index_expected_blocks", (1 << int(m.group(1))) + 1,
                                  1 << int(m.group(1)))):
        try:
            kvtier.Cache("tiny", host_bytes=1 << 20, **{option: value})
            raise AssertionError(option)
        except kvtier.InvalidArgument as e:
            assert str(e) == "%s: %d is larger than the most it takes, %d" % (
                option, value, limit), e


# --- The trace and kvtier replay -----------------------------------------------


def num(text):
    return int(text.replace(",", ""))


def test_trace_figures_and_replay_messages(source_dir, cli, tmp_path):
    """replay.md's counts of the repository's trace (and those remote-tier.md
    and operations.md repeat), the columns its tables derive, the picture's
    size, and the two messages it quotes."""
    path = os.path.join(source_dir, "tests", "data", "mooncake", "synthetic_trace.jsonl")
    with open(path, encoding="utf-8") as f:
        trace = [json.loads(line) for line in f]
    accesses = [h for r in trace for h in r["hash_ids"]]
    count = {}
    seen = {}  # id -> the requests it is in, in order
    for i, r in enumerate(trace):
        for h in r["hash_ids"]:
            count[h] = count.get(h, 0) + 1
            if seen.setdefault(h, [])[-1:] != [i]:
                seen[h].append(i)
    replay = flat(read(source_dir, "docs", "replay.md"))
    m = re.search(r"\(\[tests/data/mooncake/\]\(\.\./tests/data/mooncake/README\.md\): ([\d,]+) "
                  r"requests, ([\d,]+) block accesses, ([\d,]+) distinct blocks;", replay)
    assert [num(g) for g in m.groups()] == [len(trace), len(accesses), len(count)]
    remote = flat(read(source_dir, "docs", "remote-tier.md"))
    assert "(%s requests, %s block accesses, %s distinct blocks)" % m.groups() in remote
    ops = flat(read(source_dir, "docs", "operations.md"))
    assert "over its %s block accesses" % m.group(2) in ops
    m = re.search(r"([\d,]+) of the ([\d,]+) blocks \((\d+)%\) are accessed once", replay)
    once = sum(1 for c in count.values() if c == 1)
    assert (num(m.group(1)), num(m.group(2))) == (once, len(count))
    assert round(100 * once / len(count)) == int(m.group(3))
    m = re.search(r"Of blocks accessed once, (\d+)% are ever accessed again; of blocks accessed "
                  r"twice, (\d+)% are accessed a third time", replay)
    at_least = lambda k: sum(1 for c in count.values() if c >= k)  # noqa: E731
    assert round(100 * at_least(2) / len(count)) == int(m.group(1))
    assert round(100 * at_least(3) / at_least(2)) == int(m.group(2))
    m = re.search(r"median gap in requests: (\d+) before the 2nd access, (\d+) before the 3rd, "
                  r"(\d+) before the 4th, (\d+) before the 5th", replay)
    for k, shown in zip(range(2, 6), m.groups()):
        gaps = sorted(t[k - 1] - t[k - 2] for t in seen.values() if len(t) >= k)
        assert gaps[len(gaps) // 2] == int(shown), k  # odd counts: the middle one
    m = re.search(r"At ([\d,]+) tokens the cache holds about (\d+) requests' worth of blocks, but "
                  r"the median first-reuse gap is (\d+)", replay)
    assert round(num(m.group(1)) // 512 / (len(accesses) / len(trace))) == int(m.group(2))
    assert int(m.group(3)) == int(re.search(r"(\d+) before the 2nd", replay).group(1))

    # The figures table: blocks = floor(tokens / 512), gain = reuse - LRU.
    text = read(source_dir, "docs", "replay.md")
    rows = table(text, "| `--ram-tokens` | blocks | LRU | reuse | gain | Belady (MIN) |")
    for tokens, blocks, lru, reuse, gain, belady in ([c.strip("*") for c in r] for r in rows):
        assert num(tokens) // 512 == num(blocks)
        assert abs(float(reuse) - float(lru) - float(gain)) < 1.5e-5, tokens
    m = re.search(r"At ([\d,]+) tokens `reuse` recovers (\d+)% of the gap between LRU and "
                  r"Belady's MIN", replay)
    row = next([c.strip("*") for c in r] for r in rows if r[0].strip("*") == m.group(1))
    lru, reuse, belady = float(row[2]), float(row[3]), float(row[5])
    assert round(100 * (reuse - lru) / (belady - lru)) == int(m.group(2))
    m = re.search(r"With `--disk-tokens ([\d]+)` \(([\d,]+) blocks: the whole trace\)", replay)
    assert int(m.group(1)) // 512 == num(m.group(2)) >= len(count)
    m = re.search(r"RAM tier \(([\d,]+) blocks\) keeps the LRU figure", remote)
    assert num(m.group(1)) == 3000000 // 512
    m = re.search(r"a replay of one request \((\d+) blocks,", remote)
    assert len(trace[0]["hash_ids"]) == int(m.group(1))
    m = re.search(r"rendered by `rsvg-convert` to an (\d+) × (\d+) PNG", replay)
    for svg in ("replay-sweep.svg", "replay-sweep-disk.svg"):
        root = read(source_dir, "docs", "images", svg)
        size = re.search(r'<svg[^>]* width="(\d+)" height="(\d+)"', root)
        assert size.groups() == m.groups(), svg

    # "(`kvtier: --ram-tokens: 2199023255552 is over the limit of 1099511627776
    # tokens (2^40)`, exit 2)", and the trace reader's line-numbered message.
    m = re.search(r"\(`(kvtier: --ram-tokens: (\d+) is over the limit of (\d+) tokens \(2\^40\))`, "
                  r"exit 2\)", replay)
    assert int(m.group(3)) == 1 << 40 and "2⁴⁰ = %s tokens" % format(1 << 40, ",") in replay
    out = subprocess.run([cli, "replay", path, "--ram-tokens", m.group(2), "--payload", "none"],
                         capture_output=True, text=True)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", m.group(1) + "\n")
    m = re.search(r"Errors name the file and the line: `((\S+): line (\d+): (\w+) must be a "
                  r"non-negative integer \(plain digits\), got (-\d+))`", replay)
    good = {"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}
    lines = [json.dumps(good)] * (int(m.group(3)) - 1)
    lines.append(json.dumps(dict(good, **{m.group(4): int(m.group(5))})))
    (tmp_path / m.group(2)).write_text("\n".join(lines) + "\n")
    out = subprocess.run([cli, "replay", m.group(2), "--ram-tokens", "4096", "--payload", "none"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert (out.returncode, out.stderr) == (2, "kvtier: %s\n" % m.group(1)), out.stderr


# --- The demo --------------------------------------------------------------------


def demo_first_line(cli, folder, *args):
    """The demo's first line (its model and script), read through a
    terminal (a pipe would hold it in stdio's buffer until the first
    request is done); the demo is stopped there."""
    folder.mkdir()
    leader, follower = pty.openpty()
    demo = subprocess.Popen([cli, "demo", *args], cwd=folder, stdout=follower,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    os.close(follower)
    out = b""
    try:
        while b"\n" not in out:
            chunk = os.read(leader, 4096)
            assert chunk, out
            out += chunk
    finally:
        demo.kill()
        demo.wait()
        os.close(leader)
    return out.split(b"\n")[0].decode().rstrip("\r")


def test_demo_model_lines(source_dir, cli, tmp_path):
    """The README's `--model hybrid` and `--kv-bits 8` model lines ("..."
    for what the page leaves out), and the default script the README and
    tiers.md describe: four conversations, a 1,507-token system prompt, 12
    requests, blocks of 16 tokens of 16 KiB."""
    readme = read(source_dir, "README.md")
    shown = re.findall(r"^    (== model: .*)$", readme, re.M)
    assert len(shown) == 2
    for line, args in zip(shown, (["--model", "hybrid"], ["--kv-bits", "8"])):
        got = demo_first_line(cli, tmp_path / args[1], *args)
        pattern = ".*".join(re.escape(p.strip()) for p in line.split("..."))
        assert re.fullmatch(pattern, got), (line, got)
    got = demo_first_line(cli, tmp_path / "default")
    m = re.search(r"blocks of (\d+) tokens \((\d+) bytes\).*; (\d+) conversations sharing a "
                  r"(\d+)-token system prompt, (\d+) requests$", got)
    tokens, size, chats, prompt, requests = (int(g) for g in m.groups())
    text = flat(readme)
    assert "%s conversations share a %s-token system prompt" % (
        {4: "four"}[chats], format(prompt, ",")) in text
    assert re.findall(r"^    requests (\d+): ", readme, re.M)[0] == str(requests)
    tiers = flat(read(source_dir, "docs", "tiers.md"))
    assert "default script: %d conversations, %d requests, blocks of %d tokens = %d KiB" % (
        chats, requests, tokens, size >> 10) in tiers


# --- Test files the pages count ------------------------------------------------------


def count_tests(path):
    """The tests pytest collects from a file: its module-level test_*
    functions, each times the length of every parametrize list it has."""
    import ast
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    total = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            n = 1
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "parametrize":
                    n *= len(d.args[1].elts)
            total += n
    return total


def test_counts_of_tests_the_pages_describe(source_dir):
    """vllm.md: "`tests/python/test_vllm_current.py` (current route and tier, N
    tests" (it said 25 with 28 there); tiers.md and python.md: the crash test's
    child "stores 50 blocks"."""
    text = flat(read(source_dir, "docs", "vllm.md"))
    m = re.search(r"`tests/python/test_vllm_current\.py` \(current route and tier, (\d+) tests",
                  text)
    assert count_tests(os.path.join(source_dir, "tests", "python", "test_vllm_current.py")) \
        == int(m.group(1))
    n = re.search(r"^N = (\d+)$", read(source_dir, "tests", "python", "test_crash_safety.py"),
                  re.M).group(1)
    for page in ("tiers.md", "python.md"):
        assert re.findall(r"a child stores (\d+) blocks", flat(read(source_dir, "docs", page))) \
            == [n], page


# --- Command lines -------------------------------------------------------------------


def command_flags(cli):
    """{subcommand: its --flags} from the command's own help."""
    def options(text):
        return set(re.findall(r"^\s+(?:-\w,)?(--[a-z][a-z0-9-]*)", text, re.M))

    out = subprocess.run([cli, "--help-all"], capture_output=True, text=True, check=True).stdout
    flags = {}
    for m in re.finditer(r"^([a-z]+)\n(.*?)(?=^[a-z]+\n|\Z)", out, re.M | re.S):
        flags[m.group(1)] = options(m.group(2))
    for bench in re.findall(r"^    (\w+)  ", out[out.index("Subcommands of 'bench'"):], re.M):
        out = subprocess.run([cli, "bench", bench, "--help"], capture_output=True, text=True,
                             check=True).stdout
        flags["bench " + bench] = options(out)
    return flags


def test_command_lines_use_real_flags(source_dir, cli):
    """Every `kvtier SUBCOMMAND ...` the README and docs/ show (inline, in code
    blocks, continuation lines joined) names a subcommand that exists and
    only flags that subcommand takes (docs/server.md aside: being edited)."""
    flags = command_flags(cli)
    assert {"demo", "key", "synth", "verify", "inspect", "ls", "stats", "gc", "options", "replay",
            "serve", "bench disk", "bench cache", "bench pool", "bench remote"} <= set(flags)
    pages = ["README.md"] + [os.path.join("docs", f) for f in sorted(os.listdir(
        os.path.join(source_dir, "docs"))) if f.endswith(".md") and f != "server.md"]
    checked = 0
    for page in pages:
        text = read(source_dir, page)
        uses = re.findall(r"`(?:[\w./]*/)?kvtier ((?:bench )?[a-z]+)([^`]*)`", text)
        code = "\n".join(re.findall(r"^```\w*\n(.*?)^```", text, re.M | re.S))
        code += "\n" + "\n".join(re.findall(r"^    (.*)$", text, re.M))
        code = code.replace("\\\n", " ")
        uses += re.findall(r"^\s*(?:sudo )?(?:[\w./$]*/)?kvtier ((?:bench )?[a-z]+)(.*)$", code,
                           re.M)
        for sub, rest in uses:
            assert sub in flags, (page, sub, rest)
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
                assert flag in flags[sub], (page, sub, flag, rest)
            checked += 1
    assert checked >= 100


# --- kvtier bench pool's synthetic layouts ------------------------------------------


ORDINALS = {"fourth": 4, "sixth": 6, "nine": 9}
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4}


def test_partial_restore_table(source_dir, cli, tmp_path):
    """tiers.md's "Partial restores" table at 32k tokens: block sizes, the
    bytes a prefix needs, what the pool asks and the disk reads over that,
    recurrent states, and the time target, from the layouts the page
    describes; a short run of each synthetic layout (2,048 tokens) checks
    the description (block size, what 8 blocks need, the headers the disk
    tier reads on top: 4376 and 4256 bytes a block)."""
    text = flat(read(source_dir, "docs", "tiers.md"))
    m = re.search(r"`sliding` is (\d+) layers of K/V (\w+) `\[(\d+), (\d+), (\d+)\]`, every (\w+) "
                  r"full attention and the others a (\d+)-token window", text)
    layers, dtype, a, bt, b, every, window = m.groups()
    layers, bt, every, window = int(layers), int(bt), ORDINALS[every], int(window)
    kv = 2 * int(a) * bt * int(b) * DTYPE_BYTES[dtype]  # K and V of one layer, one block
    sliding = {"block": layers * kv, "full_layers": layers // every,
               "window_layers": layers - layers // every, "per_layer": kv, "recurrent": 0}
    m = re.search(r"`hybrid` has every (\w+) layer full attention and the other (\w+) recurrent "
                  r"\(state (\w+) `\[(\d+), (\d+), (\d+)\]`, conv (\w+) `\[(\d+), (\d+)\]`", text)
    every, others = ORDINALS[m.group(1)], ORDINALS[m.group(2)]
    state = int(m.group(4)) * int(m.group(5)) * int(m.group(6)) * DTYPE_BYTES[m.group(3)]
    state += int(m.group(8)) * int(m.group(9)) * DTYPE_BYTES[m.group(7)]
    full = others // (every - 1)  # one in `every` is full attention
    hybrid = {"block": full * kv + others * state, "full_layers": full, "window_layers": 0,
              "per_layer": kv, "recurrent": others, "state": state}

    def needed(lay, tokens):
        blocks = tokens // bt
        out = lay["full_layers"] * blocks * kv + lay["recurrent"] * lay.get("state", 0)
        return out + lay["window_layers"] * min(blocks, -(-window // bt)) * kv

    m = re.search(r"the block headers \((\d+) bytes a block for `sliding`, (\d+) for `hybrid`\)",
                  text)
    headers = {"sliding": int(m.group(1)), "hybrid": int(m.group(2))}
    for name, lay in (("sliding", sliding), ("hybrid", hybrid)):
        out = subprocess.run([cli, "bench", "pool", "--synthetic-layout", name, "--tokens",
                              str(8 * bt), "--repeats", "1", "--dir", str(tmp_path / name),
                              "--json"], capture_output=True, text=True, check=True)
        j = json.loads(out.stdout)
        assert (j["block_bytes"], j["block_tokens"], j["prefix_blocks"]) == (lay["block"], bt, 8)
        assert j["needed_bytes"] == needed(lay, 8 * bt), name
        assert j["disk_bytes_read"]["whole"] - j["full_bytes"] == 8 * headers[name], name
        assert j["disk_bytes_read"]["needed"] - j["needed_bytes"] == 8 * headers[name], name
        assert j["recurrent_states_requested"] == lay["recurrent"]
        factor = j["time_target"] / j["needed_vs_full"]
        # The 32k row.
        row = re.search(r"\| %s, (\d+)k tokens \((\d+) blocks of ([\d.]+) MiB\) \| ([\d.]+) "
                        r"\(([\d.]+) of (\d+) MiB\) \| ([\d.]+) \| ([\d.]+) \| ([^|]+) \|"
                        r"(?: [^|]* \|){4} ≤ ([\d.]+) \|" % name, text)
        tokens = int(row.group(1)) * 1024
        blocks, need, whole = tokens // bt, needed(lay, tokens), tokens // bt * lay["block"]
        assert blocks == int(row.group(2))
        assert "%.*f" % (len(row.group(3).split(".")[1]), lay["block"] / (1 << 20)) == row.group(3)
        assert "%.3f" % (need / whole) == row.group(4), name
        assert "%.1f" % (need / (1 << 20)) == row.group(5), name
        assert round(whole / (1 << 20)) == int(row.group(6)), name
        assert "%.3f" % j["requested_vs_needed"] == row.group(7)
        assert "%.3f" % ((need + blocks * headers[name]) / need) == row.group(8), name
        states = row.group(9).strip()
        assert states == ("%d (%d layers)" % (others, others) if lay["recurrent"] else "–")
        assert "%.3f" % (factor * need / whole) == row.group(10), name


# --- Event lines -------------------------------------------------------------------------


def shown_line(example, **names):
    """A regex of an example log line of operations.md: "..." and `<key>`
    stand for anything, and each name given for its value."""
    parts = re.split(r"(\.\.\.|<key>|%s)" % "|".join(re.escape(n) for n in names), example)
    out = ""
    for p in parts:
        if p in ("...", "<key>"):
            out += ".*"
        elif p in names:
            out += re.escape(names[p])
        else:
            out += re.escape(p)
    return out


def test_event_lines(source_dir, small_disk):
    """operations.md's "Events": the "Redis node down" line (a cache opened
    on a port nothing listens on), the read-only folder's line (a tmpfs
    remounted read-only), each at its level, and the queue sizes the table's
    lines name (the headers' defaults)."""
    text = read(source_dir, "docs", "operations.md")
    rows = {r[0].split(" (")[0].split(",")[0]: r for r in
            table(text, "| event | level | example line | counters |")}
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.levelname.lower(), record.getMessage()))

    def wait_for(prefix):
        for _ in range(500):
            found = [r for r in records if r[1].startswith(prefix)]
            if found:
                return found[0]
            time.sleep(0.01)
        raise AssertionError("no line starting %r: %r" % (prefix, records))

    logger = logging.getLogger("kvtier")
    handler = Keep()
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        row = rows["Redis node down"]
        example = re.match(r"`(.*)`$", row[2]).group(1)
        with kvtier.Cache("tiny", host_bytes=1 << 20, remote="redis://127.0.0.1:1"):
            level, line = wait_for("remote: redis 127.0.0.1:1 is down")
        assert level == row[1]
        assert re.fullmatch(shown_line(example, **{"10.0.0.5:6379": "127.0.0.1:1"}), line), line

        folder = small_disk / "cache"
        layout = kvtier.Layout("tiny")
        chain = kvtier.KeyChain("doc-figures", layout)
        key = chain.keys(range(16))[0]
        with kvtier.Cache(layout, host_bytes=1 << 20, disk_dir=str(folder)) as cache:
            cache.store_tensors(key, chain.namespace, chain.namespace,
                                [bytes(t.nbytes) for t in layout.tensors()])
        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
        row = rows["the folder cannot be written"]
        example = re.match(r"`(.*)`$", row[2]).group(1)
        with kvtier.Cache(layout, host_bytes=1 << 20, disk_dir=str(folder)) as cache:
            level, line = wait_for("disk: %s: the folder is read-only" % folder)
            assert cache.contains(key) == "disk"
        assert level == row[1]
        assert re.fullmatch(shown_line(example, **{"/cache": str(folder)}), line), line
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)

    remote = header_defaults(source_dir, "remote_tier.h", "RemoteTierOptions")
    m = re.search(r"`remote: the write queue \((\d+ MiB)\) is full", text)
    assert doc_value(m.group(1), "bytes") == remote["queue_max_bytes"]
    m = re.search(r"`disk: /cache: the write queue \((\d+ MiB)\) stayed full", text)
    smallest = re.search(r"by default 10% of RAM, between\s+(\d+ MiB) and", text).group(1)
    assert m.group(1) == smallest
