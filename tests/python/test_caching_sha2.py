"""caching_sha2_password on ringgate's front end (without TLS), with real clients
against the MariaDB sandbox: PyMySQL (which follows ringgate's AuthSwitchRequest to the plugin) and
mysql-connector-python with auth_plugin='caching_sha2_password'.

The account's users-file entry is MySQL 8's own verifier for the password `foobar` (TiDB's test
vector, made by MySQL, not by ringgate). Full authentication (the cleartext password) is taken
over the unix socket only; over plain TCP a cache miss gets 1045, as from MySQL without TLS or
RSA keys. `ringgate_client_auth_total{path}` tells which path each login took.
"""

import signal

import mysql.connector
import pymysql
import pytest

from helpers import FOOBAR_PASSWORD, FOOBAR_VERIFIER, client_auths, current_user, first_row, sandbox_account, write_users_file

PASSWORD = FOOBAR_PASSWORD


def _pymysql(proxy, sock=None, **kw):
    where = {"unix_socket": str(sock)} if sock else {"host": "127.0.0.1", "port": proxy.port}
    return pymysql.connect(connect_timeout=10, **where, **kw)


def _connector(proxy, sock=None, **kw):
    where = {"unix_socket": str(sock)} if sock else {"host": "127.0.0.1", "port": proxy.port}
    return mysql.connector.connect(
        auth_plugin="caching_sha2_password", use_pure=True, ssl_disabled=True, **where, **kw
    )


@pytest.fixture
def sha2_proxy(make_proxy, tmp_path):
    users = write_users_file(
        tmp_path / "users.json", {"erin": [{"MysqlCachingSha2Password": FOOBAR_VERIFIER}], "fay": [{"Password": "pw2"}]}
    )
    sock = tmp_path / "rg.sock"
    return make_proxy(users_file=users, extra_args=("--socket", str(sock))), sock


def test_pymysql_full_auth_on_the_socket_then_fast_auth_over_tcp(sha2_proxy):
    proxy, sock = sha2_proxy
    # Nothing cached yet: over TCP the cleartext is refused, with the server's words.
    with pytest.raises(pymysql.err.OperationalError) as e:
        _pymysql(proxy, user="erin", password=PASSWORD)
    assert e.value.args == (1045, "Access denied for user 'erin'@'127.0.0.1' (using password: YES)")
    assert client_auths(proxy, "caching_sha2_full") == 0

    # Over the unix socket PyMySQL sends the cleartext password: full authentication.
    conn = _pymysql(proxy, sock, user="erin", password=PASSWORD)
    assert first_row(conn, "SELECT 6 * 7") == (42,)
    conn.close()
    assert client_auths(proxy, "caching_sha2_full") == 1
    assert client_auths(proxy, "caching_sha2_fast") == 0

    # Now cached: fast authentication, over TCP as well.
    for _ in range(2):
        conn = _pymysql(proxy, user="erin", password=PASSWORD)
        assert first_row(conn, "SELECT 1") == (1,)
        conn.close()
    assert client_auths(proxy, "caching_sha2_fast") == 2
    assert client_auths(proxy, "caching_sha2_full") == 1
    assert client_auths(proxy, "native") == 0

    # A wrong password is a cache miss, then a failed full authentication.
    with pytest.raises(pymysql.err.OperationalError) as e:
        _pymysql(proxy, sock, user="erin", password="foobaR")
    assert e.value.args == (1045, "Access denied for user 'erin'@'localhost' (using password: YES)")
    with pytest.raises(pymysql.err.OperationalError) as e:
        _pymysql(proxy, user="erin", password="foobaR")
    assert e.value.args[0] == 1045
    stderr = proxy.stderr()
    assert "TLS or RSA keys" in stderr
    for secret in (PASSWORD, "foobaR", "2441243030352403", "pw2"):
        assert secret not in stderr


def test_connector_python_fast_and_fullclient_auths(sha2_proxy):
    proxy, sock = sha2_proxy
    # A Password entry: fast auth needs no cache, over TCP.
    conn = _connector(proxy, user="fay", password="pw2")
    assert first_row(conn, "SELECT 2") == (2,)
    conn.close()
    assert client_auths(proxy, "caching_sha2_fast") == 1

    # A verifier entry over the socket: 0x01 0x04, then the cleartext password.
    conn = _connector(proxy, sock, user="erin", password=PASSWORD)
    assert first_row(conn, "SELECT 3") == (3,)
    conn.close()
    assert client_auths(proxy, "caching_sha2_full") == 1
    conn = _connector(proxy, user="erin", password=PASSWORD)
    assert first_row(conn, "SELECT 4") == (4,)
    conn.close()
    assert client_auths(proxy, "caching_sha2_fast") == 2

    for user, kw in (("erin", {}), ("fay", {}), ("nobody", {}), ("erin", {"sock": sock})):
        with pytest.raises(mysql.connector.errors.ProgrammingError) as e:
            _connector(proxy, user=user, password="wrong", **kw)
        assert e.value.errno == 1045
        host = "localhost" if kw else "127.0.0.1"
        assert e.value.msg == f"Access denied for user '{user}'@'{host}' (using password: YES)"
    assert "wrong" not in proxy.stderr()


def test_a_reload_empties_the_cache(sha2_proxy):
    proxy, sock = sha2_proxy
    conn = _pymysql(proxy, sock, user="erin", password=PASSWORD)
    conn.close()
    _pymysql(proxy, user="erin", password=PASSWORD).close()
    proxy.proc.send_signal(signal.SIGHUP)  # the users file is read again: a new, empty cache
    proxy.wait_log("users file reloaded")
    with pytest.raises(pymysql.err.OperationalError) as e:
        _pymysql(proxy, user="erin", password=PASSWORD)
    assert e.value.args[0] == 1045


@pytest.fixture
def backend_account(mode):
    """A real account on the sandbox whose password is `foobar`, for passthrough identity."""
    with sandbox_account(f"sha2pt_{mode}", PASSWORD) as user:
        yield user


def test_passthrough_logs_in_to_the_backend_after_full_and_fastclient_auths(make_proxy, tmp_path, backend_account):
    # Full auth gives ringgate the cleartext, hence SHA1(password) for the backend's
    # mysql_native_password; the cache keeps it for later fast auths, which prove only SHA256s.
    user = backend_account
    users = write_users_file(tmp_path / "users.json", {user: [{"MysqlCachingSha2Password": FOOBAR_VERIFIER}]})
    sock = tmp_path / "rg.sock"
    proxy = make_proxy(users_file=users, passthrough=True, extra_args=("--socket", str(sock)))
    conn = _connector(proxy, sock, user=user, password=PASSWORD)
    assert current_user(conn) == user
    conn.close()
    conn = _pymysql(proxy, user=user, password=PASSWORD)
    assert current_user(conn) == user
    conn.close()
    assert client_auths(proxy, "caching_sha2_full") == 1
    assert client_auths(proxy, "caching_sha2_fast") == 1
