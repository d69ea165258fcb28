"""Helpers shared by several test modules (fixtures stay in conftest.py, the hand-made
protocol in mysql_wire.py).

Kept in one place so that a fix (a longer join, a better failure message) reaches every
suite that uses them, instead of one copy of several.
"""

import contextlib
import json
import os
import socket
import subprocess
import threading
import time

import pymysql

from conftest import NODE_DIR, TEST_DB, backend_env, node_with_mysql2

# MySQL 8's caching_sha2 verifier ($A$005$ + salt + sha256-crypt digest) of FOOBAR_PASSWORD, in
# hex: TiDB's test vector, made by MySQL, not by ringgate.
FOOBAR_VERIFIER = (
    "0x24412430303524031A69251C34295C4B35167C7F1E5A7B63091349503974624D34504B5A424679354856336868"
    "686F52485A736E4A733368786E427575516C73446469496537"
)
FOOBAR_PASSWORD = "foobar"

# The connection ids ringgate gives its clients start here; a worker's index is an id's
# residue modulo the number of workers.
PROXY_ID_BASE = 1 << 31

BUSY_BACKENDS = 'ringgate_backend_connections{state="busy"}'
IDLE_BACKENDS = 'ringgate_backend_connections{state="idle"}'
CLIENTS = "ringgate_client_connections"
ONE_BACKEND = ("--backend-max-connections", "1", "--backend-pool-size", "1")


# --------------------------------------------------------------------------------------------
# A ringgate of a given shape, and what it reports
# --------------------------------------------------------------------------------------------


def one_backend_proxy(make_proxy, extra=(), **kw):
    """A ringgate with one worker and one backend connection, which every session gets in
    turn: what one client leaves on it, the next one would see."""
    return make_proxy(workers=1, extra_args=[*ONE_BACKEND, *extra], **kw)


def tx_proxy(make_proxy, backends=4, workers=1, extra=()):
    """Transaction pooling on at most `backends` backend connections (up to 4 kept warm), so
    that sessions move between connections all the time."""
    return make_proxy(
        pooling="transaction",
        workers=workers,
        extra_args=[
            "--backend-max-connections", str(backends),
            "--backend-pool-size", str(min(backends, 4)),
            "--max-connections", "2000",
            *extra,
        ],
    )


def capped_passthrough_proxy(make_proxy, users_file, backends, wait_timeout, *flags, pooling="transaction"):
    """One worker, passthrough identity, at most `backends` backend connections and none kept
    warm: a session that finds them all held waits up to `wait_timeout` (a duration)."""
    return make_proxy(
        pooling=pooling,
        workers=1,
        passthrough=True,
        users_file=users_file,
        extra_args=[
            "--backend-max-connections", str(backends),
            "--backend-pool-size", "0",
            "--backend-wait-timeout", wait_timeout,
            *flags,
        ],
    )


def worker_of(conn, workers=2):
    """The index of the worker that serves `conn` (a client of ringgate)."""
    return (conn.thread_id() - PROXY_ID_BASE) % workers


def wait_idle(proxy, timeout=10):
    """The metrics once no backend connection is busy (every statement answered and released)."""
    return proxy.wait_metrics({BUSY_BACKENDS: 0}, timeout)


def client_statements_settle(proxy, timeout=5.0):
    """ringgate_client_prepared_statements once the sessions have handled what their clients
    sent last (a client's final COM_STMT_CLOSE and COM_QUIT get no answer to wait for)."""
    deadline = time.monotonic() + timeout
    while True:
        n = proxy.metrics()["ringgate_client_prepared_statements"]
        if n == 0 or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


def client_auths(proxy, path):
    """How many client logins took the authentication path `path` (ringgate_client_auth_total)."""
    return proxy.metrics()(f'ringgate_client_auth_total{{path="{path}"}}')


# --------------------------------------------------------------------------------------------
# The sandbox server, seen from the side
# --------------------------------------------------------------------------------------------


def direct(user=None, password=None, **kw):
    """A PyMySQL connection straight to the sandbox MariaDB (no ringgate), as its admin unless
    `user` is given, in autocommit: for setting up schemas and watching the server from the
    side."""
    b = backend_env()
    kw = {"autocommit": True, "connect_timeout": 10, "read_timeout": 60, **kw}
    if user is None:
        user, password = b["user"], b["password"]
    return pymysql.connect(host=b["host"], port=b["port"], user=user, password=password, **kw)


def value(conn, sql, args=None):
    """The first column of the first row `sql` returns, or None when it returns no row."""
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
    return None if row is None else row[0]


def current_user(conn):
    """The account the server runs `conn`'s session as, without its host."""
    return first_row(conn, "SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1)")[0]


def first_row(conn, sql, args=None):
    """The first row `sql` returns (None when none), from a PyMySQL or a mysql-connector
    connection alike."""
    cur = conn.cursor()
    cur.execute(sql, args)
    row = cur.fetchone()
    cur.close()
    return row


def rows(conn, sql, args=None):
    """Every row `sql` returns."""
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def run(conn, *sqls):
    """Runs each statement in turn, reading no answer but the server's OK or error."""
    with conn.cursor() as cur:
        for sql in sqls:
            cur.execute(sql)


def backend_statement(pattern, timeout=10.0):
    """(thread id, query id) of a server thread running a statement LIKE `pattern`, read
    directly from the server's processlist (not through ringgate), waiting up to `timeout`
    seconds for one to appear; None if none does."""
    deadline = time.monotonic() + timeout
    with direct() as d, d.cursor() as cur:
        while True:
            cur.execute(
                "SELECT ID, QUERY_ID FROM information_schema.PROCESSLIST WHERE INFO LIKE %s AND ID <> CONNECTION_ID()",
                (pattern,),
            )
            row = cur.fetchone()
            if row is not None or time.monotonic() >= deadline:
                return row
            time.sleep(0.05)


def wait_backend_statement(pattern, timeout=10.0):
    """backend_statement, failing when no server thread runs such a statement within `timeout`:
    a KILL sent after it cannot race the statement's start."""
    running = backend_statement(pattern, timeout)
    assert running is not None, f"{pattern!r} never ran on the backend"
    return running


def backend_statements(pattern):
    """How many server threads run a statement LIKE `pattern` now (the server's processlist)."""
    with direct() as d:
        return value(
            d,
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE %s AND ID <> CONNECTION_ID()",
            (pattern,),
        )


# --------------------------------------------------------------------------------------------
# Accounts, users files and keys
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def sandbox_account(user, password, grants=(f"ALL ON {TEST_DB}.*",)):
    """A MariaDB account `user`@'%' (mysql_native_password) with `grants` (privileges ON
    objects), dropped again afterwards: for passthrough identity, where ringgate logs in to
    the backend as it."""
    with direct() as root:
        with root.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {TEST_DB}")
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
            cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s", (password,))
            for grant in grants:
                cur.execute(f"GRANT {grant} TO '{user}'@'%'")
        try:
            yield user
        finally:
            with root.cursor() as cur:
                cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


@contextlib.contextmanager
def passthrough_users(path, accounts):
    """For each (user, password) of `accounts`, a sandbox account (sandbox_account) and a users
    file entry with that password, written at `path`: yields the path."""
    with contextlib.ExitStack() as stack:
        for user, password in accounts:
            stack.enter_context(sandbox_account(user, password))
        yield write_users_file(path, {user: [{"Password": password}] for user, password in accounts})


def write_users_file(path, entries):
    """A users file at `path`: {proxy user: [entry, ...]}."""
    path.write_text(json.dumps(entries))
    return path


def rsa_key(directory, name="private_key.pem"):
    """An RSA key pair made by openssl in `directory` (for --rsa-key): (private, public) paths."""
    key = directory / name
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    public = directory / (name + ".pub")
    subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(public)], check=True,
                   capture_output=True)
    return key, public


# --------------------------------------------------------------------------------------------
# Threads and waiting
# --------------------------------------------------------------------------------------------


def wait_until(what, cond, timeout=10.0, proxy=None):
    """Polls cond() until it holds; fails with `what` (and ringgate's stderr when `proxy`)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            tail = f"\n{proxy.stderr_tail(40)}" if proxy is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for: {what}{tail}")
        time.sleep(0.05)


def in_thread(fn, what="the statement"):
    """Runs fn() in a thread; returns join(timeout=30), which waits for it and returns
    (result, exception), failing if `what` did not return in time."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except Exception as e:  # noqa: BLE001 - the test inspects it
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()

    def join(timeout=30):
        t.join(timeout)
        assert not t.is_alive(), f"{what} did not return"
        return box.get("result"), box.get("error")

    return join


def run_threads(n, fn, timeout=300):
    """Runs fn(0) .. fn(n-1) in n threads at once and fails with the first errors, if any."""
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
        t.join(timeout=timeout)
    stuck = sum(t.is_alive() for t in threads)
    assert not errors, f"{len(errors)} clients failed, first: {errors[:5]}"
    assert not stuck, f"{stuck} clients still running after {timeout} s"


class Background:
    """n threads running fn(i, stop_event) until they are stopped, whose failures fail the test:
    an exception in a plain thread is only printed, so a background client that saw a wrong
    answer would otherwise go unnoticed."""

    def __init__(self, n, fn):
        self.event = threading.Event()
        self.errors = []
        self.stopped = False

        def wrap(i):
            try:
                fn(i, self.event)
            except Exception as e:  # noqa: BLE001 - reported by stop()
                self.errors.append(f"background client {i}: {e!r}")

        self.threads = [threading.Thread(target=wrap, args=(i,), daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def stop(self, timeout=30):
        """Stops and joins the threads, then fails with the first errors (once)."""
        if self.stopped:
            return
        self.stopped = True
        self.event.set()
        for t in self.threads:
            t.join(timeout)
        stuck = sum(t.is_alive() for t in self.threads)
        assert not self.errors, f"{len(self.errors)} failed, first: {self.errors[:5]}"
        assert not stuck, f"{stuck} background clients still running after {timeout} s"


@contextlib.contextmanager
def background(n, fn):
    """`with background(n, fn) as bg:` runs fn(i, stop_event) in n threads for the body, then
    stops them and checks them (Background.stop; the body may call bg.stop() earlier). When
    the body fails, its own error is the one reported."""
    bg = Background(n, fn)
    try:
        yield bg
    except BaseException:
        bg.event.set()
        for t in bg.threads:
            t.join(30)
        raise
    bg.stop()


# --------------------------------------------------------------------------------------------
# Sockets and processes
# --------------------------------------------------------------------------------------------


def ended_within(sock, within):
    """True when the peer closes `sock` (EOF or reset) within `within` seconds, reading without
    sending (PyMySQL has read every answer it asked for; test_server_close.py checks what may
    arrive before the end)."""
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096)
        except (ConnectionResetError, ConnectionAbortedError):
            return True
        except socket.timeout:
            continue
        if not chunk:
            return True


def rss_kib(pid):
    """The resident set size of process `pid` in KiB (/proc/PID/status VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def run_node(script, proxy=None, timeout=60, **env):
    """Runs the node mysql2 scenario tests/node/`script` with `env` added to the environment,
    and fails with its output (and ringgate's log tail, given `proxy`) unless it exits 0:
    the CompletedProcess (text)."""
    r = subprocess.run(
        [node_with_mysql2(), str(NODE_DIR / script)],
        cwd=NODE_DIR, env=dict(os.environ, **env), capture_output=True, text=True, timeout=timeout,
    )
    tail = f"\n--- ringgate ---\n{proxy.stderr_tail()}" if proxy is not None else ""
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}{tail}"
    return r


def json_lines(text):
    """The JSON objects a node scenario printed, one a line, among its other output."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
