"""What a client sees when the writer dies under it, against the real three-node replication
set: the primary is killed with kill -9 and a replica promoted (the test plays the
orchestrator) while clients sit in every state at once.

- idle inside a transaction: its next statement gets ERR 1213 naming the failover, and the
  session carries on (a ROLLBACK gets an OK instead);
- a statement in flight inside a transaction (a text query, or a prepared statement's execute):
  ERR 1213 at once, then the session carries on (its statements prepared again on the new writer);
- a statement in flight outside one (its outcome unknown): the connection ends (2013), at once;
- a pinned session, or one under --pooling session: ERR 1927 naming the failover (unasked for,
  sequence id 0), then closed;
- a write while there is no writer: ERR 1105 after --writer-wait-timeout, not later;
- with one --backend, a transaction's next statement still finds its connection gone (2013).

No acknowledged write is lost, the rolled-back rows are absent, and every ringgate ends with the
leak checks of the `make_proxy` fixture (slots, descriptors, buffers, backend connections), in
every read-buffer mode. Cluster-only (`make test-cluster`).
"""

import threading
import time

import pymysql
import pytest

from cluster import aim_proxy_at_primary, proxy_fronting
from conftest import APP_PASSWORD, APP_USER
from mysql_wire import Raw, ServerError

TABLE = "tx_failover"
WRITER_WAIT = 2.0


@pytest.fixture
def cluster_env(cluster, monkeypatch):
    """The Proxy class's backend (node 1, the primary) and account are the set's."""
    primary = aim_proxy_at_primary(cluster, monkeypatch)
    with cluster.app(primary.n) as c, c.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id INT AUTO_INCREMENT PRIMARY KEY, "
                    "who VARCHAR(16), n INT)")
        cur.execute(f"TRUNCATE {TABLE}")
    return primary


def fronting(make_proxy, cluster, monkeypatch, pooling=None):
    """A ringgate in front of the three nodes."""
    return proxy_fronting(make_proxy, cluster, monkeypatch,
                          "--writer-wait-timeout", f"{WRITER_WAIT}s", pooling=pooling)


def connect(proxy, cluster, **kw):
    return pymysql.connect(host="127.0.0.1", port=proxy.port, user=APP_USER, password=APP_PASSWORD,
                           database=cluster.db, autocommit=True, connect_timeout=10,
                           read_timeout=30, **kw)


def run(conn, *sql):
    with conn.cursor() as cur:
        for s in sql:
            cur.execute(s)
        return cur.fetchall()


def error_of(conn, sql):
    """The MySQL error `sql` ends with: (code, message)."""
    with pytest.raises(pymysql.err.MySQLError) as e:
        run(conn, sql)
    return e.value.args[0], str(e.value.args[1]) if len(e.value.args) > 1 else ""


def in_transaction(proxy, cluster, who):
    c = connect(proxy, cluster)
    run(c, "BEGIN", f"INSERT INTO {TABLE} (who, n) VALUES ('{who}', 1)")
    return c


class InFlight(threading.Thread):
    """A statement inside a transaction, running when the primary dies: what it ended with."""

    def __init__(self, conn):
        super().__init__(daemon=True)
        self.conn = conn
        self.error = None
        self.ended_at = None

    def run(self):
        try:
            run(self.conn, "SELECT SLEEP(20)")
        except pymysql.err.MySQLError as e:
            self.error = e.args
        self.ended_at = time.monotonic()


class PreparedInFlight(threading.Thread):
    """A prepared statement's execute inside a transaction (binary protocol), running when the
    primary dies: the ERR code it ended with."""

    def __init__(self, raw, stmt):
        super().__init__(daemon=True)
        self.raw, self.stmt = raw, stmt
        self.code = None

    def run(self):
        try:
            self.raw.execute(self.stmt)
        except ServerError as e:
            self.code = e.code
        except AssertionError:  # the connection closed
            self.code = "closed"


def assert_failover_err(err, writer):
    """ERR 1213 naming the failover and the lost writer's address."""
    code, msg = err
    assert code == 1213, err
    assert "lost mid-transaction (failover)" in msg and "restart it" in msg, err
    assert f"the writer {writer.host}:{writer.port} " in msg, err


def test_clients_in_a_transaction_get_an_error_naming_the_failover_and_carry_on(
        cluster, cluster_env, make_proxy, monkeypatch):
    proxy = fronting(make_proxy, cluster, monkeypatch)
    single = make_proxy()  # one --backend: the primary only
    session_pooled = fronting(make_proxy, cluster, monkeypatch, pooling="session")
    idle_tx = in_transaction(proxy, cluster, "idle")
    rollback = in_transaction(proxy, cluster, "rollback")
    busy = in_transaction(proxy, cluster, "busy")
    one_server = in_transaction(single, cluster, "single")
    pinned = Raw(proxy.port)
    pinned.query("SET @pinned = 1")
    held = Raw(session_pooled.port)
    held.query("SELECT 1")
    prepared = Raw(proxy.port)
    sleeper, _, _ = prepared.prepare("SELECT SLEEP(20)")
    one, _, _ = prepared.prepare("SELECT 1")
    prepared.query("BEGIN")
    executing = PreparedInFlight(prepared, sleeper)
    executing.start()
    between = connect(proxy, cluster)
    run(between, "SELECT 1")
    waiting = connect(proxy, cluster)
    in_flight = InFlight(busy)
    in_flight.start()
    # Outside a transaction the outcome of a statement in flight is unknown: closed, as direct.
    autocommit = connect(proxy, cluster)
    unknown = InFlight(autocommit)
    unknown.start()
    time.sleep(0.5)
    try:
        killed_at = time.monotonic()
        old = cluster.kill_primary()

        # The statement in flight: ERR 1213 at once, not a lost connection.
        in_flight.join(timeout=10)
        assert in_flight.ended_at is not None
        assert_failover_err(in_flight.error, cluster_env)
        assert in_flight.ended_at - killed_at < 5
        executing.join(timeout=10)
        assert executing.code == 1213, executing.code
        unknown.join(timeout=10)
        assert unknown.ended_at is not None and unknown.ended_at - killed_at < 5
        assert unknown.error[0] == 2013, unknown.error

        # No writer yet: a write waits --writer-wait-timeout, then ERR 1105 names it.
        started = time.monotonic()
        code, msg = error_of(waiting, f"INSERT INTO {TABLE} (who, n) VALUES ('nowriter', 1)")
        waited = time.monotonic() - started
        assert code == 1105 and "--writer-wait-timeout" in msg, (code, msg)
        assert WRITER_WAIT - 0.5 <= waited <= WRITER_WAIT + 2.5, waited

        new = cluster.promote()
        assert new != old

        # Idle inside the transaction: the next statement gets the ERR, then a new
        # transaction runs on the new writer.
        assert_failover_err(error_of(idle_tx, f"INSERT INTO {TABLE} (who, n) VALUES ('idle', 2)"),
                            cluster_env)
        run(idle_tx, "BEGIN", f"INSERT INTO {TABLE} (who, n) VALUES ('idle', 3)", "COMMIT")
        # A ROLLBACK gets what it asked for.
        run(rollback, "ROLLBACK")
        run(rollback, f"INSERT INTO {TABLE} (who, n) VALUES ('rollback', 2)")
        # The session whose statement was in flight carries on too.
        run(busy, "BEGIN", f"INSERT INTO {TABLE} (who, n) VALUES ('busy', 2)", "COMMIT")
        # The session that waited for a writer has one now.
        run(waiting, f"INSERT INTO {TABLE} (who, n) VALUES ('nowriter', 2)")
        # The binary-protocol session too: its statement is prepared again on the new writer.
        kind, rows, _ = prepared.execute(one)
        assert (kind, len(rows)) == ("rows", 1), (kind, rows)
        # Between transactions: nothing to see.
        assert run(between, "SELECT 1") == ((1,),)

        # A pinned session: ERR 1927 unasked for (sequence id 0), then the connection ends.
        pinned.write(0, b"\x03SELECT 1")
        seq, payload = pinned.read()
        assert (seq, payload[0]) == (0, 0xFF), (seq, payload)
        assert int.from_bytes(payload[1:3], "little") == 1927, payload
        text = payload[9:].decode()
        assert "(failover)" in text and "user_variable" in text, text
        assert pinned.sock.recv(1) == b""
        # Session pooling: the session held its connection, so it ends the same way.
        held.write(0, b"\x03SELECT 1")
        seq, payload = held.read()
        assert (seq, int.from_bytes(payload[1:3], "little")) == (0, 1927), payload
        assert "session pooling" in payload[9:].decode(), payload

        # One server: no failover to speak of; the connection is gone, as it would be direct.
        code, _ = error_of(one_server, f"INSERT INTO {TABLE} (who, n) VALUES ('single', 2)")
        assert code in (2013, 2006), code

        with cluster.app(new) as c:
            rows = set(run(c, f"SELECT who, n FROM {TABLE}"))
        want = {("idle", 3), ("rollback", 2), ("busy", 2), ("nowriter", 2)}
        assert rows == want, rows
        log = proxy.stderr()
        assert "was lost mid-transaction" in log, log[-3000:]
        assert "while the session held state on its connection" in log, log[-3000:]
        assert "its outcome is unknown" in log, log[-3000:]
        m = proxy.metrics()
        told = {o: m(f'ringgate_writer_lost_total{{outcome="{o}"}}')
                for o in ("rolled_back", "pinned", "unknown", "none")}
        assert told == {"rolled_back": 4, "pinned": 1, "unknown": 1, "none": 0}, told
        assert m('ringgate_client_rejected_total{reason="no_writer"}') == 1, m.dump()
        assert session_pooled.metrics()('ringgate_writer_lost_total{outcome="pinned"}') == 1
    finally:
        for c in (idle_tx, rollback, busy, one_server, between, waiting, autocommit):
            c.close()
        pinned.sock.close()
        held.sock.close()
        prepared.sock.close()
        cluster.heal()
