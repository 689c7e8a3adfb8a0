// Tests for resnorm/attention.hpp: causal multi-head self-attention and its derivatives.
#include "resnorm/attention.hpp"

#include <cmath>

#include "resnorm/finite_difference.hpp"
#include "resnorm/random.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::matrix;
using resnorm_test::max_abs;
using resnorm_test::max_rel_diff;
using resnorm_test::vec;

// Tolerances, in one place.
// Central differences in double, step cbrt(eps) ≈ 6e-6: error ~eps^(2/3) ≈ 4e-11 relative to the
// O(1) entries (the weights are drawn with std 0.5, so scores and their derivatives are O(1));
// the spec's 1e-6 leaves room and still catches any wrong term.
constexpr double fd_rel_tol = 1e-6;
// vjp/jvp against the explicit Jacobian: independent closed forms of the same sums.
constexpr double consistency_tol_double = 1e-12;
// float: O(d·T) terms of O(1) rounded at 6e-8, plus the exp in the softmax.
constexpr double consistency_tol_float = 1e-4;

template <class S>
double tolerance() {
  return std::is_same_v<S, float> ? consistency_tol_float : consistency_tol_double;
}

template <class S>
resnorm::causal_self_attention<S> random_attention(resnorm::index dim, resnorm::index heads,
                                                   resnorm::normal_generator& rng) {
  // std 0.5: scores of order 1, so the softmax is neither one-hot nor uniform.
  return resnorm::causal_self_attention<S>(resnorm::random_normal<S>(dim, dim, rng, 0.5),
                                           resnorm::random_normal<S>(dim, dim, rng, 0.5),
                                           resnorm::random_normal<S>(dim, dim, rng, 0.5),
                                           resnorm::random_normal<S>(dim, dim, rng, 0.5), heads);
}

}  // namespace

TEST_CASE("causal_self_attention forward: matches the definition computed by hand",
          "[attention][forward]") {
  // One head, d = 1, Wq = a, Wk = b, Wv = c, Wo = e: scores s(t,u) = a b x_t x_u (d_k = 1),
  // y_t = e · Σ_{u ≤ t} softmax_u(s(t,u)) · c x_u.
  const double a = 0.7, b = -1.3, c = 0.4, e = 2.0;
  matrix<double> wq(1, 1), wk(1, 1), wv(1, 1), wo(1, 1), x(3, 1);
  wq << a;
  wk << b;
  wv << c;
  wo << e;
  x << 0.5, -1.0, 2.0;
  const resnorm::causal_self_attention<double> f(wq, wk, wv, wo, 1);
  const matrix<double> y = f.forward(x);
  for (resnorm::index t = 0; t < 3; ++t) {
    CAPTURE(t);
    double z = 0, num = 0;
    for (resnorm::index u = 0; u <= t; ++u) {
      const double w = std::exp(a * b * x(t, 0) * x(u, 0));
      z += w;
      num += w * c * x(u, 0);
    }
    CHECK(y(t, 0) == Approx(e * num / z).epsilon(1e-14));
  }
}

TEST_CASE("causal_self_attention forward: one token attends only to itself",
          "[attention][forward]") {
  // T = 1: the single probability is exactly 1, so y = x Wv Wo.
  resnorm::normal_generator rng(31);
  const auto f = random_attention<double>(8, 2, rng);
  const matrix<double> x = resnorm::random_normal<double>(1, 8, rng);
  const matrix<double> expected = (x * f.wv) * f.wo;
  CHECK(max_abs(f.forward(x) - expected) <= 1e-14);
  CHECK(f.forward(matrix<double>(0, 8)).rows() == 0);
}

TEST_CASE("causal_self_attention: the causal mask makes future tokens invisible",
          "[attention][mask]") {
  resnorm::normal_generator rng(32);
  for (const resnorm::index heads : {1, 2, 4}) {
    CAPTURE(heads);
    const resnorm::index T = 4, d = 8;
    const auto f = random_attention<double>(d, heads, rng);
    const matrix<double> x = resnorm::random_normal<double>(T, d, rng);
    const matrix<double> J = f.jacobian(x);
    // ∂y_t/∂x_s = 0 exactly (not approximately) for s > t.
    for (resnorm::index t = 0; t < T; ++t) {
      for (resnorm::index s = t + 1; s < T; ++s) {
        CAPTURE(t, s);
        CHECK((J.block(t * d, s * d, d, d).array() == 0.0).all());
      }
    }
    // Changing the last token changes no earlier output, bit for bit.
    matrix<double> x2 = x;
    x2.row(T - 1).array() += 3.0;
    const matrix<double> y = f.forward(x), y2 = f.forward(x2);
    CHECK((y.topRows(T - 1).array() == y2.topRows(T - 1).array()).all());
    CHECK_FALSE((y.row(T - 1).array() == y2.row(T - 1).array()).all());
    // And jvp with a tangent on the last token only leaves earlier rows exactly zero.
    matrix<double> v = matrix<double>::Zero(T, d);
    v.row(T - 1) = resnorm::random_normal<double>(1, d, rng);
    CHECK((f.jvp(x, v).topRows(T - 1).array() == 0.0).all());
  }
}

TEST_CASE("causal_self_attention jacobian: matches finite differences", "[attention][jacobian]") {
  resnorm::normal_generator rng(33);
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const auto& [dim, heads] :
         {std::pair<resnorm::index, resnorm::index>{1, 1}, {2, 2}, {8, 2}, {8, 4}}) {
      CAPTURE(rows, dim, heads);
      const auto f = random_attention<double>(dim, heads, rng);
      const matrix<double> x = resnorm::random_normal<double>(rows, dim, rng);
      const auto check = resnorm::check_jacobian(f, x);
      INFO(check.describe());
      CHECK(check.max_rel_error <= fd_rel_tol);
    }
  }
}

TEMPLATE_TEST_CASE("causal_self_attention vjp and jvp: agree with the explicit Jacobian",
                   "[attention][vjp][jvp]", float, double) {
  resnorm::normal_generator rng(34);
  for (const resnorm::index rows : {0, 1, 3, 5}) {
    for (const auto& [dim, heads] :
         {std::pair<resnorm::index, resnorm::index>{1, 1}, {8, 2}, {6, 3}}) {
      CAPTURE(rows, dim, heads);
      const auto f = random_attention<TestType>(dim, heads, rng);
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

TEST_CASE("causal_self_attention vjp: weight gradients match finite differences",
          "[attention][vjp][parameters]") {
  resnorm::normal_generator rng(35);
  for (const resnorm::index rows : {1, 3}) {
    CAPTURE(rows);
    const auto f = random_attention<double>(8, 2, rng);
    const matrix<double> x = resnorm::random_normal<double>(rows, 8, rng);
    const matrix<double> u = resnorm::random_normal<double>(rows, 8, rng);
    const auto grad = f.vjp(x, u);
    // loss(W) = ⟨u, f_W(x)⟩: its gradient is the vjp's weight gradient with dy = u.
    auto loss_with = [&](matrix<double> resnorm::causal_self_attention<double>::*member) {
      return [&, member](const matrix<double>& w) {
        auto g = f;
        g.*member = w;
        return u.cwiseProduct(g.forward(x)).sum();
      };
    };
    using attention = resnorm::causal_self_attention<double>;
    CHECK(max_rel_diff(grad.dwq, resnorm::finite_difference_gradient(loss_with(&attention::wq),
                                                                     f.wq)) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.dwk, resnorm::finite_difference_gradient(loss_with(&attention::wk),
                                                                     f.wk)) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.dwv, resnorm::finite_difference_gradient(loss_with(&attention::wv),
                                                                     f.wv)) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.dwo, resnorm::finite_difference_gradient(loss_with(&attention::wo),
                                                                     f.wo)) <= fd_rel_tol);
  }
}

TEST_CASE("causal_self_attention: bad shapes throw naming both shapes", "[attention][errors]") {
  const matrix<double> w = matrix<double>::Zero(6, 6);
  CHECK_THROWS_MATCHES(resnorm::causal_self_attention<double>(w, w, w, w, 4), std::invalid_argument,
                       resnorm_test::message_contains("d = 6 (wq is 6x6) is not divisible by "
                                                      "heads = 4"));
  CHECK_THROWS_MATCHES(
      resnorm::causal_self_attention<double>(w, matrix<double>::Zero(6, 5), w, w, 2),
      std::invalid_argument, resnorm_test::message_contains("wk is 6x5, wq is 6x6"));
  CHECK_THROWS_MATCHES(resnorm::causal_self_attention<double>(w, w, w, w, 0), std::invalid_argument,
                       resnorm_test::message_contains("heads must be >= 1"));
  const resnorm::causal_self_attention<double> f(w, w, w, w, 2);
  CHECK_THROWS_MATCHES(f.forward(matrix<double>::Zero(3, 4)), std::invalid_argument,
                       resnorm_test::message_contains("x has 4 columns, wq is 6x6"));
  CHECK_THROWS_MATCHES(f.vjp(matrix<double>::Zero(3, 6), matrix<double>::Zero(2, 6)),
                       std::invalid_argument,
                       resnorm_test::message_contains("dy is 2x6, x is 3x6"));
  CHECK_THROWS_MATCHES(f.jvp(matrix<double>::Zero(3, 6), matrix<double>::Zero(3, 5)),
                       std::invalid_argument, resnorm_test::message_contains("v is 3x5, x is 3x6"));
}
