"""Front-end TLS with real clients through ringgate against the MariaDB
sandbox: the mariadb CLI (--ssl, --ssl-verify-server-cert), PyMySQL (ssl=), mysql-connector-python
(TLS 1.2 and 1.3; caching_sha2_password full authentication over TLS, then fast auth), node mysql2
(ssl, and compression inside TLS). Certificates are made with openssl by the `pki` fixture.

Also: a bad certificate at start-up, --require-secure-transport (ERR 3159), SIGHUP reload (new
certificate served; a broken file keeps the old), an SSLRequest followed by garbage, a stalled TLS
handshake (--handshake-timeout), client certificates (--tls-client-ca), and no secret in the log.
Every proxy ends with the leak checks of Proxy.assert_settled().
"""

import json
import os
import signal
import socket
import ssl
import subprocess
import time

import mysql.connector
import pymysql
import pytest

from conftest import APP_PASSWORD, APP_USER, USERS_FILE, run_ringgate
from helpers import FOOBAR_PASSWORD, FOOBAR_VERIFIER, client_auths, first_row, run_node
from mysql_wire import CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION, CLIENT_SSL, read_packet, ssl_request, write_packet

# TLS needs a read buffer that holds a whole record (ringgate refuses less).
TLS_BUFFER = 24576
INSECURE = "Connections using insecure transport are prohibited while --require_secure_transport=ON."


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(d, name):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "30", "-subj", f"/CN={name}", cwd=d)


def _leaf(d, name, ca, ext):
    (d / f"{name}.ext").write_text(ext)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "30", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """Two CAs, a server certificate from each (localhost, 127.0.0.1), a client certificate."""
    d = tmp_path_factory.mktemp("pki")
    server_ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    for ca, leaf in (("ca1", "server1"), ("ca2", "server2")):
        _ca(d, ca)
        _leaf(d, leaf, ca, server_ext)
    _leaf(d, "client1", "ca1", "extendedKeyUsage=clientAuth\n")
    return d


def _tls_args(pki, n=1):
    return ("--tls-cert", str(pki / f"server{n}.pem"), "--tls-key", str(pki / f"server{n}.key"))


@pytest.fixture
def tls_proxy(make_proxy, pki):
    return make_proxy(extra_args=_tls_args(pki), read_buffer_size=TLS_BUFFER)


def _pymysql_tls(proxy, ca, **kw):
    kw.setdefault("user", APP_USER)
    kw.setdefault("password", APP_PASSWORD)
    return pymysql.connect(host="127.0.0.1", port=proxy.port, ssl={"ca": str(ca)}, connect_timeout=10, **kw)


def test_clients_over_tls(tls_proxy, pki):
    proxy = tls_proxy
    base = proxy.connections_total()
    ca = pki / "ca1.pem"
    # The mariadb CLI, verifying the certificate and the host name against the CA.
    r = proxy.cli("--ssl", f"--ssl-ca={ca}", "--ssl-verify-server-cert", "-e", "status; SELECT LENGTH(REPEAT('a', 1000000))")
    assert "Cipher in use is TLS_AES" in r.stdout, r.stdout
    assert "1000000" in r.stdout
    # Compression inside TLS.
    r = proxy.cli("--ssl", f"--ssl-ca={ca}", "--compress", "-e", "SELECT LENGTH(REPEAT('c', 3000000)) AS n")
    assert "3000000" in r.stdout
    # PyMySQL: TLS 1.3, a 3 MB statement up and a 3 MB row down (records of 16 KiB both ways).
    conn = _pymysql_tls(proxy, ca)
    assert conn._sock.version() == "TLSv1.3"
    big = "z" * 3_000_000
    assert first_row(conn, "SELECT LENGTH(%s)", (big,)) == (3_000_000,)
    assert first_row(conn, "SELECT REPEAT('q', 3000000)")[0] == "q" * 3_000_000
    conn.close()
    # mysql-connector-python, with TLS 1.2 forced and with its default (1.3).
    for versions, want in ((["TLSv1.2"], "TLSv1.2"), (None, "TLSv1.3")):
        kw = {"tls_versions": versions} if versions else {}
        conn = proxy.connector(ssl_ca=str(ca), ssl_verify_cert=True, **kw)
        assert conn._socket.sock.version() == want
        assert first_row(conn, "SELECT 7") == (7,)
        conn.close()
    # A client that does not ask for TLS still gets in (no --require-secure-transport).
    # (PyMySQL 1.2 and the connector try TLS whenever it is offered, unless told not to.)
    assert first_row(proxy.connect(ssl_disabled=True), "SELECT 8") == (8,)
    assert proxy.metrics()("ringgate_client_tls_sessions_total") == 5
    assert proxy.metrics()("ringgate_client_tls_errors_total") == 0
    proxy.assert_settled(base, 6)


def test_node_mysql2_tls(tls_proxy, pki):
    proxy = tls_proxy
    base = proxy.connections_total()
    r = run_node(
        "tls.js", proxy, timeout=180,
        PROXY_PORT=str(proxy.port), APP_USER=APP_USER, APP_PASSWORD=APP_PASSWORD, TLS_CA=str(pki / "ca1.pem"),
    )
    assert r.stdout.startswith("ok TLSv1.3 TLSv1.3"), r.stdout
    assert proxy.metrics()("ringgate_client_tls_sessions_total") == 2
    proxy.assert_settled(base, 2)


def test_caching_sha2_full_auth_over_tls_then_fast_auth(make_proxy, pki, tmp_path):
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"erin": [{"MysqlCachingSha2Password": FOOBAR_VERIFIER}]}))
    proxy = make_proxy(users_file=users, extra_args=_tls_args(pki), read_buffer_size=TLS_BUFFER)
    base = proxy.connections_total()
    ca = str(pki / "ca1.pem")
    # Without TLS a cache miss cannot send the cleartext: 1045.
    with pytest.raises(mysql.connector.errors.ProgrammingError) as e:
        proxy.connector("erin", FOOBAR_PASSWORD, ssl_disabled=True, auth_plugin="caching_sha2_password")
    assert e.value.errno == 1045
    # Over TLS: 0x01 0x04, then the cleartext password inside TLS.
    conn = proxy.connector("erin", FOOBAR_PASSWORD, ssl_ca=ca, auth_plugin="caching_sha2_password")
    assert first_row(conn, "SELECT 1") == (1,)
    conn.close()
    assert client_auths(proxy, "caching_sha2_full") == 1
    # Cached now: fast auth, with or without TLS.
    for kw in ({"ssl_ca": ca}, {"ssl_disabled": True}):
        conn = proxy.connector("erin", FOOBAR_PASSWORD, auth_plugin="caching_sha2_password", **kw)
        assert first_row(conn, "SELECT 2") == (2,)
        conn.close()
    assert client_auths(proxy, "caching_sha2_fast") == 2
    # PyMySQL over TLS, wrong password: a cache miss, full auth over TLS, 1045.
    with pytest.raises(pymysql.err.OperationalError) as e:
        _pymysql_tls(proxy, ca, user="erin", password="foobaR")
    assert e.value.args == (1045, "Access denied for user 'erin'@'127.0.0.1' (using password: YES)")
    assert client_auths(proxy, "caching_sha2_full") == 1
    stderr = proxy.stderr()
    for secret in (FOOBAR_PASSWORD, "foobaR", "2441243030352403"):
        assert secret not in stderr
    proxy.assert_settled(base, 5)


def test_require_secure_transport(make_proxy, pki, tmp_path):
    sock = tmp_path / "rg.sock"
    proxy = make_proxy(extra_args=(*_tls_args(pki), "--require-secure-transport", "--socket", str(sock)),
                       read_buffer_size=TLS_BUFFER)
    base = proxy.connections_total()
    # Plain TCP: the server's 3159, for a good password, a wrong one and an unknown user alike.
    for user, password in ((APP_USER, APP_PASSWORD), (APP_USER, "wrong"), ("nobody", "x")):
        with pytest.raises(pymysql.err.OperationalError) as e:
            proxy.connect(user=user, password=password, ssl_disabled=True)
        assert e.value.args == (3159, INSECURE)
    r = proxy.cli("--skip-ssl", "-e", "SELECT 1", check=False)
    assert r.returncode != 0 and "3159" in r.stderr and INSECURE in r.stderr, r.stderr
    # TLS and the unix socket are secure.
    assert first_row(_pymysql_tls(proxy, pki / "ca1.pem"), "SELECT 3") == (3,)
    conn = pymysql.connect(unix_socket=str(sock), user=APP_USER, password=APP_PASSWORD, ssl_disabled=True)
    assert first_row(conn, "SELECT 4") == (4,)
    conn.close()
    assert proxy.metrics()('ringgate_client_rejected_total{reason="insecure_transport"}') == 4
    assert "wrong" not in proxy.stderr()
    proxy.assert_settled(base, 6)


def _start_fails(*args):
    return run_ringgate(
        "--listen", "127.0.0.1:1", "--backend", "127.0.0.1:1", "--users-file", str(USERS_FILE),
        "--backend-identity", "shared", "--backend-user", "x", *args,
        env=dict(os.environ, RINGGATE_BACKEND_PASSWORD="x"),
    )


def test_a_bad_certificate_stops_the_start(pki, tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    size = ("--read-buffer-size", str(TLS_BUFFER))
    cases = [
        ((*size, "--tls-cert", str(tmp_path / "missing.pem"), "--tls-key", str(pki / "server1.key")), "missing.pem"),
        ((*size, "--tls-cert", str(garbage), "--tls-key", str(pki / "server1.key")), "holds no PEM CERTIFICATE"),
        ((*size, "--tls-cert", str(pki / "server1.pem"), "--tls-key", str(pki / "server2.key")), "do not go together"),
        ((*size, "--tls-cert", str(pki / "server1.pem")), "--tls-cert needs --tls-key"),
        # A size given below a record is refused (left out, TLS sizes it: the resumption test).
        (("--read-buffer-size", "16384", *_tls_args(pki)), "--read-buffer-size 24576"),
        (("--require-secure-transport",), "would refuse every client"),
    ]
    for args, want in cases:
        r = _start_fails(*args)
        assert r.returncode != 0, (args, r.stderr)
        assert "cannot start" in r.stderr or "error" in r.stderr.lower(), r.stderr
        assert want in r.stderr, (args, r.stderr)


class _ResumingContext(ssl.SSLContext):
    """An SSLContext that offers the session it kept from the last connection (PyMySQL wraps its
    socket with `ctx.wrap_socket` and has no `session=` of its own)."""

    kept = None

    def wrap_socket(self, sock, *args, **kw):
        kw.setdefault("session", self.kept)
        return super().wrap_socket(sock, *args, **kw)


def _resume_round(proxy, ctx):
    """One PyMySQL login and query over TLS offering ctx.kept; keeps the new session. Returns
    whether the handshake resumed."""
    conn = pymysql.connect(host="127.0.0.1", port=proxy.port, user=APP_USER, password=APP_PASSWORD, ssl=ctx,
                           connect_timeout=10)
    assert first_row(conn, "SELECT 3") == (3,)
    reused = conn._sock.session_reused
    # TLS 1.3 tickets arrive after the handshake: read by now (the login's OK came behind them).
    ctx.kept = conn._sock.session
    conn.close()
    return reused


def _resume_context(pki, ca=1, tls12=False):
    ctx = _ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(pki / f"ca{ca}.pem"))
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


@pytest.mark.parametrize("tickets", ["true", "false"])
def test_tls_sessions_resume_on_every_worker(make_proxy, pki, tmp_path, tickets):
    """PyMySQL reconnects offering its last session and resumes, on whichever of the 2 workers
    SO_REUSEPORT picks (a per-worker session store would fail about half), with TLS 1.3 and 1.2,
    stateless tickets (the default) or the shared cache; SIGHUP's reload ends resumption of the
    sessions made before it. Started without --read-buffer-size: TLS sizes the buffers itself."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_bytes((pki / "server1.pem").read_bytes())
    key.write_bytes((pki / "server1.key").read_bytes())
    proxy = make_proxy(extra_args=("--tls-cert", str(cert), "--tls-key", str(key), f"--tls-session-tickets={tickets}"),
                       read_buffer_size=None)
    assert "--read-buffer-size 24576 instead of the default 16384" in proxy.stderr(), proxy.stderr_tail()
    base = proxy.connections_total()
    n = 0
    for tls12 in (False, True):
        ctx = _resume_context(pki, tls12=tls12)
        assert not _resume_round(proxy, ctx)
        resumed = [_resume_round(proxy, ctx) for _ in range(8)]
        assert all(resumed), (tls12, resumed)
        n += 9
    m = proxy.metrics()
    assert m('ringgate_client_tls_handshakes_total{kind="full"}') == 2
    assert m('ringgate_client_tls_handshakes_total{kind="resumed"}') == 16
    # A reload (same files here) replaces the key and the cache: the kept session is refused
    # and the next handshake is full; then sessions resume again.
    proxy.proc.send_signal(signal.SIGHUP)
    proxy.wait_log("TLS certificate and key reloaded")
    assert not _resume_round(proxy, ctx)
    assert _resume_round(proxy, ctx)
    n += 2
    m = proxy.metrics()
    assert m('ringgate_client_tls_handshakes_total{kind="full"}') == 3
    assert m('ringgate_client_tls_handshakes_total{kind="resumed"}') == 17
    assert m("ringgate_client_tls_errors_total") == 0
    proxy.assert_settled(base, n)


def _verify_with(proxy, ca):
    ctx = ssl.create_default_context(cafile=str(ca))
    conn = pymysql.connect(host="127.0.0.1", port=proxy.port, user=APP_USER, password=APP_PASSWORD, ssl=ctx,
                           connect_timeout=10)
    row = first_row(conn, "SELECT 5")
    conn.close()
    return row


def test_sighup_reloads_the_certificate(make_proxy, pki, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_bytes((pki / "server1.pem").read_bytes())
    key.write_bytes((pki / "server1.key").read_bytes())
    proxy = make_proxy(extra_args=("--tls-cert", str(cert), "--tls-key", str(key)), read_buffer_size=TLS_BUFFER)
    base = proxy.connections_total()
    assert _verify_with(proxy, pki / "ca1.pem") == (5,)
    # A session that stays open across the reload keeps working.
    kept = _pymysql_tls(proxy, pki / "ca1.pem")
    cert.write_bytes((pki / "server2.pem").read_bytes())
    key.write_bytes((pki / "server2.key").read_bytes())
    proxy.proc.send_signal(signal.SIGHUP)
    proxy.wait_log("TLS certificate and key reloaded")
    assert _verify_with(proxy, pki / "ca2.pem") == (5,)
    with pytest.raises(pymysql.err.OperationalError):
        _verify_with(proxy, pki / "ca1.pem")
    # A broken file: one line naming it, and the certificate loaded before stays.
    cert.write_text("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n")
    proxy.proc.send_signal(signal.SIGHUP)
    proxy.wait_log("TLS reload refused")
    line = [x for x in proxy.stderr().splitlines() if "TLS reload refused" in x][0]
    assert str(cert) in line, line
    assert _verify_with(proxy, pki / "ca2.pem") == (5,)
    assert first_row(kept, "SELECT 6") == (6,)
    kept.close()
    proxy.assert_settled(base, 5)


def _greeting_then_ssl_request(proxy):
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    _, greeting = read_packet(s)
    assert greeting[0] == 10
    write_packet(s, 1, ssl_request(CLIENT_PROTOCOL_41 | CLIENT_SSL | CLIENT_SECURE_CONNECTION))
    return s


def _until_closed(s, limit_s):
    """Read until EOF; returns what arrived and how long it took."""
    start = time.monotonic()
    got = b""
    s.settimeout(limit_s)
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except ConnectionResetError:
        pass
    return got, time.monotonic() - start


def test_ssl_request_then_garbage_is_closed_cleanly(tls_proxy):
    proxy = tls_proxy
    base = proxy.connections_total()
    # An HTTP request, a handshake record whose ClientHello does not parse, random bytes.
    bad_hello = b"\x16\x03\x01\x00\x06\x01\x00\x00\x02\xff\xff"
    for garbage in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", bad_hello, os.urandom(3000)):
        s = _greeting_then_ssl_request(proxy)
        s.sendall(garbage)
        got, took = _until_closed(s, 10)
        s.close()
        assert took < 5, took
        # Nothing but (at most) a TLS alert record: no MySQL packet in clear.
        assert got == b"" or got[0] == 0x15, got[:20]
    proxy.wait_log("client TLS failed", 1)
    assert "panicked" not in proxy.stderr()
    assert proxy.metrics()("ringgate_client_tls_errors_total") == 3
    assert first_row(_pymysql_tls(proxy, _ca_of(proxy)), "SELECT 1") == (1,)
    proxy.assert_settled(base, 4)


def _ca_of(proxy):
    # The CA of the server certificate the proxy was started with.
    cert = proxy.args[proxy.args.index("--tls-cert") + 1]
    return cert.replace("server1.pem", "ca1.pem")


def test_a_stalled_tls_handshake_times_out(make_proxy, pki):
    proxy = make_proxy(extra_args=(*_tls_args(pki), "--handshake-timeout", "1s"), read_buffer_size=TLS_BUFFER)
    base = proxy.connections_total()
    # SSLRequest, then nothing; and SSLRequest, then half a ClientHello.
    stalled = _greeting_then_ssl_request(proxy)
    partial = _greeting_then_ssl_request(proxy)
    partial.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    for s in (stalled, partial):
        got, took = _until_closed(s, 10)
        s.close()
        assert took < 5, took
        assert got == b"", got[:20]
    assert proxy.metrics()('ringgate_client_rejected_total{reason="handshake"}') == 2
    assert "--handshake-timeout" in proxy.stderr()
    proxy.assert_settled(base, 2)


def test_client_certificates(make_proxy, pki):
    proxy = make_proxy(extra_args=(*_tls_args(pki), "--tls-client-ca", str(pki / "ca1.pem")),
                       read_buffer_size=TLS_BUFFER)
    base = proxy.connections_total()
    ssl_opts = {"ca": str(pki / "ca1.pem"), "cert": str(pki / "client1.pem"), "key": str(pki / "client1.key")}
    conn = pymysql.connect(host="127.0.0.1", port=proxy.port, user=APP_USER, password=APP_PASSWORD, ssl=ssl_opts)
    assert first_row(conn, "SELECT 9") == (9,)
    conn.close()
    r = proxy.cli("--ssl", f"--ssl-ca={pki / 'ca1.pem'}", f"--ssl-cert={pki / 'client1.pem'}",
                  f"--ssl-key={pki / 'client1.key'}", "-e", "SELECT 10")
    assert "10" in r.stdout
    # No certificate, or one from another CA: the handshake fails.
    for extra in ({}, {"cert": str(pki / "server2.pem"), "key": str(pki / "server2.key")}):
        with pytest.raises(pymysql.err.OperationalError):
            c = pymysql.connect(host="127.0.0.1", port=proxy.port, user=APP_USER, password=APP_PASSWORD,
                                ssl={"ca": str(pki / "ca1.pem"), **extra}, connect_timeout=10)
            first_row(c, "SELECT 1")
    assert proxy.metrics()("ringgate_client_tls_errors_total") == 2
    assert APP_PASSWORD not in proxy.stderr()
    proxy.assert_settled(base, 4)


def test_mysql_clear_password_only_over_tls(tls_proxy, pki):
    proxy = tls_proxy
    base = proxy.connections_total()
    ca = pki / "ca1.pem"
    r = proxy.cli("--ssl", f"--ssl-ca={ca}", "--default-auth=mysql_clear_password", "-e", "SELECT 'clear-ok'")
    assert "clear-ok" in r.stdout
    conn = proxy.connector(ssl_ca=str(ca), auth_plugin="mysql_clear_password")
    assert first_row(conn, "SELECT 11") == (11,)
    conn.close()
    # Over plain TCP the cleartext is refused with 1045, right password or not.
    r = proxy.cli("--skip-ssl", "--default-auth=mysql_clear_password", "-e", "SELECT 1", check=False)
    assert r.returncode != 0 and "1045" in r.stderr, r.stderr
    assert proxy.metrics()('ringgate_client_auth_total{path="clear_password"}') == 2
    stderr = proxy.stderr()
    assert "mysql_clear_password refused over TCP without TLS" in stderr
    assert APP_PASSWORD not in stderr
    proxy.assert_settled(base, 3)


def test_a_tls_client_leases_the_connection_a_plain_client_parked(make_proxy, pki):
    """Transaction pooling with one backend connection, shared by a plain client and a TLS
    client in turns. In ring mode a plain client's park leaves the backend's multishot receive
    armed for the pool, and the next lease's relay takes it over; a TLS client reads its backend
    without the ring, so its lease must wait for that receive to be cancelled (else it takes the
    answers: the client stalls). Every answer right, in every mode, and once both clients have
    run a statement (the first rounds may replace the connection), it is never lost."""
    proxy = make_proxy(
        workers=1,
        pooling="transaction",
        extra_args=_tls_args(pki) + ("--backend-pool-size", "1", "--backend-max-connections", "1"),
        read_buffer_size=TLS_BUFFER,
    )
    base = proxy.connections_total()
    ca = pki / "ca1.pem"
    plain = proxy.connect(ssl_disabled=True, read_timeout=10)
    tls = _pymysql_tls(proxy, ca, read_timeout=10)
    assert first_row(plain, "SELECT 1") == (1,)
    assert first_row(tls, "SELECT 2") == (2,)
    cancels0 = proxy.metrics()("ringgate_read_buffer_ring_idle_recv_cancels_total")
    connects0 = proxy.metrics()("ringgate_backend_connects_total")
    for i in range(3):
        assert first_row(plain, "SELECT %s + 1", (i,)) == (i + 1,)
        assert first_row(tls, "SELECT %s + 2", (i,)) == (i + 2,)
        assert first_row(tls, "SELECT REPEAT('t', 200000)")[0] == "t" * 200_000
    assert proxy.metrics()("ringgate_backend_connects_total") == connects0
    if proxy.mode == "ring":
        cancels = proxy.metrics()("ringgate_read_buffer_ring_idle_recv_cancels_total") - cancels0
        assert cancels >= 3, f"{cancels} kept receives cancelled for the TLS client's leases"
    plain.close()
    tls.close()
    proxy.assert_settled(base, 2)
