#!/usr/bin/env bash
# The NEON kernels on aarch64, under qemu-user (docs/conventions.md, Kernels).
#
# Cross-compiles simd/, tests/unit/test_simd_kernels.c, test_float_kernels.c,
# test_qgemm.c, test_ops_ref.c and test_attention.c (with the engine's
# attention on a plain pthread pool: tests/arm/CMakeLists.txt says why) with
# aarch64-linux-gnu-gcc (static, so qemu-aarch64 needs no sysroot) through
# tests/arm/CMakeLists.txt + cmake/aarch64-linux-gnu.cmake, then runs the
# kernel tests (test_simd_kernels, test_float_kernels, test_qgemm) once per
# kernel level with FT_ISA forcing it:
#   scalar, neon, neon-dotprod,  on qemu's "max" CPU (has dotprod and i8mm),
#   neon-i8mm                    where auto must pick neon-i8mm
#   neon-dotprod                 on a Cortex-A76 (dotprod, no i8mm), where
#                                neon-i8mm must be refused with a message
#                                and auto must fall back to neon-dotprod
#   neon                         on a Cortex-A53 (no dotprod), where
#                                neon-dotprod must be refused, auto -> neon
# test_qgemm (the GEMM): neon-dotprod and neon-i8mm have one for every
# quantized type, neon and scalar none. test_float_kernels (the float ops:
# GEMM, attention, row ops, which the neon level has and the others
# inherit) runs per level on "max" and for neon on the Cortex-A53 too, so an
# instruction past ARMv8.0 in them would fault; test_attention (the engine's
# threaded attention, split-KV on and off) goes through every level in one
# run on "max", and runs neon alone on the Cortex-A53; test_ops_ref (the
# references against hand-worked values) once.
# Exit status 0 when every run passes; the last line is a pytest-like
# summary. Build directory: $FT_ARM_BUILD_DIR (default build/arm).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${FT_ARM_BUILD_DIR:-build/arm}
START=$(date +%s%N)
elapsed() { local ms=$((($(date +%s%N) - START) / 1000000)); printf '%d.%02d' $((ms / 1000)) $((ms % 1000 / 10)); }

for tool in aarch64-linux-gnu-gcc qemu-aarch64 cmake; do
  if ! command -v "$tool" >/dev/null; then
    echo "run_arm_tests: $tool not found (apt-get install gcc-aarch64-linux-gnu qemu-user)" >&2
    echo "==== 1 failed in $(elapsed)s ===="
    exit 1
  fi
done

mkdir -p "$(dirname "$BUILD")"   # the configure log sits beside the build directory
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if ! cmake -S tests/arm -B "$BUILD" "${GEN[@]}" -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
      -DCMAKE_BUILD_TYPE=Release -DFT_WERROR=ON >"$BUILD.configure.log" 2>&1 ||
   ! cmake --build "$BUILD" -j "$(nproc)" >"$BUILD.build.log" 2>&1; then
  cat "$BUILD.configure.log" "$BUILD.build.log" 2>/dev/null | tail -40 >&2
  echo "run_arm_tests: cross build failed" >&2
  echo "==== 1 failed in $(elapsed)s ===="
  exit 1
fi

TEST="$BUILD/test_simd_kernels"
passed=0
failed=0
run() { # name, qemu cpu, FT_ISA, expected line in the output[, test binary]
  local name=$1 cpu=$2 isa=$3 expect=$4 test=${5:-$TEST} out rc
  out=$(FT_ISA=$isa qemu-aarch64 -cpu "$cpu" "$test" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -q -- "$expect" <<<"$out"; then
    passed=$((passed + 1))
    printf 'PASSED %s\n' "$name"
  else
    failed=$((failed + 1))
    printf 'FAILED %s (exit %d)\n' "$name" "$rc"
    tail -25 <<<"$out" | sed 's/^/    /'
  fi
}

SIMD="$TEST"
FLOAT="$BUILD/test_float_kernels"
QG="$BUILD/test_qgemm"
ATTN="$BUILD/test_attention"
# qemu "max": every level runs, auto is the best
run "auto picks neon-i8mm on qemu max" max       auto         "kernels: neon-i8mm (best neon-i8mm)"
for isa in neon-i8mm neon-dotprod neon scalar; do
  run "$isa on qemu max"             max        $isa         "level $isa  *ok" "$SIMD"
  # the float ops (GEMM, attention, row ops): neon's kernels on the NEON levels
  run "float ops, $isa"              max        $isa         "level $isa  *ok  (gemm: $([ $isa = scalar ] && echo none || echo yes)" "$FLOAT"
done
run "attention, every level on max"  max        auto         "level neon-i8mm  *ok" "$ATTN"
run "reference ops on qemu max"      max        auto         "test_ops_ref: .* checks passed" "$BUILD/test_ops_ref"
run "gemm neon-i8mm on qemu max"     max        neon-i8mm    "level neon-i8mm  *13 GEMM types" "$QG"
run "gemm neon-dotprod on qemu max"  max        neon-dotprod "level neon-dotprod  *13 GEMM types" "$QG"
run "no gemm for neon on qemu max"   max        neon         "level neon  *0 GEMM types" "$QG"
run "no gemm for scalar on qemu max" max        scalar       "level scalar  *0 GEMM types" "$QG"
# Cortex-A76: dotprod without i8mm
run "auto picks neon-dotprod on a76" cortex-a76 auto         "kernels: neon-dotprod (best neon-dotprod)"
run "neon-i8mm refused on a76"       cortex-a76 neon-i8mm    "refused: FT_ISA=neon-i8mm: this CPU cannot run it"
run "neon-dotprod on a76"            cortex-a76 neon-dotprod "level neon-dotprod  *ok"
run "gemm neon-dotprod on a76"       cortex-a76 neon-dotprod "level neon-dotprod  *13 GEMM types" "$QG"
run "gemm neon-i8mm refused on a76"  cortex-a76 neon-i8mm    "refused: FT_ISA=neon-i8mm: this CPU cannot run it" "$QG"
# Cortex-A53: ARMv8.0, no dotprod
run "auto picks neon on cortex-a53"  cortex-a53 auto         "kernels: neon (best neon)"
run "float ops, neon on a53"         cortex-a53 neon         "level neon  *ok  (gemm: yes" "$FLOAT"
run "attention, neon on a53"         cortex-a53 neon         "level neon  *ok" "$ATTN"
run "neon-dotprod refused on a53"    cortex-a53 neon-dotprod "refused: FT_ISA=neon-dotprod: this CPU cannot run it"
run "neon-i8mm refused on a53"       cortex-a53 neon-i8mm    "refused: FT_ISA=neon-i8mm: this CPU cannot run it"

if [ $failed -eq 0 ]; then
  printf '==== %d passed in %ss ====\n' "$passed" "$(elapsed)"
  exit 0
fi
printf '==== %d failed, %d passed in %ss ====\n' "$failed" "$passed" "$(elapsed)"
exit 1
