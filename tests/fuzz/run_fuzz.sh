#!/bin/sh
# Build the libFuzzer targets (clang, ASan + UBSan) and run each one for N
# seconds over its seed corpus.
#
#   tests/fuzz/run_fuzz.sh [SECONDS] [BUILD_DIR]     (default 30, build-fuzz)
#
# Target tests/fuzz/fuzz_NAME.c uses the seeds in tests/fuzz/corpus/NAME/
# (read-only); inputs the fuzzer finds go to BUILD_DIR/fuzz-corpus/NAME/ and
# crashes to BUILD_DIR/fuzz-artifacts/. FUZZ_TARGETS="fuzz_gguf ..." limits
# the run; extra libFuzzer flags can be passed in FUZZ_FLAGS.
# Exits non-zero if any target crashed, leaked or timed out.
set -eu

secs=${1:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$root/build-fuzz}

# The library needs coverage instrumentation too (-fsanitize=fuzzer-no-link);
# the fuzz executables get -fsanitize=fuzzer from tests/CMakeLists.txt.
cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFT_FUZZ=ON -DFT_SANITIZE=ON -DFT_TESTS=ON \
    -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null

targets=${FUZZ_TARGETS:-}
if [ -z "$targets" ]; then
    for src in "$root"/tests/fuzz/fuzz_*.c; do
        [ -e "$src" ] || continue
        targets="$targets $(basename "$src" .c)"
    done
fi
[ -n "$targets" ] || { echo "run_fuzz: no fuzz targets" >&2; exit 1; }

# shellcheck disable=SC2086
cmake --build "$build" --target $targets

status=0
for t in $targets; do
    name=${t#fuzz_}
    seeds="$root/tests/fuzz/corpus/$name"
    work="$build/fuzz-corpus/$name"
    arts="$build/fuzz-artifacts"
    mkdir -p "$work" "$arts"
    [ -d "$seeds" ] || { echo "run_fuzz: $t: no seed corpus at $seeds" >&2; seeds=""; }
    echo "== $t: ${secs}s"
    # shellcheck disable=SC2086
    if ! ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
         UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
         "$build/tests/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
             -print_final_stats=1 -artifact_prefix="$arts/$t-" ${FUZZ_FLAGS:-} \
             "$work" $seeds; then
        echo "run_fuzz: $t FAILED (artifacts in $arts)" >&2
        status=1
    fi
done
exit $status
