#!/usr/bin/env bash
# Build the examples with the release preset (-O3 -march=native -DNDEBUG), run each one and show
# its output: the `examples` workflow preset, after the same dependency check as tests/run.sh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/tests/run.sh" examples

echo
echo "examples/run.sh: the examples ran in ${root}/build/release/examples"
echo "  (each one's working directory; an example in its own directory, e.g. depth_study,"
echo "  writes into ${root}/build/release/examples/<that directory>)"
