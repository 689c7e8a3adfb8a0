#!/usr/bin/env bash
# Build the examples with the release preset (-O3 -march=native -DNDEBUG), run each one and show
# its output: the `examples` workflow preset, after the same dependency check as tests/run.sh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/tests/run.sh" examples

echo
echo "examples/run.sh: the worked examples and the depth study ran in ${root}/build/release/examples"
echo "  depth study plots (SVG): ${root}/build/release/examples/depth_study/plots/"
