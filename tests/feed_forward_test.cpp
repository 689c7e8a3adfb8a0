// Tests for resnorm/feed_forward.hpp: y = GELU(x W1 + b1) W2 + b2 and its derivatives.
#include "resnorm/feed_forward.hpp"

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
// Central differences in double, step cbrt(eps) ≈ 6e-6: truncation and rounding both ~eps^(2/3)
// ≈ 4e-11 relative to the O(1) entries; the spec's bound 1e-6 is far above that and far below
// the O(1) error any wrong term makes.
constexpr double fd_rel_tol = 1e-6;
// vjp/jvp against the explicit Jacobian: the same products summed in another order.
constexpr double consistency_tol_double = 1e-12;
// float: ~d_ff terms of size O(1) each rounded at 6e-8.
constexpr double consistency_tol_float = 1e-4;

template <class S>
double tolerance() {
  return std::is_same_v<S, float> ? consistency_tol_float : consistency_tol_double;
}

template <class S>
resnorm::feed_forward<S> random_ffn(resnorm::index dim, resnorm::index hidden,
                                    resnorm::normal_generator& rng,
                                    resnorm::gelu_approximation form) {
  const matrix<S> b1 = resnorm::random_normal<S>(hidden, 1, rng, 0.3);
  const matrix<S> b2 = resnorm::random_normal<S>(dim, 1, rng, 0.3);
  return resnorm::feed_forward<S>(resnorm::random_normal<S>(dim, hidden, rng, 0.5), b1,
                                  resnorm::random_normal<S>(hidden, dim, rng, 0.5), b2, form);
}

}  // namespace

TEST_CASE("feed_forward forward: matches the formula composed by hand", "[feed_forward][forward]") {
  // d = 1, d_ff = 2: y = w2_0 GELU(w1_0 x + b1_0) + w2_1 GELU(w1_1 x + b1_1) + b2.
  matrix<double> w1(1, 2), w2(2, 1), x(2, 1);
  vector<double> b1(2), b2(1);
  w1 << 0.5, -2.0;
  b1 << 0.1, 0.3;
  w2 << 1.5, -0.25;
  b2 << 0.7;
  x << 1.0, -0.5;
  const resnorm::feed_forward<double> f(w1, b1, w2, b2);
  const matrix<double> y = f.forward(x);
  for (resnorm::index t = 0; t < 2; ++t) {
    CAPTURE(t);
    const double xt = x(t, 0);
    const double expected =
        1.5 * resnorm::gelu_erf(0.5 * xt + 0.1) - 0.25 * resnorm::gelu_erf(-2.0 * xt + 0.3) + 0.7;
    CHECK(y(t, 0) == Approx(expected).epsilon(1e-15));
  }
}

TEST_CASE("feed_forward jacobian: matches finite differences", "[feed_forward][jacobian]") {
  resnorm::normal_generator rng(21);
  for (const auto form : {resnorm::gelu_approximation::erf, resnorm::gelu_approximation::tanh}) {
    for (const resnorm::index rows : {0, 1, 3}) {
      for (const resnorm::index dim : {1, 2, 8}) {
        CAPTURE(static_cast<int>(form), rows, dim);
        const auto f = random_ffn<double>(dim, 3 * dim, rng, form);
        const matrix<double> x = resnorm::random_normal<double>(rows, dim, rng);
        const auto check = resnorm::check_jacobian(f, x);
        INFO(check.describe());
        CHECK(check.max_rel_error <= fd_rel_tol);
      }
    }
  }
}

TEMPLATE_TEST_CASE("feed_forward vjp and jvp: agree with the explicit Jacobian",
                   "[feed_forward][vjp][jvp]", float, double) {
  resnorm::normal_generator rng(22);
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const resnorm::index dim : {1, 2, 8}) {
      CAPTURE(rows, dim);
      const auto f = random_ffn<TestType>(dim, 4 * dim, rng, resnorm::gelu_approximation::tanh);
      const matrix<TestType> x = resnorm::random_normal<TestType>(rows, dim, rng);
      const matrix<TestType> u = resnorm::random_normal<TestType>(rows, dim, rng);
      const matrix<TestType> v = resnorm::random_normal<TestType>(rows, dim, rng);
      const matrix<TestType> J = f.jacobian(x);
      const matrix<TestType> dx = f.vjp(x, u).dx;
      const matrix<TestType> jv = f.jvp(x, v);
      CHECK(max_abs((vec(dx) - J.transpose() * vec(u)).eval()) <= tolerance<TestType>());
      CHECK(max_abs((vec(jv) - J * vec(v)).eval()) <= tolerance<TestType>());
      const double lhs = u.template cast<double>().cwiseProduct(jv.template cast<double>()).sum();
      const double rhs = dx.template cast<double>().cwiseProduct(v.template cast<double>()).sum();
      CHECK(lhs == Approx(rhs).margin(10 * tolerance<TestType>()));
    }
  }
}

TEST_CASE("feed_forward vjp: parameter gradients match finite differences",
          "[feed_forward][vjp][parameters]") {
  resnorm::normal_generator rng(23);
  for (const resnorm::index rows : {1, 3}) {
    CAPTURE(rows);
    const resnorm::index dim = 4, hidden = 6;
    const auto f = random_ffn<double>(dim, hidden, rng, resnorm::gelu_approximation::erf);
    const matrix<double> x = resnorm::random_normal<double>(rows, dim, rng);
    const matrix<double> u = resnorm::random_normal<double>(rows, dim, rng);
    const auto grad = f.vjp(x, u);
    // loss(θ) = ⟨u, f_θ(x)⟩, so ∂loss/∂θ is the vjp's parameter gradient with dy = u.
    auto loss_with = [&](auto set) {
      return [&, set](const auto& p) {
        auto g = f;
        set(g, p);
        return u.cwiseProduct(g.forward(x)).sum();
      };
    };
    const auto fd_w1 = resnorm::finite_difference_gradient(
        loss_with([](auto& g, const matrix<double>& p) { g.w1 = p; }), f.w1);
    const auto fd_b1 = resnorm::finite_difference_gradient(
        loss_with([](auto& g, const vector<double>& p) { g.b1 = p; }), f.b1);
    const auto fd_w2 = resnorm::finite_difference_gradient(
        loss_with([](auto& g, const matrix<double>& p) { g.w2 = p; }), f.w2);
    const auto fd_b2 = resnorm::finite_difference_gradient(
        loss_with([](auto& g, const vector<double>& p) { g.b2 = p; }), f.b2);
    CHECK(max_rel_diff(grad.dw1, fd_w1) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.db1, fd_b1) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.dw2, fd_w2) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.db2, fd_b2) <= fd_rel_tol);
  }
}

TEST_CASE("feed_forward: bad shapes throw naming both shapes", "[feed_forward][errors]") {
  const auto f = resnorm::feed_forward<double>::zeros(4, 6);
  CHECK_THROWS_MATCHES(f.forward(matrix<double>::Zero(2, 5)), std::invalid_argument,
                       resnorm_test::message_contains("x has 5 columns, w1 is 4x6"));
  CHECK_THROWS_MATCHES(f.vjp(matrix<double>::Zero(2, 4), matrix<double>::Zero(3, 4)),
                       std::invalid_argument,
                       resnorm_test::message_contains("feed_forward::vjp: dy is 3x4, x is 2x4"));
  CHECK_THROWS_MATCHES(
      resnorm::feed_forward<double>(matrix<double>::Zero(4, 6), vector<double>::Zero(6),
                                    matrix<double>::Zero(5, 4), vector<double>::Zero(4)),
      std::invalid_argument, resnorm_test::message_contains("w2 is 5x4, w1 is 4x6"));
  CHECK_THROWS_MATCHES(
      resnorm::feed_forward<double>(matrix<double>::Zero(4, 6), vector<double>::Zero(5),
                                    matrix<double>::Zero(6, 4), vector<double>::Zero(4)),
      std::invalid_argument, resnorm_test::message_contains("b1 has 5 elements, w1 has 6"));
}
