"""Fixtures for ringgate's Python end-to-end tests.

The tests talk to the real ringgate binary ($RINGGATE_BIN, else $CARGO_TARGET_DIR/debug/ringgate,
else target/debug/ringgate) in front
of the private MariaDB started by scripts/mariadb-sandbox.sh; `make test` starts it and exports
the RINGGATE_TEST_* variables. Every test that uses the `proxy` or `make_proxy` fixture runs
three times, with `--read-buffers fixed`, `heap` and `ring`, and ends with the leak checks of
Proxy.assert_settled() (in ring mode: every provided-ring buffer is back).
"""

import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import mysql.connector
import pymysql
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
USERS_FILE = REPO_ROOT / "tests" / "users.json"
APP_USER = "app"
APP_PASSWORD = "app-secret"
HASHED_USER = "hashed"
HASHED_PASSWORD = "hashed-secret"
TEST_DB = "ringgate_test"
READY_TIMEOUT = 10.0
SETTLE_TIMEOUT = 8.0


def _required_env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(
            f"environment variable {name} is not set: these tests need the private MariaDB "
            "sandbox. Run `make test` (or `scripts/mariadb-sandbox.sh start && eval "
            '"$(scripts/mariadb-sandbox.sh env)"` before pytest).',
            pytrace=False,
        )
    return value


def backend_env():
    return {
        "host": os.environ.get("RINGGATE_TEST_MYSQL_HOST", "127.0.0.1"),
        "port": int(_required_env("RINGGATE_TEST_MYSQL_PORT")),
        "user": _required_env("RINGGATE_TEST_BACKEND_USER"),
        "password": _required_env("RINGGATE_TEST_BACKEND_PASSWORD"),
    }


def ringgate_bin():
    target_dir = Path(os.environ.get("CARGO_TARGET_DIR") or REPO_ROOT / "target")
    if not target_dir.is_absolute():
        target_dir = REPO_ROOT / target_dir
    path = Path(os.environ.get("RINGGATE_BIN") or target_dir / "debug" / "ringgate")
    if not path.is_file():
        pytest.fail(f"ringgate binary {path} not found: run `cargo build` (make test does)", pytrace=False)
    return path


def run_ringgate(*args, env=None, timeout=30):
    """Runs the ringgate binary with `args` to its end (`check`, `--print-config`, a start that
    must fail); returns CompletedProcess (text)."""
    return subprocess.run([str(ringgate_bin()), *args], capture_output=True, text=True, timeout=timeout, env=env)


def launch(cmd, log_path, env):
    """Starts `cmd` (the ringgate binary and its arguments) in the background, its stdout and
    stderr in log_path: the one place a long-running ringgate is started (Proxy, and the
    config-file-only start)."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)


def mariadb_cli():
    path = shutil.which("mariadb")
    if not path:
        pytest.fail("the `mariadb` client is not installed: run scripts/ensure-deps.sh", pytrace=False)
    return path


NODE_DIR = REPO_ROOT / "tests" / "node"


def node_with_mysql2():
    """The `node` binary, with node mysql2 installed in tests/node. scripts/ensure-deps.sh
    installs both, so a missing one is a failed install step, not a reason to skip."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: run scripts/ensure-deps.sh", pytrace=False)
    if not (NODE_DIR / "node_modules" / "mysql2").is_dir():
        pytest.fail("mysql2 is not installed in tests/node: run scripts/ensure-deps.sh (npm ci)", pytrace=False)
    return node


# Below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default):
# a port from bind(0) comes from that range, and so does every outgoing connection's local port,
# so a proxy or MariaDB started (or restarted) on it a moment later could find it taken by some
# client's connection. Below the range only another test's pick can collide, and the bind
# check catches a port in use.
_TEST_PORTS = range(20000, 32000)
_port_rng = random.Random(os.getpid() ^ time.monotonic_ns())


def free_port():
    for _ in range(200):
        port = _port_rng.choice(_TEST_PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# Prometheus text format
# --------------------------------------------------------------------------------------------

_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _normalize_key(name, labels_text):
    labels = sorted((m.group(1), m.group(2)) for m in _LABEL_RE.finditer(labels_text or ""))
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def parse_metrics(text):
    """{'name' or 'name{k="v",...}' (labels sorted): float}"""
    samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            # the closing brace outside quotes
            in_q = False
            esc = False
            end = None
            for i, c in enumerate(rest):
                if esc:
                    esc = False
                elif c == "\\" and in_q:
                    esc = True
                elif c == '"':
                    in_q = not in_q
                elif c == "}" and not in_q:
                    end = i
                    break
            if end is None:
                continue
            key = _normalize_key(name.strip(), rest[:end])
            value = rest[end + 1 :].split()
        else:
            parts = line.split()
            key, value = parts[0], parts[1:]
        if not value:
            continue
        v = value[0]
        samples[key] = float({"+Inf": "inf", "-Inf": "-inf", "NaN": "nan"}.get(v, v))
    return samples


class Metrics(dict):
    def get_metric(self, key):
        if "{" in key:
            name, rest = key.split("{", 1)
            key = _normalize_key(name, rest.rstrip("}"))
        if key not in self:
            raise AssertionError(f"metric {key} not found; ringgate exports:\n{self.dump()}")
        return self[key]

    __call__ = get_metric

    def sum_of(self, name):
        """The sum of metric `name` over all its label sets (0 when it has none yet)."""
        return sum(v for k, v in self.items() if k == name or k.startswith(name + "{"))

    def dump(self):
        return "\n".join(f"{k} {v}" for k, v in sorted(self.items()))


def http_get(port, path="/metrics", timeout=5.0):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    raw = b"".join(chunks).decode("utf-8", "replace")
    head, _, body = raw.partition("\r\n\r\n")
    status = int(head.split()[1])
    return status, body


# --------------------------------------------------------------------------------------------
# The proxy process
# --------------------------------------------------------------------------------------------


class Proxy:
    def __init__(
        self,
        mode,
        allow_local_infile=False,
        workers=2,
        extra_args=(),
        users_file=USERS_FILE,
        passthrough=False,
        pooling=None,
        backend=None,
        backend_user=None,
        backend_password=None,
        read_buffer_size=16384,
    ):
        self.mode = mode
        # --pooling: the test's own choice, else RINGGATE_TEST_POOLING (which runs the whole
        # suite in one mode), else ringgate's default, given as no flag at all so that the
        # default itself is what runs. `pooling` is the mode in force either way.
        self.pooling_flag = pooling or os.environ.get("RINGGATE_TEST_POOLING") or None
        self.pooling = self.pooling_flag or "transaction"
        self.workers = workers
        self.backend = backend_env()
        # Another server than the sandbox (a second ringgate in front of it), with its own
        # --backend-user password.
        if backend is not None:
            self.backend["host"], self.backend["port"] = backend
        if backend_user is not None:
            self.backend["user"] = backend_user
        if backend_password is not None:
            self.backend["password"] = backend_password
        self.bin = ringgate_bin()
        self.dir = Path(tempfile.mkdtemp(prefix=f"ringgate-pytest-{mode}-"))
        self.stderr_path = self.dir / "ringgate.stderr"
        self.proc = None
        last = None
        for _ in range(3):  # a free port may be taken between probe and bind
            self.port = free_port()
            self.metrics_port = free_port()
            args = [
                str(self.bin),
                "--listen", f"127.0.0.1:{self.port}",
                "--workers", str(workers),
                "--backend", f"{self.backend['host']}:{self.backend['port']}",
                "--users-file", str(users_file),
                "--read-buffers", mode,
                # None: leave ringgate's default (and its TLS sizing) alone.
                *(("--read-buffer-size", str(read_buffer_size)) if read_buffer_size else ()),
                "--read-buffer-count", "1024",
                "--max-connections", "1000",
                "--backend-pool-size", "4",
                "--backend-max-connections", "500",
                "--backend-wait-timeout", "10s",
                "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
            ]
            if allow_local_infile:
                args.append("--allow-local-infile")
            if self.pooling_flag:
                args += ["--pooling", self.pooling_flag]
            # The suites' users (tests/users.json) deliberately do not exist on the backend: they
            # run as the sandbox's `ringgate` account. Passthrough tests bring their own users.
            if passthrough:
                args += ["--backend-identity", "passthrough"]
            else:
                args += ["--backend-identity", "shared", "--backend-user", self.backend["user"]]
            args.extend(extra_args)
            self.args = args
            env = dict(os.environ)
            if passthrough:
                env.pop("RINGGATE_BACKEND_PASSWORD", None)
            else:
                env["RINGGATE_BACKEND_PASSWORD"] = self.backend["password"]
            env.setdefault("RUST_LOG", "info")
            self.proc = launch(args, self.stderr_path, env)
            last = self._wait_ready()
            if last is None:
                return
            self.kill()
            if "Address already in use" not in self.stderr() and "already listens on" not in self.stderr():
                break
        raise AssertionError(
            f"ringgate did not start: {last}\n--- command: {' '.join(self.args)}\n"
            f"--- ringgate stderr ---\n{self.stderr()}"
        )

    def _wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT
        listening = False
        last = "not tried"
        while True:
            if self.proc.poll() is not None:
                return f"ringgate exited during start-up with {self.proc.returncode}"
            if not listening:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                    listening = True
                except OSError as e:
                    last = f"listen port {self.port}: {e}"
            if listening:
                try:
                    status, body = http_get(self.metrics_port)
                    if status == 200:
                        return None
                    last = f"GET /metrics -> {status}: {body[:200]}"
                except (OSError, ValueError, IndexError) as e:
                    last = f"GET /metrics: {e}"
            if time.monotonic() > deadline:
                return f"not ready within {READY_TIMEOUT}s (last: {last})"
            time.sleep(0.05)

    def stderr(self):
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_log(self, text, count=1, timeout=10.0):
        """Waits until ringgate's log holds `text` `count` times (a reload or a refusal it
        reports)."""
        deadline = time.monotonic() + timeout
        while self.stderr().count(text) < count:
            assert time.monotonic() < deadline, f"{text!r} not logged {count} times:\n{self.stderr_tail()}"
            time.sleep(0.05)

    def stderr_tail(self, n=50):
        return "\n".join(self.stderr().splitlines()[-n:])

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def assert_running(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"ringgate died ({self.proc.returncode}):\n{self.stderr_tail(80)}")

    # ---- clients ----

    def connect(self, user=APP_USER, password=APP_PASSWORD, **kw):
        kw.setdefault("connect_timeout", 10)
        kw.setdefault("read_timeout", 120)
        kw.setdefault("write_timeout", 120)
        return pymysql.connect(host="127.0.0.1", port=self.port, user=user, password=password, **kw)

    def connector(self, user=APP_USER, password=APP_PASSWORD, **kw):
        """A mysql-connector-python connection to the proxy (its pure-Python protocol unless
        use_pure=False)."""
        kw.setdefault("use_pure", True)
        return mysql.connector.connect(host="127.0.0.1", port=self.port, user=user, password=password, **kw)

    def cli_command(self, *args, user=APP_USER, password=APP_PASSWORD):
        """The mariadb CLI's command line against the proxy as `user`, ending with args."""
        return [
            mariadb_cli(),
            "--no-defaults",
            "--protocol=TCP",
            "-h127.0.0.1",
            f"-P{self.port}",
            f"-u{user}",
            f"-p{password}",
            *args,
        ]

    def cli(self, *args, check=True, timeout=60, input=None):
        """Runs the mariadb CLI against the proxy as `app`; returns CompletedProcess (text)."""
        cmd = self.cli_command(*args)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd)} failed ({r.returncode}):\nstdout: {r.stdout}\nstderr: {r.stderr}\n"
                f"--- ringgate stderr ---\n{self.stderr_tail()}"
            )
        return r

    # ---- metrics ----

    def metrics(self):
        status, body = http_get(self.metrics_port)
        assert status == 200, f"GET /metrics -> {status}: {body[:500]}"
        return Metrics(parse_metrics(body))

    def wait_metrics(self, want, timeout=10.0):
        """Polls /metrics until each metric of `want` ({key: value}) has its value; returns the
        metrics then, or fails naming those that differ."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            off = {k: m(k) for k, v in want.items() if m(k) != v}
            if not off:
                return m
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"metrics not as wanted within {timeout}s: want {want}, still {off}\n"
                    f"--- ringgate stderr (tail) ---\n{self.stderr_tail(40)}"
                )
            time.sleep(0.05)

    def connections_total(self):
        return self.metrics()("ringgate_client_connections_total")

    def settle_problems(self, m, baseline, min_new):
        p = []
        client_in_use = m('ringgate_read_buffers_in_use{owner="client"}')
        backend_in_use = m('ringgate_read_buffers_in_use{owner="backend"}')
        idle = m('ringgate_backend_connections{state="idle"}')
        busy = m('ringgate_backend_connections{state="busy"}')
        clients = m("ringgate_client_connections")
        total_conns = m("ringgate_client_connections_total")
        fallbacks = m("ringgate_read_buffer_heap_fallbacks_total")
        if client_in_use != 0:
            p.append(f'read_buffers_in_use{{owner="client"}} = {client_in_use}, want 0')
        if busy != 0:
            p.append(f'backend_connections{{state="busy"}} = {busy}, want 0')
        # Ring mode: a connection holds its own buffer only while it uses it, so an idle
        # backend connection holds none; nor does fixed mode's (it waits with a poll) unless
        # --hold-idle-slots keeps the slot for the connection's life.
        holds = self.mode == "heap" or (
            self.mode == "fixed" and "--hold-idle-slots" in self.args
        )
        backend_want = idle + busy if holds else 0
        if backend_in_use != backend_want:
            p.append(
                f'read_buffers_in_use{{owner="backend"}} = {backend_in_use}, want {backend_want} '
                f"(idle+busy = {idle + busy})"
            )
        if clients != 0:
            p.append(f"client_connections = {clients}, want 0")
        # Every client's direct descriptor was closed (IORING_OP_CLOSE).
        direct = m("ringgate_direct_descriptors_in_use")
        if direct != 0:
            p.append(f"direct_descriptors_in_use = {direct}, want 0")
        # A large result's buffer goes back before the connection idles (--large-read-size).
        large = m("ringgate_read_buffer_large_in_use")
        if large != 0:
            p.append(f"read_buffer_large_in_use = {large}, want 0")
        if baseline is not None and total_conns - baseline < min_new:
            p.append(
                f"client_connections_total grew by {total_conns - baseline} (from {baseline} to "
                f"{total_conns}), want >= {min_new}: did the traffic go through the proxy?"
            )
        if self.mode == "fixed":
            total = m('ringgate_read_buffers_total{mode="fixed"}')
            free = m("ringgate_read_buffers_free")
            if total <= 0:
                p.append(f'read_buffers_total{{mode="fixed"}} = {total}, want > 0')
            if free > total:
                p.append(f"read_buffers_free = {free} > total = {total}")
            # in_use counts slots and fallback heap buffers alike: the heap buffers held now are
            # in_use - (total - free), between 0 (else a slot leaked) and the fallbacks so far
            # (else a slot was freed twice). With no fallback: free + in_use == total.
            heap_held = client_in_use + backend_in_use - (total - free)
            if heap_held < 0 or heap_held > fallbacks:
                p.append(
                    f"free ({free}) + in_use client ({client_in_use}) + in_use backend "
                    f"({backend_in_use}) - total ({total}) = {heap_held} heap buffers held, "
                    f"want 0..{fallbacks} (heap fallbacks so far)"
                )
        elif self.mode == "ring":
            ring = m("ringgate_read_buffer_ring_buffers")
            in_use = m("ringgate_read_buffer_ring_in_use")
            if ring <= 0:
                p.append(f"read_buffer_ring_buffers = {ring}, want > 0 (did ring mode fall back?)")
            if in_use != 0:
                p.append(f"read_buffer_ring_in_use = {in_use}, want 0")
        else:
            total = m('ringgate_read_buffers_total{mode="heap"}')
            if total != 0:
                p.append(f'read_buffers_total{{mode="heap"}} = {total}, want 0')
        return p

    def assert_settled(self, baseline=None, min_new=0, timeout=SETTLE_TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            self.assert_running()
            m = self.metrics()
            problems = self.settle_problems(m, baseline, min_new)
            if not problems:
                return m
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"ringgate ({self.mode} mode) did not settle within {timeout}s:\n  - "
                    + "\n  - ".join(problems)
                    + f"\n--- metrics ---\n{m.dump()}\n--- ringgate stderr (tail) ---\n{self.stderr_tail(40)}"
                )
            time.sleep(0.1)


MODES = ["fixed", "heap", "ring"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "read_buffers(*modes): run only in these --read-buffers modes, for a file whose behaviour "
        "does not depend on the buffers (or exists in only some of them)",
    )


def pytest_generate_tests(metafunc):
    """`mode`: every test that uses it runs once per read-buffer mode, or in the modes its
    read_buffers marker names (pytestmark = pytest.mark.read_buffers("fixed"))."""
    if "mode" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("read_buffers")
        metafunc.parametrize("mode", list(marker.args) if marker else MODES)


@pytest.fixture
def make_proxy(mode):
    """Factory: make_proxy(**kw) starts a ringgate in this test's mode. Every proxy it started
    is checked for leaks (assert_settled) and killed after the test."""
    started = []

    def factory(**kw):
        p = Proxy(mode, **kw)
        started.append(p)
        return p

    yield factory
    errors = []
    # Newest first: a proxy started later may be a client of an earlier one (a ringgate in front
    # of another), whose sessions end only when it stops.
    for p in reversed(started):
        try:
            p.assert_settled()
        except AssertionError as e:
            errors.append(str(e))
        finally:
            p.close()
    if errors:
        pytest.fail("\n\n".join(errors), pytrace=False)


@pytest.fixture
def proxy(make_proxy):
    return make_proxy()


# --------------------------------------------------------------------------------------------
# Users files with real sandbox accounts (passthrough identity)
# --------------------------------------------------------------------------------------------

# The account every proxy user of same_account_users but `admin` logs in to the backend as.
SHARED_ACCOUNT_PASSWORD = "kscope-shared-pw"


@pytest.fixture
def same_account_users(tmp_path, mode):
    """Passthrough identity with two proxy users, tenant_a and tenant_b, mapped to one backend
    account (BackendUser), and a third, `admin`, mapped to an account with CONNECTION ADMIN:
    (users file, the shared account's name)."""
    from helpers import sandbox_account, write_users_file  # helpers imports this module

    acct, adm, adm_pw = f"kscope_shared_{mode}", f"kscope_admin_{mode}", "kscope-admin-pw"
    with sandbox_account(acct, SHARED_ACCOUNT_PASSWORD, grants=()), sandbox_account(
        adm, adm_pw, grants=("CONNECTION ADMIN ON *.*",)
    ):
        shared = {"BackendUser": acct, "BackendPassword": SHARED_ACCOUNT_PASSWORD}
        users = write_users_file(
            tmp_path / "users.json",
            {
                "tenant_a": [{"Password": "a-pw", **shared}],
                "tenant_b": [{"Password": "b-pw", **shared}],
                "admin": [{"Password": "adm-pw", "BackendUser": adm, "BackendPassword": adm_pw}],
            },
        )
        yield users, acct


@pytest.fixture
def two_users(tmp_path):
    """Two proxy users, `a` and `b`, each its own sandbox account with the same password
    (passthrough identity): ({"a": (user, password), "b": ...}, users file)."""
    from helpers import passthrough_users  # helpers imports this module

    users = {"a": ("twouser_a", "twouser-a-secret"), "b": ("twouser_b", "twouser-b-secret")}
    with passthrough_users(tmp_path / "users.json", users.values()) as path:
        yield users, path


# --------------------------------------------------------------------------------------------
# The three-node replication set (tests/python/cluster.py)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def cluster():
    """A running primary and two GTID replicas (scripts/mariadb-cluster.sh), node 1 the
    primary at the start. A test that kills, promotes, switches over or lags restores that
    with cluster.heal() when it ends."""
    from cluster import session_cluster  # cluster imports this module

    yield from session_cluster()
