"""In front of MariaDB, ringgate's greeting clears CLIENT_MYSQL (bit 0, which MySQL calls
CLIENT_LONG_PASSWORD) as MariaDB's does. PyMySQL, a MySQL-protocol client
that knows nothing of MariaDB's extended capabilities, must connect and work all the same:
it always sends bit 0 in its answer, which MariaDB (and ringgate) read as "no extended
capabilities".
"""

import json
import time

from helpers import direct

CLIENT_MYSQL = 1


def test_pymysql_connects_when_the_greeting_clears_client_mysql(proxy):
    with direct() as side:
        assert side.server_capabilities & CLIENT_MYSQL == 0, "the sandbox is MariaDB"
    # Until a worker has seen its first backend greeting it presents as MySQL; its pool logs
    # in at start-up, so that is over within moments.
    deadline = time.monotonic() + 10
    while True:
        c = proxy.connect()
        if c.server_capabilities & CLIENT_MYSQL == 0 or time.monotonic() > deadline:
            break
        c.close()
        time.sleep(0.05)
    with c:
        assert c.server_capabilities & CLIENT_MYSQL == 0, hex(c.server_capabilities)
        with c.cursor() as cur:
            cur.execute("SELECT JSON_OBJECT('a', 1), CAST('123e4567-e89b-12d3-a456-426655440000' AS UUID)")
            j, u = cur.fetchone()
            assert json.loads(j) == {"a": 1}
            assert u == "123e4567-e89b-12d3-a456-426655440000"
