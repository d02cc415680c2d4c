#!/usr/bin/env bash
# Build the `ft serve` OCI image (deploy/Containerfile) with podman, also
# where no container registry can be reached.
#
# The Containerfile starts both stages FROM ${BASE} (default debian:12). This
# script uses debian:12 when it is present or can be pulled; otherwise (or
# with --local-base) it makes a Debian 12 base from a Debian mirror with
# debootstrap (minbase), imports it as localhost/debian:12 and builds on it.
# Only the mirror is needed: the build stage's apt-get reaches it too.
#
# It also adds the podman options some hosts need, and prints them
# (--print-global-args, --print-run-args) for `podman run`:
#   - cgroups v1 with a cgroup2 hierarchy beside it ("hybrid"): crun refuses
#     to start containers there, runc does, so `--runtime runc`;
#   - no CAP_SYS_RESOURCE (a hard open-files limit below podman's default
#     1048576): podman's default rlimits cannot be set, so the container gets
#     the caller's hard limit for open files and at most 32768 processes (the
#     limit podman lowers itself to).
# docs/fleet.md tells how the image was built and run on the project's
# machines, and what was measured.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  cat <<'EOF'
usage: deploy/build-image.sh [options]

Builds deploy/Containerfile into an image (podman).

  -t, --tag NAME      image to build (default localhost/freetoken/ft:dev, with
                      --arch arm64 localhost/freetoken/ft:dev-arm64)
  --base IMAGE        build FROM this image; never make a local base
  --local-base        make the local base from the Debian mirror even if
                      debian:12 could be pulled (and remake it if it exists)
  --base-only         make the local base and stop
  --mirror URL        Debian mirror for the local base (default: the one in
                      the host's apt sources, else debootstrap's default)
  --security-mirror URL
                      Debian security archive for the base's apt sources
                      (default: the one in the host's apt sources, else the
                      mirror's URL with -security appended)
  --no-cache          build every step again (no cached layers)
  --arch arm64        build the linux/arm64 image instead, without running any
                      arm64 code: ft cross-compiled for aarch64 and a root
                      filesystem of Debian 12's arm64 packages assembled on
                      this host, imported with podman import --arch arm64
                      (see "linux/arm64" below); --base, --local-base and
                      --no-cache do not apply
  --print-global-args print the podman options this host needs (put them
                      before the subcommand: podman OPTIONS run ...) and exit
  --print-run-args    print the `podman run` options this host needs and exit
  -h, --help          this text

Without --base: debian:12 if podman has it or can pull it, else the local
base localhost/debian:12 (made from the mirror when missing). The local base
needs root and debootstrap.

linux/arm64: scripts/arm64-sysroot.sh assembles (or reuses) the arm64
sysroot ($FT_ARM64_SYSROOT, default build/arm64-sysroot; its .debs are
cached), cmake/aarch64-linux-gnu.cmake cross-builds ft in
$FT_ARM64_BUILD_DIR (default build/arm64, the directory tests/arm/run_arm_ft.sh
uses). The root filesystem holds the Debian packages (dpkg -x, no maintainer
scripts) that own the libraries ft, coreutils and dash need, found by
following NEEDED entries (aarch64-linux-gnu-readelf) from those binaries,
plus coreutils (the Deployment's preStop runs /bin/sleep), dash (/bin/sh),
base-files, /etc/passwd and /etc/group with ft 10001. Same entrypoint,
command, user, volume, port and environment as deploy/Containerfile's image.
Needs gcc-aarch64-linux-gnu, cmake and podman; no binfmt_misc or qemu.

Run the image with the model directory on /models (model.gguf inside):
  podman $(deploy/build-image.sh --print-global-args) run --rm \
    $(deploy/build-image.sh --print-run-args) -p 8080:8080 \
    -v /srv/models:/models:ro localhost/freetoken/ft:dev
EOF
}

die() { echo "build-image.sh: $*" >&2; exit 1; }

TAG=localhost/freetoken/ft:dev
BASE=""
LOCAL_BASE=auto
BASE_ONLY=0
MIRROR=""
SECURITY_MIRROR=""
NO_CACHE=()
PRINT=""
ARCH=""
LOCAL_TAG=localhost/debian:12
SUITE=bookworm

while [ $# -gt 0 ]; do
  case "$1" in
    -t|--tag) TAG=${2:?}; shift ;;
    --base) BASE=${2:?}; shift ;;
    --local-base) LOCAL_BASE=yes ;;
    --base-only) BASE_ONLY=1; LOCAL_BASE=yes ;;
    --mirror) MIRROR=${2:?}; shift ;;
    --security-mirror) SECURITY_MIRROR=${2:?}; shift ;;
    --no-cache) NO_CACHE=(--no-cache) ;;
    --arch) ARCH=${2:?}; shift ;;
    --print-global-args) PRINT=global ;;
    --print-run-args) PRINT=run ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build-image.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[ -n "$BASE" ] && [ "$LOCAL_BASE" = yes ] && die "--base and --local-base/--base-only exclude each other"
case "$ARCH" in
  ""|amd64|x86_64) ARCH="" ;;
  arm64|aarch64) ARCH=arm64
    { [ -z "$BASE" ] && [ "$LOCAL_BASE" = auto ]; } || die "--arch arm64 builds no base: leave out --base, --local-base, --base-only" ;;
  *) die "--arch: amd64 or arm64, not $ARCH" ;;
esac

# ---- the podman options this host needs -------------------------------------

GLOBAL_ARGS=()
RUN_ARGS=()
host_args() {
  if grep -q ' /sys/fs/cgroup/unified cgroup2 ' /proc/mounts \
     && [ "$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>/dev/null)" = crun ]; then
    command -v runc >/dev/null || die "cgroups are hybrid here and crun refuses that: apt-get install runc"
    GLOBAL_ARGS+=(--runtime runc)
  fi
  local nofile nproc
  nofile=$(ulimit -Hn)
  if [ "$nofile" != unlimited ] && [ "$nofile" -lt 1048576 ]; then
    nproc=$(ulimit -Hu)
    if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
    RUN_ARGS+=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
  fi
}

command -v podman >/dev/null || die "needs podman (apt-get install podman)"
host_args
case "$PRINT" in
  global) echo "${GLOBAL_ARGS[*]}"; exit 0 ;;
  run) echo "${RUN_ARGS[*]}"; exit 0 ;;
esac
pm() { podman "${GLOBAL_ARGS[@]}" "$@"; }

# ---- linux/arm64: assembled on this host, no arm64 code run ------------------

# Prints the NEEDED sonames of an ELF file (nothing for other files).
needed() {
  aarch64-linux-gnu-readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'
}

build_arm64() {
  local t0=$SECONDS tool
  for tool in aarch64-linux-gnu-gcc aarch64-linux-gnu-readelf cmake dpkg-deb apt-get; do
    command -v "$tool" >/dev/null || die "--arch arm64 needs $tool (apt-get install gcc-aarch64-linux-gnu cmake)"
  done
  local sysroot=${FT_ARM64_SYSROOT:-$ROOT/build/arm64-sysroot}
  local xbuild=${FT_ARM64_BUILD_DIR:-$ROOT/build/arm64}
  case "$xbuild" in /*) ;; *) xbuild=$ROOT/$xbuild ;; esac
  local debs=${FT_ARM64_DEBS:-${XDG_CACHE_HOME:-$HOME/.cache}/freetoken/arm64-debs}
  "$ROOT/scripts/arm64-sysroot.sh" "$sysroot"

  # ft for aarch64, configured as tests/arm/run_arm_ft.sh does (one build
  # directory serves both).
  echo "build-image.sh: cross-building ft for aarch64 in $xbuild"
  mkdir -p "$(dirname "$xbuild")"
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  if ! (cd "$ROOT" && cmake -S . -B "$xbuild" "${gen[@]}" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" \
          -DFT_ARM64_SYSROOT="$sysroot" -DCMAKE_BUILD_TYPE=Release -DFT_WERROR=ON) >"$xbuild.configure.log" 2>&1 ||
     ! cmake --build "$xbuild" -j "$(nproc)" --target ft >"$xbuild.build.log" 2>&1; then
    cat "$xbuild.configure.log" "$xbuild.build.log" 2>/dev/null | tail -40 >&2
    die "the aarch64 cross build failed"
  fi
  local ft=$xbuild/ft
  [ "$(aarch64-linux-gnu-readelf -h "$ft" | awk '/Machine:/ {print $2}')" = AArch64 ] || die "$ft is not an aarch64 binary"

  # The package pool: the sysroot's packages and those of coreutils, dash and
  # base-files with their library dependencies, each unpacked on its own.
  WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/ft-arm64.XXXXXX")
  local extra=(coreutils dash base-files) p v f
  local want
  want=$( { cat "$sysroot/.packages"
            apt-cache policy $(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                --no-breaks --no-replaces --no-enhances "${extra[@]/%/:arm64}" 2>/dev/null |
              grep -E '^[a-z0-9][^ ]*:arm64$' | sort -u) |
            awk '/^[^ ].*:arm64:$/ {sub(/:arm64:$/, ""); p = $0} /Candidate:/ {print p, $2}'
          } | sort -u)
  local missing=()
  while read -r p v; do
    [ -f "$debs/${p}_${v//:/%3a}_arm64.deb" ] || missing+=("$p:arm64=$v")
  done <<<"$want"
  if [ ${#missing[@]} -gt 0 ]; then
    echo "build-image.sh: downloading ${#missing[@]} arm64 packages into $debs"
    mkdir -p "$debs"
    (cd "$debs" && apt-get download -q "${missing[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
  fi
  local pool=$WORK/pool
  declare -A owner=()   # library file name -> package
  while read -r p v; do
    f="$debs/${p}_${v//:/%3a}_arm64.deb"
    [ -f "$f" ] || die "$f is missing (apt-get download failed?)"
    mkdir -p "$pool/$p"
    dpkg-deb -x "$f" "$pool/$p"
    case "$p" in *-dev) continue ;; esac
    while read -r f; do
      [ -n "${owner[$f]:-}" ] || owner[$f]=$p
    done < <(find "$pool/$p" \( -path '*/lib/aarch64-linux-gnu/*' -o -path '*/lib/ld-linux-aarch64.so.1' \) \
               \( -type f -o -type l \) -printf '%f\n')
  done <<<"$want"

  # The closure: the packages owning every library that ft and the extras'
  # executables need, NEEDED entry by NEEDED entry.
  declare -A keep=() seen=()
  local queue=("$ft") e lib dir
  for p in "${extra[@]}"; do
    keep[$p]=1
    while read -r f; do queue+=("$f"); done < <(find "$pool/$p" -type f -perm -u+x)
  done
  while [ ${#queue[@]} -gt 0 ]; do
    e=${queue[0]}; queue=("${queue[@]:1}")
    for lib in $(needed "$e"); do
      [ -z "${seen[$lib]:-}" ] || continue
      seen[$lib]=1
      p=${owner[$lib]:-}
      [ -n "$p" ] || die "no arm64 package in the pool has $lib (needed by ${e#$WORK/})"
      keep[$p]=1
      for dir in usr/lib/aarch64-linux-gnu lib/aarch64-linux-gnu; do
        [ -e "$pool/$p/$dir/$lib" ] && queue+=("$(readlink -f "$pool/$p/$dir/$lib")") && break
      done
    done
  done
  keep[libc6]=1   # the loader
  local pkgs
  pkgs=$(printf '%s\n' "${!keep[@]}" | sort)
  echo "build-image.sh: arm64 root filesystem from $(echo "$pkgs" | wc -l) packages:" $pkgs

  local r=$WORK/rootfs
  mkdir -p "$r"
  for p in $pkgs; do cp -a "$pool/$p/." "$r/"; done
  # Merged /usr, as Debian 12 installs it.
  for dir in bin sbin lib; do
    if [ -d "$r/$dir" ] && [ ! -L "$r/$dir" ]; then
      mkdir -p "$r/usr/$dir"
      cp -a "$r/$dir/." "$r/usr/$dir/"
      rm -rf "${r:?}/$dir"
    fi
    mkdir -p "$r/usr/$dir"
    ln -s "usr/$dir" "$r/$dir"
  done
  # Relative symlinks: the same target in the container, and under
  # qemu-aarch64 -L ROOTFS on a host.
  find "$r" -type l -lname '/*' | while read -r f; do
    ln -sfn "$(realpath -m --relative-to="$(dirname "$f")" "$r$(readlink "$f")")" "$f"
  done
  install -D -m 0755 "$ft" "$r/usr/local/bin/ft"
  # What the run stage's groupadd/useradd and Debian's base-passwd give.
  mkdir -p "$r/etc"
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'ft:x:10001:10001::/nonexistent:/usr/sbin/nologin' >"$r/etc/passwd"
  printf '%s\n' 'root:x:0:' 'ft:x:10001:' >"$r/etc/group"
  printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$r/etc/nsswitch.conf"
  : >"$r/etc/resolv.conf"
  mkdir -p "$r/tmp" "$r/root" "$r/models" "$r/proc" "$r/sys" "$r/dev" "$r/run" "$r/var/tmp"
  chmod 1777 "$r/tmp" "$r/var/tmp"
  chmod 0700 "$r/root"
  rm -rf "${r:?}/usr/share/man" "${r:?}/usr/share/info"

  local old
  old=$(pm image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
  tar -C "$r" --numeric-owner --owner=0 --group=0 -cf - . \
    | pm import -q --os linux --arch arm64 \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV FT_MODEL=/models/model.gguf' \
        --change 'VOLUME ["/models"]' \
        --change 'USER 10001:10001' \
        --change 'EXPOSE 8080' \
        --change 'ENTRYPOINT ["/usr/local/bin/ft", "serve"]' \
        --change 'CMD ["--host", "0.0.0.0", "--port", "8080", "--metrics-compat", "vllm"]' \
        --change "LABEL org.opencontainers.image.description=FreeToken ft serve, linux/arm64, Debian $SUITE packages (deploy/build-image.sh --arch arm64)" \
        - "$TAG" >/dev/null
  [ -z "$old" ] || [ "$old" = "$(pm image inspect --format '{{.Id}}' "$TAG")" ] || pm rmi "$old" >/dev/null 2>&1 || true
  cleanup
  WORK=""
  local size
  size=$(pm image inspect --format '{{.Size}}' "$TAG")
  echo "build-image.sh: $TAG (linux/arm64) built in $((SECONDS - t0)) s, $((size / 1000000)) MB"
}

# ---- the local Debian 12 base -------------------------------------------------

# The first Debian (or Debian security) archive URI in the host's apt sources
# that is not commented out.
host_uri() {
  local f files=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  { grep -h -v '^[[:space:]]*#' "${files[@]}" \
      | grep -o -E "https?://[^[:space:]]+/$1/?([[:space:]]|\$)" || true; } \
    | head -n 1 | tr -d '[:space:]' | sed 's,/$,,'
}

WORK=""
cleanup() {
  [ -n "$WORK" ] || return 0
  # debootstrap mounts /proc and /sys in the new root; if it stopped half
  # way they are still there, and rm must not walk into them.
  awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" || true
  done
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

make_local_base() {
  [ "$(id -u)" = 0 ] || die "making the base image needs root (debootstrap)"
  command -v debootstrap >/dev/null || die "needs debootstrap (apt-get install debootstrap)"
  [ -n "$MIRROR" ] || MIRROR=$(host_uri debian)
  echo "build-image.sh: making $LOCAL_TAG: debootstrap --variant=minbase $SUITE ${MIRROR:-(its default mirror)}"
  local t0=$SECONDS
  WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/ft-base.XXXXXX")
  local r="$WORK/rootfs"
  # Without a mirror argument debootstrap uses its own default.
  debootstrap --variant=minbase "$SUITE" "$r" ${MIRROR:+"$MIRROR"} >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
  # The mirror debootstrap used is in the sources.list it wrote.
  [ -n "$MIRROR" ] || MIRROR=$(awk '$1 == "deb" { print $2; exit }' "$r/etc/apt/sources.list")
  [ -n "$MIRROR" ] || die "no mirror in the new root's sources.list"
  MIRROR=${MIRROR%/}
  [ -n "$SECURITY_MIRROR" ] || SECURITY_MIRROR=$(host_uri debian-security)
  [ -n "$SECURITY_MIRROR" ] || SECURITY_MIRROR=$MIRROR-security
  # apt sources as in Debian's own image: the release, its updates, security.
  rm -f "$r/etc/apt/sources.list"
  cat >"$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # No package lists, downloaded packages or host files in the image: the
  # runtime provides resolv.conf and the hostname.
  rm -rf "${r:?}"/var/lib/apt/lists/* "${r:?}"/var/cache/apt/*.bin "${r:?}"/var/cache/apt/archives/*.deb \
         "${r:?}"/dev/* "${r:?}"/etc/hostname
  find "$r/var/log" -type f -delete
  : >"$r/etc/resolv.conf"
  # A base made before loses the tag and goes if no image or container uses it.
  local old
  old=$(pm image inspect --format '{{.Id}}' "$LOCAL_TAG" 2>/dev/null || true)
  tar -C "$r" --numeric-owner --xattrs -cf - . \
    | pm import -q \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' \
        --change "LABEL org.opencontainers.image.description=Debian $SUITE minbase from $MIRROR (deploy/build-image.sh)" \
        - "$LOCAL_TAG" >/dev/null
  [ -z "$old" ] || pm rmi "$old" >/dev/null 2>&1 || true
  cleanup
  WORK=""
  echo "build-image.sh: $LOCAL_TAG made in $((SECONDS - t0)) s"
}

if [ "$ARCH" = arm64 ]; then
  [ "$TAG" != localhost/freetoken/ft:dev ] || TAG=localhost/freetoken/ft:dev-arm64
  build_arm64
  exit 0
fi

if [ -z "$BASE" ]; then
  if [ "$LOCAL_BASE" = yes ]; then
    make_local_base
    BASE=$LOCAL_TAG
  elif pm image exists docker.io/library/debian:12 \
       || pm pull -q docker.io/library/debian:12 >/dev/null 2>&1; then
    BASE=docker.io/library/debian:12
  else
    echo "build-image.sh: debian:12 cannot be pulled; using $LOCAL_TAG"
    pm image exists "$LOCAL_TAG" || make_local_base
    BASE=$LOCAL_TAG
  fi
fi
[ "$BASE_ONLY" = 1 ] && exit 0

# ---- the image ---------------------------------------------------------------

echo "build-image.sh: building $TAG from $BASE"
t0=$SECONDS
pm build "${RUN_ARGS[@]}" "${NO_CACHE[@]}" --build-arg "BASE=$BASE" \
  -f "$ROOT/deploy/Containerfile" -t "$TAG" "$ROOT"
size=$(pm image inspect --format '{{.Size}}' "$TAG")
echo "build-image.sh: $TAG built in $((SECONDS - t0)) s, $((size / 1000000)) MB"
