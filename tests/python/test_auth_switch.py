"""A MySQL 8 client proposes caching_sha2_password for a user whose users-file entry is only a
native hash (which caching_sha2 cannot check); ringgate answers with an AuthSwitchRequest to
mysql_native_password (same scramble) and then logs it in. For a `Password` user it answers the
caching_sha2 scramble itself: fast auth (0x01 0x03) then OK (see test_caching_sha2.py).

Driven over a raw socket, because PyMySQL and the mariadb CLI follow the
server's plugin and never propose caching_sha2_password here.
"""

import hashlib
import socket

from conftest import APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER
from mysql_wire import greeting_scramble, handshake_response, native_token, read_packet, sha2_token, write_packet


def test_caching_sha2_client_is_switched_to_native(proxy):
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        seq, greeting = read_packet(sock)
        assert seq == 0 and greeting[0] == 10
        scramble = greeting_scramble(greeting)
        assert len(scramble) == 20
        # A caching_sha2 first token is 32 bytes of SHA-256 material: not native.
        fake_sha2 = hashlib.sha256(b"whatever").digest()
        write_packet(sock, 1, handshake_response(HASHED_USER, fake_sha2, "caching_sha2_password"))
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


def test_caching_sha2_client_with_a_password_entry_gets_fast_auth(proxy):
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        _, greeting = read_packet(sock)
        scramble = greeting_scramble(greeting)
        token = sha2_token(APP_PASSWORD, scramble)
        write_packet(sock, 1, handshake_response(APP_USER, token, "caching_sha2_password"))
        assert read_packet(sock) == (2, b"\x01\x03"), "fast auth success"
        seq, ok = read_packet(sock)
        assert (seq, ok[0]) == (3, 0x00), f"expected OK, got {ok!r}"
        write_packet(sock, 0, b"\x01")  # COM_QUIT
    proxy.assert_settled(min_new=1)
