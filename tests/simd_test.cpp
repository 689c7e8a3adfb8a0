// Tests of kernels/simd.hpp's reductions: sum_lanes_each and finish_sums of a group give each
// pack (each row) the bits of sum_lanes on it alone, in the width this file is compiled for and
// in AVX-512's width run through the compiler's generic vector lowering; row_sums' product terms
// are the sums of the products.
#include "resnorm/kernels/simd.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "support/catch.hpp"

namespace {

namespace simd = resnorm::kernels::simd;

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

// Values of both signs over 40 binary orders of magnitude, so that the order of the additions
// shows in the last bits of nearly every sum.
template <class E>
E spread_value(std::mt19937& random) {
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> exponent(-20, 20);
  return static_cast<E>(std::ldexp(normal(random), exponent(random)));
}

template <class E, int N, std::size_t M>
std::array<simd::vec<E, N>, M> spread_vectors(std::mt19937& random) {
  std::array<simd::vec<E, N>, M> v;
  for (auto& p : v) {
    for (int l = 0; l < N; ++l) p[l] = spread_value<E>(random);
  }
  return v;
}

// Packs of sum_lanes_each whose sums differ in bits from sum_lanes, over 50 random draws.
template <class C, std::size_t M>
int sum_lanes_each_mismatches(std::mt19937& random) {
  int mismatches = 0;
  for (int draw = 0; draw < 50; ++draw) {
    const auto packs = spread_vectors<C, simd::width<C>, M>(random);
    const std::array<double, M> each = simd::sum_lanes_each<C>(packs);
    for (std::size_t m = 0; m < M; ++m) {
      if (!same_bits(each[m], simd::sum_lanes<C, simd::width<C>>(packs[m]))) ++mismatches;
    }
  }
  return mismatches;
}

template <class C, std::size_t... M>
int sum_lanes_each_mismatches(std::mt19937& random, std::index_sequence<M...>) {
  return (sum_lanes_each_mismatches<C, M + 1>(random) + ...);
}

}  // namespace

TEMPLATE_TEST_CASE("simd::sum_lanes_each: each pack's sum has the bits of sum_lanes", "[simd]",
                   float, double) {
  std::mt19937 random(7);
  // 1 to 17 packs: fewer than one vector of sums, whole vectors, and padded remainders.
  CHECK(sum_lanes_each_mismatches<TestType>(random, std::make_index_sequence<17>{}) == 0);

  SECTION("a sum is the exact sum when every partial sum is exact") {
    // Small integers: every addition exact in any order, so each sum is known.
    std::array<simd::pack<TestType>, 5> packs;
    for (std::size_t m = 0; m < packs.size(); ++m) {
      for (int l = 0; l < simd::width<TestType>; ++l) {
        packs[m][l] = static_cast<TestType>(static_cast<int>(m) * 100 + l);
      }
    }
    const auto each = simd::sum_lanes_each<TestType>(packs);
    const double w = simd::width<TestType>;
    for (std::size_t m = 0; m < packs.size(); ++m) {
      // Σ_l (100m + l) = 100·m·w + w(w − 1)/2
      CHECK(each[m] == 100.0 * static_cast<double>(m) * w + w * (w - 1) / 2);
    }
  }
}

TEST_CASE("simd::sum_lanes_each: AVX-512's eight doubles per vector keep sum_lanes' bits",
          "[simd]") {
  // The halving steps for n = 8 (two whole-half steps, then the interleaved pair step), run here
  // through the generic lowering of 64-byte vectors whatever the machine: 16 vectors, two of sums.
  std::mt19937 random(11);
  int mismatches = 0;
  for (int draw = 0; draw < 50; ++draw) {
    const auto v = spread_vectors<double, 8, 16>(random);
    const auto sums = simd::halve_down<8, 8>(v);
    for (std::size_t m = 0; m < v.size(); ++m) {
      const int r = static_cast<int>(m % 8);
      const double sum = sums[m / 8][r < 4 ? 2 * r : 2 * (r - 4) + 1];
      // sum_lanes' halving tree on eight lanes, written out.
      const auto& x = v[m];
      const double tree = ((x[0] + x[4]) + (x[2] + x[6])) + ((x[1] + x[5]) + (x[3] + x[7]));
      if (!same_bits(sum, tree)) ++mismatches;
    }
  }
  CHECK(mismatches == 0);
}

TEMPLATE_TEST_CASE("simd::row_sums: a group's finish_sums equals each row's, products included",
                   "[simd]", float, double) {
  using C = TestType;
  std::mt19937 random(3);
  // Lengths with no whole pack, whole packs and a tail, and several rounds of the chains.
  for (const resnorm::index d : {1, 3, 8, 37, 64, 100, 515}) {
    std::vector<C> a(static_cast<std::size_t>(4 * d)), b(a.size());
    for (auto& v : a) v = spread_value<C>(random);
    for (auto& v : b) v = spread_value<C>(random);
    auto partials_of = [&](int r) {
      const C* ar = a.data() + r * d;
      const C* br = b.data() + r * d;
      return simd::row_partial_sums<C, 2>(d, [&](resnorm::index j, auto tag) {
        const auto x = simd::load<C>(ar + j, tag);
        return std::tuple{x, simd::product{x, simd::load<C>(br + j, tag)}};
      });
    };
    const auto group = simd::finish_sums(
        std::array{partials_of(0), partials_of(1), partials_of(2), partials_of(3)});
    for (int r = 0; r < 4; ++r) {
      const auto alone = simd::finish_sums(partials_of(r));
      CHECK(same_bits(group[r][0], alone[0]));
      CHECK(same_bits(group[r][1], alone[1]));
      // Against the sums in long double: within the float (double) rounding of d terms.
      long double sum_a = 0, sum_ab = 0, magnitude_a = 0, magnitude_ab = 0;
      for (resnorm::index j = 0; j < d; ++j) {
        const auto x = static_cast<long double>(a[static_cast<std::size_t>(r * d + j)]);
        const auto y = static_cast<long double>(b[static_cast<std::size_t>(r * d + j)]);
        sum_a += x;
        sum_ab += x * y;
        magnitude_a += std::abs(x);
        magnitude_ab += std::abs(x * y);
      }
      const auto eps = static_cast<double>(std::numeric_limits<C>::epsilon());
      const double bound = 2 * static_cast<double>(d) * eps;
      CHECK(std::abs(alone[0] - static_cast<double>(sum_a)) <=
            bound * static_cast<double>(magnitude_a));
      CHECK(std::abs(alone[1] - static_cast<double>(sum_ab)) <=
            bound * static_cast<double>(magnitude_ab));
    }
  }
}
