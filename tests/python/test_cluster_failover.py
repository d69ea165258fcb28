"""A change of writer through ringgate, against the real three-node replication set: the primary
is killed with kill -9 and a replica promoted (the test plays the orchestrator), while four clients
write in a loop and others sit idle between transactions. Idle clients carry on over the same
connection and reach the new primary; no acknowledged write is lost; the writers' gap and their
errors are printed.

Cluster-only (`make test-cluster`): the `cluster` fixture starts or reuses the set.
"""

import os
import signal
import tempfile
import threading
import time

import pymysql
import pytest

from cluster import Fronted

WAIT = 60.0
TABLE = "failover_writes"
# Writing clients: several, so that their statements' leases take each other's connections and
# run a setup first (`DO LAST_INSERT_ID(n)`: each INSERT moves it), which the kill can cut.
WRITERS = 4


@pytest.fixture
def fronted(cluster):
    with tempfile.TemporaryDirectory(prefix="rg-cluster-failover-") as d:
        f = Fronted(cluster, d, "--backend-wait-timeout", "20s", "--switchover-hold-timeout", "20s",
                    buffers="fixed", wait_timeout=WAIT)
        try:
            f.wait("ringgate to accept", lambda: f.connect().close() is None)
            yield f
        finally:
            f.stop()


class Writer(threading.Thread):
    """Autocommit INSERTs through ringgate in a loop: each acknowledged number with its time,
    and each error with its time."""

    def __init__(self, fronted, first):
        super().__init__(daemon=True)
        self.fronted = fronted
        self.first = first
        self.stop = threading.Event()
        self.acked = []
        self.errors = []

    def run(self):
        conn = None
        n = self.first
        while not self.stop.is_set():
            n += 1
            try:
                if conn is None:
                    conn = self.fronted.connect()
                with conn.cursor() as cur:
                    cur.execute(f"INSERT INTO {TABLE} (n) VALUES (%s)", (n,))
                self.acked.append((n, time.monotonic()))
            except pymysql.err.MySQLError as e:
                self.errors.append((time.monotonic(), repr(e)))
                if isinstance(e, (pymysql.err.OperationalError, pymysql.err.InterfaceError)) \
                        and e.args and e.args[0] in (0, 2006, 2013):
                    conn = None  # the connection itself is gone
                time.sleep(0.05)
            time.sleep(0.01)
        if conn is not None:
            conn.close()


def assert_no_write_lost(cluster, node, writers):
    """Every write the writers saw acknowledged is on `node`."""
    with cluster.app(node) as c, c.cursor() as cur:
        cur.execute(f"SELECT n FROM {TABLE}")
        have = {r[0] for r in cur.fetchall()}
    lost = [n for w in writers for n, _ in w.acked if n not in have]
    assert not lost, f"{len(lost)} acknowledged writes missing on node {node}: {lost[:10]}"


def server_id(conn):
    with conn.cursor() as cur:
        cur.execute("SELECT @@server_id")
        return cur.fetchone()[0]


def test_idle_clients_carry_on_and_writes_move_to_the_new_primary(cluster, fronted):
    with cluster.app(cluster.primary()) as c, c.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id INT AUTO_INCREMENT PRIMARY KEY, n INT)")
        cur.execute(f"TRUNCATE {TABLE}")
    old = cluster.primary()
    idle = [fronted.connect() for _ in range(10)]
    for c in idle:
        assert server_id(c) == old
    writers = [Writer(fronted, i * 1_000_000) for i in range(WRITERS)]
    for w in writers:
        w.start()
    fronted.wait("writes flowing", lambda: all(len(w.acked) >= 20 for w in writers))

    try:
        fail_over(cluster, fronted, old, idle, writers)
    finally:
        for w in writers:
            w.stop.set()
        cluster.heal()


def fail_over(cluster, fronted, old, idle, writers):
    """Kill the primary, promote a replica, and check what every client saw."""
    killed_at = time.monotonic()
    cluster.kill_primary()
    dead_at = time.monotonic()  # the script returns once the port refuses
    new = cluster.promote()
    promoted_at = time.monotonic()

    def after_kill():
        return [(n, t) for w in writers for n, t in w.acked if t > promoted_at]

    fronted.wait("writes through ringgate after the promotion",
                 lambda: len(after_kill()) >= 20 * WRITERS)
    for w in writers:
        w.stop.set()
    for w in writers:
        w.join(timeout=30)
    errors = sorted(e for w in writers for e in w.errors)
    acked = [a for w in writers for a in w.acked]
    gap = min(t for _, t in acked if t > dead_at) - killed_at
    print(f"\nkill -9 of node {old}, node {new} promoted after {promoted_at - killed_at:.2f} s; "
          f"first write acknowledged through ringgate {gap:.2f} s after the kill; "
          f"{len(errors)} write errors over {WRITERS} writers; {len(acked)} writes acknowledged")
    for t, e in errors[:8]:
        print(f"  +{t - killed_at:.2f} s {e}")

    # Every idle client carries on over the same connection, and now reaches the new primary.
    for c in idle:
        assert server_id(c) == new
        c.close()
    # No acknowledged write is lost (the promoted replica had received them all: same host).
    assert_no_write_lost(cluster, new, writers)
    # The only errors are the statements in flight on the dead primary (their connections are
    # lost, as direct): new statements wait for the new writer instead of being refused, also
    # those whose lease's setup the kill cut (before any of the statement was sent).
    refused = [e for _, e in errors if "unavailable" in e]
    assert not refused, refused
    for w in writers:
        assert len(w.errors) <= 2, w.errors
    assert gap < 30, gap
    log = fronted.log.read_text()
    assert "backend writer changed" in log, log[-4000:]
    # Nothing leaked on any path the failover took: the lost connections, the sessions that
    # carried on, the connections of the old writer closed when given back.
    fronted.assert_settled()



def test_a_switchover_under_load_costs_no_client_error(cluster, fronted):
    """The planned switchover: SIGUSR1 holds new transactions, ringgate says when none is in
    flight, the operator moves the writer, and the hold ends when the monitor sees the new one."""
    with cluster.app(cluster.primary()) as c, c.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id INT AUTO_INCREMENT PRIMARY KEY, n INT)")
        cur.execute(f"TRUNCATE {TABLE}")
    old = cluster.primary()
    new = next(n for n in cluster.nodes if n != old)
    idle = [fronted.connect() for _ in range(5)]
    writer = Writer(fronted, 0)
    writer.start()
    try:
        fronted.wait("writes flowing", lambda: len(writer.acked) >= 20)
        held_at = time.monotonic()
        os.kill(fronted.proc.pid, signal.SIGUSR1)
        fronted.wait("nothing in flight", lambda: "no transaction in flight" in fronted.log.read_text())
        cluster.switchover(new)
        switched_at = time.monotonic()
        fronted.wait("writes after the switchover",
                     lambda: len([t for _, t in writer.acked if t > switched_at]) >= 20)
    finally:
        writer.stop.set()
        writer.join(timeout=30)
    try:
        log = fronted.log.read_text()
        print(f"\nswitchover from node {old} to node {new}: held for "
              f"{switched_at - held_at:.2f} s until the switch ended; "
              f"{len(writer.errors)} write errors; {len(writer.acked)} writes acknowledged")
        assert not writer.errors, writer.errors
        assert "takes writes; hold released" in log, log[-4000:]
        for c in idle:
            assert server_id(c) == new
            c.close()
        assert_no_write_lost(cluster, new, [writer])
    finally:
        cluster.heal()
