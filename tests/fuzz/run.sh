#!/usr/bin/env bash
# Builds the libFuzzer targets (clang++, -fsanitize=fuzzer,address,undefined) in their own build
# directory and runs each for a bounded time, starting from the seed corpus in
# tests/fuzz/corpus/<target>/. Exits non-zero if any target crashes or fails a check.
#
#   tests/fuzz/run.sh [seconds per target, default 60]
#   tests/fuzz/run.sh 0        # replay: run every committed seed input once, explore nothing
#
# A failed check saves its input under build/fuzz/artifacts/; build/fuzz/resnorm_fuzz_<target>
# <file> replays it. Once fixed, a find goes into the seed corpus (find_<what>), so CI replays it.
#
# Environment: RESNORM_FUZZ_BUILD_DIR (default build/fuzz), CXX (default clang++).
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

status=0
for target in layer_norm rms_norm gelu add_norm; do
  # New inputs go to a scratch corpus so the committed seeds stay small.
  work="${build}/corpus/${target}"
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
         "${build}/resnorm_fuzz_${target} ${build}/artifacts/${target}-*" >&2
    status=1
  fi
done
exit "${status}"
