#!/usr/bin/env bash
# Drivers' own test suites, run twice: directly against the sandbox MariaDB and through ringgate.
# Fails when a test passes direct and fails through ringgate (and prints those tests), unless
# scripts/drivers-expected.txt lists it as a difference by design, or when a suite could not be
# obtained or run: a suite that did not run is FAILED, never ok.
#
#   scripts/drivers.sh             # every suite (make drivers)
#   DRIVERS=pymysql scripts/drivers.sh   # some suites: pymysql, mysql2, connector
#
# What it runs, and why those versions (the registries ship tests only in some releases):
#   pymysql  PyMySQL 0.10.1's pymysql/tests (pytest), with the PyMySQL 0.10.1 beside them.
#            Later sdists (1.0.0 on) no longer carry the suite.
#   mysql2   mysql2 1.0.0-rc.9's test/ (each test-*.js is one test, run with node; a test passes
#            when it exits 0). The last npm tarball that carries its tests.
#   connector  mysql-connector-python 9.7.0's tests/ (its unittests.py against an external server,
#            with the pure-Python connector of that sdist), the groups in CONNECTOR_GROUPS.
# They are fetched once through pip / npm into $RINGGATE_DRIVERS_CACHE (default .cache/drivers).
# Environment: RINGGATE_SANDBOX_DIR / RINGGATE_SANDBOX_PORT (the sandbox to use; started and
# stopped again when not already running), RINGGATE_BIN (default $CARGO_TARGET_DIR/debug/ringgate,
# built when missing), DRIVERS_KEEP=1 keeps the per-run logs, RINGGATE_DRIVERS_ARGS adds flags
# to ringgate's (e.g. "--pooling transaction", which moves binary prepared statements between
# backend connections; "--pooling transaction --tx-prepared-statements pin" pins), DRIVERS_BUSY=N runs N clients (half PyMySQL, half
# mysql-connector) through the same ringgate meanwhile (statements in a loop), so that under transaction pooling a session's
# next command often lands on another backend connection than its last one: state a session
# left on a connection, or expected to find there, shows up.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT="$(pwd)"
# shellcheck source=scripts/sandbox-defaults.sh
. scripts/sandbox-defaults.sh

PYMYSQL_VERSION=0.10.1
MYSQL2_VERSION=1.0.0-rc.9
CONNECTOR_VERSION=9.7.0
# unittests.py -t groups: the protocol-level ones (the rest need MySQL 8 features or X plugin).
CONNECTOR_GROUPS="connection cursor pooling conversion protocol pep249 mysql_datatypes abstracts bugs"
CACHE="${RINGGATE_DRIVERS_CACHE:-$REPO_ROOT/.cache/drivers}"
DRIVERS="${DRIVERS:-pymysql,mysql2,connector}"
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
RINGGATE_BIN="${RINGGATE_BIN:-$TARGET_DIR/debug/ringgate}"
PYTHON="${PYTHON:-python3}"
EXPECTED="$REPO_ROOT/scripts/drivers-expected.txt"
# The account both runs use: direct it logs in to MariaDB, through ringgate it is in the users
# file and (passthrough identity) logs in to MariaDB as itself, so both runs have its privileges.
DB_USER=drivers
DB_PASSWORD=drivers-secret

step() { printf '\n==> %s\n' "$*"; }
loud() { printf '\n!!!!!!!! %s\n' "$*" >&2; }

WORK="$(mktemp -d)"
STARTED_SANDBOX=0
RG_PID=""
BUSY_PID=""
cleanup() {
    local rc=$?
    if [ -n "$BUSY_PID" ]; then kill "$BUSY_PID" 2>/dev/null || true; fi
    if [ -n "$RG_PID" ]; then kill "$RG_PID" 2>/dev/null || true; fi
    if [ "$STARTED_SANDBOX" = 1 ]; then
        "$SANDBOX" stop "$SANDBOX_DIR" "$SANDBOX_PORT" || true
    fi
    if [ "${DRIVERS_KEEP:-0}" = 1 ]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- fetch (once; cached) -------------------------------------------------------------------

fetch_pymysql() {
    local dir="$CACHE/PyMySQL-$PYMYSQL_VERSION"
    if [ -f "$dir/pymysql/tests/base.py" ]; then return 0; fi
    mkdir -p "$CACHE/dl"
    if ! "$PYTHON" -m pip download -q --no-binary :all: --no-deps "PyMySQL==$PYMYSQL_VERSION" -d "$CACHE/dl"; then
        loud "pymysql: pip download PyMySQL==$PYMYSQL_VERSION (sdist) failed: cannot obtain its test suite"
        return 1
    fi
    tar -xzf "$CACHE/dl/PyMySQL-$PYMYSQL_VERSION.tar.gz" -C "$CACHE"
    if [ ! -f "$dir/pymysql/tests/base.py" ]; then
        loud "pymysql: the PyMySQL $PYMYSQL_VERSION sdist has no pymysql/tests"
        return 1
    fi
}

fetch_mysql2() {
    local dir="$CACHE/mysql2"
    if [ -f "$dir/node_modules/mysql2/test/common.js" ] && [ -d "$dir/node_modules/urun" ]; then return 0; fi
    if ! command -v npm >/dev/null 2>&1; then
        loud "mysql2: npm not found (scripts/ensure-deps.sh installs it): cannot obtain mysql2's tests"
        return 1
    fi
    mkdir -p "$dir"
    # mysql2's devDependencies that its tests require, pinned.
    cat >"$dir/package.json" <<EOF
{ "name": "ringgate-driver-suite-mysql2", "private": true, "version": "0.0.0",
  "dependencies": { "mysql2": "$MYSQL2_VERSION", "urun": "0.0.8", "utest": "0.0.8",
                    "assert-diff": "1.2.6", "portfinder": "1.0.32", "progress": "1.1.8" } }
EOF
    if ! (cd "$dir" && npm install --no-audit --no-fund --loglevel=error >/dev/null); then
        loud "mysql2: npm install mysql2@$MYSQL2_VERSION failed: cannot obtain its test suite"
        return 1
    fi
    if [ ! -f "$dir/node_modules/mysql2/test/common.js" ]; then
        loud "mysql2: the mysql2@$MYSQL2_VERSION tarball has no test/"
        return 1
    fi
}

fetch_connector() {
    local dir="$CACHE/mysql_connector_python-$CONNECTOR_VERSION"
    if [ -f "$dir/unittests.py" ] && [ -d "$dir/lib/mysql/connector" ]; then return 0; fi
    mkdir -p "$CACHE/dl"
    if ! "$PYTHON" -m pip download -q --no-binary :all: --no-deps "mysql-connector-python==$CONNECTOR_VERSION" -d "$CACHE/dl"; then
        loud "connector: pip download mysql-connector-python==$CONNECTOR_VERSION (sdist) failed: cannot obtain its test suite"
        return 1
    fi
    tar -xzf "$CACHE/dl/mysql_connector_python-$CONNECTOR_VERSION.tar.gz" -C "$CACHE"
    if [ ! -f "$dir/unittests.py" ]; then
        loud "connector: the mysql-connector-python $CONNECTOR_VERSION sdist has no unittests.py"
        return 1
    fi
}

# ---- the sandbox and the proxy ----------------------------------------------------------------

root_sql() {
    mariadb --no-defaults -S "$SANDBOX_DIR/mysqld.sock" -uroot --batch --skip-column-names -e "$1"
}

# Puts the server back the way the suites expect it: some tests change globals
# (mysql2's test-prepare-and-close sets max_prepared_stmt_count=10).
prepare_server() {
    root_sql "CREATE USER IF NOT EXISTS '$DB_USER'@'%' IDENTIFIED BY '$DB_PASSWORD';
        ALTER USER '$DB_USER'@'%' IDENTIFIED BY '$DB_PASSWORD';
        GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'%' WITH GRANT OPTION;
        DROP DATABASE IF EXISTS test; DROP DATABASE IF EXISTS test1; DROP DATABASE IF EXISTS test2;
        DROP DATABASE IF EXISTS myconnpy;
        CREATE DATABASE test; CREATE DATABASE test1; CREATE DATABASE test2;
        SET GLOBAL max_prepared_stmt_count = DEFAULT;
        SET GLOBAL local_infile = 1;
        FLUSH PRIVILEGES;"
}

free_port() {
    "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_ringgate() {
    local users="$WORK/users.json"
    printf '{ "%s": [{ "Password": "%s" }] }\n' "$DB_USER" "$DB_PASSWORD" >"$users"
    RG_PORT="$(free_port)"
    local metrics_port
    metrics_port="$(free_port)"
    # As tests/python/conftest.py starts it, with the default (passthrough) identity: each
    # client logs in to MariaDB as itself. RINGGATE_DRIVERS_ARGS is split into words on purpose.
    # shellcheck disable=SC2086
    RUST_LOG="${RUST_LOG:-info}" "$RINGGATE_BIN" \
        --listen "127.0.0.1:$RG_PORT" --workers 2 \
        --backend "127.0.0.1:$SANDBOX_PORT" --users-file "$users" \
        --backend-pool-size 4 --backend-max-connections 500 --backend-wait-timeout 10s \
        --max-connections 1000 --allow-local-infile \
        --metrics-listen "127.0.0.1:$metrics_port" \
        ${RINGGATE_DRIVERS_ARGS:-} \
        >"$WORK/ringgate.stderr" 2>&1 &
    RG_PID=$!
    local i
    for i in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$RG_PORT") 2>/dev/null; then return 0; fi
        if ! kill -0 "$RG_PID" 2>/dev/null; then break; fi
        sleep 0.1
    done
    loud "ringgate did not start:"
    tail -n 30 "$WORK/ringgate.stderr" >&2
    return 1
}

# DRIVERS_BUSY clients: each runs a statement in a loop through ringgate (on RG_PORT) until
# killed, so the pool hands connections around between the suite's commands.
start_busy() {
    local n="${DRIVERS_BUSY:-0}"
    if [ "$n" -le 0 ]; then return 0; fi
    "$PYTHON" - "$RG_PORT" "$n" "$DB_USER" "$DB_PASSWORD" >"$WORK/busy.log" 2>&1 <<'PY' &
import sys, threading, time
import mysql.connector
import pymysql
port, n, user, password = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
def connect(i):
    # Half PyMySQL, half mysql-connector (pure): the pool hands a connection only to sessions
    # of its own key (capabilities, collation), so both drivers' keys get busy clients.
    if i % 2 == 0:
        return pymysql.connect(host="127.0.0.1", port=port, user=user, password=password,
                               autocommit=True, connect_timeout=10, read_timeout=30)
    return mysql.connector.connect(host="127.0.0.1", port=port, user=user, password=password,
                                   autocommit=True, use_pure=True, connection_timeout=10)
def loop(i):
    while True:
        try:
            c = connect(i)
            cur = c.cursor()
            while True:
                cur.execute("SELECT %s", (i,))
                cur.fetchall()
                time.sleep(0.002)
        except Exception as e:  # a KILL or a restart of the server by a test: connect again
            print(f"busy {i}: {e}", flush=True)
            time.sleep(0.2)
threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
PY
    BUSY_PID=$!
}

stop_busy() {
    if [ -n "$BUSY_PID" ]; then
        kill "$BUSY_PID" 2>/dev/null || true
        wait "$BUSY_PID" 2>/dev/null || true
        BUSY_PID=""
    fi
}

stop_ringgate() {
    if [ -n "$RG_PID" ]; then
        kill "$RG_PID" 2>/dev/null || true
        wait "$RG_PID" 2>/dev/null || true
        RG_PID=""
    fi
}

# ---- the suites: each writes the names of its passing tests, one a line, to $2 -------------------

# run_pymysql PORT PASSFILE
run_pymysql() {
    local port=$1 out=$2 dir="$CACHE/PyMySQL-$PYMYSQL_VERSION"
    cat >"$dir/pymysql/tests/databases.json" <<EOF
[{"host": "127.0.0.1", "port": $port, "user": "$DB_USER", "passwd": "$DB_PASSWORD", "db": "test1",
  "use_unicode": true, "local_infile": true},
 {"host": "127.0.0.1", "port": $port, "user": "$DB_USER", "passwd": "$DB_PASSWORD", "db": "test2"}]
EOF
    local log="$out.log"
    # From the sdist's directory, so that its own pymysql (the one the tests were written for)
    # is the one imported. -p no:cacheprovider: write nothing into the cache.
    (cd "$dir" && timeout 600 "$PYTHON" -m pytest pymysql/tests -p no:cacheprovider -q -rA \
        -o addopts="" >"$log" 2>&1) || true
    sed -n 's/^PASSED //p' "$log" | sort -u >"$out"
    local summary
    summary="$(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$log" | tail -n 1 || true)"
    echo "pymysql: ${summary:-no pytest summary (see $log)}"
    [ -s "$out" ]
}

# run_mysql2 PORT PASSFILE
run_mysql2() {
    local port=$1 out=$2 dir="$CACHE/mysql2/node_modules/mysql2"
    : >"$out"
    local t rc pass=0 fail=0
    while IFS= read -r t; do
        rc=0
        (cd "$dir" && CI=1 MYSQL_HOST=127.0.0.1 MYSQL_PORT="$port" MYSQL_USER="$DB_USER" \
            MYSQL_PASSWORD="$DB_PASSWORD" MYSQL_DATABASE=test \
            timeout 60 node "$t" >>"$out.log" 2>&1) || rc=$?
        if [ "$rc" = 0 ]; then
            echo "$t" >>"$out"
            pass=$((pass + 1))
        else
            echo "FAILED ($rc) $t" >>"$out.log"
            fail=$((fail + 1))
        fi
    done < <(cd "$dir" && find test -name 'test-*.js' | sort)
    sort -u -o "$out" "$out"
    echo "mysql2: $pass passed, $fail failed"
    [ "$pass" -gt 0 ]
}

# run_connector PORT PASSFILE
run_connector() {
    local port=$1 out=$2 dir="$CACHE/mysql_connector_python-$CONNECTOR_VERSION"
    local group
    : >"$out.log"
    for group in $CONNECTOR_GROUPS; do
        # PYTHONPATH: the sdist's own (pure-Python) connector, not whichever one is installed.
        (cd "$dir" && PYTHONPATH="$dir/lib" timeout 300 "$PYTHON" unittests.py --use-external-server \
            --skip-install --host 127.0.0.1 --port "$port" --user "$DB_USER" --password "$DB_PASSWORD" \
            --verbosity 2 -t "$group" >>"$out.log" 2>&1) || true
    done
    # "connection.MySQLConnectionTests.test_cmd_query ... ok"
    sed -n 's/^\([A-Za-z0-9_.]*\) \.\.\. ok$/\1/p' "$out.log" | sort -u >"$out"
    echo "connector: $(wc -l <"$out") passed, $(grep -cE ' \.\.\. (FAIL|ERROR)$' "$out.log") failed or errors"
    [ -s "$out" ]
}

# ---- main ------------------------------------------------------------------------------------

step "MariaDB sandbox on 127.0.0.1:$SANDBOX_PORT"
if ! "$SANDBOX" status "$SANDBOX_DIR" "$SANDBOX_PORT" >/dev/null 2>&1; then STARTED_SANDBOX=1; fi
"$SANDBOX" start "$SANDBOX_DIR" "$SANDBOX_PORT"

if [ ! -x "$RINGGATE_BIN" ]; then
    step "cargo build"
    cargo build
fi

declare -A RESULT
OVERALL=0
IFS=',' read -r -a SUITES <<<"$DRIVERS"
for suite in "${SUITES[@]}"; do
    step "$suite: fetch"
    case "$suite" in
    pymysql) fetch=fetch_pymysql run=run_pymysql ;;
    mysql2) fetch=fetch_mysql2 run=run_mysql2 ;;
    connector) fetch=fetch_connector run=run_connector ;;
    *)
        loud "unknown suite $suite (known: pymysql, mysql2, connector)"
        RESULT[$suite]="FAILED (unknown suite)"
        OVERALL=1
        continue
        ;;
    esac
    if ! $fetch; then
        RESULT[$suite]="FAILED (suite could not be obtained: see above)"
        OVERALL=1
        continue
    fi

    step "$suite: direct to MariaDB (127.0.0.1:$SANDBOX_PORT)"
    prepare_server
    if ! $run "$SANDBOX_PORT" "$WORK/$suite.direct"; then
        loud "$suite: the direct run passed no test: the suite did not run (log: $WORK/$suite.direct.log)"
        tail -n 30 "$WORK/$suite.direct.log" >&2 || true
        RESULT[$suite]="FAILED (direct run passed no test)"
        OVERALL=1
        continue
    fi

    step "$suite: through ringgate"
    prepare_server
    start_ringgate
    start_busy
    $run "$RG_PORT" "$WORK/$suite.proxy" || true
    stop_busy
    stop_ringgate
    prepare_server

    direct_n=$(wc -l <"$WORK/$suite.direct")
    proxy_n=$(wc -l <"$WORK/$suite.proxy")
    all_lost="$(comm -23 "$WORK/$suite.direct" "$WORK/$suite.proxy")"
    # Differences by design (scripts/drivers-expected.txt) are reported, and do not fail the run.
    expected="$(awk -v s="$suite" '$1 == s { print $2 }' "$EXPECTED" | sort -u)"
    lost="$(comm -23 <(sed '/^$/d' <<<"$all_lost") <(sed '/^$/d' <<<"$expected"))"
    by_design="$(comm -12 <(sed '/^$/d' <<<"$all_lost") <(sed '/^$/d' <<<"$expected"))"
    if [ -n "$by_design" ]; then
        echo "$suite: pass direct, fail through ringgate by design (scripts/drivers-expected.txt):"
        sed 's/^/    /' <<<"$by_design"
    fi
    gained="$(comm -13 "$WORK/$suite.direct" "$WORK/$suite.proxy")"
    if [ -n "$gained" ]; then
        echo "$suite: pass through ringgate but fail direct:"
        sed 's/^/    /' <<<"$gained"
    fi
    if [ -n "$lost" ]; then
        loud "$suite: pass direct but FAIL through ringgate:"
        sed 's/^/    /' <<<"$lost" >&2
        echo "--- ringgate stderr (tail) ---" >&2
        tail -n 20 "$WORK/ringgate.stderr" >&2 || true
        RESULT[$suite]="FAILED (direct $direct_n passed, ringgate $proxy_n passed; $(wc -l <<<"$lost") pass direct only)"
        OVERALL=1
    else
        RESULT[$suite]="ok (direct $direct_n passed, ringgate $proxy_n passed${by_design:+; $(wc -l <<<"$by_design") by design})"
    fi
done

step "summary"
for suite in "${SUITES[@]}"; do
    printf '%-8s %s\n' "$suite:" "${RESULT[$suite]}"
done
exit "$OVERALL"
