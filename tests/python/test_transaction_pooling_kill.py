"""Transaction pooling and KILL: a mapped KILL must reach the session it names,
never the next session on the backend connection the target just gave back; and a parked client
(holding no backend connection) ends as a direct connection would, by KILL through ringgate or
by its own wait_timeout.
"""

import threading
import time

import pymysql
import pytest

DURATION = 6.0
ER_QUERY_INTERRUPTED = 1317


def test_kill_query_racing_a_release_never_hits_another_session(make_proxy, monkeypatch):
    """A victim runs 10 ms autocommit statements, so it gives its backend connection back after
    each; two bystanders on the same worker (the same pool) run slow statements; a killer on the
    other worker keeps sending KILL QUERY <victim's id>. Each KILL is mapped to the thread the
    victim holds when ringgate reads it, and the debug build holds the killer's worker 30 ms
    before sending it (RINGGATE_DEBUG_KILL_DELAY_MS), as a loaded box may: if the victim gave
    that connection back meanwhile and a bystander got it, the bystander's statement would be
    cut short. With the fence the victim keeps the connection until the KILL is answered."""
    monkeypatch.setenv("RINGGATE_DEBUG_KILL_DELAY_MS", "30")
    # Three backend connections: one for the killer's worker, two for the victim and the
    # bystanders, who queue for them, so a connection the victim gives back goes straight to a
    # waiting bystander.
    proxy = make_proxy(
        pooling="transaction",
        workers=2,
        extra_args=("--backend-max-connections", "3", "--backend-pool-size", "1"),
    )
    base = proxy.connections_total()
    # A worker's index is its connection ids' residue: the victim and the bystanders on one
    # worker, the killer on the other (its delay must not hold the victim's worker).
    by_worker = {0: [], 1: []}
    opened = []
    while True:
        # Autocommit on: with it off every statement would open a transaction and keep its
        # connection.
        c = proxy.connect(autocommit=True)
        opened.append(c)
        by_worker[(c.thread_id() - (1 << 31)) % 2].append(c)
        w = next((w for w in (0, 1) if len(by_worker[w]) >= 3 and by_worker[1 - w]), None)
        if w is not None:
            break
        assert len(opened) < 40, "the kernel put every connection on one worker"
    victim, *bystanders = by_worker[w][:3]
    killer = by_worker[1 - w][0]
    vid = victim.thread_id()
    stop = threading.Event()
    counts = {"victim": 0, "victim_killed": 0, "bystander": 0, "kills": 0}
    hits = []
    errors = []

    def victim_loop():
        try:
            while not stop.is_set():
                try:
                    with victim.cursor() as cur:
                        # Long enough for a KILL to find it holding a connection.
                        cur.execute("SELECT SLEEP(0.01)")
                        cur.fetchall()
                    counts["victim"] += 1
                except pymysql.err.OperationalError as e:
                    # Its own KILL QUERY may land on its own next statement: that is right.
                    if e.args[0] != ER_QUERY_INTERRUPTED:
                        raise
                    counts["victim_killed"] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(("victim", e))

    def bystander_loop(conn):
        try:
            while not stop.is_set():
                try:
                    with conn.cursor() as cur:
                        # MariaDB's SLEEP() answers 1 instead of 0 when a KILL QUERY cuts it
                        # short; one that arrived just before the statement fails it with 1317.
                        cur.execute("SELECT SLEEP(0.03)")
                        (interrupted,) = cur.fetchone()
                except pymysql.err.OperationalError as e:
                    if e.args[0] != ER_QUERY_INTERRUPTED:
                        raise
                    interrupted = True
                counts["bystander"] += 1
                if interrupted:
                    hits.append(time.monotonic())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(("bystander", e))

    def killer_loop():
        try:
            while not stop.is_set():
                with killer.cursor() as cur:
                    cur.execute(f"KILL QUERY {vid}")
                counts["kills"] += 1
                # A pause: KILLs back to back would keep the victim's connection fenced all
                # the time, and the bystanders would starve (they share the victim's pool).
                time.sleep(0.03)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(("killer", e))

    threads = [threading.Thread(target=victim_loop), threading.Thread(target=killer_loop)]
    threads += [threading.Thread(target=bystander_loop, args=(b,)) for b in bystanders]
    for t in threads:
        t.start()
    time.sleep(DURATION)
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert counts["kills"] > 20 and counts["victim"] > 20 and counts["bystander"] > 5, counts
    assert not hits, (
        f"{len(hits)} bystander statements were interrupted by KILL QUERY {vid} of another "
        f"session: {counts}"
    )
    # The fence did work: the victim kept its connection for some of the KILLs.
    assert proxy.metrics()("ringgate_kill_fenced_total") > 0, counts
    for c in opened:
        c.close()
    proxy.assert_settled(base, len(opened))
