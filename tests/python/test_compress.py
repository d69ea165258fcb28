"""The compressed protocol on the client leg: CLIENT_COMPRESS (zlib) runs
between the client and ringgate; the backend leg stays uncompressed, so pooled connections
serve compressed and plain clients alike.

Real clients: the mariadb CLI (`--compress`, MariaDB Connector/C), mysql-connector-python
(`compress=True`, its pure-Python protocol) and node mysql2
(`compress: true`). PyMySQL has no compression: it refuses `compress=True` (checked below), so
it is the plain client of the mixed tests.
"""

import hashlib
import os

import mysql.connector
import pymysql
import pytest

from conftest import APP_PASSWORD, APP_USER, TEST_DB
from helpers import run_node

CLIENT_COMPRESS = 1 << 5
MIB = 1024 * 1024


def connector(proxy, pure=True, compress=True, **kw):
    return proxy.connector(database=TEST_DB, compress=compress, use_pure=pure, connection_timeout=10, **kw)


def compressed(proxy):
    m = proxy.metrics()
    return {
        "sessions": m.get_metric("ringgate_client_compressed_sessions_total") or 0,
        "wire_out": m.get_metric(
            'ringgate_client_compressed_bytes_total{direction="proxy_to_client",form="wire"}'
        )
        or 0,
        "plain_out": m.get_metric(
            'ringgate_client_compressed_bytes_total{direction="proxy_to_client",form="plain"}'
        )
        or 0,
        "wire_in": m.get_metric('ringgate_client_compressed_bytes_total{direction="client_to_proxy",form="wire"}')
        or 0,
        "plain_in": m.get_metric(
            'ringgate_client_compressed_bytes_total{direction="client_to_proxy",form="plain"}'
        )
        or 0,
    }


def blob_table(proxy, name):
    with proxy.connect(database=TEST_DB, autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {name}")
        cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY AUTO_INCREMENT, b LONGBLOB)")


def test_pymysql_has_no_compression():
    # The fact the mixed tests rely on: PyMySQL never negotiates CLIENT_COMPRESS.
    with pytest.raises(NotImplementedError):
        pymysql.connect(host="127.0.0.1", port=1, compress=True)


def test_ringgate_offers_compression_and_not_with_the_flag(make_proxy):
    on = make_proxy()
    with on.connect() as c:
        assert c.server_capabilities & CLIENT_COMPRESS
    off = make_proxy(extra_args=["--no-client-compression"])
    with off.connect() as c:
        assert not c.server_capabilities & CLIENT_COMPRESS
    # The CLI asks for compression only if it is offered: it works uncompressed.
    r = off.cli("--compress", "-N", "-e", "SELECT 42")
    assert r.stdout.strip() == "42"
    assert compressed(off)["sessions"] == 0


# The pure-Python protocol only: the C extension in mysql-connector-python's wheel links
# OpenSSL >= 3.2 and cannot load on Debian 12 (OpenSSL 3.0), and a test that can only skip
# here would report nothing. Connector/C's framing is covered by the mariadb CLI tests.
def test_connector_compress_3mb_results_and_a_20mib_insert(proxy):
    pure = True
    base = proxy.connections_total()
    before = compressed(proxy)
    blob_table(proxy, f"compress_blob_{int(pure)}")
    c = connector(proxy, pure=pure)
    cur = c.cursor()
    # 3 MB in one row (larger than 1 MiB: it passes stored, not held) and in 30,000 rows.
    cur.execute("SELECT REPEAT('x', 3000000)")
    (v,) = cur.fetchone()
    assert len(v) == 3000000 and set(v) == {"x"}
    cur.execute("SELECT seq, REPEAT('y', 100) FROM seq_1_to_30000")
    rows = cur.fetchall()
    assert len(rows) == 30000 and rows[-1] == (30000, "y" * 100)
    # Over 16 MiB from the client: several MySQL packets in several compressed packets.
    data = os.urandom(64) * (20 * MIB // 64)
    cur.execute(f"INSERT INTO compress_blob_{int(pure)} (b) VALUES (%s)", (data,))
    c.commit()
    cur.execute(f"SELECT LENGTH(b), MD5(b) FROM compress_blob_{int(pure)}")
    assert cur.fetchone() == (len(data), hashlib.md5(data).hexdigest())
    cur.execute(f"SELECT b FROM compress_blob_{int(pure)}")
    assert bytes(cur.fetchone()[0]) == data
    cur.close()
    c.close()
    after = compressed(proxy)
    assert after["sessions"] - before["sessions"] == 1
    assert after["plain_in"] - before["plain_in"] > 20 * MIB
    assert after["wire_in"] - before["wire_in"] < 2 * MIB, "the client's insert arrived compressed"
    # The 30,000 rows of 'y' compress; the wire carries far less than the plain bytes.
    assert after["wire_out"] - before["wire_out"] < after["plain_out"] - before["plain_out"]
    proxy.assert_settled(base, 2)


def test_cli_compress_3mb_result_large_insert_and_local_infile(make_proxy, tmp_path):
    proxy = make_proxy(allow_local_infile=True)
    base = proxy.connections_total()
    before = compressed(proxy)
    blob_table(proxy, "compress_cli")
    r = proxy.cli("--compress", "-N", "-e", "SELECT REPEAT('x', 3000000)")
    assert r.stdout.strip() == "x" * 3000000
    r = proxy.cli(
        "--compress",
        "-N",
        "-e",
        f"SELECT COUNT(*), SUM(LENGTH(v)) FROM (SELECT REPEAT('z', 100) v FROM {TEST_DB}.seq_1_to_30000) t",
    )
    assert r.stdout.split() == ["30000", "3000000"]
    # An 18 MiB statement: Connector/C numbers every packet 0 under compression; the
    # uncompressed backend would refuse the continuation as out of order.
    sql = tmp_path / "big.sql"
    sql.write_text(f"INSERT INTO {TEST_DB}.compress_cli (b) VALUES ('" + "q" * (18 * MIB) + "');\n")
    with open(sql) as f:
        proxy.cli("--compress", "--max-allowed-packet=64M", "-s", input=f.read(), timeout=120)
    r = proxy.cli("--compress", "-N", "-e", f"SELECT LENGTH(b), b = REPEAT('q', {18 * MIB}) FROM {TEST_DB}.compress_cli")
    assert r.stdout.split() == [str(18 * MIB), "1"]
    # LOAD DATA LOCAL INFILE: the data packets, also numbered 0, follow the server's request.
    nums = tmp_path / "nums.txt"
    nums.write_text("".join(f"{i}\n" for i in range(1, 100001)))
    r = proxy.cli(
        "--compress",
        "--local-infile=1",
        "-N",
        "-e",
        f"DROP TABLE IF EXISTS {TEST_DB}.compress_nums; CREATE TABLE {TEST_DB}.compress_nums (v INT); "
        f"LOAD DATA LOCAL INFILE '{nums}' INTO TABLE {TEST_DB}.compress_nums; "
        f"SELECT COUNT(*), SUM(v) FROM {TEST_DB}.compress_nums; DROP TABLE {TEST_DB}.compress_nums",
    )
    assert r.stdout.split() == ["100000", "5000050000"]
    assert compressed(proxy)["sessions"] - before["sessions"] == 5
    proxy.assert_settled(base, 6)


def test_compressed_and_plain_clients_share_one_pooled_connection(make_proxy):
    """--workers 1 --backend-pool-size 1 --backend-max-connections 1: clients of one library,
    with and without compression, take turns on the same backend connection (CLIENT_COMPRESS
    is not in the pool key: the backend leg is uncompressed whoever the client is). Different
    libraries differ in other capabilities, which are in the key."""
    proxy = make_proxy(
        workers=1, extra_args=["--backend-pool-size", "1", "--backend-max-connections", "1"]
    )
    base = proxy.connections_total()
    before = compressed(proxy)
    seen = []
    for turn in range(3):
        for compress in (True, False):
            with connector(proxy, compress=compress) as c:
                cur = c.cursor()
                cur.execute("SELECT CONNECTION_ID(), @mine, REPEAT('c', 200000)")
                cid, mine, v = cur.fetchone()
                assert mine is None, "the reset ran between the clients"
                assert v == "c" * 200000
                cur.execute("SET @mine = 'left behind'")
                cur.close()
                seen.append(cid)
    assert len(set(seen)) == 1, f"one backend connection served all: {seen}"
    cli = []
    for compress in (True, False, True, False):
        args = ["--compress"] if compress else []
        r = proxy.cli(*args, "-N", "-e", "SELECT CONNECTION_ID(), LENGTH(REPEAT('d', 300000))")
        cid, n = r.stdout.split()
        assert n == "300000"
        cli.append(cid)
    assert len(set(cli)) == 1, f"one backend connection served the CLI: {cli}"
    assert compressed(proxy)["sessions"] - before["sessions"] == 5
    proxy.assert_settled(base, 10)


def test_node_mysql2_compress(proxy):
    base = proxy.connections_total()
    before = compressed(proxy)
    r = run_node("compress.js", proxy, timeout=120, PROXY_PORT=str(proxy.port), APP_USER=APP_USER, APP_PASSWORD=APP_PASSWORD)
    assert "ok" in r.stdout
    assert compressed(proxy)["sessions"] - before["sessions"] == 1
    proxy.assert_settled(base, 1)


def test_kill_query_through_compressed_sessions(proxy):
    """KILL <proxy id> is rewritten in the plain stream of a compressed session (the session
    buffer is the leg's plain buffer then): the victim's query is interrupted."""
    import threading
    import time

    base = proxy.connections_total()
    victim = connector(proxy)
    killer = connector(proxy)
    result = {}

    def run():
        cur = victim.cursor()
        t = time.monotonic()
        try:
            cur.execute("SELECT SLEEP(30)")
            result["row"] = cur.fetchone()
        except mysql.connector.Error as e:
            result["err"] = e.errno
        result["took"] = time.monotonic() - t

    th = threading.Thread(target=run)
    th.start()
    time.sleep(1.0)
    kc = killer.cursor()
    kc.execute(f"KILL QUERY {victim.connection_id}")
    kc.close()
    th.join(20)
    assert not th.is_alive()
    # MariaDB ends an interrupted SLEEP() with 1 (or ERR 1317).
    assert result.get("row") == (1,) or result.get("err") == 1317, result
    assert result["took"] < 15
    cur = victim.cursor()
    cur.execute("SELECT 7")
    assert cur.fetchone() == (7,)
    cur.close()
    victim.close()
    killer.close()
    proxy.assert_settled(base, 2)
