#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time and prints how many executions ran.
#
#   scripts/fuzz.sh [TARGET...]        (default: framing_handshake tracker compress lexer ok_packet)
#
# FUZZ_SECONDS (default 60) per target; FUZZ_JOBS (default 1) parallel libFuzzer jobs.
# Only a stable toolchain is assumed: cargo-fuzz needs nightly-only flags
# (-Zsanitizer=address), which RUSTC_BOOTSTRAP=1 unlocks on stable.
# The corpus grows in fuzz/corpus/<target>/ (git-ignored), seeded from fuzz/seeds/<target>/
# (committed, built by scripts/fuzz-seeds.py from real captured traffic).
# Fails when a target does not build, when libFuzzer exits non-zero, when a crash/oom/timeout/
# leak input is in fuzz/artifacts/<target>/ (a new one, or an old one nobody removed), and when
# a run reports zero executions. A crash leaves its input in fuzz/artifacts/<target>/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"
SECONDS_EACH="${FUZZ_SECONDS:-60}"
TARGETS=("$@")
[ "${#TARGETS[@]}" -gt 0 ] || TARGETS=(framing_handshake tracker compress lexer ok_packet)
export RUSTC_BOOTSTRAP=1
export PATH="$HOME/.cargo/bin:$PATH"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz is not installed; run: cargo install cargo-fuzz" >&2
    exit 1
fi

JOBS_ARGS=()
if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then
    # Parallel jobs write fuzz-N.log in the working directory (git-ignored).
    JOBS_ARGS=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
fi

# Sums libFuzzer's final "stat::number_of_executed_units: N" lines in the given files (missing
# files are skipped). No such line counts as zero executions.
executions() {
    local f n s=0
    for f in "$@"; do
        [ -f "$f" ] || continue
        n=$(awk '/^stat::number_of_executed_units:/ { s += $2 } END { print s + 0 }' "$f")
        s=$((s + n))
    done
    echo "$s"
}

rc=0
summary=()
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    cp -n "seeds/$t"/* "corpus/$t/" 2>/dev/null || true
    log="artifacts/$t/last-run.log"
    rm -f fuzz-*.log

    # Build first, on its own: a target that does not compile is a failure, not "0 crashes".
    echo "==> build $t"
    if ! cargo fuzz build "$t"; then
        rc=1
        summary+=("$t: FAILED (cargo fuzz build failed; nothing was fuzzed)")
        continue
    fi

    echo "==> fuzz $t for ${SECONDS_EACH}s (log: fuzz/$log)"
    # Only libFuzzer's progress lines reach the terminal; the whole output is in $log. The
    # exit status is libFuzzer's (PIPESTATUS[0], read before anything else runs): grep exits 1
    # when nothing matched, which is not a failure of the run.
    set +e
    cargo fuzz run "$t" "corpus/$t" -- \
        -max_total_time="$SECONDS_EACH" -print_final_stats=1 -max_len=65536 \
        ${JOBS_ARGS[@]+"${JOBS_ARGS[@]}"} 2>&1 | tee "$log" |
        grep -E "^(#[0-9]+ +(INITED|DONE)|Done|==[0-9]+==ERROR|SUMMARY|stat::number_of_executed_units)"
    status=${PIPESTATUS[0]}
    set -e
    # With jobs, each job's stats are in its fuzz-N.log, and libFuzzer also echoes those logs
    # into its own output at the end: count the job logs only, or every run twice.
    if [ "${#JOBS_ARGS[@]}" -gt 0 ]; then
        runs=$(executions fuzz-*.log)
    else
        runs=$(executions "$log")
    fi
    crashes=$(find "artifacts/$t" -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) | wc -l)
    if [ "$status" != 0 ] || [ "$crashes" != 0 ]; then
        rc=1
        summary+=("$t: FAILED (exit $status, $crashes crash/oom/timeout/leak inputs in fuzz/artifacts/$t) after $runs executions")
    elif [ "$runs" = 0 ]; then
        rc=1
        summary+=("$t: FAILED (libFuzzer exited 0 but reported no executions; see fuzz/$log)")
    else
        summary+=("$t: $runs executions in ${SECONDS_EACH}s ($((runs / (SECONDS_EACH > 0 ? SECONDS_EACH : 1)))/s), 0 failures, corpus $(find "corpus/$t" -type f | wc -l) inputs")
    fi
done
echo
echo "==> fuzz summary"
printf '%s\n' "${summary[@]}"
exit "$rc"
