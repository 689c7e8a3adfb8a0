#!/usr/bin/env bash
# bench/ab/compare.sh — time one kernel of two versions of resnorm against each other, in one
# process, the two sides alternating every ~2 ms (ab_main.cpp).
#
#   bash bench/ab/compare.sh REV_A REV_B OP TYPE ROWS DIM [SAMPLES]
#   bash bench/ab/compare.sh HEAD~1 HEAD ln_bwd float 8192 64
#   bash bench/ab/compare.sh HEAD . ln_fwd bf16 4096 4096 200    # '.': the working tree
#
# Each side's include/ is taken from a git revision (or the working tree for '.'), compiled with
# the library's namespace renamed, and linked into build/ab/resnorm_ab_<A>_<B> (and
# resnorm_ab_<B>_<A>, the sides swapped) with g++ -O3 -march=native -ffp-contract=off (the flags
# of bench/, without OpenMP: one thread). A / B above 1 means B is faster. The binaries are kept,
# so that a case can be rerun or another one run. RESNORM_AB_STAGGER=0 in the environment puts
# every buffer at page offset 0, as bench/ does (ab_main.cpp).
set -euo pipefail
if (($# < 6)); then
  sed -n 2,14p "$0" >&2
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
# Each revision is built as both side a and side b, and the case runs in both binaries: the side
# a revision sits on (its code's addresses, its statics) can move its time by a few percent on
# its own (up to 5 % on LayerNorm backward 64 x 768), and the geometric mean of the two
# placements cancels that.
side() {  # side(tree name, side letter): the object of one revision compiled as one side
  g++ "${flags[@]}" -I"$out/$1/include" -DRESNORM_AB_SIDE="$2" -Dresnorm="resnorm_$2" \
    -c "$root/bench/ab/ab_variant.cpp" -o "$out/$1.side_$2.o"
}
side "tree_a_$a" a &
pid_1=$!
side "tree_b_$b" b
wait "$pid_1"
side "tree_b_$b" a &
pid_1=$!
side "tree_a_$a" b
g++ -O2 -std=c++20 -c "$root/bench/ab/ab_main.cpp" -o "$out/ab_main.o"
wait "$pid_1"
g++ "$out/ab_main.o" "$out/tree_a_$a.side_a.o" "$out/tree_b_$b.side_b.o" -o "$out/resnorm_ab_${a}_$b"
g++ "$out/ab_main.o" "$out/tree_b_$b.side_a.o" "$out/tree_a_$a.side_b.o" -o "$out/resnorm_ab_${b}_$a"
echo "A = $rev_a, B = $rev_b:"
first="$("$out/resnorm_ab_${a}_$b" "$@")"
echo "$first"
echo "A = $rev_b, B = $rev_a:"
second="$("$out/resnorm_ab_${b}_$a" "$@")"
echo "$second"
awk -v r1="${first##* }" -v r2="${second##* }" -v a="$rev_a" -v b="$rev_b" \
  'BEGIN { printf "%s / %s time, geometric mean of both placements: %.3f (above 1: %s is faster)\n", a, b, sqrt(r1 / r2), b }'
