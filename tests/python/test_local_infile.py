"""LOAD DATA LOCAL INFILE through ringgate, with PyMySQL, which
sends the file when the server asks for it.

Without --allow-local-infile ringgate does not offer CLIENT_LOCAL_FILES, so the backend
connection is opened without it and MariaDB refuses the statement itself: the client gets the
same ERR as from a server with local_infile=OFF (checked against the sandbox), and the session
goes on. With the flag, the file is relayed (also one larger than a read buffer) and loaded.
"""

import contextlib
import itertools
import os

import pymysql
import pytest

from conftest import TEST_DB
from helpers import direct

ROWS = [(1, "one"), (2, "two"), (3, "three")]
_TABLES = itertools.count()


@contextlib.contextmanager
def server_local_infile_off():
    """The sandbox's global local_infile=OFF for the duration (pytest runs tests one at a time)."""
    with direct() as c, c.cursor() as cur:
        cur.execute("SET GLOBAL local_infile = 0")
    try:
        yield
    finally:
        with direct() as c, c.cursor() as cur:
            cur.execute("SET GLOBAL local_infile = 1")


@pytest.fixture
def table():
    name = f"infile_{os.getpid()}_{next(_TABLES)}"
    with direct(database=TEST_DB) as c, c.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {name}")
        cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v LONGTEXT)")
    yield name
    with direct(database=TEST_DB) as c, c.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {name}")


@pytest.fixture
def small_file(tmp_path):
    path = tmp_path / "rows.tsv"
    path.write_text("".join(f"{i}\t{v}\n" for i, v in ROWS))
    return path


def load_error(conn, path, table):
    """(code, message) of the LOAD DATA LOCAL INFILE error; fails if it succeeds."""
    with conn.cursor() as cur:
        with pytest.raises(pymysql.err.MySQLError) as e:
            cur.execute(f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE {table}")
    return e.value.args[0], e.value.args[1]


def count_rows(table):
    with direct(database=TEST_DB) as c, c.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {table}")
        return cur.fetchone()[0]


def test_local_infile_refused_without_allow_local_infile(make_proxy, small_file, table):
    # The expectation, from the server itself: a client that does not offer local infile, and
    # a client that does while the server has local_infile=OFF, get the same ERR.
    with direct(database=TEST_DB, local_infile=False) as c:
        client_off = load_error(c, small_file, table)
    with server_local_infile_off(), direct(database=TEST_DB, local_infile=True) as c:
        server_off = load_error(c, small_file, table)
    assert client_off == server_off
    assert client_off[0] == 4166, client_off

    proxy = make_proxy()
    with proxy.connect(database=TEST_DB, local_infile=True) as c:
        got = load_error(c, small_file, table)
        assert got == server_off, f"through ringgate without --allow-local-infile: {got}, a server with it off: {server_off}"
        # The session is still usable after the refusal.
        with c.cursor() as cur:
            cur.execute("SELECT 7")
            assert cur.fetchone() == (7,)
    assert count_rows(table) == 0
    proxy.assert_settled(min_new=1)


def test_local_infile_accepted_with_allow_local_infile(make_proxy, small_file, tmp_path, table):
    proxy = make_proxy(allow_local_infile=True)
    # Also a file larger than a read buffer (16 KiB): it is relayed in chunks.
    big = tmp_path / "big.tsv"
    big_rows = [(100 + i, "x" * 5000 + str(i)) for i in range(200)]
    big.write_text("".join(f"{i}\t{v}\n" for i, v in big_rows))
    with proxy.connect(database=TEST_DB, local_infile=True, autocommit=True) as c, c.cursor() as cur:
        assert cur.execute(f"LOAD DATA LOCAL INFILE '{small_file}' INTO TABLE {table}") == len(ROWS)
        assert cur.execute(f"LOAD DATA LOCAL INFILE '{big}' INTO TABLE {table}") == len(big_rows)
        cur.execute(f"SELECT id, v FROM {table} ORDER BY id")
        assert list(cur.fetchall()) == ROWS + big_rows
        # A file that does not exist: the client sends an empty file, the server answers and the
        # session goes on.
        missing = tmp_path / "missing.tsv"
        with pytest.raises(pymysql.err.MySQLError):
            cur.execute(f"LOAD DATA LOCAL INFILE '{missing}' INTO TABLE {table}")
        cur.execute("SELECT 8")
        assert cur.fetchone() == (8,)
    assert count_rows(table) == len(ROWS) + len(big_rows)
    proxy.assert_settled(min_new=1)
