"""Operating ringgate from the outside: a config-file-only start, SIGHUP reload seen by PyMySQL,
and `ringgate check`. Needs the private MariaDB sandbox (`make test` starts it)."""

import json
import os
import signal
import socket
import time

import pymysql
import pytest

from conftest import APP_PASSWORD, APP_USER, backend_env, free_port, launch, ringgate_bin, run_ringgate


def _wait_listening(port, proc, log_path, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"ringgate exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"ringgate not listening on {port}:\n{log_path.read_text()}")


def _wait_log(log_path, needle, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in log_path.read_text():
            return
        time.sleep(0.05)
    pytest.fail(f"{needle!r} not in ringgate's log:\n{log_path.read_text()}")


def _connect(port, user, password):
    return pymysql.connect(host="127.0.0.1", port=port, user=user, password=password, connect_timeout=5)


@pytest.fixture
def configured_proxy(tmp_path):
    """ringgate started with nothing but --config (the password from the environment)."""
    env = backend_env()
    users = tmp_path / "users.json"
    users.write_text(json.dumps({APP_USER: [{"Password": APP_PASSWORD}]}))
    port = free_port()
    cfg = tmp_path / "ringgate.toml"
    cfg.write_text(
        "\n".join(
            [
                f'listen = "127.0.0.1:{port}"',
                f'backend = "{env["host"]}:{env["port"]}"',
                'backend-identity = "shared"',
                f'backend-user = "{env["user"]}"',
                f'users-file = "{users}"',
                "workers = 2",
                'read-buffers = "heap"',
                'log-format = "json"',
                "",
            ]
        )
    )
    log_path = tmp_path / "ringgate.log"
    proc = launch(
        [str(ringgate_bin()), "--config", str(cfg)], log_path, {**os.environ, "RINGGATE_BACKEND_PASSWORD": env["password"]}
    )
    try:
        _wait_listening(port, proc, log_path)
        yield {"port": port, "proc": proc, "users": users, "log": log_path, "config": cfg}
    finally:
        proc.kill()
        proc.wait()


def test_config_file_only_start_and_sighup_reload(configured_proxy):
    port, proc, users, log = (configured_proxy[k] for k in ("port", "proc", "users", "log"))
    with _connect(port, APP_USER, APP_PASSWORD) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)

    users.write_text(json.dumps({APP_USER: [{"Password": APP_PASSWORD}], "pyuser": [{"Password": "py-pw"}]}))
    proc.send_signal(signal.SIGHUP)
    _wait_log(log, "users file reloaded")
    with _connect(port, "pyuser", "py-pw") as conn, conn.cursor() as cur:
        cur.execute("SELECT 2")
        assert cur.fetchone() == (2,)

    users.write_text(json.dumps({"pyuser": [{"Password": "py-pw"}]}))
    proc.send_signal(signal.SIGHUP)
    _wait_log(log, "(was 2)")
    with pytest.raises(pymysql.err.OperationalError) as e:
        _connect(port, APP_USER, APP_PASSWORD)
    assert e.value.args[0] == 1045

    users.write_text("{ not json")
    proc.send_signal(signal.SIGHUP)
    _wait_log(log, "reload refused")
    with _connect(port, "pyuser", "py-pw") as conn, conn.cursor() as cur:
        cur.execute("SELECT 3")
        assert cur.fetchone() == (3,)
    assert proc.poll() is None

    for line in log.read_text().splitlines():
        if line.strip():
            json.loads(line)  # --log-format json from the file: every line is an object
    assert "py-pw" not in log.read_text()


def test_check_with_the_same_config_fails_on_listen_unless_handing_over(configured_proxy):
    # The running proxy holds `listen`: a second ringgate there would split its traffic, so
    # check fails on `listen` (everything else is fine), and only warns with
    # --reuse-port-handover.
    env = backend_env()
    cmd = ["check", "--config", str(configured_proxy["config"])]
    run_env = {**os.environ, "RINGGATE_BACKEND_PASSWORD": env["password"]}
    out = run_ringgate(*cmd, env=run_env, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL  listen    another process already listens on" in out.stdout, out.stdout
    assert "OK    backend" in out.stdout, out.stdout
    assert env["password"] not in out.stdout

    out = run_ringgate(*cmd, "--reuse-port-handover", env=run_env, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARN  listen" in out.stdout, out.stdout
    assert "OK    backend" in out.stdout, out.stdout


def test_print_config_masks_the_password(configured_proxy):
    out = run_ringgate(
        "--config", str(configured_proxy["config"]), "--print-config",
        env={**os.environ, "RINGGATE_BACKEND_PASSWORD": "py-secret-xyz"},
    )
    assert out.returncode == 0, out.stderr
    assert "py-secret-xyz" not in out.stdout
    assert 'backend-password = "********"  # env' in out.stdout
    assert 'read-buffers = "heap"  # file' in out.stdout
