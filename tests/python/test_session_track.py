"""Session-state tracking under `--pooling transaction`.

A client that negotiated CLIENT_SESSION_TRACK (mysql-connector-python with
ClientFlag.SESSION_TRACK) gets backend connections with the capability, and its sessions turn
the server's four trackers on: ringgate reads the state blocks of its OK packets (the value of a
`SET` of an expression, a state change the lexer cannot see). A client that did not (PyMySQL)
gets connections without the capability, so the server sends it no block and no
SESSION_STATE_CHANGED flag, whatever the trackers say: what it reads is what a direct connection
gives it.
"""

import subprocess

import mysql.connector
from mysql.connector.constants import ClientFlag

from conftest import APP_PASSWORD, APP_USER, TEST_DB, backend_env, mariadb_cli
from helpers import direct, tx_proxy, value, wait_idle

SESSION_STATE_CHANGED = 0x4000


def pinned(m):
    return {k: v for k, v in m.items() if k.startswith("ringgate_sessions_pinned_total") and v}


def connector(port, user, password):
    return mysql.connector.connect(
        host="127.0.0.1", port=port, user=user, password=password, use_pure=True,
        client_flags=[ClientFlag.SESSION_TRACK], autocommit=True, connection_timeout=10,
    )


def test_pymysql_gets_no_state_blocks_and_the_same_oks_as_direct(make_proxy):
    """PyMySQL does not negotiate CLIENT_SESSION_TRACK: after each statement its OK packet's
    status and message (everything after the warning count) are those of a direct connection,
    although another client's sessions turned the trackers on for the same server."""
    proxy = tx_proxy(make_proxy, 2, extra=["--backend-pool-size", "2"])
    with direct() as c:
        value(c, f"CREATE DATABASE IF NOT EXISTS {TEST_DB}")
        value(c, f"CREATE TABLE IF NOT EXISTS {TEST_DB}.track_t (a INT)")
    statements = [
        "SET time_zone = '+01:00'",
        "SET sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')",
        f"USE {TEST_DB}",
        "BEGIN",
        "INSERT INTO track_t VALUES (1), (2)",
        "UPDATE track_t SET a = a + 1 WHERE a < 0",
        "COMMIT",
        "SET autocommit = 1",
    ]

    def oks(conn):
        out = []
        for sql in statements:
            with conn.cursor() as cur:
                cur.execute(sql)
            out.append((sql, conn.server_status & SESSION_STATE_CHANGED, conn._result.message))
        return out

    tracking = connector(proxy.port, APP_USER, APP_PASSWORD)
    try:
        tracking.cursor().execute("DO 1")  # its connection now has the trackers on
        with direct() as d:
            want = oks(d)
        with proxy.connect(autocommit=True) as p:
            got = oks(p)
    finally:
        tracking.close()
    assert got == want
    assert all(flag == 0 for _, flag, _ in got), got


def test_connector_with_session_track_replays_an_expression_set_from_the_tracker(make_proxy):
    """mysql-connector-python with SESSION_TRACK: `SET sql_mode = CONCAT(...)` is replayed with
    the value the server's tracker reported (not pinned), BEGIN/COMMIT's transaction-state blocks
    pin nothing, and every answer matches a direct connection, with a PyMySQL client taking turns
    on the same two backend connections."""
    proxy = tx_proxy(make_proxy, 2, extra=["--backend-pool-size", "2"])
    b = backend_env()
    setup = ["SET sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')", "SET time_zone = '-02:00'"]
    probes = ["SELECT @@session.sql_mode", "SELECT @@session.time_zone", "SELECT DATABASE()"]
    d = connector(b["port"], b["user"], b["password"])
    try:
        cur = d.cursor()
        for sql in setup:
            cur.execute(sql)
        want = []
        for q in probes:
            cur.execute(q)
            want.append(cur.fetchall())
    finally:
        d.close()
    c = connector(proxy.port, APP_USER, APP_PASSWORD)
    try:
        cur = c.cursor()
        for sql in setup:
            cur.execute(sql)
        with proxy.connect(autocommit=True) as other:
            for _ in range(10):
                assert value(other, "SELECT @@session.time_zone") == "SYSTEM"
                assert "ANSI_QUOTES" not in value(other, "SELECT @@session.sql_mode")
                got = []
                for q in probes:
                    cur.execute(q)
                    got.append(cur.fetchall())
                assert got == want
                cur.execute("BEGIN")
                cur.execute("SELECT 1")
                cur.fetchall()
                cur.execute("COMMIT")
        m = wait_idle(proxy)
    finally:
        c.close()
    assert pinned(m) == {}, pinned(m)


def test_connector_state_the_lexer_cannot_see_pins(make_proxy):
    """A user variable set inside a stored function: the call of a stored function pins the
    session (stored_function) before the server's state_change tracker reports it, and the
    session keeps it (a trigger's state, which no statement shows, is test_state_made_inside_the_server.py's)."""
    proxy = tx_proxy(make_proxy, 2, extra=["--backend-pool-size", "2"])
    with direct() as c:
        value(c, f"CREATE DATABASE IF NOT EXISTS {TEST_DB}")
        value(c, f"DROP FUNCTION IF EXISTS {TEST_DB}.track_f")
        value(c, f"CREATE FUNCTION {TEST_DB}.track_f() RETURNS INT BEGIN SET @hidden = 42; RETURN 1; END")
    c = connector(proxy.port, APP_USER, APP_PASSWORD)
    try:
        cur = c.cursor()
        cur.execute(f"DO {TEST_DB}.track_f()")
        with proxy.connect(autocommit=True) as other:
            for _ in range(5):
                assert value(other, "SELECT @hidden") is None
                cur.execute("SELECT @hidden")
                assert cur.fetchall() == [(42,)]
        m = proxy.metrics()
    finally:
        c.close()
    assert pinned(m) == {'ringgate_sessions_pinned_total{reason="stored_function"}': 1}, pinned(m)


def test_mariadb_cli_answers_as_direct(make_proxy):
    """The mariadb CLI (Connector/C) through transaction pooling: an expression SET, a
    transaction and the values after it print what a direct connection prints."""
    proxy = tx_proxy(make_proxy, 2)
    script = (
        "SET sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES'); SET time_zone = '+03:00'; "
        "BEGIN; SELECT 1; COMMIT; SELECT @@session.sql_mode, @@session.time_zone; "
        "SET NAMES latin1; SELECT @@character_set_client, @@collation_connection;"
    )
    with proxy.connect(autocommit=True) as other:
        value(other, "SELECT 1")
        got = proxy.cli("-N", "-e", script).stdout
        value(other, "SELECT 1")
    b = backend_env()
    want = subprocess.run(
        [mariadb_cli(), "--no-defaults", "--protocol=TCP", f"-h{b['host']}", f"-P{b['port']}",
         f"-u{b['user']}", f"-p{b['password']}", "-N", "-e", script],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert got == want
    assert pinned(proxy.metrics()) == {}

