"""One user cannot starve the others of backend connections.

With --backend-max-connections 4, four sessions of user A that sit idle holding a backend
connection (inside a transaction, or pinned) used to keep them for ever, and user B's login
waited --backend-wait-timeout and got ERR 1040. Now, while someone waits for a connection, a
session idle holding one past --idle-transaction-timeout (or --idle-pinned-timeout) is cut: its
transaction is rolled back (the connection is reset), it gets ERR 4031 and is closed. And
--backend-max-connections-per-user keeps one backend account from taking every connection.

Real MariaDB (the sandbox) through ringgate with transaction pooling, passthrough identity,
one worker. Timeouts are 1-2 s so the file stays fast.
"""

import time

import pymysql
import pytest

from helpers import TEST_DB, capped_passthrough_proxy, direct, run_node

CAP = 4


# The pool and the session machine are the same in every buffer mode; one is enough.
pytestmark = pytest.mark.read_buffers("fixed")


@pytest.fixture
def table():
    with direct() as root:
        with root.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {TEST_DB}")
            cur.execute(f"DROP TABLE IF EXISTS {TEST_DB}.starve")
            cur.execute(f"CREATE TABLE {TEST_DB}.starve (who VARCHAR(32)) ENGINE=InnoDB")
    yield f"{TEST_DB}.starve"
    with direct() as root:
        with root.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {TEST_DB}.starve")


def connect(proxy, who):
    user, password = who
    return proxy.connect(user=user, password=password, database=TEST_DB, autocommit=True)


def hold(conn, *sql):
    with conn.cursor() as cur:
        for s in sql:
            cur.execute(s)


def b_logs_in_and_queries(proxy, who):
    """User B logs in (a login leases a connection) and runs a query, within the wait timeout."""
    started = time.monotonic()
    b = connect(proxy, who)
    with b.cursor() as cur:
        cur.execute("SELECT 'b', CURRENT_USER()")
        row = cur.fetchone()
    b.close()
    assert row == ("b", f"{who[0]}@%"), row
    return time.monotonic() - started


def is_cut(e):
    """The cut session's next statement fails as after a server-side disconnect: PyMySQL reports
    an ERR with sequence id 0 (MySQL's own 4031 is sent so) as 2013; clients that read it whole
    (mysql2, libmysqlclient 8.0.24+) see 4031."""
    assert e.args[0] in (2013, 4031), e.args


def test_idle_transactions_of_one_user_do_not_starve_another(make_proxy, two_users, table):
    users, users_file = two_users
    proxy = capped_passthrough_proxy(
        make_proxy, users_file, CAP, "3s", "--idle-transaction-timeout", "1s", "--idle-pinned-timeout", "0"
    )
    base = proxy.connections_total()
    held = [connect(proxy, users["a"]) for _ in range(CAP)]
    for i, a in enumerate(held):
        hold(a, "BEGIN", f"INSERT INTO {table} VALUES ('a{i}')")
    time.sleep(1.2)
    b_logs_in_and_queries(proxy, users["b"])
    m = proxy.metrics()
    assert m('ringgate_sessions_idle_cut_total{held="transaction"}') >= 1, m.dump()
    # Only as many as were needed: one waiter, one cut.
    assert m('ringgate_sessions_idle_cut_total{held="transaction"}') == 1, m.dump()
    cut = 0
    for a in held:
        try:
            hold(a, "COMMIT")
        except pymysql.err.OperationalError as e:
            is_cut(e)
            cut += 1
    assert cut == 1
    # The cut session's insert was rolled back; the others committed theirs.
    with direct() as root:
        with root.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {table}")
            assert cur.fetchone()[0] == CAP - 1
    assert "--idle-transaction-timeout" in proxy.stderr()
    assert users["a"][0] in proxy.stderr()
    for a in held:
        a.close()
    proxy.assert_settled(base, CAP + 1)


def test_session_pooling_cuts_idle_transactions_too(make_proxy, two_users):
    """With --pooling session every session holds its connection by design, so only the
    transaction bound applies: the idle BEGIN is cut, the idle session outside one is not."""
    users, users_file = two_users
    proxy = capped_passthrough_proxy(
        make_proxy, users_file, CAP, "3s", "--idle-transaction-timeout", "1s", pooling="session"
    )
    base = proxy.connections_total()
    held = [connect(proxy, users["a"]) for _ in range(CAP)]
    hold(held[0], "BEGIN", "SELECT 1")
    time.sleep(1.2)
    b_logs_in_and_queries(proxy, users["b"])
    with pytest.raises(pymysql.err.OperationalError) as e:
        hold(held[0], "SELECT 1")
    is_cut(e.value)
    for a in held[1:]:
        hold(a, "SELECT 1")
    m = proxy.metrics()
    assert m('ringgate_sessions_idle_cut_total{held="transaction"}') == 1, m.dump()
    for a in held:
        a.close()
    proxy.assert_settled(base, CAP + 1)


def test_idle_pinned_sessions_of_one_user_do_not_starve_another(make_proxy, two_users):
    users, users_file = two_users
    proxy = capped_passthrough_proxy(make_proxy, users_file, CAP, "3s", "--idle-pinned-timeout", "1s", "--idle-transaction-timeout", "0")
    base = proxy.connections_total()
    held = [connect(proxy, users["a"]) for _ in range(CAP)]
    for i, a in enumerate(held):
        # A user variable pins the session to its connection (it lives there).
        hold(a, f"SET @mine = {i}")
    time.sleep(1.2)
    b_logs_in_and_queries(proxy, users["b"])
    m = proxy.metrics()
    assert m('ringgate_sessions_idle_cut_total{held="pinned"}') == 1, m.dump()
    alive = 0
    for i, a in enumerate(held):
        try:
            with a.cursor() as cur:
                cur.execute("SELECT @mine")
                assert cur.fetchone() == (i,)
                alive += 1
        except pymysql.err.OperationalError as e:
            is_cut(e)
    assert alive == CAP - 1
    assert "--idle-pinned-timeout" in proxy.stderr()
    assert "user_variable" in proxy.stderr()
    for a in held:
        a.close()
    proxy.assert_settled(base, CAP + 1)


def test_one_user_cannot_take_every_backend_connection(make_proxy, two_users):
    users, users_file = two_users
    proxy = capped_passthrough_proxy(
        make_proxy, users_file, CAP, "1s",
        "--backend-max-connections-per-user", "2",
        "--idle-transaction-timeout", "0", "--idle-pinned-timeout", "0",
    )
    base = proxy.connections_total()
    held = [connect(proxy, users["a"]) for _ in range(2)]
    for a in held:
        hold(a, "BEGIN", "SELECT 1")
    # A's third and fourth transactions wait for one of A's own connections, then get 1040.
    refused = 0
    for _ in range(2):
        try:
            extra = connect(proxy, users["a"])
            hold(extra, "BEGIN", "SELECT 1")
            held.append(extra)
        except pymysql.err.OperationalError as e:
            assert e.args[0] == 1040, e.args
            refused += 1
    assert refused == 2
    b_logs_in_and_queries(proxy, users["b"])
    m = proxy.metrics()
    assert m(f'ringgate_backend_user_limit_waits_total{{user="{users["a"][0]}"}}') >= 2, m.dump()
    assert m(f'ringgate_backend_connections_by_user{{user="{users["a"][0]}"}}') == 2, m.dump()
    for a in held:
        hold(a, "COMMIT")
        a.close()
    proxy.assert_settled(base, 4)


def test_node_mysql2_reads_the_cut_as_err_4031(make_proxy, two_users):
    """mysql2 always reads its socket: the cut reaches it at once as a fatal error event with
    MySQL's ER_CLIENT_INTERACTION_TIMEOUT code and ringgate's text (tests/node/idle_cut.js)."""
    users, users_file = two_users
    proxy = capped_passthrough_proxy(make_proxy, users_file, 1, "5s", "--idle-transaction-timeout", "1s")
    run_node(
        "idle_cut.js",
        proxy,
        PROXY_PORT=str(proxy.port),
        A_USER=users["a"][0], A_PASSWORD=users["a"][1],
        B_USER=users["b"][0], B_PASSWORD=users["b"][1],
    )
