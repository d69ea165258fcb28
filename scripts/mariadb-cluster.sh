#!/usr/bin/env bash
# A private three-node MariaDB replication set for ringgate's cluster tests: node 1 starts as the
# primary, nodes 2 and 3 as GTID replicas (read_only=ON), each with its own datadir, port and
# socket under DIR/nN. docs/design/replication-harness.md says why each flag and step is there.
#
#   scripts/mariadb-cluster.sh start|stop|status|env|primary
#   scripts/mariadb-cluster.sh kill N|kill-primary|restart N|promote [N]|switchover N|lag N on|off|heal
#
# DIR is $RINGGATE_CLUSTER_DIR or <repo>/.sandbox/cluster; node N listens on 127.0.0.1 at
# $RINGGATE_CLUSTER_PORT + N - 1 (base 3451 by default); waits give up after
# $RINGGATE_CLUSTER_TIMEOUT seconds (30). Never touches a system service, and never kills a
# server by name: only the pids whose command line names this set's datadirs.
#
# start        a fresh set (new datadirs), or the running set as it is when all three nodes answer
# stop         every node of the set, also after a kill -9 left pid files and sockets behind
# status       one line per node; exit 0 when all three answer
# env          export lines: the nodes' addresses and sockets, the monitor and app accounts
# primary      the number of the writable node
# kill N       kill -9 node N; kill-primary does it to the writable node and prints its number
# restart N    shuts N down (if it runs) and starts it in its role; a read-only node that does not
#              follow the writable one is made to (an old primary from its own binlog position)
# promote [N]  after the primary died: drains every replica, makes N (default: the most advanced
#              replica) the writable primary, repoints the others to it; prints N
# switchover N planned: read_only on the primary, N catches up, N is promoted, the others and
#              the old primary follow N
# lag N on|off stops / starts replica N's SQL thread (it keeps receiving, applies nothing)
# heal         every node running, every replica applying and caught up, node 1 the primary
#
# Accounts (TCP, @'127.0.0.1'): repl (REPLICATION SLAVE), monitor (SLAVE MONITOR, BINLOG
# MONITOR), ringgate (ALL on the database ringgate_test only); root over the socket.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CMD="${1:-}"
DIR="${RINGGATE_CLUSTER_DIR:-$REPO_ROOT/.sandbox/cluster}"
BASE_PORT="${RINGGATE_CLUSTER_PORT:-3451}"
TIMEOUT="${RINGGATE_CLUSTER_TIMEOUT:-30}"
NODES=(1 2 3)

REPL_USER=repl
REPL_PASSWORD=repl-secret
MONITOR_USER=monitor
MONITOR_PASSWORD=monitor-secret
# The name and password of the single sandbox's backend account, so that a ringgate started by
# the Python tests' Proxy logs in to either; but no global privilege here (see the doc).
APP_USER=ringgate
APP_PASSWORD=ringgate-backend
TEST_DB=ringgate_test

usage() {
    sed -n '5,6p' "$0" | sed 's/^# */usage: /' >&2
    exit 2
}

log() { echo "mariadb-cluster: $*" >&2; }
die() {
    log "$*"
    exit 1
}

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

node_dir() { echo "$DIR/n$1"; }
node_port() { echo $((BASE_PORT + $1 - 1)); }
node_sock() { echo "$DIR/n$1/mysqld.sock"; }
node_datadir() { echo "$DIR/n$1/data"; }

check_node() {
    case "${1:-}" in
    1 | 2 | 3) ;;
    *) die "no node '${1:-}': the nodes are 1, 2 and 3" ;;
    esac
}

print_env() {
    local n addrs="" socks=""
    for n in "${NODES[@]}"; do
        addrs+="${addrs:+,}127.0.0.1:$(node_port "$n")"
        socks+="${socks:+,}$(node_sock "$n")"
    done
    cat <<EOF
export RINGGATE_CLUSTER_DIR=$DIR
export RINGGATE_CLUSTER_PORT=$BASE_PORT
export RINGGATE_CLUSTER_NODES=$addrs
export RINGGATE_CLUSTER_SOCKETS=$socks
export RINGGATE_CLUSTER_MONITOR_USER=$MONITOR_USER
export RINGGATE_CLUSTER_MONITOR_PASSWORD=$MONITOR_PASSWORD
export RINGGATE_CLUSTER_APP_USER=$APP_USER
export RINGGATE_CLUSTER_APP_PASSWORD=$APP_PASSWORD
export RINGGATE_CLUSTER_DB=$TEST_DB
EOF
}

case "$CMD" in
env)
    print_env
    exit 0
    ;;
start | stop | status | primary | kill | kill-primary | restart | promote | switchover | lag | heal) ;;
*) usage ;;
esac

# The longest socket path must fit a sockaddr_un (108 bytes).
if [ "${#DIR}" -gt 90 ]; then
    die "DIR $DIR is too long for the nodes' unix sockets; set a shorter RINGGATE_CLUSTER_DIR"
fi


# shellcheck source=scripts/mariadb-bins.sh
. "$(dirname "${BASH_SOURCE[0]}")/mariadb-bins.sh"

# shellcheck source=scripts/cluster-nodes.sh
. "$REPO_ROOT/scripts/cluster-nodes.sh"
# shellcheck source=scripts/cluster-topology.sh
. "$REPO_ROOT/scripts/cluster-topology.sh"
# shellcheck source=scripts/cluster-orchestrator.sh
. "$REPO_ROOT/scripts/cluster-orchestrator.sh"

case "$CMD" in
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
primary) writable_node || die "no node is writable" ;;
kill)
    check_node "${2:-}"
    kill_node "$2"
    ;;
kill-primary) kill_primary ;;
restart)
    check_node "${2:-}"
    restart_node "$2"
    ;;
promote)
    [ -z "${2:-}" ] || check_node "$2"
    promote "${2:-}"
    ;;
switchover)
    check_node "${2:-}"
    switchover "$2"
    ;;
lag)
    check_node "${2:-}"
    lag "$2" "${3:-}"
    ;;
heal) heal ;;
esac
