"""What a pooled backend connection carries from one client to the next.

Each two-client test runs ringgate with `--workers 1 --backend-pool-size 1
--backend-max-connections 1`: client A leaves some session state on its backend connection and
disconnects; client B gets a backend connection for the same key and must see none of it, as on
a fresh connection. Where the connection is reused, B checks that it has A's server thread (else
the test would prove nothing); where ringgate discards it instead, B gets a fresh one.

test_server_reset_facts checks, directly against MariaDB, what COM_RESET_CONNECTION restores:
the facts docs/operations.md ("What a pooled connection carries between clients") is built on.
"""

import os
import tempfile

import pymysql
import pytest

from conftest import TEST_DB, backend_env
from helpers import BUSY_BACKENDS, CLIENTS, IDLE_BACKENDS, direct, one_backend_proxy, run, value

ROLE = "ringgate_pool_role"
TABLE = f"{TEST_DB}.pooled_state"
LOCK_NAME = "ringgate_pool_lock"


def com_reset_connection(conn):
    conn._execute_command(0x1F, b"")  # COM_RESET_CONNECTION
    conn._read_ok_packet()


@pytest.fixture(scope="module", autouse=True)
def schema():
    """A table, and a role granted to the backend account the proxy logs in as."""
    b = backend_env()
    with direct() as c:
        run(
            c,
            f"CREATE DATABASE IF NOT EXISTS {TEST_DB}",
            f"CREATE OR REPLACE TABLE {TABLE} (id INT AUTO_INCREMENT PRIMARY KEY, v INT) ENGINE=InnoDB",
            f"DROP ROLE IF EXISTS {ROLE}",
            f"CREATE ROLE {ROLE}",
            f"GRANT SELECT ON mysql.user TO {ROLE}",
            f"GRANT {ROLE} TO '{b['user']}'@'127.0.0.1'",
            f"GRANT {ROLE} TO '{b['user']}'@'localhost'",
        )
    yield
    with direct() as c:
        run(c, f"DROP ROLE IF EXISTS {ROLE}", f"DROP TABLE IF EXISTS {TABLE}")


@pytest.fixture
def one_backend(make_proxy):
    return one_backend_proxy(make_proxy, allow_local_infile=True)


def two_clients(proxy, a_does, b_checks, reused=True, a_kw=None, b_kw=None):
    """A runs a_does(conn) and quits; B (same backend connection when `reused`) runs b_checks."""
    a = proxy.connect(autocommit=True, **(a_kw or {}))
    thread_a = value(a, "SELECT CONNECTION_ID()")
    a_does(a)
    a.close()
    # A's backend connection is back in the pool (reset) or was replaced by a fresh one.
    proxy.wait_metrics({IDLE_BACKENDS: 1, BUSY_BACKENDS: 0, CLIENTS: 0}, timeout=8)
    b = proxy.connect(autocommit=True, **(b_kw or {}))
    try:
        thread_b = value(b, "SELECT CONNECTION_ID()")
        if reused:
            assert thread_b == thread_a, "B must reuse A's server connection, or this test proves nothing"
        b_checks(b, thread_a == thread_b)
    finally:
        b.close()


# ---- state that COM_RESET_CONNECTION does not restore ------------------------------------------


def test_set_role_does_not_reach_the_next_client(one_backend):
    """SET ROLE outlives COM_RESET_CONNECTION on MariaDB 10.11: a pooled connection that still has
    a role must not be handed to B, who would have the role's privileges without asking."""

    def a_does(a):
        run(a, f"SET ROLE {ROLE}")
        assert value(a, "SELECT CURRENT_ROLE()") == ROLE

    def b_checks(b, same):
        assert value(b, "SELECT CURRENT_ROLE()") is None, "B inherited A's SET ROLE"

    two_clients(one_backend, a_does, b_checks, reused=False)


def test_role_set_through_prepare_does_not_reach_the_next_client(one_backend):
    """The same, with the role set by a prepared statement (no SET ROLE text for a tracker)."""

    def a_does(a):
        run(a, f"PREPARE r FROM 'SET ROLE {ROLE}'", "EXECUTE r")
        assert value(a, "SELECT CURRENT_ROLE()") == ROLE

    def b_checks(b, same):
        assert value(b, "SELECT CURRENT_ROLE()") is None, "B inherited A's role"

    two_clients(one_backend, a_does, b_checks, reused=False)


def test_set_role_none_connection_is_reused(one_backend):
    """A role set and dropped again (SET ROLE NONE) leaves nothing: the connection is reused."""
    two_clients(
        one_backend,
        lambda a: run(a, f"SET ROLE {ROLE}", "SET ROLE NONE"),
        lambda b, same: None,
    )


# ---- state that COM_RESET_CONNECTION restores (two-client proof through the proxy) -------------


def test_sql_mode_is_restored(one_backend):
    with direct() as d:
        fresh = value(d, "SELECT @@session.sql_mode")
    two_clients(
        one_backend,
        lambda a: run(a, "SET SESSION sql_mode = 'ANSI_QUOTES,NO_BACKSLASH_ESCAPES'"),
        lambda b, same: value(b, "SELECT @@session.sql_mode") == fresh or pytest.fail("sql_mode leaked"),
    )


def test_set_names_is_restored(one_backend):
    def b_checks(b, same):
        got = value(b, "SELECT CONCAT_WS('/', @@character_set_client, @@character_set_results, @@collation_connection)")
        assert got == "utf8mb4/utf8mb4/utf8mb4_general_ci", got

    two_clients(one_backend, lambda a: run(a, "SET NAMES latin1"), b_checks)


def test_open_transaction_is_rolled_back(one_backend):
    """A turns autocommit off, inserts and disconnects without COMMIT: B must not be in A's
    transaction or see its row, and nobody else must either."""

    def a_does(a):
        run(a, "SET autocommit = 0", f"INSERT INTO {TABLE} (v) VALUES (4711)")
        assert value(a, "SELECT @@in_transaction") == 1

    def b_checks(b, same):
        assert value(b, "SELECT @@autocommit") == 1
        assert value(b, "SELECT @@in_transaction") == 0
        assert value(b, f"SELECT COUNT(*) FROM {TABLE} WHERE v = 4711") == 0
        with direct() as d:
            assert value(d, f"SELECT COUNT(*) FROM {TABLE} WHERE v = 4711") == 0

    two_clients(one_backend, a_does, b_checks)


def test_explicit_transaction_is_rolled_back(one_backend):
    def b_checks(b, same):
        assert value(b, "SELECT @@in_transaction") == 0
        assert value(b, f"SELECT COUNT(*) FROM {TABLE} WHERE v = 4712") == 0

    two_clients(one_backend, lambda a: run(a, "BEGIN", f"INSERT INTO {TABLE} (v) VALUES (4712)"), b_checks)


def test_lock_tables_is_released(one_backend):
    def b_checks(b, same):
        # Under A's LOCK TABLES, any other table would be refused (1100).
        assert value(b, "SELECT COUNT(*) FROM mysql.db") is not None
        with direct() as d:
            run(d, "SET SESSION lock_wait_timeout = 2", f"LOCK TABLES {TABLE} WRITE", "UNLOCK TABLES")

    two_clients(one_backend, lambda a: run(a, f"LOCK TABLES {TABLE} WRITE"), b_checks)


def test_get_lock_is_released(one_backend):
    def a_does(a):
        assert value(a, f"SELECT GET_LOCK('{LOCK_NAME}', 0)") == 1

    def b_checks(b, same):
        assert value(b, f"SELECT IS_USED_LOCK('{LOCK_NAME}')") is None
        with direct() as d:
            assert value(d, f"SELECT GET_LOCK('{LOCK_NAME}', 2)") == 1
            run(d, f"DO RELEASE_LOCK('{LOCK_NAME}')")

    two_clients(one_backend, a_does, b_checks)


def test_user_variable_is_cleared(one_backend):
    two_clients(
        one_backend,
        lambda a: run(a, "SET @ringgate_pooled = 42"),
        lambda b, same: value(b, "SELECT @ringgate_pooled") is None or pytest.fail("user variable leaked"),
    )


def test_isolation_level_and_access_mode_are_restored(one_backend):
    def a_does(a):
        run(
            a,
            "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            "SET SESSION TRANSACTION READ ONLY",
            # and the next-transaction-only forms, pending when A quits
            "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED",
        )

    def b_checks(b, same):
        with direct() as d:
            fresh = value(d, "SELECT @@session.tx_isolation")
        assert value(b, "SELECT @@session.tx_isolation") == fresh
        assert value(b, "SELECT @@session.tx_read_only") == 0
        run(b, "BEGIN", f"INSERT INTO {TABLE} (v) VALUES (4713)")
        got = value(
            b,
            "SELECT trx_isolation_level FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = CONNECTION_ID()",
        )
        run(b, "ROLLBACK")
        assert got == fresh.replace("-", " "), got

    two_clients(one_backend, a_does, b_checks)


def test_set_statement_leaves_nothing(one_backend):
    two_clients(
        one_backend,
        lambda a: run(a, "SET STATEMENT sql_select_limit = 1 FOR SELECT 1"),
        lambda b, same: value(b, "SELECT @@session.sql_select_limit") == 18446744073709551615
        or pytest.fail("sql_select_limit leaked"),
    )


def test_time_zone_is_restored(one_backend):
    with direct() as d:
        fresh = value(d, "SELECT @@session.time_zone")
    two_clients(
        one_backend,
        lambda a: run(a, "SET time_zone = '+05:00'"),
        lambda b, same: value(b, "SELECT @@session.time_zone") == fresh or pytest.fail("time_zone leaked"),
    )


def test_last_insert_id_is_cleared(one_backend):
    def a_does(a):
        run(a, f"INSERT INTO {TABLE} (v) VALUES (1)", "SELECT LAST_INSERT_ID(777)")

    two_clients(
        one_backend,
        a_does,
        lambda b, same: value(b, "SELECT LAST_INSERT_ID()") == 0 or pytest.fail("LAST_INSERT_ID leaked"),
    )


def test_warnings_of_a_are_not_bs(one_backend):
    def a_does(a):
        run(a, "SELECT CAST('x' AS INT)")
        assert value(a, "SELECT @@warning_count") == 1

    def b_checks(b, same):
        with b.cursor() as cur:
            # B's first statement after its own SELECT CONNECTION_ID(): the warnings of the
            # statement before, which is B's, not A's CAST.
            cur.execute("SHOW WARNINGS")
            assert cur.fetchall() == ()

    two_clients(one_backend, a_does, b_checks)


def test_local_infile_is_refused_to_a_client_that_did_not_negotiate_it(one_backend):
    """A negotiated CLIENT_LOCAL_FILES and loaded a file; B did not negotiate it, and its
    LOAD DATA LOCAL is refused as MariaDB refuses it (4166), not served."""
    fd, path = tempfile.mkstemp(prefix="ringgate-infile-")
    os.write(fd, b"1\n2\n")
    os.close(fd)
    sql = f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE {TABLE} (v)"
    try:

        def a_does(a):
            run(a, sql)

        def b_checks(b, same):
            with pytest.raises(pymysql.err.MySQLError) as e:
                run(b, sql)
            assert e.value.args[0] in (1148, 4166), e.value.args

        # The capability is in the pool key: B gets a connection opened without it.
        two_clients(
            one_backend, a_does, b_checks, reused=False, a_kw={"local_infile": True}, b_kw={"local_infile": False}
        )
        with direct(local_infile=False) as d, pytest.raises(pymysql.err.MySQLError) as e:
            run(d, sql)
        assert e.value.args[0] in (1148, 4166), e.value.args
    finally:
        os.unlink(path)


# ---- the server's own behaviour --------------------------------------------------------------


def test_set_session_authorization_does_not_exist_on_mariadb():
    """MariaDB 10.11 has no SET SESSION AUTHORIZATION: nothing to track."""
    b = backend_env()
    with direct() as d, pytest.raises(pymysql.err.ProgrammingError) as e:
        run(d, f"SET SESSION AUTHORIZATION '{b['user']}'@'127.0.0.1'")
    assert e.value.args[0] == 1064


# (setup, probe, value after COM_RESET_CONNECTION; None = NULL; "fresh" = as on a new connection)
RESET_FACTS = [
    ("role", [f"SET ROLE {ROLE}"], "SELECT CURRENT_ROLE()", ROLE),  # survives!
    ("sql_mode", ["SET SESSION sql_mode = 'ANSI'"], "SELECT @@session.sql_mode", "fresh"),
    ("SET NAMES", ["SET NAMES latin1"], "SELECT @@character_set_client", "fresh"),
    ("autocommit", ["SET autocommit = 0"], "SELECT @@autocommit", 1),
    ("transaction", ["BEGIN", f"INSERT INTO {TABLE} (v) VALUES (5)"], "SELECT @@in_transaction", 0),
    ("isolation", ["SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE"], "SELECT @@session.tx_isolation", "fresh"),
    ("read only", ["SET SESSION TRANSACTION READ ONLY"], "SELECT @@session.tx_read_only", 0),
    ("time_zone", ["SET time_zone = '+05:00'"], "SELECT @@session.time_zone", "fresh"),
    ("last_insert_id", ["SELECT LAST_INSERT_ID(777)"], "SELECT LAST_INSERT_ID()", 0),
    ("warning_count", ["SELECT CAST('x' AS INT)"], "SELECT @@warning_count", 0),
    ("user variable", ["SET @u = 1"], "SELECT @u", None),
    ("GET_LOCK", [f"DO GET_LOCK('{LOCK_NAME}', 0)"], f"SELECT IS_USED_LOCK('{LOCK_NAME}')", None),
    ("insert_id", ["SET insert_id = 5000"], "SELECT @@session.insert_id", 0),
    ("sql_select_limit", ["SET sql_select_limit = 1"], "SELECT @@session.sql_select_limit", "fresh"),
    ("foreign_key_checks", ["SET foreign_key_checks = 0"], "SELECT @@session.foreign_key_checks", 1),
    ("lc_messages", ["SET lc_messages = 'de_DE'"], "SELECT @@session.lc_messages", "fresh"),
    ("max_statement_time", ["SET max_statement_time = 5"], "SELECT @@session.max_statement_time", "fresh"),
]


@pytest.mark.parametrize("name,setup,probe,want", RESET_FACTS, ids=[f[0] for f in RESET_FACTS])
def test_server_reset_facts(name, setup, probe, want):
    with direct() as fresh_conn:
        fresh = value(fresh_conn, probe)
    with direct() as c:
        run(c, *setup)
        com_reset_connection(c)
        got = value(c, probe)
    assert got == (fresh if want == "fresh" else want), f"{name}: after COM_RESET_CONNECTION {probe} = {got!r}"
