// Tests of resnorm/finite_difference.hpp, the checker every derivative test relies on: it must
// pass a correct Jacobian, catch and locate a wrong entry, never let a NaN through, take the
// step it documents, and differentiate a quadratic loss exactly.
#include "resnorm/finite_difference.hpp"

#include <cmath>
#include <limits>

#include "resnorm/linear.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::linear;
using resnorm::matrix;
using resnorm::matrix_cref;
using resnorm_test::max_abs;
using resnorm_test::random_matrix;

// A linear map whose jacobian() is off by `delta` at one entry (row, col) of the (T·d_out) x
// (T·d_in) matrix; forward, vjp and jvp are right.
struct wrong_jacobian_entry {
  using scalar_type = double;
  linear<double> base;
  Eigen::Index row = 0, col = 0;
  double delta = 0;

  matrix<double> forward(matrix_cref<double> x) const { return base.forward(x); }
  resnorm::linear_grad<double> vjp(matrix_cref<double> x, matrix_cref<double> dy) const {
    return base.vjp(x, dy);
  }
  matrix<double> jvp(matrix_cref<double> x, matrix_cref<double> v) const { return base.jvp(x, v); }
  matrix<double> jacobian(matrix_cref<double> x) const {
    matrix<double> J = base.jacobian(x);
    J(row, col) += delta;
    return J;
  }
};
static_assert(resnorm::differentiable_map<wrong_jacobian_entry>);

// y = x³ elementwise, J = diag(3x²): its central difference with steps a (up) and b (down) is
// 3x² + 3x(a − b) + a² − ab + b², i.e. 3x² + h² when a = b = h.
struct cube {
  using scalar_type = double;
  struct grad {
    matrix<double> dx;
  };
  matrix<double> forward(matrix_cref<double> x) const { return x.array().cube().matrix(); }
  grad vjp(matrix_cref<double> x, matrix_cref<double> dy) const {
    return {(3 * x.array().square() * dy.array()).matrix()};
  }
  matrix<double> jvp(matrix_cref<double> x, matrix_cref<double> v) const {
    return (3 * x.array().square() * v.array()).matrix();
  }
  matrix<double> jacobian(matrix_cref<double> x) const {
    const matrix<double> d = 3 * x.array().square();
    matrix<double> J = matrix<double>::Zero(x.size(), x.size());
    J.diagonal() = resnorm_test::vec(d);
    return J;
  }
};
static_assert(resnorm::differentiable_map<cube>);

}  // namespace

TEMPLATE_TEST_CASE("check_jacobian: a correct analytic Jacobian gives a tiny error",
                   "[finite_difference]", float, double) {
  using S = TestType;
  const linear<S> f(random_matrix<S>(4, 5, 400), random_matrix<S>(5, 1, 401));
  const matrix<S> x = random_matrix<S>(3, 4, 402);
  const resnorm::jacobian_check c = resnorm::check_jacobian(f, x);
  INFO(c.describe());
  // An affine map leaves only rounding: eps·|y|/h = eps^(2/3)·|y| (|y| ≲ 5 here).
  const double tol = std::is_same_v<S, float> ? 2e-4 : 1e-9;
  CHECK(c.max_rel_error <= tol);
  CHECK(c.scale == Approx(max_abs(f.weight)).epsilon(tol));
}

TEST_CASE("check_jacobian: reports a wrong entry, its size and where it sits",
          "[finite_difference]") {
  const Eigen::Index T = 3, d_in = 4, d_out = 5;
  const matrix<double> weight = random_matrix<double>(d_in, d_out, 410);
  const matrix<double> x = random_matrix<double>(T, d_in, 411);
  const double w_max = max_abs(weight);

  SECTION("off the diagonal blocks: d y(2, 3) / d x(1, 2)") {
    // row = t·d_out + i = 2·5 + 3, col = s·d_in + j = 1·4 + 2.
    const wrong_jacobian_entry f{linear<double>(weight), 13, 6, 0.75};
    const resnorm::jacobian_check c = resnorm::check_jacobian(f, x);
    INFO(c.describe());
    CHECK(c.row == 13);
    CHECK(c.col == 6);
    CHECK(c.output_token == 2);
    CHECK(c.output_feature == 3);
    CHECK(c.input_token == 1);
    CHECK(c.input_feature == 2);
    // Token 1 does not reach token 2: the numeric entry is exactly 0.
    CHECK(c.numeric == 0);
    CHECK(c.analytic == 0.75);
    CHECK(c.max_abs_error == 0.75);
    CHECK(c.scale == Approx(w_max).epsilon(1e-9));
    CHECK(c.max_rel_error == Approx(0.75 / w_max).epsilon(1e-9));
    CHECK_THAT(c.describe(), resnorm_test::contains("J[13, 6]"));
    CHECK_THAT(c.describe(), resnorm_test::contains("d y(2, 3) / d x(1, 2)"));
  }
  SECTION("inside a diagonal block: d y(1, 4) / d x(1, 0)") {
    // row = 1·5 + 4 = 9, col = 1·4 + 0 = 4; the true entry is W(0, 4).
    const wrong_jacobian_entry f{linear<double>(weight), 9, 4, -0.5};
    const resnorm::jacobian_check c = resnorm::check_jacobian(f, x);
    INFO(c.describe());
    CHECK(c.row == 9);
    CHECK(c.col == 4);
    CHECK(c.output_token == 1);
    CHECK(c.output_feature == 4);
    CHECK(c.input_token == 1);
    CHECK(c.input_feature == 0);
    CHECK(c.analytic == weight(0, 4) - 0.5);
    CHECK(c.numeric == Approx(weight(0, 4)).margin(1e-9));
    CHECK(c.max_abs_error == Approx(0.5).margin(1e-9));
  }
}

TEST_CASE("check_jacobian: a NaN entry is never reported as a small error", "[finite_difference]") {
  const matrix<double> weight = random_matrix<double>(2, 2, 420);
  const matrix<double> x = random_matrix<double>(2, 2, 421);
  // The NaN at the first entry scanned and at the last: both must surface.
  for (const Eigen::Index entry : {0, 15}) {
    CAPTURE(entry);
    const wrong_jacobian_entry f{linear<double>(weight), entry / 4, entry % 4,
                                 std::numeric_limits<double>::quiet_NaN()};
    const resnorm::jacobian_check c = resnorm::check_jacobian(f, x);
    INFO(c.describe());
    CHECK(std::isnan(c.max_abs_error));
    CHECK(std::isnan(c.max_rel_error));
    CHECK_FALSE(c.max_rel_error <= 1e-3);
    CHECK(c.row == entry / 4);
    CHECK(c.col == entry % 4);
  }
}

TEST_CASE("finite_difference_jacobian: takes the documented step h = r·max(1, |x|)",
          "[finite_difference]") {
  // relative_step r = 0.1: the entries with |x| ≤ 1 step by 0.1 and err by h² = 0.01; the entry
  // x = 2 steps by 0.2 and errs by 0.04, the worst, at vec index 2 = (token 1, feature 0).
  matrix<double> x(2, 2);
  x << 0.5, -0.25, 2.0, 0.75;
  const resnorm::jacobian_check c = resnorm::check_jacobian(cube{}, x, {0.1});
  INFO(c.describe());
  CHECK(c.row == 2);
  CHECK(c.col == 2);
  CHECK(c.numeric - c.analytic == Approx(0.04).epsilon(1e-9));
  CHECK(c.analytic == 12.0);
  const matrix<double> numeric = resnorm::finite_difference_jacobian(cube{}, x, {0.1});
  CHECK(numeric(0, 0) == Approx(3 * 0.25 + 0.01).epsilon(1e-12));
  CHECK(numeric(1, 1) == Approx(3 * 0.0625 + 0.01).epsilon(1e-12));
  CHECK(numeric(0, 1) == 0);
  // The default step, eps^(1/3) ≈ 6e-6 in double, makes the h² error ~1e-10.
  CHECK(resnorm::check_jacobian(cube{}, x).max_abs_error <= 1e-8);
}

TEST_CASE("finite_difference_gradient: exact on a quadratic", "[finite_difference]") {
  SECTION("a vector parameter: 1/2 pᵀ A p + bᵀ p, gradient A p + b") {
    const matrix<double> B = random_matrix<double>(6, 6, 430);
    const matrix<double> A = B.transpose() * B + matrix<double>::Identity(6, 6);
    const resnorm::vector<double> b = resnorm_test::random_vector<double>(6, 431);
    const resnorm::vector<double> p = resnorm_test::random_vector<double>(6, 432, 2.0);
    const auto loss = [&](const resnorm::vector<double>& q) {
      return 0.5 * q.dot(A * q) + b.dot(q);
    };
    const resnorm::vector<double> exact = A * p + b;
    const auto numeric = resnorm::finite_difference_gradient(loss, p);
    // Central differences are exact on a quadratic: only the loss's rounding, eps·|loss|/h.
    CHECK(resnorm_test::max_abs_diff(numeric, exact) <= 1e-7 * max_abs(exact));
  }
  SECTION("a row-major matrix parameter keeps its layout: Σ c_ij m_ij², gradient 2 c ⊙ m") {
    const matrix<double> c = random_matrix<double>(3, 4, 433);
    const matrix<double> m = random_matrix<double>(3, 4, 434);
    const auto loss = [&](const matrix<double>& q) {
      return (c.array() * q.array().square()).sum();
    };
    const auto numeric = resnorm::finite_difference_gradient(loss, m);
    REQUIRE(numeric.rows() == 3);
    REQUIRE(numeric.cols() == 4);
    const matrix<double> exact = 2 * c.array() * m.array();
    CHECK(resnorm_test::max_abs_diff(numeric, exact) <= 1e-7 * max_abs(exact));
  }
}
