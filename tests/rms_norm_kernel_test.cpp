// Tests of kernels/rms_norm_kernel.hpp: forward and backward against long-double loops
// (tests/reference/norm_kernel_reference.hpp), saved-stats vs recompute, double arithmetic for
// float storage, and the argument checks.
#include "resnorm/kernels/rms_norm_kernel.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "reference/norm_kernel_reference.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::matrix;
using resnorm::vector;
using resnorm_reference::norm_kind;
using resnorm_test::max_abs;
using resnorm_test::max_abs_diff;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;
using resnorm_test::same_bits;

// Relative tolerance against long double, times max(1, max|reference|): a few roundings per
// output in the compute type plus sums of up to ~4000 terms in 64 float lanes; a wrong term is
// off by O(1). With double arithmetic a float output is rounded once (eps_f/2 = 6e-8).
template <class S>
double tolerance() {
  return std::is_same_v<S, float> ? 4e-6 : 1e-13;
}
constexpr double rounded_once_tolerance = 1.2e-7;

// rstd is computed in the kernel's arithmetic: Σx² summed in float lanes (relative error well
// under 1e-6) or in double.
template <class S>
double stats_tolerance() {
  return std::is_same_v<S, float> ? 1e-6 : 1e-14;
}

const std::vector<Eigen::Index> row_counts = {0, 1, 3, 37};

}  // namespace

TEMPLATE_TEST_CASE("rms_norm kernel forward and vjp: match the long-double loops",
                   "[rms_norm][kernel]", float, double) {
  using S = TestType;
  const double eps = 1e-6;
  for (Eigen::Index rows : row_counts) {
    for (Eigen::Index dim : {1, 2, 5, 17, 300}) {
      for (bool with_gamma : {false, true}) {
        CAPTURE(rows, dim, with_gamma);
        const matrix<S> x = random_matrix<S>(rows, dim, 300 + rows + dim, 1.5, 0.4);
        const matrix<S> dy = random_matrix<S>(rows, dim, 400 + rows + dim);
        const vector<S> gamma = with_gamma ? random_vector<S>(dim, 5, 0.5, 1.0) : vector<S>();
        matrix<S> y(rows, dim), dx(rows, dim);
        vector<double> rstd(rows);
        vector<S> dgamma(dim);
        resnorm::rms_norm_forward_into<S>(x, gamma, eps, y, rstd);
        resnorm::kernels::kernel_workspace ws;
        resnorm::rms_norm_vjp_into<S>(x, dy, gamma, rstd, dx, dgamma, ws);
        const auto ref = resnorm_reference::norm_forward(norm_kind::rms, x, gamma, gamma,
                                                         static_cast<long double>(eps));
        const vector<S> no_beta;
        const auto ref_y = resnorm_reference::norm_forward(norm_kind::rms, x, gamma, no_beta,
                                                           static_cast<long double>(eps));
        const auto ref_g = resnorm_reference::norm_backward(norm_kind::rms, x, dy, gamma,
                                                            static_cast<long double>(eps));
        CHECK(max_abs_diff(y, ref_y.y) <= tolerance<S>() * std::max(1.0, max_abs(ref_y.y)));
        CHECK(max_abs_diff(rstd, ref.rstd) <=
              stats_tolerance<S>() * std::max(1.0, max_abs(ref.rstd)));
        CHECK(max_abs_diff(dx, ref_g.dx) <= tolerance<S>() * std::max(1.0, max_abs(ref_g.dx)));
        CHECK(max_abs_diff(dgamma, ref_g.dgamma) <= tolerance<S>() *
                                                        std::max(1.0, max_abs(ref_g.dgamma)) *
                                                        std::max<Eigen::Index>(rows, 1));

        matrix<S> dx2(rows, dim);
        vector<S> dgamma2(dim);
        resnorm::rms_norm_vjp_recompute_into<S>(x, dy, gamma, eps, dx2, dgamma2, ws);
        CHECK(dx2 == dx);
        CHECK(dgamma2 == dgamma);
      }
    }
  }
}

TEST_CASE("rms_norm kernel: double arithmetic rounds each float output once",
          "[rms_norm][kernel]") {
  const Eigen::Index rows = 5, dim = 777;
  const matrix<float> x = random_matrix<float>(rows, dim, 1, 3.0, 1e3);
  const vector<float> gamma = random_vector<float>(dim, 2, 0.3, 1.0);
  matrix<float> y(rows, dim);
  vector<double> rstd(rows);
  resnorm::rms_norm_forward_into<float, double>(x, gamma, 1e-6, y, rstd);
  const vector<float> no_beta;
  const auto ref = resnorm_reference::norm_forward(norm_kind::rms, x, gamma, no_beta, 1e-6L);
  for (Eigen::Index t = 0; t < rows; ++t) {
    for (Eigen::Index j = 0; j < dim; ++j) {
      const double r = static_cast<double>(ref.y(t, j));
      CHECK(std::abs(static_cast<double>(y(t, j)) - r) <= rounded_once_tolerance * std::abs(r));
    }
  }
}

TEST_CASE("rms_norm kernel: arguments are checked", "[rms_norm][kernel][errors]") {
  const matrix<float> x = matrix<float>::Ones(2, 4);
  matrix<float> y(2, 4);
  vector<double> rstd(3);
  const vector<float> none, gamma(5);
  REQUIRE_THROWS_MATCHES(
      resnorm::rms_norm_forward_into<float>(x, none, 1e-6, y, rstd), std::invalid_argument,
      resnorm_test::message_contains("rms_norm_forward_into: rstd has 3 elements, x has 2 rows"));
  vector<double> rstd2(2);
  REQUIRE_THROWS_MATCHES(resnorm::rms_norm_forward_into<float>(x, gamma, 1e-6, y, rstd2),
                         std::invalid_argument,
                         resnorm_test::message_contains("gamma has 5 elements, x has 4 columns"));
}

// rms_norm_group_moments (8 rows in AVX-512 double lanes, the narrow forward's groups) answers
// as the rows' own rms_norm_moments do: in range only where all 8 rows' Σx² are (finite, and in
// square_range unless eps dominates), and then the same bits of rstd. Σx² drawn from values at
// and around square_range's bound, zeros, NaN and the infinities.
TEMPLATE_TEST_CASE("rms_norm kernel: 8 rows' moments at once equal the rows' own",
                   "[rms_norm][kernel]", float, double) {
#if defined(__AVX512F__)
  namespace k = resnorm::kernels;
  using C = TestType;
  constexpr Eigen::Index d = 64;
  const double bound = k::square_range<C>::min_mean_square * d;
  // Σx² is never negative, but the negations cost nothing and keep the edges symmetric.
  const std::vector<double> sums_xx = resnorm_test::values_around(
      {0.0, 1.0, 64.0, bound, 1e38, 1e300, std::numeric_limits<double>::max()});
  const std::vector<double> epsilons = {0.0, 1e-5, 1e-300, 0x1p-900, 1.0};
  std::mt19937_64 draw(13);
  const double inv_d = 1.0 / static_cast<double>(d);
  resnorm_test::group_tally tally;
  for (int n = 0; n < 100000; ++n) {
    const double eps = resnorm_test::pick(epsilons, draw);
    std::array<std::array<double, 1>, 8> sums;
    const int odd = n % 2 == 0 ? 8 : 1;  // rows drawn; the others ordinary (Σx² = 70)
    for (std::size_t r = 0; r < 8; ++r) {
      sums[r] = {static_cast<int>(r) < odd ? resnorm_test::pick(sums_xx, draw) : 70.0};
    }
    std::shuffle(sums.begin(), sums.end(), draw);
    bool expected = true;
    for (const auto& sum : sums) {
      expected = expected && k::square_range<C>::handles(sum[0], inv_d, eps);
    }
    std::array<double, 8> rstd;
    const bool held = k::rms_norm_group_moments<C>(d, eps, sums, rstd.data());
    bool same = held == expected;
    if (same && held) {
      for (std::size_t r = 0; r < 8; ++r) {
        // In range, rms_norm_moments reads no x.
        const double alone = k::rms_norm_moments<C, C>(nullptr, d, eps, sums[r][0]).rstd;
        same = same && same_bits(&rstd[r], &alone, 1);
      }
    }
    tally.add(same, held);
  }
  resnorm_test::check_group_tally(tally);
#else
  SUCCEED("no AVX-512 in this build: the groups take the rows' own moments");
#endif
}
