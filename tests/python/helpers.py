"""Helpers shared by several test modules (fixtures stay in conftest.py).

Kept in one place so that a fix (a longer join, a better failure message) reaches every
suite that uses them, instead of one copy of several.
"""

import contextlib
import socket
import threading
import time

import pymysql

from conftest import TEST_DB, backend_env

# MySQL 8's caching_sha2 verifier ($A$005$ + salt + sha256-crypt digest) of FOOBAR_PASSWORD, in
# hex: TiDB's test vector, made by MySQL, not by ringgate.
FOOBAR_VERIFIER = (
    "0x24412430303524031A69251C34295C4B35167C7F1E5A7B63091349503974624D34504B5A424679354856336868"
    "686F52485A736E4A733368786E427575516C73446469496537"
)
FOOBAR_PASSWORD = "foobar"


def direct(**kw):
    """A PyMySQL connection straight to the sandbox MariaDB as its admin (no ringgate), in
    autocommit: for setting up schemas and watching the server from the side."""
    b = backend_env()
    return pymysql.connect(
        host=b["host"], port=b["port"], user=b["user"], password=b["password"], autocommit=True,
        connect_timeout=10, read_timeout=60, **kw
    )


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


@contextlib.contextmanager
def sandbox_account(user, password):
    """A MariaDB account `user`@'%' with `password` and every privilege on TEST_DB, dropped
    again afterwards: for passthrough identity, where ringgate logs in to the backend as it."""
    with direct() as root:
        with root.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {TEST_DB}")
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
            cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s", (password,))
            cur.execute(f"GRANT ALL ON {TEST_DB}.* TO '{user}'@'%'")
        try:
            yield user
        finally:
            with root.cursor() as cur:
                cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


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
