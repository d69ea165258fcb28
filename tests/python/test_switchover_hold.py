"""SIGUSR1's switchover hold with one server (a pause): a client's next statement waits while
the hold lasts, and runs when SIGUSR2 ends it; a client idle between transactions keeps its
connection throughout. The replication-set version (the hold ended by a new writer, under load)
is tests/python/test_cluster_failover.py."""

import signal
import threading
import time


def test_a_held_statement_waits_for_sigusr2_then_runs(make_proxy):
    # Transaction pooling: between statements the session holds no connection, so the hold
    # reaches its next one.
    proxy = make_proxy(pooling="transaction")
    conn = proxy.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute("SELECT 1")
    proxy.proc.send_signal(signal.SIGUSR1)
    proxy.wait_log("switchover hold: no transaction in flight")
    # The next tick (100 ms) carries the hold to every worker's pool.
    time.sleep(0.3)
    done = threading.Event()
    result = []

    def run():
        with conn.cursor() as cur:
            cur.execute("SELECT 2")
            result.append(cur.fetchone()[0])
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert not done.wait(1.0), "the statement ran during the hold"
    proxy.proc.send_signal(signal.SIGUSR2)
    assert done.wait(10), "the statement did not run after SIGUSR2"
    assert result == [2]
    proxy.wait_log("SIGUSR2: switchover hold released")
    conn.close()
