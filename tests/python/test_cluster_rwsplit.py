"""The read/write split (--read-write-split) against the real three-node replication set: safe
reads land on the replicas by weight, writes and unsafe reads on the primary, a READ ONLY
transaction on one replica, hints force either way, a lagging replica gets no reads until it
catches up, and with every replica out the reads go to the primary. Each statement says where it
ran with @@server_id (node n has server_id n); the replicas' own counters (SHOW USER_STATISTICS,
the app account's commands only) confirm where the reads went.

Cluster-only (`make test-cluster`): the `cluster` fixture starts or reuses the set, node 1 the
primary. A test that lags a replica heals the set when it ends.
"""

import tempfile
import threading
import time

import pytest

from cluster import Fronted

WAIT = 30.0
PRIMARY = 1
REPLICAS = {2, 3}
# Node 2 takes three reads for each of node 3's.
WEIGHTS = {1: 1, 2: 3, 3: 1}


class Split(Fronted):
    """One worker, no warm pool; `split` turns --read-write-split on. Replicas may lag 2 s."""

    def __init__(self, cluster, workdir, split=True, mode="fixed"):
        flags = ["--read-write-split", "--read-only-functions", "rwsplit_reads"] if split else []
        super().__init__(cluster, workdir, "--backend-pool-size", "0", *flags, workers=1,
                         buffers=mode, read_timeout=30, wait_timeout=WAIT,
                         backend_suffix=lambda n: f",weight={WEIGHTS[n]},max-lag=2s")

    def server_metric(self, name, n, **labels):
        node = self.cluster.nodes[n]
        labels["server"] = f"{node.host}:{node.port}"
        key = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
        return self.metrics().get(key)

    def readable(self, n):
        """The monitor sees node n up, a replica, not stale, its lag known and within 2 s."""
        lag = self.server_metric("ringgate_server_lag_seconds", n)
        return (self.server_metric("ringgate_server_state", n, state="up") == 1
                and self.server_metric("ringgate_server_role", n, role="replica") == 1
                and self.server_metric("ringgate_server_stale", n) == 0
                and lag is not None and lag <= 2)


def started(cluster, workdir, **kw):
    s = Split(cluster, workdir, **kw)
    s.wait("ringgate to accept", lambda: s.connect().close() is None)
    s.wait("the monitor to see both replicas readable", lambda: all(s.readable(n) for n in REPLICAS))
    return s


@pytest.fixture(scope="module", params=["fixed", "ring", "heap"])
def split(cluster, request):
    """One ringgate per read-buffer mode, each ending with the leak checks."""
    prepare(cluster)
    with tempfile.TemporaryDirectory(prefix="rg-cluster-rwsplit-") as d:
        s = started(cluster, d, mode=request.param)
        try:
            yield s
            s.assert_settled()
        finally:
            s.stop()


def prepare(cluster):
    """A table, and two stored functions: one declared read-only to ringgate, one not."""
    with cluster.root(PRIMARY) as c, c.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {cluster.db}.rwsplit "
                    "(id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {cluster.db}.rwsplit (v) VALUES (0)")
        for name in ("rwsplit_reads", "rwsplit_other"):
            cur.execute(f"CREATE FUNCTION IF NOT EXISTS {cluster.db}.{name}() RETURNS INT "
                        "DETERMINISTIC RETURN 7")
    cluster.wait_replicated()


def server_id(conn, sql="SELECT @@server_id"):
    with conn.cursor() as cur:
        cur.execute(sql)
        return int(cur.fetchone()[0])


def read_counts(cluster):
    return {n: int(cluster.user_stats(n)["select_commands"]) for n in cluster.nodes}


def test_safe_reads_land_on_the_replicas_by_weight(cluster, split):
    before = read_counts(cluster)
    with split.connect() as c:
        seen = [server_id(c) for _ in range(40)]
    counts = {n: seen.count(n) for n in cluster.nodes}
    assert counts[PRIMARY] == 0, counts
    # Smooth weighted round robin over 3:1: exactly 30 and 10 in any 40 picks of one worker.
    assert (counts[2], counts[3]) == (30, 10), counts
    # The replicas' own counters agree: the reads ran there.
    after = read_counts(cluster)
    assert after[2] - before[2] >= 30 and after[3] - before[3] >= 10, (before, after)
    assert after[PRIMARY] - before[PRIMARY] == 0, (before, after)
    m = split.metrics()
    node = cluster.nodes[2]
    assert m.get(f'ringgate_routed_total{{route="read",server="{node.host}:{node.port}"}}', 0) >= 30
    # The reads' connections are the replicas' in the pool.
    assert split.server_metric("ringgate_server_backend_connections", 2) >= 1


@pytest.mark.parametrize("sql", [
    "SELECT @@server_id FROM rwsplit WHERE id = 1 FOR UPDATE",
    "SELECT @@server_id FROM rwsplit WHERE id = 1 LOCK IN SHARE MODE",
    "SELECT @@server_id, GET_LOCK('rwsplit', 0)",
    "SELECT @@server_id, LAST_INSERT_ID()",
    "SELECT @@server_id, @rwsplit := 1",
    "SELECT @@server_id, rwsplit_other()",
    "SELECT @@server_id, CONNECTION_ID()",
    "/* ringgate:writer */ SELECT @@server_id",
])
def test_unsafe_reads_go_to_the_primary(split, sql):
    # A fresh session each: some of these pin it.
    with split.connect() as c:
        assert server_id(c, sql) == PRIMARY, sql


def test_writes_go_to_the_primary(cluster, split):
    with split.connect() as c, c.cursor() as cur:
        cur.execute("INSERT INTO rwsplit (v) VALUES (@@server_id)")
        new = cur.lastrowid
        cur.execute("UPDATE rwsplit SET v = v * 10 + @@server_id WHERE id = %s", (new,))
        # Read back on the primary, inside a transaction.
        cur.execute("BEGIN")
        cur.execute("SELECT v, @@server_id FROM rwsplit WHERE id = %s", (new,))
        assert cur.fetchone() == (PRIMARY * 10 + PRIMARY, PRIMARY)
        cur.execute("SELECT @@server_id")
        assert cur.fetchone()[0] == PRIMARY, "every statement of a read-write transaction"
        cur.execute("COMMIT")


def test_a_read_only_transaction_runs_on_one_replica(split):
    with split.connect() as c, c.cursor() as cur:
        for _ in range(4):
            cur.execute("START TRANSACTION READ ONLY")
            ids = []
            for _ in range(3):
                cur.execute("SELECT @@server_id")
                ids.append(cur.fetchone()[0])
            cur.execute("COMMIT")
            assert ids[0] in REPLICAS and ids.count(ids[0]) == 3, ids


def test_hints_force_either_way_and_declared_functions_read_on_replicas(split):
    with split.connect() as c:
        assert server_id(c, "/* ringgate:replica */ SELECT @@server_id, SLEEP(0)") in REPLICAS
        assert server_id(c, "SELECT @@server_id /* ringgate:writer */") == PRIMARY
        assert server_id(c, "SELECT @@server_id, rwsplit_reads()") in REPLICAS
        # The declared function did not pin the session to the replica: a write still works.
        with c.cursor() as cur:
            cur.execute("INSERT INTO rwsplit (v) VALUES (1)")
        assert server_id(c) in REPLICAS


def test_a_replicas_connection_gets_the_sessions_settings_and_schema(cluster, split):
    with split.connect() as c, c.cursor() as cur:
        cur.execute("SET time_zone = '+03:00'")
        rows = []
        for _ in range(4):
            cur.execute("SELECT @@server_id, @@session.time_zone, DATABASE()")
            rows.append(cur.fetchone())
        assert {r[0] for r in rows} == REPLICAS, rows
        assert all(r[1:] == ("+03:00", cluster.db) for r in rows), rows


def test_a_pinned_session_reads_on_the_writer(split):
    with split.connect() as c, c.cursor() as cur:
        cur.execute("SET @pinned = 1")
        assert [server_id(c) for _ in range(5)] == [PRIMARY] * 5


def write_some(cluster, n=3):
    with cluster.root(PRIMARY) as c, c.cursor() as cur:
        for _ in range(n):
            cur.execute(f"INSERT INTO {cluster.db}.rwsplit (v) VALUES (2)")


def test_a_lagging_replica_gets_no_reads_until_it_catches_up(cluster, split):
    try:
        cluster.lag(3, True)
        write_some(cluster)
        split.wait("node 3 stale", lambda: not split.readable(3))
        with split.connect() as c:
            seen = [server_id(c) for _ in range(12)]
        assert seen == [2] * 12, seen
        cluster.lag(3, False)
        split.wait("node 3 readable again", lambda: split.readable(3))
        with split.connect() as c:
            seen = [server_id(c) for _ in range(12)]
        assert 3 in seen and PRIMARY not in seen, seen
    finally:
        cluster.lag(3, False)
        cluster.heal()


def test_with_every_replica_out_reads_go_to_the_primary(cluster, split):
    try:
        for n in REPLICAS:
            cluster.lag(n, True)
        write_some(cluster)
        split.wait("both replicas stale", lambda: not any(split.readable(n) for n in REPLICAS))
        with split.connect() as c:
            assert [server_id(c) for _ in range(6)] == [PRIMARY] * 6
    finally:
        # The SQL threads first: heal waits for each replica to apply before it starts them.
        for n in REPLICAS:
            cluster.lag(n, False)
        cluster.heal()
    split.wait("the replicas readable again", lambda: all(split.readable(n) for n in REPLICAS))


def test_a_killed_replica_costs_the_reads_no_error(cluster, split):
    """Before the monitor sees it down, a read picked for the dead replica finds its idle
    connection closed or its connect refused, and goes to the writer."""
    try:
        with split.connect() as c:
            assert {server_id(c) for _ in range(8)} == REPLICAS
            cluster.kill(3)
            seen = [server_id(c) for _ in range(16)]
        assert 3 not in seen and 2 in seen, seen
        split.wait("node 3 down", lambda: split.server_metric("ringgate_server_state", 3, state="down") == 1)
        with split.connect() as c:
            assert [server_id(c) for _ in range(6)] == [2] * 6
    finally:
        cluster.heal()
    split.wait("node 3 readable again", lambda: split.readable(3))


def test_a_kill_of_a_session_reading_on_a_replica_reaches_no_writer_thread(split):
    """The KILL goes out on the killer's connection, to the writer, where the replica's thread id
    would name another thread (or none: ERR 1094): a session on a replica counts as holding no
    connection, so KILL QUERY is an OK that touches nothing."""
    with split.connect() as reader, split.connect() as killer:
        result = {}

        def read():
            result["row"] = server_id_and(reader, "/* ringgate:replica */ SELECT @@server_id, SLEEP(1.5)")

        t = threading.Thread(target=read)
        t.start()
        time.sleep(0.5)
        with killer.cursor() as cur:
            cur.execute(f"KILL QUERY {reader.thread_id()}")
        t.join(timeout=30)
        assert result["row"][0] in REPLICAS and result["row"][1] == 0, result


def server_id_and(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchone()


def test_with_the_split_off_everything_goes_to_the_primary(cluster):
    prepare(cluster)
    with tempfile.TemporaryDirectory(prefix="rg-cluster-nosplit-") as d:
        s = started(cluster, d, split=False)
        try:
            with s.connect() as c:
                assert [server_id(c) for _ in range(8)] == [PRIMARY] * 8
                with c.cursor() as cur:
                    cur.execute("START TRANSACTION READ ONLY")
                    cur.execute("SELECT @@server_id")
                    assert cur.fetchone()[0] == PRIMARY
                    cur.execute("COMMIT")
            assert "ringgate_routed_total" not in str(s.metrics())
        finally:
            s.stop()
