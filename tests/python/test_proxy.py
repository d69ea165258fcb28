"""End-to-end tests of ringgate with PyMySQL and the mariadb CLI (fixed and heap mode each)."""

import subprocess
import time

import pymysql
import pytest
from pymysql.constants import CLIENT

from conftest import APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER, TEST_DB, mariadb_cli

MIB = 1024 * 1024


def test_simple_query(proxy):
    base = proxy.connections_total()
    with proxy.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
        cur.execute("SELECT @@version")
        (version,) = cur.fetchone()
        assert "mariadb" in version.lower(), version
        cur.execute("SELECT seq FROM ringgate_test.seq_1_to_500")
        assert [r[0] for r in cur.fetchall()] == list(range(1, 501))
        with pytest.raises(pymysql.err.ProgrammingError) as ei:
            cur.execute("SELECT * FROM ringgate_test.no_such_table_py")
        assert ei.value.args[0] == 1146
        cur.execute("SELECT 'still here'")
        assert cur.fetchone() == ("still here",)
    proxy.assert_settled(base, 1)


def test_multi_statement(proxy):
    base = proxy.connections_total()
    with proxy.connect(client_flag=CLIENT.MULTI_STATEMENTS) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1; SELECT 2,3; SELECT 'a'")
        sets = [cur.fetchall()]
        while cur.nextset():
            sets.append(cur.fetchall())
        assert sets == [((1,),), ((2, 3),), (("a",),)]
        cur.execute("SELECT 5")
        assert cur.fetchone() == (5,)
    proxy.assert_settled(base, 1)


def test_parametrized_queries(proxy, mode):
    table = f"{TEST_DB}.py_params_{mode}"
    base = proxy.connections_total()
    with proxy.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, name VARCHAR(100), note TEXT NULL)")
        cur.executemany(
            f"INSERT INTO {table} (id, name, note) VALUES (%s, %s, %s)",
            [(i, f"name-{i}", None if i % 2 else "it's \"quoted\"") for i in range(1, 101)],
        )
        assert cur.rowcount == 100
        cur.execute(f"SELECT id, name, note FROM {table} WHERE id BETWEEN %s AND %s ORDER BY id", (10, 12))
        assert cur.fetchall() == (
            (10, "name-10", "it's \"quoted\""),
            (11, "name-11", None),
            (12, "name-12", "it's \"quoted\""),
        )
        cur.execute(f"UPDATE {table} SET name = %s WHERE id > %s", ("updated", 90))
        assert cur.rowcount == 10
        cur.execute(f"SELECT COUNT(*) FROM {table} WHERE name = %s", ("updated",))
        assert cur.fetchone() == (10,)
        cur.execute(f"DROP TABLE {table}")
    proxy.assert_settled(base, 1)


def test_large_rows(proxy):
    base = proxy.connections_total()
    with proxy.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT REPEAT('x', {MIB})")
        (s,) = cur.fetchone()
        assert len(s) == MIB and set(s) == {"x"}
        cur.execute("SELECT REPEAT('y', 2 * 1024 * 1024) FROM ringgate_test.seq_1_to_5")
        rows = cur.fetchall()
        assert len(rows) == 5 and all(len(r[0]) == 2 * MIB for r in rows)
        # client -> server: a 1 MiB statement
        cur.execute("SELECT LENGTH(%s)", ("q" * MIB,))
        assert cur.fetchone() == (MIB,)
    proxy.assert_settled(base, 1)


def test_an_idle_session_holds_no_large_result_buffer(proxy):
    # A result larger than a read buffer is read in --large-read-size pieces. Its last read can
    # bring more than an ordinary buffer holds, and the read that then watches the connection
    # between commands held the large buffer for as long as the session idled (heap mode), or
    # in the pool (transaction pooling) until the connection's next result.
    base = proxy.connections_total()
    with proxy.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT REPEAT('x', {MIB})")
        assert len(cur.fetchone()[0]) == MIB
        assert proxy.metrics()("ringgate_read_buffer_large_reads_total") > 0 or proxy.mode == "ring"
        deadline = time.monotonic() + 5
        while proxy.metrics()("ringgate_read_buffer_large_in_use") != 0:
            assert time.monotonic() < deadline, "the idle session still holds a large buffer"
            time.sleep(0.05)
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
    proxy.assert_settled(base, 1)


def test_wrong_password_and_unknown_user(proxy):
    base = proxy.connections_total()
    rejected0 = proxy.metrics()('ringgate_client_rejected_total{reason="auth"}')
    with pytest.raises(pymysql.err.OperationalError) as wrong:
        proxy.connect(password="not-the-password")
    assert wrong.value.args[0] == 1045, wrong.value.args
    with pytest.raises(pymysql.err.OperationalError) as unknown:
        proxy.connect(user="nosuchuser", password="x")
    assert unknown.value.args[0] == 1045, unknown.value.args
    # hashed user (users file keeps only SHA1(SHA1(pw)))
    with proxy.connect(user=HASHED_USER, password=HASHED_PASSWORD) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
    with pytest.raises(pymysql.err.OperationalError) as bad_hashed:
        proxy.connect(user=HASHED_USER, password=APP_PASSWORD)
    assert bad_hashed.value.args[0] == 1045
    rejected = proxy.metrics()('ringgate_client_rejected_total{reason="auth"}') - rejected0
    assert rejected >= 3, f"client_rejected_total{{reason=auth}} grew by {rejected}"
    proxy.assert_settled(base, 4)


def test_schema_at_connect(proxy):
    base = proxy.connections_total()
    with proxy.connect(database=TEST_DB) as conn, conn.cursor() as cur:
        cur.execute("SELECT DATABASE()")
        assert cur.fetchone() == (TEST_DB,)
    with pytest.raises(pymysql.err.MySQLError):
        proxy.connect(database="ringgate_no_such_db_py")
    proxy.assert_running()
    with proxy.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
    proxy.assert_settled(base, 3)


def test_mariadb_cli(proxy):
    base = proxy.connections_total()
    r = proxy.cli("--batch", "-e", "SELECT 1; SHOW DATABASES")
    lines = r.stdout.split()
    assert "1" in lines and TEST_DB in lines, r.stdout
    r = proxy.cli("--batch", "--skip-column-names", "--database", TEST_DB, "-e", "SELECT DATABASE()")
    assert r.stdout.strip() == TEST_DB
    # Statements from stdin, as a script.
    r = proxy.cli("--batch", "--skip-column-names", input="SELECT 40 + 2;\nSELECT 'cli';\n")
    assert r.stdout.split() == ["42", "cli"], r.stdout
    # A wrong password through the CLI: ERROR 1045.
    r = subprocess.run(
        [
            mariadb_cli(), "--no-defaults", "--protocol=TCP", "-h127.0.0.1", f"-P{proxy.port}",
            f"-u{APP_USER}", "-pwrong", "-e", "SELECT 1",
        ],
        capture_output=True, text=True, timeout=30,
    )
    assert r.returncode != 0 and "1045" in r.stderr, r.stderr
    proxy.assert_settled(base, 4)


def test_local_infile(make_proxy, mode, tmp_path):
    proxy = make_proxy(allow_local_infile=True)
    table = f"{TEST_DB}.py_infile_{mode}"
    data = tmp_path / "rows.csv"
    n = 5000
    data.write_text("".join(f"{i},name-{i}\n" for i in range(1, n + 1)))
    base = proxy.connections_total()
    with proxy.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, name VARCHAR(64))")
    proxy.cli(
        "--local-infile=1",
        "--database", TEST_DB,
        "-e",
        f"LOAD DATA LOCAL INFILE '{data}' INTO TABLE {table} "
        "FIELDS TERMINATED BY ',' LINES TERMINATED BY '\\n' (id, name)",
    )
    with proxy.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*), MAX(id), MIN(name) FROM {table}")
        assert cur.fetchone() == (n, n, "name-1")
        cur.execute(f"DROP TABLE {table}")
    proxy.assert_settled(base, 3)


def test_many_sequential_connections(proxy):
    base = proxy.connections_total()
    for i in range(100):
        with proxy.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT %s", (i,))
            assert cur.fetchone() == (i,)
    proxy.assert_settled(base, 100)
