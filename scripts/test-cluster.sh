#!/usr/bin/env bash
# The cluster tests: deps -> debug build -> the three-node replication set -> pytest
# tests/python/test_cluster_*.py. The set is stopped again on exit (also on failure or Ctrl-C)
# if this script started it; a running set is reused and left running.
#
# Environment: RINGGATE_CLUSTER_DIR (default .sandbox/cluster), RINGGATE_CLUSTER_PORT (base
# port, default 3451: nodes on 3451-3453; the harness's own lifecycle test also takes the three
# ports above), PYTEST_ARGS (extra arguments, e.g. -k a_test_name).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
CLUSTER=scripts/mariadb-cluster.sh

step() { printf '\n==> %s\n' "$*"; }

step "ensure-deps"
scripts/ensure-deps.sh

# The cluster tests put the real binary in front of the set.
step "cargo build"
cargo build

STARTED=0
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local rc=$?
    if [ "$STARTED" = 1 ]; then
        step "stopping the replication set"
        "$CLUSTER" stop || true
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "replication set"
T=$SECONDS
if "$CLUSTER" status >/dev/null 2>&1; then
    echo "(already running: reusing it and leaving it running)"
    "$CLUSTER" heal
else
    STARTED=1
    "$CLUSTER" start
fi
eval "$("$CLUSTER" env)"
"$CLUSTER" status
SETUP_TOOK=$((SECONDS - T))

step "pytest tests/python/test_cluster_*.py"
T=$SECONDS
set +e
# shellcheck disable=SC2086
python3 -m pytest tests/python/test_cluster_*.py -q -rs --durations=10 ${PYTEST_ARGS:-}
RC=$?
set -e
echo "time: set-up ${SETUP_TOOK}s, tests $((SECONDS - T))s"
# 5: no test collected (a PYTEST_ARGS filter that matches nothing) is a failure, not a pass.
exit "$RC"
