#!/usr/bin/env bash
# Builds the libFuzzer targets (clang++, -fsanitize=fuzzer,address,undefined) in their own build
# directory and runs each for a bounded time (as many at once as there are cores), starting from
# the seed corpus in tests/fuzz/corpus/<target>/. Exits non-zero if any target crashes or fails a
# check.
#
#   tests/fuzz/run.sh [seconds per target, default 60]
#   tests/fuzz/run.sh 0        # replay: run every committed seed input once, explore nothing
#
# A failed check saves its input under build/fuzz/artifacts/; build/fuzz/resnorm_fuzz_<target>
# <file> replays it. Once fixed, a find goes into the seed corpus (find_<what>), so CI replays it.
#
# Environment: RESNORM_FUZZ_BUILD_DIR (default build/fuzz), CXX (default clang++),
# RESNORM_FUZZ_JOBS (targets at once; default nproc).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
seconds=60
for arg in "$@"; do
  case "${arg}" in
    *[!0-9]* | "") echo "usage: $0 [seconds]" >&2; exit 2 ;;
    *) seconds="${arg}" ;;
  esac
done
build="${RESNORM_FUZZ_BUILD_DIR:-${root}/build/fuzz}"

cmake -S "${here}" -B "${build}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" >/dev/null
cmake --build "${build}" -j2

targets=(layer_norm rms_norm gelu add_norm)
# As many targets at once as the machine has cores (RESNORM_FUZZ_JOBS to choose): each explores
# on a core of its own for the same time, and CI waits half as long on 2 cores. Each target's
# output goes to build/fuzz/<target>.log, printed whole when all are done.
jobs_at_once="${RESNORM_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}"

fuzz_one() {  # fuzz_one <target>: runs one target; fails if it crashed or failed a check
  local target=$1 run
  # New inputs go to a scratch corpus so the committed seeds stay small.
  local work="${build}/corpus/${target}"
  mkdir -p "${work}" "${build}/artifacts"
  if ((seconds == 0)); then
    echo "== resnorm_fuzz_${target}: replaying tests/fuzz/corpus/${target}"
    run=("${build}/resnorm_fuzz_${target}" -runs=0 "${here}/corpus/${target}")
  else
    echo "== resnorm_fuzz_${target}: ${seconds} s"
    run=("${build}/resnorm_fuzz_${target}" -max_total_time="${seconds}" -print_final_stats=1
         "${work}" "${here}/corpus/${target}")
  fi
  if ! "${run[@]}" -artifact_prefix="${build}/artifacts/${target}-"; then
    echo "!! resnorm_fuzz_${target} failed; reproduce with:" \
         "${build}/resnorm_fuzz_${target} ${build}/artifacts/${target}-*"
    return 1
  fi
}

status=0
running=0
for target in "${targets[@]}"; do
  if ((running >= jobs_at_once)); then
    wait -n || status=1
    running=$((running - 1))
  fi
  fuzz_one "${target}" >"${build}/${target}.log" 2>&1 &
  running=$((running + 1))
done
while ((running > 0)); do
  wait -n || status=1
  running=$((running - 1))
done
for target in "${targets[@]}"; do
  cat "${build}/${target}.log"
done
if ((status != 0)); then
  echo "!! a fuzz target failed: see its lines starting with !! above" >&2
fi
exit "${status}"
