// Tests for resnorm/rms_norm.hpp: y = gamma ⊙ x / sqrt(mean(x²) + eps) and its derivatives.
#include "resnorm/rms_norm.hpp"

#include <Eigen/SVD>
#include <cmath>

#include "resnorm/finite_difference.hpp"
#include "resnorm/random.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::matrix;
using resnorm::vector;
using resnorm_test::max_abs;
using resnorm_test::max_rel_diff;
using resnorm_test::vec;

// Tolerances, in one place.
// Central differences in double, step cbrt(eps) ≈ 6e-6: error ~eps^(2/3) ≈ 4e-11 relative to the
// O(1) entries (rows of unit scale); 1e-6 is the spec's bound and far below any wrong term.
constexpr double fd_rel_tol = 1e-6;
// vjp/jvp against the explicit Jacobian: both accumulate in double, a few ulps apart.
constexpr double consistency_tol_double = 1e-13;
// float: the results are rounded once from double: a few float ulps of O(1) values.
constexpr double consistency_tol_float = 2e-6;

template <class S>
double tolerance() {
  return std::is_same_v<S, float> ? consistency_tol_float : consistency_tol_double;
}

template <class S>
resnorm::rms_norm<S> random_rms_norm(resnorm::index dim, resnorm::normal_generator& rng) {
  const matrix<S> g = resnorm::random_normal<S>(dim, 1, rng, 0.5, 1.0);
  return resnorm::rms_norm<S>(vector<S>(g), S(1e-5));
}

}  // namespace

TEST_CASE("rms_norm forward: matches the definition computed by hand", "[rms_norm][forward]") {
  // x = [1, 2, 3, 4]: mean(x²) = 30/4 = 7.5.
  matrix<double> x(1, 4);
  x << 1, 2, 3, 4;
  vector<double> gamma(4);
  gamma << 1.0, -2.0, 0.5, 3.0;
  const double eps = 1e-5;
  const resnorm::rms_norm<double> f(gamma, eps);
  const auto out = f.forward_with_stats(x);
  const double rstd = 1.0 / std::sqrt(7.5 + eps);
  CHECK(out.rstd[0] == Approx(rstd).epsilon(1e-15));
  for (resnorm::index j = 0; j < 4; ++j) {
    CAPTURE(j);
    CHECK(out.y(0, j) == Approx(gamma[j] * x(0, j) * rstd).epsilon(1e-15));
  }
  // Without gamma the output row has root mean square sqrt(7.5 / (7.5 + eps)).
  const matrix<double> y = resnorm::rms_norm<double>(4, eps, false).forward(x);
  CHECK(std::sqrt(y.squaredNorm() / 4) == Approx(std::sqrt(7.5 / (7.5 + eps))).epsilon(1e-15));
}

TEST_CASE("rms_norm jacobian: matches finite differences", "[rms_norm][jacobian]") {
  resnorm::normal_generator rng(41);
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const resnorm::index dim : {1, 2, 8}) {
      CAPTURE(rows, dim);
      const auto f = random_rms_norm<double>(dim, rng);
      const matrix<double> x = resnorm::random_normal<double>(rows, dim, rng);
      const auto check = resnorm::check_jacobian(f, x);
      INFO(check.describe());
      CHECK(check.max_rel_error <= fd_rel_tol);
    }
  }
}

TEMPLATE_TEST_CASE("rms_norm vjp and jvp: agree with the explicit Jacobian", "[rms_norm][vjp][jvp]",
                   float, double) {
  resnorm::normal_generator rng(42);
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const resnorm::index dim : {1, 2, 8}) {
      CAPTURE(rows, dim);
      const auto f = random_rms_norm<TestType>(dim, rng);
      const matrix<TestType> x = resnorm::random_normal<TestType>(rows, dim, rng);
      const matrix<TestType> u = resnorm::random_normal<TestType>(rows, dim, rng);
      const matrix<TestType> v = resnorm::random_normal<TestType>(rows, dim, rng);
      const matrix<TestType> J = f.jacobian(x);
      const auto grad = f.vjp(x, u);
      const matrix<TestType> jv = f.jvp(x, v);
      CHECK(max_abs((vec(grad.dx) - J.transpose() * vec(u)).eval()) <= tolerance<TestType>());
      CHECK(max_abs((vec(jv) - J * vec(v)).eval()) <= tolerance<TestType>());
      const double lhs = u.template cast<double>().cwiseProduct(jv.template cast<double>()).sum();
      const double rhs =
          grad.dx.template cast<double>().cwiseProduct(v.template cast<double>()).sum();
      CHECK(lhs == Approx(rhs).margin(10 * tolerance<TestType>()));
      // The saved-statistics overload gives the same result bit for bit.
      const auto saved = f.vjp(x, u, f.forward_with_stats(x).rstd);
      CHECK((saved.dx.array() == grad.dx.array()).all());
    }
  }
}

TEST_CASE("rms_norm vjp: dgamma matches finite differences", "[rms_norm][vjp][parameters]") {
  resnorm::normal_generator rng(43);
  const auto f = random_rms_norm<double>(5, rng);
  const matrix<double> x = resnorm::random_normal<double>(3, 5, rng);
  const matrix<double> u = resnorm::random_normal<double>(3, 5, rng);
  const auto fd = resnorm::finite_difference_gradient(
      [&](const vector<double>& g) {
        return u.cwiseProduct(resnorm::rms_norm<double>(g, f.eps).forward(x)).sum();
      },
      f.gamma);
  CHECK(max_rel_diff(f.vjp(x, u).dgamma, fd) <= fd_rel_tol);
}

TEST_CASE("rms_norm jacobian: singular values are rstd and eps·rstd³", "[rms_norm][jacobian]") {
  // gamma = 1: J = rstd (I − xhat xhatᵀ/d) has eigenvalue rstd on x⊥ and
  // rstd (1 − |xhat|²/d) = rstd · eps · rstd² along x, since |xhat|²/d = ms · rstd².
  resnorm::normal_generator rng(44);
  const double eps = 0.1;  // large enough that the small singular value is well resolved
  const matrix<double> x = resnorm::random_normal<double>(1, 6, rng);
  const double ms = x.squaredNorm() / 6;
  const double rstd = 1.0 / std::sqrt(ms + eps);
  const matrix<double> J = resnorm::rms_norm<double>(6, eps).jacobian(x);
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(J);
  const Eigen::VectorXd s = svd.singularValues();  // descending
  for (int k = 0; k < 5; ++k) CHECK(s[k] == Approx(rstd).epsilon(1e-13));
  CHECK(s[5] == Approx(eps * rstd * rstd * rstd).epsilon(1e-10));
}

TEST_CASE("rms_norm: bad input throws naming both shapes", "[rms_norm][errors]") {
  const resnorm::rms_norm<double> f(3);
  const matrix<double> x = matrix<double>::Zero(2, 4);
  CHECK_THROWS_MATCHES(f.forward(x), std::invalid_argument,
                       resnorm_test::message_contains("gamma has 3 elements, x has 4 columns"));
  const resnorm::rms_norm<double> g(4);
  CHECK_THROWS_MATCHES(g.vjp(x, matrix<double>::Zero(4, 2)), std::invalid_argument,
                       resnorm_test::message_contains("rms_norm::vjp: dy is 4x2, x is 2x4"));
  CHECK_THROWS_MATCHES(g.vjp(x, x, vector<double>::Zero(3)), std::invalid_argument,
                       resnorm_test::message_contains("rstd has 3 elements, x has 2 rows"));
  CHECK_THROWS_AS(resnorm::rms_norm<double>(4, -1.0), std::invalid_argument);
}
