"""Binary prepared statements under transaction pooling (the default), at their edges: what a
client's COM_RESET_CONNECTION does to them, and how many (and how many bytes of them) one session
may keep. Raw packets (tests/python/test_prepared_transaction_pooling.py's `Raw`), so that every
step is exactly the one under test; node mysql2's resetOnRelease pool runs in
tests/node/reset_prepared.js."""

import json
import os
import struct
import subprocess

import pytest

from conftest import APP_PASSWORD, APP_USER, NODE_DIR, TEST_DB, node_with_mysql2
from test_prepared_transaction_pooling import (
    T_LONGLONG,
    Raw,
    ServerError,
    client_statements_settle,
    pinned_total,
)

ER_UNKNOWN_STMT_HANDLER = 1243
ER_MAX_PREPARED_STMT_COUNT_REACHED = 1461
COM_RESET_CONNECTION = b"\x1f"


def one_backend(make_proxy, extra=()):
    """Transaction pooling on a single backend connection: every session shares it."""
    return make_proxy(
        workers=1,
        extra_args=["--backend-max-connections", "1", "--backend-pool-size", "1", *extra],
    )


def reset(c):
    c.write(0, COM_RESET_CONNECTION)
    return c.read_ok()


def plus_one(c, stmt, n):
    kind, rows, _ = c.execute(stmt, [(T_LONGLONG, n)])
    assert kind == "rows" and len(rows) == 1, (kind, rows)
    return struct.unpack_from("<q", rows[0], 2)[0]


def test_a_statement_prepared_again_after_reset_connection_runs(make_proxy):
    """mysql2's test-reset-connection: prepare, execute, COM_RESET_CONNECTION, prepare the same
    text again, execute. The reset closed the server's statement; the second prepare must not be
    answered with it. The old id is gone too, as on the server."""
    proxy = one_backend(make_proxy)
    c = Raw(proxy.port)
    try:
        stmt, _, _ = c.prepare("SELECT ? + 1")
        assert plus_one(c, stmt, 1) == 2
        reset(c)
        with pytest.raises(ServerError) as e:
            c.execute(stmt, [(T_LONGLONG, 1)])
        assert e.value.code == ER_UNKNOWN_STMT_HANDLER
        again, _, _ = c.prepare("SELECT ? + 1")
        assert plus_one(c, again, 41) == 42
        c.close_stmt(again)
    finally:
        c.close()
    assert client_statements_settle(proxy) == 0, "registries leaked"


def test_a_prepare_pipelined_behind_reset_connection_runs(make_proxy):
    """COM_RESET_CONNECTION and the prepare of a text the connection held, sent in one write:
    the reset's answer is learned before the prepare asks the connection for the text."""
    proxy = one_backend(make_proxy)
    c = Raw(proxy.port)
    try:
        stmt, _, _ = c.prepare("SELECT ? + 1")
        assert plus_one(c, stmt, 1) == 2
        sql = b"SELECT ? + 1"
        c.sock.sendall(b"\x01\0\0\0" + COM_RESET_CONNECTION
                       + struct.pack("<I", len(sql) + 1)[:3] + b"\0\x16" + sql)
        c.read_ok()
        again, _, _ = c.read_prepare()
        assert plus_one(c, again, 2) == 3
    finally:
        c.close()
    assert client_statements_settle(proxy) == 0, "registries leaked"


def test_another_sessions_reset_connection_does_not_break_a_statement(make_proxy):
    """Two clients on one backend connection: A prepares and executes, B resets the connection
    (which closes every statement on the server), A executes again and gets its answer."""
    proxy = one_backend(make_proxy)
    a, b = Raw(proxy.port), Raw(proxy.port)
    try:
        stmt, _, _ = a.prepare("SELECT ? + 1")
        assert plus_one(a, stmt, 1) == 2
        reset(b)
        assert plus_one(a, stmt, 2) == 3
        # B prepares the same text after its reset: a statement of its own, which runs.
        theirs, _, _ = b.prepare("SELECT ? + 1")
        assert plus_one(b, theirs, 10) == 11
        assert plus_one(a, stmt, 3) == 4
    finally:
        a.close()
        b.close()
    assert pinned_total(proxy.metrics()) == 0
    assert client_statements_settle(proxy) == 0, "registries leaked"


def test_node_mysql2_reset_and_reset_on_release_with_prepared_statements(make_proxy):
    """node mysql2's connection.reset() and a pool with resetOnRelease: each reuse prepares its
    statement again after the reset (tests/node/reset_prepared.js)."""
    node = node_with_mysql2()
    proxy = one_backend(make_proxy)
    env = dict(os.environ, PORT=str(proxy.port), USER=APP_USER, PASS=APP_PASSWORD, DB=TEST_DB,
               ROUNDS="20")
    r = subprocess.run([node, "reset_prepared.js"], cwd=NODE_DIR, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"executes": 60}
    assert client_statements_settle(proxy) == 0, "registries leaked"
