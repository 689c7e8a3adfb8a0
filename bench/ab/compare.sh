#!/usr/bin/env bash
# bench/ab/compare.sh — time one kernel of two versions of resnorm against each other, in one
# process, the two sides alternating every ~2 ms (ab_main.cpp).
#
#   bash bench/ab/compare.sh REV_A REV_B OP TYPE ROWS DIM [SAMPLES]
#   bash bench/ab/compare.sh HEAD~1 HEAD ln_bwd float 8192 64
#   bash bench/ab/compare.sh HEAD . ln_fwd bf16 4096 4096 200    # '.': the working tree
#
# Each side's include/ is taken from a git revision (or the working tree for '.'), compiled with
# the library's namespace renamed, and linked into build/ab/resnorm_ab_<A>_<B> with g++ -O3
# -march=native -ffp-contract=off (the flags of bench/, without OpenMP: one thread). A / B above
# 1 means B is faster. The binary is kept, so that a case can be rerun or another one run.
set -euo pipefail
if (($# < 6)); then
  sed -n 2,13p "$0" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rev_a=$1 rev_b=$2
shift 2
out="$root/build/ab"
mkdir -p "$out"
tree_of() {  # the include/ tree of a revision, exported under $out/<name>
  local rev=$1 dir=$2
  rm -rf "$dir"
  mkdir -p "$dir"
  if [[ "$rev" == "." ]]; then
    cp -r "$root/include" "$dir/"
  else
    git -C "$root" archive "$rev" include | tar -x -C "$dir"
  fi
}
name() { tr -c 'A-Za-z0-9\n' '_' <<<"$1"; }
a="$(name "$rev_a")" b="$(name "$rev_b")"
tree_of "$rev_a" "$out/tree_a_$a"
tree_of "$rev_b" "$out/tree_b_$b"
flags=(-O3 -DNDEBUG -march=native -ffp-contract=off -std=c++20 -isystem /usr/include/eigen3)
g++ "${flags[@]}" -I"$out/tree_a_$a/include" -DRESNORM_AB_SIDE=a -Dresnorm=resnorm_a \
  -c "$root/bench/ab/ab_variant.cpp" -o "$out/side_a_$a.o" &
pid_a=$!
g++ "${flags[@]}" -I"$out/tree_b_$b/include" -DRESNORM_AB_SIDE=b -Dresnorm=resnorm_b \
  -c "$root/bench/ab/ab_variant.cpp" -o "$out/side_b_$b.o" &
pid_b=$!
g++ -O2 -std=c++20 -c "$root/bench/ab/ab_main.cpp" -o "$out/ab_main.o"
wait "$pid_a"
wait "$pid_b"
g++ "$out/ab_main.o" "$out/side_a_$a.o" "$out/side_b_$b.o" -o "$out/resnorm_ab_${a}_$b"
"$out/resnorm_ab_${a}_$b" "$@"
