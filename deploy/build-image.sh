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

  -t, --tag NAME      image to build (default localhost/freetoken/ft:dev)
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
  --print-global-args print the podman options this host needs (put them
                      before the subcommand: podman OPTIONS run ...) and exit
  --print-run-args    print the `podman run` options this host needs and exit
  -h, --help          this text

Without --base: debian:12 if podman has it or can pull it, else the local
base localhost/debian:12 (made from the mirror when missing). The local base
needs root and debootstrap.

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
    --print-global-args) PRINT=global ;;
    --print-run-args) PRINT=run ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build-image.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[ -n "$BASE" ] && [ "$LOCAL_BASE" = yes ] && die "--base and --local-base/--base-only exclude each other"

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
