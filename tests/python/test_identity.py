"""Per-user backend identity (--backend-identity passthrough, the default) with PyMySQL.

Each test creates two accounts on the sandbox MariaDB (through a direct connection as the
sandbox's `ringgate` account) and a users file naming them: one with a plaintext `Password`, one
with only its `MysqlNativePassword` hash, so that ringgate has to recover SHA1(password) from the
client's login. Runs in fixed and heap mode; each proxy ends with the leak checks.
"""

import json
import threading
import time

import pymysql
import pytest

from helpers import direct


@pytest.fixture
def accounts(tmp_path, mode):
    root = direct()
    a = (f"pya_{mode}", f"pya-secret-{mode}")
    b = (f"pyb_{mode}", f"pyb-secret-{mode}")
    table = f"ringgate_test.py_only_a_{mode}"
    with root.cursor() as cur:
        for user, pw in (a, b):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
            cur.execute(
                f"CREATE USER '{user}'@'%%' IDENTIFIED WITH mysql_native_password USING PASSWORD(%s)", (pw,)
            )
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(f"CREATE TABLE {table} (v INT)")
        cur.execute(f"GRANT SELECT ON {table} TO '{a[0]}'@'%'")
        cur.execute("SELECT PASSWORD(%s)", (b[1],))
        (b_hash,) = cur.fetchone()
    users = tmp_path / "users.json"
    users.write_text(
        json.dumps(
            {
                a[0]: [{"Password": a[1]}],
                b[0]: [{"MysqlNativePassword": b_hash}],
                # In the users file with a password the server does not have.
                f"pystale_{mode}": [{"Password": "not-on-the-server"}],
            }
        )
    )
    yield {"a": a, "b": b, "table": table, "users": users, "stale": f"pystale_{mode}"}
    with root.cursor() as cur:
        for user, _ in (a, b):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        cur.execute(f"DROP TABLE IF EXISTS {table}")
    root.close()


def test_each_user_is_itself_and_isolated(make_proxy, accounts):
    proxy = make_proxy(users_file=accounts["users"], passthrough=True)
    base = proxy.connections_total()
    (ua, pa), (ub, pb) = accounts["a"], accounts["b"]
    conn_a = proxy.connect(user=ua, password=pa)
    conn_b = proxy.connect(user=ub, password=pb)
    cur_a, cur_b = conn_a.cursor(), conn_b.cursor()
    cur_a.execute("SELECT CURRENT_USER(), CONNECTION_ID()")
    me_a, thread_a = cur_a.fetchone()
    cur_b.execute("SELECT CURRENT_USER()")
    assert me_a == f"{ua}@%"
    assert cur_b.fetchone()[0] == f"{ub}@%"

    # a's running query is invisible to b, and b may not kill it.
    done = {}

    def sleeper():
        cur_a.execute("SELECT SLEEP(3)")
        done["a"] = cur_a.fetchone()

    t = threading.Thread(target=sleeper)
    t.start()
    time.sleep(0.5)
    cur_b.execute("SHOW FULL PROCESSLIST")
    listing = cur_b.fetchall()
    assert all(row[1] == ub for row in listing), listing
    assert not any("SLEEP" in str(row[7]) for row in listing), listing
    with pytest.raises(pymysql.err.OperationalError) as ei:
        cur_b.execute(f"KILL QUERY {thread_a}")
    assert ei.value.args[0] == 1095
    with pytest.raises(pymysql.err.OperationalError) as ei:
        cur_b.execute(f"SELECT * FROM {accounts['table']}")
    assert ei.value.args[0] == 1142
    t.join()
    assert done["a"] == (0,)
    cur_a.execute(f"SELECT COUNT(*) FROM {accounts['table']}")
    assert cur_a.fetchone() == (0,)
    conn_a.close()
    conn_b.close()
    proxy.assert_settled(base, 2)


def test_the_servers_refusal_reaches_only_that_client(make_proxy, accounts):
    proxy = make_proxy(users_file=accounts["users"], passthrough=True)
    base = proxy.connections_total()
    (ua, pa) = accounts["a"]
    conn_a = proxy.connect(user=ua, password=pa)
    with pytest.raises(pymysql.err.OperationalError) as ei:
        proxy.connect(user=accounts["stale"], password="not-on-the-server")
    code, message = ei.value.args
    assert code == 1045
    assert message.startswith(f"Access denied for user '{accounts['stale']}'@'127.0.0.1'"), message
    with conn_a.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        assert cur.fetchone()[0] == f"{ua}@%"
    conn_a.close()
    proxy.assert_settled(base, 2)
