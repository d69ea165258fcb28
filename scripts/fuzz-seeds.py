#!/usr/bin/env python3
"""Build the cargo-fuzz seed corpora from real captured MySQL traffic.

Stdlib only. Writes small files under fuzz/seeds/<target>/ (committed) from:

  * crates/wire/src/testdata/*.bin[.gz] -- post-authentication command traffic captured from
    MariaDB 10.11 by scripts/capture-mysql-stream.py (format documented there and in
    crates/wire/src/tracker/tests.rs): every command/response exchange becomes a `tracker` seed, and
    every server reply packet a `framing_handshake` seed;
  * with --port P (a running MariaDB whose root has no password, e.g. the test sandbox): a live
    capture of the login phase through a recording relay, driven by the `mariadb` command-line
    client -- the server greeting, the client's HandshakeResponse41, the auth reply -- plus an
    SSLRequest cut from that real HandshakeResponse (an SSLRequest is its first 32 bytes).

Seed formats are those of the fuzz targets (fuzz/fuzz_targets/*.rs):
  framing_handshake: 1 flag byte (bit 0 = deprecate_eof, bit 1 = the backend login sends a
                     schema, bit 2 = it has an empty password, bits 3-4 = restore statements
                     after a pool reset), then bytes
  tracker: 1 flag byte (bit 0 = deprecate_eof), then records: 0xF0 = client bytes follow,
           0xF1 = server bytes follow, 0xF3 = chunk boundary; data bytes 0xF0..0xF4 are escaped
           as 0xF4, b - 0xF0.
  lexer: 1 flag byte (bit 0 = NO_BACKSLASH_ESCAPES, bit 1 = ANSI_QUOTES, bit 2 = unsafe
         multi-byte charset), then a COM_QUERY text: every captured COM_QUERY, plus LEXER_SQL.
  ok_packet: 1 flag byte (bit 0 = PROTOCOL_41, bit 1 = TRANSACTIONS, bit 2 = SESSION_TRACK,
             bit 3 = deprecate_eof), then an OK payload: every captured OK, and the
             session-tracking OKs of crates/wire/src/testdata/session-track-oks.txt.

Usage: scripts/fuzz-seeds.py [--port 3707] [--out fuzz/seeds]
"""

import argparse
import gzip
import hashlib
import os
import socket
import struct
import subprocess
import threading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(REPO, "crates", "wire", "src", "testdata")
CLIENT_DEPRECATE_EOF = 0x1000000
CLIENT_SESSION_TRACK = 0x800000
MAX_SEED = 8192  # bytes per tracker seed: libFuzzer works best on small inputs


# Hand-picked texts for the lexer: the tricky cases of crates/wire/src/lexer/tests.rs.
LEXER_SQL = [
    b"SET autocommit=0, @x=1",
    b"set @@session.autocommit=1; SET SESSION sql_mode = 'A,B'",
    b"SELECT '@x'; SELECT @@sql_mode; SELECT 1 /* @x := 2 */",
    b"SELECT /*! SQL_CALC_FOUND_ROWS */ * FROM t; SELECT /*M!100100 1 */",
    b"SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci; USE `my db`",
    b"SELECT 'a\\';' ; SELECT \"a\\\"\"; SELECT `a``b` -- c\n# d\n",
    b"CREATE DEFINER=`root`@`localhost` PROCEDURE p() BEGIN SET @x = 1; SELECT 2; END",
    b"BEGIN NOT ATOMIC SELECT 1; END",
    b"SELECT LAST_INSERT_ID() AS id; SHOW COUNT(*) WARNINGS; COMMIT AND CHAIN RELEASE",
    b"SET STATEMENT max_statement_time=1 FOR SELECT GET_LOCK('a', 1) INTO @r",
    b"SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION READ ONLY",
]


def load_capture(path):
    raw = open(path, "rb").read()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    assert raw[:8] == b"RGCAP1\0\0", path
    caps, _ = struct.unpack_from("<II", raw, 8)
    pos, recs = 16, []
    while pos < len(raw):
        d = raw[pos]
        (n,) = struct.unpack_from("<I", raw, pos + 1)
        recs.append((d, raw[pos + 5 : pos + 5 + n]))
        pos += 5 + n
    return caps, recs


def escape(data):
    out = bytearray()
    for b in data:
        if 0xF0 <= b <= 0xF4:
            out += bytes([0xF4, b - 0xF0])
        else:
            out.append(b)
    return bytes(out)


def exchanges(recs):
    """Groups records into client-then-server exchanges."""
    cur, out, last = [], [], None
    for d, data in recs:
        if d == 0 and last == 1 and cur:
            out.append(cur)
            cur = []
        cur.append((d, data))
        last = d
    if cur:
        out.append(cur)
    return out


def tracker_seed(flags, recs, split=None):
    out = bytearray([flags])
    for d, data in recs:
        out.append(0xF0 if d == 0 else 0xF1)
        if split:
            for i in range(0, len(data), split):
                if i:
                    out.append(0xF3)
                out += escape(data[i : i + split])
        else:
            out += escape(data)
    return bytes(out)


def packets(stream):
    pos = 0
    while pos + 4 <= len(stream):
        n = stream[pos] | stream[pos + 1] << 8 | stream[pos + 2] << 16
        if pos + 4 + n > len(stream):
            break
        yield stream[pos + 4 : pos + 4 + n], stream[pos : pos + 4 + n]
        pos += 4 + n


class Seeds:
    def __init__(self, out):
        self.out = out
        self.count = {}

    def add(self, target, data):
        d = os.path.join(self.out, target)
        os.makedirs(d, exist_ok=True)
        name = hashlib.sha1(data).hexdigest()[:16]
        p = os.path.join(d, name)
        if not os.path.exists(p):
            open(p, "wb").write(data)
            self.count[target] = self.count.get(target, 0) + 1


def from_captures(seeds):
    for fname in sorted(os.listdir(TESTDATA)):
        if ".bin" not in fname:
            continue
        caps, recs = load_capture(os.path.join(TESTDATA, fname))
        deof = 1 if caps & CLIENT_DEPRECATE_EOF else 0
        kept = 0
        for ex in exchanges(recs):
            size = sum(len(d) for _, d in ex)
            if size > MAX_SEED:
                continue
            seeds.add("tracker", tracker_seed(deof, ex))
            # The same exchange cut into small chunks, as a 1-byte..7-byte relay would.
            seeds.add("tracker", tracker_seed(deof, ex, split=1 + kept % 7))
            kept += 1
        # A few multi-command seeds (pipelines, state carried across commands).
        window, size = [], 0
        for ex in exchanges(recs):
            exs = sum(len(d) for _, d in ex)
            if exs > MAX_SEED:
                window, size = [], 0
                continue
            if size + exs > MAX_SEED:
                seeds.add("tracker", tracker_seed(deof, [r for e in window for r in e]))
                window, size = [], 0
            window.append(ex)
            size += exs
        # Every server packet (OK, ERR, EOF, column definitions, rows) for the reply parsers.
        server = b"".join(d for dr, d in recs if dr == 1)
        seen = 0
        ok_flags = 0x3 | (0x4 if caps & CLIENT_SESSION_TRACK else 0) | (0x8 if deof else 0)
        for payload, framed in packets(server):
            if len(framed) > 512 or seen > 150:
                continue
            seeds.add("framing_handshake", bytes([deof]) + framed)
            if payload[:1] in (b"\x00", b"\xfe") and len(payload) > 5:
                seeds.add("ok_packet", bytes([ok_flags]) + payload)
            seen += 1
        # Every COM_QUERY text for the lexer.
        client = b"".join(d for dr, d in recs if dr == 0)
        for payload, _ in packets(client):
            if payload[:1] == b"\x03" and len(payload) <= MAX_SEED:
                seeds.add("lexer", bytes([0]) + payload[1:])
    for sql in LEXER_SQL:
        seeds.add("lexer", bytes([0]) + sql)
        seeds.add("lexer", bytes([3]) + sql)
    track = os.path.join(TESTDATA, "session-track-oks.txt")
    if os.path.exists(track):
        for line in open(track):
            line = line.strip()
            if line and not line.startswith("#"):
                hexdata = line.split()[-1]
                seeds.add("ok_packet", bytes([0x7]) + bytes.fromhex(hexdata))


def live_login(seeds, port):
    """Records the login phase between the mariadb CLI and the server through a relay."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    rport = lsock.getsockname()[1]
    streams = {0: bytearray(), 1: bytearray()}

    def pump(src, dst, d):
        while True:
            try:
                b = src.recv(65536)
            except OSError:
                b = b""
            if not b:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            streams[d] += b
            dst.sendall(b)

    def relay():
        c, _ = lsock.accept()
        s = socket.create_connection(("127.0.0.1", port))
        t1 = threading.Thread(target=pump, args=(c, s, 0))
        t2 = threading.Thread(target=pump, args=(s, c, 1))
        t1.start(), t2.start(), t1.join(), t2.join()
        c.close(), s.close()

    t = threading.Thread(target=relay)
    t.start()
    subprocess.run(
        ["mariadb", "--no-defaults", "--protocol=TCP", "-h127.0.0.1", f"-P{rport}",
         "-uroot", "--skip-ssl", "-e", "SELECT 1"],
        check=True, stdout=subprocess.DEVNULL)
    t.join()
    server = list(packets(bytes(streams[1])))
    client = list(packets(bytes(streams[0])))
    greeting, hello = server[0], client[0]
    for flags in (0, 2, 4, 6):
        seeds.add("framing_handshake", bytes([flags]) + greeting[1])
        seeds.add("framing_handshake", bytes([flags]) + hello[1])
    # The whole login exchange, each direction as one stream (flag 4: root's empty password,
    # so the server's side drives the backend login machine to its end).
    seeds.add("framing_handshake", bytes([4]) + bytes(streams[1]))
    seeds.add("framing_handshake", bytes([4]) + bytes(streams[0]))
    # An SSLRequest is the first 32 bytes of a HandshakeResponse41, with CLIENT_SSL set.
    ssl = bytearray(hello[0][:32])
    ssl[1] |= 0x08  # CLIENT_SSL = 0x800
    seeds.add("framing_handshake", bytes([0]) + bytes([32, 0, 0, 1]) + bytes(ssl))
    for payload, framed in server[1:] + client[1:]:
        seeds.add("framing_handshake", bytes([0]) + framed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, help="a running MariaDB (root, no password) for the login capture")
    ap.add_argument("--out", default=os.path.join(REPO, "fuzz", "seeds"))
    a = ap.parse_args()
    seeds = Seeds(a.out)
    from_captures(seeds)
    if a.port:
        live_login(seeds, a.port)
    for k, v in sorted(seeds.count.items()):
        print(f"{k}: {v} new seeds in {os.path.join(a.out, k)}")


if __name__ == "__main__":
    main()
