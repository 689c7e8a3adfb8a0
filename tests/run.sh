#!/usr/bin/env bash
# Build resnorm and run its tests: the README's test command, and what CI runs.
#
#   bash tests/run.sh               # CI: workflow preset "sanitize" (the whole suite with clang
#                                   # -O0 under AddressSanitizer + UBSan, -Werror), then "gcc"
#                                   # (headers, benchmarks and examples built with g++ -O0
#                                   # -Werror, compile-fail tests), then "native" (the SIMD
#                                   # kernels' tests built with clang -O1 -march=native: the
#                                   # AVX2 / AVX-512 paths), then every libFuzzer target
#                                   # exploring RESNORM_FUZZ_SECONDS (default 60) s from its corpus
#   bash tests/run.sh test          # one workflow preset from CMakePresets.json: test (g++ -O1
#                                   # with asserts, -Werror), clang-test, sanitize, gcc, native,
#                                   # examples
#   bash tests/run.sh fuzz          # only the fuzzers (tests/fuzz/run.sh); RESNORM_FUZZ_SECONDS=0
#                                   # replays the committed corpus without exploring
#
# The default run fails if any part fails, but runs every part even when an earlier one failed.
# On Debian/Ubuntu it first installs whatever build dependency is missing (apt, only then).
# Set RESNORM_SKIP_APT=1 to skip that step (other distributions, offline machines).
set -euo pipefail

mode="${1:-ci}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# libclang-rt-14-dev: clang's sanitizer and libFuzzer runtimes (-fsanitize=fuzzer), which
# Debian 12's clang does not pull in; libomp-dev: clang's OpenMP runtime (the sanitize preset
# builds with OpenMP). g++'s sanitizer and OpenMP runtimes come with g++.
packages=(build-essential cmake g++ clang libclang-rt-14-dev libomp-dev libeigen3-dev catch2
          libbenchmark-dev)

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

fuzz_seconds="${RESNORM_FUZZ_SECONDS:-60}"

case "$mode" in
  ci)
    status=0
    start=$SECONDS
    cmake --workflow --preset sanitize || status=1
    cmake --workflow --preset gcc || status=1
    cmake --workflow --preset native || status=1
    suite_seconds=$((SECONDS - start))
    bash tests/fuzz/run.sh "$fuzz_seconds" || status=1
    echo "tests/run.sh: suites ${suite_seconds} s, fuzzers $((SECONDS - start - suite_seconds)) s," \
      "total $((SECONDS - start)) s: $( ((status == 0)) && echo passed || echo FAILED)"
    exit "$status"
    ;;
  fuzz) exec bash tests/fuzz/run.sh "$fuzz_seconds" ;;
  *) exec cmake --workflow --preset "$mode" ;;
esac
