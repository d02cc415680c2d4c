#!/usr/bin/env bash
# The whole FreeToken test suite (what CI runs):
#   1. set-up (scripts/setup.sh: packages, .venv, default model)
#   2. release build with warnings as errors -> C unit tests (ctest)
#   3. AddressSanitizer + UndefinedBehaviorSanitizer build -> the same tests
#   4. end-to-end tests of the ft binary (pytest), incl. the real model, and
#      of the OCI images, amd64 and linux/arm64 (deploy/build-image.sh
#      builds them; the arm64 one without running arm64 code; FT_TEST_IMAGE=0
#      leaves them out)
#   5. the NEON kernels and the whole ft for aarch64 under qemu-aarch64
#      (tests/arm: the kernel tests per level; ft info, logits, serve and
#      the clock against an arm64 sysroot of Debian's libraries)
#   6. NUMA guests (tests/numa: qemu-system-x86_64 with 2 and 4 nodes, a
#      CPU-less memory node, unequal nodes; each --numa mode checked from
#      the guest kernel's /proc accounts)
#   7. a short libFuzzer run of every fuzz target over its seed corpus
# The reference models and tokenizer vectors come from tests/data (ctest's
# test_data fixture and the e2e conftest make BUILD/test-data from it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=$(nproc)
FUZZ_SECONDS=${FT_FUZZ_SECONDS:-20}

step() { printf '\n==== %s\n' "$*"; }

step "set-up"
scripts/setup.sh --no-build

step "release build (-Werror) + unit tests"
cmake -S . -B build/ci-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DFT_WERROR=ON >/dev/null
cmake --build build/ci-release -j "$JOBS"
ctest --test-dir build/ci-release --output-on-failure -j "$JOBS"

step "ASan + UBSan build + unit tests"
cmake -S . -B build/ci-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFT_WERROR=ON -DFT_SANITIZE=ON >/dev/null
cmake --build build/ci-asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/ci-asan --output-on-failure -j "$JOBS"

step "end-to-end tests (pytest)"
FT_BIN="$ROOT/build/ci-release/ft" FT_ASAN_BIN="$ROOT/build/ci-asan/ft" \
  FT_TEST_IMAGE="${FT_TEST_IMAGE:-1}" .venv/bin/python -m pytest -q tests/e2e

step "ARM NEON kernels (cross-compiled, run under qemu-aarch64)"
tests/arm/run_arm_tests.sh

step "the whole ft on aarch64 (arm64 sysroot, cross-compiled, run under qemu-aarch64)"
FT_BIN="$ROOT/build/ci-release/ft" tests/arm/run_arm_ft.sh

step "NUMA on real kernel topologies (qemu-system-x86_64 guests with 2 and 4 nodes)"
FT_BIN="$ROOT/build/ci-release/ft" tests/numa/run_numa_tests.sh

step "fuzzing (${FUZZ_SECONDS}s per target)"
if [ -x tests/fuzz/run_fuzz.sh ]; then
  tests/fuzz/run_fuzz.sh "$FUZZ_SECONDS" build/fuzz
fi

printf '\nall test steps passed\n'
