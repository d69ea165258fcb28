"""Waiting for a backend connection with two backend identities.

With every backend connection busy a statement waits, FIFO per key (a key is the backend
identity plus the capabilities a connection was opened with), and a key whose waiters cannot
be served must not hold up another key's: here user A's waiter is stuck behind A's own open
transaction while user B's connection comes back, and B's waiter must get it at once. Before the
per-key queues, A's older waiter had B's connection closed for it (a reconnect as A) and ran
first; B's waited for all of A's statement.

Real MariaDB (the sandbox) through ringgate with transaction pooling, per-user backend identity
(passthrough), one worker, --backend-max-connections 2. The accounts are created on the sandbox
through a direct connection (the `two_users` fixture).
"""

import threading
import time

import pytest

from helpers import capped_passthrough_proxy

WAIT_TIMEOUT_S = 20
A_SLEEP_S = 3


# The pool is the same in every buffer mode; one is enough.
pytestmark = pytest.mark.read_buffers("fixed")


def test_a_users_stuck_queue_does_not_hold_up_another_user(make_proxy, two_users):
    users, users_file = two_users
    proxy = capped_passthrough_proxy(make_proxy, users_file, 2, f"{WAIT_TIMEOUT_S}s")
    base = proxy.connections_total()
    # All four log in first (a login leases a connection of its user and gives it back).
    a1, a2 = (proxy.connect(user=users["a"][0], password=users["a"][1]) for _ in range(2))
    b1, b2 = (proxy.connect(user=users["b"][0], password=users["b"][1]) for _ in range(2))
    # Each user's first client holds a connection in an open transaction: the cap is reached.
    for c in (a1, b1):
        with c.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT CURRENT_USER()")
            cur.fetchone()

    waited_before = proxy.metrics()("ringgate_pool_wait_duration_seconds_count")
    done = {}

    def run(name, conn, sql):
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                done[name] = (time.monotonic(), cur.fetchone())
        except Exception as e:  # the assertion below names it
            done[name] = (time.monotonic(), e)

    # A's second client queues first, then B's.
    ta = threading.Thread(target=run, args=("a2", a2, f"SELECT SLEEP({A_SLEEP_S}), CURRENT_USER()"))
    ta.start()
    proxy.wait_metrics({"ringgate_pool_waiters": 1})
    tb = threading.Thread(target=run, args=("b2", b2, "SELECT 'b2', CURRENT_USER()"))
    tb.start()
    proxy.wait_metrics({"ringgate_pool_waiters": 2})

    # B's connection comes back. A's waiter is older, but A holds as many connections as B:
    # B's waiter gets B's connection now, while A's still waits behind A's own transaction.
    released = time.monotonic()
    with b1.cursor() as cur:
        cur.execute("COMMIT")
    tb.join(timeout=WAIT_TIMEOUT_S + 5)
    assert "b2" in done, "B's statement never finished"
    b_at, b_row = done["b2"]
    assert b_row == ("b2", f"{users['b'][0]}@%"), b_row
    assert "a2" not in done, f"A's statement ran first: B waited {b_at - released:.2f}s behind it"
    assert b_at - released < A_SLEEP_S, f"B waited {b_at - released:.2f}s"

    # A is not starved: once nobody of B waits, B's idle connection is closed for A's waiter.
    ta.join(timeout=WAIT_TIMEOUT_S + 5)
    a_at, a_row = done["a2"]
    assert a_row == (0, f"{users['a'][0]}@%"), a_row
    assert a_at > b_at
    with a1.cursor() as cur:
        cur.execute("COMMIT")
    proxy.wait_metrics({"ringgate_pool_waiters": 0})
    # Both waits are in the histogram; B's was short, A's took at least B's statement.
    m = proxy.metrics()
    assert m("ringgate_pool_wait_duration_seconds_count") - waited_before == 2, m.dump()
    assert m('ringgate_pool_wait_duration_seconds_bucket{le="+Inf"}') == m(
        "ringgate_pool_wait_duration_seconds_count"
    )
    assert m("ringgate_pool_wait_duration_seconds_sum") > 0
    for c in (a1, a2, b1, b2):
        c.close()
    proxy.assert_settled(base, 4)
