#!/usr/bin/env bash
# Long fuzzing: every libFuzzer target (tests/fuzz/fuzz_*.c) until it has run
# RUNS inputs or SECONDS have passed, whichever comes first, with the same
# sanitizers and corpora as the short CI run (tests/fuzz/run_fuzz.sh). Prints
# one Markdown table row per target — executions, wall and CPU seconds,
# executions per CPU second,
# coverage (edges), features, corpus size, crashes — to paste into
# docs/fuzzing.md, and keeps the grown corpora for the next run.
#
#   scripts/fuzz-long.sh [SECONDS] [RUNS] [BUILD_DIR]    (default 3600 10000000 build/fuzz)
#   FUZZ_TARGETS="fuzz_http fuzz_gguf" scripts/fuzz-long.sh 600
#   FUZZ_JOBS=2 scripts/fuzz-long.sh ...   # targets run this many at a time
#   FUZZ_TIMEOUT=60 scripts/fuzz-long.sh ... # per-input limit, wall seconds
#
# libFuzzer's per-input timeout is wall time: on a machine busy with other
# work a niced fuzzer can be starved past it, so raise FUZZ_TIMEOUT there
# (a real hang still stops the run).
#
# Exit status 1 if any target crashed, leaked or timed out (its input is in
# BUILD_DIR/fuzz-artifacts/).
set -euo pipefail
secs=${1:-3600}
runs=${2:-10000000}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${3:-$root/build/fuzz}
jobs=${FUZZ_JOBS:-1}
timeout=${FUZZ_TIMEOUT:-10}

# Build (and check every target once) through the short runner: 1 second each.
mkdir -p "$build"
if ! FUZZ_FLAGS="-runs=1" "$root/tests/fuzz/run_fuzz.sh" 1 "$build" >"$build/fuzz-long-build.log" 2>&1; then
    tail -30 "$build/fuzz-long-build.log" >&2
    echo "fuzz-long: building or checking the targets failed" >&2
    exit 1
fi

targets=${FUZZ_TARGETS:-}
if [ -z "$targets" ]; then
    for src in "$root"/tests/fuzz/fuzz_*.c; do targets="$targets $(basename "$src" .c)"; done
fi

logs="$build/fuzz-long"
mkdir -p "$logs" "$build/fuzz-artifacts"
run_one() {
    local t=$1 name=${1#fuzz_}
    local seeds="$root/tests/fuzz/corpus/$name" work="$build/fuzz-corpus/$name"
    mkdir -p "$work"
    [ -d "$seeds" ] || seeds=""
    local start=$SECONDS rc=0
    # shellcheck disable=SC2086
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        "$build/tests/$t" -max_total_time="$secs" -runs="$runs" -timeout="$timeout" -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" "$work" $seeds \
        >"$logs/$t.log" 2>&1 || rc=$?
    # CPU seconds of the fuzzer (the children of this background subshell):
    # on a shared machine wall time overstates how long a target really ran.
    # (times itself runs here: inside $(...) it would count that subshell's.)
    local cpu
    times >"$logs/$t.times"
    cpu=$(tail -1 "$logs/$t.times" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/);
                                 printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
    echo "$rc $((SECONDS - start)) $cpu" >"$logs/$t.status"
}

running=0
for t in $targets; do
    run_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait

status=0
echo "| target | executions | seconds | CPU seconds | exec/CPU s | coverage (edges) | features | corpus | crashes |"
echo "|---|---|---|---|---|---|---|---|---|"
for t in $targets; do
    read -r rc took cpu <"$logs/$t.status"
    log="$logs/$t.log"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | grep -E 'cov: ' | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
    crashes=0
    if [ "$rc" != 0 ]; then
        crashes=1
        status=1
    fi
    cpu=${cpu:-$took}
    rate=$(( ${execs:-0} / (cpu > 0 ? cpu : 1) ))
    echo "| $t | ${execs:-?} | $took | $cpu | $rate | ${cov:-?} | ${ft:-?} | ${corp:-?} | $crashes |"
done
exit $status
