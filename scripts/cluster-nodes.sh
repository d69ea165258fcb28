# shellcheck shell=bash
# The replication set's server processes: datadirs, start, stop, kill, status. Sourced by
# scripts/mariadb-cluster.sh, which sets DIR, BASE_PORT, TIMEOUT, NODES, the accounts and the
# MARIADBD / INSTALL_DB / ADMIN / CLIENT binaries; the SQL between nodes is in
# scripts/cluster-topology.sh.

# A process that exited but that nobody reaped yet still answers kill -0: only state Z tells.
alive() {
    local state
    state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

# The pids of mariadbd processes started on node N's datadir (from their command line, not
# their name: other engineers' servers run on this machine, and a pid file may name a pid the
# kernel gave to one of them since).
node_pids() {
    local want p
    want="--datadir=$(node_datadir "$1")"
    for p in /proc/[0-9]*; do
        [ -r "$p/cmdline" ] || continue
        if tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qxF -- "$want"; then
            alive "${p#/proc/}" && echo "${p#/proc/}"
        fi
    done
    return 0
}

# Node N's server pid: the pid file's, when that process runs on N's datadir.
node_pid() {
    local pidfile pid
    pidfile="$(node_dir "$1")/mysqld.pid"
    [ -s "$pidfile" ] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [ -n "$pid" ] && alive "$pid" || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "--datadir=$(node_datadir "$1")" || return 1
    echo "$pid"
}

pinging() {
    "$ADMIN" --no-defaults -S "$(node_sock "$1")" -uroot --connect-timeout=2 ping >/dev/null 2>&1
}

node_up() { node_pid "$1" >/dev/null && pinging "$1"; }

# Runs SQL on node N as root over its socket; rows tab-separated, no header.
sql() {
    "$CLIENT" --no-defaults -S "$(node_sock "$1")" -uroot --connect-timeout=5 \
        --batch --skip-column-names -e "$2"
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A pristine datadir from mariadb-install-db, made once and copied to each node: one
# install-db instead of three. It writes no binlog, so the primary's binlog starts empty and
# the replicas replay it all, accounts included (first GTID 0-1-1). A 16 MiB redo log (the
# default is 96 MiB) makes the copies cheap; the servers must be started with the same size.
REDO_LOG_SIZE=16M

fresh_datadirs() {
    local template="$DIR/template" n
    if [ ! -d "$template/mysql" ]; then
        rm -rf "$template"
        mkdir -p "$template"
        "$INSTALL_DB" --no-defaults --user="$(id -un)" --datadir="$template" \
            --auth-root-authentication-method=normal --skip-test-db \
            --innodb-log-file-size="$REDO_LOG_SIZE" >"$DIR/install-db.log" 2>&1 || {
            tail -n 40 "$DIR/install-db.log" >&2
            rm -rf "$template"
            die "mariadb-install-db failed"
        }
    fi
    for n in "${NODES[@]}"; do
        rm -rf "$(node_dir "$n")"
        mkdir -p "$(node_dir "$n")"
        cp -a "$template" "$(node_datadir "$n")"
    done
}

# Starts node N's mariadbd in the background, read_only as given (ON for a replica). Every
# node logs binlogs with its own server_id and keeps the replicated events in its own binlog
# (log-slave-updates), so any replica can become the primary the others follow. userstat:
# a replica's Com_insert also counts what its SQL thread applies, while
# INFORMATION_SCHEMA.USER_STATISTICS counts each account's own commands, so a test can tell a
# write a client sent to a replica from a replicated one.
launch_node() {
    local n=$1 read_only=$2 d port
    d="$(node_dir "$n")"
    port="$(node_port "$n")"
    port_in_use "$port" && die "port 127.0.0.1:$port is in use by another process; set RINGGATE_CLUSTER_PORT"
    # What a kill -9 left behind; the server would refuse a socket file that still exists.
    rm -f "$d/mysqld.pid" "$(node_sock "$n")"
    # setsid: the servers must outlive the shell or test run that started them.
    setsid "$MARIADBD" --no-defaults \
        --datadir="$(node_datadir "$n")" --port="$port" --socket="$(node_sock "$n")" \
        --bind-address=127.0.0.1 --pid-file="$d/mysqld.pid" --log-error="$d/mysqld.err" \
        --user="$(id -un)" --skip-name-resolve \
        --server-id="$n" --log-bin="$(node_datadir "$n")/bin" \
        --relay-log="$(node_datadir "$n")/relay-bin" --binlog-format=ROW \
        --gtid-strict-mode=ON --log-slave-updates=ON --read-only="$read_only" \
        --max-connections=500 --max-allowed-packet=64M \
        --innodb-buffer-pool-size=64M --innodb-log-file-size="$REDO_LOG_SIZE" \
        --innodb-flush-log-at-trx-commit=2 \
        --performance-schema=OFF --userstat=ON \
        </dev/null >>"$d/mysqld.err" 2>&1 &
}

wait_up() {
    local n=$1 deadline=$((SECONDS + TIMEOUT))
    until pinging "$n"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 30 "$(node_dir "$n")/mysqld.err" >&2
            die "node $n did not answer within $TIMEOUT s"
        fi
        sleep 0.05
    done
}

# Waits for pid to be gone (up to TIMEOUT s), then SIGKILL.
wait_gone() {
    local pid=$1 deadline=$((SECONDS + TIMEOUT))
    while alive "$pid"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "pid $pid still alive after $TIMEOUT s; SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            deadline=$((SECONDS + TIMEOUT))
        fi
        sleep 0.05
    done
}

# Stops node N: a clean shutdown over its socket, SIGTERM if that fails; then removes what a
# crash may have left. Safe to run in parallel for several nodes.
stop_node() {
    local n=$1 pid
    for pid in $(node_pids "$n"); do
        "$ADMIN" --no-defaults -S "$(node_sock "$n")" -uroot --connect-timeout=5 shutdown \
            >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
        wait_gone "$pid"
    done
    rm -f "$(node_dir "$n")/mysqld.pid" "$(node_sock "$n")"
}

# kill -9 node N; returns once its port refuses connections. The process turns zombie first,
# yet for up to about 15 ms after that (measured here) a connect to its port still succeeds.
kill_node() {
    local n=$1 pid port deadline=$((SECONDS + TIMEOUT))
    pid="$(node_pid "$1")" || die "node $n is not running"
    port="$(node_port "$n")"
    kill -KILL "$pid"
    wait_gone "$pid"
    while port_in_use "$port"; do
        [ "$SECONDS" -lt "$deadline" ] ||
            die "port $port still accepts connections $TIMEOUT s after kill -9 of node $n"
        sleep 0.01
    done
    log "node $n (pid $pid) killed"
}

do_stop() {
    local n waits=()
    # In parallel: a clean shutdown takes about a second per node.
    for n in "${NODES[@]}"; do
        stop_node "$n" &
        waits+=($!)
    done
    for n in "${waits[@]}"; do wait "$n"; done
    log "stopped"
}

do_status() {
    local n all=0
    for n in "${NODES[@]}"; do
        node_status_line "$n" || all=1
    done
    return "$all"
}

# Starts a fresh set, or leaves a running one as it is (use heal to make it whole again).
do_start() {
    local n all_up=1 started
    for n in "${NODES[@]}"; do node_up "$n" || all_up=0; done
    if [ "$all_up" = 1 ]; then
        log "already running (primary: node $(writable_node || echo none))"
        return 0
    fi
    started="$(date +%s%N)"
    do_stop 2>/dev/null
    fresh_datadirs
    for n in "${NODES[@]}"; do
        launch_node "$n" "$([ "$n" = 1 ] && echo OFF || echo ON)"
    done
    for n in "${NODES[@]}"; do wait_up "$n"; done
    setup_primary 1
    for n in 2 3; do follow "$n" 1; done
    for n in 2 3; do wait_applied "$n" "$(binlog_pos 1)"; done
    log "ready in $((($(date +%s%N) - started) / 1000000)) ms:" \
        "primary 127.0.0.1:$(node_port 1), replicas :$(node_port 2) :$(node_port 3)"
}
