"""Helpers shared by several test modules (fixtures stay in conftest.py).

Kept in one place so that a fix (a longer join, a better failure message) reaches every
suite that uses them, instead of one copy of several.
"""

import contextlib
import threading

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
