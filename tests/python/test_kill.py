"""KILL and COM_PROCESS_KILL with the connection id the client sees.

The id in ringgate's greeting (PyMySQL's `thread_id()`, the mariadb CLI's Ctrl-C) is a proxy
id from 2^31 up; ringgate maps a KILL of it to the backend thread that serves that session, for
a session of the same proxy user, and otherwise answers as MariaDB does (1094 unknown, 1095 not
owner). Every test runs in fixed and heap mode, with two workers (the killer and the victim are
often on different workers), and ends with the leak checks of the `proxy` fixture.
"""

import contextlib
import signal
import struct
import subprocess
import time

import pymysql
import pytest
from pymysql.constants import CLIENT, COMMAND

from conftest import APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER
from helpers import PROXY_ID_BASE, direct, in_thread, json_lines, run_node, sandbox_account, wait_backend_statement, write_users_file

def ctrl_c_in_cli(proxy, user, password, sql):
    """Runs `sql` in the mariadb CLI as `user` and presses Ctrl-C once the backend runs it (the
    CLI then sends KILL QUERY on a second connection): (seconds it took, stdout, stderr)."""
    started = time.monotonic()
    p = subprocess.Popen(
        proxy.cli_command("-e", sql, user=user, password=password),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_backend_statement(f"{sql}%")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=15)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return time.monotonic() - started, out, err


def _process_kill(conn, thread_id):
    """COM_PROCESS_KILL (0x0c, 4-byte id), as old PyMySQL's kill() and libmysqlclient's
    mysql_kill() send it; returns the OK packet or raises the ERR."""
    conn._execute_command(COMMAND.COM_PROCESS_KILL, struct.pack("<I", thread_id))
    return conn._read_ok_packet()


def test_connection_ids_are_proxy_ids(proxy):
    base = proxy.connections_total()
    conns = [proxy.connect() for _ in range(6)]
    try:
        ids = [c.thread_id() for c in conns]
        assert len(set(ids)) == len(ids), ids
        assert all(PROXY_ID_BASE <= i < 1 << 32 for i in ids), ids
        # A backend thread id is below the range: the two can never be confused.
        with conns[0].cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            (backend_thread,) = cur.fetchone()
        assert backend_thread < PROXY_ID_BASE
    finally:
        for c in conns:
            c.close()
    proxy.assert_settled(base, 6)


def test_connection_ids_grow_in_connect_order_across_workers(proxy):
    """Each new connection's id is higher than every earlier one's, whichever worker takes it,
    as a server's thread ids are (mysql-connector-python's own test_reconnect checks that a
    reconnect gets a higher id; per-worker sequences gave a lower one whenever the new
    connection landed on the other worker). The residue still names the worker."""
    base = proxy.connections_total()
    ids = []
    for _ in range(20):
        c = proxy.connect()
        ids.append(c.thread_id())
        c.close()
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
    assert {(i - PROXY_ID_BASE) % 2 for i in ids} == {0, 1}, f"both workers: {ids}"
    proxy.assert_settled(base, 20)


@pytest.mark.parametrize(
    "statement",
    [
        "KILL QUERY {id}",
        "kill query {id}",
        "/* from a tool */ KILL\n  Query\t{id} ;",
        "KILL SOFT QUERY {id} -- comment",
    ],
)
def test_kill_query_interrupts_only_the_query(proxy, statement):
    base = proxy.connections_total()
    victim = proxy.connect()
    killer = proxy.connect()
    try:
        join = in_thread(lambda: victim.cursor().execute("SELECT SLEEP(20)"), "the victim's statement")
        wait_backend_statement("SELECT SLEEP(20)%")
        started = time.monotonic()
        with killer.cursor() as cur:
            cur.execute(statement.format(id=victim.thread_id()))
        result, error = join()
        elapsed = time.monotonic() - started
        # MariaDB answers an interrupted SLEEP with 1317, or (when it notices between rows) a
        # result of 1.
        if error is not None:
            assert isinstance(error, pymysql.err.OperationalError), repr(error)
            assert error.args[0] == 1317, error.args
        assert elapsed < 10, f"the query ran on for {elapsed:.1f}s after KILL QUERY"
        # The connection stays usable, on the same backend connection.
        with victim.cursor() as cur:
            cur.execute("SELECT 'still here'")
            assert cur.fetchone() == ("still here",)
        with killer.cursor() as cur:
            cur.execute("SELECT 2")
            assert cur.fetchone() == (2,)
    finally:
        victim.close()
        killer.close()
    proxy.assert_settled(base, 2)


@pytest.mark.parametrize("how", ["statement", "pymysql_kill", "com_process_kill"])
def test_kill_connection_ends_the_victim(proxy, how):
    base = proxy.connections_total()
    victim = proxy.connect()
    killer = proxy.connect()
    try:
        join = in_thread(lambda: victim.cursor().execute("SELECT SLEEP(20)"), "the victim's statement")
        wait_backend_statement("SELECT SLEEP(20)%")
        started = time.monotonic()
        vid = victim.thread_id()
        if how == "statement":
            killer.cursor().execute(f"KILL CONNECTION {vid}")
        elif how == "pymysql_kill":
            killer.kill(vid)
        else:
            _process_kill(killer, vid)
        _, error = join()
        assert time.monotonic() - started < 10
        assert isinstance(error, pymysql.err.OperationalError), repr(error)
        # 2013 (lost connection) or MariaDB's 1927 "Connection was killed", as direct.
        assert error.args[0] in (2013, 1927), error.args
        with pytest.raises(pymysql.err.Error):
            victim.cursor().execute("SELECT 1")
        # The killer is untouched.
        with killer.cursor() as cur:
            cur.execute("SELECT 3")
            assert cur.fetchone() == (3,)
    finally:
        victim.close()
        killer.close()
    proxy.assert_settled(base, 2)


def test_pymysql_issue_36(proxy):
    """PyMySQL's test_issue_36, as its test suite has it: a connection finds itself in SHOW
    PROCESSLIST by its thread_id(), another kills it with Connection.kill(), the killed one fails
    at its next statement, and its id is gone from the process list."""
    base = proxy.connections_total()
    connections = [proxy.connect(), proxy.connect()]
    try:
        conn = connections[1]
        c = conn.cursor()
        c.execute("show processlist")
        kill_id = None
        for row in c.fetchall():
            id = row[0]
            info = row[7]
            if info == "show processlist":
                kill_id = id
                break
        assert kill_id == conn.thread_id()
        # now nuke the connection
        connections[0].kill(kill_id)
        # make sure this connection has broken
        with pytest.raises(Exception):
            c.execute("show tables")
        c.close()
        conn.close()

        # check the process list from the other connection
        time.sleep(0.1)
        c = connections[0].cursor()
        c.execute("show processlist")
        ids = [row[0] for row in c.fetchall()]
        assert kill_id not in ids
        assert connections[0].thread_id() in ids
        # A new connection works; killing the old id again is MariaDB's 1094.
        with proxy.connect() as again, again.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
        with pytest.raises(pymysql.err.MySQLError) as ei:
            connections[0].kill(kill_id)
        assert ei.value.args == (1094, f"Unknown thread id: {kill_id}")
    finally:
        for conn in connections:
            if conn.open:
                conn.close()
    proxy.assert_settled(base, 3)


def test_processlist_shows_proxy_ids_and_only_the_users_sessions(proxy):
    """SHOW [FULL] PROCESSLIST lists the ids KILL takes, with the columns MariaDB gives; with one
    shared backend user, another proxy user's sessions (and their SQL) are not listed."""
    base = proxy.connections_total()
    app = proxy.connect()
    busy = proxy.connect()
    other = proxy.connect(user=HASHED_USER, password=HASHED_PASSWORD)
    side = direct()
    try:
        join = in_thread(lambda: busy.cursor().execute("SELECT SLEEP(1.5) /* app secret */"), "the victim's statement")
        wait_backend_statement("SELECT SLEEP(1.5)%")
        with side.cursor() as cur:
            cur.execute("SHOW PROCESSLIST")
            want_columns = [d[0] for d in cur.description]
        with app.cursor() as cur:
            cur.execute("SHOW FULL PROCESSLIST")
            assert [d[0] for d in cur.description] == want_columns
            rows = {r[0]: r for r in cur.fetchall()}
        assert set(rows) == {app.thread_id(), busy.thread_id()}, rows
        assert rows[app.thread_id()][7] == "SHOW FULL PROCESSLIST"
        assert rows[busy.thread_id()][7] == "SELECT SLEEP(1.5) /* app secret */"
        with other.cursor() as cur:
            cur.execute("show processlist")
            rows = cur.fetchall()
        assert [r[0] for r in rows] == [other.thread_id()], rows
        assert not any("secret" in str(r[7]) for r in rows), rows
        join()
    finally:
        for c in (app, busy, other, side):
            c.close()
    proxy.assert_settled(base, 3)


def test_kill_first_in_a_multi_statement(proxy):
    """mysql2's test-pool-disconnect kills with `kill ?; select sleep(0.05)` on a
    multi-statement connection: the KILL is mapped, the rest runs as sent."""
    base = proxy.connections_total()
    victim = proxy.connect()
    killer = proxy.connect(client_flag=CLIENT.MULTI_STATEMENTS)
    other = proxy.connect(user=HASHED_USER, password=HASHED_PASSWORD, client_flag=CLIENT.MULTI_STATEMENTS)
    try:
        with victim.cursor() as cur:
            cur.execute("SELECT 1")
        vid = victim.thread_id()
        # Another user: refused, and (as after any error) the rest does not run.
        with pytest.raises(pymysql.err.MySQLError) as ei:
            other.cursor().execute(f"kill {vid}; select sleep(0.05)")
        assert ei.value.args == (1095, f"You are not owner of thread {vid}")
        with other.cursor() as cur:
            cur.execute("SELECT 6")
            assert cur.fetchone() == (6,)
        with killer.cursor() as cur:
            cur.execute(f"kill {vid}; select sleep(0.05)")
            assert cur.nextset()
            assert cur.fetchall() == ((0,),)
        with pytest.raises(pymysql.err.Error):
            victim.cursor().execute("SELECT 1")
    finally:
        for c in (victim, killer, other):
            if c.open:
                c.close()
    proxy.assert_settled(base, 3)


def test_unknown_id_is_1094_as_mariadb_says(proxy):
    base = proxy.connections_total()
    with proxy.connect() as conn:
        for unknown in (PROXY_ID_BASE + 12345, 999999):
            for stmt in (f"KILL {unknown}", f"KILL QUERY {unknown}"):
                with pytest.raises(pymysql.err.MySQLError) as ei:
                    conn.cursor().execute(stmt)
                assert ei.value.args == (1094, f"Unknown thread id: {unknown}"), stmt
            with pytest.raises(pymysql.err.MySQLError) as ei:
                _process_kill(conn, unknown)
            assert ei.value.args == (1094, f"Unknown thread id: {unknown}")
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
    proxy.assert_settled(base, 1)


def test_another_users_session_is_1095_and_runs_on(proxy):
    base = proxy.connections_total()
    victim = proxy.connect()
    killer = proxy.connect(user=HASHED_USER, password=HASHED_PASSWORD)
    try:
        join = in_thread(lambda: victim.cursor().execute("SELECT SLEEP(1.5)"), "the victim's statement")
        wait_backend_statement("SELECT SLEEP(1.5)%")
        vid = victim.thread_id()
        for attempt in (
            lambda: killer.cursor().execute(f"KILL QUERY {vid}"),
            lambda: killer.cursor().execute(f"KILL {vid}"),
            lambda: killer.kill(vid),
            lambda: _process_kill(killer, vid),
        ):
            with pytest.raises(pymysql.err.MySQLError) as ei:
                attempt()
            assert ei.value.args == (1095, f"You are not owner of thread {vid}")
        # Refused: the victim's statement ran to its end.
        _, error = join()
        assert error is None, repr(error)
        # The raw backend thread id of that session is refused as well: every session is the
        # same backend user, so the server could not tell them apart.
        with victim.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            (backend_thread,) = cur.fetchone()
        with pytest.raises(pymysql.err.MySQLError) as ei:
            killer.cursor().execute(f"KILL {backend_thread}")
        assert ei.value.args == (1095, f"You are not owner of thread {backend_thread}")
        # The killer's connection is fine, and so is the victim's.
        with killer.cursor() as cur:
            cur.execute("SELECT 4")
            assert cur.fetchone() == (4,)
        with victim.cursor() as cur:
            cur.execute("SELECT 5")
            assert cur.fetchone() == (5,)
    finally:
        victim.close()
        killer.close()
    proxy.assert_settled(base, 2)


def test_mariadb_cli_ctrl_c_kills_the_running_query(proxy):
    """The mariadb CLI answers SIGINT during a query by connecting again and sending
    `KILL QUERY <the greeting's connection id>`; the query must end early with 1317."""
    base = proxy.connections_total()
    elapsed, out, err = ctrl_c_in_cli(proxy, APP_USER, APP_PASSWORD, "SELECT SLEEP(20)")
    assert elapsed < 12, "Ctrl-C did not interrupt the query"
    assert "Query execution was interrupted" in err, (out, err)
    assert "1317" in err, (out, err)
    # Two connections: the query's and the CLI's KILL QUERY connection.
    proxy.assert_settled(base, 2)




@pytest.mark.parametrize("strict_order", ["0", "1"], ids=["with-sleep", "answer-after-victim"])
def test_node_mysql2_pool_disconnect(proxy, strict_order):
    """node mysql2's test-pool-disconnect logic (tests/node/pool_disconnect.js): five pooled
    connections are killed one after another by their threadId with `kill ?; select
    sleep(0.05)`; each kill must succeed and each killed idle connection must get its error
    event. With STRICT_ORDER, rc.9's own plain `kill ?`, whose answer must come after the
    victim's connection has ended, as MariaDB's does: a direct descriptor's shutdown is
    asynchronous, so the answer waits for word of it (failed before: answered first).
    scripts/ensure-deps.sh installs mysql2 into tests/node when node and npm are there."""
    base = proxy.connections_total()
    r = run_node(
        "pool_disconnect.js", proxy,
        PROXY_PORT=str(proxy.port), APP_USER=APP_USER, APP_PASSWORD=APP_PASSWORD, STRICT_ORDER=strict_order,
    )
    (result,) = json_lines(r.stdout)
    assert result["ok"] and result["killCount"] == 5, r.stdout
    # Six connections (the pool's five and the killer); the killed ones' backends are discarded.
    proxy.assert_settled(base, 6)


@pytest.fixture
def kill_accounts(tmp_path, mode):
    """Three sandbox accounts for passthrough identity: two plain users and one with CONNECTION
    ADMIN, and a users file naming them."""
    names = {k: (f"pykill_{k}_{mode}", f"pykill-{k}-secret") for k in ("a", "b", "admin")}
    grants = {"a": (), "b": (), "admin": ("CONNECTION ADMIN ON *.*",)}
    with contextlib.ExitStack() as accounts:
        for k, (user, pw) in names.items():
            accounts.enter_context(sandbox_account(user, pw, grants=grants[k]))
        users = write_users_file(tmp_path / "users.json", {u: [{"Password": pw}] for u, pw in names.values()})
        yield names, users


def test_passthrough_identity_the_server_decides_with_proxy_ids(make_proxy, kill_accounts):
    """--backend-identity passthrough: each user is itself on the backend. A KILL of another
    user's proxy id goes to the server, whose refusal names the proxy id; CONNECTION ADMIN may
    kill it; the own session's id is in SHOW PROCESSLIST; the CLI's Ctrl-C works."""
    names, users = kill_accounts
    proxy = make_proxy(users_file=users, passthrough=True)
    base = proxy.connections_total()
    (ua, pa), (ub, pb), (uadm, padm) = names["a"], names["b"], names["admin"]
    a = proxy.connect(user=ua, password=pa)
    b = proxy.connect(user=ub, password=pb)
    admin = proxy.connect(user=uadm, password=padm)
    try:
        aid = a.thread_id()
        with a.cursor() as cur:
            cur.execute("show processlist")
            rows = cur.fetchall()
        assert [r[0] for r in rows if r[7] == "show processlist"] == [aid], rows
        # Another plain user: the server refuses, naming the id the client used.
        for stmt in (f"KILL QUERY {aid}", f"KILL {aid}"):
            with pytest.raises(pymysql.err.MySQLError) as ei:
                b.cursor().execute(stmt)
            assert ei.value.args == (1095, f"You are not owner of thread {aid}"), stmt
        with pytest.raises(pymysql.err.MySQLError) as ei:
            _process_kill(b, aid)
        assert ei.value.args == (1095, f"You are not owner of thread {aid}")
        with pytest.raises(pymysql.err.MySQLError) as ei:
            b.cursor().execute(f"KILL {PROXY_ID_BASE + 777777}")
        assert ei.value.args == (1094, f"Unknown thread id: {PROXY_ID_BASE + 777777}")
        with b.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
        # CONNECTION ADMIN may: a's query is interrupted, its connection stays.
        join = in_thread(lambda: a.cursor().execute("SELECT SLEEP(20)"), "the victim's statement")
        wait_backend_statement("SELECT SLEEP(20)%")
        admin.cursor().execute(f"KILL QUERY {aid}")
        _, error = join()
        assert error is not None and error.args[0] == 1317, repr(error)
        with a.cursor() as cur:
            cur.execute("SELECT 2")
            assert cur.fetchone() == (2,)
    finally:
        for c in (a, b, admin):
            c.close()
    # The mariadb CLI's Ctrl-C: its second connection logs in as the same user.
    elapsed, _, err = ctrl_c_in_cli(proxy, ua, pa, "SELECT SLEEP(21)")
    assert elapsed < 12 and "1317" in err, err
    proxy.assert_settled(base, 5)


def test_kill_connection_of_a_session_waiting_for_a_backend(make_proxy):
    """A same-user session that has logged in but waits for a backend connection (the only one
    is busy) has nothing running: KILL answers OK, and KILL CONNECTION ends that client."""
    proxy = make_proxy(workers=1, extra_args=("--backend-max-connections", "1", "--backend-pool-size", "1"))
    base = proxy.connections_total()
    holder = proxy.connect()
    try:
        if proxy.pooling == "transaction":
            # An idle client holds no connection there: a transaction keeps the only one.
            holder.begin()
        hid = holder.thread_id()
        join = in_thread(lambda: proxy.connect(connect_timeout=30), "the waiting client's login")
        # One worker hands out consecutive ids: the waiting client got the next one.
        waiting_id = hid + 1
        deadline = time.monotonic() + 10
        while proxy.metrics()("ringgate_pool_waiters") < 1:
            assert time.monotonic() < deadline, "the second client never waited for the pool"
            time.sleep(0.05)
        started = time.monotonic()
        with holder.cursor() as cur:
            cur.execute(f"KILL QUERY {waiting_id}")
            cur.execute(f"KILL {waiting_id}")
        result, error = join()
        assert result is None and isinstance(error, pymysql.err.OperationalError), (result, error)
        assert time.monotonic() - started < 5, "the waiting client was not closed at once"
        with holder.cursor() as cur:
            cur.execute("SELECT 7")
            assert cur.fetchone() == (7,)
    finally:
        holder.close()
    proxy.assert_settled(base, 2)
