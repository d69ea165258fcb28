"""The server's own session tracking as the net under transaction pooling's lexer.

State made inside the server (a stored function or a trigger that sets a user variable or takes
a named lock) is invisible to any lexer: the statement is a plain SELECT or INSERT. Every backend
connection therefore negotiates CLIENT_SESSION_TRACK and turns `session_track_state_change` on,
whatever the client negotiated, and a reply that raises SERVER_SESSION_STATE_CHANGED for a
statement the lexer took as stateless pins the session. What the client did not ask for is
stripped from the replies it gets.

The server raises the flag only in an OK: a result set's EOF carries the status the last OK
left (so `SELECT f()` is not reported), and a named lock taken inside a routine is never
reported (MariaDB 10.11, checked by hand): the lexer pins any call of a stored function.

Each test runs on one backend connection (`--backend-max-connections 1`, one worker), so that
client A's state, had it gone back to the pool, would be on the connection client B gets.
"""

import json

import pytest
from pymysql.constants import CLIENT

from conftest import APP_PASSWORD, APP_USER, TEST_DB, backend_env
from helpers import direct, one_backend_proxy, run_node, value

SERVER_SESSION_STATE_CHANGED = 0x4000


@pytest.fixture(scope="module", autouse=True)
def routines():
    with direct() as c, c.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {TEST_DB}")
        cur.execute(f"DROP FUNCTION IF EXISTS {TEST_DB}.net_setvar")
        cur.execute(f"DROP FUNCTION IF EXISTS {TEST_DB}.net_lock")
        cur.execute(f"DROP TABLE IF EXISTS {TEST_DB}.net_trig")
        cur.execute(
            f"CREATE FUNCTION {TEST_DB}.net_setvar() RETURNS INT DETERMINISTIC "
            "BEGIN SET @net_secret = 'from-a-function'; RETURN 1; END"
        )
        cur.execute(
            f"CREATE FUNCTION {TEST_DB}.net_lock() RETURNS INT DETERMINISTIC "
            "RETURN GET_LOCK('net_lock', 0)"
        )
        cur.execute(f"CREATE TABLE {TEST_DB}.net_trig (x INT) ENGINE=InnoDB")
        cur.execute(
            f"CREATE TRIGGER {TEST_DB}.net_trig_bi BEFORE INSERT ON {TEST_DB}.net_trig "
            "FOR EACH ROW SET @net_secret = 'from-a-trigger'"
        )
    yield


def connect(proxy, tracking):
    flag = CLIENT.SESSION_TRACK if tracking else 0
    return proxy.connect(autocommit=True, database=TEST_DB, client_flag=flag)


def pinned_for(proxy, reason):
    return proxy.metrics()(f'ringgate_sessions_pinned_total{{reason="{reason}"}}')


@pytest.mark.parametrize("tracking", [False, True], ids=["plain-client", "tracking-client"])
@pytest.mark.parametrize(
    "statement, reason",
    [
        # The server's flag: no lexer sees the trigger.
        (f"INSERT INTO {TEST_DB}.net_trig VALUES (1)", "state_change"),
        # The lexer: a result set carries no fresh flag.
        (f"SELECT {TEST_DB}.net_setvar()", "stored_function"),
        ("SELECT net_setvar()", "stored_function"),
        (f"DO {TEST_DB}.net_setvar()", "stored_function"),
    ],
    ids=["trigger", "select-qualified-function", "select-function", "do-function"],
)
def test_a_user_variable_set_inside_the_server_stays_with_its_session(
    make_proxy, statement, reason, tracking
):
    proxy = one_backend_proxy(make_proxy, pooling="transaction")
    with connect(proxy, tracking) as a:
        value(a, statement)
        # A keeps its variable (its session is pinned to the connection that holds it)...
        assert value(a, "SELECT @net_secret") is not None
        assert pinned_for(proxy, reason) == 1
    # ...and B, on the only backend connection there is, never sees it.
    with connect(proxy, tracking) as b:
        assert value(b, "SELECT @net_secret") is None


@pytest.mark.parametrize("tracking", [False, True], ids=["plain-client", "tracking-client"])
@pytest.mark.parametrize("verb", ["SELECT", "DO"])
def test_a_named_lock_taken_inside_a_function_goes_with_its_session(make_proxy, verb, tracking):
    proxy = one_backend_proxy(make_proxy, pooling="transaction")
    with direct() as watcher:
        with connect(proxy, tracking) as a:
            with a.cursor() as cur:
                cur.execute(f"{verb} {TEST_DB}.net_lock()")
            assert value(a, "SELECT 1") == 1
            assert value(watcher, "SELECT IS_FREE_LOCK('net_lock')") == 0
            assert pinned_for(proxy, "stored_function") == 1
        # The pinned connection is reset (or closed) when its session ends: the lock is gone.
        with connect(proxy, tracking) as b:
            assert value(b, "SELECT 1") == 1
        assert value(watcher, "SELECT IS_FREE_LOCK('net_lock')") == 1


def ok_seen(conn, sql):
    """Runs `sql` (answered with an OK) and returns the status word and the OK's info bytes as
    PyMySQL read them (the rest of the packet after the warning count)."""
    with conn.cursor() as cur:
        cur.execute(sql)
        return conn.server_status, cur._result.message


@pytest.mark.parametrize(
    "sql",
    ["SET @net_x = 1", f"USE {TEST_DB}", "SET autocommit = 1", f"UPDATE {TEST_DB}.net_trig SET x = x"],
)
def test_a_client_without_session_tracking_gets_the_oks_direct_would_send(make_proxy, sql):
    proxy = one_backend_proxy(make_proxy, pooling="transaction")
    with direct(database=TEST_DB) as d, proxy.connect(autocommit=True, database=TEST_DB) as p:
        want = ok_seen(d, sql)
        got = ok_seen(p, sql)
    assert want[0] & SERVER_SESSION_STATE_CHANGED == 0
    assert got == want


@pytest.mark.parametrize("sql", ["SET @net_x = 1", f"USE {TEST_DB}", "SET autocommit = 0",
                                 "SET sql_mode = 'STRICT_ALL_TABLES'"])
def test_a_client_with_session_tracking_gets_only_its_own_trackers_blocks(make_proxy, sql):
    """The proxy's trackers (state_change, every system variable, transaction information) stay
    its own: a tracking client with the server's default trackers gets the OK bytes direct
    sends (PyMySQL keeps everything after the warning count as the message)."""
    proxy = one_backend_proxy(make_proxy, pooling="transaction")
    flag = CLIENT.SESSION_TRACK
    with direct(database=TEST_DB, client_flag=flag) as d, \
            proxy.connect(autocommit=True, database=TEST_DB, client_flag=flag) as p:
        want = ok_seen(d, sql)
        got = ok_seen(p, sql)
    assert got == want


def test_node_mysql2_multi_statement_results_match_direct(make_proxy):
    """mysql2's own test-multiple-results compares serverStatus exactly: mysql2 negotiates
    CLIENT_SESSION_TRACK, and the flag the proxy's trackers raise must not reach it."""
    proxy = one_backend_proxy(make_proxy, pooling="transaction")
    b = backend_env()

    def run(port, user, password):
        r = run_node("multi_results.js", proxy, timeout=120, PORT=str(port), USER=user, PASS=password, DB=TEST_DB)
        return json.loads(r.stdout.strip().splitlines()[-1])

    want = run(b["port"], b["user"], b["password"])
    got = run(proxy.port, APP_USER, APP_PASSWORD)
    assert got == want
