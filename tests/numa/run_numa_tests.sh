#!/usr/bin/env bash
# NUMA on real kernel topologies (tests/numa/test_numa_vm.py says what is
# checked): qemu-system-x86_64 guests with 2 and 4 NUMA nodes, a CPU-less
# memory node and unequal nodes, running FT_BIN (default build/ft) from an
# initramfs.
#
# The guests boot Debian's own kernel, the one linux-image-amd64 points to:
# its package is downloaded (apt-get download, not installed) into
# $FT_NUMA_CACHE (default ~/.cache/freetoken/numa-vm) and only its vmlinuz
# is unpacked. TCG by default; FT_NUMA_ACCEL=kvm uses KVM where /dev/kvm
# works (on this project's CI machine it is present, but a nested guest
# hangs in early boot, so the default stays TCG).
# Exit status 0 when every test passes.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
FT_BIN=${FT_BIN:-$ROOT/build/ft}
CACHE=${FT_NUMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/freetoken/numa-vm}

for tool in qemu-system-x86_64 cpio busybox; do
  command -v "$tool" >/dev/null || {
    echo "run_numa_tests: $tool not found (apt-get install qemu-system-x86 cpio busybox-static)" >&2; exit 1; }
done
[ -x "$FT_BIN" ] || { echo "run_numa_tests: FT_BIN=$FT_BIN is absent: build ft first" >&2; exit 1; }

PKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
[ -n "$PKG" ] || { echo "run_numa_tests: apt knows no linux-image-amd64 (apt-get update?)" >&2; exit 1; }
KERNEL=$CACHE/${PKG#linux-image-}.vmlinuz
if [ ! -s "$KERNEL" ]; then
  mkdir -p "$CACHE"
  rm -f "$CACHE"/"${PKG}"_*.deb
  (cd "$CACHE" && apt-get download -q "$PKG" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
  dpkg-deb --fsys-tarfile "$CACHE"/"${PKG}"_*.deb | tar -xO --wildcards './boot/vmlinuz-*' >"$KERNEL.tmp"
  mv "$KERNEL.tmp" "$KERNEL"
  rm -f "$CACHE"/"${PKG}"_*.deb
fi

if [ -z "${FT_SHARED_DIR:-}" ]; then
  cmake -DFT="$FT_BIN" -DOUT="$(dirname "$FT_BIN")/test-data" -P tests/data/materialize.cmake >/dev/null
fi
PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || PY=python3
FT_BIN="$FT_BIN" FT_NUMA_KERNEL="$KERNEL" "$PY" -m pytest -q -s -p no:cacheprovider tests/numa/test_numa_vm.py
