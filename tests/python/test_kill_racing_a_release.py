"""A KILL QUERY that races its target's release of a backend connection never interrupts the
next session on that connection.

Under transaction pooling a session gives its backend connection back after each autocommit
statement, so a KILL mapped to the thread it held may arrive when another session holds that
thread. The debug build holds the killer's worker 30 ms between mapping and sending
(RINGGATE_DEBUG_KILL_DELAY_MS), as a loaded box may, so that a connection given back in that
window reaches a waiting bystander. The fence keeps the victim on its connection until the
KILL is answered, whether the KILL names the victim by its proxy id or by the raw thread id
its own user saw.
"""

import threading
import time

import pymysql
from pymysql.constants import ER

from conftest import APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER
from helpers import worker_of

DURATION = 6.0
# Three backend connections: one for the killer's worker, two for the victim and the
# bystanders, who queue for them, so a connection the victim gives back goes straight to a
# waiting bystander.
RACE_ARGS = ("--backend-max-connections", "3", "--backend-pool-size", "1")


def race_proxy(make_proxy, monkeypatch, **kw):
    monkeypatch.setenv("RINGGATE_DEBUG_KILL_DELAY_MS", "30")
    return make_proxy(pooling="transaction", workers=2, extra_args=RACE_ARGS, **kw)


def place(proxy, victim_login, bystander_login):
    """Opens connections, a victim's and a bystander's in turn, until one worker has a victim
    and two bystanders and the other worker a victim-user connection for the killer (its
    delay must not hold the victim's worker): (victim, bystanders, killer, all opened)."""
    by_worker = {0: [], 1: []}
    opened = []
    while True:
        is_victim = len(opened) % 2 == 0
        # Autocommit on: with it off every statement would open a transaction and keep its
        # connection.
        c = proxy.connect(autocommit=True, **(victim_login if is_victim else bystander_login))
        opened.append(c)
        by_worker[worker_of(c)].append((c, is_victim))
        for w in (0, 1):
            mine = [c for c, v in by_worker[w] if v]
            others = [c for c, v in by_worker[w] if not v]
            killers = [c for c, v in by_worker[1 - w] if v]
            if mine and len(others) >= 2 and killers:
                return mine[0], others[:2], killers[0], opened
        assert len(opened) < 60, "the kernel put every connection on one worker"


def race(victim, victim_sql, killer, kill_target, bystanders, refusals=()):
    """For DURATION seconds: the victim runs `victim_sql` (a short autocommit statement) again
    and again; the killer sends KILL QUERY kill_target(the victim's last row) every 30 ms,
    taking an ERR in `refusals` as an answer; the bystanders run SELECT SLEEP(0.03). Returns
    (the times of the bystanders' interrupted statements, counts)."""
    stop = threading.Event()
    last_row = {"row": None}
    counts = {"victim": 0, "victim_killed": 0, "bystander": 0, "kills": 0}
    hits, errors = [], []

    def victim_loop():
        try:
            while not stop.is_set():
                try:
                    with victim.cursor() as cur:
                        cur.execute(victim_sql)
                        last_row["row"] = cur.fetchone()
                    counts["victim"] += 1
                except pymysql.err.OperationalError as e:
                    # Its own KILL QUERY may land on its own next statement: that is right.
                    if e.args[0] != ER.QUERY_INTERRUPTED:
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
                    if e.args[0] != ER.QUERY_INTERRUPTED:
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
                target = kill_target(last_row["row"])
                if target is not None:
                    try:
                        with killer.cursor() as cur:
                            cur.execute(f"KILL QUERY {target}")
                    except pymysql.err.OperationalError as e:
                        if e.args[0] not in refusals:
                            raise
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
    return hits, counts


def test_kill_query_racing_a_release_never_hits_another_session(make_proxy, monkeypatch):
    """KILL QUERY <victim's proxy id>: each KILL is mapped to the thread the victim holds when
    ringgate reads it; were the victim to give that connection back before the KILL is sent
    and a bystander get it, the bystander's statement would be cut short."""
    proxy = race_proxy(make_proxy, monkeypatch)
    base = proxy.connections_total()
    app = {"user": APP_USER, "password": APP_PASSWORD}
    victim, bystanders, killer, opened = place(proxy, app, app)
    vid = victim.thread_id()
    # Long enough for a KILL to find it holding a connection.
    hits, counts = race(victim, "SELECT SLEEP(0.01)", killer, lambda _: vid, bystanders)
    assert not hits, (
        f"{len(hits)} bystander statements were interrupted by KILL QUERY {vid} of another "
        f"session: {counts}"
    )
    # The fence did work: the victim kept its connection for some of the KILLs.
    assert proxy.metrics()("ringgate_kill_fenced_total") > 0, counts
    for c in opened:
        c.close()
    proxy.assert_settled(base, len(opened))


def raw_id_race(proxy, victim_login, bystander_login):
    """The victim reports the backend thread each of its statements ran on; a killer of the
    victim's own proxy user keeps sending KILL QUERY <that raw thread id>, refused (1095) once
    the thread serves another user's session; bystanders of another proxy user queue for the
    same backend connections. Returns the bystanders' interruptions."""
    victim, bystanders, killer, opened = place(proxy, victim_login, bystander_login)
    hits, counts = race(
        victim,
        "SELECT CONNECTION_ID(), SLEEP(0.01)",
        killer,
        lambda row: None if row is None else row[0],
        bystanders,
        refusals=(ER.KILL_DENIED_ERROR,),
    )
    for c in opened:
        c.close()
    return hits, counts, len(opened)


def test_raw_thread_id_kill_racing_a_release_shared(make_proxy, monkeypatch):
    """The raw-thread-id path of the killer's own user (shared identity) is fenced like the
    proxy-id path: a KILL QUERY of the thread the victim held never interrupts the statement of
    another user's session that got that connection meanwhile."""
    proxy = race_proxy(make_proxy, monkeypatch)
    base = proxy.connections_total()
    hits, counts, n = raw_id_race(
        proxy, {"user": APP_USER, "password": APP_PASSWORD}, {"user": HASHED_USER, "password": HASHED_PASSWORD}
    )
    assert not hits, f"{len(hits)} bystander statements were interrupted: {counts}"
    proxy.assert_settled(base, n)


def test_raw_thread_id_kill_racing_a_release_passthrough(make_proxy, monkeypatch, same_account_users):
    """The same with passthrough identity, where the victim's and the bystanders' proxy users
    are one backend account: the server would carry out the KILL on whoever holds the thread."""
    users, _ = same_account_users
    proxy = race_proxy(make_proxy, monkeypatch, users_file=users, passthrough=True)
    base = proxy.connections_total()
    hits, counts, n = raw_id_race(
        proxy, {"user": "tenant_a", "password": "a-pw"}, {"user": "tenant_b", "password": "b-pw"}
    )
    assert not hits, f"{len(hits)} bystander statements were interrupted: {counts}"
    proxy.assert_settled(base, n)
