"""With PyMySQL: when the server closes a leased backend connection between
commands, the client's connection ends at once, without the client sending anything.

MariaDB 10.11 sends no ERR on these closes (wait_timeout: RST; KILL CONNECTION: FIN), so the
client sees a bare end; ringgate would forward an ERR that the server did send. Every proxy the
fixture starts is checked for leaks after the test.
"""

import socket
import struct
import time

import pymysql
import pytest

from conftest import APP_PASSWORD, APP_USER, backend_env
from helpers import direct, json_lines, run_node


def wait_for_end(sock, within):
    """Reads the client's raw socket without sending; returns (bytes received, seconds to the
    end). Fails if the connection is still open after `within` seconds."""
    start = time.monotonic()
    got = b""
    while True:
        left = within - (time.monotonic() - start)
        if left <= 0:
            pytest.fail(f"the connection was still open after {within}s (received {got!r})")
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096)
        except (ConnectionResetError, ConnectionAbortedError):
            break
        except socket.timeout:
            continue
        if not chunk:
            break
        got += chunk
    return got, time.monotonic() - start


def assert_nothing_or_one_err(data):
    if not data:
        return
    (length,) = struct.unpack("<I", data[:3] + b"\0")
    assert len(data) == 4 + length, f"not one whole packet: {data!r}"
    assert data[4] == 0xFF, f"not an ERR packet: {data!r}"


def discarded(proxy):
    return proxy.metrics()("ringgate_backend_discarded_total")


def test_wait_timeout_ends_an_idle_pymysql_connection(make_proxy):
    proxy = make_proxy(workers=1)
    before = discarded(proxy)
    conn = proxy.connect()
    with conn.cursor() as cur:
        cur.execute("SET SESSION wait_timeout=1")
    # Idle from here: PyMySQL's own socket must see the end by itself.
    data, after = wait_for_end(conn._sock, 3.0)
    assert_nothing_or_one_err(data)
    assert after >= 0.9, f"closed after {after:.2f}s, before wait_timeout expired"
    # The next query fails at once with a lost-connection error, not a hang.
    t0 = time.monotonic()
    with pytest.raises(pymysql.err.OperationalError):
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
    assert time.monotonic() - t0 < 1.0
    conn.close()
    deadline = time.monotonic() + 5
    while discarded(proxy) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert discarded(proxy) > before, "the dead backend connection was not discarded"
    assert "the server closed the backend connection between commands" in proxy.stderr()
    # A new client works.
    with proxy.connect() as c, c.cursor() as cur:
        cur.execute("SELECT 42")
        assert cur.fetchone() == (42,)


def test_kill_connection_ends_an_idle_pymysql_connection(make_proxy):
    proxy = make_proxy(workers=1)
    conn = proxy.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT CONNECTION_ID()")
        (thread,) = cur.fetchone()
    with direct() as admin, admin.cursor() as cur:
        cur.execute(f"KILL CONNECTION {int(thread)}")
    data, after = wait_for_end(conn._sock, 1.0)
    assert_nothing_or_one_err(data)
    conn.close()
    with proxy.connect() as c, c.cursor() as cur:
        cur.execute("SELECT 43")
        assert cur.fetchone() == (43,)




def test_node_mysql2_server_close(make_proxy):
    """node mysql2's test-server-close logic (tests/node/server_close.js): the idle connection
    gets its fatal error event after wait_timeout and after KILL CONNECTION, instead of hanging.
    scripts/ensure-deps.sh installs mysql2 into tests/node when node and npm are present."""
    proxy = make_proxy(workers=1)
    b = backend_env()
    r = run_node(
        "server_close.js",
        proxy,
        PROXY_PORT=str(proxy.port),
        APP_USER=APP_USER,
        APP_PASSWORD=APP_PASSWORD,
        BACKEND_HOST=b["host"],
        BACKEND_PORT=str(b["port"]),
        BACKEND_USER=b["user"],
        BACKEND_PASSWORD=b["password"],
    )
    results = json_lines(r.stdout)
    assert [x["scenario"] for x in results] == ["wait_timeout", "kill_connection"], r.stdout
    assert all(x["ok"] for x in results), r.stdout
