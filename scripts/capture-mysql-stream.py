#!/usr/bin/env python3
"""Capture real MySQL-protocol command traffic for the response-boundary tracker tests.

Stdlib only. A recording relay sits between a client and a MariaDB server, copies both
directions unchanged and records the post-authentication byte streams in the order the relay
received them, one record per recv() chunk. Two kinds of client drive it:

  * the `mariadb` command-line client (libmariadb; no CLIENT_DEPRECATE_EOF),
  * a hand-written raw-socket client (this file) that negotiates the capability flags we ask for,
    in particular CLIENT_DEPRECATE_EOF, and sends every command the tracker must understand.

Output format (written to crates/wire/src/testdata/, `.gz` = gzip of the same bytes):

    magic    8 bytes  b"RGCAP1\\0\\0"
    caps     u32 LE   capability flags in effect (client flags & server flags)
    reserved u32 LE   0
    records  repeated until EOF:
        dir  u8       0 = client -> server, 1 = server -> client
        len  u32 LE
        data len bytes

The records start right after the server's OK that ends authentication.

Usage: scripts/capture-mysql-stream.py --port 3417 [--out crates/wire/src/testdata]
(the server must run with --local-infile=1 and --max-allowed-packet=64M; root with empty password)
"""

import argparse
import gzip
import os
import socket
import struct
import subprocess
import tempfile
import threading

MAGIC = b"RGCAP1\0\0"

CLIENT_LONG_PASSWORD = 0x1
CLIENT_FOUND_ROWS = 0x2
CLIENT_LONG_FLAG = 0x4
CLIENT_CONNECT_WITH_DB = 0x8
CLIENT_LOCAL_FILES = 0x80
CLIENT_PROTOCOL_41 = 0x200
CLIENT_TRANSACTIONS = 0x2000
CLIENT_SECURE_CONNECTION = 0x8000
CLIENT_MULTI_STATEMENTS = 0x10000
CLIENT_MULTI_RESULTS = 0x20000
CLIENT_PS_MULTI_RESULTS = 0x40000
CLIENT_PLUGIN_AUTH = 0x80000
CLIENT_PLUGIN_AUTH_LENENC = 0x200000
CLIENT_SESSION_TRACK = 0x800000
CLIENT_DEPRECATE_EOF = 0x1000000


# --------------------------------------------------------------------------- relay


class Recorder:
    """Records (direction, bytes) in arrival order; knows when authentication ended."""

    def __init__(self):
        self.lock = threading.Lock()
        self.records = []
        self.auth_done_at = None  # index of the first post-auth record
        self.caps = 0
        self.server_caps = 0
        self._srv_buf = b""
        self._cli_seen = False
        self._srv_packets = 0

    def add(self, direction, data):
        with self.lock:
            if self.auth_done_at is None:
                self._watch_auth(direction, data)
                self.records.append((direction, data))
                return
            self.records.append((direction, data))

    def _watch_auth(self, direction, data):
        if direction == 0:
            if not self._cli_seen:
                self._cli_seen = True
                ccaps = struct.unpack_from("<I", data, 4)[0]
                self.caps = ccaps & self.server_caps
            return
        self._srv_buf += data
        while len(self._srv_buf) >= 4:
            ln = int.from_bytes(self._srv_buf[:3], "little")
            if len(self._srv_buf) < 4 + ln:
                break
            payload = self._srv_buf[4 : 4 + ln]
            self._srv_buf = self._srv_buf[4 + ln :]
            self._srv_packets += 1
            if self._srv_packets == 1:
                # Handshake v10: caps low at after version string + 4 + 8 + 1.
                p = payload.index(b"\0", 1) + 1 + 4 + 8 + 1
                low = struct.unpack_from("<H", payload, p)[0]
                high = struct.unpack_from("<H", payload, p + 5)[0]
                self.server_caps = low | (high << 16)
            elif payload[:1] == b"\x00":
                assert not self._srv_buf, "server sent bytes after the auth OK"
                self.auth_done_at = len(self.records) + 1
            elif payload[:1] == b"\xff":
                raise RuntimeError("authentication failed: %r" % payload)

    def dump(self, path):
        assert self.auth_done_at is not None, "authentication never completed"
        out = bytearray(MAGIC)
        out += struct.pack("<II", self.caps, 0)
        for d, data in self.records[self.auth_done_at :]:
            out += struct.pack("<BI", d, len(data)) + data
        if path.endswith(".gz"):
            with gzip.open(path, "wb", compresslevel=9) as f:
                f.write(bytes(out))
        else:
            with open(path, "wb") as f:
                f.write(bytes(out))
        n = len(self.records) - self.auth_done_at
        print("wrote %s: %d records, %d bytes raw, caps=0x%08x" % (path, n, len(out), self.caps))


def start_relay(backend_port):
    """Listens on an ephemeral port; relays one connection; returns (port, recorder, thread)."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    rec = Recorder()

    def pump(src, dst, direction):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                rec.add(direction, data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def run():
        c, _ = ls.accept()
        ls.close()
        s = socket.create_connection(("127.0.0.1", backend_port))
        t1 = threading.Thread(target=pump, args=(c, s, 0))
        t2 = threading.Thread(target=pump, args=(s, c, 1))
        t1.start()
        t2.start()
        t1.join()
        t2.join()
        c.close()
        s.close()

    t = threading.Thread(target=run)
    t.start()
    return ls.getsockname()[1], rec, t


# --------------------------------------------------------------------------- raw client


def lenenc(n):
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + struct.pack("<I", n)[:3]
    return b"\xfe" + struct.pack("<Q", n)


class RawClient:
    def __init__(self, port, caps):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""
        self.caps = caps
        self._login()

    # -- packets
    def _recv_exact(self, n):
        while len(self.buf) < n:
            d = self.sock.recv(1 << 20)
            if not d:
                raise EOFError
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_packet(self):
        """Returns (seq, logical payload)."""
        payload = b""
        first_seq = None
        while True:
            h = self._recv_exact(4)
            ln = int.from_bytes(h[:3], "little")
            if first_seq is None:
                first_seq = h[3]
            payload += self._recv_exact(ln)
            if ln < 0xFFFFFF:
                return first_seq, payload

    @staticmethod
    def frame(payload, seq=0):
        out = bytearray()
        while True:
            part, payload = payload[:0xFFFFFF], payload[0xFFFFFF:]
            out += len(part).to_bytes(3, "little") + bytes([seq & 0xFF]) + part
            seq += 1
            if len(part) < 0xFFFFFF:
                return bytes(out), seq

    def send(self, payload, seq=0):
        data, nxt = self.frame(payload, seq)
        self.sock.sendall(data)
        return nxt

    def _login(self):
        _, hs = self.read_packet()
        assert hs[0] == 10
        p = hs.index(b"\0", 1) + 1
        p += 4
        p += 8 + 1
        low = struct.unpack_from("<H", hs, p)[0]
        p += 2 + 1 + 2
        high = struct.unpack_from("<H", hs, p)[0]
        server_caps = low | (high << 16)
        missing = self.caps & ~server_caps
        assert missing == 0, "server lacks capabilities 0x%x" % missing
        resp = struct.pack("<IIB", self.caps, 1 << 30, 45) + b"\0" * 23
        resp += b"root\0" + b"\0"  # empty auth response (1-byte length 0)
        resp += b"mysql_native_password\0"
        self.send(resp, seq=1)
        _, r = self.read_packet()
        if r[:1] == b"\xfe":  # auth switch: empty password => empty response
            self.send(b"", seq=3)
            _, r = self.read_packet()
        assert r[:1] == b"\x00", r

    # -- response readers (client-side view; independent of the Rust tracker)
    def is_eof(self, p):
        return p[:1] == b"\xfe" and len(p) < 0xFFFFFF

    def read_result(self, binary=False, cursor=False):
        """Reads one complete COM_QUERY/COM_STMT_EXECUTE response (all results)."""
        kinds = []
        while True:
            _, p = self.read_packet()
            if p[:1] == b"\x00":
                kinds.append("ok")
                status = self._ok_status(p)
            elif p[:1] == b"\xff":
                kinds.append("err")
                return kinds
            elif p[:1] == b"\xfb":
                kinds.append("infile")
                return kinds  # caller sends the file and calls read_result again
            else:
                ncols = self._lenenc_at(p, 0)[0]
                for _ in range(ncols):
                    self.read_packet()
                if not (self.caps & CLIENT_DEPRECATE_EOF):
                    _, e = self.read_packet()
                    assert self.is_eof(e), e
                    status = self._eof_or_ok_status(e)
                    # a cursor was opened: no rows follow (a CURSOR_EXISTS flag that leaks out of
                    # a stored procedure comes with MORE_RESULTS_EXISTS and rows do follow)
                    if cursor and status & 0x40 and not status & 0x08:
                        kinds.append("cursor")
                        return kinds
                rows = 0
                while True:
                    _, r = self.read_packet()
                    if self.is_eof(r):
                        status = self._eof_or_ok_status(r)
                        break
                    if r[:1] == b"\xff":
                        kinds.append("rows%d+err" % rows)
                        return kinds
                    rows += 1
                if cursor and rows == 0 and status & 0x40 and not status & 0x08:
                    kinds.append("cursor")
                    return kinds
                kinds.append("rows%d" % rows)
            if not status & 0x08:
                return kinds

    def read_rows(self):
        rows = 0
        while True:
            _, r = self.read_packet()
            if self.is_eof(r):
                return rows, self._eof_or_ok_status(r)
            if r[:1] == b"\xff":
                return rows, None
            rows += 1

    @staticmethod
    def _lenenc_at(p, i):
        b = p[i]
        if b < 251:
            return b, i + 1
        if b == 0xFC:
            return struct.unpack_from("<H", p, i + 1)[0], i + 3
        if b == 0xFD:
            return int.from_bytes(p[i + 1 : i + 4], "little"), i + 4
        return struct.unpack_from("<Q", p, i + 1)[0], i + 9

    def _ok_status(self, p):
        _, i = self._lenenc_at(p, 1)
        _, i = self._lenenc_at(p, i)
        return struct.unpack_from("<H", p, i)[0]

    def _eof_or_ok_status(self, p):
        if len(p) == 5:
            return struct.unpack_from("<H", p, 3)[0]
        return self._ok_status(p)

    # -- commands
    def query(self, sql, **kw):
        self.send(b"\x03" + sql.encode())
        return self.read_result(**kw)

    def simple(self, payload):
        self.send(payload)
        return self.read_packet()[1]

    def prepare(self, sql):
        self.send(b"\x16" + sql.encode())
        _, p = self.read_packet()
        if p[:1] == b"\xff":
            return None, p
        stmt_id, ncols, nparams = struct.unpack_from("<IHH", p, 1)
        eofs = []
        for n in (nparams, ncols):
            for _ in range(n):
                self.read_packet()
            if n and not (self.caps & CLIENT_DEPRECATE_EOF):
                _, e = self.read_packet()
                assert self.is_eof(e), e
                eofs.append(e)
        return (stmt_id, ncols, nparams), p

    def execute(self, stmt_id, params=(), cursor=0, **kw):
        payload = b"\x17" + struct.pack("<IBI", stmt_id, cursor, 1)
        if params:
            payload += b"\0" * ((len(params) + 7) // 8) + b"\x01"
            payload += b"".join(struct.pack("<BB", t, 0) for t, _ in params)
            payload += b"".join(v for _, v in params)
        self.send(payload)
        return self.read_result(binary=True, cursor=bool(cursor), **kw)

    def quit(self):
        self.send(b"\x01")
        self.sock.close()


MYSQL_TYPE_LONGLONG = 8
MYSQL_TYPE_VAR_STRING = 253


def scenario(c, with_quit=True):
    log = []

    def rec(name, v):
        log.append((name, v))

    rec("select1", c.query("SELECT 1, 'abc', NULL"))
    rec("create db", c.query("CREATE DATABASE IF NOT EXISTS cap"))
    rec("init_db", c.simple(b"\x02cap")[:1])
    rec("drop", c.query("DROP TABLE IF EXISTS t"))
    rec("drop proc", c.query("DROP PROCEDURE IF EXISTS p"))
    rec("drop proc pc", c.query("DROP PROCEDURE IF EXISTS pc"))
    rec("create", c.query("CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(200), b BLOB)"))
    rec("insert", c.query("INSERT INTO t (v) VALUES ('a'), ('b'), ('c'), (NULL)"))
    rec("select t", c.query("SELECT * FROM t ORDER BY id"))
    rec("empty rs", c.query("SELECT * FROM t WHERE id < 0"))
    rec("error", c.query("SELECT * FROM no_such_table"))
    rec("multi", c.query("SELECT 1; SELECT 2,3; DO 1"))
    rec("multi err", c.query("SELECT 1; SELECT * FROM nope; SELECT 2"))
    rec("proc", c.query("CREATE PROCEDURE p() BEGIN SELECT 1 AS a; SELECT 2 AS b, 'x' AS c; END"))
    rec("call", c.query("CALL p()"))
    rec("begin", c.query("BEGIN"))
    rec("insert in trx", c.query("INSERT INTO t (v) VALUES ('trx')"))
    rec("select in trx", c.query("SELECT COUNT(*) FROM t"))
    rec("commit", c.query("COMMIT"))
    rec("ping", c.simple(b"\x0e")[:1])
    rec("statistics", c.simple(b"\x09")[:20])
    # COM_FIELD_LIST: definitions until EOF
    c.send(b"\x04t\0")
    n = 0
    while True:
        _, p = c.read_packet()
        if c.is_eof(p) or p[:1] == b"\xff":
            break
        n += 1
    rec("field_list", n)
    # prepared statements
    (sid, ncols, nparams), _ = c.prepare("SELECT id, v FROM t WHERE id > ?")
    rec("prepare sel", (ncols, nparams))
    rec("exec sel", c.execute(sid, [(MYSQL_TYPE_LONGLONG, struct.pack("<q", 1))]))
    rec("exec cursor", c.execute(sid, [(MYSQL_TYPE_LONGLONG, struct.pack("<q", 0))], cursor=1))
    c.send(b"\x1c" + struct.pack("<II", sid, 2))
    rec("fetch 2", c.read_rows())
    c.send(b"\x1c" + struct.pack("<II", sid, 100))
    rec("fetch rest", c.read_rows())
    rec("stmt_reset", c.simple(b"\x1a" + struct.pack("<I", sid))[:1])
    (sid2, ncols, nparams), _ = c.prepare("INSERT INTO t (v, b) VALUES (?, ?)")
    rec("prepare ins", (ncols, nparams))
    # COM_STMT_SEND_LONG_DATA has no response
    c.send(b"\x18" + struct.pack("<IH", sid2, 1) + b"long data part")
    rec("exec ins", c.execute(sid2, [(MYSQL_TYPE_VAR_STRING, lenenc(3) + b"pxy"), (MYSQL_TYPE_VAR_STRING, lenenc(0))]))
    (sid3, ncols, nparams), _ = c.prepare("DO 1")
    rec("prepare do", (ncols, nparams))
    rec("exec do", c.execute(sid3))
    (sid4, ncols, nparams), _ = c.prepare("SELECT 42 AS answer")
    rec("prepare noparam", (ncols, nparams))
    rec("exec noparam", c.execute(sid4))
    rec("prepare err", c.prepare("SELECT FROM WHERE")[0])
    # a procedure that uses a cursor internally: its result sets carry CURSOR_EXISTS together
    # with MORE_RESULTS_EXISTS and still have rows
    rec("proc cursor", c.query("CREATE PROCEDURE pc() BEGIN DECLARE x INT; DECLARE cur CURSOR FOR "
                               "SELECT 1; OPEN cur; FETCH cur INTO x; SELECT x; SELECT 5, 6; CLOSE cur; END"))
    rec("call pc", c.query("CALL pc()"))
    (sid6, ncols, nparams), _ = c.prepare("CALL pc()")
    rec("exec cursor call pc", c.execute(sid6, cursor=1))
    c.send(b"\x19" + struct.pack("<I", sid6))
    (sid5, ncols, nparams), _ = c.prepare("CALL p()")
    rec("prepare call", (ncols, nparams))
    rec("exec call", c.execute(sid5))
    rec("exec unknown stmt", c.execute(0x7FFFFFFF))
    # pipelined: STMT_CLOSE (no response) immediately followed by COM_QUERY in one write
    data = c.frame(b"\x19" + struct.pack("<I", sid2))[0] + c.frame(b"\x03SELECT 'after close'")[0]
    c.sock.sendall(data)
    rec("pipelined close+query", c.read_result())
    # pipelined: two queries in one write, two responses
    data = c.frame(b"\x03SELECT 10")[0] + c.frame(b"\x03SELECT 20")[0] + c.frame(b"\x0e")[0]
    c.sock.sendall(data)
    rec("pipelined q1", c.read_result())
    rec("pipelined q2", c.read_result())
    rec("pipelined ping", c.read_packet()[1][:1])
    for s in (sid, sid3, sid4, sid5):
        c.send(b"\x19" + struct.pack("<I", s))
    # LOCAL INFILE: server asks with 0xFB, client sends packets then an empty packet
    kinds = c.query("LOAD DATA LOCAL INFILE 'rows.txt' INTO TABLE t (v)")
    assert kinds == ["infile"], kinds
    seq = 2
    for chunk in (b"line1\nline2\n", b"line3\n" * 50, b"last\n"):
        seq = c.send(chunk, seq)
    c.send(b"", seq)
    rec("infile", c.read_result())
    # LOCAL INFILE where the client has no file: empty packet right away
    kinds = c.query("LOAD DATA LOCAL INFILE 'missing.txt' INTO TABLE t (v)")
    assert kinds == ["infile"], kinds
    c.send(b"", 2)
    rec("infile empty", c.read_result())
    rec("process_info", c.read_result() if c.send(b"\x0a") else None)
    rec("set_option off", c.simple(b"\x1b\x01\x00")[:1])
    rec("set_option on", c.simple(b"\x1b\x00\x00")[:1])
    rec("refresh", c.simple(b"\x07\x00")[:1])
    rec("debug", c.simple(b"\x0d")[:1])
    rec("kill bad", c.simple(b"\x0c" + struct.pack("<I", 999999))[:1])
    rec("reset_connection", c.simple(b"\x1f")[:1])
    rec("final select", c.query("SELECT 'done'"))
    if with_quit:
        c.quit()
    for name, v in log:
        print("   %-24s %r" % (name, v))


def big_scenario(c):
    # a text row whose first column is >= 16 MiB: the row packet starts with 0xFE and spans
    # two physical packets; must not be taken for a terminator
    print("   big row", c.query("SELECT REPEAT('x', 17000000) AS big, 7 AS small"))
    # a multi-packet client command (>= 16 MiB query)
    print("   big query", c.query("SELECT LENGTH('" + "y" * 16777300 + "')"))
    # a query of exactly 0xFFFFFF-1 payload bytes... and one whose payload is exactly 0xFFFFFF
    # (split into a full packet plus an empty one)
    base = "SELECT LENGTH('')"
    pad = 0xFFFFFF - 1 - len(base)
    print("   exact 0xffffff query", c.query("SELECT LENGTH('" + "z" * pad + "')"))
    print("   after", c.query("SELECT 1"))
    c.quit()


def run_raw(port, caps, path, fn):
    rport, rec, t = start_relay(port)
    c = RawClient(rport, caps)
    fn(c)
    t.join()
    rec.dump(path)


def run_cli(port, path):
    rport, rec, t = start_relay(port)
    tmp = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    tmp.write("".join("row %d\n" % i for i in range(200)))
    tmp.close()
    sql = f"""
CREATE DATABASE IF NOT EXISTS cli;
USE cli;
DROP TABLE IF EXISTS t;
DROP PROCEDURE IF EXISTS p;
CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(100));
INSERT INTO t (v) VALUES ('a'), ('b');
SELECT * FROM t;
SELECT * FROM does_not_exist;
DELIMITER //
SELECT 1; SELECT 2,3; DO 1 //
CREATE PROCEDURE p() BEGIN SELECT 1 AS a; SELECT 2 AS b, 'x' AS c; END //
DELIMITER ;
CALL p();
BEGIN;
INSERT INTO t (v) VALUES ('in trx');
COMMIT;
LOAD DATA LOCAL INFILE '{tmp.name}' INTO TABLE t (v);
SELECT COUNT(*) FROM t;
status
SELECT 1 AS last;
"""
    r = subprocess.run(
        ["mariadb", "-h127.0.0.1", "-P%d" % rport, "-uroot", "--skip-ssl", "--local-infile=1",
         "--table", "--comments", "--force"],
        input=sql, text=True, capture_output=True)
    print(r.stdout[-600:], r.stderr)
    os.unlink(tmp.name)
    t.join()
    rec.dump(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=3417)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "crates", "wire", "src", "testdata"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    base = (CLIENT_LONG_FLAG | CLIENT_LOCAL_FILES | CLIENT_PROTOCOL_41
            | CLIENT_TRANSACTIONS | CLIENT_SECURE_CONNECTION | CLIENT_MULTI_STATEMENTS
            | CLIENT_MULTI_RESULTS | CLIENT_PS_MULTI_RESULTS | CLIENT_PLUGIN_AUTH)
    print("raw client, legacy EOF")
    run_raw(a.port, base, os.path.join(a.out, "raw-eof.bin"), scenario)
    print("raw client, CLIENT_DEPRECATE_EOF + CLIENT_SESSION_TRACK")
    run_raw(a.port, base | CLIENT_DEPRECATE_EOF | CLIENT_SESSION_TRACK,
            os.path.join(a.out, "raw-deprecate-eof.bin"), scenario)
    print("raw client, big packets, legacy EOF")
    run_raw(a.port, base, os.path.join(a.out, "big-eof.bin.gz"), big_scenario)
    print("raw client, big packets, CLIENT_DEPRECATE_EOF")
    run_raw(a.port, base | CLIENT_DEPRECATE_EOF, os.path.join(a.out, "big-deprecate-eof.bin.gz"), big_scenario)
    print("mariadb CLI")
    run_cli(a.port, os.path.join(a.out, "cli.bin"))


if __name__ == "__main__":
    main()
