"""KILL is scoped by the proxy user, however it is written and in every identity mode.

An attacker logged in as one proxy user tries every way MariaDB's grammar offers to reach
another user's session: expressions as the id, `KILL USER`, `KILL QUERY ID`, executable comments,
a KILL after another statement, and dynamic SQL (`PREPARE`, `EXECUTE IMMEDIATE`). With a shared
backend account the server cannot tell the users apart; with passthrough identity two proxy users
mapped to one backend account (`BackendUser`) cannot be told apart either. Each attempt must be
refused and the victim's statement must run on. A user whose backend account has CONNECTION ADMIN
may kill another user's session even when that session holds no backend connection (PyMySQL's
test_issue_36 under transaction pooling).
"""

import json
import threading
import time

import pymysql
import pytest
from pymysql.constants import CLIENT, COMMAND

from conftest import APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER, backend_env
from helpers import direct, ended_within

ER_NOT_SUPPORTED_YET = 1235
ER_KILL_DENIED_ERROR = 1095
ER_QUERY_INTERRUPTED = 1317


def _start(conn, sql):
    """Runs sql on conn in a thread; returns a join() giving (rows, error)."""
    box = {}

    def target():
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                box["rows"] = cur.fetchall()
        except Exception as e:  # noqa: BLE001 - the test inspects it
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()

    def join(timeout=60):
        t.join(timeout)
        assert not t.is_alive(), f"{sql!r} did not return"
        return box.get("rows"), box.get("error")

    return join


def _running(tag, timeout=10.0):
    """(thread id, query id) of the backend thread running the statement tagged `tag`, seen
    from a direct connection; None once nothing runs it."""
    deadline = time.monotonic() + timeout
    with direct() as d, d.cursor() as cur:
        while True:
            cur.execute(
                "SELECT ID, QUERY_ID FROM information_schema.PROCESSLIST WHERE INFO LIKE %s AND ID <> CONNECTION_ID()",
                ("%" + tag + "%",),
            )
            row = cur.fetchone()
            if row is not None or time.monotonic() >= deadline:
                return row
            time.sleep(0.05)


def _attack_forms(thread, query_id, proxy_id, backend_user):
    """The KILL forms ringgate cannot map to a proxy user's own session."""
    return [
        f"KILL QUERY {thread}+0",
        f"KILL QUERY ({thread})",
        f"KILL QUERY {proxy_id}+0",
        f"KILL QUERY USER {backend_user}",
        f"KILL QUERY USER '{backend_user}'",
        f"KILL HARD QUERY ID {query_id}",
        f"KILL QUERY ID {query_id}",
        f"/*!KILL QUERY {thread}*/",
        f"/*M!100000 KILL QUERY {thread} */",
        f"KILL /*!QUERY*/ {thread}",
        f"kIlL\tquery\n/* x */ {thread} + 0",
        f"SELECT 1; KILL QUERY {thread}",
        f"DO 1; /*!KILL QUERY */ {thread}",
        f"PREPARE s FROM 'KILL QUERY {thread}'",
        f"EXECUTE IMMEDIATE 'KILL QUERY {thread}'",
        f"EXECUTE IMMEDIATE \"kill query {thread}\"",
        f"BEGIN NOT ATOMIC KILL QUERY {thread}; END",
    ]


def _assert_forms_refused(attacker, victim, forms_of, backend_user):
    """Each form from the attacker gets ERR 1235 and the victim's statement runs on."""
    for i in range(len(forms_of(0, 0, 0, backend_user))):
        tag = f"kill_scope_victim_{i}_{time.monotonic_ns()}"
        join = _start(victim, f"SELECT SLEEP(30) AS `{tag}`")
        running = _running(tag)
        assert running is not None, "the victim's statement never ran"
        thread, query_id = running
        form = forms_of(thread, query_id, victim.thread_id(), backend_user)[i]
        try:
            with pytest.raises(pymysql.err.MySQLError) as ei:
                with attacker.cursor() as cur:
                    cur.execute(form)
                    while cur.nextset():
                        pass
            assert ei.value.args[0] == ER_NOT_SUPPORTED_YET, (form, ei.value.args)
            assert "KILL" in ei.value.args[1], (form, ei.value.args)
            time.sleep(0.1)
            assert _running(tag, timeout=0) == running, f"{form!r} reached the victim"
        finally:
            with direct() as d, d.cursor() as cur:
                cur.execute(f"KILL QUERY {thread}")
            join()
        with attacker.cursor() as cur:
            cur.execute("SELECT 7")
            assert cur.fetchone() == (7,)


def test_shared_identity_refuses_every_kill_form_it_cannot_map(proxy):
    """--backend-identity shared: every session is the sandbox's account, so any KILL that
    reaches the server unmapped could stop another proxy user's statement."""
    base = proxy.connections_total()
    victim = proxy.connect(user=HASHED_USER, password=HASHED_PASSWORD, autocommit=True)
    attacker = proxy.connect(client_flag=CLIENT.MULTI_STATEMENTS, autocommit=True)
    try:
        _assert_forms_refused(attacker, victim, _attack_forms, proxy.backend["user"])
    finally:
        victim.close()
        attacker.close()
    proxy.assert_settled(base, 2)


@pytest.fixture
def same_account_users(tmp_path, mode):
    """Passthrough identity with two proxy users mapped to one backend account (BackendUser),
    and a third, `admin`, mapped to an account with CONNECTION ADMIN."""
    acct, acct_pw = f"kscope_shared_{mode}", "kscope-shared-pw"
    adm, adm_pw = f"kscope_admin_{mode}", "kscope-admin-pw"
    with direct() as root, root.cursor() as cur:
        for user, pw in ((acct, acct_pw), (adm, adm_pw)):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
            cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED WITH mysql_native_password USING PASSWORD(%s)", (pw,))
        cur.execute(f"GRANT CONNECTION ADMIN ON *.* TO '{adm}'@'%'")
    users = tmp_path / "users.json"
    users.write_text(
        json.dumps(
            {
                "tenant_a": [{"Password": "a-pw", "BackendUser": acct, "BackendPassword": acct_pw}],
                "tenant_b": [{"Password": "b-pw", "BackendUser": acct, "BackendPassword": acct_pw}],
                "admin": [{"Password": "adm-pw", "BackendUser": adm, "BackendPassword": adm_pw}],
            }
        )
    )
    yield users, acct
    with direct() as root, root.cursor() as cur:
        for user in (acct, adm):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


def test_passthrough_users_of_one_backend_account_cannot_kill_each_other(make_proxy, same_account_users):
    """tenant_a and tenant_b are the same account on the server, which would let either kill
    the other's thread: ringgate refuses it (1095 for an id it maps, 1235 for a form it cannot),
    and SHOW PROCESSLIST does not show the other tenant's statements."""
    users, acct = same_account_users
    proxy = make_proxy(users_file=users, passthrough=True)
    base = proxy.connections_total()
    victim = proxy.connect(user="tenant_b", password="b-pw", autocommit=True)
    attacker = proxy.connect(user="tenant_a", password="a-pw", client_flag=CLIENT.MULTI_STATEMENTS, autocommit=True)
    try:
        tag = f"kscope_pt_{time.monotonic_ns()}"
        join = _start(victim, f"SELECT SLEEP(30) AS `{tag}`")
        running = _running(tag)
        assert running is not None
        thread, _ = running
        vid = victim.thread_id()
        try:
            for stmt, shown in ((f"KILL QUERY {vid}", vid), (f"KILL QUERY {thread}", thread), (f"KILL {thread}", thread)):
                with pytest.raises(pymysql.err.MySQLError) as ei:
                    attacker.cursor().execute(stmt)
                assert ei.value.args == (ER_KILL_DENIED_ERROR, f"You are not owner of thread {shown}"), stmt
            with attacker.cursor() as cur:
                cur.execute("SHOW FULL PROCESSLIST")
                infos = [r[7] or "" for r in cur.fetchall()]
            assert not [i for i in infos if tag in i], infos
            assert _running(tag, timeout=0) == running, "a refused KILL reached the victim"
        finally:
            with direct() as d, d.cursor() as cur:
                cur.execute(f"KILL QUERY {thread}")
            join()
        _assert_forms_refused(attacker, victim, _attack_forms, acct)
    finally:
        victim.close()
        attacker.close()
    proxy.assert_settled(base, 2)


def test_passthrough_privileged_kill_of_an_idle_session(make_proxy, same_account_users):
    """PyMySQL's test_issue_36 with two users: `admin`'s account has CONNECTION ADMIN, so the
    server would let it kill tenant_b's connection, whether or not that session holds a backend
    connection at that instant (with transaction pooling an idle one holds none). tenant_a, the
    same account as tenant_b but without the privilege, may not."""
    users, _ = same_account_users
    proxy = make_proxy(users_file=users, passthrough=True)
    base = proxy.connections_total()
    admin = proxy.connect(user="admin", password="adm-pw")
    other = proxy.connect(user="tenant_a", password="a-pw")
    victim = proxy.connect(user="tenant_b", password="b-pw")
    try:
        vid = victim.thread_id()
        with victim.cursor() as cur:
            cur.execute("SELECT 1")
        for stmt in (f"KILL QUERY {vid}", f"KILL {vid}"):
            with pytest.raises(pymysql.err.MySQLError) as ei:
                other.cursor().execute(stmt)
            assert ei.value.args == (ER_KILL_DENIED_ERROR, f"You are not owner of thread {vid}"), stmt
        with victim.cursor() as cur:
            cur.execute("SELECT 2")
            assert cur.fetchone() == (2,)
        admin.kill(vid)
        # The victim's client is closed by its own worker, woken by the killer's (a direct
        # descriptor only its ring can name), so the end may trail the killer's OK a little.
        assert ended_within(victim._sock, 3.0), "the killed session's client stayed open"
        with admin.cursor() as cur:
            cur.execute("SELECT 4")
            assert cur.fetchone() == (4,)
        # The blocks ringgate sent for these KILLs are compound statements, which the lexer
        # cannot split; they leave no session state, so neither killer was pinned.
        pinned = sum(v for k, v in proxy.metrics().items() if k.startswith("ringgate_sessions_pinned_total"))
        assert pinned == 0, proxy.metrics()
    finally:
        for c in (admin, other, victim):
            c.close()
    proxy.assert_settled(base, 3)


def _raw_id_race(proxy, victim_login, bystander_login):
    """A victim runs short autocommit statements and reports the backend thread each ran on; a
    killer of the victim's own proxy user keeps sending KILL QUERY <that raw thread id>, held
    30 ms between mapping and sending (RINGGATE_DEBUG_KILL_DELAY_MS); bystanders of another
    proxy user queue for the same backend connections. Returns the bystanders' interruptions."""
    by_worker = {0: [], 1: []}
    opened = []
    while True:
        login = victim_login if len(opened) % 2 == 0 else bystander_login
        c = proxy.connect(autocommit=True, **login)
        opened.append((c, login is victim_login))
        by_worker[(c.thread_id() - (1 << 31)) % 2].append((c, login is victim_login))
        for w in (0, 1):
            mine = [c for c, v in by_worker[w] if v]
            others = [c for c, v in by_worker[w] if not v]
            killers = [c for c, v in by_worker[1 - w] if v]
            if mine and len(others) >= 2 and killers:
                break
        else:
            assert len(opened) < 60, "the kernel put every connection on one worker"
            continue
        break
    victim, bystanders, killer = mine[0], others[:2], killers[0]
    stop = threading.Event()
    last_thread = {"id": None}
    counts = {"victim": 0, "bystander": 0, "kills": 0}
    hits, errors = [], []

    def victim_loop():
        try:
            while not stop.is_set():
                try:
                    with victim.cursor() as cur:
                        cur.execute("SELECT CONNECTION_ID(), SLEEP(0.01)")
                        last_thread["id"] = cur.fetchone()[0]
                    counts["victim"] += 1
                except pymysql.err.OperationalError as e:
                    if e.args[0] != ER_QUERY_INTERRUPTED:
                        raise
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(("victim", e))

    def bystander_loop(conn):
        try:
            while not stop.is_set():
                try:
                    with conn.cursor() as cur:
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
                t = last_thread["id"]
                if t is not None:
                    try:
                        with killer.cursor() as cur:
                            cur.execute(f"KILL QUERY {t}")
                    except pymysql.err.OperationalError as e:
                        # The thread serves another user's session now: refused.
                        if e.args[0] != ER_KILL_DENIED_ERROR:
                            raise
                    counts["kills"] += 1
                time.sleep(0.03)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(("killer", e))

    threads = [threading.Thread(target=victim_loop), threading.Thread(target=killer_loop)]
    threads += [threading.Thread(target=bystander_loop, args=(b,)) for b in bystanders]
    for t in threads:
        t.start()
    time.sleep(6.0)
    stop.set()
    for t in threads:
        t.join(30)
    for c, _ in opened:
        c.close()
    assert not errors, errors
    assert counts["kills"] > 20 and counts["victim"] > 20 and counts["bystander"] > 5, counts
    return hits, counts, len(opened)


RACE_ARGS = ("--backend-max-connections", "3", "--backend-pool-size", "1")


def test_raw_thread_id_kill_racing_a_release_shared(make_proxy, monkeypatch):
    """The raw-thread-id path of the killer's own user (shared identity) is fenced like the
    proxy-id path: a KILL QUERY of the thread the victim held never interrupts the statement of
    another user's session that got that connection meanwhile."""
    monkeypatch.setenv("RINGGATE_DEBUG_KILL_DELAY_MS", "30")
    proxy = make_proxy(pooling="transaction", workers=2, extra_args=RACE_ARGS)
    base = proxy.connections_total()
    hits, counts, n = _raw_id_race(
        proxy, {"user": APP_USER, "password": APP_PASSWORD}, {"user": HASHED_USER, "password": HASHED_PASSWORD}
    )
    assert not hits, f"{len(hits)} bystander statements were interrupted: {counts}"
    proxy.assert_settled(base, n)


def test_raw_thread_id_kill_racing_a_release_passthrough(make_proxy, monkeypatch, same_account_users):
    """The same with passthrough identity, where the victim's and the bystanders' proxy users
    are one backend account: the server would carry out the KILL on whoever holds the thread."""
    monkeypatch.setenv("RINGGATE_DEBUG_KILL_DELAY_MS", "30")
    users, _ = same_account_users
    proxy = make_proxy(users_file=users, passthrough=True, pooling="transaction", workers=2, extra_args=RACE_ARGS)
    base = proxy.connections_total()
    hits, counts, n = _raw_id_race(
        proxy, {"user": "tenant_a", "password": "a-pw"}, {"user": "tenant_b", "password": "b-pw"}
    )
    assert not hits, f"{len(hits)} bystander statements were interrupted: {counts}"
    proxy.assert_settled(base, n)


@pytest.mark.parametrize("pooling", ["transaction", "session"])
def test_a_prepared_kill_is_refused(make_proxy, pooling):
    """COM_STMT_PREPARE of a KILL (the binary protocol's prepare, whose id is a parameter the
    proxy never maps) gets ERR 1235 whether or not the session holds a backend connection,
    and the connection goes on."""
    proxy = make_proxy(pooling=pooling)
    base = proxy.connections_total()
    with proxy.connect() as conn:
        for sql in ("KILL QUERY ?", "/*!KILL */ ?", "SELECT 1; KILL ?"):
            conn._execute_command(COMMAND.COM_STMT_PREPARE, sql)
            with pytest.raises(pymysql.err.MySQLError) as ei:
                conn._read_packet()
            assert ei.value.args[0] == ER_NOT_SUPPORTED_YET, (sql, ei.value.args)
        with conn.cursor() as cur:
            cur.execute("SELECT 8")
            assert cur.fetchone() == (8,)
    proxy.assert_settled(base, 1)


def _direct_sleeper(user, password, tag):
    """A connection straight to the server as `user`, running a tagged SLEEP(30) in a thread:
    (connection, join, backend thread id)."""
    b = backend_env()
    conn = pymysql.connect(host=b["host"], port=b["port"], user=user, password=password, autocommit=True)
    join = _start(conn, f"SELECT SLEEP(30) AS `{tag}`")
    running = _running(tag)
    assert running is not None
    return conn, join, running


def test_a_thread_that_serves_no_session_is_not_anyones_to_kill(make_proxy, same_account_users):
    """A raw thread id that serves no session of ringgate (here a direct connection of the
    same account; in the pool, an idle connection that may be leased to any session the
    moment the KILL arrives) may be killed only by an account with CONNECTION ADMIN or SUPER:
    tenant_a gets 1095 and the statement runs on; admin kills it."""
    users, acct = same_account_users
    proxy = make_proxy(users_file=users, passthrough=True)
    base = proxy.connections_total()
    tenant = proxy.connect(user="tenant_a", password="a-pw")
    admin = proxy.connect(user="admin", password="adm-pw")
    tag = f"kscope_outside_{time.monotonic_ns()}"
    conn, join, running = _direct_sleeper(acct, "kscope-shared-pw", tag)
    thread = running[0]
    try:
        with pytest.raises(pymysql.err.MySQLError) as ei:
            tenant.cursor().execute(f"KILL QUERY {thread}")
        assert ei.value.args == (ER_KILL_DENIED_ERROR, f"You are not owner of thread {thread}")
        time.sleep(0.1)
        assert _running(tag, timeout=0) == running, "the refused KILL reached the thread"
        admin.cursor().execute(f"KILL QUERY {thread}")
        rows, error = join()
        assert error is not None or rows == ((1,),), (rows, error)
    finally:
        conn.close()
        tenant.close()
        admin.close()
    proxy.assert_settled(base, 2)


def test_shared_identity_a_thread_that_serves_no_session_is_refused(proxy):
    """With a shared backend account every thread of that account is every user's to the
    server: a raw id that serves none of the killer's sessions is refused (1095), and a thread
    that does not exist is the server's 1094."""
    base = proxy.connections_total()
    tag = f"kscope_outside_shared_{time.monotonic_ns()}"
    conn, join, running = _direct_sleeper(proxy.backend["user"], proxy.backend["password"], tag)
    thread = running[0]
    try:
        with proxy.connect() as attacker:
            with pytest.raises(pymysql.err.MySQLError) as ei:
                attacker.cursor().execute(f"KILL QUERY {thread}")
            assert ei.value.args == (ER_KILL_DENIED_ERROR, f"You are not owner of thread {thread}")
            with pytest.raises(pymysql.err.MySQLError) as ei:
                attacker.cursor().execute("KILL 999999")
            assert ei.value.args == (1094, "Unknown thread id: 999999")
        time.sleep(0.1)
        assert _running(tag, timeout=0) == running, "the refused KILL reached the thread"
    finally:
        with direct() as d, d.cursor() as cur:
            cur.execute(f"KILL QUERY {thread}")
        join()
        conn.close()
    proxy.assert_settled(base, 1)
