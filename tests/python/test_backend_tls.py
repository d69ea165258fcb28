"""`--backend-tls` and `--backend-tls-ca` against MariaDB's own TLS.

A second, private MariaDB sandbox with ssl-ca/ssl-cert/ssl-key (scripts/mariadb-sandbox.sh with
RINGGATE_SANDBOX_TLS=1, certificates made by openssl) is started for this module. `ringgate check`
and the proxy's backend leg both speak TLS to it (SSLRequest, TLS handshake with rustls, the
HandshakeResponse and everything after it through TLS). The main sandbox (no TLS) serves the
"server without TLS" cases.
"""

import datetime
import os
import re
import subprocess
import tempfile
from pathlib import Path

import hashlib
import pymysql
import pytest

from conftest import REPO_ROOT, TEST_DB, USERS_FILE, Proxy, backend_env, free_port, run_ringgate

SANDBOX = REPO_ROOT / "scripts" / "mariadb-sandbox.sh"


@pytest.fixture(scope="module")
def tls_backend():
    """(port, tls dir) of a MariaDB with TLS, stopped after the module."""
    base = Path(tempfile.mkdtemp(prefix="rg-tls-", dir="/tmp"))
    port = free_port()
    env = dict(os.environ, RINGGATE_SANDBOX_TLS="1")
    start = subprocess.run([str(SANDBOX), "start", str(base), str(port)], env=env, capture_output=True,
                           text=True, timeout=120)
    assert start.returncode == 0, start.stderr
    out = subprocess.run([str(SANDBOX), "env", str(base), str(port)], capture_output=True, text=True,
                         check=True).stdout
    assert f"RINGGATE_TEST_MYSQL_TLS_CA={base}/tls/ca.pem" in out, out
    yield port, base / "tls"
    subprocess.run([str(SANDBOX), "stop", str(base), str(port)], capture_output=True, timeout=60)
    subprocess.run(["rm", "-rf", str(base)], check=False)


def check(port, *args, shared=True):
    """Runs `ringgate check` against 127.0.0.1:port; returns (exit code, the backend lines)."""
    env = dict(os.environ)
    cmd = ["check", "--backend", f"127.0.0.1:{port}", "--users-file", str(USERS_FILE),
           "--listen", f"127.0.0.1:{free_port()}", *args]
    if shared:
        cmd += ["--backend-identity", "shared", "--backend-user", backend_env()["user"]]
        env["RINGGATE_BACKEND_PASSWORD"] = backend_env()["password"]
    else:
        env.pop("RINGGATE_BACKEND_PASSWORD", None)
    r = run_ringgate(*cmd, env=env, timeout=60)
    text = r.stdout + r.stderr
    assert backend_env()["password"] not in text
    lines = [line for line in text.splitlines() if re.match(r"(OK|WARN|FAIL)\s+backend\s", line)]
    return text, "\n".join(lines)


@pytest.mark.parametrize("shared", [True, False], ids=["login", "greeting-only"])
def test_every_mode_against_a_tls_server(tls_backend, shared):
    port, tls = tls_backend
    ca, other = str(tls / "ca.pem"), str(tls / "other-ca.pem")
    for args in (("--backend-tls", "required"), ("--backend-tls", "preferred"),
                 ("--backend-tls", "verify-ca", "--backend-tls-ca", ca),
                 ("--backend-tls", "verify-identity", "--backend-tls-ca", ca)):
        text, backend = check(port, *args, shared=shared)
        assert "OK    backend   " in backend, text
        assert "the server offers TLS; TLS in use (TLSv1_3" in backend, text
        if shared:
            assert "logged in as 'ringgate'" in backend, text
    # Plain when disabled, though offered.
    text, backend = check(port, shared=shared)
    assert "the server offers TLS; no TLS (--backend-tls disabled)" in backend, text
    # A CA that did not sign the server's certificate: a clear failure naming both flags.
    text, backend = check(port, "--backend-tls", "verify-ca", "--backend-tls-ca", other, shared=shared)
    assert ("FAIL  backend   127.0.0.1:%d: TLS handshake failed: invalid peer certificate: UnknownIssuer "
            "(--backend-tls verify-ca, --backend-tls-ca %s)" % (port, other)) in backend, text
    text, backend = check(port, "--backend-tls", "verify-ca", shared=shared)
    assert "--backend-tls verify-ca needs --backend-tls-ca" in backend, text


def test_required_against_a_server_without_tls_fails_and_preferred_falls_back():
    port = backend_env()["port"]
    text, backend = check(port, "--backend-tls", "required")
    assert "the server does not offer TLS (no CLIENT_SSL in its greeting" in backend, text
    assert "FAIL  backend" in backend, text
    text, backend = check(port, "--backend-tls", "preferred")
    assert "OK    backend" in backend, text
    assert "the server does not offer TLS; no TLS (--backend-tls preferred)" in backend, text


def test_check_reports_the_ca_expiry_and_an_expired_ca(tls_backend, tmp_path):
    port, tls = tls_backend
    text, _ = check(port, "--backend-tls", "verify-ca", "--backend-tls-ca", str(tls / "ca.pem"))
    assert "OK    backend-tls-ca " in text and '"CN=ringgate sandbox CA", on 20' in text, text

    # A CA certificate that expired yesterday (made with cryptography, which PyMySQL's RSA
    # support needs anyway): check fails on it, and so does the handshake it would verify.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "expired CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=30))
            .not_valid_after(now - datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    expired = tmp_path / "expired-ca.pem"
    expired.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    text, _ = check(port, "--backend-tls", "verify-ca", "--backend-tls-ca", str(expired))
    assert f'FAIL  backend-tls-ca {expired}: certificate "CN=expired CA" expired on ' in text, text


def self_signed(path, cn, days_left):
    """A self-signed certificate valid for `days_left` more days (negative: expired)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=30))
            .not_valid_after(now + datetime.timedelta(days=days_left))
            .sign(key, hashes.SHA256()))
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_check_reports_the_front_certificate_its_key_and_the_client_ca(tls_backend, tmp_path):
    port, tls = tls_backend
    cert, key, ca = tls / "server.pem", tls / "server.key", tls / "ca.pem"
    text, _ = check(port, "--tls-cert", str(cert), "--tls-key", str(key), "--tls-client-ca", str(ca))
    assert "OK    tls-cert " in text and '"CN=localhost", on 20' in text, text
    assert f"OK    tls-key   {key} is the key of {cert}" in text, text
    assert "OK    tls-client-ca " in text, text
    # Another certificate's key: the pair does not match.
    text, _ = check(port, "--tls-cert", str(cert), "--tls-key", str(tls / "other-ca.key"))
    assert f"FAIL  tls-key   {tls / 'other-ca.key'} and {cert}: " in text, text
    # An expired certificate fails; one that expires in 10 days warns.
    expired = self_signed(tmp_path / "expired.pem", "expired front", -1)
    text, _ = check(port, "--tls-cert", str(expired))
    assert f'FAIL  tls-cert  {expired}: certificate "CN=expired front" expired on ' in text, text
    soon = self_signed(tmp_path / "soon.pem", "soon", 10)
    text, _ = check(port, "--tls-cert", str(soon))
    assert f"WARN  tls-cert  {soon}: " in text, text
    assert "(in 9 days)" in text or "(in 10 days)" in text, text


# ---- the proxy's backend leg over TLS ----

TLS_BUFFER = 32768  # a TLS record must fit a read buffer (>= 24576)


def _tls_proxy(factory, tls_backend, *args, **kw):
    port, _ = tls_backend
    return factory(backend=("127.0.0.1", port), read_buffer_size=TLS_BUFFER, extra_args=args, **kw)


def _value(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
        return row[-1] if row else None


@pytest.mark.parametrize("pooling", ["session", "transaction"])
def test_proxy_backend_tls_is_encrypted_and_byte_exact(make_proxy, tls_backend, pooling):
    """--backend-tls verify-ca (session pooling) and required (transaction pooling) in every
    buffer mode: the server sees TLS on the proxy's connections (Ssl_cipher, Ssl_version), and a
    4 MiB insert and a 5 MB result cross it byte for byte."""
    port, tls = tls_backend
    args = (("--backend-tls", "verify-ca", "--backend-tls-ca", str(tls / "ca.pem")) if pooling == "session"
            else ("--backend-tls", "required"))
    proxy = _tls_proxy(make_proxy, tls_backend, *args, pooling=pooling)
    conn = proxy.connect(database=TEST_DB)
    assert _value(conn, "SHOW STATUS LIKE 'Ssl_cipher'"), "the backend session is not encrypted"
    assert _value(conn, "SHOW STATUS LIKE 'Ssl_version'") in ("TLSv1.3", "TLSv1.2")
    table = f"backend_tls_{proxy.mode}_{pooling}"
    blob = os.urandom(4 << 20)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {table} (id INT PRIMARY KEY, data LONGBLOB)")
        cur.execute(f"DELETE FROM {table}")
        cur.execute(f"INSERT INTO {table} VALUES (1, %s)", (blob,))
        conn.commit()
        cur.execute(f"SELECT SHA2(data, 256), data FROM {table} WHERE id = 1")
        digest, back = cur.fetchone()
        assert digest == hashlib.sha256(blob).hexdigest(), "the insert arrived altered"
        assert back == blob, "the result came back altered"
        cur.execute("SELECT seq, REPEAT(CHAR(65 + seq % 26), 1000) FROM seq_1_to_5000")
        rows = cur.fetchall()
        assert len(rows) == 5000
        assert all(bytes(r[1]) == bytes([65 + r[0] % 26]) * 1000 for r in rows), rows[:1]
        cur.execute(f"DROP TABLE {table}")
    conn.close()
    # The mariadb CLI through the same proxy.
    r = proxy.cli("--batch", "--skip-column-names", "-e", "SHOW STATUS LIKE 'Ssl_cipher'")
    assert r.stdout.split("\t")[1].strip(), r.stdout
    assert proxy.metrics()("ringgate_backend_tls_sessions_total") >= 1
    assert proxy.metrics()('ringgate_backend_tls_errors_total{reason="handshake"}') == 0


def _settled_and_closed(proxy):
    try:
        proxy.assert_settled()
    finally:
        proxy.close()


def test_verify_ca_with_another_ca_fails_cleanly(tls_backend):
    """A CA that did not sign the server's certificate: the client gets the usual backend-unavailable
    error, the log says why and what to do, the metric counts it, nothing leaks."""
    _, tls = tls_backend
    proxy = _tls_proxy(Proxy, tls_backend, "--backend-tls", "verify-ca", "--backend-tls-ca",
                       str(tls / "other-ca.pem"), mode="fixed")
    try:
        with pytest.raises(pymysql.err.OperationalError) as e:
            proxy.connect()
        assert e.value.args[0] == 1105, e.value.args
        assert " unavailable: " in e.value.args[1] and "UnknownIssuer" in e.value.args[1], e.value.args
        log = proxy.stderr()
        assert "TLS handshake with the server failed (--backend-tls verify-ca)" in log, log
        assert f"does not verify against --backend-tls-ca {tls / 'other-ca.pem'}" in log, log
        assert proxy.metrics()('ringgate_backend_tls_errors_total{reason="handshake"}') >= 1
        assert proxy.metrics()("ringgate_backend_tls_sessions_total") == 0
    finally:
        _settled_and_closed(proxy)


def test_verify_identity_checks_the_backend_address(tls_backend):
    """The sandbox's certificate names 127.0.0.1 (a SAN IP entry): verify-identity passes."""
    _, tls = tls_backend
    proxy = _tls_proxy(Proxy, tls_backend, "--backend-tls", "verify-identity", "--backend-tls-ca",
                       str(tls / "ca.pem"), mode="heap")
    try:
        conn = proxy.connect()
        assert _value(conn, "SHOW STATUS LIKE 'Ssl_cipher'")
        conn.close()
    finally:
        _settled_and_closed(proxy)


def test_required_against_a_plain_server_fails_cleanly_and_preferred_falls_back(tls_backend):
    plain = ("127.0.0.1", backend_env()["port"])
    proxy = Proxy("fixed", backend=plain, read_buffer_size=TLS_BUFFER, extra_args=("--backend-tls", "required"))
    try:
        with pytest.raises(pymysql.err.OperationalError) as e:
            proxy.connect()
        assert e.value.args[0] == 1105 and "does not offer TLS" in e.value.args[1], e.value.args
        log = proxy.stderr()
        assert "the server does not offer TLS (no CLIENT_SSL in its greeting" in log, log
        assert "turn TLS on in the server (ssl-cert/ssl-key) or run ringgate with --backend-tls preferred" in log
        assert proxy.metrics()('ringgate_backend_tls_errors_total{reason="unavailable"}') >= 1
    finally:
        _settled_and_closed(proxy)
    proxy = Proxy("fixed", backend=plain, read_buffer_size=TLS_BUFFER, extra_args=("--backend-tls", "preferred"))
    try:
        conn = proxy.connect()
        assert _value(conn, "SHOW STATUS LIKE 'Ssl_cipher'") == ""
        conn.close()
        assert "--backend-tls preferred logs in in plain" in proxy.stderr()
        assert proxy.metrics()("ringgate_backend_tls_sessions_total") == 0
    finally:
        _settled_and_closed(proxy)
    # preferred against the TLS server: TLS.
    proxy = _tls_proxy(Proxy, tls_backend, "--backend-tls", "preferred", mode="ring")
    try:
        conn = proxy.connect()
        assert _value(conn, "SHOW STATUS LIKE 'Ssl_cipher'")
        conn.close()
    finally:
        _settled_and_closed(proxy)


def test_backend_tls_needs_a_read_buffer_that_holds_a_record():
    r = run_ringgate("--listen", f"127.0.0.1:{free_port()}", "--users-file",
                     str(USERS_FILE), "--backend", f"127.0.0.1:{backend_env()['port']}",
                     "--backend-tls", "required", "--read-buffer-size", "16384")
    assert r.returncode != 0
    assert "cannot start: --backend-tls required needs --read-buffer-size 24576 or more" in r.stderr, r.stderr
