// Tests for resnorm/dynamic_tanh.hpp: y = gamma ⊙ tanh(alpha x) + beta and its derivatives.
#include "resnorm/dynamic_tanh.hpp"

#include <cmath>

#include "resnorm/finite_difference.hpp"
#include "resnorm/linear.hpp"
#include "resnorm/post_ln_block.hpp"
#include "resnorm/pre_ln_block.hpp"
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
// Central differences in double, step cbrt(eps) ≈ 6e-6: error ~eps^(2/3) ≈ 4e-11 relative to
// O(1) entries; 1e-6 is the spec's bound and far below any wrong term.
constexpr double fd_rel_tol = 1e-6;
// vjp/jvp/jacobian share the elementwise derivative: they differ by one rounding at most.
constexpr double consistency_tol_double = 1e-15;
constexpr double consistency_tol_float = 1e-6;

template <class S>
double tolerance() {
  return std::is_same_v<S, float> ? consistency_tol_float : consistency_tol_double;
}

template <class S>
resnorm::dynamic_tanh<S> random_dyt(resnorm::index dim, resnorm::normal_generator& rng) {
  const matrix<S> g = resnorm::random_normal<S>(dim, 1, rng, 0.5, 1.0);
  const matrix<S> b = resnorm::random_normal<S>(dim, 1, rng, 0.5);
  return resnorm::dynamic_tanh<S>(S(0.7), vector<S>(g), vector<S>(b));
}

}  // namespace

TEST_CASE("dynamic_tanh forward: matches the definition; alpha starts at 0.5", "[dyt][forward]") {
  const resnorm::dynamic_tanh<double> init(3);
  CHECK(init.alpha == 0.5);
  matrix<double> x(2, 2);
  x << 0.3, -2.0, 5.0, 0.0;
  vector<double> gamma(2), beta(2);
  gamma << 2.0, -1.0;
  beta << 0.1, 0.2;
  const resnorm::dynamic_tanh<double> f(1.5, gamma, beta);
  const matrix<double> y = f.forward(x);
  for (resnorm::index t = 0; t < 2; ++t) {
    for (resnorm::index j = 0; j < 2; ++j) {
      CAPTURE(t, j);
      CHECK(y(t, j) == Approx(gamma[j] * std::tanh(1.5 * x(t, j)) + beta[j]).epsilon(1e-15));
    }
  }
}

TEST_CASE("dynamic_tanh jacobian: matches finite differences", "[dyt][jacobian]") {
  resnorm::normal_generator rng(51);
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const resnorm::index dim : {1, 2, 8}) {
      CAPTURE(rows, dim);
      const auto f = random_dyt<double>(dim, rng);
      const matrix<double> x = resnorm::random_normal<double>(rows, dim, rng, 2.0);
      const auto check = resnorm::check_jacobian(f, x);
      INFO(check.describe());
      CHECK(check.max_rel_error <= fd_rel_tol);
    }
  }
}

TEMPLATE_TEST_CASE("dynamic_tanh vjp and jvp: agree with the explicit Jacobian", "[dyt][vjp][jvp]",
                   float, double) {
  resnorm::normal_generator rng(52);
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const resnorm::index dim : {1, 2, 8}) {
      CAPTURE(rows, dim);
      const auto f = random_dyt<TestType>(dim, rng);
      const matrix<TestType> x = resnorm::random_normal<TestType>(rows, dim, rng, 2.0);
      const matrix<TestType> u = resnorm::random_normal<TestType>(rows, dim, rng);
      const matrix<TestType> v = resnorm::random_normal<TestType>(rows, dim, rng);
      const matrix<TestType> J = f.jacobian(x);
      CHECK(max_abs((vec(f.vjp(x, u).dx) - J.transpose() * vec(u)).eval()) <=
            tolerance<TestType>());
      CHECK(max_abs((vec(f.jvp(x, v)) - J * vec(v)).eval()) <= tolerance<TestType>());
    }
  }
}

TEST_CASE("dynamic_tanh vjp: dalpha, dgamma, dbeta match finite differences",
          "[dyt][vjp][parameters]") {
  resnorm::normal_generator rng(53);
  const auto f = random_dyt<double>(4, rng);
  const matrix<double> x = resnorm::random_normal<double>(3, 4, rng, 2.0);
  const matrix<double> u = resnorm::random_normal<double>(3, 4, rng);
  const auto grad = f.vjp(x, u);
  auto loss = [&](const resnorm::dynamic_tanh<double>& g) {
    return u.cwiseProduct(g.forward(x)).sum();
  };
  matrix<double> alpha(1, 1);
  alpha << f.alpha;
  const auto fd_alpha = resnorm::finite_difference_gradient(
      [&](const matrix<double>& a) {
        auto g = f;
        g.alpha = a(0, 0);
        return loss(g);
      },
      alpha);
  const auto fd_gamma = resnorm::finite_difference_gradient(
      [&](const vector<double>& p) {
        auto g = f;
        g.gamma = p;
        return loss(g);
      },
      f.gamma);
  const auto fd_beta = resnorm::finite_difference_gradient(
      [&](const vector<double>& p) {
        auto g = f;
        g.beta = p;
        return loss(g);
      },
      f.beta);
  CHECK(grad.dalpha == Approx(fd_alpha(0, 0)).epsilon(fd_rel_tol));
  CHECK(max_rel_diff(grad.dgamma, fd_gamma) <= fd_rel_tol);
  CHECK(max_rel_diff(grad.dbeta, fd_beta) <= fd_rel_tol);
}

TEST_CASE("dynamic_tanh: stands in for LayerNorm in pre_ln_block and post_ln_block",
          "[dyt][block]") {
  resnorm::normal_generator rng(54);
  using dyt = resnorm::dynamic_tanh<double>;
  const resnorm::linear<double> f(resnorm::random_normal<double>(4, 4, rng, 0.5));
  const dyt norm = random_dyt<double>(4, rng);
  const resnorm::pre_ln_block<resnorm::linear<double>, dyt> pre(norm, f);
  const resnorm::post_ln_block<resnorm::linear<double>, dyt> post(f, norm);
  const matrix<double> x = resnorm::random_normal<double>(3, 4, rng);
  // Pre: x + F(DyT(x)); post: DyT(x + F(x)), composed by hand.
  CHECK(max_abs(pre.forward(x) - (x + f.forward(norm.forward(x)))) <= 1e-15);
  CHECK(max_abs(post.forward(x) - norm.forward(x + f.forward(x))) <= 1e-15);
  CHECK(resnorm::check_jacobian(pre, x).max_rel_error <= fd_rel_tol);
  CHECK(resnorm::check_jacobian(post, x).max_rel_error <= fd_rel_tol);
}

TEST_CASE("dynamic_tanh: bad input throws naming both shapes", "[dyt][errors]") {
  const resnorm::dynamic_tanh<double> f(3);
  CHECK_THROWS_MATCHES(f.forward(matrix<double>::Zero(2, 4)), std::invalid_argument,
                       resnorm_test::message_contains("gamma has 3 elements, x has 4 columns"));
  CHECK_THROWS_MATCHES(f.vjp(matrix<double>::Zero(2, 3), matrix<double>::Zero(2, 2)),
                       std::invalid_argument,
                       resnorm_test::message_contains("dynamic_tanh::vjp: dy is 2x2, x is 2x3"));
}
