"""The MySQL client protocol by hand, over a raw socket: for tests that must choose every byte a
client sends (a plugin no driver here proposes, an attacker's random token, a capability left
out, pipelined commands) or see every packet ringgate answers with.
"""

import hashlib
import socket
import struct

from conftest import APP_PASSWORD, APP_USER, TEST_DB

# Capability flags of the handshake response.
CLIENT_LONG_PASSWORD = 1  # CLIENT_MYSQL for MariaDB: cleared to send extended capabilities
CLIENT_CONNECT_WITH_DB = 1 << 3
CLIENT_PROTOCOL_41 = 1 << 9
CLIENT_SSL = 1 << 11
CLIENT_TRANSACTIONS = 1 << 13
CLIENT_SECURE_CONNECTION = 1 << 15
CLIENT_PLUGIN_AUTH = 1 << 19
CLIENT_PLUGIN_AUTH_LENENC = 1 << 21
# MariaDB's extended capabilities (the response's last 4 filler bytes).
MARIADB_CLIENT_STMT_BULK_OPERATIONS = 1 << 2
# What a login of a MySQL 8 client offers: enough for a plugin-aware handshake.
LOGIN_CAPS = (
    CLIENT_LONG_PASSWORD | CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH | CLIENT_PLUGIN_AUTH_LENENC
)

SERVER_STATUS_CURSOR_EXISTS = 0x40
SERVER_STATUS_LAST_ROW_SENT = 0x80
# Column types of binary-protocol parameters.
T_LONG, T_LONGLONG, T_VAR_STRING, T_BLOB = 3, 8, 253, 252

UTF8MB4_GENERAL_CI = 45
MAX_PACKET = 1 << 24


def packet(seq, payload):
    """One packet on the wire: a 3-byte length, the sequence id, the payload."""
    return struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload


def write_packet(sock, seq, payload):
    sock.sendall(packet(seq, payload))


def read_packet(sock):
    """(sequence id, payload) of the next packet; fails if the peer closes first."""
    header = b""
    while len(header) < 4:
        chunk = sock.recv(4 - len(header))
        assert chunk, "connection closed"
        header += chunk
    length = header[0] | header[1] << 8 | header[2] << 16
    payload = b""
    while len(payload) < length:
        chunk = sock.recv(length - len(payload))
        assert chunk, "connection closed"
        payload += chunk
    return header[3], payload


def greeting_scramble(payload):
    """The 20-byte scramble of a greeting (protocol 10)."""
    # protocol(1) version NUL conn_id(4) scramble1(8) filler(1) caps(2) charset(1)
    # status(2) caps_hi(2) auth_len(1) reserved(10) scramble2 NUL plugin NUL
    pos = payload.index(b"\0", 1) + 1 + 4
    part1 = payload[pos : pos + 8]
    pos += 8 + 1 + 2 + 1 + 2 + 2
    auth_len = payload[pos]
    pos += 1 + 10
    part2 = payload[pos : pos + max(13, auth_len - 8) - 1]
    return part1 + part2


def native_token(password, scramble):
    """mysql_native_password's answer to `scramble`."""
    stage1 = hashlib.sha1(password.encode()).digest()
    stage2 = hashlib.sha1(stage1).digest()
    mix = hashlib.sha1(scramble + stage2).digest()
    return bytes(a ^ b for a, b in zip(stage1, mix))


def sha2_token(password, nonce):
    """caching_sha2_password's first answer to `nonce` (what fast auth checks)."""
    stage1 = hashlib.sha256(password.encode()).digest()
    mix = hashlib.sha256(hashlib.sha256(stage1).digest() + nonce).digest()
    return bytes(a ^ b for a, b in zip(stage1, mix))


def handshake_response(user, token, plugin, caps=LOGIN_CAPS, mariadb_caps=0, database=None):
    """A protocol-41 handshake response with a length-prefixed auth token (and the schema when
    `database`, which needs CLIENT_CONNECT_WITH_DB in `caps`)."""
    return (
        struct.pack("<IIB", caps, MAX_PACKET, UTF8MB4_GENERAL_CI)
        + b"\0" * 19
        + struct.pack("<I", mariadb_caps)
        + user.encode()
        + b"\0"
        + bytes([len(token)])
        + token
        + (database.encode() + b"\0" if database is not None else b"")
        + plugin.encode()
        + b"\0"
    )


def ssl_request(caps):
    """The handshake response's first 32 bytes, which ask for TLS (CLIENT_SSL in `caps`)."""
    return struct.pack("<IIB23x", caps, MAX_PACKET, UTF8MB4_GENERAL_CI)


def lenenc(b):
    assert len(b) < 251 or len(b) < 1 << 16
    return (bytes([len(b)]) if len(b) < 251 else b"\xfc" + struct.pack("<H", len(b))) + b


def read_lenenc(buf, pos):
    first = buf[pos]
    if first < 251:
        return first, pos + 1
    if first == 0xFC:
        return struct.unpack_from("<H", buf, pos + 1)[0], pos + 3
    if first == 0xFD:
        return int.from_bytes(buf[pos + 1:pos + 4], "little"), pos + 4
    return struct.unpack_from("<Q", buf, pos + 1)[0], pos + 9


def binary_strings(row, ncols):
    """The string columns of a binary result row (every column a string)."""
    pos = 1 + (ncols + 7 + 2) // 8
    out = []
    for i in range(ncols):
        if row[1 + (i + 2) // 8] & (1 << ((i + 2) % 8)):
            out.append(None)
            continue
        n, pos = read_lenenc(row, pos)
        out.append(row[pos:pos + n])
        pos += n
    return out


class ServerError(Exception):
    def __init__(self, payload):
        self.code = struct.unpack_from("<H", payload, 1)[0]
        super().__init__(f"ERR {self.code}: {payload[9:].decode(errors='replace')}")


class Raw:
    """Just enough of the binary protocol for the prepared-statement tests (classic EOF
    packets), logged in as `app` to TEST_DB with mysql_native_password."""

    def __init__(self, port, bulk=False):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""
        _, greeting = self.read()
        scramble = greeting_scramble(greeting)
        caps = (CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH
                | CLIENT_TRANSACTIONS | CLIENT_CONNECT_WITH_DB)
        ext = 0
        if bulk:
            ext = MARIADB_CLIENT_STMT_BULK_OPERATIONS
        else:
            caps |= CLIENT_LONG_PASSWORD
        token = native_token(APP_PASSWORD, scramble)
        self.write(1, handshake_response(APP_USER, token, "mysql_native_password", caps, ext, TEST_DB))
        _, ok = self.read()
        assert ok[0] == 0, ok

    def close(self):
        try:
            self.write(0, b"\x01")
        finally:
            self.sock.close()

    def write(self, seq, payload):
        self.sock.sendall(packet(seq, payload))

    def read(self):
        while len(self.buf) < 4 or len(self.buf) < 4 + int.from_bytes(self.buf[:3], "little"):
            chunk = self.sock.recv(1 << 20)
            assert chunk, "connection closed"
            self.buf += chunk
        n = int.from_bytes(self.buf[:3], "little")
        seq, payload = self.buf[3], self.buf[4:4 + n]
        self.buf = self.buf[4 + n:]
        return seq, payload

    def read_ok(self):
        _, p = self.read()
        if p[0] == 0xFF:
            raise ServerError(p)
        assert p[0] == 0, p
        return p

    def read_prepare(self):
        _, p = self.read()
        if p[0] == 0xFF:
            raise ServerError(p)
        stmt, cols, params = struct.unpack_from("<IHH", p, 1)
        for _ in range(params + (1 if params else 0) + cols + (1 if cols else 0)):
            self.read()
        return stmt, cols, params

    def prepare(self, sql):
        self.write(0, b"\x16" + sql.encode())
        return self.read_prepare()

    @staticmethod
    def execute_packet(stmt, params=(), bind=True, cursor=0):
        """params: (type, value bytes) each; value None = NULL."""
        p = b"\x17" + struct.pack("<IBI", stmt, cursor, 1)
        if params:
            bitmap = bytearray((len(params) + 7) // 8)
            for i, (_, v) in enumerate(params):
                if v is None:
                    bitmap[i // 8] |= 1 << (i % 8)
            p += bytes(bitmap) + (b"\x01" if bind else b"\x00")
            if bind:
                p += b"".join(struct.pack("<BB", t, 0) for t, _ in params)
            for t, v in params:
                if v is None:
                    continue
                if t == T_LONG:
                    p += struct.pack("<i", v)
                elif t == T_LONGLONG:
                    p += struct.pack("<q", v)
                else:
                    p += lenenc(v)
        return p

    def execute(self, stmt, params=(), bind=True, cursor=0):
        self.write(0, self.execute_packet(stmt, params, bind, cursor))
        return self.read_result()

    def read_result(self):
        """('ok', payload) or ('rows', [row payloads], status)."""
        _, p = self.read()
        if p[0] == 0xFF:
            raise ServerError(p)
        if p[0] == 0:
            return ("ok", p)
        ncols, _ = read_lenenc(p, 0)
        for _ in range(ncols):
            self.read()
        _, eof = self.read()
        status = struct.unpack_from("<H", eof, 3)[0]
        if status & SERVER_STATUS_CURSOR_EXISTS:
            return ("cursor", [], status)
        rows = []
        while True:
            _, p = self.read()
            if p[0] == 0xFE and len(p) < 9:
                return ("rows", rows, struct.unpack_from("<H", p, 3)[0])
            if p[0] == 0xFF:
                raise ServerError(p)
            rows.append(p)

    def fetch(self, stmt, n):
        self.write(0, b"\x1c" + struct.pack("<II", stmt, n))
        rows = []
        while True:
            _, p = self.read()
            if p[0] == 0xFF:
                raise ServerError(p)
            if p[0] == 0xFE and len(p) < 9:
                return rows, struct.unpack_from("<H", p, 3)[0]
            rows.append(p)

    def long_data(self, stmt, param, data):
        self.write(0, b"\x18" + struct.pack("<IH", stmt, param) + data)

    def close_stmt(self, stmt):
        self.write(0, b"\x19" + struct.pack("<I", stmt))

    def reset_stmt(self, stmt):
        self.write(0, b"\x1a" + struct.pack("<I", stmt))
        return self.read_ok()

    def query(self, sql):
        self.write(0, b"\x03" + sql.encode())
        _, p = self.read()
        if p[0] == 0xFF:
            raise ServerError(p)
        if p[0] == 0:
            return []
        ncols, _ = read_lenenc(p, 0)
        for _ in range(ncols + 1):
            self.read()
        rows = []
        while True:
            _, p = self.read()
            if p[0] == 0xFE and len(p) < 9:
                return rows
            vals, pos = [], 0
            for _ in range(ncols):
                if p[pos] == 0xFB:
                    vals.append(None)
                    pos += 1
                else:
                    n, pos = read_lenenc(p, pos)
                    vals.append(p[pos:pos + n].decode())
                    pos += n
            rows.append(vals)
