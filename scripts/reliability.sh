#!/usr/bin/env bash
# Runs the long reliability checks that `make test` does not: the full chaos test and the
# memory-per-connection measurement. Both start their own private MariaDB (they kill or load
# it), but the harness still reads the shared sandbox's RINGGATE_TEST_* variables, so this
# starts the shared sandbox too when it is not running (and stops it again afterwards).
#
#   scripts/reliability.sh chaos|mem
#
# CHAOS_SECONDS (default 60), CHAOS_MODE (fixed|heap), MEM_SESSIONS (default 2000).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT="$(pwd)"
# shellcheck source=scripts/sandbox-defaults.sh
. scripts/sandbox-defaults.sh

what="${1:-}"
case "$what" in
chaos | mem) ;;
*)
    echo "usage: $0 chaos|mem" >&2
    exit 2
    ;;
esac

scripts/ensure-deps.sh
STARTED=0
cleanup() {
    local rc=$?
    [ "$STARTED" = 1 ] && "$SANDBOX" stop "$SANDBOX_DIR" "$SANDBOX_PORT" || true
    exit "$rc"
}
trap cleanup EXIT
if ! "$SANDBOX" status "$SANDBOX_DIR" "$SANDBOX_PORT" >/dev/null 2>&1; then
    STARTED=1
fi
"$SANDBOX" start "$SANDBOX_DIR" "$SANDBOX_PORT"
eval "$("$SANDBOX" env "$SANDBOX_DIR" "$SANDBOX_PORT")"
export RUST_LOG="${RUST_LOG:-warn}"

case "$what" in
chaos)
    CHAOS_LATENCY_CHECK=1 CHAOS_SECONDS="${CHAOS_SECONDS:-60}" cargo test --release --test faults_under_load -- --nocapture
    ;;
mem)
    cargo test --release --test memory -- --ignored --nocapture
    # 10,000 idle clients holding no read buffer (make test runs 1,000).
    # Then fixed, ring and heap side by side with the same 10,000 (RSS per client, VmPin).
    IDLE_CLIENTS="${IDLE_CLIENTS:-10000}" cargo test --release --test idle -- --include-ignored \
        --nocapture --test-threads 1
    ;;
esac
