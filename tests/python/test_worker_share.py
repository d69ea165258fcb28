"""How the two workers share `--backend-max-connections`.

Each worker has its own pool and a backend connection never moves between workers; the cap is
global. Before the pools shared it by need, whichever worker reserved the units first kept them:
a worker holding the whole cap, busy or idle, left the other worker's clients waiting until
`--backend-wait-timeout` and ERR 1040. These tests put clients on a chosen worker (the residue
of the connection id names it, see test_kill.py) and check that the other worker's clients are
served, with the leak checks of the `make_proxy` fixture.

The failures they catch are ERR 1040 after the wait timeout, not slowness: the only time bound
is the generous --backend-wait-timeout.
"""

import threading

import pytest

from helpers import worker_of

WAIT_TIMEOUT_S = 20


# The pools are the same in every buffer mode; one is enough for the sharing.
pytestmark = pytest.mark.read_buffers("fixed")


def share_proxy(make_proxy, backends, *extra):
    return make_proxy(
        pooling="transaction",
        workers=2,
        extra_args=[
            "--backend-max-connections", str(backends),
            # No warm connections: the clients alone decide which worker holds what (a login
            # leases a connection and gives it back, so each worker holds one after its first).
            "--backend-pool-size", "0",
            "--backend-wait-timeout", f"{WAIT_TIMEOUT_S}s",
            *extra,
        ],
    )


def clients_on_workers(proxy, want):
    """Connects until it has want[w] autocommit clients on worker w; closes the rest."""
    have = {0: [], 1: []}
    spare = []
    for _ in range(400):
        if all(len(have[w]) >= n for w, n in want.items()):
            break
        c = proxy.connect(autocommit=True)
        w = worker_of(c)
        (have[w] if len(have[w]) < want.get(w, 0) else spare).append(c)
    for c in spare:
        c.close()
    assert all(len(have[w]) >= n for w, n in want.items()), "the kernel kept to one worker"
    return have


def metric(proxy, name, worker):
    return proxy.metrics()(f'{name}{{worker="{worker}"}}')


def test_a_worker_gets_connections_the_other_worker_holds_idle(make_proxy):
    """Idle connections stay in their worker's idle list until --backend-idle-timeout (60 s).
    Worker 0's four clients open transactions on a cap of 4 while worker 1's only connection
    (from its client's login) sits idle: the fourth must get it (worker 1 gives it up). Then
    worker 0's clients commit and go quiet, and worker 1's client must get one of theirs. Either
    way the alternative is waiting for --backend-wait-timeout and ERR 1040."""
    proxy = share_proxy(make_proxy, backends=4)
    base = proxy.connections_total()
    have = clients_on_workers(proxy, {0: 4, 1: 1})
    try:
        holders = have[0]
        for c in holders:
            with c.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute("SELECT 1")
        for c in holders:
            c.commit()
        (late,) = have[1]
        with late.cursor() as cur:
            cur.execute("SELECT 'worker 1 served'")
            assert cur.fetchone() == ("worker 1 served",)
        assert proxy.metrics()("ringgate_backend_rebalanced_total") >= 2
        assert metric(proxy, "ringgate_worker_backend_connections", 1) >= 1
        # Worker 0's clients still get theirs (the cap now split between the workers).
        for c in holders:
            with c.cursor() as cur:
                cur.execute("SELECT 2")
                assert cur.fetchone() == (2,)
    finally:
        for cs in have.values():
            for c in cs:
                c.close()
    proxy.assert_settled(base, 5)


def test_a_worker_gets_its_share_while_the_other_keeps_every_connection_busy(make_proxy):
    """Worker 0's clients run transactions back to back on the whole cap, so none of its
    connections is ever idle (worker 1's login connection was closed after the 1 s
    --backend-idle-timeout, or given to worker 0); worker 1's clients, asking later, must each
    complete their transactions (worker 0 closes connections that come back until the split is
    even)."""
    backends = 4
    proxy = share_proxy(make_proxy, backends, "--backend-idle-timeout", "1s")
    base = proxy.connections_total()
    have = clients_on_workers(proxy, {0: 8, 1: 3})
    stop = threading.Event()
    errors = []

    def busy(i, c):
        try:
            while not stop.is_set():
                with c.cursor() as cur:
                    cur.execute("BEGIN")
                    cur.execute("SELECT SLEEP(0.1)")
                c.commit()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"worker 0 client {i}: {e!r}")

    loaders = [threading.Thread(target=busy, args=(i, c), daemon=True) for i, c in enumerate(have[0])]
    for t in loaders:
        t.start()
    try:
        # Worker 0 holds the whole cap before worker 1's clients ask (8 clients, each in a
        # transaction most of the time, on 4 connections): all 4 leased at once can only be
        # worker 0's, since worker 1's clients are quiet.
        for _ in range(400):
            busy = proxy.metrics()('ringgate_backend_connections{state="busy"}')
            if busy == backends or errors:
                break
            stop.wait(0.05)
        assert not errors, errors
        assert busy == backends, f"{busy} connections busy, want {backends}"
        late_errors = []

        def late(i, c):
            try:
                for n in range(5):
                    with c.cursor() as cur:
                        cur.execute("BEGIN")
                        cur.execute("SELECT %s", (n,))
                        assert cur.fetchone() == (n,)
                    c.commit()
            except Exception as e:  # noqa: BLE001 - reported below
                late_errors.append(f"worker 1 client {i}: {e!r}")

        latecomers = [threading.Thread(target=late, args=(i, c)) for i, c in enumerate(have[1])]
        for t in latecomers:
            t.start()
        for t in latecomers:
            t.join(WAIT_TIMEOUT_S * 5 + 60)
        assert not any(t.is_alive() for t in latecomers), "worker 1's clients still running"
        assert not late_errors, late_errors
        assert proxy.metrics()("ringgate_backend_rebalanced_total") >= 1
    finally:
        stop.set()
        for t in loaders:
            t.join(60)
        for cs in have.values():
            for c in cs:
                c.close()
    assert not errors, errors
    proxy.assert_settled(base, len(have[0]) + len(have[1]))
