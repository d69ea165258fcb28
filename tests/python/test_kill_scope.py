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

import time

import pymysql
import pytest
from pymysql.constants import CLIENT, COMMAND

from conftest import HASHED_PASSWORD, HASHED_USER, SHARED_ACCOUNT_PASSWORD
from helpers import backend_statement, direct, ended_within, in_thread

ER_NOT_SUPPORTED_YET = 1235
ER_KILL_DENIED_ERROR = 1095


def sleep_in_thread(conn, tag):
    """Runs a SLEEP(30) tagged `tag` on conn in a thread; returns a join() giving (rows, error)."""

    def sleep():
        with conn.cursor() as cur:
            cur.execute(f"SELECT SLEEP(30) AS `{tag}`")
            return cur.fetchall()

    join = in_thread(sleep, f"the SLEEP tagged {tag}")
    return lambda: join(60)


def direct_sleeper(user, password, tag):
    """A connection straight to the server as `user`, running a tagged SLEEP(30) in a thread:
    (connection, join, (backend thread id, query id))."""
    conn = direct(user, password)
    join = sleep_in_thread(conn, tag)
    running = backend_statement(f"%{tag}%")
    assert running is not None
    return conn, join, running


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
        join = sleep_in_thread(victim, tag)
        running = backend_statement(f"%{tag}%")
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
            assert backend_statement(f"%{tag}%", timeout=0) == running, f"{form!r} reached the victim"
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
        join = sleep_in_thread(victim, tag)
        running = backend_statement(f"%{tag}%")
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
            assert backend_statement(f"%{tag}%", timeout=0) == running, "a refused KILL reached the victim"
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
        pinned = proxy.metrics().sum_of("ringgate_sessions_pinned_total")
        assert pinned == 0, proxy.metrics()
    finally:
        for c in (admin, other, victim):
            c.close()
    proxy.assert_settled(base, 3)


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
    conn, join, running = direct_sleeper(acct, SHARED_ACCOUNT_PASSWORD, tag)
    thread = running[0]
    try:
        with pytest.raises(pymysql.err.MySQLError) as ei:
            tenant.cursor().execute(f"KILL QUERY {thread}")
        assert ei.value.args == (ER_KILL_DENIED_ERROR, f"You are not owner of thread {thread}")
        time.sleep(0.1)
        assert backend_statement(f"%{tag}%", timeout=0) == running, "the refused KILL reached the thread"
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
    conn, join, running = direct_sleeper(proxy.backend["user"], proxy.backend["password"], tag)
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
        assert backend_statement(f"%{tag}%", timeout=0) == running, "the refused KILL reached the thread"
    finally:
        with direct() as d, d.cursor() as cur:
            cur.execute(f"KILL QUERY {thread}")
        join()
        conn.close()
    proxy.assert_settled(base, 1)
