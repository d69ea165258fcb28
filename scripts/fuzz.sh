#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time and prints how many executions ran.
#
#   scripts/fuzz.sh [TARGET...]        (default: framing_handshake tracker)
#
# FUZZ_SECONDS (default 60) per target; FUZZ_JOBS (default 1) parallel libFuzzer jobs.
# Only a stable toolchain is assumed: cargo-fuzz needs nightly-only flags
# (-Zsanitizer=address), which RUSTC_BOOTSTRAP=1 unlocks on stable.
# The corpus grows in fuzz/corpus/<target>/ (git-ignored), seeded from fuzz/seeds/<target>/
# (committed, built by scripts/fuzz-seeds.py from real captured traffic).
# A crash leaves its input in fuzz/artifacts/<target>/ and makes this script fail.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"
SECONDS_EACH="${FUZZ_SECONDS:-60}"
TARGETS=("$@")
[ "${#TARGETS[@]}" -gt 0 ] || TARGETS=(framing_handshake tracker)
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

rc=0
summary=()
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    cp -n "seeds/$t"/* "corpus/$t/" 2>/dev/null || true
    log="artifacts/$t/last-run.log"
    echo "==> fuzz $t for ${SECONDS_EACH}s (log: fuzz/$log)"
    set +e
    cargo fuzz run "$t" "corpus/$t" -- \
        -max_total_time="$SECONDS_EACH" -print_final_stats=1 -max_len=65536 \
        ${JOBS_ARGS[@]+"${JOBS_ARGS[@]}"} 2>&1 | tee "$log" | grep -E "^(#[0-9]+ +(INITED|DONE)|Done|==[0-9]+==ERROR|SUMMARY|stat::number_of_executed_units)" || true
    status=${PIPESTATUS[0]}
    set -e
    runs=$(grep -E "^stat::number_of_executed_units" "$log" | awk '{s+=$2} END {print s+0}')
    crashes=$(find "artifacts/$t" -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) | wc -l)
    if [ "$status" != 0 ] || [ "$crashes" != 0 ]; then
        rc=1
        summary+=("$t: FAILED (exit $status, $crashes crash/oom/timeout inputs in fuzz/artifacts/$t) after $runs executions")
    else
        summary+=("$t: $runs executions in ${SECONDS_EACH}s, 0 failures, corpus $(ls "corpus/$t" | wc -l) inputs")
    fi
done
echo
echo "==> fuzz summary"
printf '%s\n' "${summary[@]}"
exit "$rc"
