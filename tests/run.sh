#!/usr/bin/env bash
# Build resnorm and run its tests: the README's test command, and what CI runs.
#
#   bash tests/run.sh               # workflow preset "test": g++, -O1 with asserts, -Werror
#   bash tests/run.sh clang-test    # any workflow preset from CMakePresets.json
#
# On Debian/Ubuntu it first installs whatever build dependency is missing (apt, only then).
# Set RESNORM_SKIP_APT=1 to skip that step (other distributions, offline machines).
set -euo pipefail

preset="${1:-test}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(build-essential cmake g++ clang libeigen3-dev catch2 libbenchmark-dev)

install_missing_packages() {
  if [[ "${RESNORM_SKIP_APT:-0}" == 1 ]] || ! command -v dpkg >/dev/null 2>&1; then
    return 0
  fi
  local missing=() p
  for p in "${packages[@]}"; do
    # dpkg -s also succeeds for removed packages whose config files remain: check the status.
    if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
      missing+=("$p")
    fi
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  echo "tests/run.sh: installing missing packages: ${missing[*]}"
  local sudo=()
  if ((EUID != 0)); then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "tests/run.sh: not root and no sudo; install these first: ${missing[*]}" >&2
      exit 1
    fi
  fi
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
}

install_missing_packages

# Build presets leave the job count to the build tool; make would otherwise build serially.
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"

cmake --workflow --preset "$preset"
