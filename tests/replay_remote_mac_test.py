#!/usr/bin/python3
"""Signed values (issue 23, DESIGN.md §7) through `kvtier replay --remote`.

A host without keys replays the first LIMIT requests of the Mooncake trace
and stores every block it computes in Redis, unsigned. A host with a key
(`remote_mac_keys` in --config) replays the same requests: it must not
serve one of those blocks. Checks, exactly:
  - the keyed replay: every block the first stored is a miss counted in
    mac_failures and deleted (bad_values_deleted), none is a bad value,
    wrong = 0, and it recomputes and stores them again, signed (as many as
    the first stored);
  - independently of kvtier (Python's hmac module): a `:mac` it stored is
    `v1 hmac-sha256 <first 16 hex of SHA-256(key)> <HMAC-SHA256(key,
    "kvtier-mac-v1\\0" || block key || block file)>` for the value stored
    next to it;
  - a third replay with the key finds them all signed: no MAC failure and
    hits from Redis.

    /usr/bin/python3 tests/replay_remote_mac_test.py --cli build/dev/kvtier

Prints "N passed, M failed" last and exits non-zero on any failure.
"""
import argparse
import hashlib
import hmac
import json
import os
import socket
import tempfile
from urllib.parse import urlparse

from remote_test_util import ROOT, Runner, Servers, unique_prefix

TRACE = os.path.join(ROOT, "tests", "data", "mooncake", "synthetic_trace.jsonl")
LIMIT = "60"
RAM_TOKENS = "300000"


class Resp:
    """The least RESP client that reads what the tier stored."""

    def __init__(self, url):
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port or 6379), timeout=10)
        self.buf = b""
        if u.password:
            self.call(*([u.username, u.password] if u.username else [u.password]),
                      head="AUTH")

    def call(self, *args, head=None):
        parts = ([head] if head else []) + list(args)
        out = b"*%d\r\n" % len(parts)
        for p in parts:
            p = p if isinstance(p, bytes) else p.encode()
            out += b"$%d\r\n%s\r\n" % (len(p), p)
        self.sock.sendall(out)
        return self.reply()

    def line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(1 << 20)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n + 2:
            self.buf += self.sock.recv(1 << 20)
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            return None if int(rest) < 0 else self.exact(int(rest))
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise ValueError("unexpected reply %r" % line)


def replay(r, url, prefix, *extra):
    return r.json("replay", TRACE, "--limit", LIMIT, "--ram-tokens", RAM_TOKENS, "--remote", url,
                  "--remote-prefix", prefix, *extra)


def check_stored_tag(r, url, prefix, key):
    raw = Resp(url)
    names = raw.call("KEYS", prefix + "*:mac")
    r.check(len(names) > 0, "no :mac stored under %s" % prefix)
    if not names:
        return
    mac_name = names[0].decode()
    base = mac_name[:-len(":mac")]
    block_hex = base[base.index("{") + 1:base.index("}")]
    value = b""
    for i in range(64):
        part = raw.call("GET", base if i == 0 else "%s:%d" % (base, i))
        if part is None:
            break
        value += part
    stored = raw.call("GET", mac_name).decode()
    tag = hmac.new(key, b"kvtier-mac-v1\0" + bytes.fromhex(block_hex) + value,
                   hashlib.sha256).hexdigest()
    want = "v1 hmac-sha256 %s %s" % (hashlib.sha256(key).hexdigest()[:16], tag)
    r.check(stored == want, "%s: stored %r, Python's hmac says %r" % (mac_name, stored, want))
    # A flipped byte of the value no longer matches (the check can fail).
    bad = hmac.new(key, b"kvtier-mac-v1\0" + bytes.fromhex(block_hex) + value[:-1] +
                   bytes([value[-1] ^ 1]), hashlib.sha256).hexdigest()
    r.check(bad != tag, "a changed value gave the same tag")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Runner(args.cli)
    with tempfile.TemporaryDirectory() as work, Servers(os.path.join(work, "redis")) as servers:
        url = servers.single
        prefix = unique_prefix("mac")
        key = os.urandom(32)
        key_file = os.path.join(work, "mac.key")
        with open(key_file, "wb") as f:
            f.write(key)
        config = os.path.join(work, "signed.json")
        with open(config, "w") as f:
            json.dump({"remote_mac_keys": [key_file]}, f)

        plain = replay(r, url, prefix)
        stored = plain.get("remote_stored", 0)
        r.check(plain.get("wrong") == 0 and stored > 0,
                "keyless replay: wrong %r, stored %r" % (plain.get("wrong"), stored))
        r.check(plain["remote_stats"].get("mac_failures") == 0, "keyless replay counted MACs")

        signed = replay(r, url, prefix, "--config", config)
        rs = signed["remote_stats"]
        r.check(signed.get("wrong") == 0, "keyed replay: wrong %r" % signed.get("wrong"))
        r.check(rs.get("mac_failures") == stored,
                "keyed replay: mac_failures %r, the keyless one stored %r" %
                (rs.get("mac_failures"), stored))
        r.check(rs.get("bad_values_deleted") == stored and rs.get("bad_values") == 0,
                "keyed replay: deleted %r, bad values %r (of %r)" %
                (rs.get("bad_values_deleted"), rs.get("bad_values"), stored))
        r.check(signed.get("remote_stored") == stored,
                "keyed replay: recomputed and stored %r signed blocks, expected %r" %
                (signed.get("remote_stored"), stored))
        check_stored_tag(r, url, prefix, key)

        again = replay(r, url, prefix, "--config", config)
        r.check(again["remote_stats"].get("mac_failures") == 0 and
                again.get("hit_tokens_remote", 0) > 0 and again.get("wrong") == 0,
                "second keyed replay: mac_failures %r, remote hit tokens %r, wrong %r" %
                (again["remote_stats"].get("mac_failures"), again.get("hit_tokens_remote"),
                 again.get("wrong")))
    r.finish()


if __name__ == "__main__":
    main()
