"""Transaction pooling decides from its own lexing whether a statement leaves state on its
backend connection. Wherever its lexer and the server read a text differently, the connection
would go back to the pool unreset: these attacker texts make the two disagree on purpose.

- A version-gated comment the server skips (`/*!999999`, and on MariaDB the MySQL-only
  `/*!50700`..`/*!99999`) holding a quote: a byte-wise lexer that runs it as code sees one long
  string where the server runs a statement.
- sql_mode ANSI_QUOTES: `"x\\"` is an identifier to the server, a string with an escaped quote to
  a lexer that does not know the mode.
- A multi-byte client character set (gbk, sjis) whose second byte can be `\\`: the server reads
  the pair as one character, a byte-wise lexer as an escaped quote.

Each test runs ringgate with one worker and one backend connection: client A sends the text and
quits; client B gets the same backend connection and must see none of A's state (or, for locks,
a direct connection must find them released). Every one of them failed before the lexer read
texts as the server does.
"""

import pytest

from conftest import TEST_DB
from helpers import BUSY_BACKENDS, CLIENTS, direct, one_backend_proxy, value

TABLE = f"{TEST_DB}.lexgate"
OTHER_DB = "ringgate_lexgate_other"
LOCK_NAME = "ringgate_lexgate_lock"
# A quote the server skips inside a comment, closed by a quote in an ordinary comment after the
# hidden statement: to a lexer that runs the gated comment, all of it is one string.
HIDE = "/*!999999 ' */ {} /* ' */"
# The same with a MySQL-only version, which MariaDB skips too.
HIDE_MYSQL_ONLY = "/*!80000 ' */ {} /* ' */"


def raw(conn, sql_bytes):
    """Sends bytes as they are (PyMySQL would encode a str in the connection's charset)."""
    conn.query(sql_bytes)


@pytest.fixture(scope="module", autouse=True)
def schema():
    with direct() as c, c.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {TEST_DB}")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {OTHER_DB}")
        cur.execute(f"CREATE OR REPLACE TABLE {TABLE} (v INT) ENGINE=InnoDB")
    yield
    with direct() as c, c.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cur.execute(f"DROP DATABASE IF EXISTS {OTHER_DB}")


@pytest.fixture
def proxy(make_proxy):
    return one_backend_proxy(make_proxy, pooling="transaction")


def after_a(proxy, a_does, a_kw=None, b_kw=None):
    """A runs a_does(conn) and quits; returns B, connected once A's connection is idle again
    (with the same handshake charset, or the pool would not give B A's connection)."""
    a = proxy.connect(autocommit=True, database=TEST_DB, **(a_kw or {}))
    try:
        a_does(a)
    finally:
        a.close()
    # A's backend connection is idle again.
    proxy.wait_metrics({BUSY_BACKENDS: 0, CLIENTS: 0}, timeout=8)
    return proxy.connect(autocommit=True, database=TEST_DB, **(b_kw or {}))


@pytest.mark.parametrize("hide", [HIDE, HIDE_MYSQL_ONLY])
def test_a_user_variable_behind_a_skipped_version_comment_does_not_leak(proxy, hide):
    def a_does(a):
        value(a, hide.format("SET @x = 'A'"))
        assert value(a, "SELECT @x") == "A"  # the server ran it

    with after_a(proxy, a_does) as b:
        assert value(b, "SELECT @x") is None


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT @y := 'A'",
        "SELECT 'A' INTO @y",
        "SELECT LAST_INSERT_ID(5), @y := 'A'",
    ],
)
def test_user_variable_writes_the_state_flag_misses_stay_seen_when_hidden(proxy, statement):
    """MariaDB raises no SESSION_STATE_CHANGED for these: only the lexer can see them."""

    def a_does(a):
        value(a, HIDE.format(statement))
        assert value(a, "SELECT @y") == "A"

    with after_a(proxy, a_does) as b:
        assert value(b, "SELECT @y") is None


def test_a_hidden_autocommit_0_does_not_reach_the_next_client(proxy):
    def a_does(a):
        value(a, HIDE.format("SET autocommit = 0"))
        assert value(a, "SELECT @@autocommit") == 0

    with after_a(proxy, a_does) as b:
        assert value(b, "SELECT @@autocommit") == 1


@pytest.mark.parametrize("call", ["SELECT 1, GET_LOCK('{}', 0)", "DO GET_LOCK('{}', 0)"])
def test_a_hidden_get_lock_is_released_when_its_client_quits(proxy, call):
    def a_does(a):
        value(a, HIDE.format(call.format(LOCK_NAME)))

    with after_a(proxy, a_does), direct() as watcher:
        assert value(watcher, f"SELECT IS_FREE_LOCK('{LOCK_NAME}')") == 1


@pytest.mark.parametrize(
    "text",
    ["SELECT LAST_INSERT_ID(), GET_LOCK('{}', 0)", "SELECT LAST_INSERT_ID(), /*!999999 ' */ GET_LOCK('{}', 0) /* ' */"],
)
def test_a_last_insert_id_read_does_not_hide_a_lock_after_it(proxy, text):
    """A LAST_INSERT_ID() read alone needs no pin (the session's value is set first); the
    classifier's scan must not stop at it and miss what follows."""

    def a_does(a):
        value(a, text.format(LOCK_NAME))

    with after_a(proxy, a_does), direct() as watcher:
        assert value(watcher, f"SELECT IS_FREE_LOCK('{LOCK_NAME}')") == 1


def test_a_hidden_use_does_not_change_the_next_clients_schema(proxy):
    def a_does(a):
        value(a, HIDE.format(f"USE {OTHER_DB}"))
        assert value(a, "SELECT DATABASE()") == OTHER_DB

    with after_a(proxy, a_does) as b:
        assert value(b, "SELECT DATABASE()") == TEST_DB


def test_hidden_lock_tables_write_is_released_when_its_client_quits(proxy):
    def a_does(a):
        value(a, HIDE.format(f"LOCK TABLES {TABLE} WRITE"))

    with after_a(proxy, a_does), direct() as d:
        value(d, "SET SESSION lock_wait_timeout = 1")
        assert value(d, f"SELECT COUNT(*) FROM {TABLE}") == 0


def test_ansi_quotes_hides_nothing(proxy):
    """Under ANSI_QUOTES `"x\\"` is an identifier: the assignment after it is code."""

    def a_does(a):
        value(a, "SET sql_mode = 'ANSI_QUOTES'")
        value(a, "SELECT 1 AS \"x\\\", @z := 'A' -- \"")
        assert value(a, "SELECT @z") == "A"

    with after_a(proxy, a_does) as b:
        assert value(b, "SELECT @z") is None


@pytest.fixture
def global_ansi_quotes():
    with direct() as d:
        old = value(d, "SELECT @@GLOBAL.sql_mode")
        value(d, "SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',ANSI_QUOTES')")
    yield
    with direct() as d, d.cursor() as cur:
        cur.execute("SET GLOBAL sql_mode = %s", (old,))


def test_a_global_ansi_quotes_counts_from_the_first_statement(global_ansi_quotes, make_proxy):
    """Before its first answer a session has only the backend login's status to go by."""
    proxy = one_backend_proxy(make_proxy, pooling="transaction")

    def a_does(a):
        value(a, "SELECT 1 AS \"x\\\", @z := 'A' -- \"")
        assert value(a, "SELECT @z") == "A"

    with after_a(proxy, a_does) as b:
        assert value(b, "SELECT @z") is None


def test_no_backslash_escapes_hides_nothing(proxy):
    """Under NO_BACKSLASH_ESCAPES `'x\\'` is a whole string: the assignment after it is code."""

    def a_does(a):
        value(a, "SET sql_mode = 'NO_BACKSLASH_ESCAPES'")
        value(a, "SELECT 'x\\', @z := 'A' -- '")
        assert value(a, "SELECT @z") == "A"

    with after_a(proxy, a_does) as b:
        assert value(b, "SELECT @z") is None


# gbk 0xBF 0x5C and sjis 0x95 0x5C are single characters whose second byte is `\`.
MULTIBYTE_TEXT = b"DO '%s', @w := 'A' -- '"


@pytest.mark.parametrize(
    "charset,pair,via",
    [
        ("gbk", b"\xbf\x5c", "set names"),
        ("sjis", b"\x95\x5c", "set names"),
        ("gbk", b"\xbf\x5c", "handshake"),
    ],
)
def test_a_multibyte_character_ending_in_backslash_hides_nothing(proxy, charset, pair, via):
    def a_does(a):
        if via == "set names":
            value(a, f"SET NAMES {charset}")
        raw(a, MULTIBYTE_TEXT % pair)
        assert value(a, "SELECT @w") == "A"

    kw = {"charset": charset} if via == "handshake" else None
    with after_a(proxy, a_does, kw, kw) as b:
        assert value(b, "SELECT @w") is None


@pytest.mark.parametrize(
    "charset,text",
    [
        # latin1's 0xA0 is whitespace to the server; to a byte-wise lexer part of the word SET.
        ("latin1", b"SET\xa0@w = 'A'"),
        # `--` before 0x7F starts a comment in utf8mb4: the quote after it is no string.
        ("utf8mb4", b"SELECT 1 --\x7f '\n, @w := 'A' -- '"),
    ],
)
def test_a_byte_the_charset_makes_whitespace_hides_nothing(proxy, charset, text):
    def a_does(a):
        raw(a, text)
        assert value(a, "SELECT @w") == "A"

    kw = {"charset": charset}
    with after_a(proxy, a_does, kw, kw) as b:
        assert value(b, "SELECT @w") is None


def test_a_gated_comment_the_server_runs_still_pins(proxy):
    """The other way round: `/*!50000` and `/*M!100000` run on MariaDB 10.11."""

    def a_does(a):
        value(a, "SELECT /*!50000 @v := 'A', */ /*M!100000 @u := 'B', */ 1")
        assert value(a, "SELECT CONCAT(@v, @u)") == "AB"

    with after_a(proxy, a_does) as b:
        assert value(b, "SELECT @v IS NULL AND @u IS NULL") == 1
