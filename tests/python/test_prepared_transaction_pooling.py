"""Binary prepared statements under `--pooling transaction`: a statement
outlives the backend connection it was prepared on. The proxy gives the client its own statement
ids, prepares a statement again on whichever connection the session gets, binds the parameter
types the client bound earlier, and keeps each connection's statements in a bounded LRU.

Everything runs on few backend connections with other clients busy meanwhile, so that a session
moves between connections all the time; answers are checked against what the statement must
return. mysql-connector-python's `cursor(prepared=True)` uses COM_STMT_PREPARE/EXECUTE/CLOSE
(and SEND_LONG_DATA for file-like values); the rest is sent as raw packets."""

import io
import json
import os
import struct
import time

import mysql.connector
import pymysql
import pytest

from conftest import APP_PASSWORD, APP_USER, TEST_DB
from helpers import background, client_statements_settle, direct, run_node, run_threads, tx_proxy
from mysql_wire import (
    SERVER_STATUS_CURSOR_EXISTS,
    SERVER_STATUS_LAST_ROW_SENT,
    T_BLOB,
    T_LONG,
    T_LONGLONG,
    T_VAR_STRING,
    Raw,
    ServerError,
    binary_strings,
    lenenc,
)

TABLE = f"{TEST_DB}.txps"
# tx_proxy passes no --tx-prepared-statements: statements move by default in transaction pooling
# (--tx-prepared-statements pin is the opt-out, tested below).


def server_status(name):
    with direct() as c, c.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE %s", (name,))
        return int(cur.fetchone()[1])


pytestmark = pytest.mark.read_buffers("fixed","ring")


@pytest.fixture(scope="module", autouse=True)
def schema():
    with direct() as c, c.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {TEST_DB}")
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cur.execute(
            f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, owner INT, body LONGBLOB) ENGINE=InnoDB"
        )
        cur.executemany(
            f"INSERT INTO {TABLE} (id, owner, body) VALUES (%s, %s, %s)",
            [(i, i % 7, f"row-{i}".encode()) for i in range(1, 201)],
        )
    yield


def connector(proxy, **kw):
    return proxy.connector(database=TEST_DB, autocommit=True, connection_timeout=20, **kw)


def busy_text_clients(proxy, n):
    """n PyMySQL clients running text statements while the `with` lasts (they move the
    connections around); a wrong answer or an error in one fails the test."""

    def loop(i, stop):
        c = pymysql.connect(host="127.0.0.1", port=proxy.port, user=APP_USER, password=APP_PASSWORD,
                            autocommit=True, connect_timeout=20, read_timeout=60)
        try:
            with c.cursor() as cur:
                while not stop.is_set():
                    cur.execute("SELECT %s + 1", (i,))
                    assert cur.fetchone()[0] == i + 1
        finally:
            c.close()

    return background(n, loop)


def test_prepared_statements_interleaved_with_20_clients_on_4_backends(make_proxy):
    proxy = tx_proxy(make_proxy, backends=4)
    with busy_text_clients(proxy, 20):
        def client(i):
            c = connector(proxy)
            try:
                cur = c.cursor(prepared=True)
                for k in range(200):
                    row_id = (i * 37 + k) % 200 + 1
                    cur.execute(f"SELECT id, owner, body FROM {TABLE} WHERE id = %s", (row_id,))
                    got = cur.fetchall()
                    assert got == [(row_id, row_id % 7, f"row-{row_id}".encode())], got
                    if k % 50 == 0:
                        cur.execute("SELECT CONCAT(%s, '-', %s)", (f"c{i}", k))
                        assert cur.fetchall() == [(f"c{i}-{k}",)]
                cur.close()
            finally:
                c.close()

        run_threads(4, client)
    m = proxy.metrics()
    assert m.sum_of("ringgate_sessions_pinned_total") == 0, {k: v for k, v in m.items() if "pinned" in k and v}
    # The sessions moved between connections: statements were prepared again on others.
    assert m["ringgate_statement_reprepares_total"] >= 1
    assert m["ringgate_tx_releases_total"] > 100



def two_sessions_take_turns_on_one_connection(proxy):
    """Two sessions each prepare their own statement and execute it in turns on a proxy with
    one backend connection, so each execute comes after the other session leased it."""
    a, b = connector(proxy), connector(proxy)
    try:
        ca, cb = a.cursor(prepared=True), b.cursor(prepared=True)
        for k in range(5):
            ca.execute(f"SELECT id, owner FROM {TABLE} WHERE id = %s", (k + 1,))
            assert ca.fetchall() == [(k + 1, (k + 1) % 7)]
            cb.execute("SELECT CONCAT('b-', %s)", (k,))
            assert cb.fetchall() == [(f"b-{k}",)]
        ca.close()
        cb.close()
    finally:
        a.close()
        b.close()


def test_by_default_two_sessions_with_statements_share_one_connection(make_proxy):
    """Moving is the default in transaction pooling (no flag): a prepared statement does not pin,
    so two sessions with statements take turns on a single backend connection."""
    proxy = make_proxy(
        pooling="transaction",
        workers=1,
        extra_args=["--backend-max-connections", "1", "--backend-pool-size", "1"],
    )
    two_sessions_take_turns_on_one_connection(proxy)
    m = proxy.metrics()
    assert m.sum_of("ringgate_sessions_pinned_total") == 0, {k: v for k, v in m.items() if "pinned" in k and v}
    assert m["ringgate_tx_releases_total"] >= 20
    assert client_statements_settle(proxy) == 0


def test_pin_mode_the_second_session_with_a_statement_waits_and_gets_1040(make_proxy):
    """The opt-out's cost, as docs/operations.md states it: with --tx-prepared-statements pin the
    first session's prepare holds the only connection, and the second waits
    --backend-wait-timeout and gets ERR 1040 at its statement."""
    proxy = make_proxy(
        pooling="transaction",
        workers=1,
        extra_args=[
            "--backend-max-connections", "1", "--backend-pool-size", "1",
            "--backend-wait-timeout", "1s", "--tx-prepared-statements", "pin",
        ],
    )
    with pytest.raises(mysql.connector.Error) as e:
        two_sessions_take_turns_on_one_connection(proxy)
    assert e.value.errno == 1040, e.value
    assert proxy.metrics()['ringgate_sessions_pinned_total{reason="prepared_statement"}'] == 1


def test_statement_close_while_the_session_keeps_its_connection(make_proxy):
    """A session that keeps its connection (in a transaction here; pinned the same) and closes a
    statement: COM_STMT_CLOSE needs no exchange with the server, so the relay goes on at once.
    In ring mode it used to read the end of the receive it had cancelled at the stop once more,
    as the server closing the connection (2013 at the next statement: mysql-connector's
    prepared cursor closes its previous statement before each new one)."""
    proxy = tx_proxy(make_proxy, backends=2)
    c = connector(proxy)
    try:
        cur = c.cursor(prepared=True)
        c.start_transaction()
        for k in range(10):
            cur.execute(f"SELECT id FROM {TABLE} WHERE id = %s", (k + 1,))
            assert cur.fetchall() == [(k + 1,)]
            cur.execute("SELECT %s + 1", (k,))
            assert cur.fetchall() == [(k + 1,)]
        c.commit()
        cur.close()
    finally:
        c.close()


def test_session_state_made_by_a_prepared_statement_pins(make_proxy):
    """A prepared CREATE TEMPORARY TABLE (or `SET @x = ?`) makes state on the connection as its
    COM_QUERY would: the execute names only an id, so its SQL is judged when it completes, and
    the session is pinned before the next statement could land on another connection
    (mysql-connector-python's own suite, BugOra28491115.test_exception_when_time_field_is_0:
    its INSERT into the temporary table got 1146). Other clients move the connections around
    meanwhile."""
    proxy = tx_proxy(make_proxy, backends=2)
    with busy_text_clients(proxy, 6):
        c = connector(proxy)
        try:
            cur = c.cursor(prepared=True)
            cur.execute("CREATE TEMPORARY TABLE txps_tmp (b TIME)")
            for _ in range(20):
                cur.execute("INSERT INTO txps_tmp SET b = '00:00'")
            cur.execute("SELECT COUNT(*) FROM txps_tmp")
            assert cur.fetchall() == [(20,)]
            cur.close()
        finally:
            c.close()
        c = connector(proxy)
        try:
            cur = c.cursor(prepared=True)
            cur.execute("SET @txps_x = ?", (41,))
            for _ in range(20):
                cur.execute("SELECT @txps_x + 1")
                assert cur.fetchall() == [(42,)]
            cur.close()
        finally:
            c.close()
    m = proxy.metrics()
    pins = {k: v for k, v in m.items() if "pinned_total" in k and v}
    assert pins == {
        'ringgate_sessions_pinned_total{reason="temporary_table"}': 1,
        'ringgate_sessions_pinned_total{reason="user_variable"}': 1,
    }, pins


def test_a_prepare_of_1000_columns_larger_than_the_read_buffer(make_proxy):
    """The PREPARE_OK of a SELECT of 1,000 columns (about 40 KiB of column definitions, more
    than a 16 KiB read buffer) is read on in pieces by the pool's exchange; it used to end the
    session ("a PREPARE_OK larger than the read buffer": mysql-connector's own suite,
    BugOra18742429.test_columns, got 2013). The statement then moves to another connection."""
    table = f"{TEST_DB}.txps_wide"
    with direct() as d, d.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cols = ", ".join(f"col{i} INT" for i in range(1000))
        cur.execute(f"CREATE TABLE {table} ({cols})")
        cur.execute(f"INSERT INTO {table} VALUES ({', '.join(str(i) for i in range(1000))})")
    proxy = tx_proxy(make_proxy, backends=2)
    with busy_text_clients(proxy, 4):
        c = connector(proxy)
        try:
            cur = c.cursor(prepared=True)
            for _ in range(5):
                cur.execute(f"SELECT * FROM {table} WHERE col0 = ?", (0,))
                assert cur.fetchall() == [tuple(range(1000))]
            cur.close()
        finally:
            c.close()
        with direct() as d, d.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")


def test_pin_mode_a_prepare_pins_and_statements_stay_on_one_connection(make_proxy):
    """--tx-prepared-statements pin: the first statement command pins the session, ids are the
    server's own, and nothing goes through the statement registry."""
    proxy = make_proxy(
        pooling="transaction",
        workers=1,
        extra_args=[
            "--backend-max-connections", "2", "--backend-pool-size", "2",
            "--tx-prepared-statements", "pin",
        ],
    )
    with busy_text_clients(proxy, 4):
        c = connector(proxy)
        try:
            for k in range(3):
                cur = c.cursor(prepared=True)
                cur.execute(f"SELECT id, owner FROM {TABLE} WHERE id = %s", (k + 1,))
                assert cur.fetchall() == [(k + 1, (k + 1) % 7)]
                cur.close()
        finally:
            c.close()
    m = proxy.metrics()
    assert m['ringgate_sessions_pinned_total{reason="prepared_statement"}'] >= 1, {
        k: v for k, v in m.items() if "pinned" in k
    }
    assert m["ringgate_statement_reprepares_total"] == 0
    assert client_statements_settle(proxy) == 0

def test_executes_without_rebinding_get_the_types_bound_earlier(make_proxy):
    """The client binds types once (new_params_bound=1) and then sends 0. On another connection
    the statement is prepared again and knows no types: the proxy binds the recorded ones. With
    a string and an integer parameter, wrong types would garble the answer."""
    proxy = tx_proxy(make_proxy, backends=2)
    with busy_text_clients(proxy, 6) as others:
        c = Raw(proxy.port)
        stmt, _, nparams = c.prepare("SELECT CONCAT(?, '/', ?)")
        assert nparams == 2
        kind, rows, _ = c.execute(stmt, [(T_VAR_STRING, b"first"), (T_LONGLONG, 1)])
        assert binary_strings(rows[0], 1) == [b"first/1"]
        # The busy clients stop here: they have another pool key, so on two connections they
        # evict the session's idle connection (which is how they move it) and would evict the
        # one held below, or keep the session waiting for one of its own (ERR 1040).
        others.stop()
        first = c.query("SELECT CONNECTION_ID()")[0][0]
        threads = {first}
        # Make the session move for sure (the busy clients alone may leave it on its
        # connection on a slow run): another client holds the connection the statement was
        # prepared on in an open transaction, so the next executes run on the other one. A
        # second raw client has the session's pool key.
        hold = Raw(proxy.port)
        held, cur_id = False, None
        for _ in range(200):
            hold.query("BEGIN")
            cur_id = hold.query("SELECT CONNECTION_ID()")[0][0]
            if cur_id == first:
                held = True
                break
            hold.query("COMMIT")
        assert held, f"could not take the statement's connection away from the session ({first!r}, last {cur_id!r})"
        try:
            for k in range(2, 120):
                if k == 60:
                    hold.query("COMMIT")
                kind, rows, _ = c.execute(stmt, [(T_VAR_STRING, f"v{k}".encode()), (T_LONGLONG, k)],
                                          bind=False)
                assert binary_strings(rows[0], 1) == [f"v{k}/{k}".encode()], k
                if k % 10 == 0:
                    threads.add(c.query("SELECT CONNECTION_ID()")[0][0])
        finally:
            hold.close()
        c.close()
    assert len(threads) > 1, "the session never moved: the test proves nothing"
    m = proxy.metrics()
    assert m["ringgate_statement_reprepares_total"] >= 1
    assert m.sum_of("ringgate_sessions_pinned_total") == 0


def test_send_long_data_then_execute_on_a_busy_pool(make_proxy):
    proxy = tx_proxy(make_proxy, backends=2)
    with busy_text_clients(proxy, 6):
        c = Raw(proxy.port)
        stmt, _, _ = c.prepare("SELECT CAST(LENGTH(?) AS CHAR), MD5(?)")
        chunks = [bytes([65 + i]) * 50_000 for i in range(4)]
        for k in range(5):
            for ch in chunks:
                c.long_data(stmt, 0, ch)
                c.long_data(stmt, 1, ch)
            time.sleep(0.02)  # the other clients run meanwhile
            _, rows, _ = c.execute(stmt, [(T_BLOB, b""), (T_BLOB, b"")], bind=True)
            import hashlib
            whole = b"".join(chunks)
            assert binary_strings(rows[0], 2) == [str(len(whole)).encode(),
                                                  hashlib.md5(whole).hexdigest().encode()], k
        c.close()
        # mysql-connector-python sends file-like values as long data.
        conn = connector(proxy)
        cur = conn.cursor(prepared=True)
        cur.execute("SELECT LENGTH(%s)", (io.BytesIO(b"x" * 300_000),))
        assert cur.fetchall() == [(300000,)]
        conn.close()
    assert proxy.metrics().sum_of("ringgate_sessions_pinned_total") == 0


def test_a_cursor_is_fetched_on_the_connection_that_opened_it(make_proxy):
    proxy = tx_proxy(make_proxy, backends=2)
    with busy_text_clients(proxy, 6):
        c = Raw(proxy.port)
        stmt, ncols, _ = c.prepare(f"SELECT CAST(id AS CHAR) FROM {TABLE} ORDER BY id")
        kind, _, status = c.execute(stmt, cursor=1)  # CURSOR_TYPE_READ_ONLY
        assert kind == "cursor" and status & SERVER_STATUS_CURSOR_EXISTS
        got = []
        while True:
            rows, status = c.fetch(stmt, 7)
            got += [int(binary_strings(r, ncols)[0]) for r in rows]
            time.sleep(0.005)
            if status & SERVER_STATUS_LAST_ROW_SENT:
                break
        assert got == list(range(1, 201))
        # Open again, fetch a little, reset: the cursor is gone and the session moves on.
        c.execute(stmt, cursor=1)
        rows, _ = c.fetch(stmt, 3)
        assert len(rows) == 3
        c.reset_stmt(stmt)
        _, rows, _ = c.execute(stmt)
        assert len(rows) == 200
        c.close()
    assert proxy.metrics().sum_of("ringgate_sessions_pinned_total") == 0


def test_last_prepared_id_with_pipelined_prepare_and_bulk_execute(make_proxy):
    """MariaDB Connector/C sends PREPARE and EXECUTE(0xFFFFFFFF) back to back; BULK_EXECUTE
    too. The second bulk sends no types: the proxy binds those of the first."""
    proxy = tx_proxy(make_proxy, backends=2)
    with direct() as d, d.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}_bulk")
        cur.execute(f"CREATE TABLE {TABLE}_bulk (a INT, b VARCHAR(20))")
    c = Raw(proxy.port, bulk=True)
    c.write(0, b"\x16SELECT ? * 2")
    c.sock.sendall(b"")  # nothing: the execute follows in the same write below
    c.write(0, Raw.execute_packet(0xFFFFFFFF, [(T_LONGLONG, 21)]))
    stmt, _, _ = c.read_prepare()
    _, rows, _ = c.read_result()
    assert struct.unpack_from("<q", rows[0], 2)[0] == 42
    ins, _, _ = c.prepare(f"INSERT INTO {TABLE}_bulk VALUES (?, ?)")

    def bulk(stmt_id, rows_, types):
        p = b"\xfa" + struct.pack("<IH", stmt_id, 128 if types else 0)
        if types:
            p += struct.pack("<BBBB", T_LONG, 0, T_VAR_STRING, 0)
        for a, b in rows_:
            p += b"\x00" + struct.pack("<i", a) + b"\x00" + lenenc(b.encode())
        c.write(0, p)
        return c.read_ok()

    ok = bulk(ins, [(1, "one"), (2, "two"), (3, "three")], True)
    assert ok[1] == 3, ok
    with busy_text_clients(proxy, 6):
        for k in range(20):
            ok = bulk(0xFFFFFFFF, [(10 + k, f"r{k}")], False)
            assert ok[1] == 1
            time.sleep(0.005)
    c.close()
    with direct() as d, d.cursor() as cur:
        cur.execute(f"SELECT a, b FROM {TABLE}_bulk ORDER BY a")
        assert cur.fetchall() == ((1, "one"), (2, "two"), (3, "three"),
                                  *((10 + k, f"r{k}") for k in range(20)))


def test_closing_a_statement_spares_another_sessions_same_statement(make_proxy):
    proxy = tx_proxy(make_proxy, backends=1)
    before = server_status("Prepared_stmt_count")
    a, b = Raw(proxy.port), Raw(proxy.port)
    sql = f"SELECT CAST(owner AS CHAR) FROM {TABLE} WHERE id = ?"
    sa, _, _ = a.prepare(sql)
    sb, _, _ = b.prepare(sql)
    assert server_status("Prepared_stmt_count") - before == 1, "one server statement, shared"
    a.close_stmt(sa)
    with pytest.raises(ServerError) as e:
        a.execute(sa, [(T_LONG, 5)])
    assert e.value.code == 1243, "a closed id is unknown to its session"
    # An error holds the connection until the session's next statement (SHOW WARNINGS).
    a.query("SELECT 1")
    for k in range(1, 50):
        _, rows, _ = b.execute(sb, [(T_LONG, k)])
        assert binary_strings(rows[0], 1) == [str(k % 7).encode()]
    assert server_status("Prepared_stmt_count") - before == 1
    a.close()
    b.close()
    assert client_statements_settle(proxy) == 0, "registries leaked"


# make test-transaction runs 10,000 (RINGGATE_TEST_PREPARES).
PREPARES = int(os.environ.get("RINGGATE_TEST_PREPARES", "2000"))


@pytest.mark.read_buffers("fixed")  # the slowest test: once is enough
def test_prepared_stmt_count_bounded_after_many_distinct_prepares(make_proxy):
    # 2000 prepares (the make test default) turn the 64 statements the bound allows over 30
    # times, and without the bound the 1000 that half the clients never close would stay on the
    # server; 10,000 took 50 s to 140 s of make test, so it runs in make test-transaction.
    backends, bound = 4, 16
    per_client = PREPARES // 4
    proxy = tx_proxy(make_proxy, backends=backends, extra=["--backend-max-prepared", str(bound)])
    before = server_status("Prepared_stmt_count")

    def client(i):
        c = Raw(proxy.port)
        try:
            for k in range(per_client):
                n = i * per_client + k
                stmt, _, _ = c.prepare(f"SELECT {n} + ?")
                if k % 25 == 0:
                    _, rows, _ = c.execute(stmt, [(T_LONGLONG, 1)])
                    assert struct.unpack_from("<q", rows[0], 2)[0] == n + 1
                if i % 2 == 0:
                    c.close_stmt(stmt)  # half the clients close theirs, half do not
        finally:
            c.close()

    run_threads(4, client, timeout=max(300, PREPARES // 20))
    m = proxy.metrics()
    assert server_status("Prepared_stmt_count") - before <= bound * backends
    assert m["ringgate_backend_prepared_statements"] <= bound * backends
    assert m["ringgate_statement_evictions_total"] >= 4 * per_client - bound * backends
    assert client_statements_settle(proxy) == 0, "registries leaked"


def test_node_mysql2_execute_on_4_backends(make_proxy):
    proxy = tx_proxy(make_proxy, backends=4)
    with busy_text_clients(proxy, 10):
        r = run_node(
            "execute.js", proxy, timeout=120,
            PORT=str(proxy.port), USER=APP_USER, PASS=APP_PASSWORD, DB=TEST_DB, TABLE=TABLE, CLIENTS="8", ROUNDS="50",
        )
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"executes": 800}
    m = proxy.metrics()
    assert m.sum_of("ringgate_sessions_pinned_total") == 0
    assert client_statements_settle(proxy) == 0, "registries leaked"
