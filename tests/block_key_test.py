#!/usr/bin/python3
"""`kvtier key` against an independent hashlib implementation of block key v1.

Runs the CLI over seeded random inputs (model ids, signatures, block sizes,
salts, adapters, extras, token counts with partial blocks (zero tokens refused),
--tokens and --tokens-file, text and --json output, --layout presets and
JSON files) and compares stdout byte for byte with what
tests/block_key_vectors.py computes. Then checks that bad input exits 2 with
a one-line error and nothing on stdout.

    /usr/bin/python3 tests/block_key_test.py --cli build/dev/kvtier [--seed N] [--cases N]

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from block_key_vectors import chain, ns_key  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- Layout signatures (docs/layouts.md), written from the documented grammar.

PRESETS = {  # name: (layers, kv_heads, head_dim, dtype, default block_tokens)
    "tiny": (2, 2, 16, "F16", 16),
    "qwen2.5-0.5b": (24, 2, 64, "BF16", 256),
    "llama3-8b": (32, 8, 128, "BF16", 256),
}


def preset_layers(name, bt):
    layers, heads, dim, dtype, _ = PRESETS[name]
    layer = ("attention", "",
             [("keys", dtype, [heads, bt, dim]), ("values", dtype, [heads, bt, dim])])
    return [layer] * layers


def json_layers(path, bt_override):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    bt = bt_override or doc["block_tokens"]
    layers = []
    for entry in doc["layers"]:
        states = [(s["role"], s["dtype"], [bt if d == "T" else d for d in s["shape"]])
                  for s in entry["states"]]
        # The optional window and quantization, written as the grammar's
        # `features` only when present.
        features = []
        if "window" in entry:
            features.append("window=%d" % entry["window"])
        if "quantization" in entry:
            q = entry["quantization"]
            features.append("quant=%s,bits=%d,group=%d" % (q["mode"], q["bits"], q["group_size"]))
        feat = "{%s}" % ",".join(features) if features else ""
        layers += [(entry["cache_type"], feat, states)] * entry.get("repeat", 1)
    return bt, layers


def signature(bt, layers):
    def body(layer):
        cache_type, features, states = layer
        return cache_type + features + ":" + ",".join(
            "%s:%s[%s]" % (role, dtype, ",".join(str(d) for d in shape))
            for role, dtype, shape in states)

    out = "kvtier-layout-v1;bt=%d" % bt
    i = 0
    while i < len(layers):
        j = i
        while j + 1 < len(layers) and layers[j + 1] == layers[i]:
            j += 1
        out += ";L%d%s=%s" % (i, "" if j == i else "-%d" % j, body(layers[i]))
        i = j + 1
    return out


# --- Random inputs.

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:;=[],"
UNICODE = "\u00e9\u00df\u4e2d\u6587\u03b1\u20ac\U0001F600"


def rand_text(rng, lo, hi, unicode_ok=True):
    n = rng.randint(lo, hi)
    chars = ALPHABET + (UNICODE if unicode_ok else "")
    s = "".join(rng.choice(chars) for _ in range(n))
    return s


DTYPES = ["F16", "BF16", "F32", "F64", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64",
          "BOOL", "F8_E4M3", "F8_E5M2"]
NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"


def rand_layers(rng, bt):
    """Random layers for a well-formed signature (`kvtier key --signature`
    refuses any other form)."""
    def name():
        return "".join(rng.choice(NAME_CHARS) for _ in range(rng.randint(1, 12)))

    kinds = []
    for _ in range(rng.randint(1, 3)):
        states = [(name(), rng.choice(DTYPES),
                   [rng.choice([bt, rng.randint(1, 300)]) for _ in range(rng.randint(1, 3))])
                  for _ in range(rng.randint(1, 3))]
        features = rng.choice(["", "", "{window=%d}" % rng.randint(1, 5000),
                               "{quant=affine,bits=%d,group=64}" % rng.randint(1, 8),
                               "{window=128,quant=mxfp4,bits=4,group=32}"])
        kinds.append((name(), features, states))
    layers = []
    for _ in range(rng.randint(1, 6)):
        layers += [rng.choice(kinds)] * rng.randint(1, 4)
    return layers


def rand_shard(rng):
    """A canonical shard: fields tp, pp, cp in order, sizes >= 2."""
    fields = []
    for f in ("tp", "pp", "cp"):
        if rng.random() < 0.5:
            size = rng.choice([2, 4, 8, 16, rng.randint(2, 2**32 - 1)])
            fields.append("%s=%d/%d" % (f, rng.randrange(size), size))
    return ";".join(fields)


def rand_tokens(rng, bt):
    kind = rng.random()
    # At least one token: none at all is refused (fixed_cases checks that).
    if kind < 0.1:
        count = 1
    elif kind < 0.25:
        count = rng.randint(1, bt - 1) if bt > 1 else 1  # partial block only
    else:
        count = rng.randint(0, 5) * bt + rng.randint(0, bt - 1)
        count = max(1, min(count, 5000))
    big = rng.random() < 0.3
    return [rng.randint(0, 2**32 - 1) if big else rng.randint(0, 200000) for _ in range(count)]


def format_tokens_file(rng, tokens):
    seps = [",", ", ", " ", "\n", "\t", " ,\n", "\r\n"]
    out = ""
    for i, t in enumerate(tokens):
        out += (rng.choice(seps) if i else rng.choice(["", " ", "\n"])) + str(t)
    return out + rng.choice(["", "\n", " \n", ","] if tokens else ["", "\n", " \n"])


class Runner:
    def __init__(self, cli):
        self.cli = cli
        self.passed = 0
        self.failed = 0

    def run(self, args):
        return subprocess.run([self.cli, "key"] + args, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, cwd=REPO, timeout=60)

    def fail(self, what, detail):
        self.failed += 1
        print("FAIL %s: %s" % (what, detail))

    def expect_keys(self, what, args, ns, keys, as_json):
        r = self.run(args + (["--json"] if as_json else []))
        if as_json:
            want = ('{"namespace":"%s","keys":[%s]}\n' % (
                ns.hex(), ",".join('"%s"' % k.hex() for k in keys))).encode()
        else:
            want = "".join(k.hex() + "\n" for k in keys).encode()
        if r.returncode != 0 or r.stdout != want:
            self.fail(what, "args=%r rc=%d\n  got  %r\n  want %r\n  stderr %r" % (
                args, r.returncode, r.stdout[:300], want[:300], r.stderr[:300]))
            return
        if as_json:
            obj = json.loads(r.stdout)
            if sorted(obj) != ["keys", "namespace"]:
                self.fail(what, "JSON fields %r" % sorted(obj))
                return
        self.passed += 1

    def expect_usage_error(self, what, args, code="InvalidArgument"):
        """Exit 2, one stderr line "kvtier: ...". stdout: nothing, or with --json
        the {"error", "code"} object (argument-parser errors come before --json
        is known, so those print nothing on stdout)."""
        for as_json in (False, True):
            r = self.run(args + (["--json"] if as_json else []))
            err_lines = r.stderr.decode("utf-8", "replace").splitlines()
            ok = r.returncode == 2 and len(err_lines) == 1 and err_lines[0].startswith("kvtier: ")
            if ok and r.stdout != b"":
                ok = as_json
                if ok:
                    try:
                        obj = json.loads(r.stdout)
                        ok = (sorted(obj) == ["code", "error"] and obj["code"] == code
                              and r.stdout.count(b"\n") == 1)
                    except ValueError:
                        ok = False
            if not ok:
                self.fail(what, "args=%r json=%s rc=%d stdout=%r stderr=%r" % (
                    args, as_json, r.returncode, r.stdout[:200], r.stderr[:300]))
                return
        self.passed += 1


def random_cases(runner, rng, count, tmp):
    for case in range(count):
        bt = rng.choice([1, 2, 3, 4, 7, 16, 32, 64, 100, 128, 255, 256, 257, 512])
        model = rand_text(rng, 1, 40)
        salt = rand_text(rng, 1, 24) if rng.random() < 0.4 else ""
        adapter = rand_text(rng, 1, 24) if rng.random() < 0.3 else ""
        extra = rand_text(rng, 1, 24) if rng.random() < 0.3 else ""
        args = ["--model", model]
        mode = rng.random()
        if mode < 0.6:
            sig = signature(bt, rand_layers(rng, bt))
            args += ["--signature", sig, "--block-tokens", str(bt)]
        elif mode < 0.8:
            preset = rng.choice(sorted(PRESETS))
            if rng.random() < 0.5:
                bt = PRESETS[preset][4]
                args += ["--layout", preset]
            else:
                args += ["--layout", preset, "--block-tokens", str(bt)]
            sig = signature(bt, preset_layers(preset, bt))
        else:
            name = rng.choice(["hybrid", "quantized", "sliding_window", "mamba", "features"])
            path = "docs/examples/%s.json" % name
            override = rng.choice([0, bt])
            bt, layers = json_layers(os.path.join(REPO, path), override)
            args += ["--layout", path] + (["--block-tokens", str(override)] if override else [])
            sig = signature(bt, layers)
        if salt:
            args += ["--salt", salt]
        if adapter:
            args += ["--adapter", adapter]
        if extra:
            args += ["--extra", extra]
        shard = rand_shard(rng) if rng.random() < 0.4 else ""
        if shard:
            args += ["--shard", shard]
        tokens = rand_tokens(rng, bt)
        if rng.random() < 0.5:
            args += ["--tokens", ",".join(str(t) for t in tokens)]
        else:
            path = os.path.join(tmp, "tokens_%d.txt" % case)
            with open(path, "w") as f:
                f.write(format_tokens_file(rng, tokens))
            args += ["--tokens-file", path]
        ns = ns_key(model, sig, bt, salt.encode(), adapter, extra.encode(), shard)
        runner.expect_keys("random case %d" % case, args, ns, chain(ns, tokens, bt),
                           rng.random() < 0.5)


# A well-formed signature with bt=4 (the CLI refuses made-up ones like "s",
# which the library and the vectors of docs/block-key.md accept).
SIG4 = signature(4, preset_layers("tiny", 4))


def fixed_cases(runner, tmp):
    # Empty and whitespace-only token input is refused (issue 33 item 9:
    # it used to print nothing and exit 0): exit 2, one line naming the flag.
    blank = os.path.join(tmp, "blank.txt")
    with open(blank, "w") as f:
        f.write(" \n\t\n")
    for what, extra, line in (
            ("empty --tokens", ["--tokens", ""], "kvtier: --tokens: no token ids (give at least one)\n"),
            ("blank --tokens", ["--tokens", " \t"], "kvtier: --tokens: no token ids (give at least one)\n"),
            ("blank --tokens-file", ["--tokens-file", blank],
             "kvtier: --tokens-file %s: no token ids (give at least one)\n" % blank)):
        r = runner.run(["--model", "m", "--signature", SIG4, "--block-tokens", "4"] + extra)
        if r.returncode != 2 or r.stdout != b"" or r.stderr != line.encode():
            runner.fail(what, "rc=%d stdout=%r stderr=%r" % (r.returncode, r.stdout, r.stderr))
        else:
            runner.passed += 1
    ns = ns_key("m", SIG4, 4)
    # The tokens of the documented vector "basic" (docs/block-key.md).
    toks = list(range(1, 11))
    runner.expect_keys("basic vector", ["--model", "m", "--signature", SIG4, "--block-tokens", "4",
                                        "--tokens", "1,2,3,4,5,6,7,8,9,10"],
                       ns, chain(ns, toks, 4), True)
    # The documented shard vectors' form, through --shard (tiny's signature).
    for shard in ("tp=1/2", "tp=3/8;pp=0/2;cp=1/4", "pp=1/4"):
        sig = signature(16, preset_layers("tiny", 16))
        sns = ns_key("tiny-model", sig, 16, shard=shard)
        runner.expect_keys("--shard " + shard,
                           ["--model", "tiny-model", "--layout", "tiny", "--shard", shard,
                            "--tokens", ",".join(str(t) for t in range(1, 36))],
                           sns, chain(sns, list(range(1, 36)), 16), True)
    # Fewer tokens than a block: no keys, exit 0, and a note on stderr.
    r = runner.run(["--model", "m", "--signature", SIG4, "--block-tokens", "4", "--tokens",
                    "1,2,3"])
    if r.returncode != 0 or r.stdout != b"" or b"3 of 3 tokens fill no block of 4" not in r.stderr:
        runner.fail("partial block note", "rc=%d stdout=%r stderr=%r" % (
            r.returncode, r.stdout, r.stderr))
    else:
        runner.passed += 1


def bad_input_cases(runner, tmp):
    base = ["--model", "m", "--signature", SIG4, "--block-tokens", "4"]
    bad_json = os.path.join(tmp, "bad_layout.json")
    with open(bad_json, "w") as f:
        f.write('{"block_tokens": 4, "layers": [{"cache_type": "a", "states": '
                '[{"role": "k", "dtype": "F17", "shape": [1]}]}]}')
    bad_tokens_file = os.path.join(tmp, "bad_tokens.txt")
    with open(bad_tokens_file, "w") as f:
        f.write("1 2 three\n")
    cases = [
        ("no --model", ["--signature", "s", "--block-tokens", "4", "--tokens", "1"]),
        ("empty --model", ["--model", "", "--signature", "s", "--block-tokens", "4",
                           "--tokens", "1"]),
        ("no signature or layout", ["--model", "m", "--block-tokens", "4", "--tokens", "1"]),
        ("signature and layout", base + ["--layout", "tiny", "--tokens", "1"]),
        ("empty signature", ["--model", "m", "--signature", "", "--block-tokens", "4",
                             "--tokens", "1"]),
        ("no --block-tokens", ["--model", "m", "--signature", "s", "--tokens", "1"]),
        ("--block-tokens 0", ["--model", "m", "--signature", "s", "--block-tokens", "0",
                              "--tokens", "1"]),
        ("--block-tokens -4", ["--model", "m", "--signature", "s", "--block-tokens", "-4",
                               "--tokens", "1"]),
        ("--block-tokens 4.5", ["--model", "m", "--signature", "s", "--block-tokens", "4.5",
                                "--tokens", "1"]),
        ("--block-tokens 2^32", ["--model", "m", "--signature", "s", "--block-tokens",
                                 "4294967296", "--tokens", "1"]),
        ("no tokens", base),
        ("tokens and tokens-file", base + ["--tokens", "1", "--tokens-file", bad_tokens_file]),
        ("bad token", base + ["--tokens", "1,x,3"]),
        ("negative token", base + ["--tokens", "1,-2"]),
        ("token too big", base + ["--tokens", "4294967296"]),
        ("double comma", base + ["--tokens", "1,,2"]),
        ("leading comma", base + ["--tokens", ",1"]),
        ("missing tokens file", base + ["--tokens-file", os.path.join(tmp, "nope.txt")]),
        ("tokens file is a folder", base + ["--tokens-file", tmp]),
        ("bad tokens file", base + ["--tokens-file", bad_tokens_file]),
        ("unknown preset", ["--model", "m", "--layout", "llama3-70b", "--tokens", "1"]),
        ("bad layout file", ["--model", "m", "--layout", bad_json, "--tokens", "1"]),
        ("missing layout file", ["--model", "m", "--layout", os.path.join(tmp, "x.json"),
                                 "--tokens", "1"]),
        ("layout too large", ["--model", "m", "--layout", "llama3-8b", "--block-tokens",
                              "40000", "--tokens", "1"]),
        ("unknown flag", base + ["--tokens", "1", "--bogus"]),
        ("repeated flag", base + ["--tokens", "1", "--salt", "a", "--salt", "b"]),
        ("positional", base + ["--tokens", "1", "extra-arg"]),
        ("bogus signature", ["--model", "m", "--signature", "s", "--block-tokens", "4",
                             "--tokens", "1"]),
        ("signature typo", ["--model", "m", "--signature", SIG4.replace("F16", "F17"),
                            "--block-tokens", "4", "--tokens", "1"]),
        ("signature not maximal", ["--model", "m", "--signature",
                                   SIG4.replace("L0-1=", "L0=") + SIG4[SIG4.index(";L"):]
                                   .replace("L0-1=", "L1="),
                                   "--block-tokens", "4", "--tokens", "1"]),
        ("signature gap", ["--model", "m", "--signature", SIG4.replace("L0-1=", "L1-2="),
                           "--block-tokens", "4", "--tokens", "1"]),
        ("signature trailing", ["--model", "m", "--signature", SIG4 + ";", "--block-tokens", "4",
                                "--tokens", "1"]),
        ("shard size 1", base + ["--tokens", "1", "--shard", "tp=0/1"]),
        ("shard order", base + ["--tokens", "1", "--shard", "pp=0/2;tp=0/2"]),
        ("shard rank", base + ["--tokens", "1", "--shard", "tp=2/2"]),
        ("shard leading zero", base + ["--tokens", "1", "--shard", "tp=01/2"]),
        ("shard spaces", base + ["--tokens", "1", "--shard", "tp=0/2; pp=0/2"]),
        ("shard unknown field", base + ["--tokens", "1", "--shard", "ep=0/2"]),
    ]
    for what, args in cases:
        runner.expect_usage_error(what, args, "NotFound" if what.startswith("missing") else
                                  "InvalidArgument")
    # Arguments that are not UTF-8 (argv is bytes).
    for what, flag in (("model not UTF-8", "--model"), ("adapter not UTF-8", "--adapter")):
        args = ["--model", "m", "--signature", SIG4, "--block-tokens", "4", "--tokens", "1"]
        args += [flag, os.fsdecode(b"a\xffb")] if flag == "--adapter" else []
        if flag == "--model":
            args[1] = os.fsdecode(b"a\xffb")
        runner.expect_usage_error(what, args)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True, help="path to the kvtier binary")
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--cases", type=int, default=60)
    opts = ap.parse_args()
    runner = Runner(os.path.abspath(opts.cli))
    rng = random.Random(opts.seed)
    with tempfile.TemporaryDirectory() as tmp:
        random_cases(runner, rng, opts.cases, tmp)
        fixed_cases(runner, tmp)
        bad_input_cases(runner, tmp)
    print("seed %d" % opts.seed)
    print("%d passed, %d failed" % (runner.passed, runner.failed))
    return 1 if runner.failed or runner.passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
