"""A user removed from the users file by a reload (SIGHUP) with live sessions, passthrough identity:
two clients, A (alice, about to be removed) and B (bob, who stays), on one worker.

`--on-user-removed close` (the default): A's session ends at the reload, B's goes on.
`--on-user-removed keep`: A's session stays but can open no backend connection: a transaction
it is inside keeps its connection to the end, then its next statement gets ERR 1045 and the session
ends (under `--pooling session` it keeps its one connection to its end). Either way A can no longer log in, and its backend connections are closed, not pooled (the
leak checks at the end of each test).
"""

import json
import signal
import time

import pymysql
import pytest

from helpers import current_user, passthrough_users, value


@pytest.fixture
def two_users(tmp_path, mode):
    alice, bob = f"rmalice_{mode}", f"rmbob_{mode}"
    with passthrough_users(tmp_path / "users.json", [(alice, "alice-pw"), (bob, "bob-pw")]) as path:
        yield {"alice": alice, "bob": bob, "path": path}


def _remove_alice_and_reload(proxy, users):
    users["path"].write_text(json.dumps({users["bob"]: [{"Password": "bob-pw"}]}))
    proxy.proc.send_signal(signal.SIGHUP)
    proxy.wait_log("users file reloaded")
    # The worker applies it at its next tick (100 ms) and says so.
    deadline = time.monotonic() + 3
    while "of removed users revoked" not in proxy.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)


def _start(make_proxy, users, *extra):
    return make_proxy(users_file=users["path"], passthrough=True, workers=1, extra_args=extra)


def test_a_removed_users_session_is_closed_at_the_reload(make_proxy, two_users):
    proxy = _start(make_proxy, two_users)
    a = proxy.connect(two_users["alice"], "alice-pw", read_timeout=10)
    b = proxy.connect(two_users["bob"], "bob-pw", read_timeout=10)
    assert current_user(a) == two_users["alice"]
    assert value(b, "SELECT 1") == 1

    _remove_alice_and_reload(proxy, two_users)
    with pytest.raises(pymysql.err.OperationalError) as e:
        current_user(a)
    assert e.value.args[0] in (2013, 2006), e.value.args  # the server closed the connection
    assert proxy.metrics()("ringgate_removed_user_sessions_closed_total") == 1
    assert current_user(b) == two_users["bob"]
    with pytest.raises(pymysql.err.OperationalError) as e:
        proxy.connect(two_users["alice"], "alice-pw", read_timeout=10)
    assert e.value.args[0] == 1045
    b.close()


def test_keep_leaves_the_session_without_new_backend_connections(make_proxy, two_users):
    proxy = _start(make_proxy, two_users, "--on-user-removed", "keep")
    a = proxy.connect(two_users["alice"], "alice-pw", read_timeout=10)
    b = proxy.connect(two_users["bob"], "bob-pw", read_timeout=10)
    # A is inside a transaction: it holds its backend connection across the reload.
    a.begin()
    assert value(a, "SELECT 1") == 1
    assert value(b, "SELECT 1") == 1

    _remove_alice_and_reload(proxy, two_users)
    assert proxy.metrics()("ringgate_removed_user_sessions_closed_total") == 0
    assert current_user(a) == two_users["alice"]
    a.commit()
    if proxy.pooling == "session":
        # Session pooling: the session holds its one connection to its end, as on MySQL.
        assert value(a, "SELECT 2") == 2
        a.close()
        b.close()
        return
    # The transaction is over and its connection gone back (and closed, its identity revoked):
    # the next statement needs a new one.
    with pytest.raises(pymysql.err.OperationalError) as e:
        value(a, "SELECT 2")
    assert e.value.args[0] == 1045, e.value.args
    assert "removed from the users file" in e.value.args[1]
    assert current_user(b) == two_users["bob"]
    b.close()
