#!/usr/bin/env bash
# Build resnorm and run its tests: the README's test command, and what CI runs.
#
#   bash tests/run.sh               # CI: workflow preset "test" (the whole suite, g++ -O1 with
#                                   # asserts, -Werror, examples included), then "sanitize-kernels"
#                                   # (the kernels' tests under AddressSanitizer + UBSan), then every
#                                   # libFuzzer target over its committed seed corpus (replay;
#                                   # RESNORM_FUZZ_SECONDS=60 explores for 60 s per target instead)
#   bash tests/run.sh test          # one workflow preset from CMakePresets.json: test (g++, -O1
#                                   # with asserts, -Werror), clang-test, sanitize, examples
#   bash tests/run.sh fuzz          # only the fuzzers, exploring RESNORM_FUZZ_SECONDS (default
#                                   # 60) s per target (tests/fuzz/run.sh)
#
# The default run fails if either part fails, but runs the fuzzers even when the suite failed.
# On Debian/Ubuntu it first installs whatever build dependency is missing (apt, only then).
# Set RESNORM_SKIP_APT=1 to skip that step (other distributions, offline machines).
set -euo pipefail

mode="${1:-ci}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# libclang-rt-14-dev: clang's sanitizer and libFuzzer runtimes (-fsanitize=fuzzer), which
# Debian 12's clang does not pull in. g++'s ASan/UBSan runtimes come with g++.
packages=(build-essential cmake g++ clang libclang-rt-14-dev libeigen3-dev catch2 libbenchmark-dev)

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

# CI replays the seed corpus (every earlier find is in it) rather than exploring: exploration
# still finds open accuracy cases at extreme magnitudes (tests/fuzz/open/), and a CI run must
# not pass or fail by chance.
ci_fuzz_seconds="${RESNORM_FUZZ_SECONDS:-0}"
fuzz_seconds="${RESNORM_FUZZ_SECONDS:-60}"

case "$mode" in
  ci)
    status=0
    start=$SECONDS
    # The whole suite once (plain), then the kernels' tests again under ASan + UBSan: the whole
    # sanitized suite takes about 30 minutes on 2 cores (bash tests/run.sh sanitize runs it).
    cmake --workflow --preset test || status=1
    cmake --workflow --preset sanitize-kernels || status=1
    suite_seconds=$((SECONDS - start))
    bash tests/fuzz/run.sh "$ci_fuzz_seconds" || status=1
    echo "tests/run.sh: suites ${suite_seconds} s, fuzzers $((SECONDS - start - suite_seconds)) s," \
      "total $((SECONDS - start)) s: $( ((status == 0)) && echo passed || echo FAILED)"
    exit "$status"
    ;;
  fuzz) exec bash tests/fuzz/run.sh "$fuzz_seconds" ;;
  *) exec cmake --workflow --preset "$mode" ;;
esac
