// Tests of kernels/layer_norm_kernel.hpp and the layer_norm class routed through it: forward and
// backward against long-double loops (tests/reference/norm_kernel_reference.hpp), the
// large-offset accuracy, the saved-stats and recompute modes, the argument checks, and the
// streamed (non-temporal) row path against the cached one.
#include "resnorm/kernels/layer_norm_kernel.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "reference/norm_kernel_reference.hpp"
#include "resnorm/add_norm.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"
#include "resnorm/layer_norm.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::matrix;
using resnorm::vector;
using resnorm_reference::norm_kind;
using resnorm_test::check_group_tally;
using resnorm_test::group_tally;
using resnorm_test::max_abs;
using resnorm_test::max_abs_diff;
using resnorm_test::pick;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;
using resnorm_test::same_bits;
using resnorm_test::values_around;

// Relative tolerance of the kernels against long double, times max(1, max|reference|): the
// kernel rounds each y (dx) a few times in the compute type and sums up to ~4000 terms in
// 16 lanes of it, a few hundred ulps at worst; a wrong term is off by O(1).
template <class S>
double tolerance() {
  return std::is_same_v<S, float> ? 4e-6 : 1e-13;
}

// The large-offset requirement: float rows x = 1e4 + N(0, 1) keep y and dx within 1e-5 of the
// exact result (a float mean alone would cost ~5e-4).
// The saved statistics are computed in the kernel's arithmetic: float sums of the centred values
// (relative error ~ lanes·eps_f, well under 1e-6) or double ones.
template <class S>
double stats_tolerance() {
  return std::is_same_v<S, float> ? 1e-6 : 1e-14;
}

constexpr double offset_tolerance = 1e-5;

const std::vector<Eigen::Index> row_counts = {0, 1, 3, 37};
const std::vector<Eigen::Index> dims = {1, 2, 5, 17, 1000, 4099};

}  // namespace

TEMPLATE_TEST_CASE("layer_norm kernel forward: matches the long-double loops",
                   "[layer_norm][kernel]", float, double) {
  using S = TestType;
  const double eps = 1e-5;
  for (Eigen::Index rows : row_counts) {
    for (Eigen::Index dim : dims) {
      for (int affine = 0; affine < 3; ++affine) {
        CAPTURE(rows, dim, affine);
        const matrix<S> x = random_matrix<S>(rows, dim, 7 + rows * 31 + dim, 2.0, 0.5);
        const vector<S> gamma = affine >= 1 ? random_vector<S>(dim, 11) : vector<S>();
        const vector<S> beta = affine >= 2 ? random_vector<S>(dim, 12) : vector<S>();
        matrix<S> y(rows, dim);
        vector<double> mean(rows), rstd(rows);
        resnorm::layer_norm_forward_into<S>(x, gamma, beta, eps, y, mean, rstd);
        const auto ref = resnorm_reference::norm_forward(norm_kind::layer, x, gamma, beta,
                                                         static_cast<long double>(eps));
        const double scale = std::max(1.0, max_abs(ref.y));
        CHECK(max_abs_diff(y, ref.y) <= tolerance<S>() * scale);
        // The saved mean, in units of the row's spread (what an error in it does to xhat).
        const vector<double> ref_mean = ref.mean.template cast<double>();
        const vector<double> ref_rstd = ref.rstd.template cast<double>();
        CHECK(max_abs((mean - ref_mean).cwiseProduct(ref_rstd)) <= stats_tolerance<S>());
        CHECK(max_abs_diff(rstd, ref.rstd) <= tolerance<S>() * std::max(1.0, max_abs(ref.rstd)));
      }
    }
  }
}

TEMPLATE_TEST_CASE("layer_norm kernel vjp: matches the long-double Jacobian products",
                   "[layer_norm][kernel][vjp]", float, double) {
  using S = TestType;
  const double eps = 1e-5;
  for (Eigen::Index rows : row_counts) {
    for (Eigen::Index dim :
         {Eigen::Index(1), Eigen::Index(2), Eigen::Index(5), Eigen::Index(17), Eigen::Index(300)}) {
      for (bool with_gamma : {false, true}) {
        CAPTURE(rows, dim, with_gamma);
        const matrix<S> x = random_matrix<S>(rows, dim, 100 + rows + dim, 1.5, -0.25);
        const matrix<S> dy = random_matrix<S>(rows, dim, 200 + rows + dim);
        const vector<S> gamma = with_gamma ? random_vector<S>(dim, 13) : vector<S>();
        matrix<S> y(rows, dim), dx(rows, dim);
        vector<double> mean(rows), rstd(rows);
        vector<S> dgamma(dim), dbeta(dim);
        resnorm::layer_norm_forward_into<S>(x, gamma, vector<S>(), eps, y, mean, rstd);
        resnorm::kernels::kernel_workspace ws;
        resnorm::layer_norm_vjp_into<S>(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, ws);
        const auto ref = resnorm_reference::norm_backward(norm_kind::layer, x, dy, gamma,
                                                          static_cast<long double>(eps));
        CHECK(max_abs_diff(dx, ref.dx) <= tolerance<S>() * std::max(1.0, max_abs(ref.dx)));
        CHECK(max_abs_diff(dgamma, ref.dgamma) <= tolerance<S>() *
                                                      std::max(1.0, max_abs(ref.dgamma)) *
                                                      std::max<Eigen::Index>(rows, 1));
        CHECK(max_abs_diff(dbeta, ref.dbeta) <=
              tolerance<S>() * std::max(1.0, max_abs(ref.dbeta)) * std::max<Eigen::Index>(rows, 1));

        // Recomputing the statistics runs the same row-statistics code: the same bits.
        matrix<S> dx2(rows, dim);
        vector<S> dgamma2(dim), dbeta2(dim);
        resnorm::layer_norm_vjp_recompute_into<S>(x, dy, gamma, eps, dx2, dgamma2, dbeta2, ws);
        CHECK(dx2 == dx);
        CHECK(dgamma2 == dgamma);
        CHECK(dbeta2 == dbeta);
      }
    }
  }
}

TEST_CASE("layer_norm kernel: float rows of large offset keep y and dx to 1e-5",
          "[layer_norm][kernel][accuracy]") {
  for (Eigen::Index dim : {Eigen::Index(64), Eigen::Index(768), Eigen::Index(4096)}) {
    CAPTURE(dim);
    const Eigen::Index rows = 8;
    const matrix<float> x = random_matrix<float>(rows, dim, 5, 1.0, 1e4);
    const matrix<float> dy = random_matrix<float>(rows, dim, 6);
    const vector<float> gamma = random_vector<float>(dim, 7, 0.1, 1.0);
    const vector<float> beta = random_vector<float>(dim, 8);
    matrix<float> y(rows, dim), dx(rows, dim);
    vector<double> mean(rows), rstd(rows);
    vector<float> dgamma(dim), dbeta(dim);
    resnorm::layer_norm_forward_into<float>(x, gamma, beta, 1e-5, y, mean, rstd);
    resnorm::kernels::kernel_workspace ws;
    resnorm::layer_norm_vjp_into<float>(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, ws);
    const auto ref = resnorm_reference::norm_forward(norm_kind::layer, x, gamma, beta, 1e-5L);
    const auto ref_grad = resnorm_reference::norm_backward(norm_kind::layer, x, dy, gamma, 1e-5L);
    CHECK(max_abs_diff(y, ref.y) <= offset_tolerance);
    CHECK(max_abs_diff(dx, ref_grad.dx) <= offset_tolerance);
  }
}

// A float row of one value far from 0 (7.08e25) with an eps below float's normals: var = 0, so
// rstd is up to 1/sqrt(eps) ≈ 1.9e21, and xhat = 0 exactly, so y = β. A row of 13 misses its first
// mean by an ulp (2^63), and (x − hi)·rstd and lo·rstd overflow float to opposite infinities: y was
// NaN (a fuzzer find, tests/fuzz/corpus/layer_norm/find_float_constant_row_tiny_eps_8d0d220c). Such
// rows are redone in double (centred_products_fit). Widths with and without whole packs, rows
// alone and in groups.
TEST_CASE("layer_norm kernel: a constant float row with a tiny eps gives y = beta",
          "[layer_norm][kernel][accuracy]") {
  const float value = 0x1.d4d4d4p+85f;
  for (const double eps : {2.74654e-43, 0x1p-142}) {
    for (const Eigen::Index dim : {Eigen::Index{13}, Eigen::Index{29}, Eigen::Index{61},
                                   Eigen::Index{100}, Eigen::Index{1024}}) {
      CAPTURE(eps, dim);
      const Eigen::Index rows = 9;
      const matrix<float> x = matrix<float>::Constant(rows, dim, value);
      const vector<float> gamma = random_vector<float>(dim, 11, 0.5, 1.0);
      const vector<float> beta = random_vector<float>(dim, 12);
      matrix<float> y(rows, dim);
      vector<double> mean(rows), rstd(rows);
      resnorm::layer_norm_forward_into<float>(x, gamma, beta, eps, y, mean, rstd);
      for (Eigen::Index t = 0; t < rows; ++t) {
        CAPTURE(t);
        CHECK(mean(t) == static_cast<double>(value));
        // var = 0 exactly, or a few roundings of x² where the compiler fuses Σc²/d − δ² (clang):
        // either way the row's scale is no information, and y = β regardless.
        CHECK(std::isfinite(rstd(t)));
        CHECK(rstd(t) > 0);
        CHECK(rstd(t) <= 1.0 / std::sqrt(eps));
        CHECK(same_bits(y.row(t).data(), beta.data(), dim));
      }
    }
  }
}

// Rows just above float's smallest normal, 2^-126 · (1 + k · 2^-23) with k = 0 … 7, whose mean
// falls between floats by less than float's subnormal step: its low part lo, rounded to that step,
// is off by up to 2^-150, a quarter of the spread. With eps = 2^-198, rstd ≈ 2^99, so that
// xhat ≈ 2^-47 and every value and product lies inside the accuracy domain (README). The float
// backward must take such rows in double (float_backward_in_range); in float, dγ = Σ dy·xhat
// carries the centre's error in full (tens of percent). dx does not show it (its xhat·b term
// is 2^-47 below g − a), so dγ is compared relative to its own size.
TEST_CASE("layer_norm kernel: the float backward keeps rows whose mean rounds into subnormals",
          "[layer_norm][kernel][vjp][accuracy]") {
  const double eps = 0x1p-198;
  for (Eigen::Index dim : {Eigen::Index(5), Eigen::Index(64), Eigen::Index(300)}) {
    CAPTURE(dim);
    const Eigen::Index rows = 9;  // two groups of four narrow rows and one alone
    matrix<float> x(rows, dim);
    for (Eigen::Index t = 0; t < rows; ++t) {
      for (Eigen::Index j = 0; j < dim; ++j) {
        x(t, j) = std::ldexp(1.0f + static_cast<float>((t * 5 + j * 3) % 8) * 0x1p-23f, -126);
      }
    }
    const matrix<float> dy = random_matrix<float>(rows, dim, 31);
    const vector<float> gamma = random_vector<float>(dim, 32, 0.25, 1.0);
    matrix<float> y(rows, dim), dx(rows, dim);
    vector<double> mean(rows), rstd(rows);
    vector<float> dgamma(dim), dbeta(dim);
    resnorm::layer_norm_forward_into<float>(x, gamma, vector<float>(), eps, y, mean, rstd);
    REQUIRE(rstd.maxCoeff() <= 0x1p100);  // inside the float backward's range of rstd
    resnorm::kernels::kernel_workspace ws;
    resnorm::layer_norm_vjp_into<float>(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, ws);
    const auto ref = resnorm_reference::norm_backward(norm_kind::layer, x, dy, gamma,
                                                      static_cast<long double>(eps));
    // As ratios, so that a failure prints them (the values themselves are near 2^-47).
    CHECK(max_abs_diff(dx, ref.dx) / max_abs(ref.dx) <= tolerance<float>());
    CHECK(max_abs_diff(dgamma, ref.dgamma) / max_abs(ref.dgamma) <= tolerance<float>());
  }
}

// float_backward_group_in_range (four rows in one test, vectorised with AVX-512) gives the
// answer of float_backward_in_range on each of its rows, on groups drawn from values at and
// around every bound of the range (one ulp either side), zeros of both signs, NaN and the
// infinities: the same answer for every group, including those with one odd row among three
// ordinary ones, at each of the four places.
TEST_CASE("layer_norm kernel: the float backward checks a group's range as row by row",
          "[layer_norm][kernel][vjp]") {
  namespace k = resnorm::kernels;
  // Bounds: |mean| ≤ 2^127 and mean ≥ 2^-102 or held exactly (2^-110 is a float; 2^-110 +
  // 2^-170 leaves a rest below float's subnormals); 2^-100 ≤ rstd ≤ 2^100; sums 0 or in
  // [2^-100, 2^100].
  const std::vector<double> means =
      values_around({0.0, 1.0, 0x1p127, 0x1p-102, 0x1p-110, 0x1p-110 + 0x1p-170, 1e300});
  const std::vector<double> rstds = values_around({0.0, 1.0, 0x1p100, 0x1p-100, 1e-300});
  const std::vector<double> sums = values_around({0.0, 1.0, 0x1p100, 0x1p-100, 1e-40, 3.5});
  struct row {
    k::row_stats s;
    double sum_g, sum_gx;
  };
  auto check = [&](const std::array<row, 4>& rows) {
    std::array<k::row_stats, 4> s;
    std::array<double, 4> sum_g, sum_gx;
    bool expected = true;
    for (int r = 0; r < 4; ++r) {
      s[r] = rows[r].s;
      sum_g[r] = rows[r].sum_g;
      sum_gx[r] = rows[r].sum_gx;
      expected = expected && k::float_backward_in_range(s[r], sum_g[r], sum_gx[r]);
    }
    return k::float_backward_group_in_range(s, sum_g, sum_gx) == expected;
  };
  const row ordinary{{0.5, 2.0}, -1.25, 0.75};
  REQUIRE(k::float_backward_in_range(ordinary.s, ordinary.sum_g, ordinary.sum_gx));
  int mismatches = 0, out_of_range = 0, odd_rows = 0;
  auto with_odd_row = [&](const row& odd) {
    ++odd_rows;
    out_of_range += !k::float_backward_in_range(odd.s, odd.sum_g, odd.sum_gx);
    for (std::size_t place = 0; place < 4; ++place) {
      std::array<row, 4> rows{ordinary, ordinary, ordinary, ordinary};
      rows[place] = odd;
      mismatches += !check(rows);
    }
  };
  for (double mean : means) {
    for (double rstd : rstds) with_odd_row({{mean, rstd}, ordinary.sum_g, ordinary.sum_gx});
  }
  for (double sum_g : sums) {
    for (double sum_gx : sums) with_odd_row({ordinary.s, sum_g, sum_gx});
  }
  // Groups of four rows drawn at random from the same values.
  std::mt19937_64 draw(7);
  for (int n = 0; n < 100000; ++n) {
    std::array<row, 4> rows;
    for (row& r : rows) {
      r = {{pick(means, draw), pick(rstds, draw)}, pick(sums, draw), pick(sums, draw)};
    }
    mismatches += !check(rows);
  }
  CHECK(mismatches == 0);
  // The values reach both answers (a check that cannot fail would not).
  CHECK(out_of_range > 0);
  CHECK(out_of_range < odd_rows);
}

// layer_norm_group_one_pass_moments (8 rows in AVX-512 double lanes, the narrow forward's
// groups) gives, for every group, the answer of layer_norm_one_pass_moments on each row: held
// only where all 8 rows hold, and then the same bits of mean, rstd, hi and lo. The sums are drawn
// from values at and around each test's bound (finite, square range, cancellation, the float
// products' 2^200), zeros, NaN and the infinities, with eps from 0 to past eps_dominates.
TEMPLATE_TEST_CASE("layer_norm kernel: 8 rows' moments at once equal the rows' own",
                   "[layer_norm][kernel][forward]", float, double) {
#if defined(__AVX512F__)
  namespace k = resnorm::kernels;
  using C = TestType;
  constexpr Eigen::Index d = 64;
  const double min_square_sum = k::square_range<C>::min_mean_square * d;
  const std::vector<double> sum_c = values_around({0.0, 1.0, 8.0, 1e30, 1e300, 0x1p-80});
  const std::vector<double> sum_cc =
      values_around({0.0, 1.0, 64.0, 1.0 / 64, min_square_sum, 1e38, 1e300, 0x1p200});
  const std::vector<C> origins = {C(0), C(1), C(-3.5), C(1e20), C(1e-30)};
  const std::vector<double> epsilons = {0.0, 1e-5, 1e-300, 0x1p-900, 1.0};
  std::mt19937_64 draw(11);
  // An ordinary row (held) as the default, so that groups with one odd row are frequent.
  const std::array<double, 2> ordinary{3.0, 70.0};
  group_tally tally;
  for (int n = 0; n < 200000; ++n) {
    const double eps = pick(epsilons, draw);
    std::array<C, 8> origin;
    std::array<std::array<double, 2>, 8> sums;
    const int odd = n % 3 == 0 ? 8 : 1 + n % 3;  // how many rows are drawn, the rest ordinary
    for (std::size_t r = 0; r < 8; ++r) {
      origin[r] = pick(origins, draw);
      sums[r] =
          static_cast<int>(r) < odd ? std::array{pick(sum_c, draw), pick(sum_cc, draw)} : ordinary;
    }
    std::shuffle(sums.begin(), sums.end(), draw);
    bool expected = true;
    std::array<k::layer_norm_moments_t<C>, 8> alone;
    for (std::size_t r = 0; r < 8; ++r) {
      alone[r] = k::layer_norm_one_pass_moments<C>(origin[r], d, eps, sums[r]);
      expected = expected && alone[r].in_range;
    }
    std::array<double, 8> mean, rstd;
    std::array<C, 8> hi, lo;
    const bool held =
        k::layer_norm_group_one_pass_moments<C>(origin, d, eps, sums, mean, rstd, hi, lo);
    bool same = held == expected;
    if (same && held) {
      for (std::size_t r = 0; r < 8; ++r) {
        same = same && same_bits(&mean[r], &alone[r].stats.mean, 1) &&
               same_bits(&rstd[r], &alone[r].stats.rstd, 1) &&
               same_bits(&hi[r], &alone[r].centre.hi, 1) &&
               same_bits(&lo[r], &alone[r].centre.lo, 1);
      }
    }
    tally.add(same, held);
  }
  check_group_tally(tally);
#else
  SUCCEED("no AVX-512 in this build: the groups take the rows' own moments");
#endif
}

// The one-pass moments sum about the mean of a row's first origin_elements values. A row whose
// first values sit far from the rest would cancel in Σc²/d − (Σc/d)² (up to log2(d / head) bits
// of the variance): the pass must refuse it and the two-pass algorithm take the row, so its
// mean and rstd stay as accurate as any other row's.
TEMPLATE_TEST_CASE(
    "layer_norm kernel: a row whose first values sit far from its mean keeps its "
    "moments",
    "[layer_norm][kernel][accuracy]", float, double) {
  using S = TestType;
  namespace k = resnorm::kernels;
  constexpr Eigen::Index head = k::origin_elements<k::compute_t<S>>;
  const double eps = 1e-5;
  // The shortest row 4·head long: where the head is half the row (64 floats on AVX-512), the
  // far half puts (Σc/d)² exactly at var, which the pass may keep (its one-bit bound holds).
  for (Eigen::Index dim : {4 * head, Eigen::Index(1000), Eigen::Index(4096)}) {
    CAPTURE(dim);
    // Row 0: N(0, 1) throughout (the one pass holds it); row 1: its first head values at 1000.
    matrix<S> x = random_matrix<S>(2, dim, 40 + dim);
    x.row(1).head(head).array() += S(1000);
    for (Eigen::Index r = 0; r < 2; ++r) {
      const S* row = x.row(r).data();
      const auto origin = k::layer_norm_origin<k::compute_t<S>>(row, dim);
      const auto one_pass = k::layer_norm_one_pass_moments(
          origin, dim, eps,
          k::simd::finish_sums(k::layer_norm_centred_partials<k::compute_t<S>>(row, dim, origin)));
      CHECK(one_pass.in_range == (r == 0));
    }
    matrix<S> y(2, dim);
    vector<double> mean(2), rstd(2);
    resnorm::layer_norm_forward_into<S>(x, vector<S>(), vector<S>(), eps, y, mean, rstd);
    const auto ref = resnorm_reference::norm_forward(norm_kind::layer, x, vector<S>(), vector<S>(),
                                                     static_cast<long double>(eps));
    for (Eigen::Index r = 0; r < 2; ++r) {
      CAPTURE(r);
      const double ref_rstd = static_cast<double>(ref.rstd(r));
      CHECK(std::abs(rstd(r) - ref_rstd) <= stats_tolerance<S>() * ref_rstd);
      CHECK(std::abs(mean(r) - static_cast<double>(ref.mean(r))) * ref_rstd <=
            stats_tolerance<S>());
    }
    CHECK(max_abs_diff(y, ref.y) <= tolerance<S>() * std::max(1.0, max_abs(ref.y)));
  }
}

TEMPLATE_TEST_CASE("layer_norm class: forward and vjp agree with the _into kernels",
                   "[layer_norm][kernel]", float, double) {
  using S = TestType;
  const Eigen::Index rows = 3, dim = 40;
  resnorm::layer_norm<S> ln(random_vector<S>(dim, 1), random_vector<S>(dim, 2), S(1e-5));
  const matrix<S> x = random_matrix<S>(rows, dim, 3);
  const matrix<S> dy = random_matrix<S>(rows, dim, 4);
  const auto out = ln.forward_with_stats(x);
  CHECK(ln.forward(x) == out.y);
  matrix<S> y(rows, dim);
  ln.forward_into(x, y);
  CHECK(y == out.y);

  const auto saved = ln.vjp(x, dy, out.stats);
  const auto recomputed = ln.vjp(x, dy);
  CHECK(saved.dx == recomputed.dx);
  CHECK(saved.dgamma == recomputed.dgamma);
  CHECK(saved.dbeta == recomputed.dbeta);

  const auto ref = resnorm_reference::norm_backward(norm_kind::layer, x, dy, ln.gamma, 1e-5L);
  CHECK(max_abs_diff(saved.dx, ref.dx) <= tolerance<S>() * std::max(1.0, max_abs(ref.dx)));
  CHECK(max_abs_diff(saved.dbeta, ref.dbeta) <= tolerance<S>() * 4 * max_abs(ref.dbeta));
}

TEST_CASE("layer_norm kernel: arguments are checked", "[layer_norm][kernel][errors]") {
  const matrix<float> x = matrix<float>::Ones(2, 4);
  matrix<float> y(2, 4), bad_y(2, 3);
  vector<double> mean(2), rstd(2), short_stats(1);
  const vector<float> gamma(3), none;
  resnorm::kernels::kernel_workspace ws;
  REQUIRE_THROWS_MATCHES(
      resnorm::layer_norm_forward_into<float>(x, gamma, none, 1e-5, y, mean, rstd),
      std::invalid_argument,
      resnorm_test::message_contains("layer_norm_forward_into: gamma has 3 elements, x has 4"));
  REQUIRE_THROWS_MATCHES(
      resnorm::layer_norm_forward_into<float>(x, none, none, 1e-5, bad_y, mean, rstd),
      std::invalid_argument, resnorm_test::message_contains("y is 2x3, x is 2x4"));
  REQUIRE_THROWS_MATCHES(
      resnorm::layer_norm_forward_into<float>(x, none, none, -1.0, y, mean, rstd),
      std::invalid_argument, resnorm_test::message_contains("eps must be >= 0"));
  vector<float> dg(4), db(4);
  REQUIRE_THROWS_MATCHES(
      resnorm::layer_norm_vjp_into<float>(x, x, none, short_stats, rstd, y, dg, db, ws),
      std::invalid_argument, resnorm_test::message_contains("mean has 1 elements, x has 2 rows"));
}

// Outputs past kernels::streaming_min_bytes are written with non-temporal stores: a scalar head
// until the output is aligned to a stored pack, then whole packs around the cache. No test can
// allocate that much, so the row kernels are called with stream = true directly, on outputs at
// every element offset from a 64-byte boundary (so every head length occurs). Where the results
// are written changes, never their values.
namespace {

const std::vector<Eigen::Index> stream_dims = {1, 5, 37, 1024, 2500};

// Element offsets 0 .. 64 / sizeof(S) − 1 into a buffer: every residue modulo any stored pack.
template <class S>
Eigen::Index stream_offsets() {
  return static_cast<Eigen::Index>(64 / sizeof(S));
}

}  // namespace

TEMPLATE_TEST_CASE("layer_norm and rms_norm kernels: streamed rows equal cached rows bit for bit",
                   "[layer_norm][rms_norm][kernel][stream]", float, double, Eigen::bfloat16) {
  using S = TestType;
  namespace k = resnorm::kernels;
  using P = k::param_t<S>;
  for (const Eigen::Index d : stream_dims) {
    const matrix<float> source = random_matrix<float>(1, d, 90 + d, 2.0, 0.5);
    const matrix<S> x = source.template cast<S>();
    const vector<P> gamma = random_vector<P>(d, 91);
    const vector<P> beta = random_vector<P>(d, 92);
    matrix<S> cached(1, d);
    const k::next_row<S> none{x.data(), cached.data()};
    const k::row_stats a = k::layer_norm_row_forward<k::compute_t<S>, true, true>(
        x.data(), d, gamma.data(), beta.data(), 1e-5, false, cached.data(), none);
    matrix<S> rms_cached(1, d);
    const double ra = k::rms_norm_row_forward<k::compute_t<S>, true>(
        x.data(), d, gamma.data(), 1e-5, false, rms_cached.data(), {x.data(), rms_cached.data()});
    for (Eigen::Index offset = 0; offset < stream_offsets<S>(); ++offset) {
      CAPTURE(d, offset);
      matrix<S> buffer(1, d + stream_offsets<S>());
      S* streamed = buffer.data() + offset;
      const k::row_stats b = k::layer_norm_row_forward<k::compute_t<S>, true, true>(
          x.data(), d, gamma.data(), beta.data(), 1e-5, true, streamed, {x.data(), streamed});
      k::stream_fence();
      CHECK(a.mean == b.mean);
      CHECK(a.rstd == b.rstd);
      CHECK(same_bits(cached.data(), streamed, d));
      const double rb = k::rms_norm_row_forward<k::compute_t<S>, true>(
          x.data(), d, gamma.data(), 1e-5, true, streamed, {x.data(), streamed});
      k::stream_fence();
      CHECK(ra == rb);
      CHECK(same_bits(rms_cached.data(), streamed, d));
    }
  }
}

namespace {

// rows (13 or more) x d rows of N(0.5, 4), but for rows 5 and 9, out of float's square range
// (spread 2e-20, magnitude 2e25), and row 2, whose first 16 elements sit 1000 above the rest
// (its one-pass sums do not hold).
template <class S>
matrix<S> hostile_rows(Eigen::Index rows, Eigen::Index d, std::uint64_t seed) {
  matrix<float> source = random_matrix<float>(rows, d, seed, 2.0, 0.5);
  source.row(5) *= 1e-20f;
  source.row(9) *= 1e25f;
  source.row(2).head(std::min<Eigen::Index>(d, 16)).array() += 1000.0f;
  return source.template cast<S>();
}

}  // namespace

// Narrow rows run in groups (kernels::forward_rows_per_group in the forward,
// kernels::rows_per_group in the backward) and the rows left over, like every wide row, one at a
// time, the forwards with two rows in flight (each row's apply interleaved with the next row's
// sums, layer_norm_rows_overlapped): a row's results must not depend on which. Every row of a
// 13-row matrix (in the forward a group of 8 and 5 single rows, or 13 single wide rows; in the
// backward groups of 4 and a single row) is compared with the same row normalised alone. Rows 5
// and 9 leave float's square range (spread 2e-20, magnitude 2e25), so a float group holding them
// is redone row by row or in double: the other rows of that group keep their bits too. Row 2's
// first elements sit 1000 above the rest, far from its mean, so its one-pass sums do not hold and
// it takes the two-pass moments. The widths reach past group_row_bytes in every type (double past
// 256 elements, float past 512, bf16 past 1024), and 2051 leaves a tail after the whole packs.
TEMPLATE_TEST_CASE("layer_norm and rms_norm kernels: a row gives the same bits in a group as alone",
                   "[layer_norm][rms_norm][kernel]", float, double, Eigen::bfloat16) {
  using S = TestType;
  using P = resnorm::kernels::param_t<S>;
  constexpr Eigen::Index rows = 13;
  const double eps = 1e-5;
  for (const Eigen::Index d : {1, 3, 64, 100, 512, 1100, 2051}) {
    CAPTURE(d);
    const matrix<S> x = hostile_rows<S>(rows, d, 300 + d);
    const matrix<S> dy = random_matrix<float>(rows, d, 400 + d).template cast<S>();
    const vector<P> gamma = random_vector<P>(d, 401);
    const vector<P> beta = random_vector<P>(d, 402);
    resnorm::kernels::kernel_workspace ws;
    vector<P> dgamma(d), dbeta(d);

    matrix<S> y(rows, d), dx(rows, d), dx_recomputed(rows, d), rms_y(rows, d), rms_dx(rows, d);
    vector<double> mean(rows), rstd(rows), rms_rstd(rows);
    resnorm::layer_norm_forward_into<S>(x, gamma, beta, eps, y, mean, rstd);
    resnorm::layer_norm_vjp_into<S>(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, ws);
    resnorm::layer_norm_vjp_recompute_into<S>(x, dy, gamma, eps, dx_recomputed, dgamma, dbeta, ws);
    resnorm::rms_norm_forward_into<S>(x, gamma, eps, rms_y, rms_rstd);
    resnorm::rms_norm_vjp_into<S>(x, dy, gamma, rms_rstd, rms_dx, dgamma, ws);

    for (Eigen::Index t = 0; t < rows; ++t) {
      CAPTURE(t);
      const matrix<S> x1 = x.row(t);
      const matrix<S> dy1 = dy.row(t);
      matrix<S> y1(1, d), dx1(1, d), dx1_recomputed(1, d), rms_y1(1, d), rms_dx1(1, d);
      vector<double> mean1(1), rstd1(1), rms_rstd1(1);
      resnorm::layer_norm_forward_into<S>(x1, gamma, beta, eps, y1, mean1, rstd1);
      resnorm::layer_norm_vjp_into<S>(x1, dy1, gamma, mean1, rstd1, dx1, dgamma, dbeta, ws);
      resnorm::layer_norm_vjp_recompute_into<S>(x1, dy1, gamma, eps, dx1_recomputed, dgamma, dbeta,
                                                ws);
      resnorm::rms_norm_forward_into<S>(x1, gamma, eps, rms_y1, rms_rstd1);
      resnorm::rms_norm_vjp_into<S>(x1, dy1, gamma, rms_rstd1, rms_dx1, dgamma, ws);

      CHECK(same_bits(y.row(t).data(), y1.data(), d));
      CHECK(mean(t) == mean1(0));
      CHECK(rstd(t) == rstd1(0));
      CHECK(same_bits(dx.row(t).data(), dx1.data(), d));
      CHECK(same_bits(dx_recomputed.row(t).data(), dx1_recomputed.data(), d));
      CHECK(same_bits(rms_y.row(t).data(), rms_y1.data(), d));
      CHECK(rms_rstd(t) == rms_rstd1(0));
      CHECK(same_bits(rms_dx.row(t).data(), rms_dx1.data(), d));
    }
  }
}

namespace {

// Rows of y and rms_y (stride elements apart) and their statistics, written by the overlapped
// forwards in arithmetic C, against each row of x through the row forwards alone.
template <class C, class S, class P>
void check_overlapped_rows(const matrix<S>& x, const vector<P>& gamma, const vector<P>& beta,
                           double eps, const S* y, const S* rms_y, Eigen::Index stride,
                           const vector<double>& mean, const vector<double>& rstd,
                           const vector<double>& rms_rstd) {
  namespace k = resnorm::kernels;
  const Eigen::Index d = x.cols();
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    CAPTURE(t);
    matrix<S> y1(1, d), rms_y1(1, d);
    const k::row_stats s =
        k::layer_norm_row_forward<C, true, true>(x.row(t).data(), d, gamma.data(), beta.data(), eps,
                                                 false, y1.data(), {x.row(t).data(), y1.data()});
    const double r =
        k::rms_norm_row_forward<C, true>(x.row(t).data(), d, gamma.data(), eps, false,
                                         rms_y1.data(), {x.row(t).data(), rms_y1.data()});
    CHECK(same_bits(y + t * stride, y1.data(), d));
    CHECK(mean(t) == s.mean);
    CHECK(rstd(t) == s.rstd);
    CHECK(same_bits(rms_y + t * stride, rms_y1.data(), d));
    CHECK(rms_rstd(t) == r);
  }
}

}  // namespace

// The streamed forwards with two rows in flight (layer_norm_rows_overlapped and
// rms_norm_rows_overlapped with Stream, which add_norm_forward_into-sized outputs take where
// their rows start on cache lines): too large to allocate, so they are called directly, on rows
// of y that start on 64-byte lines, against each row normalised alone. The rows of the test
// above: a tiny and a huge row (float redoes them in double), a row whose one pass does not
// hold, widths past a tail.
TEMPLATE_TEST_CASE("layer_norm and rms_norm kernels: streamed overlapped rows equal rows alone",
                   "[layer_norm][rms_norm][kernel][stream]", float, double, Eigen::bfloat16) {
  using S = TestType;
  namespace k = resnorm::kernels;
  using P = k::param_t<S>;
  constexpr Eigen::Index rows = 13;
  constexpr Eigen::Index line = 64 / sizeof(S);
  const double eps = 1e-5;
  // In arithmetic C: compute_t<S>, and double for float storage (a template option of the _into
  // entry points, which also takes this path).
  auto check = [&]<class C>() {
    for (const Eigen::Index d : {1, 3, 64, 100, 512, 1100, 2051}) {
      CAPTURE(d, sizeof(C));
      const matrix<S> x = hostile_rows<S>(rows, d, 500 + d);
      const vector<P> gamma = random_vector<P>(d, 501);
      const vector<P> beta = random_vector<P>(d, 502);
      const Eigen::Index stride = (d + line - 1) / line * line;
      std::vector<S> store(static_cast<std::size_t>(rows * stride + line)), rms_store(store.size());
      S* const y = resnorm_test::first_line_in(store);
      S* const rms_y = resnorm_test::first_line_in(rms_store);
      REQUIRE(k::rows_on_cache_lines(y, stride, rows));
      vector<double> mean(rows), rstd(rows), rms_rstd(rows);
      k::layer_norm_rows_overlapped<C, true, true, true>(
          x.data(), d, y, stride, rows, d, gamma.data(), beta.data(), eps,
          [&](Eigen::Index t, const k::row_stats& s) {
            mean(t) = s.mean;
            rstd(t) = s.rstd;
          });
      k::stream_fence();
      REQUIRE(k::rows_on_cache_lines(rms_y, stride, rows));
      k::rms_norm_rows_overlapped<C, true, true>(
          x.data(), d, rms_y, stride, rows, d, gamma.data(), eps,
          [&](Eigen::Index t, double r) { rms_rstd(t) = r; });
      k::stream_fence();
      check_overlapped_rows<C>(x, gamma, beta, eps, y, rms_y, stride, mean, rstd, rms_rstd);
    }
  };
  check.template operator()<k::compute_t<S>>();
  if constexpr (std::is_same_v<S, float>) check.template operator()<double>();
}

// Where row t of y and row t + 1 of x sit at one offset modulo 4 KiB (both page-aligned, rows
// padded to a multiple of 4 KiB), the overlapped forwards apply each row 2 KiB (or half a row)
// ahead of the next row's sums, wrapping round its whole packs (overlapped_apply_order). Cached
// and streamed, every row must still have the bits of the row alone: widths with and without a
// tail, a row shorter than two packs, rows past 4 KiB.
TEMPLATE_TEST_CASE("layer_norm and rms_norm kernels: overlapped rows a page apart equal rows alone",
                   "[layer_norm][rms_norm][kernel]", float, double, Eigen::bfloat16) {
  using S = TestType;
  namespace k = resnorm::kernels;
  using C = k::compute_t<S>;
  using P = k::param_t<S>;
  constexpr Eigen::Index rows = 13;
  constexpr Eigen::Index page = 4096 / sizeof(S);
  const double eps = 1e-5;
  const auto first_page_in = [](std::vector<S>& buffer) {
    const std::size_t past = reinterpret_cast<std::uintptr_t>(buffer.data()) % 4096;
    return buffer.data() + (4096 - past) % 4096 / sizeof(S);
  };
  for (const Eigen::Index d : {3, 64, 100, 1024, 1100, 2051}) {
    CAPTURE(d);
    const Eigen::Index stride = (d + page - 1) / page * page;
    const matrix<S> x = hostile_rows<S>(rows, d, 600 + d);
    const vector<P> gamma = random_vector<P>(d, 601);
    const vector<P> beta = random_vector<P>(d, 602);
    std::vector<S> x_store(static_cast<std::size_t>(rows * stride + page));
    std::vector<S> y_store(x_store.size()), rms_store(x_store.size());
    S* const xs = first_page_in(x_store);
    for (Eigen::Index t = 0; t < rows; ++t) std::copy_n(x.row(t).data(), d, xs + t * stride);
    const bool shifted =
        k::overlapped_apply_order<C>(first_page_in(y_store), xs + stride, d).shift > 0;
    CHECK(shifted == (d >= 2 * k::simd::width<C>));
    for (const bool stream : {false, true}) {
      CAPTURE(stream);
      S* const y = first_page_in(y_store);
      S* const rms_y = first_page_in(rms_store);
      vector<double> mean(rows), rstd(rows), rms_rstd(rows);
      const auto stats_out = [&](Eigen::Index t, const k::row_stats& st) {
        mean(t) = st.mean;
        rstd(t) = st.rstd;
      };
      const auto rstd_out = [&](Eigen::Index t, double r) { rms_rstd(t) = r; };
      if (stream) {
        k::layer_norm_rows_overlapped<C, true, true, true>(
            xs, stride, y, stride, rows, d, gamma.data(), beta.data(), eps, stats_out);
        k::rms_norm_rows_overlapped<C, true, true>(xs, stride, rms_y, stride, rows, d, gamma.data(),
                                                   eps, rstd_out);
        k::stream_fence();
      } else {
        k::layer_norm_rows_overlapped<C, true, true>(xs, stride, y, stride, rows, d, gamma.data(),
                                                     beta.data(), eps, stats_out);
        k::rms_norm_rows_overlapped<C, true>(xs, stride, rms_y, stride, rows, d, gamma.data(), eps,
                                             rstd_out);
      }
      check_overlapped_rows<C>(x, gamma, beta, eps, y, rms_y, stride, mean, rstd, rms_rstd);
    }
  }
}

// A backward whose x holds kernels::next_vjp_row_min_bytes or more prefetches its next rows and,
// in AVX-512 builds (kernels::streams_vjp_dx), from kernels::streamed_dx_min_bytes() on (16 MiB on
// AMD CPUs, else the same), writes dx with non-temporal stores. Rows 4 KiB
// apart are not paired, so every row takes that path; dx rows start at every offset from a
// cache line (d = 1100, stride d + 3), so every scalar head occurs. Each row of dx must have the
// bits of the same row's backward alone (a 1-row matrix, far below the threshold), for LayerNorm,
// RMSNorm and the fused add + LayerNorm (whose dx adds ds).
TEMPLATE_TEST_CASE(
    "layer_norm, rms_norm and add_norm backward: prefetched, streamed rows equal "
    "rows alone bit for bit",
    "[layer_norm][rms_norm][add_norm][kernel][stream]", float, double, Eigen::bfloat16) {
  using S = TestType;
  namespace k = resnorm::kernels;
  using P = k::param_t<S>;
  using strided = Eigen::OuterStride<>;
  constexpr Eigen::Index d = 1100, dx_stride = d + 3;
  constexpr Eigen::Index x_stride = 4096 / sizeof(S) * ((d * sizeof(S) + 4095) / 4096);
  const std::size_t min_bytes = std::max(k::next_vjp_row_min_bytes, k::streamed_dx_min_bytes());
  const Eigen::Index rows = static_cast<Eigen::Index>(min_bytes / (d * sizeof(S))) + 5;
  REQUIRE(static_cast<std::size_t>(rows * d) * sizeof(S) >= min_bytes);
  REQUIRE(x_stride * sizeof(S) % 4096 == 0);
  std::vector<S> x_store(static_cast<std::size_t>(rows * x_stride));
  Eigen::Map<matrix<S>, 0, strided> x(x_store.data(), rows, d, strided(x_stride));
  x = hostile_rows<S>(rows, d, 610);
  const matrix<S> dy = random_matrix<float>(rows, d, 611).template cast<S>();
  const matrix<S> ds = random_matrix<float>(rows, d, 612).template cast<S>();
  const vector<P> gamma = random_vector<P>(d, 613);
  vector<double> mean(rows), rstd(rows), rms_rstd(rows);
  {
    matrix<S> y(rows, d);
    resnorm::layer_norm_forward_into<S>(x, gamma, vector<P>(), 1e-5, y, mean, rstd);
    resnorm::rms_norm_forward_into<S>(x, gamma, 1e-5, y, rms_rstd);
  }
  std::vector<S> dx_store(static_cast<std::size_t>(rows * dx_stride + 64));
  Eigen::Map<matrix<S>, 0, strided> dx(dx_store.data() + 1, rows, d, strided(dx_stride));
  vector<P> dgamma(d), dbeta(d);
  k::kernel_workspace ws;
  matrix<S> dx1(1, d);
  vector<P> dgamma1(d), dbeta1(d);
  auto each_row_alone = [&](const char* what, const auto& backward_of_row) {
    for (Eigen::Index t = 0; t < rows; ++t) {
      CAPTURE(what, t);
      backward_of_row(t);
      CHECK(same_bits(dx.row(t).data(), dx1.data(), d));
    }
  };
  resnorm::layer_norm_vjp_into<S>(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, ws);
  each_row_alone("layer_norm", [&](Eigen::Index t) {
    resnorm::layer_norm_vjp_into<S>(x.row(t), dy.row(t), gamma, mean.segment(t, 1),
                                    rstd.segment(t, 1), dx1, dgamma1, dbeta1, ws);
  });
  resnorm::rms_norm_vjp_into<S>(x, dy, gamma, rms_rstd, dx, dgamma, ws);
  each_row_alone("rms_norm", [&](Eigen::Index t) {
    resnorm::rms_norm_vjp_into<S>(x.row(t), dy.row(t), gamma, rms_rstd.segment(t, 1), dx1, dgamma1,
                                  ws);
  });
  resnorm::add_norm_vjp_into<S>(resnorm::add_norm_kind::layer_norm, x, ds, dy, gamma, mean, rstd,
                                dx, dgamma, dbeta, ws);
  each_row_alone("add_norm", [&](Eigen::Index t) {
    resnorm::add_norm_vjp_into<S>(resnorm::add_norm_kind::layer_norm, x.row(t), ds.row(t),
                                  dy.row(t), gamma, mean.segment(t, 1), rstd.segment(t, 1), dx1,
                                  dgamma1, dbeta1, ws);
  });
}
