"""The three-node replication set of scripts/mariadb-cluster.sh, for the cluster tests.

`Cluster` drives the script (start, stop, and the orchestrator's actions: kill, promote,
switchover, lag, restart, heal: one implementation, in the script) and reads each node over
its own connections: status counters, GTID positions, replication status. The `cluster`
fixture of conftest.py hands the tests one set per session, node 1 its primary.

Reads go through SHOW GLOBAL STATUS / SHOW GLOBAL VARIABLES, which count as Com_show_*, so
that reading a node's Com_select does not move it; a wait (MASTER_GTID_WAIT) is a SELECT and
does count, so take a counter after the waits. A replica's Com_insert (Com_update, ...) also
counts what its SQL thread applies: user_stats() counts one account's commands only.
"""

import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pymysql

from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "mariadb-cluster.sh"
# Seconds: the machine is shared, and a start took 7 s under load where it takes 3.
SCRIPT_TIMEOUT = 180
WAIT_SECONDS = 30


@dataclass(frozen=True)
class Node:
    n: int
    host: str
    port: int
    socket: str


class Cluster:
    """One replication set: the script's DIR and base port (RINGGATE_CLUSTER_DIR and
    RINGGATE_CLUSTER_PORT, or the script's defaults when None)."""

    def __init__(self, directory=None, base_port=None):
        self._env = dict(os.environ)
        if directory is not None:
            self._env["RINGGATE_CLUSTER_DIR"] = str(directory)
        if base_port is not None:
            self._env["RINGGATE_CLUSTER_PORT"] = str(base_port)
        exports = self.script("env").stdout
        self.env = dict(
            line.removeprefix("export ").split("=", 1)
            for line in exports.splitlines()
            if line.startswith("export ")
        )
        self._env.update(self.env)
        self.dir = self.env["RINGGATE_CLUSTER_DIR"]
        self.base_port = int(self.env["RINGGATE_CLUSTER_PORT"])
        addrs = self.env["RINGGATE_CLUSTER_NODES"].split(",")
        socks = self.env["RINGGATE_CLUSTER_SOCKETS"].split(",")
        self.nodes = {
            i: Node(i, a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1]), s)
            for i, (a, s) in enumerate(zip(addrs, socks), start=1)
        }
        self.app_user = self.env["RINGGATE_CLUSTER_APP_USER"]
        self.app_password = self.env["RINGGATE_CLUSTER_APP_PASSWORD"]
        self.monitor_user = self.env["RINGGATE_CLUSTER_MONITOR_USER"]
        self.monitor_password = self.env["RINGGATE_CLUSTER_MONITOR_PASSWORD"]
        self.db = self.env["RINGGATE_CLUSTER_DB"]

    # ---- the script ----

    def script(self, *args, check=True):
        """Runs scripts/mariadb-cluster.sh with args on this set; a failure raises with its
        output."""
        cmd = [str(SCRIPT), *map(str, args)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT, env=self._env)
        if check and r.returncode != 0:
            raise AssertionError(
                f"mariadb-cluster.sh {' '.join(map(str, args))} exited {r.returncode}:\n{r.stdout}{r.stderr}"
            )
        return r

    def start(self):
        self.script("start")

    def stop(self):
        self.script("stop")

    def running(self):
        """True when all three nodes answer."""
        return self.script("status", check=False).returncode == 0

    def status(self):
        return self.script("status", check=False).stdout

    def heal(self):
        """Every node running, every replica applying and caught up, node 1 the primary. When
        the set cannot be healed (a killed primary had written what no replica received, so it
        cannot follow the new one: error 1236), a fresh set replaces it."""
        r = self.script("heal", check=False)
        if r.returncode != 0:
            print(f"heal failed, starting a fresh set:\n{r.stderr}")
            self.stop()
            self.start()

    def primary(self):
        return int(self.script("primary").stdout)

    def replicas(self):
        p = self.primary()
        return [n for n in self.nodes if n != p]

    def kill(self, n):
        """kill -9 node n; returns when its process is gone."""
        self.script("kill", n)

    def kill_primary(self):
        """kill -9 the primary; returns its number."""
        return int(self.script("kill-primary").stdout)

    def promote(self, n=None):
        """After the primary died: drains the replicas, promotes n (default: the most advanced
        one), repoints the others; returns the new primary."""
        return int(self.script("promote", *([n] if n else [])).stdout)

    def switchover(self, n):
        self.script("switchover", n)

    def lag(self, n, on):
        """Stops (on) or starts replica n's SQL thread: it keeps receiving and applies nothing."""
        self.script("lag", n, "on" if on else "off")

    def restart(self, n):
        self.script("restart", n)

    def pid(self, n):
        """Node n's server pid from its pid file, or None."""
        try:
            with open(os.path.join(self.dir, f"n{n}", "mysqld.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    # ---- connections ----

    def root(self, n, **kw):
        """root over node n's socket (autocommit): for the harness's own reads and waits."""
        kw.setdefault("connect_timeout", 10)
        return pymysql.connect(unix_socket=self.nodes[n].socket, user="root", autocommit=True, **kw)

    def app(self, n, **kw):
        """The app account over TCP (ALL on the test database, nothing global)."""
        return self._tcp(n, self.app_user, self.app_password, database=self.db, **kw)

    def monitor(self, n, **kw):
        """The monitor account over TCP (SLAVE MONITOR, BINLOG MONITOR)."""
        return self._tcp(n, self.monitor_user, self.monitor_password, **kw)

    def _tcp(self, n, user, password, **kw):
        kw.setdefault("connect_timeout", 10)
        kw.setdefault("autocommit", True)
        node = self.nodes[n]
        return pymysql.connect(host=node.host, port=node.port, user=user, password=password, **kw)

    # ---- reading a node ----

    def _one(self, n, sql, args=None):
        with self.root(n) as c, c.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone()

    def status_counters(self, n, *names):
        """{name: int} from node n's SHOW GLOBAL STATUS (Com_select, Com_insert, ...)."""
        with self.root(n) as c, c.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS")
            have = {k.lower(): v for k, v in cur.fetchall()}
        return {name: int(have[name.lower()]) for name in names}

    def user_stats(self, n, user=None):
        """Node n's USER_STATISTICS row for user (default: the app account)
        as a dict with lower-case keys (select_commands, update_commands, other_commands,
        rows_inserted, ...), or zeros before the account's first command. Replication's
        applier is not an account, so this counts what clients sent the node."""
        user = user or self.app_user
        # SHOW, not SELECT FROM information_schema: the read must not move Com_select.
        with self.root(n) as c, c.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW USER_STATISTICS")
            rows = cur.fetchall()
            columns = [d[0].lower() for d in cur.description if d[0] != "User"]
        row = next((r for r in rows if r["User"] == user), None)
        if row is None:
            return dict.fromkeys(columns, 0)
        return {k.lower(): v for k, v in row.items() if k != "User"}

    def variable(self, n, name):
        """A global variable of node n, read without a SELECT."""
        row = self._one(n, "SHOW GLOBAL VARIABLES LIKE %s", (name,))
        return row[1] if row else None

    def gtid_binlog_pos(self, n):
        return self.variable(n, "gtid_binlog_pos")

    def gtid_slave_pos(self, n):
        return self.variable(n, "gtid_slave_pos")

    def read_only(self, n):
        return self.variable(n, "read_only") == "ON"

    def slave_status(self, n):
        """Node n's SHOW ALL SLAVES STATUS row as a dict, or None on a node that follows nobody."""
        with self.root(n) as c, c.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW ALL SLAVES STATUS")
            return cur.fetchone()

    def wait_gtid(self, n, pos, timeout=WAIT_SECONDS):
        """MASTER_GTID_WAIT(pos, timeout) on replica n: 0 applied, -1 timed out."""
        return int(self._one(n, "SELECT MASTER_GTID_WAIT(%s, %s)", (pos, timeout))[0])

    def wait_replicated(self, timeout=WAIT_SECONDS):
        """Waits until every running replica applied the primary's binlog position; returns it."""
        p = self.primary()
        pos = self.gtid_binlog_pos(p)
        for n in self.replicas():
            if self.pid(n) is not None:
                got = self.wait_gtid(n, pos, timeout)
                assert got == 0, f"node {n} did not apply {pos} within {timeout}s:\n{self.status()}"
        return pos


def session_cluster():
    """The `cluster` fixture's body: the set `make test-cluster` started (RINGGATE_CLUSTER_NODES
    in the environment) or one already running, healed and left running; else a fresh one,
    stopped at the end of the session."""
    c = Cluster()
    ours = not (os.environ.get("RINGGATE_CLUSTER_NODES") or c.running())
    t = time.monotonic()
    if ours:
        c.start()
        print(f"\nreplication set started in {time.monotonic() - t:.1f}s")
    else:
        c.heal()
    try:
        yield c
    finally:
        if ours:
            c.stop()


def wait_for_ringgate(what, cond, log_path, timeout):
    """Polls cond() until it is true (a connection or query error counts as not yet), or fails
    the test with the end of ringgate's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except (OSError, pymysql.err.MySQLError):
            pass
        time.sleep(0.1)
    import pytest
    pytest.fail(f"timed out waiting for {what}; log:\n{log_path.read_text()[-4000:]}")



class Fronted:
    """A ringgate in front of the set's three nodes: transaction pooling, the monitor every
    200 ms, metrics on a port of its own. `extra`: more flags; `buffers`: the read mode
    (default: RINGGATE_READ_BUFFERS, else fixed); `backend_suffix(n)`: what follows node n's
    address in its --backend (`,weight=3`)."""

    def __init__(self, cluster, workdir, *extra, workers=2, buffers=None,
                 backend_suffix=lambda n: "", read_timeout=60, wait_timeout=WAIT_SECONDS):
        from conftest import free_port, launch, ringgate_bin
        self.cluster = cluster
        self.read_timeout = read_timeout
        self.wait_timeout = wait_timeout
        self.mode = buffers or os.environ.get("RINGGATE_READ_BUFFERS", "fixed")
        users = Path(workdir) / "users.json"
        users.write_text(f'{{"{cluster.app_user}": [{{"Password": "{cluster.app_password}"}}]}}')
        self.port = free_port()
        self.metrics_port = free_port()
        self.args = [str(ringgate_bin()), "--users-file", str(users), "--workers", str(workers),
                     "--listen", f"127.0.0.1:{self.port}",
                     "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
                     "--monitor-user", cluster.monitor_user, "--monitor-interval", "200ms",
                     "--read-buffers", self.mode, *extra]
        for n, node in cluster.nodes.items():
            self.args += ["--backend", f"{node.host}:{node.port}{backend_suffix(n)}"]
        env = dict(os.environ, RINGGATE_MONITOR_PASSWORD=cluster.monitor_password)
        self.log = Path(workdir) / "ringgate.log"
        self.proc = launch(self.args, self.log, env)

    def connect(self, **kw):
        return pymysql.connect(host="127.0.0.1", port=self.port, user=self.cluster.app_user,
                               password=self.cluster.app_password, database=self.cluster.db,
                               autocommit=True, connect_timeout=10,
                               read_timeout=self.read_timeout, **kw)

    def metrics(self):
        from conftest import parse_metrics
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return parse_metrics(r.read().decode())

    def wait(self, what, cond, timeout=None):
        wait_for_ringgate(what, cond, self.log, timeout or self.wait_timeout)

    def assert_settled(self, timeout=10.0):
        """Once every client has gone: the Proxy class's leak checks (no client, no busy
        backend connection, every read buffer, slot and descriptor back) in this ringgate's
        mode."""
        from conftest import Metrics, Proxy
        deadline = time.monotonic() + timeout
        while True:
            m = Metrics(self.metrics())
            problems = Proxy.settle_problems(self, m, None, 0)
            if not problems:
                return m
            if time.monotonic() > deadline:
                raise AssertionError("ringgate did not settle:\n  - " + "\n  - ".join(problems)
                                     + "\n" + m.dump() + "\nlog:\n" + self.log.read_text()[-3000:])
            time.sleep(0.1)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def aim_proxy_at_primary(cluster, monkeypatch):
    """Points conftest's Proxy class (its backend and account) at the set's primary; returns it."""
    primary = cluster.nodes[cluster.primary()]
    monkeypatch.setenv("RINGGATE_TEST_MYSQL_HOST", primary.host)
    monkeypatch.setenv("RINGGATE_TEST_MYSQL_PORT", str(primary.port))
    monkeypatch.setenv("RINGGATE_TEST_BACKEND_USER", cluster.app_user)
    monkeypatch.setenv("RINGGATE_TEST_BACKEND_PASSWORD", cluster.app_password)
    return primary


def proxy_fronting(make_proxy, cluster, monkeypatch, *extra, pooling=None):
    """A Proxy (conftest's, with its leak checks) in front of the three nodes: the primary is its
    own backend, the others are added, with the monitor every 200 ms (the monitor's password is
    for this ringgate alone: one without --monitor-user refuses it)."""
    others = [a for n in cluster.nodes.values() if n.n != cluster.primary()
              for a in ("--backend", f"{n.host}:{n.port}")]
    with monkeypatch.context() as m:
        m.setenv("RINGGATE_MONITOR_PASSWORD", cluster.monitor_password)
        return make_proxy(pooling=pooling, extra_args=[
            *others, "--monitor-user", cluster.monitor_user, "--monitor-interval", "200ms", *extra])
