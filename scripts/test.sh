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
# How long each step took, for the summary: make test has a 15-minute budget in CI, and this
# says where it goes (pytest also lists its slowest tests).
took() {
    local s=$((SECONDS - $1))
    printf '%dm%02ds' $((s / 60)) $((s % 60))
}

step "ensure-deps"
scripts/ensure-deps.sh

step "cargo build"
T=$SECONDS
cargo build
BUILD_TOOK=$(took "$T")

STARTED_SANDBOX=0
cleanup() {
    local rc=$?
    if [ "$STARTED_SANDBOX" = 1 ]; then
        step "stopping the MariaDB sandbox"
        "$SANDBOX" stop "$SANDBOX_DIR" "$SANDBOX_PORT" || true
    fi
    [ -z "${LOGS:-}" ] || rm -rf "$LOGS"
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
step "cargo fmt --check, clippy, and the docs' references"
T=$SECONDS
# ensure-deps.sh installed rustfmt and clippy (or failed): never skip the lint. Without them
# these commands fail, and the summary says FAILED.
cargo fmt --all -- --check || LINT_RC=$?
cargo clippy --workspace --all-targets -- -D warnings || LINT_RC=$?
# Every file, test and link the docs and comments name exists (moves and renames leave none stale).
scripts/check-doc-refs.sh || LINT_RC=$?
LINT_TOOK=$(took "$T")

# Each step's output is also kept in LOGS, so that the summary can say how many tests ran:
# a step that exits 0 having run no test (a CARGO_TEST_ARGS filter that matches nothing, every
# pytest test skipped) is reported as FAILED, never as ok.
LOGS="$(mktemp -d)"

CARGO_RC=0
step "cargo test"
T=$SECONDS
set +e
# --no-fail-fast: one failing test binary must not hide the suites after it
# (cargo stops at the first by default, and the summary would count only
# what ran). The exit status still fails the step.
# shellcheck disable=SC2086
cargo test --no-fail-fast ${CARGO_TEST_ARGS:-} 2>&1 | tee "$LOGS/cargo-test.log"
CARGO_RC=${PIPESTATUS[0]}
set -e
CARGO_TOOK=$(took "$T")
# "test result: ok. 12 passed; 0 failed; 1 ignored; ..." once per test binary.
CARGO_COUNTS=$(awk '/^test result:/ {
        for (i = 1; i <= NF; i++) {
            if ($(i) ~ /^passed;?$/) p += $(i - 1)
            if ($(i) ~ /^failed;?$/) f += $(i - 1)
            if ($(i) ~ /^ignored;?$/) g += $(i - 1)
        }
    } END { printf "%d passed, %d failed, %d ignored", p, f, g }' "$LOGS/cargo-test.log")
if [ "$CARGO_RC" = 0 ] && [ "${CARGO_COUNTS%% *}" = 0 ]; then
    echo "cargo test exited 0 but ran no test" >&2
    CARGO_RC=no-tests
fi

PYTEST_RC=0
step "pytest tests/python"
T=$SECONDS
set +e
# The cluster tests need the replication set: make test-cluster runs them.
# shellcheck disable=SC2086
python3 -m pytest tests/python -q -rs --durations=20 --ignore-glob='*test_cluster_*.py' ${PYTEST_ARGS:-} 2>&1 | tee "$LOGS/pytest.log"
PYTEST_RC=${PIPESTATUS[0]}
set -e
PYTEST_TOOK=$(took "$T")
# pytest's closing line, e.g. "42 passed, 2 skipped in 31.20s" (counts only, no timing).
PYTEST_COUNTS=$(tail -n 1 "$LOGS/pytest.log" | sed -E 's/^=+ //; s/ in [0-9.]+s.*$//')
if [ "$PYTEST_RC" = 5 ]; then
    echo "pytest collected no tests (exit 5): tests/python is missing its tests" >&2
elif [ "$PYTEST_RC" = 0 ] && ! grep -Eq '(^| )[1-9][0-9]* passed' <<<"$PYTEST_COUNTS"; then
    echo "pytest exited 0 but passed no test: $PYTEST_COUNTS" >&2
    PYTEST_RC=no-tests
elif [ "$PYTEST_RC" = 0 ] && grep -Eq '(^| )[1-9][0-9]* skipped' <<<"$PYTEST_COUNTS"; then
    # make test installs everything the suite uses, so a skipped test checked nothing on a
    # machine where it should have: it fails the step (pytest -rs names the skips above).
    echo "pytest skipped tests: $PYTEST_COUNTS" >&2
    PYTEST_RC=skipped
fi

BENCH_RC=0
step "bench smoke (fixed + direct, a few seconds each)"
T=$SECONDS
set +e
make bench-smoke 2>&1 | tee "$LOGS/bench-smoke.log"
BENCH_RC=${PIPESTATUS[0]}
set -e
BENCH_TOOK=$(took "$T")
# Its closing line: "bench-smoke: 6 passed, 0 failed" (the smoke fails itself when it ran none).
BENCH_COUNTS=$(sed -n 's/^bench-smoke: //p' "$LOGS/bench-smoke.log" | tail -n 1)

step "summary"
# ok only for a step that ran and passed; the counts say how much it ran.
status() {
    case "$1" in
    0) echo "ok${2:+ ($2)}" ;;
    no-tests) echo "FAILED (ran no test${2:+: $2})" ;;
    skipped) echo "FAILED (tests skipped${2:+: $2})" ;;
    *) echo "FAILED (exit $1${2:+; $2})" ;;
    esac
}
echo "fmt/clippy:  $(status "$LINT_RC") [$LINT_TOOK]"
echo "cargo test:  $(status "$CARGO_RC" "$CARGO_COUNTS") [$CARGO_TOOK]"
echo "pytest:      $(status "$PYTEST_RC" "$PYTEST_COUNTS") [$PYTEST_TOOK]"
echo "bench smoke: $(status "$BENCH_RC" "$BENCH_COUNTS") [$BENCH_TOOK]"
echo "time:        cargo build $BUILD_TOOK, whole run $(took 0)"
if [ "$LINT_RC" != 0 ] || [ "$CARGO_RC" != 0 ] || [ "$PYTEST_RC" != 0 ] || [ "$BENCH_RC" != 0 ]; then
    exit 1
fi
