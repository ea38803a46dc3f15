"""The options table (DESIGN.md §8, docs/options.md): one name per option in
every language, sizes and durations with units, named errors."""

import json
import os
import subprocess

import pytest

import kvtier


def test_docs_options_md_is_the_generated_table(cli, source_dir):
    generated = subprocess.run([cli, "options", "--markdown"], check=True,
                               capture_output=True, text=True).stdout
    with open(os.path.join(source_dir, "docs", "options.md"), encoding="utf-8") as f:
        assert f.read() == generated, \
            "docs/options.md is stale: run `kvtier options --markdown > docs/options.md`"
    names = [o["name"] for o in kvtier.options()]
    for name in names:
        assert "| `%s` |" % name in generated
    listed = json.loads(subprocess.run([cli, "options", "--json"], check=True,
                                       capture_output=True, text=True).stdout)
    assert [o["name"] for o in listed["options"]] == names


def test_options_lists_every_name_of_design_8():
    options = kvtier.options()
    assert all(set(o) == {"name", "type", "default", "doc"} for o in options)
    names = {o["name"] for o in options}
    assert len(names) == len(options)
    for name in ("layout", "host_bytes", "host_policy", "block_tokens", "write_policy",
                 "disk_dir", "disk_max_bytes", "disk_max_entries", "disk_retention",
                 "disk_durability", "disk_on_pressure", "remote", "remote_prefix",
                 "remote_command_timeout", "remote_lookup_budget", "remote_mac_keys"):
        assert name in names
    by_name = {o["name"]: o for o in options}
    assert by_name["write_policy"]["type"] == "write_back | write_through"
    assert by_name["disk_durability"]["type"] == "checksum | fsync"
    assert by_name["disk_max_bytes"]["type"] == "size"
    assert by_name["remote_command_timeout"]["type"] == "duration"
    assert by_name["remote_lookup_budget"]["type"] == "duration"
    assert by_name["remote_mac_keys"]["type"] == "path or list of paths"


def test_sizes_with_units_reach_the_tiers(tmp_path):
    for text, want in (("1.5MB", 1_500_000), ("3MiB", 3 << 20), ("2KB", 2000), ("1GiB", 1 << 30),
                       ("0.5KiB", 512), ("4096B", 4096), (1 << 20, 1 << 20), ("2 MB", 2_000_000)):
        with kvtier.Cache("tiny", host_bytes=text, disk_dir=tmp_path / "c",
                          disk_max_bytes=text, disk_max_entries=7) as c:
            s = c.stats()
            assert s["host_budget"]["capacity_bytes"] == want, text
            assert s["disk"]["configured_max_bytes"] == want, text


def test_bad_names_and_values_are_named_errors(tmp_path):
    d = str(tmp_path / "c")
    short_key = str(tmp_path / "short.key")
    with open(short_key, "wb") as f:
        f.write(b"k" * 31)
    cases = [
        ({"host_bytes": 1, "disk_max_byte": 1}, r"unknown option 'disk_max_byte' \(did you mean "
                                                r"'disk_max_bytes'"),
        ({"host_bytes": 1, "writepolicy": "write_back"}, "did you mean 'write_policy'"),
        ({"host_bytes": 1, "block_tokens": -1}, "block_tokens"),
        ({"host_bytes": "1G"}, "host_bytes: unknown unit 'G'"),
        ({"host_bytes": "1024"}, "host_bytes: '1024' has no unit"),
        ({"host_bytes": 1.5}, "host_bytes"),
        ({"host_bytes": "99999999999TiB"}, "host_bytes: '99999999999TiB' is too large"),
        ({"host_bytes": 2 ** 64}, "host_bytes: 18446744073709551616 does not fit 64 bits"),
        ({"host_bytes": 1, "disk_dir": d, "disk_retention": "1500ms"},
         "disk_retention: \"1500ms\" is not a whole number of seconds"),
        ({"host_bytes": 1, "disk_dir": d, "disk_retention": "2 fortnights"},
         "disk_retention: unknown unit"),
        ({"host_bytes": 1, "remote": "redis://127.0.0.1:1", "remote_connect_timeout": "100000h"},
         "remote_connect_timeout: .* is larger than"),
        ({"host_bytes": 1, "write_policy": "write_through"}, "write_policy: .*needs a disk tier"),
        ({"host_bytes": 1, "disk_durability": "fsync"}, "disk_durability: needs disk_dir"),
        ({"host_bytes": 1, "remote_prefix": "x:"}, "remote_prefix: needs remote"),
        ({"host_bytes": 1, "disk_dir": d, "disk_durability": "sometimes"},
         "disk_durability: expected checksum | fsync"),
        ({"host_bytes": 1, "disk_dir": d, "disk_max_unlinks_per_store": 0},
         "disk_max_unlinks_per_store: CacheOptions.disk.max_unlinks_per_store"),
        ({"host_bytes": 1, "disk_dir": d, "disk_file_permissions": "0999"},
         "disk_file_permissions"),
        ({"host_bytes": 1, "verify_stores": 1}, "verify_stores: expected true or false"),
        ({"host_bytes": 1, "key_salt": object()}, "key_salt: expected"),
        ({}, "host_bytes: is required"),
        ({"host_bytes": 1, "remote": "redis://127.0.0.1:1", "remote_mac_keys": 5},
         "remote_mac_keys: expected a file path"),
        ({"host_bytes": 1, "remote": "redis://127.0.0.1:1", "remote_mac_keys": [short_key]},
         "mac_keys: .*short.key: has 31 bytes, fewer than 32"),
        ({"host_bytes": 1, "remote": "redis://127.0.0.1:1",
          "remote_mac_keys": [str(tmp_path / "absent.key")]}, "mac_keys: .*absent.key"),
        ({"host_bytes": 1, "remote": "redis://127.0.0.1:1", "remote_lookup_budget": 0},
         "lookup_budget"),
    ]
    for options, needle in cases:
        with pytest.raises(kvtier.InvalidArgument, match=needle):
            kvtier.Cache("tiny", **options)


def test_from_config_file_and_dict(tmp_path):
    config = tmp_path / "kvtier.json"
    config.write_text(json.dumps({"layout": "tiny", "host_bytes": "1MiB",
                                  "disk_dir": str(tmp_path / "c"), "disk_max_bytes": "64MiB",
                                  "write_policy": "write_back", "key_model_id": "m"}))
    with kvtier.Cache.from_config(config) as c:
        assert c.stats()["disk"]["configured_max_bytes"] == 64 << 20
        assert c.key_chain.keys(list(range(32))) == kvtier.block_keys(
            "m", kvtier.layout_signature("tiny"), 16, list(range(32)))
    with kvtier.Cache.from_config(str(config)) as c:
        assert c.layout.name == "tiny"
    # A dict; "config" names a file read first, the other members win.
    with kvtier.Cache.from_config({"config": str(config), "disk_max_bytes": "32MiB",
                                   "layout": kvtier.Layout("tiny")}) as c:
        assert c.stats()["disk"]["configured_max_bytes"] == 32 << 20
    with kvtier.Cache("tiny", config=str(config), host_bytes="2MiB") as c:
        assert c.stats()["host_budget"]["capacity_bytes"] == 2 << 20
    with pytest.raises(kvtier.InvalidArgument, match="layout: is required"):
        kvtier.Cache.from_config({"host_bytes": 1})
    bad = tmp_path / "bad.json"
    bad.write_text('{"layout": "tiny", "host_bytes": 1, "disk_max_bytez": 3}')
    with pytest.raises(kvtier.InvalidArgument, match=r"config .*bad.json: unknown option "
                                                     r"'disk_max_bytez' \(did you mean "
                                                     r"'disk_max_bytes'"):
        kvtier.Cache.from_config(bad)
    bad.write_text("[1]")
    with pytest.raises(kvtier.InvalidArgument, match="expected a JSON object"):
        kvtier.Cache.from_config(bad)
    with pytest.raises(kvtier.NotFound):
        kvtier.Cache.from_config(tmp_path / "missing.json")


def test_cli_config_flag_wins_and_names_bad_options(cli, source_dir, tmp_path):
    trace = os.path.join(source_dir, "tests", "data", "mooncake", "synthetic_trace.jsonl")
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"disk_max_bytes": "1.5GB", "disk_retention": "1h"}))
    cache = tmp_path / "cache"
    r = subprocess.run([cli, "synth", "--layout", "tiny", "--random", "64", "--cache", str(cache),
                        "--config", str(config), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # gc takes the file's disk_max_bytes when --max-bytes is not given; a
    # flag given wins: 1 byte evicts everything.
    r = subprocess.run([cli, "gc", str(cache), "--config", str(config), "--dry-run", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["items"] == [], r.stderr
    r = subprocess.run([cli, "gc", str(cache), "--config", str(config), "--max-bytes", "1",
                        "--dry-run", "--json"], capture_output=True, text=True)
    assert r.returncode == 0 and len(json.loads(r.stdout)["items"]) == 4, r.stdout
    config.write_text(json.dumps({"disk_max_byte": 1}))
    for args in (["synth", "--layout", "tiny", "--random", "16", "--cache", str(cache)],
                 ["gc", str(cache), "--dry-run"],
                 ["bench", "disk", "--dir", str(tmp_path / "b"), "--layout", "tiny",
                  "--blocks", "2"],
                 ["bench", "cache", "--layout", "tiny", "--blocks", "10"],
                 ["bench", "pool", "--layout", "tiny"],
                 ["demo", "--quick", "--dir", str(tmp_path / "demo")],
                 ["replay", trace, "--ram-tokens", "1024"],
                 ["replay", trace, "--sweep", "1024,2048"],
                 ["bench", "remote", "--remote", "redis://127.0.0.1:1", "--layout", "tiny",
                  "--blocks", "2"]):
        r = subprocess.run([cli, *args, "--config", str(config)], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "did you mean 'disk_max_bytes'" in r.stderr, (args, r.stderr)


def test_cli_size_flags_take_units(cli, tmp_path):
    cache = tmp_path / "cache"
    subprocess.run([cli, "synth", "--layout", "tiny", "--random", "64", "--cache", str(cache)],
                   check=True, capture_output=True)
    for size in ("512M", "1.5G", "3M", "1.5GB", "3MiB", "1000000"):
        r = subprocess.run([cli, "gc", str(cache), "--max-bytes", size, "--dry-run", "--json"],
                           capture_output=True, text=True)
        assert r.returncode == 0 and json.loads(r.stdout)["items"] == [], (size, r.stderr)
    for size in ("1.5", "lots", "-1", "99999999999T"):
        r = subprocess.run([cli, "gc", str(cache), "--max-bytes", size, "--dry-run"],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "--max-bytes" in r.stderr, (size, r.stderr)
    r = subprocess.run([cli, "bench", "disk", "--dir", str(tmp_path / "b"), "--block-bytes", "3K",
                        "--blocks", "2", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["block_bytes"] > 3072


# 100,000 levels: far past any stack a recursive reader has (issue 33 item 6).
DEEP = 100_000


def deep_config(path, nest="["):
    close = "]" if nest == "[" else "}"
    inner = nest * DEEP + close * DEEP if nest == "[" else '{"a":' * DEEP + "1" + close * DEEP
    path.write_text('{"layout": "tiny", "host_bytes": ' + inner + "}")
    return str(path)


def test_deeply_nested_configs_are_refused_by_name(tmp_path, cli):
    for nest in ("[", "{"):
        path = deep_config(tmp_path / "deep.json", nest)
        with pytest.raises(kvtier.InvalidArgument,
                           match=r"config .*deep\.json: nested deeper than 32 levels at byte \d+"):
            kvtier.Cache.from_config(path)
        with pytest.raises(kvtier.InvalidArgument, match="nested deeper than 32 levels"):
            kvtier.Cache.from_config({"config": path})
        # The CLI: a clear one-line error, not a signal.
        out = subprocess.run([cli, "gc", str(tmp_path), "--dry-run", "--config", path],
                             capture_output=True, text=True)
        assert out.returncode in (1, 2), (out.returncode, out.stderr)
        assert "nested deeper than 32 levels at byte" in out.stderr, out.stderr
    # A dict whose value nests as deep (Python lists) is refused the same way.
    deep = []
    for _ in range(DEEP):
        deep = [deep]
    for call in (lambda: kvtier.Cache.from_config({"layout": "tiny", "host_bytes": deep}),
                 lambda: kvtier.Cache("tiny", host_bytes=1 << 20, remote_mac_keys=deep)):
        with pytest.raises(kvtier.InvalidArgument, match="nested deeper than 32 levels"):
            call()
    # What a real config needs still opens.
    ok = tmp_path / "ok.json"
    ok.write_text('{"layout": "tiny", "host_bytes": "1MiB", "remote_mac_keys": []}')
    with pytest.raises(kvtier.InvalidArgument, match="remote_mac_keys: needs remote"):
        kvtier.Cache.from_config(str(ok))


def test_a_key_repeated_in_a_config_file_is_refused(tmp_path, cli):
    path = tmp_path / "twice.json"
    path.write_text('{"layout": "tiny", "host_bytes": "1MiB", "host_bytes": "2MiB"}')
    with pytest.raises(kvtier.InvalidArgument,
                       match=r"config .*twice\.json: option 'host_bytes' given twice"):
        kvtier.Cache.from_config(str(path))
    with pytest.raises(kvtier.InvalidArgument, match="option 'host_bytes' given twice"):
        kvtier.Cache.from_config({"config": str(path)})
    out = subprocess.run([cli, "gc", str(tmp_path), "--dry-run", "--config", str(path)],
                         capture_output=True, text=True)
    assert out.returncode in (1, 2) and "option 'host_bytes' given twice" in out.stderr, \
        out.stderr
    # Repeated inside a value (no option takes an object: refused either way).
    path.write_text('{"layout": "tiny", "host_bytes": {"a": 1, "a": 2}}')
    with pytest.raises(kvtier.InvalidArgument, match='duplicate key "a" in an object'):
        kvtier.Cache.from_config(str(path))


def test_deeply_nested_layout_files_are_refused(tmp_path, cli):
    text = '{"name": "x", "block_tokens": 16, "layers": ' + "[" * DEEP + "]" * DEEP + "}"
    path = tmp_path / "layout.json"
    path.write_text(text)
    for call in (lambda: kvtier.Layout.from_json(text), lambda: kvtier.Layout(str(path)),
                 lambda: kvtier.Cache(str(path), host_bytes=1 << 20)):
        with pytest.raises(kvtier.InvalidArgument, match="nested deeper than 32 levels"):
            call()
    out = subprocess.run([cli, "synth", "--layout", str(path), "--random", "32",
                          "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert out.returncode != 0 and out.returncode < 128, out.returncode
    assert "nested deeper than 32 levels" in out.stderr, out.stderr
