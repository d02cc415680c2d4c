#!/usr/bin/env bash
# An arm64 sysroot with FreeToken's libraries, for the aarch64 cross build
# (cmake/aarch64-linux-gnu.cmake with FT_ARM64_SYSROOT) and for running the
# result under qemu-aarch64 (-L SYSROOT).
#
# Debian 12 has every dependency built for arm64, but libevent-dev and
# libdnnl are not Multi-Arch: same, so installing them as :arm64 would
# remove the host's amd64 ones. Instead the .debs are downloaded
# (apt-get download, cached in $FT_ARM64_DEBS, default
# ~/.cache/freetoken/arm64-debs) and unpacked with dpkg -x into the
# sysroot; the host's packages are not touched. The packages: the -dev
# packages the build links (and those their pkg-config files require), the
# runtime libraries with their library dependencies, and libc.
#
# usage: scripts/arm64-sysroot.sh [SYSROOT]   (default build/arm64-sysroot)
# Idempotent: a sysroot whose stamp lists the same packages is kept.
# Needs root (or sudo) once, to add the arm64 architecture to apt.
set -euo pipefail
cd "$(dirname "$0")/.."
SYSROOT=${1:-build/arm64-sysroot}
DEBS=${FT_ARM64_DEBS:-${XDG_CACHE_HOME:-$HOME/.cache}/freetoken/arm64-debs}

# What the build links (CMakeLists.txt, cmake/FtDependencies.cmake), with
# the -dev packages named in the Requires.private of libzmq.pc and of the
# .pc files it names (pkg-config checks them even for a shared link).
DEV=(libc6-dev linux-libc-dev libhwloc-dev libevent-dev libcjson-dev libdnnl-dev libzmq3-dev
     libmsgpack-dev libkrb5-dev krb5-multidev comerr-dev libsodium-dev libpgm-dev libnorm-dev
     libbsd-dev libmd-dev libudev-dev libxml2-dev)
# The runtime libraries; their library dependencies are added below.
LIBS=(libc6 libgcc-s1 libstdc++6 libgomp1 libhwloc15 libevent-2.1-7 libevent-core-2.1-7
      libevent-pthreads-2.1-7 libcjson1 libdnnl2 libzmq5 libmsgpackc2)

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "arm64-sysroot: adding the arm64 architecture to apt (packages are only downloaded)"
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -q
fi
if ! apt-cache show libc6:arm64 >/dev/null 2>&1; then
  $SUDO apt-get update -q
fi

# The closure of the runtime libraries, arm64 packages only (the arch: all
# ones are data, not libraries).
mapfile -t CLOSURE < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${LIBS[@]/%/:arm64}" 2>/dev/null |
  grep -E '^[a-z0-9][^ ]*:arm64$' | sed 's/:arm64$//' | sort -u)
PKGS=($(printf '%s\n' "${DEV[@]}" "${CLOSURE[@]}" | sort -u))
# The stamp names each package with its candidate version, so an update of
# any of them rebuilds the sysroot.
WANT=$(apt-cache policy "${PKGS[@]/%/:arm64}" |
  awk '/^[^ ].*:arm64:$/ {sub(/:arm64:$/, ""); p = $0} /Candidate:/ {print p, $2}' | sort)
if [ -f "$SYSROOT/.packages" ] && [ "$(cat "$SYSROOT/.packages")" = "$WANT" ]; then
  echo "arm64-sysroot: $SYSROOT is up to date (${#PKGS[@]} packages)"
  exit 0
fi

mkdir -p "$DEBS"
missing=()
while read -r p v; do
  ls "$DEBS/${p}_${v//:/%3a}_arm64.deb" >/dev/null 2>&1 || missing+=("$p:arm64=$v")
done <<<"$WANT"
if [ ${#missing[@]} -gt 0 ]; then
  echo "arm64-sysroot: downloading ${#missing[@]} packages into $DEBS"
  (cd "$DEBS" && apt-get download -q "${missing[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
fi

rm -rf "$SYSROOT.tmp"
mkdir -p "$SYSROOT.tmp"
while read -r p v; do
  f="$DEBS/${p}_${v//:/%3a}_arm64.deb"
  [ -f "$f" ] || { echo "arm64-sysroot: $f is missing (apt-get download failed?)" >&2; exit 1; }
  dpkg -x "$f" "$SYSROOT.tmp"
done <<<"$WANT"
# Debian 12 is merged-/usr on the host, but the packages still ship
# /lib/aarch64-linux-gnu and /lib/ld-linux-aarch64.so.1: make /lib and
# /usr/lib one tree, as on an arm64 system, so the linker and qemu's -L
# find the loader and the libraries wherever a package put them.
for d in lib; do
  if [ -d "$SYSROOT.tmp/$d" ] && [ ! -L "$SYSROOT.tmp/$d" ]; then
    cp -a "$SYSROOT.tmp/$d/." "$SYSROOT.tmp/usr/$d/"
    rm -rf "${SYSROOT:?}.tmp/$d"
  fi
  ln -s "usr/$d" "$SYSROOT.tmp/$d"
done
# Absolute symlinks (libfoo.so -> /lib/aarch64-linux-gnu/libfoo.so.1)
# would point into the host: make them relative to the sysroot.
find "$SYSROOT.tmp" -type l -lname '/*' | while read -r l; do
  t=$(readlink "$l")
  ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$SYSROOT.tmp$t")" "$l"
done
printf '%s\n' "$WANT" >"$SYSROOT.tmp/.packages"
rm -rf "$SYSROOT"
mv "$SYSROOT.tmp" "$SYSROOT"
echo "arm64-sysroot: $SYSROOT ready (${#PKGS[@]} packages)"
