# shellcheck shell=bash
# The replication set's topology: accounts, who follows whom, which node is what, waiting for
# a GTID position. Sourced by scripts/mariadb-cluster.sh after scripts/cluster-nodes.sh (sql,
# node_up, ...). The server facts behind each step are in docs/design/replication-harness.md.

# The accounts and the test database, made on the primary only: they reach the replicas
# through the binlog like any write (a replica must never be written to directly: with
# gtid_strict_mode its own GTID would stop replication with error 1950).
setup_primary() {
    local h="'127.0.0.1'"
    sql "$1" "
        CREATE USER '$REPL_USER'@$h IDENTIFIED BY '$REPL_PASSWORD';
        GRANT REPLICATION SLAVE ON *.* TO '$REPL_USER'@$h;
        CREATE USER '$MONITOR_USER'@$h IDENTIFIED BY '$MONITOR_PASSWORD';
        GRANT SLAVE MONITOR, BINLOG MONITOR ON *.* TO '$MONITOR_USER'@$h;
        CREATE USER '$APP_USER'@$h IDENTIFIED BY '$APP_PASSWORD';
        CREATE DATABASE \`$TEST_DB\`;
        GRANT ALL ON \`$TEST_DB\`.* TO '$APP_USER'@$h;"
}

# Makes node N a replica of node M from N's gtid_slave_pos. MASTER_CONNECT_RETRY=1: the
# default 60 s would leave a replica disconnected for a minute after its primary restarts.
follow() {
    sql "$1" "STOP SLAVE;
        CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$(node_port "$2"),
            MASTER_USER='$REPL_USER', MASTER_PASSWORD='$REPL_PASSWORD',
            MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1;
        START SLAVE;"
}

# Makes node N, a primary until now, follow node M. Its gtid_slave_pos is empty (it never
# replicated) and its history is in its own binlog: from an empty slave_pos it would replay
# from the start and skip every event with its own server_id, so it starts from its binlog
# position. Set as gtid_slave_pos rather than MASTER_USE_GTID=current_pos, which starts there
# too but leaves gtid_slave_pos empty: MASTER_GTID_WAIT, which waits on gtid_slave_pos, would
# then not return until the new primary writes, and a later promotion could not rank it.
follow_as_old_primary() {
    sql "$1" "STOP SLAVE; SET GLOBAL gtid_slave_pos=@@gtid_binlog_pos"
    follow "$1" "$2"
}

# A global variable of node N, read with SHOW rather than SELECT: the tests read where queries
# went from Com_select, and the harness's own reads must not move it.
global_var() { sql "$1" "SHOW GLOBAL VARIABLES LIKE '$2'" | cut -f2; }

binlog_pos() { global_var "$1" gtid_binlog_pos; }

# Waits until replica N has applied GTID position pos. MASTER_GTID_WAIT, not a sleep: it
# returns 0 the moment the position is applied, -1 at the timeout.
wait_applied() {
    local got
    got="$(sql "$1" "SELECT MASTER_GTID_WAIT('$2', $TIMEOUT)")"
    if [ "$got" != 0 ]; then
        slave_field "$1" 'Slave_IO_Running|Slave_SQL_Running|Last_IO_Error|Last_SQL_Error|Gtid_IO_Pos' >&2
        die "node $1 did not apply $2 within $TIMEOUT s (MASTER_GTID_WAIT gave $got)"
    fi
}

# Fields of node N's SHOW ALL SLAVES STATUS (one connection, the default one), as
# "Name: value" lines; $2 is an extended regex of field names. Empty on a node that follows
# nobody.
slave_field() {
    "$CLIENT" --no-defaults -S "$(node_sock "$1")" -uroot --connect-timeout=5 --vertical \
        -e "SHOW ALL SLAVES STATUS" | sed -nE "s/^ *(($2)): /\1: /p"
}

# One field's value alone.
slave_value() { slave_field "$1" "$2" | sed -E 's/^[^:]+: //'; }

# The running nodes with read_only OFF; the primary when there is exactly one.
writable_nodes() {
    local n
    for n in "${NODES[@]}"; do
        if node_up "$n" && [ "$(global_var "$n" read_only)" = OFF ]; then echo "$n"; fi
    done
}

writable_node() {
    local w
    w="$(writable_nodes)"
    [ -n "$w" ] || return 1
    [ "$(wc -l <<<"$w")" = 1 ] || die "more than one writable node: ${w//$'\n'/ }"
    echo "$w"
}

# The running read-only nodes that follow someone (a restarted old primary that was not made
# to follow yet is read-only but follows nobody: neither a candidate nor to be repointed).
replica_nodes() {
    local n
    for n in "${NODES[@]}"; do
        if node_up "$n" && [ "$(global_var "$n" read_only)" = ON ] &&
            [ -n "$(slave_value "$n" Master_Port)" ]; then echo "$n"; fi
    done
}

is_replica() {
    local r
    r="$(replica_nodes)"
    grep -qx "$1" <<<"$r"
}

# The sequence number of domain 0 in a GTID position ("0-1-2028,1-5-7" -> 2028): the harness
# writes in domain 0 only, and a new primary keeps the sequence under its own server_id
# (0-2-2029 after 0-1-2028), so positions compare by seq_no, never as strings.
gtid_seq() {
    local g
    for g in ${1//,/ }; do
        [ "${g%%-*}" = 0 ] && { echo "${g##*-}"; return 0; }
    done
    echo 0
}

node_status_line() {
    local n=$1 port pid
    port="$(node_port "$n")"
    if ! pid="$(node_pid "$n")" || ! pinging "$n"; then
        echo "node $n 127.0.0.1:$port down"
        return 1
    fi
    local ro bpos spos
    ro="$(global_var "$n" read_only)"
    bpos="$(binlog_pos "$n")"
    spos="$(global_var "$n" gtid_slave_pos)"
    local m io sql_thread
    read -r m io sql_thread < <(slave_value "$n" 'Master_Port|Slave_IO_Running|Slave_SQL_Running' |
        tr '\n' ' ')
    if [ "$ro" = OFF ]; then
        echo "node $n 127.0.0.1:$port pid $pid primary, gtid_binlog_pos $bpos"
    elif [ -z "$m" ]; then
        echo "node $n 127.0.0.1:$port pid $pid read-only, follows nobody, gtid_binlog_pos $bpos"
    else
        echo "node $n 127.0.0.1:$port pid $pid replica of :$m (IO $io, SQL $sql_thread)," \
            "gtid_slave_pos ${spos:-(empty)}"
    fi
}
