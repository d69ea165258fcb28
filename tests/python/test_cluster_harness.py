"""The replication set itself (scripts/mariadb-cluster.sh, tests/python/cluster.py), before any
proxy is put in front of it: replication reaches both replicas, the replicas refuse writes,
the monitor account can watch and not write, the orchestrator's actions leave a set that
replicates, and a stop leaves nothing behind."""

import contextlib
import os
import shutil
import socket
import tempfile
import time

import pymysql
import pytest

from cluster import Cluster

# ER_OPTION_PREVENTS_STATEMENT: "The MariaDB server is running with the --read-only option".
ER_READ_ONLY = 1290
# Table, database and global-privilege refusals.
ER_TABLEACCESS_DENIED = 1142
ER_DBACCESS_DENIED = 1044
ER_SPECIFIC_ACCESS_DENIED = 1227


@pytest.fixture
def table(cluster):
    """A fresh table `t` in the test database, created on the primary and replicated."""
    with cluster.app(cluster.primary()) as c, c.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS t")
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, v INT) ENGINE=InnoDB")
    cluster.wait_replicated()
    return "t"


def insert(cluster, n, v):
    """One autocommit INSERT on node n as the app account; returns the primary's position."""
    with cluster.app(n) as c, c.cursor() as cur:
        cur.execute("INSERT INTO t (v) VALUES (%s)", (v,))
    return cluster.gtid_binlog_pos(n)


def values(cluster, n):
    with cluster.app(n) as c, c.cursor() as cur:
        cur.execute("SELECT v FROM t ORDER BY id")
        return [r[0] for r in cur.fetchall()]


def error_code(fn):
    with pytest.raises(pymysql.err.MySQLError) as e:
        fn()
    return e.value.args[0]


def run_as(conn_factory, sql):
    def go():
        with conn_factory() as c, c.cursor() as cur:
            cur.execute(sql)

    return go


def test_a_write_on_the_primary_reaches_both_replicas(cluster, table):
    assert cluster.primary() == 1
    pos = insert(cluster, 1, 7)
    for n in (2, 3):
        # As the app account: MASTER_GTID_WAIT needs no privilege.
        with cluster.app(n) as c, c.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, 30)", (pos,))
            assert cur.fetchone()[0] == 0, cluster.status()
        assert values(cluster, n) == [7]
        assert cluster.gtid_slave_pos(n) == pos


def test_replicas_refuse_the_app_accounts_writes_with_1290(cluster, table):
    for n in (2, 3):
        assert cluster.read_only(n)
        assert error_code(run_as(lambda: cluster.app(n), "INSERT INTO t (v) VALUES (1)")) == ER_READ_ONLY
    assert not cluster.read_only(1)


def test_the_monitor_account_watches_replication_and_cannot_write(cluster, table):
    for n in (1, 2, 3):
        with cluster.monitor(n) as c, c.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW ALL SLAVES STATUS")
            rows = cur.fetchall()
            cur.execute("SHOW MASTER STATUS")
            cur.execute("SELECT @@read_only AS ro, @@gtid_binlog_pos AS pos")
            ro = cur.fetchone()["ro"]
        if n == 1:
            assert (rows, ro) == ((), 0)
        else:
            assert ro == 1
            assert [(r["Slave_IO_Running"], r["Slave_SQL_Running"]) for r in rows] == [("Yes", "Yes")]
            assert rows[0]["Master_Port"] == cluster.nodes[1].port
    mon = lambda: cluster.monitor(1)  # noqa: E731
    assert error_code(run_as(mon, f"INSERT INTO {cluster.db}.t (v) VALUES (1)")) == ER_TABLEACCESS_DENIED
    assert error_code(run_as(mon, "CREATE DATABASE monitor_was_here")) == ER_DBACCESS_DENIED
    assert error_code(run_as(mon, "SET GLOBAL read_only=1")) == ER_SPECIFIC_ACCESS_DENIED
    assert error_code(run_as(lambda: cluster.monitor(2), "STOP SLAVE")) == ER_SPECIFIC_ACCESS_DENIED


def test_counters_tell_the_clients_commands_from_replicated_ones(cluster, table):
    names = ("Com_select", "Com_insert")
    before = {n: (cluster.status_counters(n, *names), cluster.user_stats(n)) for n in (1, 2)}
    for v in range(3):
        insert(cluster, 1, v)
    cluster.wait_replicated()
    with cluster.app(2) as c, c.cursor() as cur:
        for _ in range(5):
            cur.execute("SELECT COUNT(*) FROM t")
    after = {n: (cluster.status_counters(n, *names), cluster.user_stats(n)) for n in (1, 2)}

    def delta(n, i, key):
        return after[n][i][key] - before[n][i][key]

    assert (delta(1, 0, "Com_insert"), delta(1, 0, "Com_select")) == (3, 0)
    assert (delta(1, 1, "update_commands"), delta(1, 1, "select_commands")) == (3, 0)
    # The replica's Com_insert counts the three INSERTs its SQL thread applied; its
    # Com_select, the waits and the five SELECTs. The app account's statistics, only the SELECTs.
    assert delta(2, 0, "Com_insert") == 3
    assert delta(2, 0, "Com_select") == 5 + 1
    assert (delta(2, 1, "update_commands"), delta(2, 1, "select_commands")) == (0, 5)


def test_a_lagging_replica_receives_but_does_not_apply(cluster, table):
    try:
        cluster.lag(2, True)
        pos = insert(cluster, 1, 1)
        assert cluster.wait_gtid(3, pos) == 0
        assert cluster.wait_gtid(2, pos, timeout=1) == -1
        status = cluster.slave_status(2)
        assert (status["Slave_IO_Running"], status["Slave_SQL_Running"]) == ("Yes", "No")
        assert status["Seconds_Behind_Master"] is None
        cluster.lag(2, False)
        assert cluster.wait_gtid(2, pos) == 0
    finally:
        cluster.heal()


def test_promote_after_kill_9_gives_a_writable_primary_the_other_replica_follows(cluster, table):
    acked = [v for v in range(5) if insert(cluster, 1, v)]
    # Replication is asynchronous: without this, a write acknowledged just before the kill may
    # not have left the primary, which is the proxy's concern, not the harness's.
    cluster.wait_replicated()
    try:
        t = time.monotonic()
        assert cluster.kill_primary() == 1
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", cluster.nodes[1].port), timeout=2).close()
        new = cluster.promote()
        promoted_in = time.monotonic() - t
        other = ({2, 3} - {new}).pop()
        assert not cluster.read_only(new)
        assert cluster.slave_status(new) is None
        pos = insert(cluster, new, 99)
        assert cluster.wait_gtid(other, pos) == 0
        assert cluster.slave_status(other)["Master_Port"] == cluster.nodes[new].port
        # Compared by (domain, seq_no): the new primary's GTIDs carry its own server_id.
        assert pos.split("-")[1] == str(new)
        assert values(cluster, new) == values(cluster, other) == acked + [99]
        print(f"\nkill -9 to promoted and repointed: {promoted_in:.2f}s")
    finally:
        cluster.heal()
    assert cluster.primary() == 1
    assert values(cluster, 1) == acked + [99]


def test_switchover_moves_the_writer_and_the_old_primary_follows(cluster, table):
    insert(cluster, 1, 1)
    try:
        cluster.switchover(3)
        assert cluster.primary() == 3
        assert error_code(lambda: insert(cluster, 1, 2)) == ER_READ_ONLY
        pos = insert(cluster, 3, 3)
        for n in (1, 2):
            assert cluster.wait_gtid(n, pos) == 0
            assert cluster.slave_status(n)["Master_Port"] == cluster.nodes[3].port
            assert values(cluster, n) == [1, 3]
    finally:
        cluster.heal()
    assert cluster.primary() == 1


def own_processes(directory):
    """Pids whose command line names a datadir under directory."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f"--datadir={directory}/".encode() in f.read():
                    found.append(int(pid))
    return found


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def assert_nothing_left(own, directory):
    assert own_processes(directory) == []
    assert [n.port for n in own.nodes.values() if listening(n.port)] == []
    assert [n.socket for n in own.nodes.values() if os.path.exists(n.socket)] == []


def timed(fn):
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def test_start_is_idempotent_and_stop_leaves_nothing_even_after_kill_9(cluster):
    """A second, private set on the three ports above the session's, in a temporary directory."""
    directory = tempfile.mkdtemp(prefix="rg-cluster-")
    own = Cluster(directory=directory, base_port=cluster.base_port + 3)
    try:
        started_in = timed(own.start)
        assert own.running() and own.primary() == 1
        pids = {n: own.pid(n) for n in own.nodes}
        assert timed(own.start) < 5, "a start over a running set must reuse it"
        assert {n: own.pid(n) for n in own.nodes} == pids
        stopped_in = timed(own.stop)
        assert_nothing_left(own, directory)
        # What a crashed run leaves: nodes killed, their pid files and sockets still there.
        restarted_in = timed(own.start)
        pids = {n: own.pid(n) for n in own.nodes}
        own.kill(1)
        os.kill(pids[3], 9)
        assert os.path.exists(own.nodes[1].socket) and not own.running()
        after_kill_in = timed(own.stop)
        assert_nothing_left(own, directory)
        print(
            f"\nprivate set: first start {started_in:.1f}s, stop {stopped_in:.1f}s, "
            f"second start {restarted_in:.1f}s, stop after two kill -9 {after_kill_in:.1f}s"
        )
    finally:
        own.script("stop", check=False)
        shutil.rmtree(directory, ignore_errors=True)
