"""COM_CHANGE_USER through ringgate, with mysql-connector-python's
cmd_change_user (pure-Python protocol) against the sandbox MariaDB.

The accounts fixture creates two real accounts on the sandbox (like test_identity.py): with
passthrough identity each user is itself on the backend, so CURRENT_USER() shows whom the
backend connection really runs as. What MariaDB 10.11 does, checked directly on the sandbox and
asserted here through ringgate:
- success: OK; the new user, the packet's schema (none: DATABASE() is NULL) and character set;
  the old session's state (user variables, temporary tables) is gone;
- a wrong password: ERR 1045 "Access denied for user 'u'@'host' (using password: YES)"; the
  connection stays open as the old user in the old schema, but with a fresh session;
- a schema the new user may not use (or that does not exist): the server's ERR (1044 or 1049); again the old user in the old schema.
node mysql2's changeUser runs the same steps direct and through ringgate
(tests/node/change_user.js). The main cases also run with --pooling transaction, where a change
of user pins the session to its connection. Every test runs in fixed and heap mode and ends with the leak checks of the `make_proxy` fixture;
the passthrough ones also check that the server holds exactly the backend connections ringgate
accounts for.
"""

import json
import threading
import time

import mysql.connector
import pytest

from conftest import APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER, TEST_DB, backend_env
from helpers import current_user, direct, first_row, json_lines, run_node

LATIN1_SWEDISH_CI = 8
UTF8MB4_GENERAL_CI = 45


@pytest.fixture
def accounts(tmp_path, mode):
    a = (f"cua_{mode}", f"cua-secret-{mode}")
    b = (f"cub_{mode}", f"cub-secret-{mode}")
    root = direct()
    with root.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {TEST_DB}")
        for user, pw in (a, b):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
            cur.execute(
                f"CREATE USER '{user}'@'%%' IDENTIFIED WITH mysql_native_password USING PASSWORD(%s)", (pw,)
            )
            cur.execute(f"GRANT ALL ON {TEST_DB}.* TO '{user}'@'%'")
        cur.execute("SELECT PASSWORD(%s)", (b[1],))
        (b_hash,) = cur.fetchone()
    users = tmp_path / "users.json"
    # b only by its hash: ringgate recovers SHA1(password) from the change-user response.
    users.write_text(json.dumps({a[0]: [{"Password": a[1]}], b[0]: [{"MysqlNativePassword": b_hash}]}))
    yield {"a": a, "b": b, "users": users}
    with root.cursor() as cur:
        for user, _ in (a, b):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
    root.close()


def _server_threads_match_ringgate(proxy, users, timeout=8.0):
    """The server holds exactly the backend connections ringgate accounts for (idle + busy):
    none leaked by a release, a relet or a failed lease."""
    root = direct()
    deadline = time.monotonic() + timeout
    try:
        while True:
            m = proxy.metrics()
            held = m('ringgate_backend_connections{state="idle"}') + m('ringgate_backend_connections{state="busy"}')
            with root.cursor() as cur:
                cur.execute(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER IN (%s, %s)", tuple(users)
                )
                (on_server,) = cur.fetchone()
            if on_server == held:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"server threads of {users}: {on_server}, ringgate holds {held}")
            time.sleep(0.1)
    finally:
        root.close()


POOLING = ["session", "transaction"]


def _pooling_args(mode, pooling):
    return ("--pooling", pooling)


@pytest.mark.parametrize("pooling", POOLING)
def test_change_user_switches_identity_schema_charset_and_resets_the_session(make_proxy, accounts, pooling, mode):
    proxy = make_proxy(users_file=accounts["users"], passthrough=True, extra_args=_pooling_args(mode, pooling))
    base = proxy.connections_total()
    (ua, pa), (ub, pb) = accounts["a"], accounts["b"]
    cn = proxy.connector(ua, pa, database=TEST_DB)
    assert first_row(cn, "SELECT CURRENT_USER(), DATABASE()") == (f"{ua}@%", TEST_DB)
    cur = cn.cursor()
    cur.execute("SET @x = 42")
    cur.execute("CREATE TEMPORARY TABLE tmp_cu (i INT)")
    cur.close()

    # To b, no schema: the new identity on the backend, DATABASE() NULL, nothing of a's session.
    cn.cmd_change_user(username=ub, password=pb, database="")
    assert first_row(cn, "SELECT CURRENT_USER(), DATABASE(), @x") == (f"{ub}@%", None, None)
    with pytest.raises(mysql.connector.Error) as ei:
        first_row(cn, f"SELECT * FROM {TEST_DB}.tmp_cu")
    assert ei.value.errno == 1146, "the temporary table did not survive"

    # Back to a, with a schema and latin1: applied, and again a fresh session.
    cur = cn.cursor()
    cur.execute("SET @y = 1")
    cur.close()
    cn.cmd_change_user(username=ua, password=pa, database=TEST_DB, charset=LATIN1_SWEDISH_CI)
    assert first_row(cn, "SELECT CURRENT_USER(), DATABASE(), @y, @@character_set_client, @@collation_connection") == (
        f"{ua}@%",
        TEST_DB,
        None,
        "latin1",
        "latin1_swedish_ci",
    )
    # And utf8mb4 again: the charset id selects the collation.
    cn.cmd_change_user(username=ub, password=pb, database=TEST_DB, charset=UTF8MB4_GENERAL_CI)
    assert first_row(cn, "SELECT CURRENT_USER(), @@character_set_client") == (f"{ub}@%", "utf8mb4")
    cn.close()
    proxy.assert_settled(base, 1)
    _server_threads_match_ringgate(proxy, (ua, ub))


@pytest.mark.parametrize("pooling", POOLING)
def test_wrong_password_gets_1045_and_keeps_the_old_user_and_schema(make_proxy, accounts, pooling, mode):
    proxy = make_proxy(users_file=accounts["users"], passthrough=True, extra_args=_pooling_args(mode, pooling))
    base = proxy.connections_total()
    (ua, pa), (ub, _) = accounts["a"], accounts["b"]
    cn = proxy.connector(ua, pa)
    cur = cn.cursor()
    cur.execute(f"USE {TEST_DB}")  # the schema selected now, not the login's, is the old one
    cur.execute("SET @x = 42")
    cur.execute("CREATE TEMPORARY TABLE tmp_cu (i INT)")
    cur.close()
    with pytest.raises(mysql.connector.Error) as ei:
        cn.cmd_change_user(username=ub, password="wrong", database="mysql")
    assert ei.value.errno == 1045
    assert ei.value.msg == f"Access denied for user '{ub}'@'127.0.0.1' (using password: YES)"
    # Still open, still a, still in the old schema; the session was reset, as on MariaDB.
    assert first_row(cn, "SELECT CURRENT_USER(), DATABASE(), @x") == (f"{ua}@%", TEST_DB, None)
    with pytest.raises(mysql.connector.Error) as ei:
        first_row(cn, "SELECT * FROM tmp_cu")
    assert ei.value.errno == 1146
    # An unknown user reads the same.
    with pytest.raises(mysql.connector.Error) as ei:
        cn.cmd_change_user(username="nobody_here", password="x")
    assert ei.value.errno == 1045
    assert "'nobody_here'@'127.0.0.1'" in ei.value.msg
    assert first_row(cn, "SELECT CURRENT_USER(), DATABASE()") == (f"{ua}@%", TEST_DB)
    # The connection works for a change afterwards.
    cn.cmd_change_user(username=ub, password=accounts["b"][1], database=TEST_DB)
    assert first_row(cn, "SELECT CURRENT_USER(), DATABASE()") == (f"{ub}@%", TEST_DB)
    cn.close()
    proxy.assert_settled(base, 1)
    _server_threads_match_ringgate(proxy, (ua, ub))


def test_unknown_schema_gets_the_servers_error_and_keeps_the_old_session(make_proxy, accounts):
    proxy = make_proxy(users_file=accounts["users"], passthrough=True)
    base = proxy.connections_total()
    (ua, pa), (ub, pb) = accounts["a"], accounts["b"]
    cn = proxy.connector(ua, pa, database=TEST_DB)
    with pytest.raises(mysql.connector.Error) as ei:
        cn.cmd_change_user(username=ub, password=pb, database="no_such_db_cu")
    # What the server answers this account (it has no global privileges: 1044, not 1049).
    assert ei.value.errno == 1044
    assert ei.value.msg == f"Access denied for user '{ub}'@'%' to database 'no_such_db_cu'"
    assert first_row(cn, "SELECT CURRENT_USER(), DATABASE()") == (f"{ua}@%", TEST_DB)
    cn.close()
    proxy.assert_settled(base, 1)
    _server_threads_match_ringgate(proxy, (ua, ub))


def test_change_user_with_shared_identity(make_proxy):
    """--backend-identity shared: the proxy users change; the backend account stays the shared
    one. The session is still reset and the packet's schema and charset applied."""
    proxy = make_proxy()
    base = proxy.connections_total()
    cn = proxy.connector(APP_USER, APP_PASSWORD, database=TEST_DB)
    cur = cn.cursor()
    cur.execute("SET @x = 1")
    cur.close()
    cn.cmd_change_user(username=HASHED_USER, password=HASHED_PASSWORD, database="", charset=LATIN1_SWEDISH_CI)
    assert first_row(cn, "SELECT DATABASE(), @x, @@character_set_client") == (None, None, "latin1")
    with pytest.raises(mysql.connector.Error) as ei:
        cn.cmd_change_user(username=APP_USER, password="wrong")
    assert ei.value.errno == 1045
    assert first_row(cn, "SELECT 1") == (1,)
    cn.cmd_change_user(username=APP_USER, password=APP_PASSWORD, database=TEST_DB)
    assert first_row(cn, "SELECT DATABASE()") == (TEST_DB,)
    cn.close()
    proxy.assert_settled(base, 1)


def test_many_changes_leave_nothing_behind(make_proxy, accounts):
    """With one worker and a pool of one, every switch releases and re-leases; nothing leaks."""
    proxy = make_proxy(users_file=accounts["users"], passthrough=True, workers=1,
                       extra_args=("--backend-pool-size", "1"))
    base = proxy.connections_total()
    (ua, pa), (ub, pb) = accounts["a"], accounts["b"]
    cns = [proxy.connector(ua, pa) for _ in range(3)]
    for i in range(6):
        for cn in cns:
            user, pw = (ub, pb) if i % 2 == 0 else (ua, pa)
            if i == 3:
                with pytest.raises(mysql.connector.Error):
                    cn.cmd_change_user(username=user, password="wrong")
            else:
                cn.cmd_change_user(username=user, password=pw, database=TEST_DB if i % 3 else "")
    for cn in cns:
        assert first_row(cn, "SELECT 1") == (1,)
        cn.close()
    proxy.assert_settled(base, 3)
    _server_threads_match_ringgate(proxy, (ua, ub))


@pytest.mark.parametrize("pooling", POOLING)
def test_kill_ownership_follows_the_new_user(make_proxy, accounts, pooling, mode):
    proxy = make_proxy(users_file=accounts["users"], passthrough=True, extra_args=_pooling_args(mode, pooling))
    base = proxy.connections_total()
    (ua, pa), (ub, pb) = accounts["a"], accounts["b"]
    victim = proxy.connector(ua, pa)
    victim_id = victim.connection_id
    victim.cmd_change_user(username=ub, password=pb)
    killer_a = proxy.connector(ua, pa)
    killer_b = proxy.connector(ub, pb)

    box = {}

    def sleeper():
        cur = victim.cursor()
        try:
            cur.execute("SELECT SLEEP(20)")
            box["rows"] = cur.fetchall()
        except mysql.connector.Error as e:
            box["error"] = e

    t = threading.Thread(target=sleeper, daemon=True)
    t.start()
    root = direct()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with root.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(20)%'")
                if cur.fetchone()[0]:
                    break
            time.sleep(0.05)
    finally:
        root.close()
    # a was the victim's user before the change: no longer its owner.
    with pytest.raises(mysql.connector.Error) as ei:
        killer_a.cursor().execute(f"KILL QUERY {victim_id}")
    assert ei.value.errno == 1095
    # b is now: its KILL QUERY interrupts the victim's query.
    killer_b.cursor().execute(f"KILL QUERY {victim_id}")
    t.join(15)
    assert not t.is_alive()
    # MariaDB answers a killed SLEEP with the row 1 (interrupted), or ERR 1317.
    assert box.get("rows") == [(1,)] or getattr(box.get("error"), "errno", None) == 1317, box
    assert first_row(victim, "SELECT CURRENT_USER()") == (f"{ub}@%",)
    for c in (victim, killer_a, killer_b):
        c.close()
    proxy.assert_settled(base, 3)




def _run_node_change_user(port, accounts):
    r = run_node(
        "change_user.js",
        PORT=str(port),
        USER_A=accounts["a"][0],
        PASS_A=accounts["a"][1],
        USER_B=accounts["b"][0],
        PASS_B=accounts["b"][1],
        DB=TEST_DB,
    )
    return json_lines(r.stdout)


def test_node_mysql2_change_user_matches_mariadb(make_proxy, accounts):
    """node mysql2's changeUser (tests/node/change_user.js) gives through ringgate what it gives
    direct: users, schemas, charsets, the 1045 with the server's text, a reset session. The one
    documented difference: after the failed change MariaDB sets the character set to the
    server's default, ringgate keeps the session's."""
    direct_steps = _run_node_change_user(backend_env()["port"], accounts)
    proxy = make_proxy(users_file=accounts["users"], passthrough=True)
    base = proxy.connections_total()
    through = _run_node_change_user(proxy.port, accounts)
    assert [s["step"] for s in through] == ["start", "to_b_with_schema", "wrong_password", "to_a_by_sha1", "to_b_latin1"]
    wrong_direct = next(s for s in direct_steps if s["step"] == "wrong_password")
    wrong_through = next(s for s in through if s["step"] == "wrong_password")
    assert wrong_through["err"]["errno"] == 1045
    assert wrong_through["state"]["cs"] == "utf8mb4", "the session's charset is kept"
    wrong_direct["state"]["cs"] = wrong_through["state"]["cs"]
    assert through == direct_steps
    proxy.assert_settled(base, 1)
    _server_threads_match_ringgate(proxy, (accounts["a"][0], accounts["b"][0]))


# MySQL 8's caching_sha2 verifier of "foobar" (as in test_caching_sha2.py).
FOOBAR_VERIFIER = (
    "0x24412430303524031A69251C34295C4B35167C7F1E5A7B63091349503974624D34504B5A424679354856336868"
    "686F52485A736E4A733368786E427575516C73446469496537"
)


def test_change_user_to_a_caching_sha2_user(make_proxy, accounts, mode, tmp_path):
    """COM_CHANGE_USER for a user whose users-file entry is a caching_sha2 verifier: the first
    change is a full authentication (0x01 0x04, the cleartext over the unix socket), which fills
    the cache; the next change to it is a fast authentication (0x01 0x03 before the OK). The
    backend switches to that account (passthrough, with the password the full authentication
    proved). A wrong password is 1045 and the session stays the old user's."""
    sha2_user = f"cus_{mode}"
    root = direct()
    with root.cursor() as cur:
        cur.execute(f"DROP USER IF EXISTS '{sha2_user}'@'%'")
        cur.execute(f"CREATE USER '{sha2_user}'@'%%' IDENTIFIED BY %s", ("foobar",))
        cur.execute(f"GRANT ALL ON {TEST_DB}.* TO '{sha2_user}'@'%'")
    ua, pa = accounts["a"]
    users = tmp_path / "sha2-users.json"
    users.write_text(json.dumps({ua: [{"Password": pa}], sha2_user: [{"MysqlCachingSha2Password": FOOBAR_VERIFIER}]}))
    sock = tmp_path / "rg.sock"
    proxy = make_proxy(users_file=users, passthrough=True, extra_args=("--socket", str(sock)))
    try:
        cn = mysql.connector.connect(unix_socket=str(sock), user=ua, password=pa, use_pure=True,
                                     auth_plugin="caching_sha2_password")
        assert current_user(cn) == ua
        cn.cmd_change_user(username=sha2_user, password="foobar", database=TEST_DB)
        assert first_row(cn, "SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1), DATABASE()") == (sha2_user, TEST_DB)
        cn.cmd_change_user(username=ua, password=pa)
        assert current_user(cn) == ua
        # From the cache now: fast authentication.
        cn.cmd_change_user(username=sha2_user, password="foobar")
        assert current_user(cn) == sha2_user
        with pytest.raises(mysql.connector.Error) as e:
            cn.cmd_change_user(username=sha2_user, password="not-foobar")
        assert e.value.errno == 1045, e.value
        cn.close()
        assert "foobar" not in proxy.stderr()
    finally:
        with root.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{sha2_user}'@'%'")
        root.close()
