"""Transaction replay (--transaction-replay) against the real three-node replication set: the
primary is killed with kill -9 and a replica promoted (the test plays the orchestrator) while
clients sit inside transactions.

- idle inside a transaction that wrote a row and read it back: the next INSERT succeeds on the
  new writer and COMMIT keeps every row, the client never told (also when that INSERT arrives
  while the session still waits for a writer to replay on);
- an INSERT in flight inside a transaction: its answer comes from the new writer;
- a transaction that read SELECT NOW(6), or a row another client changed meanwhile: the replay's
  answer differs, so ERR 1213 as without replay;
- over --transaction-replay-max-size: not replayed, ERR 1213;
- replay off (the default): ERR 1213.

The metrics count each outcome, and every ringgate ends with the leak checks of the `make_proxy`
fixture (slots, descriptors, buffers, backend connections), in every read-buffer mode.
Cluster-only (`make test-cluster`).
"""

import threading
import time

import pymysql
import pytest

from cluster import aim_proxy_at_primary, proxy_fronting
from conftest import APP_PASSWORD, APP_USER

TABLE = "tx_replay"
WRITER_WAIT = 5.0


@pytest.fixture
def replay_env(cluster, monkeypatch):
    """The Proxy class's backend (the primary) and account are the set's; the table holds one
    committed row, 'shared', that a transaction reads and another client changes."""
    primary = aim_proxy_at_primary(cluster, monkeypatch)
    with cluster.app(primary.n) as c, c.cursor() as cur:
        # No AUTO_INCREMENT: an INSERT's id is part of its answer, and the new writer would
        # hand out other ids than the dead one did for the rows it lost.
        cur.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (who VARCHAR(16), n INT, "
                    "PRIMARY KEY (who, n))")
        cur.execute(f"TRUNCATE {TABLE}")
        cur.execute(f"INSERT INTO {TABLE} (who, n) VALUES ('shared', 1)")
    return primary


def fronting(make_proxy, cluster, monkeypatch, *extra):
    """A ringgate in front of the three nodes."""
    return proxy_fronting(make_proxy, cluster, monkeypatch,
                          "--writer-wait-timeout", f"{WRITER_WAIT}s", *extra)


def connect(proxy, cluster):
    return pymysql.connect(host="127.0.0.1", port=proxy.port, user=APP_USER, password=APP_PASSWORD,
                           database=cluster.db, autocommit=True, connect_timeout=10,
                           read_timeout=30)


def run(conn, *sql):
    with conn.cursor() as cur:
        for s in sql:
            cur.execute(s)
        return cur.fetchall()


def insert(who, n):
    return f"INSERT INTO {TABLE} (who, n) VALUES ('{who}', {n})"


def assert_rolled_back(conn, sql):
    with pytest.raises(pymysql.err.MySQLError) as e:
        run(conn, sql)
    code, msg = e.value.args[0], str(e.value.args[1])
    assert code == 1213 and "lost mid-transaction (failover)" in msg, e.value.args


class InFlight(threading.Thread):
    """One statement on `conn` in a thread: what it ended with."""

    def __init__(self, conn, sql):
        super().__init__(daemon=True)
        self.conn, self.sql, self.error, self.affected = conn, sql, None, None

    def run(self):
        try:
            with self.conn.cursor() as cur:
                self.affected = cur.execute(self.sql)
        except pymysql.err.MySQLError as e:
            self.error = e.args


def in_transaction(proxy, cluster, *sql):
    c = connect(proxy, cluster)
    run(c, "BEGIN", *sql)
    return c


def wait_for_row(cluster, n, who):
    """Until replica n has applied the row (the test changes it there before the promotion)."""
    with cluster.root(n) as c:
        for _ in range(100):
            if run(c, f"SELECT n FROM {cluster.db}.{TABLE} WHERE who = '{who}'"):
                return
            time.sleep(0.05)
    raise AssertionError(f"replica {n} never applied the '{who}' row")


def test_a_transaction_the_writer_took_down_is_replayed_unless_its_answers_differ(
        cluster, replay_env, make_proxy, monkeypatch):
    replaying = fronting(make_proxy, cluster, monkeypatch, "--transaction-replay")
    tight = fronting(make_proxy, cluster, monkeypatch, "--transaction-replay",
                     "--transaction-replay-max-size", "40")
    plain = fronting(make_proxy, cluster, monkeypatch)
    idle = in_transaction(replaying, cluster, insert("idle", 1))
    eager = in_transaction(replaying, cluster, insert("eager", 1))
    assert run(idle, f"SELECT who, n FROM {TABLE} WHERE who = 'idle'") == (("idle", 1),)
    busy = in_transaction(replaying, cluster, insert("busy", 1))
    clock = in_transaction(replaying, cluster, "SELECT NOW(6)")
    reader = in_transaction(replaying, cluster, f"SELECT n FROM {TABLE} WHERE who = 'shared'")
    too_large = in_transaction(tight, cluster, insert("too_large", 1))
    off = in_transaction(plain, cluster, insert("off", 1))
    new = cluster.replicas()[0]
    wait_for_row(cluster, new, "shared")
    # SLEEP keeps the INSERT in flight when the primary dies.
    in_flight = InFlight(busy, f"INSERT INTO {TABLE} (who, n) SELECT 'busy', SLEEP(1.5)")
    in_flight.start()
    time.sleep(0.5)
    try:
        cluster.kill_primary()
        # The next statement arrives while the session waits for a writer to replay on.
        sent_early = InFlight(eager, insert("eager", 2))
        sent_early.start()
        # Another client changes the row `reader` read, on the server about to be promoted,
        # before any replay can run there.
        with cluster.root(new) as c:
            run(c, f"UPDATE {cluster.db}.{TABLE} SET n = 2 WHERE who = 'shared'")
        assert cluster.promote(new) == new

        # The statement in flight was answered by the new writer, unseen.
        in_flight.join(timeout=WRITER_WAIT + 10)
        assert not in_flight.is_alive()
        assert (in_flight.error, in_flight.affected) == (None, 1)
        run(busy, insert("busy", 2), "COMMIT")
        sent_early.join(timeout=WRITER_WAIT + 10)
        assert (sent_early.error, sent_early.affected) == (None, 1)
        run(eager, "COMMIT")
        # Idle in the transaction: the next INSERT succeeds and COMMIT keeps every row.
        run(idle, insert("idle", 2))
        assert run(idle, f"SELECT n FROM {TABLE} WHERE who = 'idle' ORDER BY n") == ((1,), (2,))
        run(idle, "COMMIT")
        # Answers that cannot come out the same: ERR 1213, as without replay.
        assert_rolled_back(clock, insert("clock", 1))
        assert_rolled_back(reader, insert("reader", 1))
        assert_rolled_back(too_large, insert("too_large", 2))
        assert_rolled_back(off, insert("off", 2))
        # Each session carries on.
        for c, who in ((clock, "clock"), (reader, "reader"), (too_large, "too_large"),
                       (off, "off")):
            run(c, "BEGIN", insert(who, 3), "COMMIT")

        with cluster.app(new) as c:
            rows = sorted(run(c, f"SELECT who, n FROM {TABLE}"))
        assert rows == sorted([("shared", 2), ("idle", 1), ("idle", 2), ("eager", 1),
                               ("eager", 2), ("busy", 1),
                               ("busy", 0), ("busy", 2), ("clock", 3), ("reader", 3),
                               ("too_large", 3), ("off", 3)]), rows

        m = replaying.metrics()
        replays = {o: m(f'ringgate_transaction_replays_total{{outcome="{o}"}}')
                   for o in ("replayed", "mismatch", "failed", "too_large")}
        assert replays == {"replayed": 3, "mismatch": 2, "failed": 0, "too_large": 0}, replays
        assert m('ringgate_writer_lost_total{outcome="replayed"}') == 3
        assert m('ringgate_writer_lost_total{outcome="rolled_back"}') == 2
        assert tight.metrics()('ringgate_transaction_replays_total{outcome="too_large"}') == 1
        assert plain.metrics()('ringgate_transaction_replays_total{outcome="replayed"}') == 0
        assert plain.metrics()('ringgate_writer_lost_total{outcome="rolled_back"}') == 1
        log = replaying.stderr()
        assert "was replayed on the new writer" in log, log[-3000:]
        assert "could not be replayed on the new writer" in log, log[-3000:]
    finally:
        for c in (idle, eager, busy, clock, reader, too_large, off):
            c.close()
        cluster.heal()
