"""An attacker who does not know any password must not learn which user names exist from the
answers to a login. Driven over a raw socket with random tokens, as an attacker would: every
packet ringgate sends is recorded (the user name and the nonce replaced by placeholders) and the
sequences are compared between a user with a `Password` entry, one with a caching_sha2 verifier
and names that are not in the users file, over plain TCP, plain TCP with --rsa-key (the public
key asked for, then a wrong password RSA-encrypted) and the unix socket (the cleartext).

Users whose entries only one plugin can check are switched to the other plugin, as MySQL
switches to the account's plugin; an unknown name then answers as one of the file's real users
(its decoy), the same way at every attempt.
"""

import os
import socket

from pymysql._auth import sha2_rsa_encrypt

from helpers import FOOBAR_VERIFIER, rsa_key, write_users_file
from mysql_wire import greeting_scramble, handshake_response, read_packet, write_packet

NATIVE_HASH = "*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9"  # 123456
UNKNOWN = [f"nobody{i}" for i in range(24)]


def _login(where, user, plugin):
    """One login with a random token for `plugin`; each answer is followed as a client that
    does not know the password would. Returns every packet ringgate sent, as (seq, payload)."""
    family, addr = where["addr"]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(addr)
    seen = []
    try:
        _, greeting = read_packet(sock)
        nonce = greeting_scramble(greeting)
        token = os.urandom(32 if plugin == "caching_sha2_password" else 20)
        write_packet(sock, 1, handshake_response(user, token, plugin))
        while True:
            seq, p = read_packet(sock)
            # The name and the connection's nonce (an AuthSwitchRequest repeats it) differ.
            seen.append((seq, p.replace(user.encode(), b"<user>").replace(nonce, b"<nonce>")))
            if p[0] in (0x00, 0xFF):
                return seen
            if p[0] == 0xFE:  # AuthSwitchRequest: a fresh random answer for that plugin
                name = p[1:].split(b"\0")[0]
                answer = os.urandom(32 if name == b"caching_sha2_password" else 20)
            elif p == b"\x01\x04" and where["kind"] == "rsa":
                answer = b"\x02"  # the public key, please
            elif p == b"\x01\x04":
                answer = b"not-the-password\0"  # over the unix socket: the cleartext
            elif p[0] == 0x01:  # the PEM key: a wrong password, encrypted as MySQL's clients do
                answer = sha2_rsa_encrypt(b"not-the-password", nonce, p[1:])
            else:
                raise AssertionError(f"unexpected packet {p!r}")
            write_packet(sock, seq + 1, answer)
    finally:
        sock.close()


def _proxy(make_proxy, tmp_path, users):
    path = write_users_file(tmp_path / "users.json", users)
    key, _ = rsa_key(tmp_path, "key.pem")
    sock = tmp_path / "rg.sock"
    plain = make_proxy(users_file=path, extra_args=("--socket", str(sock)))
    rsa = make_proxy(users_file=path, extra_args=("--rsa-key", str(key)))
    return [
        {"kind": "tcp", "addr": (socket.AF_INET, ("127.0.0.1", plain.port))},
        {"kind": "rsa", "addr": (socket.AF_INET, ("127.0.0.1", rsa.port))},
        {"kind": "socket", "addr": (socket.AF_UNIX, str(sock))},
    ]


def test_a_caching_sha2_login_looks_the_same_for_every_kind_of_user(make_proxy, tmp_path):
    wheres = _proxy(
        make_proxy,
        tmp_path,
        {"fay": [{"Password": "pw"}], "erin": [{"MysqlCachingSha2Password": FOOBAR_VERIFIER}]},
    )
    for where in wheres:
        plugin = "caching_sha2_password"
        want = _login(where, "fay", plugin)
        assert want[-1][1][:3] == b"\xff\x15\x04", f"{where['kind']}: refused with 1045: {want}"
        assert _login(where, "erin", plugin) == want, where["kind"]
        for user in UNKNOWN[:6]:
            assert _login(where, user, plugin) == want, (where["kind"], user)


def test_an_unknown_name_answers_as_some_real_user_and_always_the_same(make_proxy, tmp_path):
    wheres = _proxy(
        make_proxy,
        tmp_path,
        {
            "fay": [{"Password": "pw"}],
            "erin": [{"MysqlCachingSha2Password": FOOBAR_VERIFIER}],
            "gus": [{"MysqlNativePassword": NATIVE_HASH}],
        },
    )
    plugins = ("caching_sha2_password", "mysql_native_password")
    for where in wheres:
        real = {u: tuple(_login(where, u, p) for p in plugins) for u in ("fay", "erin", "gus")}
        mimicked = set()
        for user in UNKNOWN:
            got = tuple(_login(where, user, p) for p in plugins)
            matches = [u for u, answers in real.items() if answers == got]
            assert matches, f"{where['kind']}: {user} answers as no real user: {got}"
            assert tuple(_login(where, user, p) for p in plugins) == got, f"{user}: not the same again"
            mimicked.update(matches)
        # The decoys spread over the real users' kinds (24 names: all three, but for a 2^-9 chance
        # of missing one; the keyed choice is per process, so a miss would not repeat).
        assert len({repr(real[u]) for u in mimicked}) >= 2, mimicked


def test_the_native_plugin_refuses_an_unknown_name_as_a_real_one(make_proxy, tmp_path):
    wheres = _proxy(
        make_proxy, tmp_path, {"fay": [{"Password": "pw"}], "gus": [{"MysqlNativePassword": NATIVE_HASH}]}
    )
    for where in wheres:
        want = _login(where, "fay", "mysql_native_password")
        assert len(want) == 1 and want[0][1][:3] == b"\xff\x15\x04", want
        assert _login(where, "gus", "mysql_native_password") == want
        for user in UNKNOWN[:6]:
            assert _login(where, user, "mysql_native_password") == want, user
