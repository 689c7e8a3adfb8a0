#!/usr/bin/env bash
# Builds the libFuzzer targets (clang++, -fsanitize=fuzzer,address,undefined) in their own build
# directory and runs each for a bounded time, starting from the seed corpus in
# tests/fuzz/corpus/<target>/. Exits non-zero if any target crashes or fails a check.
#
#   tests/fuzz/run.sh [seconds per target, default 45] [--strict]
#
# --strict also checks the inputs of the known defects listed in fuzz_common.hpp.
# Environment: RESNORM_FUZZ_BUILD_DIR (default build/fuzz), CXX (default clang++).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
seconds=45
strict=OFF
for arg in "$@"; do
  case "${arg}" in
    --strict) strict=ON ;;
    *[!0-9]* | "") echo "usage: $0 [seconds] [--strict]" >&2; exit 2 ;;
    *) seconds="${arg}" ;;
  esac
done
build="${RESNORM_FUZZ_BUILD_DIR:-${root}/build/fuzz}"

cmake -S "${here}" -B "${build}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
  -DRESNORM_FUZZ_KNOWN_DEFECTS="${strict}" >/dev/null
cmake --build "${build}" -j2

status=0
for target in layer_norm rms_norm gelu add_norm; do
  # New inputs go to a scratch corpus so the committed seeds stay small.
  work="${build}/corpus/${target}"
  mkdir -p "${work}" "${build}/artifacts"
  echo "== resnorm_fuzz_${target}: ${seconds} s"
  if ! "${build}/resnorm_fuzz_${target}" -max_total_time="${seconds}" -print_final_stats=1 \
      -artifact_prefix="${build}/artifacts/${target}-" "${work}" "${here}/corpus/${target}"; then
    echo "!! resnorm_fuzz_${target} failed; reproduce with:" \
         "${build}/resnorm_fuzz_${target} ${build}/artifacts/${target}-*" >&2
    status=1
  fi
done
exit "${status}"
