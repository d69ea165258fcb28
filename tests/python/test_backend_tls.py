"""`--backend-tls` and `--backend-tls-ca` against MariaDB's own TLS (issue 14, items 4-5).

A second, private MariaDB sandbox with ssl-ca/ssl-cert/ssl-key (scripts/mariadb-sandbox.sh with
RINGGATE_SANDBOX_TLS=1, certificates made by openssl) is started for this module. What speaks
TLS to it today is `ringgate check`, with the login code the proxy uses (SSLRequest, TLS handshake
with rustls, the HandshakeResponse through TLS); the proxy's own backend leg does not speak TLS
yet and refuses the modes that need it at start-up. The main sandbox (no TLS) serves the
"server without TLS" cases.
"""

import datetime
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import REPO_ROOT, USERS_FILE, backend_env, free_port, ringgate_bin

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
    cmd = [str(ringgate_bin()), "check", "--backend", f"127.0.0.1:{port}", "--users-file", str(USERS_FILE),
           "--listen", f"127.0.0.1:{free_port()}", *args]
    if shared:
        cmd += ["--backend-identity", "shared", "--backend-user", backend_env()["user"]]
        env["RINGGATE_BACKEND_PASSWORD"] = backend_env()["password"]
    else:
        env.pop("RINGGATE_BACKEND_PASSWORD", None)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
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


def test_the_proxy_refuses_the_modes_its_backend_leg_cannot_honour(tmp_path):
    for mode in ("required", "verify-ca", "verify-identity"):
        r = subprocess.run([str(ringgate_bin()), "--listen", f"127.0.0.1:{free_port()}", "--users-file",
                            str(USERS_FILE), "--backend", f"127.0.0.1:{backend_env()['port']}",
                            "--backend-tls", mode], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
        assert (f"cannot start: --backend-tls {mode}: the proxy's backend leg does not speak TLS yet"
                in r.stderr), r.stderr
