// Tests for resnorm/softmax.hpp: the row softmax and its derivatives.
#include "resnorm/softmax.hpp"

#include <cmath>
#include <limits>

#include "resnorm/finite_difference.hpp"
#include "resnorm/random.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::matrix;
using resnorm_test::max_abs;
using resnorm_test::vec;

// Tolerances, in one place.
// Central differences in double with the default step cbrt(eps) ≈ 6e-6 leave an error of order
// eps^(2/3) ≈ 4e-11 relative to the entries (≤ 1/4 for softmax): 1e-7 leaves a wide margin and
// still catches any wrong term (which is O(1)).
constexpr double fd_rel_tol = 1e-7;
// vjp/jvp against the explicit Jacobian: same maths, different summation order; a few ulps of the
// O(1) entries times d terms.
constexpr double consistency_tol_double = 1e-13;
constexpr double consistency_tol_float = 2e-6;

template <class S>
double tolerance() {
  return std::is_same_v<S, float> ? consistency_tol_float : consistency_tol_double;
}

}  // namespace

TEMPLATE_TEST_CASE("softmax forward: rows sum to 1 and are positive", "[softmax][forward]", float,
                   double) {
  resnorm::normal_generator rng(7);
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const resnorm::index dim : {1, 2, 9}) {
      CAPTURE(rows, dim);
      const matrix<TestType> x = resnorm::random_normal<TestType>(rows, dim, rng, 3.0);
      const matrix<TestType> p = resnorm::softmax<TestType>().forward(x);
      REQUIRE(p.rows() == rows);
      REQUIRE(p.cols() == dim);
      for (resnorm::index t = 0; t < rows; ++t) {
        CHECK(static_cast<double>(p.row(t).sum()) == Approx(1.0).margin(tolerance<TestType>()));
        CHECK((p.row(t).array() > TestType(0)).all());
      }
    }
  }
}

TEST_CASE("softmax forward: matches the definition computed by hand", "[softmax][forward]") {
  matrix<double> x(1, 3);
  x << 1.0, 2.0, 3.0;
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const matrix<double> p = resnorm::softmax<double>().forward(x);
  CHECK(p(0, 0) == Approx(std::exp(1.0) / z).epsilon(1e-15));
  CHECK(p(0, 1) == Approx(std::exp(2.0) / z).epsilon(1e-15));
  CHECK(p(0, 2) == Approx(std::exp(3.0) / z).epsilon(1e-15));
}

TEMPLATE_TEST_CASE("softmax forward: max subtraction keeps large logits finite",
                   "[softmax][forward][numerics]", float, double) {
  // exp(1000) overflows both float and double; the shifted form gives softmax([0, 1]) exactly.
  matrix<TestType> x(2, 2);
  x << TestType(1000), TestType(1001), TestType(-1001), TestType(-1000);
  const matrix<TestType> p = resnorm::softmax<TestType>().forward(x);
  const double expected_hi = 1.0 / (1.0 + std::exp(-1.0));
  for (resnorm::index t = 0; t < 2; ++t) {
    CAPTURE(t);
    CHECK(std::isfinite(static_cast<double>(p(t, 0))));
    CHECK(static_cast<double>(p(t, 1)) == Approx(expected_hi).epsilon(tolerance<TestType>()));
    CHECK(static_cast<double>(p(t, 0)) == Approx(1.0 - expected_hi).epsilon(1e-6));
  }
}

TEST_CASE("softmax forward: -inf entries give exactly zero", "[softmax][forward][mask]") {
  const double inf = std::numeric_limits<double>::infinity();
  matrix<double> x(1, 3);
  x << 0.5, -inf, 0.5;
  const matrix<double> p = resnorm::softmax<double>().forward(x);
  CHECK(p(0, 1) == 0.0);
  CHECK(p(0, 0) == 0.5);
  CHECK(p(0, 2) == 0.5);
}

TEST_CASE("softmax jacobian: matches finite differences", "[softmax][jacobian]") {
  resnorm::normal_generator rng(11);
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const resnorm::index dim : {1, 2, 8}) {
      CAPTURE(rows, dim);
      const matrix<double> x = resnorm::random_normal<double>(rows, dim, rng, 2.0);
      const auto check = resnorm::check_jacobian(resnorm::softmax<double>(), x);
      INFO(check.describe());
      CHECK(check.max_abs_error <= fd_rel_tol);
    }
  }
}

TEMPLATE_TEST_CASE("softmax vjp and jvp: agree with the explicit Jacobian", "[softmax][vjp][jvp]",
                   float, double) {
  resnorm::normal_generator rng(13);
  const resnorm::softmax<TestType> f;
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const resnorm::index dim : {1, 2, 8}) {
      CAPTURE(rows, dim);
      const matrix<TestType> x = resnorm::random_normal<TestType>(rows, dim, rng, 2.0);
      const matrix<TestType> u = resnorm::random_normal<TestType>(rows, dim, rng);
      const matrix<TestType> v = resnorm::random_normal<TestType>(rows, dim, rng);
      const matrix<TestType> J = f.jacobian(x);
      const resnorm::vector<TestType> jt_u = J.transpose() * vec(u);
      const resnorm::vector<TestType> j_v = J * vec(v);
      const matrix<TestType> dx = f.vjp(x, u).dx;
      const matrix<TestType> jv = f.jvp(x, v);
      CHECK(max_abs(vec(dx) - jt_u) <= tolerance<TestType>());
      CHECK(max_abs(vec(jv) - j_v) <= tolerance<TestType>());
      // Adjoint identity ⟨u, J v⟩ = ⟨Jᵀ u, v⟩ from the two matrix-free products.
      const double lhs = (u.template cast<double>().cwiseProduct(jv.template cast<double>())).sum();
      const double rhs = (dx.template cast<double>().cwiseProduct(v.template cast<double>())).sum();
      CHECK(lhs == Approx(rhs).margin(10 * tolerance<TestType>()));
      // Each row's block annihilates the ones direction: softmax(x + c 1) = softmax(x).
      const matrix<TestType> ones = matrix<TestType>::Ones(rows, dim);
      CHECK(max_abs(f.jvp(x, ones)) <= tolerance<TestType>());
    }
  }
}

TEST_CASE("softmax: bad shapes throw naming both shapes", "[softmax][errors]") {
  const resnorm::softmax<double> f;
  const matrix<double> x = matrix<double>::Zero(2, 3);
  const matrix<double> dy = matrix<double>::Zero(3, 2);
  REQUIRE_THROWS_MATCHES(f.vjp(x, dy), std::invalid_argument,
                         resnorm_test::message_contains("softmax::vjp: dy is 3x2, x is 2x3"));
  REQUIRE_THROWS_MATCHES(f.jvp(x, dy), std::invalid_argument,
                         resnorm_test::message_contains("softmax::jvp: v is 3x2, x is 2x3"));
}
