// Tests of resnorm/residual.hpp: y = x + h F(x) with h ∈ {0, 0.1, 1} and sublayers linear and
// gelu: the forward formula, J = I + h J_F, the derivative triple, the exact identity at h = 0,
// the factor h on the sublayer's gradients and the width check.
#include "resnorm/residual.hpp"

#include <limits>
#include <stdexcept>

#include "reference/linear_reference.hpp"
#include "resnorm/gelu.hpp"
#include "resnorm/linear.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::gelu;
using resnorm::linear;
using resnorm::matrix;
using resnorm::residual;
using resnorm_test::max_abs;
using resnorm_test::max_abs_diff;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;

template <class S>
double eps_of() {
  return static_cast<double>(std::numeric_limits<S>::epsilon());
}

// Derivatives vs central differences: linear and gelu are smooth with bounded third derivatives;
// eps^(2/3)·|y| is ≈ 5e-11 (double) and 2.4e-5 (float) for |y| ≲ 5, so 1e-8 and 2e-3.
template <class S>
double fd_tolerance() {
  return std::is_same_v<S, float> ? 2e-3 : 1e-8;
}

const double steps[] = {0.0, 0.1, 1.0};

template <class S>
linear<S> square_linear(Eigen::Index dim, std::uint64_t seed) {
  return linear<S>(random_matrix<S>(dim, dim, seed, 0.5), random_vector<S>(dim, seed + 1));
}

}  // namespace

TEMPLATE_TEST_CASE("residual forward: y = x + h F(x)", "[residual][forward]", float, double) {
  using S = TestType;
  for (const double h : steps) {
    for (const Eigen::Index rows : {0, 1, 3}) {
      CAPTURE(h, rows);
      const linear<S> f = square_linear<S>(5, 500);
      const residual<linear<S>> block(f, static_cast<S>(h));
      const matrix<S> x = random_matrix<S>(rows, 5, 501);
      const matrix<S> y = block.forward(x);
      // Against the long double reference of F: one more rounding for the product by h and the
      // sum with x, on top of the linear bound (d + 1)·eps·Σ|x W| + |b| ≤ 6·eps·10.
      const auto f_ref = resnorm_reference::linear_forward(x, f.weight, f.bias);
      for (Eigen::Index t = 0; t < rows; ++t) {
        for (Eigen::Index j = 0; j < 5; ++j) {
          const long double expected =
              static_cast<long double>(x(t, j)) + static_cast<long double>(h) * f_ref(t, j);
          CHECK(std::abs(static_cast<double>(y(t, j)) - static_cast<double>(expected)) <=
                64 * eps_of<S>() * (1 + std::abs(static_cast<double>(expected))));
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("residual jacobian: I + h J_F", "[residual][jacobian]", float, double) {
  using S = TestType;
  for (const double h : steps) {
    CAPTURE(h);
    const S step = static_cast<S>(h);
    const matrix<S> x = random_matrix<S>(3, 4, 510);
    const residual<linear<S>> with_linear(square_linear<S>(4, 511), step);
    const residual<gelu<S>> with_gelu(gelu<S>{}, step);
    const matrix<S> I = matrix<S>::Identity(12, 12);
    const matrix<S> expected_linear = I + step * with_linear.sublayer.jacobian(x);
    const matrix<S> expected_gelu = I + step * with_gelu.sublayer.jacobian(x);
    // The same two operations in the same type: equal up to one rounding of each entry.
    CHECK(max_abs_diff(with_linear.jacobian(x), expected_linear) <=
          eps_of<S>() * max_abs(expected_linear));
    CHECK(max_abs_diff(with_gelu.jacobian(x), expected_gelu) <=
          eps_of<S>() * max_abs(expected_gelu));
  }
}

TEMPLATE_TEST_CASE("residual vjp, jvp, jacobian: match finite differences and each other",
                   "[residual][vjp][jvp][jacobian]", float, double) {
  using S = TestType;
  for (const double h : steps) {
    for (const Eigen::Index rows : {0, 1, 3}) {
      for (const Eigen::Index dim : {1, 2, 5}) {
        CAPTURE(h, rows, dim);
        const matrix<S> x = random_matrix<S>(rows, dim, 520 + rows * 3 + dim);
        resnorm_test::check_derivatives(
            residual<linear<S>>(square_linear<S>(dim, 521), static_cast<S>(h)), x,
            fd_tolerance<S>());
        resnorm_test::check_derivatives(residual<gelu<S>>(gelu<S>{}, static_cast<S>(h)), x,
                                        fd_tolerance<S>());
      }
    }
  }
}

TEMPLATE_TEST_CASE("residual: h = 0 is exactly the identity", "[residual][edge]", float, double) {
  using S = TestType;
  const residual<linear<S>> block(square_linear<S>(5, 530), S(0));
  const matrix<S> x = random_matrix<S>(3, 5, 531);
  const matrix<S> dy = random_matrix<S>(3, 5, 532);
  // x + 0 · F(x) = x and dy + 0 · J_Fᵀ dy = dy exactly, for finite F.
  CHECK(max_abs_diff(block.forward(x), x) == 0);
  CHECK(max_abs_diff(block.jacobian(x), matrix<S>::Identity(15, 15)) == 0);
  CHECK(max_abs_diff(block.jvp(x, dy), dy) == 0);
  const auto grad = block.vjp(x, dy);
  CHECK(max_abs_diff(grad.dx, dy) == 0);
  CHECK(max_abs(grad.sublayer.dweight) == 0);
  CHECK(max_abs(grad.sublayer.dbias) == 0);
}

TEMPLATE_TEST_CASE("residual vjp: the sublayer's gradients carry the factor h", "[residual][vjp]",
                   float, double) {
  using S = TestType;
  for (const double h : steps) {
    CAPTURE(h);
    const residual<linear<S>> block(square_linear<S>(4, 540), static_cast<S>(h));
    const matrix<S> x = random_matrix<S>(3, 4, 541);
    const matrix<S> u = random_matrix<S>(3, 4, 542);
    const auto grad = block.vjp(x, u);
    // d⟨u, x + h (x W + b)⟩/dW = h xᵀ u,  d/db = h Σ_rows u.
    const matrix<double> dweight = h * (x.transpose() * u).template cast<double>();
    CHECK(max_abs_diff(grad.sublayer.dweight, dweight) <=
          16 * eps_of<S>() * (1 + max_abs(dweight)));
    resnorm_test::check_parameter_gradient(
        "sublayer.weight", block, x, u, [](auto& b) -> auto& { return b.sublayer.weight; },
        grad.sublayer.dweight, fd_tolerance<S>());
    resnorm_test::check_parameter_gradient(
        "sublayer.bias", block, x, u, [](auto& b) -> auto& { return b.sublayer.bias; },
        grad.sublayer.dbias, fd_tolerance<S>());
  }
}

TEST_CASE("residual: a sublayer that changes the width throws", "[residual][errors]") {
  using resnorm_test::contains;
  const residual<linear<double>> block(linear<double>(random_matrix<double>(4, 5, 550)));
  const matrix<double> x = random_matrix<double>(2, 4, 551);
  REQUIRE_THROWS_AS(block.forward(x), std::invalid_argument);
  CHECK_THROWS_WITH(block.forward(x), contains("sublayer output is 2x5") && contains("x is 2x4"));
  CHECK_THROWS_WITH(block.jacobian(x), contains("sublayer Jacobian is 10x8"));
  CHECK_THROWS_AS(block.vjp(x, x), std::invalid_argument);
  CHECK_THROWS_AS(block.jvp(x, random_matrix<double>(2, 5, 552)), std::invalid_argument);
}
