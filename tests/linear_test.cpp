// Tests of resnorm/linear.hpp: forward against the long double reference, the gradients against
// finite differences, the Jacobian's block structure, the no-bias form and the shape checks.
#include "resnorm/linear.hpp"

#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "reference/linear_reference.hpp"
#include "resnorm/finite_difference.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::linear;
using resnorm::matrix;
using resnorm::vector;
using resnorm_test::max_abs;
using resnorm_test::max_abs_diff;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;

template <class S>
double eps_of() {
  return static_cast<double>(std::numeric_limits<S>::epsilon());
}

// Derivatives vs central differences. linear is affine, so only rounding remains:
// eps·|y|/h with h = eps^(1/3), i.e. eps^(2/3)·|y| ≈ 5e-11 in double and 2.4e-5 in float, for
// |y| up to ~10: 1e-8 and 2e-3.
template <class S>
double fd_tolerance() {
  return std::is_same_v<S, float> ? 2e-3 : 1e-8;
}

const std::vector<std::pair<Eigen::Index, Eigen::Index>> shapes = {
    {1, 1}, {2, 3}, {5, 4}, {64, 16}};

template <class S>
linear<S> make_linear(Eigen::Index d_in, Eigen::Index d_out, bool with_bias) {
  return linear<S>(random_matrix<S>(d_in, d_out, 300 + d_in * 3 + d_out, 0.5),
                   with_bias ? random_vector<S>(d_out, 301) : vector<S>());
}

}  // namespace

TEMPLATE_TEST_CASE("linear forward: matches the long double reference", "[linear][forward]", float,
                   double) {
  using S = TestType;
  for (const bool with_bias : {false, true}) {
    for (const Eigen::Index rows : {0, 1, 3}) {
      for (const auto& [d_in, d_out] : shapes) {
        CAPTURE(with_bias, rows, d_in, d_out);
        const linear<S> f = make_linear<S>(d_in, d_out, with_bias);
        const matrix<S> x = random_matrix<S>(rows, d_in, 310 + rows + d_in);
        const matrix<S> y = f.forward(x);
        REQUIRE(y.rows() == rows);
        REQUIRE(y.cols() == d_out);
        const auto y_ref = resnorm_reference::linear_forward(x, f.weight, f.bias);
        // A dot product of n terms errs by at most n·eps·Σ|x_j W_ji| (plus |b|): the classic
        // bound, evaluated per entry.
        matrix<double> bound =
            x.template cast<double>().cwiseAbs() * f.weight.template cast<double>().cwiseAbs();
        if (with_bias) bound.rowwise() += f.bias.template cast<double>().cwiseAbs().transpose();
        for (Eigen::Index t = 0; t < rows; ++t) {
          for (Eigen::Index i = 0; i < d_out; ++i) {
            CAPTURE(t, i);
            CHECK(std::abs(static_cast<double>(y(t, i)) - static_cast<double>(y_ref(t, i))) <=
                  static_cast<double>(d_in + 1) * eps_of<S>() * bound(t, i));
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("linear vjp: dx, dweight and dbias match finite differences", "[linear][vjp]",
                   float, double) {
  using S = TestType;
  for (const Eigen::Index rows : {0, 1, 3}) {
    for (const auto& [d_in, d_out] : shapes) {
      CAPTURE(rows, d_in, d_out);
      const linear<S> f = make_linear<S>(d_in, d_out, true);
      const matrix<S> x = random_matrix<S>(rows, d_in, 320 + rows + d_in);
      const matrix<S> u = random_matrix<S>(rows, d_out, 321 + d_out);
      resnorm_test::check_derivatives(f, x, fd_tolerance<S>());

      const auto grad = f.vjp(x, u);
      REQUIRE(grad.dweight.rows() == d_in);
      REQUIRE(grad.dweight.cols() == d_out);
      REQUIRE(grad.dbias.size() == d_out);
      // loss = ⟨u, x W + b⟩, linear in W and b.
      const auto loss_of_weight = [&](const matrix<S>& w) {
        return (u.template cast<double>().array() *
                linear<S>(w, f.bias).forward(x).template cast<double>().array())
            .sum();
      };
      const auto loss_of_bias = [&](const vector<S>& b) {
        return (u.template cast<double>().array() *
                linear<S>(f.weight, b).forward(x).template cast<double>().array())
            .sum();
      };
      const auto dweight_fd = resnorm::finite_difference_gradient(loss_of_weight, f.weight);
      const auto dbias_fd = resnorm::finite_difference_gradient(loss_of_bias, f.bias);
      CHECK(max_abs_diff(grad.dweight, dweight_fd) <=
            fd_tolerance<S>() * (1 + max_abs(dweight_fd)));
      CHECK(max_abs_diff(grad.dbias, dbias_fd) <= fd_tolerance<S>() * (1 + max_abs(dbias_fd)));
    }
  }
}

TEMPLATE_TEST_CASE("linear jacobian: W transposed on the diagonal blocks, zero elsewhere",
                   "[linear][jacobian]", float, double) {
  using S = TestType;
  const Eigen::Index T = 3, n = 4, m = 3;
  const linear<S> f = make_linear<S>(n, m, true);
  const matrix<S> x = random_matrix<S>(T, n, 330);
  const matrix<S> J = f.jacobian(x);
  REQUIRE(J.rows() == T * m);
  REQUIRE(J.cols() == T * n);
  for (Eigen::Index t = 0; t < T; ++t) {
    for (Eigen::Index s = 0; s < T; ++s) {
      CAPTURE(t, s);
      const matrix<S> block = J.block(t * m, s * n, m, n);
      if (t == s) {
        CHECK(max_abs_diff(block, f.weight.transpose()) == 0);
      } else {
        CHECK(max_abs(block) == 0);
      }
    }
  }
  // The Jacobian does not depend on x.
  CHECK(max_abs_diff(f.jacobian(random_matrix<S>(T, n, 331, 10.0)), J) == 0);
}

TEMPLATE_TEST_CASE("linear: the no-bias form", "[linear][forward][vjp]", float, double) {
  using S = TestType;
  const linear<S> f(random_matrix<S>(4, 3, 340));
  CHECK_FALSE(f.has_bias());
  CHECK(f.in_features() == 4);
  CHECK(f.out_features() == 3);
  const matrix<S> x = random_matrix<S>(3, 4, 341);
  const matrix<S> y_expected = x * f.weight;
  CHECK(max_abs_diff(f.forward(x), y_expected) == 0);
  const auto grad = f.vjp(x, random_matrix<S>(3, 3, 342));
  CHECK(grad.dbias.size() == 0);
  const linear<S> zero = linear<S>::zeros(4, 3, false);
  CHECK_FALSE(zero.has_bias());
  CHECK(max_abs(zero.forward(x)) == 0);
  CHECK(linear<S>::zeros(4, 3).bias.size() == 3);
}

TEST_CASE("linear: bad shapes throw std::invalid_argument naming both shapes", "[linear][errors]") {
  using resnorm_test::contains;
  using resnorm_test::message_contains;
  const linear<double> f = make_linear<double>(4, 3, true);
  SECTION("x columns differ from weight rows") {
    const matrix<double> x = random_matrix<double>(2, 5, 350);
    REQUIRE_THROWS_MATCHES(f.forward(x), std::invalid_argument,
                           message_contains("x has 5 columns"));
    CHECK_THROWS_WITH(f.forward(x), contains("weight is 4x3"));
    CHECK_THROWS_WITH(f.vjp(x, random_matrix<double>(2, 3, 351)), contains("weight is 4x3"));
    CHECK_THROWS_WITH(f.jvp(x, x), contains("x has 5 columns"));
    CHECK_THROWS_WITH(f.jacobian(x), contains("x has 5 columns"));
  }
  SECTION("dy of the wrong shape") {
    const matrix<double> x = random_matrix<double>(2, 4, 352);
    const matrix<double> dy = random_matrix<double>(2, 4, 353);
    REQUIRE_THROWS_MATCHES(f.vjp(x, dy), std::invalid_argument, message_contains("dy is 2x4"));
    CHECK_THROWS_WITH(f.vjp(x, dy), contains("expected 2x3"));
    const matrix<double> v = random_matrix<double>(3, 4, 354);
    CHECK_THROWS_WITH(f.jvp(x, v), contains("v is 3x4") && contains("x is 2x4"));
  }
  SECTION("bias length differs from weight columns") {
    REQUIRE_THROWS_MATCHES(
        linear<double>(random_matrix<double>(4, 3, 355), random_vector<double>(5, 356)),
        std::invalid_argument, message_contains("bias has 5 elements"));
    CHECK_THROWS_WITH(
        linear<double>(random_matrix<double>(4, 3, 355), random_vector<double>(5, 356)),
        contains("weight has 3 columns"));
    linear<double> g = f;
    g.bias = random_vector<double>(2, 357);  // a public member: the entry points check it again
    CHECK_THROWS_WITH(g.forward(random_matrix<double>(2, 4, 358)),
                      contains("bias has 2 elements") && contains("3 columns"));
  }
}
