"""The cluster monitor against a real three-node GTID replication set: roles, lag while a
replica's SQL thread is stopped, staleness while its IO thread is stopped, a killed replica
going down and coming back up, all read from ringgate's per-server metrics.

Cluster-only: skipped unless RINGGATE_CLUSTER_NODES is set (scripts/mariadb-cluster.sh env,
which `make test-cluster` exports): node 1 the primary, nodes 2 and 3 replicas, root over each
node's unix socket (RINGGATE_CLUSTER_SOCKETS), and the monitor account with SLAVE MONITOR and
BINLOG MONITOR only. Nodes are killed and restarted with scripts/mariadb-cluster.sh (or the
script RINGGATE_CLUSTER_SCRIPT names).
"""

import math
import os
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pymysql
import pytest

from cluster import wait_for_ringgate
from conftest import REPO_ROOT, free_port, launch, parse_metrics, ringgate_bin

pytestmark = pytest.mark.skipif(
    not os.environ.get("RINGGATE_CLUSTER_NODES"),
    reason="cluster-only: needs RINGGATE_CLUSTER_NODES (scripts/mariadb-cluster.sh env)",
)

INTERVAL = "500ms"
# Down after 3 failed checks, up after 3 good ones, backoff up to 8 intervals: seconds, on a
# shared machine.
WAIT = 30.0
DB = "ringgate_monitor_test"


def nodes():
    return os.environ["RINGGATE_CLUSTER_NODES"].split(",")


def root(n):
    sock = os.environ["RINGGATE_CLUSTER_SOCKETS"].split(",")[n - 1]
    return pymysql.connect(unix_socket=sock, user="root", autocommit=True)


def sql(n, statement):
    with root(n) as c, c.cursor() as cur:
        cur.execute(statement)
        return cur.fetchall()


def cluster(*args):
    script = os.environ.get("RINGGATE_CLUSTER_SCRIPT") or str(REPO_ROOT / "scripts" / "mariadb-cluster.sh")
    subprocess.run([script, *args], check=True, timeout=120, capture_output=True)


class Monitored:
    """A ringgate with the three nodes as --backend and the monitor account."""

    def __init__(self, workdir):
        users = Path(workdir) / "users.json"
        users.write_text('{"nobody": [{"Password": "x"}]}')
        self.metrics_port = free_port()
        args = [str(ringgate_bin()), "--users-file", str(users), "--workers", "1",
                "--listen", f"127.0.0.1:{free_port()}", "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
                "--monitor-user", os.environ["RINGGATE_CLUSTER_MONITOR_USER"],
                "--monitor-interval", INTERVAL, "--backend-pool-size", "0"]
        for addr in nodes():
            args += ["--backend", addr]
        env = dict(os.environ, RINGGATE_MONITOR_PASSWORD=os.environ["RINGGATE_CLUSTER_MONITOR_PASSWORD"])
        self.log = Path(workdir) / "ringgate.log"
        self.proc = launch(args, self.log, env)

    def metrics(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return parse_metrics(r.read().decode())

    def server(self, n, name, **labels):
        labels["server"] = nodes()[n - 1]
        key = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
        return self.metrics().get(key)

    def wait(self, what, cond, timeout=WAIT):
        wait_for_ringgate(what, cond, self.log, timeout)

    def state(self, n):
        for s in ("up", "down", "shunned"):
            if self.server(n, "ringgate_server_state", state=s) == 1:
                return s
        return None


@pytest.fixture(scope="module")
def monitored():
    with tempfile.TemporaryDirectory(prefix="rg-cluster-monitor-") as d:
        m = Monitored(d)
        try:
            m.wait("the first round", lambda: m.state(1) == "up")
            yield m
        finally:
            m.proc.terminate()
            m.proc.wait(timeout=30)


@pytest.fixture
def writes():
    """One write a second on the primary, for as long as the test runs."""
    sql(1, f"CREATE DATABASE IF NOT EXISTS {DB}")
    sql(1, f"CREATE TABLE IF NOT EXISTS {DB}.ticks (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
    stop = threading.Event()

    def loop():
        with root(1) as c, c.cursor() as cur:
            while not stop.wait(1.0):
                cur.execute(f"INSERT INTO {DB}.ticks (v) VALUES (1)")

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    yield
    stop.set()
    t.join(timeout=10)


def test_roles_and_the_writer(monitored):
    m = monitored
    m.wait("three servers up", lambda: all(m.state(n) == "up" for n in (1, 2, 3)))
    assert m.server(1, "ringgate_server_role", role="primary") == 1
    assert m.server(1, "ringgate_server_writer") == 1
    for n in (2, 3):
        assert m.server(n, "ringgate_server_role", role="replica") == 1
        assert m.server(n, "ringgate_server_writer") == 0
    # A primary has no lag series; a caught-up replica's is a number, not NaN.
    assert m.server(1, "ringgate_server_lag_seconds") is None
    m.wait("replica 3 caught up", lambda: m.server(3, "ringgate_server_lag_seconds") == 0)
    assert m.server(3, "ringgate_server_stale") == 0


def test_a_stopped_sql_thread_shows_lag_rising(monitored, writes):
    m = monitored
    sql(3, "STOP SLAVE SQL_THREAD")
    try:
        m.wait("lag of 3 s", lambda: (m.server(3, "ringgate_server_lag_seconds") or 0) >= 3)
        first = m.server(3, "ringgate_server_lag_seconds")
        time.sleep(2)
        assert m.server(3, "ringgate_server_lag_seconds") >= first + 1
        assert m.server(3, "ringgate_server_stale") == 1
        # Server 2 keeps up meanwhile.
        assert m.server(2, "ringgate_server_lag_seconds") < 2
    finally:
        sql(3, "START SLAVE SQL_THREAD")
    m.wait("lag back to 0", lambda: m.server(3, "ringgate_server_lag_seconds") < 1)
    m.wait("not stale", lambda: m.server(3, "ringgate_server_stale") == 0)


def test_a_stopped_io_thread_is_stale_though_sbm_is_null(monitored, writes):
    m = monitored
    sql(3, "STOP SLAVE IO_THREAD")
    try:
        m.wait("stale", lambda: m.server(3, "ringgate_server_stale") == 1)
        # SBM is NULL; the writes it never received still show as lag, never as 0.
        m.wait("lag from the GTIDs", lambda: (m.server(3, "ringgate_server_lag_seconds") or 0) >= 2)
        status = sql(3, "SHOW SLAVE STATUS")
        assert status, "replica 3 has no replication configured"
    finally:
        sql(3, "START SLAVE IO_THREAD")
    m.wait("fresh again", lambda: m.server(3, "ringgate_server_stale") == 0)
    m.wait("caught up", lambda: m.server(3, "ringgate_server_lag_seconds") < 1)


def test_a_killed_replica_goes_down_and_comes_back_up(monitored):
    m = monitored
    failed = m.server(2, "ringgate_server_checks_failed_total")
    cluster("kill", "2")
    try:
        m.wait("server 2 down", lambda: m.state(2) == "down")
        assert m.server(2, "ringgate_server_checks_failed_total") >= failed + 3
        lag = m.server(2, "ringgate_server_lag_seconds")
        assert lag is None or math.isnan(lag)
        assert m.server(1, "ringgate_server_writer") == 1
    finally:
        cluster("restart", "2")
    m.wait("server 2 up again", lambda: m.state(2) == "up")
    log = m.log.read_text()
    assert f"server {nodes()[1]}: up → down" in log, log[-4000:]
    assert f"server {nodes()[1]}: down → shunned" in log, log[-4000:]
    assert f"server {nodes()[1]}: shunned → up" in log, log[-4000:]
