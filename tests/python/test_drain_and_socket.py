"""Graceful drain on SIGTERM and the --socket unix listener, through PyMySQL and the mariadb CLI."""

import signal
import socket
import subprocess
import threading
import time

import pymysql
import pytest

from conftest import APP_PASSWORD, APP_USER, Proxy, mariadb_cli, run_ringgate
from helpers import backend_statements, wait_until


def wait_exit(proxy, timeout=15):
    try:
        return proxy.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"ringgate did not exit after SIGTERM:\n{proxy.stderr_tail(40)}")


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def final_line(proxy):
    lines = [l for l in proxy.stderr().splitlines() if "stopped:" in l]
    assert lines, f"no final 'stopped:' log line:\n{proxy.stderr_tail(40)}"
    return lines[-1]


def test_sigterm_drains(mode):
    proxy = Proxy(mode, extra_args=("--drain-timeout", "4s"))
    try:
        busy = proxy.connect()
        idle = proxy.connect()
        in_tx = proxy.connect()
        in_tx.begin()
        in_tx.cursor().execute("SELECT 1")
        result = {}
        marker = f"slept-{time.monotonic_ns()}"

        def sleeper():
            cur = busy.cursor()
            cur.execute(f"SELECT SLEEP(2), '{marker}'")
            result["row"] = cur.fetchone()

        t = threading.Thread(target=sleeper)
        t.start()
        # SIGTERM only once the command is running on the backend, not after a guessed sleep.
        wait_until(
            "the SLEEP(2) command running on the backend", lambda: backend_statements(f"%{marker}%") == 1, proxy=proxy
        )
        assert proxy.metrics()("ringgate_client_connections") == 3
        proxy.proc.send_signal(signal.SIGTERM)

        # Listeners close (on the workers' next 100 ms tick): a new connect is refused.
        wait_until("the listener refuses connections", lambda: refused(proxy.port), 3, proxy)
        with pytest.raises((ConnectionRefusedError, pymysql.err.OperationalError)):
            proxy.connect(connect_timeout=2)

        # The idle session is closed between commands; the busy one and the one inside a
        # transaction stay.
        wait_until("the idle session closed", lambda: proxy.metrics()("ringgate_client_connections") == 2, 3, proxy)
        with pytest.raises(pymysql.err.OperationalError):
            idle.cursor().execute("SELECT 1")

        # The session inside a transaction may finish it.
        cur = in_tx.cursor()
        cur.execute("SELECT 2")
        assert cur.fetchone() == (2,)
        in_tx.commit()

        # The command in flight completes with its result.
        t.join(timeout=10)
        assert result.get("row") == (0, marker), result

        assert wait_exit(proxy) == 0, proxy.stderr_tail(40)
        line = final_line(proxy)
        assert "buffers_held_client=0" in line, line
        assert "buffers_held_backend=0" in line, line
        assert "backend_busy=0" in line, line
        if mode == "fixed":
            assert "slots_free=2048/2048" in line, line
    finally:
        proxy.close()


def test_drain_timeout_cuts_an_open_transaction(mode):
    proxy = Proxy(mode, extra_args=("--drain-timeout", "1s"))
    try:
        conn = proxy.connect()
        conn.begin()
        conn.cursor().execute("SELECT 1")
        started = time.monotonic()
        proxy.proc.send_signal(signal.SIGTERM)
        assert wait_exit(proxy) == 0
        assert time.monotonic() - started < 5
        assert "buffers_held_client=0" in final_line(proxy)
        with pytest.raises(pymysql.err.OperationalError):
            conn.cursor().execute("SELECT 1")
    finally:
        proxy.close()


def test_unix_socket_serves_the_cli_and_pymysql(make_proxy, tmp_path):
    path = tmp_path / "ringgate.sock"
    # A stale socket file from a crashed run (nobody listens on it) is replaced.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    proxy = make_proxy(extra_args=("--socket", str(path)))
    base = proxy.connections_total()

    r = subprocess.run(
        [mariadb_cli(), "--no-defaults", "-S", str(path), f"-u{APP_USER}", f"-p{APP_PASSWORD}",
         "-N", "-e", "SELECT 40 + 2"],
        capture_output=True, text=True, timeout=30,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "42"

    conn = pymysql.connect(unix_socket=str(path), user=APP_USER, password=APP_PASSWORD)
    cur = conn.cursor()
    cur.execute("SELECT DATABASE(), 7")
    assert cur.fetchone() == (None, 7)
    conn.close()

    with pytest.raises(pymysql.err.OperationalError) as e:
        pymysql.connect(unix_socket=str(path), user=APP_USER, password="wrong")
    assert e.value.args[0] == 1045

    # A second ringgate must refuse a socket that is in use.
    second = run_ringgate(
        "--listen", "127.0.0.1:0", "--socket", str(path),
        "--users-file", str(proxy.args[proxy.args.index("--users-file") + 1]),
        "--backend", f"{proxy.backend['host']}:{proxy.backend['port']}",
        timeout=20,
    )
    assert second.returncode != 0
    assert "in use" in second.stderr, second.stderr
    proxy.assert_settled(base, 3)
