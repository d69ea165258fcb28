"""PyMySQL's connection attributes (its program_name, _client_name, _pid) reach the backend
connection opened for it, so performance_schema.session_connect_attrs on the server names the
program behind ringgate. The sandbox runs with performance_schema ON."""

import os

OWN_ATTRS = (
    "SELECT ATTR_NAME, ATTR_VALUE FROM performance_schema.session_connect_attrs "
    "WHERE PROCESSLIST_ID = CONNECTION_ID()"
)


def test_pymysql_program_name_reaches_the_backend(proxy):
    # A fresh proxy: PyMySQL's capabilities match no warm connection's key, so its backend
    # connection is opened for it, with its attributes.
    with proxy.connect(program_name="attrs-pytest") as c, c.cursor() as cur:
        cur.execute(OWN_ATTRS)
        attrs = dict(cur.fetchall())
    assert attrs.get("program_name") == "attrs-pytest", attrs
    assert attrs.get("_client_name") == "pymysql", attrs
    assert attrs.get("_pid") == str(os.getpid()), attrs
    assert attrs.get("_proxy", "").startswith("ringgate "), attrs
    assert attrs.get("_proxy_client", "").startswith("127.0.0.1:"), attrs
