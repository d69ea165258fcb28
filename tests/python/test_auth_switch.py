"""A MySQL 8 client proposes caching_sha2_password for a user whose users-file entry is only a
native hash (which caching_sha2 cannot check); ringgate answers with an AuthSwitchRequest to
mysql_native_password (same scramble) and then logs it in. For a `Password` user it answers the
caching_sha2 scramble itself: fast auth (0x01 0x03) then OK (see test_caching_sha2.py).

Driven over a raw socket, because PyMySQL and the mariadb CLI follow the
server's plugin and never propose caching_sha2_password here.
"""

import hashlib
import socket
import struct

from conftest import APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER

CLIENT_LONG_PASSWORD = 1
CLIENT_PROTOCOL_41 = 1 << 9
CLIENT_SECURE_CONNECTION = 1 << 15
CLIENT_PLUGIN_AUTH = 1 << 19
CLIENT_PLUGIN_AUTH_LENENC = 1 << 21


def read_packet(sock):
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


def write_packet(sock, seq, payload):
    sock.sendall(struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload)


def native_token(password, scramble):
    stage1 = hashlib.sha1(password.encode()).digest()
    stage2 = hashlib.sha1(stage1).digest()
    mix = hashlib.sha1(scramble + stage2).digest()
    return bytes(a ^ b for a, b in zip(stage1, mix))


def greeting_scramble(payload):
    # protocol(1) version NUL conn_id(4) scramble1(8) filler(1) caps(2) charset(1)
    # status(2) caps_hi(2) auth_len(1) reserved(10) scramble2 NUL plugin NUL
    pos = payload.index(b"\0", 1) + 1 + 4
    part1 = payload[pos : pos + 8]
    pos += 8 + 1 + 2 + 1 + 2 + 2
    auth_len = payload[pos]
    pos += 1 + 10
    part2 = payload[pos : pos + max(13, auth_len - 8) - 1]
    return part1 + part2


def test_caching_sha2_client_is_switched_to_native(proxy):
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        seq, greeting = read_packet(sock)
        assert seq == 0 and greeting[0] == 10
        scramble = greeting_scramble(greeting)
        assert len(scramble) == 20
        caps = (
            CLIENT_LONG_PASSWORD
            | CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_PLUGIN_AUTH_LENENC
        )
        # A caching_sha2 first token is 32 bytes of SHA-256 material: not native.
        fake_sha2 = hashlib.sha256(b"whatever").digest()
        response = (
            struct.pack("<IIB", caps, 1 << 24, 45)
            + b"\0" * 23
            + HASHED_USER.encode()
            + b"\0"
            + bytes([len(fake_sha2)])
            + fake_sha2
            + b"caching_sha2_password\0"
        )
        write_packet(sock, 1, response)
        seq, switch = read_packet(sock)
        assert switch[0] == 0xFE, f"expected an AuthSwitchRequest, got {switch!r}"
        plugin, _, data = switch[1:].partition(b"\0")
        assert plugin == b"mysql_native_password"
        assert data.rstrip(b"\0") == scramble, "the switch must reuse the greeting's scramble"
        write_packet(sock, seq + 1, native_token(HASHED_PASSWORD, scramble))
        _, ok = read_packet(sock)
        assert ok[0] == 0x00, f"expected OK after the auth switch, got {ok!r}"
        # The session works: COM_QUERY SELECT 1.
        write_packet(sock, 0, b"\x03SELECT 1")
        _, first = read_packet(sock)
        assert first == b"\x01", "a one-column result set"
        write_packet(sock, 0, b"\x01")  # COM_QUIT
    proxy.assert_settled(min_new=1)


def sha2_token(password, nonce):
    stage1 = hashlib.sha256(password.encode()).digest()
    mix = hashlib.sha256(hashlib.sha256(stage1).digest() + nonce).digest()
    return bytes(a ^ b for a, b in zip(stage1, mix))


def test_caching_sha2_client_with_a_password_entry_gets_fast_auth(proxy):
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        _, greeting = read_packet(sock)
        scramble = greeting_scramble(greeting)
        caps = (
            CLIENT_LONG_PASSWORD
            | CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_PLUGIN_AUTH_LENENC
        )
        token = sha2_token(APP_PASSWORD, scramble)
        response = (
            struct.pack("<IIB", caps, 1 << 24, 45)
            + b"\0" * 23
            + APP_USER.encode()
            + b"\0"
            + bytes([len(token)])
            + token
            + b"caching_sha2_password\0"
        )
        write_packet(sock, 1, response)
        assert read_packet(sock) == (2, b"\x01\x03"), "fast auth success"
        seq, ok = read_packet(sock)
        assert (seq, ok[0]) == (3, 0x00), f"expected OK, got {ok!r}"
        write_packet(sock, 0, b"\x01")  # COM_QUIT
    proxy.assert_settled(min_new=1)
