#!/usr/bin/env bash
# `make run`: a demo ringgate (release build) on 127.0.0.1:15306 in front of the private
# MariaDB on 127.0.0.1:3407, with one client user demo/demo. Ctrl-C stops both.
#
# Environment: RINGGATE_SANDBOX_DIR, RINGGATE_SANDBOX_PORT (default 3407),
# RINGGATE_LISTEN (default 127.0.0.1:15306), RINGGATE_METRICS_LISTEN (default
# 127.0.0.1:9104), RINGGATE_ARGS (extra ringgate arguments, e.g. "--read-buffers heap").
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT="$(pwd)"

# shellcheck source=scripts/sandbox-defaults.sh
. scripts/sandbox-defaults.sh
LISTEN="${RINGGATE_LISTEN:-127.0.0.1:15306}"
METRICS="${RINGGATE_METRICS_LISTEN:-127.0.0.1:9104}"
USERS_FILE="$REPO_ROOT/.sandbox/demo-users.json"

scripts/ensure-deps.sh

cleanup() {
    local rc=$?
    echo
    "$SANDBOX" stop "$SANDBOX_DIR" "$SANDBOX_PORT" || true
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

"$SANDBOX" start "$SANDBOX_DIR" "$SANDBOX_PORT"

mkdir -p "$(dirname "$USERS_FILE")"
cat >"$USERS_FILE" <<'EOF'
{
  "demo": [{ "Password": "demo" }]
}
EOF

cargo build --release

HOST="${LISTEN%:*}"
PORT="${LISTEN##*:}"
cat <<EOF

ringgate is starting on $LISTEN (backend: MariaDB on 127.0.0.1:$SANDBOX_PORT).
Connect with:

    mariadb -h$HOST -P$PORT -udemo -pdemo

Metrics: curl http://$METRICS/metrics
Press Ctrl-C to stop ringgate and the MariaDB sandbox.

EOF

export RINGGATE_BACKEND_PASSWORD=ringgate-backend
# shellcheck disable=SC2086
cargo run --release -- \
    --listen "$LISTEN" \
    --backend "127.0.0.1:$SANDBOX_PORT" \
    --backend-identity shared \
    --backend-user ringgate \
    --users-file "$USERS_FILE" \
    --metrics-listen "$METRICS" \
    ${RINGGATE_ARGS:-}
