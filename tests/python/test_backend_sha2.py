"""ringgate as a caching_sha2_password CLIENT of its backend, and the front
end's `--rsa-key`.

MariaDB 10.11 has no caching_sha2 server plugin, so the backend here is a second ringgate (the
"inner") that requires caching_sha2 on its front (a users-file `MysqlCachingSha2Password`
verifier, MySQL 8's own for `foobar`) with the MariaDB sandbox behind it:

    client --> outer ringgate --(caching_sha2, plain TCP)--> inner ringgate --> MariaDB

Both sides of every exchange are real code: the outer's client login (src/mysql/client_login.rs,
client_sha2.rs) and the inner's front end (src/proxy/session_sha2.rs). Over plain TCP the inner
takes full authentication only RSA-encrypted (`--rsa-key`); the outer asks for the public key
(0x02) or is given it (`--backend-rsa-public-key`). `ringgate_client_auth_total{path}` on the
inner tells which path each of the outer's logins took.
"""


import pymysql
import pytest

from helpers import FOOBAR_PASSWORD, FOOBAR_VERIFIER, client_auths, current_user, rsa_key, sandbox_account, write_users_file

PASSWORD = FOOBAR_PASSWORD
# The outer's backend logins include full authentications (RSA and sha256-crypt on the inner,
# a debug build): give them room on a loaded machine.
OUTER_ARGS = ("--backend-connect-timeout", "30s")


@pytest.fixture
def account(mode):
    """A MariaDB account `sha2be_<mode>` with the password `foobar`: the inner ringgate logs in to
    the sandbox as it (passthrough), so CURRENT_USER() shows the chain worked end to end."""
    with sandbox_account(f"sha2be_{mode}", PASSWORD) as user:
        yield user


@pytest.fixture
def inner(make_proxy, tmp_path, account):
    """The inner ringgate: caching_sha2 only for `account`, with an RSA key, passthrough to MariaDB."""
    key, public = rsa_key(tmp_path)
    users = write_users_file(tmp_path / "inner.json", {account: [{"MysqlCachingSha2Password": FOOBAR_VERIFIER}]})
    proxy = make_proxy(users_file=users, passthrough=True, workers=1, extra_args=("--rsa-key", str(key)))
    return proxy, public


def test_outer_logs_in_to_a_caching_sha2_backend_by_rsa_full_auth_then_fastclient_auths(make_proxy, inner, account):
    inner_proxy, _ = inner
    # No warm pool: the six clients' backend logins come one at a time (a full authentication
    # is an RSA decryption and 5000 SHA-256 rounds on the inner's one worker, slow in a debug
    # build on a loaded machine; eight at once at start-up could outlast the connect timeout).
    outer = make_proxy(backend=("127.0.0.1", inner_proxy.port), backend_user=account, backend_password=PASSWORD,
                       extra_args=OUTER_ARGS + ("--backend-pool-size", "0"))
    conns = [outer.connect() for _ in range(6)]
    for conn in conns:
        # An open transaction holds its backend connection (transaction pooling, the
        # default), so six clients need six backend logins whatever the timing: without
        # it one connection parked between the clients' queries could serve all six, one
        # full authentication and no fast one (a flake seen under load).
        conn.begin()
        assert current_user(conn) == account
    for conn in conns:
        conn.close()
    # The first of the outer's backend logins was a cache miss: full authentication, the
    # password RSA-encrypted with the key the inner sent. Later ones hit the inner's cache.
    full, fast = client_auths(inner_proxy, "caching_sha2_full"), client_auths(inner_proxy, "caching_sha2_fast")
    assert full >= 1, inner_proxy.stderr_tail()
    assert fast >= 1, "the inner's cache served later logins"
    assert full + fast >= 6, f"six open transactions, six backend logins: {full} full, {fast} fast"
    # Every other connection to the inner was one of these logins (one more: the fixture's
    # readiness probe, which connects and hangs up).
    assert full + fast == inner_proxy.connections_total() - 1
    assert client_auths(inner_proxy, "native") == 0
    for p in (outer, inner_proxy):
        assert PASSWORD not in p.stderr()


def test_outer_uses_the_configured_public_key_and_a_wrong_one_fails(make_proxy, inner, account, tmp_path):
    inner_proxy, public = inner
    outer = make_proxy(backend=("127.0.0.1", inner_proxy.port), backend_user=account, backend_password=PASSWORD,
                       extra_args=OUTER_ARGS + ("--backend-rsa-public-key", str(public)))
    conn = outer.connect()
    assert current_user(conn) == account
    conn.close()
    assert client_auths(inner_proxy, "caching_sha2_full") >= 1

    # Another key: the inner cannot decrypt, says so in its log, and answers 1045, which the
    # client of the outer gets with the inner's wording. Its cache is emptied first (SIGHUP
    # reload), so this is a full authentication again.
    _, other = rsa_key(tmp_path, "other.pem")
    inner_proxy.proc.send_signal(1)
    outer2 = make_proxy(backend=("127.0.0.1", inner_proxy.port), backend_user=account, backend_password=PASSWORD,
                        extra_args=OUTER_ARGS + ("--backend-rsa-public-key", str(other), "--backend-pool-size", "0"))
    inner_proxy.wait_log("users file reloaded")
    with pytest.raises(pymysql.err.OperationalError) as e:
        outer2.connect()
    _assert_backend_refused(e.value, account)
    assert "does not decrypt with --rsa-key" in inner_proxy.stderr()
    for p in (outer, outer2, inner_proxy):
        assert PASSWORD not in p.stderr()


def test_a_wrong_backend_password_is_the_backends_1045(make_proxy, inner, account):
    inner_proxy, _ = inner
    outer = make_proxy(backend=("127.0.0.1", inner_proxy.port), backend_user=account, backend_password="not-it",
                       extra_args=OUTER_ARGS)
    with pytest.raises(pymysql.err.OperationalError) as e:
        outer.connect()
    _assert_backend_refused(e.value, account)
    for p in (outer, inner_proxy):
        assert "not-it" not in p.stderr()


def test_passthrough_identity_of_a_caching_sha2_user_through_two_proxies(make_proxy, inner, account, tmp_path):
    """Per-user passthrough on the outer: its client logs in to the outer by caching_sha2 full
    authentication (over the outer's unix socket, which gives the outer the cleartext), and the
    outer logs in to the inner as that client: caching_sha2, RSA full auth. A later client over TCP
    is a fast auth on the outer; its backend login reuses the identity's credential."""
    inner_proxy, _ = inner
    users = write_users_file(tmp_path / "outer.json", {account: [{"MysqlCachingSha2Password": FOOBAR_VERIFIER}]})
    sock = tmp_path / "outer.sock"
    outer = make_proxy(backend=("127.0.0.1", inner_proxy.port), users_file=users, passthrough=True,
                       extra_args=OUTER_ARGS + ("--socket", str(sock)))
    conn = pymysql.connect(unix_socket=str(sock), user=account, password=PASSWORD, connect_timeout=10)
    assert current_user(conn) == account
    conn.close()
    for _ in range(3):
        conn = pymysql.connect(host="127.0.0.1", port=outer.port, user=account, password=PASSWORD,
                               connect_timeout=10)
        assert current_user(conn) == account
        conn.close()
    assert client_auths(outer, "caching_sha2_full") == 1
    assert client_auths(outer, "caching_sha2_fast") == 3
    assert client_auths(inner_proxy, "caching_sha2_full") >= 1
    for p in (outer, inner_proxy):
        assert PASSWORD not in p.stderr()


def test_front_rsa_key_with_pymysql_over_plain_tcp(inner, account):
    """PyMySQL against a ringgate with --rsa-key, over plain TCP with a cold cache: it asks for the
    public key (0x02) and sends its password RSA-encrypted; given the key (server_public_key) it
    sends the ciphertext at once."""
    inner_proxy, public = inner
    conn = pymysql.connect(host="127.0.0.1", port=inner_proxy.port, user=account, password=PASSWORD,
                           connect_timeout=10)
    assert current_user(conn) == account
    conn.close()
    assert client_auths(inner_proxy, "caching_sha2_full") == 1
    inner_proxy.proc.send_signal(1)  # empties the cache: the next login is a full auth again
    inner_proxy.wait_log("users file reloaded")
    conn = pymysql.connect(host="127.0.0.1", port=inner_proxy.port, user=account, password=PASSWORD,
                           connect_timeout=10, server_public_key=public.read_bytes())
    assert current_user(conn) == account
    conn.close()
    assert client_auths(inner_proxy, "caching_sha2_full") == 2
    with pytest.raises(pymysql.err.OperationalError) as e:
        pymysql.connect(host="127.0.0.1", port=inner_proxy.port, user=account, password="wrong-one",
                        connect_timeout=10)
    assert e.value.args == (1045, f"Access denied for user '{account}'@'127.0.0.1' (using password: YES)")
    stderr = inner_proxy.stderr()
    for secret in (PASSWORD, "wrong-one"):
        assert secret not in stderr


def _assert_backend_refused(err, account):
    """With shared identity the backend's refusal of --backend-user is the proxy's problem, not
    the client's: 1105 "backend unavailable", quoting the backend's own 1045 and its words."""
    code, message = err.args
    assert code == 1105, err.args
    assert f"1045 (28000) Access denied for user '{account}'@'127.0.0.1' (using password: YES)" in message, message


def test_mariadb_cli_and_connector_python_through_the_chain(make_proxy, inner, account):
    """The other real clients, on the outer (as `app`, native), whose backend login to the inner is
    caching_sha2 with RSA full authentication."""
    inner_proxy, _ = inner
    outer = make_proxy(backend=("127.0.0.1", inner_proxy.port), backend_user=account, backend_password=PASSWORD,
                       extra_args=OUTER_ARGS)
    r = outer.cli("--batch", "--skip-column-names", "-e", "SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1)")
    assert r.stdout.strip() == account
    conn = outer.connector(ssl_disabled=True)
    cur = conn.cursor()
    cur.execute("SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1)")
    assert cur.fetchone() == (account,)
    cur.close()
    conn.close()
    assert client_auths(inner_proxy, "caching_sha2_full") >= 1
    for p in (outer, inner_proxy):
        assert PASSWORD not in p.stderr()


def test_passthrough_caching_sha2_full_auth_over_backend_tls(make_proxy, account, tmp_path):
    """Per-user passthrough with backend TLS: the client logs in to the outer over TLS by
    caching_sha2 full authentication (the outer learns the cleartext), and the outer logs in to the
    inner as that user inside TLS (--backend-tls verify-identity), by full authentication with the
    cleartext as is: the inner has no --rsa-key and requires secure transport, so nothing but TLS
    could carry it.

        client --TLS--> outer --TLS, caching_sha2 full--> inner (--tls-cert, no RSA) --> MariaDB
    """
    from test_tls import _ca, _leaf

    _ca(tmp_path, "ca")
    _leaf(tmp_path, "server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    ca, cert, key = (str(tmp_path / n) for n in ("ca.pem", "server.pem", "server.key"))
    front_tls = ("--tls-cert", cert, "--tls-key", key)
    users = {account: [{"MysqlCachingSha2Password": FOOBAR_VERIFIER}]}
    inner = make_proxy(users_file=write_users_file(tmp_path / "inner.json", users), passthrough=True, workers=1,
                       read_buffer_size=32768, extra_args=front_tls + ("--require-secure-transport",))
    outer = make_proxy(backend=("127.0.0.1", inner.port), users_file=write_users_file(tmp_path / "outer.json", users),
                       passthrough=True, read_buffer_size=32768,
                       extra_args=OUTER_ARGS + front_tls + ("--backend-pool-size", "0", "--backend-tls",
                                                            "verify-identity", "--backend-tls-ca", ca))
    conn = pymysql.connect(host="127.0.0.1", port=outer.port, user=account, password=PASSWORD,
                           ssl={"ca": ca}, connect_timeout=10)
    assert current_user(conn) == account
    conn.close()
    assert client_auths(outer, "caching_sha2_full") == 1
    assert client_auths(inner, "caching_sha2_full") >= 1, inner.stderr_tail()
    assert outer.metrics()("ringgate_backend_tls_sessions_total") >= 1
    assert inner.metrics()("ringgate_client_tls_sessions_total") >= 1
    for p in (outer, inner):
        assert PASSWORD not in p.stderr()
