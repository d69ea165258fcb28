# shellcheck shell=bash
# What an orchestrator does to the replication set: failover (kill, promote), planned
# switchover, replica lag, restarts, and heal, which makes the set whole again between tests.
# Sourced by scripts/mariadb-cluster.sh after scripts/cluster-nodes.sh and
# scripts/cluster-topology.sh.

kill_primary() {
    local p
    p="$(writable_node)" || die "no node is writable"
    kill_node "$p"
    echo "$p"
}

# Drains replica N: waits until it has applied everything its IO thread received
# (Gtid_IO_Pos), then prints its applied position's seq_no. Read @@gtid_slave_pos itself: the
# Gtid_Slave_Pos column of SHOW ALL SLAVES STATUS can show another position.
drain() {
    wait_applied "$1" "$(slave_value "$1" Gtid_IO_Pos)"
    gtid_seq "$(global_var "$1" gtid_slave_pos)"
}

# Promotes replica `want` (default: the most advanced one) after the primary died, and
# repoints the other replicas to it. A candidate behind another replica is refused: that
# replica would ask it for GTIDs it never had (error 1236).
promote() {
    local want=$1 p n seq best="" best_seq=-1 candidates=()
    if p="$(writable_node)"; then
        [ "$p" = "$want" ] && { echo "$p"; return 0; }
        die "node $p is a running primary: use switchover"
    fi
    mapfile -t candidates < <(replica_nodes)
    [ "${#candidates[@]}" -gt 0 ] || die "no running replica to promote"
    declare -A at
    for n in "${candidates[@]}"; do
        seq="$(drain "$n")"
        at[$n]=$seq
        if [ "$seq" -gt "$best_seq" ]; then best=$n best_seq=$seq; fi
    done
    want="${want:-$best}"
    [ -n "${at[$want]:-}" ] || die "node $want is not a running replica"
    [ "${at[$want]}" -ge "$best_seq" ] ||
        die "node $want has applied up to seq_no ${at[$want]}, node $best up to $best_seq: promote $best"
    sql "$want" "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only=0"
    for n in "${candidates[@]}"; do
        [ "$n" = "$want" ] || follow "$n" "$want"
    done
    log "node $want promoted"
    echo "$want"
}

# Planned: nothing is written during the change, nothing is lost; the old primary then
# follows the new one.
switchover() {
    local want=$1 p n
    p="$(writable_node)" || die "no node is writable: use promote"
    if [ "$p" = "$want" ]; then
        log "node $want is already the primary"
        return 0
    fi
    is_replica "$want" || die "node $want is not a running replica"
    sql "$p" "SET GLOBAL read_only=1"
    wait_applied "$want" "$(binlog_pos "$p")"
    sql "$want" "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only=0"
    for n in $(replica_nodes); do
        [ "$n" = "$want" ] || follow "$n" "$want"
    done
    follow_as_old_primary "$p" "$want"
    log "switched over from node $p to node $want"
}

lag() {
    local n=$1
    is_replica "$n" || die "node $n is not a running replica"
    case "$2" in
    on) sql "$n" "STOP SLAVE SQL_THREAD" ;;
    off) sql "$n" "START SLAVE SQL_THREAD" ;;
    *) die "usage: lag N on|off" ;;
    esac
}

# Restarts node N in its role: the one it had when it runs; when it is down, replica if
# another node is writable, else primary (the primary came back before anyone was promoted:
# the replicas reconnect by themselves). A read-only node is then made to follow the primary.
restart_node() {
    local n=$1 read_only=OFF p=""
    if node_up "$n"; then
        [ "$(global_var "$n" read_only)" = ON ] && read_only=ON
        stop_node "$n"
    elif p="$(writable_node)"; then
        read_only=ON
    fi
    launch_node "$n" "$read_only"
    wait_up "$n"
    log "node $n restarted (read_only $read_only)"
    if [ "$read_only" = ON ] && p="$(writable_node)"; then
        rejoin "$n" "$p"
    fi
}

# Makes read-only node N follow primary P, if it does not already, and waits until it caught up.
rejoin() {
    local n=$1 p=$2 port
    port="$(slave_value "$n" Master_Port)"
    if [ -z "$port" ]; then
        follow_as_old_primary "$n" "$p"
    elif [ "$port" != "$(node_port "$p")" ]; then
        follow "$n" "$p"
    fi
    # A test may have stopped a thread (STOP SLAVE SQL_THREAD, lag on):
    # start whatever is stopped before waiting for it to catch up.
    sql "$n" "START SLAVE" 2>/dev/null
    wait_applied "$n" "$(binlog_pos "$p")"
}

# Every node running, every replica applying and caught up, node 1 the primary.
heal() {
    local n p
    for n in "${NODES[@]}"; do
        node_up "$n" || restart_node "$n"
    done
    p="$(writable_node)" || die "no node is writable after the restarts"
    for n in "${NODES[@]}"; do
        [ "$n" = "$p" ] && continue
        rejoin "$n" "$p"
    done
    for n in "${NODES[@]}"; do
        [ "$n" = "$p" ] || wait_applied "$n" "$(binlog_pos "$p")"
    done
    [ "$p" = 1 ] || switchover 1
    log "healed: node 1 primary, nodes 2 and 3 following it"
}
