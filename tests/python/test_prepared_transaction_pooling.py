"""Binary prepared statements under `--pooling transaction` (issue 12, item 5): a statement
outlives the backend connection it was prepared on. The proxy gives the client its own statement
ids, prepares a statement again on whichever connection the session gets, binds the parameter
types the client bound earlier, and keeps each connection's statements in a bounded LRU.

Everything runs on few backend connections with other clients busy meanwhile, so that a session
moves between connections all the time; answers are checked against what the statement must
return. mysql-connector-python's `cursor(prepared=True)` uses COM_STMT_PREPARE/EXECUTE/CLOSE
(and SEND_LONG_DATA for file-like values); the rest is sent as raw packets."""

import io
import socket
import struct
import threading
import time

import mysql.connector
import pymysql
import pytest

from conftest import APP_PASSWORD, APP_USER, TEST_DB, backend_env

TABLE = f"{TEST_DB}.txps"


def direct(**kw):
    b = backend_env()
    return pymysql.connect(
        host=b["host"], port=b["port"], user=b["user"], password=b["password"], autocommit=True,
        connect_timeout=10, read_timeout=60, **kw
    )


def server_status(name):
    with direct() as c, c.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE %s", (name,))
        return int(cur.fetchone()[1])


@pytest.fixture(params=["fixed", "ring"])
def mode(request):
    return request.param


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


def tx_proxy(make_proxy, backends=4, extra=()):
    return make_proxy(
        pooling="transaction",
        workers=1,
        extra_args=[
            "--backend-max-connections", str(backends),
            "--backend-pool-size", str(backends),
            *extra,
        ],
    )


def connector(proxy, **kw):
    return mysql.connector.connect(
        host="127.0.0.1", port=proxy.port, user=APP_USER, password=APP_PASSWORD,
        database=TEST_DB, autocommit=True, use_pure=True, connection_timeout=20, **kw
    )


def run_threads(n, fn):
    errors = []

    def wrap(i):
        try:
            fn(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]


def busy_text_clients(proxy, n, stop):
    """n PyMySQL clients running text statements until `stop` is set (they move the
    connections around)."""

    def loop(i):
        c = pymysql.connect(host="127.0.0.1", port=proxy.port, user=APP_USER, password=APP_PASSWORD,
                            autocommit=True, connect_timeout=20, read_timeout=60)
        try:
            with c.cursor() as cur:
                while not stop.is_set():
                    cur.execute("SELECT %s + 1", (i,))
                    assert cur.fetchone()[0] == i + 1
        finally:
            c.close()

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads


def pinned_total(m):
    return sum(v for k, v in m.items() if k.startswith("ringgate_sessions_pinned_total"))


def test_prepared_statements_interleaved_with_20_clients_on_4_backends(make_proxy):
    proxy = tx_proxy(make_proxy, backends=4)
    stop = threading.Event()
    others = busy_text_clients(proxy, 20, stop)
    try:
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
    finally:
        stop.set()
        for t in others:
            t.join(30)
    m = proxy.metrics()
    assert pinned_total(m) == 0, {k: v for k, v in m.items() if "pinned" in k and v}
    # The sessions moved between connections: statements were prepared again on others.
    assert m["ringgate_statement_reprepares_total"] >= 1
    assert m["ringgate_tx_releases_total"] > 100
