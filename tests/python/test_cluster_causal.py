"""Causal reads (`--causal-reads`) against the real three-node replication set: every backend
connection tracks `last_gtid`, the client sees none of it (its OK packets are byte for byte a
direct connection's), tracking never pins a session, and with the read/write split a read after
a write waits on its replica (MASTER_GTID_WAIT) or goes to the writer.

Cluster-only (`make test-cluster`): the `cluster` fixture starts or reuses the set; each test
heals it.
"""

import socket
import tempfile
import threading
import time
from contextlib import contextmanager

import pytest

from cluster import Fronted, wait_for_ringgate
from mysql_wire import (
    CLIENT_CONNECT_WITH_DB,
    CLIENT_PLUGIN_AUTH,
    CLIENT_PROTOCOL_41,
    CLIENT_SECURE_CONNECTION,
    CLIENT_TRANSACTIONS,
    greeting_scramble,
    handshake_response,
    native_token,
    packet,
)

CLIENT_SESSION_TRACK = 1 << 23
TABLE = "causal_rows"


class Causal(Fronted):
    """The shared front, with the causal tests' own readings."""

    def metric(self, key):
        return self.metrics().get(key, 0.0)

    def pinned(self):
        return sum(v for k, v in self.metrics().items() if k.startswith("ringgate_sessions_pinned_total"))


@contextmanager
def fronted(cluster, *extra, buffers=None):
    """A ringgate in `buffers` read mode (default: RINGGATE_READ_BUFFERS, else fixed), ending with
    the leak checks."""
    with tempfile.TemporaryDirectory(prefix="rg-cluster-causal-") as d:
        f = Causal(cluster, d, *extra, buffers=buffers)
        try:
            wait_for_ringgate("ringgate to accept", lambda: f.connect().close() is None, f.log, 60)
            # The monitor has named the writer and seen the replicas.
            wait_for_ringgate("the monitor's first view",
                              lambda: f.metric(f'ringgate_server_writer{{server="127.0.0.1:{cluster.nodes[1].port}"}}') == 1,
                              f.log, 60)
            yield f
        finally:
            try:
                f.assert_settled(timeout=30)
            finally:
                f.stop()


@pytest.fixture
def healed(cluster):
    """The set as every test expects it (node 1 the primary, replicas applying), the test table
    empty, and healed again afterwards."""
    cluster.heal()
    with cluster.root(1) as c, c.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {cluster.db}.{TABLE} (id INT PRIMARY KEY, v INT)")
        cur.execute(f"DELETE FROM {cluster.db}.{TABLE}")
    cluster.wait_replicated()
    yield cluster
    cluster.heal()


class RawClient:
    """A client by hand, with or without CLIENT_SESSION_TRACK: every packet of each answer, as
    the server (or ringgate) sent it."""

    def __init__(self, port, user, password, db, session_track):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""
        _, greeting = self.read()
        caps = (CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH
                | CLIENT_TRANSACTIONS | CLIENT_CONNECT_WITH_DB)
        if session_track:
            caps |= CLIENT_SESSION_TRACK
        token = native_token(password, greeting_scramble(greeting))
        self.sock.sendall(packet(1, handshake_response(user, token, "mysql_native_password", caps, 0, db)))
        _, ok = self.read()
        assert ok[0] == 0, ok

    def read(self):
        while len(self.buf) < 4 or len(self.buf) < 4 + int.from_bytes(self.buf[:3], "little"):
            chunk = self.sock.recv(1 << 16)
            assert chunk, "connection closed"
            self.buf += chunk
        n = int.from_bytes(self.buf[:3], "little")
        seq, payload = self.buf[3], self.buf[4:4 + n]
        self.buf = self.buf[4 + n:]
        return seq, payload

    def query(self, sql):
        """Every packet of the answer (an OK or ERR, or a whole result set)."""
        self.sock.sendall(packet(0, b"\x03" + sql.encode()))
        _, first = self.read()
        answer = [first]
        if first[0] in (0x00, 0xFF):
            return answer
        eofs = 0
        while eofs < 2:
            _, p = self.read()
            answer.append(p)
            if p[0] == 0xFE and len(p) < 9:
                eofs += 1
        return answer

    def close(self):
        self.sock.sendall(packet(0, b"\x01"))
        self.sock.close()


def statements(first_id):
    """Writes that binlog (autocommit and in a transaction), one that binlogs nothing, a read."""
    return [
        f"INSERT INTO {TABLE} VALUES ({first_id}, 1)",
        "BEGIN",
        f"INSERT INTO {TABLE} VALUES ({first_id + 1}, 1)",
        "COMMIT",
        f"UPDATE {TABLE} SET v = v WHERE id = -1",
        f"UPDATE {TABLE} SET v = 2 WHERE id = {first_id}",
        "SELECT 1",
        f"DELETE FROM {TABLE} WHERE id IN ({first_id}, {first_id + 1})",
    ]


BUFFERS = ["fixed", "ring", "heap"]


@pytest.mark.parametrize("causal,buffers", [("session", b) for b in BUFFERS] + [("global", "fixed")])
def test_the_client_sees_no_tracker_it_did_not_ask_for(healed, causal, buffers):
    """With causal reads on, every backend connection reports last_gtid; a client without
    CLIENT_SESSION_TRACK, and one with the server's default trackers, get the very bytes a direct
    connection to the primary gets: no last_gtid block, no SESSION_STATE_CHANGED flag."""
    cluster = healed
    primary = cluster.nodes[1]
    with fronted(cluster, "--causal-reads", causal, buffers=buffers) as f:
        # The proxy's tracker is on (else the bytes below would match for nothing).
        with f.connect() as c, c.cursor() as cur:
            cur.execute("SELECT @@session_track_system_variables")
            assert "last_gtid" in cur.fetchone()[0]
        for n, session_track in enumerate([False, True]):
            direct = RawClient(primary.port, cluster.app_user, cluster.app_password, cluster.db, session_track)
            proxied = RawClient(f.port, cluster.app_user, cluster.app_password, cluster.db, session_track)
            for a, b in zip(statements(100 + 10 * n), statements(200 + 10 * n)):
                want, got = direct.query(a), proxied.query(b)
                assert got == want, f"{b} (session_track={session_track}): {got!r} != {want!r}"
            direct.close()
            proxied.close()
        assert f.pinned() == 0, "tracking last_gtid pinned a session"


def test_tracking_last_gtid_never_pins(healed):
    """Sessions that write (each OK carries a last_gtid block and raises SESSION_STATE_CHANGED)
    still give their connection back between statements: no pin, few connections."""
    cluster = healed
    with fronted(cluster, "--causal-reads", "session", "--backend-pool-size", "0") as f:
        releases = f.metric("ringgate_tx_releases_total")
        conns = [f.connect() for _ in range(12)]
        for i, c in enumerate(conns):
            with c.cursor() as cur:
                for k in range(3):
                    cur.execute(f"INSERT INTO {TABLE} VALUES (%s, 1)", (1000 + 10 * i + k,))
                cur.execute("BEGIN")
                cur.execute(f"UPDATE {TABLE} SET v = 2 WHERE id = %s", (1000 + 10 * i,))
                cur.execute("COMMIT")
        assert f.pinned() == 0
        assert f.metric("ringgate_tx_releases_total") - releases >= 12 * 5
        for c in conns:
            c.close()


class SlowReplicas(threading.Thread):
    """Makes both replicas fall behind for a moment, again and again: a root session on each holds
    `LOCK TABLES <table> READ` for `hold` seconds, then lets the applier catch up for `gap`. The
    replication threads keep running (the monitor sees a running, briefly lagging replica that
    still takes reads), but a write made while the lock is held is not there yet."""

    def __init__(self, cluster, hold=0.05, gap=0.01):
        super().__init__(daemon=True)
        self.conns = [cluster.root(n, database=cluster.db) for n in (2, 3)]
        self.hold, self.gap = hold, gap
        self.stop = threading.Event()
        self.error = None

    def run(self):
        try:
            while not self.stop.is_set():
                for c in self.conns:
                    c.cursor().execute(f"LOCK TABLES {TABLE} READ")
                self.stop.wait(self.hold)
                for c in self.conns:
                    c.cursor().execute("UNLOCK TABLES")
                self.stop.wait(self.gap)
        except Exception as e:  # reported by the test, not lost in a thread
            self.error = e

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join(timeout=30)
        for c in self.conns:
            c.close()
        assert self.error is None, self.error


def routed_reads(f):
    """Reads the split sent to the replicas so far."""
    return sum(v for k, v in f.metrics().items()
               if k.startswith("ringgate_routed_total") and 'route="read"' in k
               and f'server="127.0.0.1:{f.cluster.nodes[1].port}"' not in k)


def write_then_read(writer, reader, first_id, n, transaction=False):
    """n times: a write through `writer` (autocommit, or in a transaction), then the same row
    read through `reader`; returns how many reads missed their write."""
    missed = 0
    with writer.cursor() as w, reader.cursor() as r:
        for i in range(first_id, first_id + n):
            if transaction:
                w.execute("BEGIN")
                w.execute(f"INSERT INTO {TABLE} VALUES (%s, 1)", (i,))
                w.execute(f"UPDATE {TABLE} SET v = 2 WHERE id = %s", (i,))
                w.execute("COMMIT")
            else:
                w.execute(f"INSERT INTO {TABLE} VALUES (%s, 2)", (i,))
            r.execute(f"SELECT v FROM {TABLE} WHERE id = %s", (i,))
            if r.fetchone() != (2,):
                missed += 1
    return missed


SPLIT = ("--read-write-split", "--causal-read-timeout", "10s")


@pytest.mark.parametrize("buffers", BUFFERS)
def test_a_read_after_a_write_sees_it_on_a_slow_replica(healed, buffers):
    """100 times out of 100 a session's read right after its write sees the row, on replicas
    made slow, and it ran on a replica (after a wait), not on the writer; in each read mode."""
    cluster = healed
    with fronted(cluster, "--causal-reads", "session", *SPLIT, buffers=buffers) as f, f.connect() as c:
        reads = routed_reads(f)
        with SlowReplicas(cluster):
            missed = write_then_read(c, c, 1, 100)
        assert missed == 0
        assert routed_reads(f) - reads >= 100, "the reads went to the replicas"
        m = f.metrics()
        waits = m["ringgate_causal_wait_duration_seconds_count"]
        print(f"\n100 reads after writes on slowed replicas: {waits:.0f} waits, "
              f"{1000 * m['ringgate_causal_wait_duration_seconds_sum'] / waits:.1f} ms each on average")
        assert waits >= 100
        assert m.get("ringgate_causal_fallbacks_total", 0) == 0


def test_without_causal_reads_the_same_loop_reads_stale_rows(healed):
    """The check above can fail: with causal reads off, reads on the slowed replicas miss writes
    made just before."""
    cluster = healed
    with fronted(cluster, "--causal-reads", "off", *SPLIT) as f, f.connect() as c:
        with SlowReplicas(cluster):
            missed = write_then_read(c, c, 1, 100)
        print(f"\ncausal reads off: {missed} of 100 reads missed the write just made")
        assert missed > 0
        assert f.metric("ringgate_causal_wait_duration_seconds_count") == 0


def test_inside_a_transaction_the_commit_is_what_is_waited_for(healed):
    """The GTID arrives on COMMIT's OK: a read after BEGIN … COMMIT sees the committed row."""
    cluster = healed
    with fronted(cluster, "--causal-reads", "session", *SPLIT) as f, f.connect() as c:
        with SlowReplicas(cluster):
            missed = write_then_read(c, c, 1, 30, transaction=True)
        assert missed == 0
        assert f.metric("ringgate_causal_wait_duration_seconds_count") >= 30


def test_global_mode_a_read_sees_another_sessions_write(healed):
    """--causal-reads global: session B's read waits for session A's write."""
    cluster = healed
    with fronted(cluster, "--causal-reads", "global", *SPLIT) as f, f.connect() as a, f.connect() as b:
        with SlowReplicas(cluster):
            missed = write_then_read(a, b, 1, 50)
        assert missed == 0
        assert f.metric("ringgate_causal_wait_duration_seconds_count") >= 50
    # Session mode waits for the session's own writes only: B reads stale rows.
    with fronted(cluster, "--causal-reads", "session", *SPLIT) as f, f.connect() as a, f.connect() as b:
        with SlowReplicas(cluster):
            missed = write_then_read(a, b, 1001, 50)
        assert missed > 0


def test_a_wait_that_times_out_sends_the_read_to_the_writer(healed):
    """The replicas hold the write back longer than --causal-read-timeout: the read is answered
    by the writer (the only server with the row), after the timeout, and the fallback counted."""
    cluster = healed
    with fronted(cluster, "--causal-reads", "session", "--read-write-split",
                 "--causal-read-timeout", "300ms") as f, f.connect() as c:
        with SlowReplicas(cluster, hold=3.0, gap=0.01):
            time.sleep(0.2)  # the locks are held
            with c.cursor() as cur:
                cur.execute(f"INSERT INTO {TABLE} VALUES (7, 2)")
                t = time.monotonic()
                cur.execute(f"SELECT v FROM {TABLE} WHERE id = 7")
                took = time.monotonic() - t
                assert cur.fetchone() == (2,)
        assert took >= 0.3, took
        assert f.metric("ringgate_causal_fallbacks_total") == 1
        assert f.metric("ringgate_causal_wait_duration_seconds_count") == 1


def test_a_replica_lost_during_the_wait_sends_the_read_to_the_writer(healed):
    """A read waits on a replica held back by a lock; the replicas are killed (kill -9) while it
    waits: the writer answers it, with no error, long before --causal-read-timeout."""
    cluster = healed
    with fronted(cluster, "--causal-reads", "session", "--read-write-split",
                 "--causal-read-timeout", "20s") as f, f.connect() as c:
        locks = [cluster.root(n, database=cluster.db) for n in (2, 3)]
        for lock in locks:
            lock.cursor().execute(f"LOCK TABLES {TABLE} READ")
        with c.cursor() as cur:
            cur.execute(f"INSERT INTO {TABLE} VALUES (9, 2)")
            killer = threading.Timer(0.5, lambda: [cluster.kill(n) for n in (2, 3)])
            killer.start()
            t = time.monotonic()
            cur.execute(f"SELECT v FROM {TABLE} WHERE id = 9")
            took = time.monotonic() - t
            assert cur.fetchone() == (2,)
            killer.join()
        assert 0.5 <= took < 10, took
        assert f.metric("ringgate_causal_fallbacks_total") == 1
        for lock in locks:
            lock.close()


def test_reads_long_after_a_write_wait_no_more(healed):
    """A replica that answered a wait for a position is not asked again for it: after one write,
    30 reads cost at most one wait per replica (a session stays on its worker)."""
    cluster = healed
    with fronted(cluster, "--causal-reads", "session", *SPLIT) as f, f.connect() as c:
        reads = routed_reads(f)
        with c.cursor() as cur:
            cur.execute(f"INSERT INTO {TABLE} VALUES (1, 2)")
            for _ in range(30):
                cur.execute(f"SELECT v FROM {TABLE} WHERE id = 1")
                assert cur.fetchone() == (2,)
        assert routed_reads(f) - reads >= 30
        assert 1 <= f.metric("ringgate_causal_wait_duration_seconds_count") <= 2
