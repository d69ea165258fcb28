#!/usr/bin/env python3
"""Writes crates/wire/src/lexer/native_functions.rs: the names a MariaDB server resolves as its own
when called without a schema, read from a running server.

MariaDB resolves an unqualified `name(...)` to a native function or a grammar construct when it
has one, and only otherwise to a stored function of the current schema. So the lexer may take a
call of any other name, or any qualified call (`db.f(...)`), as a stored function, which can
leave session state behind that the server does not report. The candidates are every keyword
and every native function the server lists (information_schema.KEYWORDS, SQL_FUNCTIONS) plus a
few it does not list (geometry, sequences); each is called as `name()` in an empty schema, and
every name the server does not answer with "FUNCTION ... does not exist" (1305, 1630) is kept.

Usage: eval "$(scripts/mariadb-sandbox.sh env)"; python3 scripts/native-functions.py
"""
import os
import pathlib

import pymysql

EXTRA = """ST_ASTEXT ST_ASWKT ST_ASBINARY ST_ASWKB ST_ASGEOJSON ST_GEOMFROMTEXT ST_GEOMFROMWKB
ST_GEOMFROMGEOJSON ST_POINTFROMTEXT ST_LINEFROMTEXT ST_POLYFROMTEXT ST_X ST_Y ST_SRID
ST_DISTANCE ST_DISTANCE_SPHERE ST_CONTAINS ST_WITHIN ST_INTERSECTS ST_OVERLAPS ST_TOUCHES
ST_CROSSES ST_DISJOINT ST_EQUALS ST_AREA ST_LENGTH ST_CENTROID ST_ENVELOPE ST_BUFFER
ST_UNION ST_INTERSECTION ST_DIFFERENCE ST_SYMDIFFERENCE ST_ISEMPTY ST_ISVALID ST_ISCLOSED
ST_ISSIMPLE ST_ISRING ST_NUMPOINTS ST_POINTN ST_STARTPOINT ST_ENDPOINT ST_NUMGEOMETRIES
ST_GEOMETRYN ST_GEOMETRYTYPE ST_DIMENSION ST_EXTERIORRING ST_INTERIORRINGN
ST_NUMINTERIORRINGS ST_BOUNDARY ST_CONVEXHULL ST_RELATE ST_SIMPLIFY ST_VALIDATE
MBRCONTAINS MBRWITHIN MBRINTERSECTS MBROVERLAPS MBRTOUCHES MBREQUALS MBRDISJOINT MBRCOVERS
MBRCOVEREDBY ASTEXT ASWKT ASBINARY ASWKB GEOMFROMTEXT GEOMFROMWKB POINTFROMTEXT
LINEFROMTEXT POLYFROMTEXT X Y SRID AREA CENTROID ENVELOPE GEOMETRYTYPE ISEMPTY ISSIMPLE
ISCLOSED NUMPOINTS POINTN STARTPOINT ENDPOINT GLENGTH POINT LINESTRING POLYGON MULTIPOINT
MULTILINESTRING MULTIPOLYGON GEOMETRYCOLLECTION NEXTVAL LASTVAL SETVAL ROW_NUMBER
SYS_GUID CURRENT_ROLE JSON_TABLE""".split()

NOT_STORED = (1305, 1630)


def main():
    conn = pymysql.connect(
        host=os.environ.get("RINGGATE_TEST_MYSQL_HOST", "127.0.0.1"),
        port=int(os.environ["RINGGATE_TEST_MYSQL_PORT"]),
        user=os.environ["RINGGATE_TEST_BACKEND_USER"],
        password=os.environ["RINGGATE_TEST_BACKEND_PASSWORD"],
        autocommit=True,
    )
    cur = conn.cursor()
    cur.execute("CREATE DATABASE IF NOT EXISTS ringgate_native_probe")
    cur.execute("USE ringgate_native_probe")
    cur.execute("SELECT WORD FROM information_schema.KEYWORDS")
    names = {r[0].upper() for r in cur.fetchall()}
    cur.execute("SELECT FUNCTION FROM information_schema.SQL_FUNCTIONS")
    names |= {r[0].upper() for r in cur.fetchall()}
    names |= set(EXTRA)
    native = []
    for name in sorted(n for n in names if n.replace("_", "").isalnum()):
        try:
            cur.execute(f"SELECT {name}()")
            cur.fetchall()
        except pymysql.err.MySQLError as e:
            # A geometry constructor called with no argument is also "does not exist".
            if e.args[0] in NOT_STORED and name not in EXTRA:
                continue
        native.append(name)
    cur.execute("SELECT VERSION()")
    version = cur.fetchone()[0]
    cur.execute("DROP DATABASE ringgate_native_probe")
    out = pathlib.Path(__file__).resolve().parent.parent / "crates/wire/src/lexer/native_functions.rs"
    body = "".join(f'    "{n}",\n' for n in native)
    out.write_text(
        "//! Names MariaDB resolves as its own when called without a schema (native functions\n"
        "//! and grammar constructs), sorted. Written by scripts/native-functions.py from\n"
        f"//! {version}; any other unqualified call is a stored function's.\n\n"
        f"pub(super) const NATIVE_FUNCTIONS: [&str; {len(native)}] = [\n{body}];\n"
    )
    print(f"{len(native)} names from {version} -> {out}")


if __name__ == "__main__":
    main()
