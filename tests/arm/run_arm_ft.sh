#!/usr/bin/env bash
# The whole ft on aarch64, under qemu-user (tests/arm/test_ft_aarch64.py says
# what is checked): assembles the arm64 sysroot of Debian's libraries
# (scripts/arm64-sysroot.sh; the .debs are cached), cross-builds ft and
# test_clock against it with cmake/aarch64-linux-gnu.cmake, and runs the
# tests under qemu-aarch64 -L SYSROOT.
#
# FT_BIN names the x86 build (default build/ft): its test-data directory
# holds the reference models (made from tests/data when absent; or set
# FT_SHARED_DIR), and the aarch64 reference kernels must print its bytes.
# Build directory: $FT_ARM64_BUILD_DIR (default build/arm64); sysroot:
# $FT_ARM64_SYSROOT (default build/arm64-sysroot). Exit status 0 when every
# test passes.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${FT_ARM64_BUILD_DIR:-build/arm64}
SYSROOT=${FT_ARM64_SYSROOT:-$ROOT/build/arm64-sysroot}
FT_BIN=${FT_BIN:-$ROOT/build/ft}

for tool in aarch64-linux-gnu-gcc qemu-aarch64 cmake; do
  command -v "$tool" >/dev/null || {
    echo "run_arm_ft: $tool not found (apt-get install gcc-aarch64-linux-gnu qemu-user)" >&2; exit 1; }
done
scripts/arm64-sysroot.sh "$SYSROOT"

mkdir -p "$(dirname "$BUILD")"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if ! cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" \
      -DFT_ARM64_SYSROOT="$SYSROOT" -DCMAKE_BUILD_TYPE=Release -DFT_WERROR=ON >"$BUILD.configure.log" 2>&1 ||
   ! cmake --build "$BUILD" -j "$(nproc)" --target ft test_clock >"$BUILD.build.log" 2>&1; then
  cat "$BUILD.configure.log" "$BUILD.build.log" 2>/dev/null | tail -40 >&2
  echo "run_arm_ft: cross build failed" >&2
  exit 1
fi

if [ -z "${FT_SHARED_DIR:-}" ]; then
  [ -x "$FT_BIN" ] || { echo "run_arm_ft: FT_BIN=$FT_BIN is absent: build the x86 ft first" >&2; exit 1; }
  cmake -DFT="$FT_BIN" -DOUT="$(dirname "$FT_BIN")/test-data" -P tests/data/materialize.cmake >/dev/null
fi
PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || PY=python3
FT_BIN="$FT_BIN" FT_ARM64_BIN="$ROOT/$BUILD/ft" FT_ARM64_SYSROOT="$SYSROOT" \
  FT_ARM64_TEST_CLOCK="$ROOT/$BUILD/tests/test_clock" "$PY" -m pytest -q -p no:cacheprovider tests/arm/test_ft_aarch64.py
