#!/usr/bin/env bash
# The whole test suite: deps -> debug build -> private MariaDB -> cargo test -> pytest.
# The sandbox is stopped again on exit (also on failure or Ctrl-C) if this script started it.
#
# Environment: RINGGATE_SANDBOX_DIR (default .sandbox/mariadb), RINGGATE_SANDBOX_PORT
# (default 3407), CARGO_TEST_ARGS / PYTEST_ARGS (extra arguments, e.g. a test name filter).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT="$(pwd)"

# shellcheck source=scripts/sandbox-defaults.sh
. scripts/sandbox-defaults.sh

step() { printf '\n==> %s\n' "$*"; }

step "ensure-deps"
scripts/ensure-deps.sh

step "cargo build"
cargo build

STARTED_SANDBOX=0
cleanup() {
    local rc=$?
    if [ "$STARTED_SANDBOX" = 1 ]; then
        step "stopping the MariaDB sandbox"
        "$SANDBOX" stop "$SANDBOX_DIR" "$SANDBOX_PORT" || true
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "MariaDB sandbox on 127.0.0.1:$SANDBOX_PORT"
if "$SANDBOX" status "$SANDBOX_DIR" "$SANDBOX_PORT" >/dev/null 2>&1; then
    echo "(already running: reusing it and leaving it running)"
else
    STARTED_SANDBOX=1
fi
"$SANDBOX" start "$SANDBOX_DIR" "$SANDBOX_PORT"
eval "$("$SANDBOX" env "$SANDBOX_DIR" "$SANDBOX_PORT")"
"$SANDBOX" env "$SANDBOX_DIR" "$SANDBOX_PORT"

# Make the ringgate stderr tails of failed tests useful, without drowning passing runs.
export RUST_LOG="${RUST_LOG:-info}"

LINT_RC=0
step "cargo fmt --check and clippy"
# Both ship with the machine's rustup toolchain; a toolchain without them
# (rustup can't fetch components here) skips the lint rather than the tests.
if cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1; then
    cargo fmt --all -- --check || LINT_RC=$?
    cargo clippy --workspace --all-targets -- -D warnings || LINT_RC=$?
else
    echo "warning: rustfmt/clippy components missing from this toolchain; lint skipped" >&2
fi

CARGO_RC=0
step "cargo test"
# shellcheck disable=SC2086
cargo test ${CARGO_TEST_ARGS:-} || CARGO_RC=$?

PYTEST_RC=0
step "pytest tests/python"
# shellcheck disable=SC2086
python3 -m pytest tests/python -q ${PYTEST_ARGS:-} || PYTEST_RC=$?
if [ "$PYTEST_RC" = 5 ]; then
    echo "pytest collected no tests (exit 5): tests/python is missing its tests" >&2
fi

BENCH_RC=0
step "bench smoke (fixed + direct, a few seconds each)"
make bench-smoke || BENCH_RC=$?

step "summary"
status() { [ "$1" = 0 ] && echo ok || echo "FAILED (exit $1)"; }
echo "fmt/clippy:  $(status "$LINT_RC")"
echo "cargo test:  $(status "$CARGO_RC")"
echo "pytest:      $(status "$PYTEST_RC")"
echo "bench smoke: $(status "$BENCH_RC")"
if [ "$LINT_RC" != 0 ] || [ "$CARGO_RC" != 0 ] || [ "$PYTEST_RC" != 0 ] || [ "$BENCH_RC" != 0 ]; then
    exit 1
fi
