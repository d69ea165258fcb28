"""Binary prepared statements under transaction pooling (the default), at their edges: what a
client's COM_RESET_CONNECTION does to them, and how many (and how many bytes of them) one session
may keep. Raw packets (mysql_wire.py's `Raw`), so that every
step is exactly the one under test; node mysql2's resetOnRelease pool runs in
tests/node/reset_prepared.js."""

import json
import struct

import pytest

from conftest import APP_PASSWORD, APP_USER, TEST_DB
from helpers import client_statements_settle, one_backend_proxy, rss_kib, run_node
from mysql_wire import T_LONGLONG, Raw, ServerError, packet

ER_UNKNOWN_STMT_HANDLER = 1243
ER_MAX_PREPARED_STMT_COUNT_REACHED = 1461
COM_RESET_CONNECTION = b"\x1f"


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
    proxy = one_backend_proxy(make_proxy)
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
    proxy = one_backend_proxy(make_proxy)
    c = Raw(proxy.port)
    try:
        stmt, _, _ = c.prepare("SELECT ? + 1")
        assert plus_one(c, stmt, 1) == 2
        sql = b"SELECT ? + 1"
        c.sock.sendall(packet(0, COM_RESET_CONNECTION) + packet(0, b"\x16" + sql))
        c.read_ok()
        again, _, _ = c.read_prepare()
        assert plus_one(c, again, 2) == 3
    finally:
        c.close()
    assert client_statements_settle(proxy) == 0, "registries leaked"


def test_another_sessions_reset_connection_does_not_break_a_statement(make_proxy):
    """Two clients on one backend connection: A prepares and executes, B resets the connection
    (which closes every statement on the server), A executes again and gets its answer."""
    proxy = one_backend_proxy(make_proxy)
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
    assert proxy.metrics().sum_of("ringgate_sessions_pinned_total") == 0
    assert client_statements_settle(proxy) == 0, "registries leaked"


def test_node_mysql2_reset_and_reset_on_release_with_prepared_statements(make_proxy):
    """node mysql2's connection.reset() and a pool with resetOnRelease: each reuse prepares its
    statement again after the reset (tests/node/reset_prepared.js)."""
    proxy = one_backend_proxy(make_proxy)
    r = run_node(
        "reset_prepared.js", proxy, timeout=120,
        PORT=str(proxy.port), USER=APP_USER, PASS=APP_PASSWORD, DB=TEST_DB, ROUNDS="20",
    )
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"executes": 60}
    assert client_statements_settle(proxy) == 0, "registries leaked"


def prepare_many(c, sql, n, batch=100):
    """n prepares of `sql` (a str, or a function of the index), pipelined in batches: the ids
    of those that succeeded, and the first refusal (or None)."""
    ids, refused = [], None
    for start in range(0, n, batch):
        k = min(batch, n - start)
        texts = [sql(start + i) if callable(sql) else sql for i in range(k)]
        c.sock.sendall(b"".join(
            packet(0, b"\x16" + t.encode()) for t in texts))
        for _ in range(k):
            try:
                ids.append(c.read_prepare()[0])
            except ServerError as e:
                refused = refused or e
        if refused:
            break
    return ids, refused


def err_message(e):
    return str(e).split(": ", 1)[1]


def test_one_long_text_prepared_without_end_stops_at_the_servers_limit(make_proxy):
    """The attack: one client prepares the same 8 KB text over and over and never closes a
    statement. ringgate answers the repeats from its own copy, so the server's
    max_prepared_stmt_count never applies; ringgate's own limit does, with the server's ERR
    at the server's default (16,382), and the text is kept once (bytes gauge, RSS)."""
    proxy = one_backend_proxy(make_proxy)
    text = "SELECT ? + 1 /* " + "x" * 8000 + " */"
    c = Raw(proxy.port)
    try:
        rss_before = rss_kib(proxy.proc.pid)
        ids, refused = prepare_many(c, text, 16_383)
        assert len(ids) == 16_382, len(ids)
        assert refused is not None and refused.code == ER_MAX_PREPARED_STMT_COUNT_REACHED
        assert err_message(refused) == ("Can't create more than max_prepared_stmt_count "
                                        "statements (current value: 16382)")
        m = proxy.metrics()
        assert m["ringgate_client_prepares_refused_total"] == 1
        assert m["ringgate_client_prepared_statements"] == 16_382
        # The text (and schema) once, two bytes of types per statement: 8 KB + 32 KB.
        kept = m["ringgate_client_prepared_statement_bytes"]
        assert kept == len(text) + len(TEST_DB) + 2 * 16_382, kept
        # Without the shared copy the texts alone are 134 MB.
        assert rss_kib(proxy.proc.pid) - rss_before < 48 * 1024, (rss_before, rss_kib(proxy.proc.pid))
        # The session goes on: a statement it has runs, and a closed one makes room.
        assert plus_one(c, ids[-1], 6) == 7
        c.close_stmt(ids[0])
        again, _ = prepare_many(c, text, 1)
        assert plus_one(c, again[0], 1) == 2
    finally:
        c.close()
    assert client_statements_settle(proxy) == 0, "registries leaked"
    assert proxy.metrics()["ringgate_client_prepared_statement_bytes"] == 0


def test_distinct_texts_stop_at_the_byte_bound(make_proxy):
    """Distinct long texts are each kept: --max-prepared-bytes bounds them (1 MiB here) with
    ERR 1461 whose wording names the bound; closing statements makes room again."""
    proxy = one_backend_proxy(make_proxy, extra=["--max-prepared-bytes", str(1 << 20)])
    pad = "y" * 8000
    c = Raw(proxy.port)
    try:
        ids, refused = prepare_many(c, lambda i: f"SELECT ? + {i} /* {pad} */", 1000)
        assert refused is not None and refused.code == ER_MAX_PREPARED_STMT_COUNT_REACHED
        assert "more than 1048576 bytes" in err_message(refused), refused
        assert 120 <= len(ids) <= 130, len(ids)
        assert proxy.metrics()["ringgate_client_prepared_statement_bytes"] <= 1 << 20
        for stmt in ids[:10]:
            c.close_stmt(stmt)
        more, refused = prepare_many(c, lambda i: f"SELECT ? + {i} /* {pad} */ -- again", 10)
        assert refused is None and len(more) == 10
        assert plus_one(c, more[-1], 1) == 1 + 9
    finally:
        c.close()
    assert "--max-prepared-bytes" in proxy.stderr()
    assert client_statements_settle(proxy) == 0, "registries leaked"


def test_max_prepared_statements_sets_the_count(make_proxy):
    """--max-prepared-statements 3: the fourth open statement is refused as the server refuses
    one over its max_prepared_stmt_count, naming the value; COM_RESET_CONNECTION frees them."""
    proxy = one_backend_proxy(make_proxy, extra=["--max-prepared-statements", "3"])
    c = Raw(proxy.port)
    try:
        ids, refused = prepare_many(c, lambda i: f"SELECT ? + {i}", 4)
        assert len(ids) == 3
        assert err_message(refused) == ("Can't create more than max_prepared_stmt_count "
                                        "statements (current value: 3)")
        reset(c)
        ids, refused = prepare_many(c, lambda i: f"SELECT ? + {i}", 3)
        assert refused is None and plus_one(c, ids[2], 1) == 3
    finally:
        c.close()
    assert client_statements_settle(proxy) == 0, "registries leaked"
