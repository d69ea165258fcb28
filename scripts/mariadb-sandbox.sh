#!/usr/bin/env bash
# A private MariaDB for ringgate's tests and demo: its own datadir, port and socket.
#
#   scripts/mariadb-sandbox.sh start|stop|status|env [DIR] [PORT]
#
# DIR defaults to $RINGGATE_SANDBOX_DIR or <repo>/.sandbox/mariadb, PORT to
# $RINGGATE_SANDBOX_PORT or 3407. Never touches /var/lib/mysql or a system service, and
# never kills a server by name (other MariaDB servers may run on this machine).
#
# After `start` the backend account ringgate@127.0.0.1 / ringgate@localhost (password
# ringgate-backend, ALL privileges) and the database ringgate_test exist.
# performance_schema is ON (tests/connect_attrs.rs reads session_connect_attrs) with its
# event histories and digests off: those are what cost memory, and no test reads them.
# `eval "$(scripts/mariadb-sandbox.sh env)"` exports the RINGGATE_TEST_* variables the tests read.
#
# RINGGATE_SANDBOX_TLS=1 at `start`: the server also speaks TLS (ssl-ca/ssl-cert/ssl-key), with
# certificates made by openssl in DIR/tls on first use: ca.pem (the CA), server.pem/server.key
# (CN and SAN localhost, SAN IP 127.0.0.1, signed by ca.pem), other-ca.pem (a CA that signed
# nothing here, for wrong-CA tests). `env` then also exports RINGGATE_TEST_MYSQL_TLS_CA and
# RINGGATE_TEST_MYSQL_TLS_DIR. Without it (the default) the server has no TLS, as before; a
# running sandbox keeps the mode it was started with.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CMD="${1:-}"
# shellcheck source=scripts/sandbox-defaults.sh
. "$REPO_ROOT/scripts/sandbox-defaults.sh"
DIR="${2:-$SANDBOX_DIR}"
PORT="${3:-$SANDBOX_PORT}"

BACKEND_USER=ringgate
BACKEND_PASSWORD=ringgate-backend
TEST_DB=ringgate_test

usage() {
    echo "usage: $0 start|stop|status|env [DIR] [PORT]" >&2
    exit 2
}

case "$CMD" in
start | stop | status | env) ;;
*) usage ;;
esac

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
DATADIR="$DIR/data"
SOCK="$DIR/mysqld.sock"
PIDFILE="$DIR/mysqld.pid"
ERRLOG="$DIR/mysqld.err"
TLS_DIR="$DIR/tls"
# Present while a server started with RINGGATE_SANDBOX_TLS=1 runs on DIR.
TLS_MARK="$TLS_DIR/enabled"


log() { echo "mariadb-sandbox: $*" >&2; }

if [ "${#SOCK}" -gt 100 ]; then
    log "socket path $SOCK is too long for a unix socket (max ~107 bytes); pass a shorter DIR"
    exit 1
fi

server_pid() {
    # Prints the pid from the pid file when that process is alive and is a mariadbd/mysqld.
    [ -s "$PIDFILE" ] || return 1
    local pid
    pid="$(tr -dc '0-9' <"$PIDFILE")"
    [ -n "$pid" ] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    local comm
    comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
    case "$comm" in
    mariadbd | mysqld | mariadbd* | mysqld*) ;;
    *) return 1 ;;
    esac
    echo "$pid"
}

pinging() {
    "$ADMIN" --no-defaults -S "$SOCK" -uroot --connect-timeout=2 ping >/dev/null 2>&1
}

root_sql() {
    "$CLIENT" --no-defaults -S "$SOCK" -uroot --batch --skip-column-names -e "$1"
}

port_in_use() {
    # true when something listens on 127.0.0.1:$PORT
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

print_env() {
    cat <<EOF
export RINGGATE_TEST_MYSQL_HOST=127.0.0.1
export RINGGATE_TEST_MYSQL_PORT=$PORT
export RINGGATE_TEST_MYSQL_SOCKET=$SOCK
export RINGGATE_TEST_BACKEND_USER=$BACKEND_USER
export RINGGATE_TEST_BACKEND_PASSWORD=$BACKEND_PASSWORD
EOF
    if [ -e "$TLS_MARK" ]; then
        echo "export RINGGATE_TEST_MYSQL_TLS_CA=$TLS_DIR/ca.pem"
        echo "export RINGGATE_TEST_MYSQL_TLS_DIR=$TLS_DIR"
    fi
}

# The sandbox's certificates (see the header), made once per DIR.
make_certs() {
    [ -s "$TLS_DIR/server.pem" ] && [ -s "$TLS_DIR/other-ca.pem" ] && return 0
    command -v openssl >/dev/null 2>&1 || {
        log "openssl not found: RINGGATE_SANDBOX_TLS=1 needs it to make certificates"
        exit 1
    }
    mkdir -p "$TLS_DIR"
    log "making TLS certificates in $TLS_DIR"
    (
        cd "$TLS_DIR"
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=ringgate sandbox CA" \
            -keyout ca.key -out ca.pem
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=ringgate other CA" \
            -keyout other-ca.key -out other-ca.pem
        openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
            -extfile server.ext -out server.pem
        rm -f server.csr server.ext
    ) >"$DIR/tls.log" 2>&1 || {
        log "openssl failed:"
        tail -n 20 "$DIR/tls.log" >&2
        exit 1
    }
}

do_status() {
    local pid
    if pid="$(server_pid)" && pinging; then
        echo "mariadb-sandbox: running (pid $pid, port $PORT, socket $SOCK, datadir $DATADIR)"
        return 0
    fi
    echo "mariadb-sandbox: not running (datadir $DATADIR)"
    return 1
}

setup_accounts() {
    local sql=""
    local host
    for host in 127.0.0.1 localhost; do
        sql+="CREATE USER IF NOT EXISTS '$BACKEND_USER'@'$host' IDENTIFIED BY '$BACKEND_PASSWORD';"
        sql+="ALTER USER '$BACKEND_USER'@'$host' IDENTIFIED BY '$BACKEND_PASSWORD';"
        sql+="GRANT ALL PRIVILEGES ON *.* TO '$BACKEND_USER'@'$host' WITH GRANT OPTION;"
    done
    # The proxy's own users (tests/users.json) must not exist on the backend, or a proxy that
    # passed client credentials through would look like it authenticated them itself.
    for host in % 127.0.0.1 localhost; do
        sql+="DROP USER IF EXISTS 'app'@'$host', 'hashed'@'$host', 'demo'@'$host';"
    done
    sql+="CREATE DATABASE IF NOT EXISTS \`$TEST_DB\`;"
    sql+="FLUSH PRIVILEGES;"
    root_sql "$sql"
}

do_start() {
    local pid
    if pid="$(server_pid)"; then
        if pinging; then
            log "already running (pid $pid, port $PORT)"
            setup_accounts
            return 0
        fi
    fi
    if port_in_use; then
        log "port 127.0.0.1:$PORT is already in use by another process; pick another PORT"
        exit 1
    fi
    rm -f "$PIDFILE" "$SOCK" "$TLS_MARK"
    local tls_args=()
    if [ "${RINGGATE_SANDBOX_TLS:-0}" = 1 ]; then
        make_certs
        tls_args=(--ssl-ca="$TLS_DIR/ca.pem" --ssl-cert="$TLS_DIR/server.pem" --ssl-key="$TLS_DIR/server.key")
    fi

    local runas
    runas="$(id -un)"

    if [ ! -d "$DATADIR/mysql" ]; then
        log "initialising datadir $DATADIR"
        rm -rf "$DATADIR"
        mkdir -p "$DATADIR"
        if ! "$INSTALL_DB" --no-defaults --user="$runas" --datadir="$DATADIR" \
            --auth-root-authentication-method=normal --skip-test-db \
            >"$DIR/install-db.log" 2>&1; then
            log "mariadb-install-db failed:"
            tail -n 40 "$DIR/install-db.log" >&2
            exit 1
        fi
    fi

    : >"$ERRLOG"
    log "starting mariadbd on 127.0.0.1:$PORT (datadir $DATADIR)"
    # setsid: the server must not die with the terminal/process group that started it
    # (Ctrl-C in `make run` is handled by the caller, who stops us explicitly).
    setsid "$MARIADBD" --no-defaults \
        --datadir="$DATADIR" \
        --port="$PORT" \
        --socket="$SOCK" \
        --bind-address=127.0.0.1 \
        --pid-file="$PIDFILE" \
        --log-error="$ERRLOG" \
        --user="$runas" \
        --skip-name-resolve \
        --max-connections=2000 \
        --max-allowed-packet=64M \
        --local-infile=1 \
        --innodb-buffer-pool-size=128M \
        --innodb-flush-log-at-trx-commit=2 \
        --skip-log-bin \
        --performance-schema=ON \
        --performance-schema-events-waits-history-size=0 \
        --performance-schema-events-waits-history-long-size=0 \
        --performance-schema-events-stages-history-size=0 \
        --performance-schema-events-stages-history-long-size=0 \
        --performance-schema-events-statements-history-size=0 \
        --performance-schema-events-statements-history-long-size=0 \
        --performance-schema-events-transactions-history-size=0 \
        --performance-schema-events-transactions-history-long-size=0 \
        --performance-schema-digests-size=0 \
        "${tls_args[@]}" \
        </dev/null >>"$ERRLOG" 2>&1 &
    local launcher=$!

    local i
    for i in $(seq 1 150); do # 150 * 0.2 s = 30 s
        if pinging; then
            break
        fi
        if ! kill -0 "$launcher" 2>/dev/null && ! server_pid >/dev/null; then
            log "mariadbd exited during start-up; error log tail:"
            tail -n 40 "$ERRLOG" >&2
            exit 1
        fi
        sleep 0.2
    done
    if ! pinging; then
        log "mariadbd did not answer within 30 s; error log tail:"
        tail -n 40 "$ERRLOG" >&2
        do_stop || true
        exit 1
    fi
    setup_accounts
    if [ "${#tls_args[@]}" -gt 0 ]; then
        touch "$TLS_MARK"
        log "TLS on (CA $TLS_DIR/ca.pem)"
    fi
    log "ready: pid $(server_pid || echo '?'), port $PORT, socket $SOCK"
}

do_stop() {
    local pid=""
    pid="$(server_pid)" || pid=""
    if [ -z "$pid" ] && ! pinging; then
        log "not running"
        rm -f "$PIDFILE"
        return 0
    fi
    if "$ADMIN" --no-defaults -S "$SOCK" -uroot --connect-timeout=5 shutdown >/dev/null 2>&1; then
        :
    elif [ -n "$pid" ]; then
        log "mariadb-admin shutdown failed; sending SIGTERM to pid $pid"
        kill -TERM "$pid" 2>/dev/null || true
    fi
    if [ -n "$pid" ]; then
        local i
        for i in $(seq 1 150); do # 30 s
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid still alive after 30 s; SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.5
        fi
    fi
    rm -f "$PIDFILE" "$TLS_MARK"
    log "stopped"
}

case "$CMD" in
env)
    print_env
    exit 0
    ;;
esac

# shellcheck source=scripts/mariadb-bins.sh
. "$(dirname "${BASH_SOURCE[0]}")/mariadb-bins.sh"

case "$CMD" in
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
esac
