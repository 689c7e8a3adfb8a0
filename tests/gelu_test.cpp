// Tests of resnorm/gelu.hpp: both forms against the long double reference over [−10, 10], the
// derivative at 0 and against finite differences, the known gap between the forms, the
// derivative triple (vjp, jvp, diagonal jacobian) and large |x|.
#include "resnorm/gelu.hpp"

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "reference/gelu_reference.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::gelu;
using resnorm::gelu_approximation;
using resnorm::matrix;
using resnorm_test::max_abs_diff;
using resnorm_test::random_matrix;

// ---- tolerances, one place -------------------------------------------------------------------

template <class S>
double eps_of() {
  return static_cast<double>(std::numeric_limits<S>::epsilon());
}

// erf form vs reference, relative: one rounding to S (eps/2) after a double evaluation whose
// only ill-conditioned step is erfc(−x/√2) for x ≪ 0 (condition number ≈ x²), so
// |error| ≤ 4 eps (1 + x²) |GELU(x)|.
template <class S>
double erf_tolerance(long double x, long double value) {
  const double xd = static_cast<double>(x);
  return 4 * eps_of<S>() * (1 + xd * xd) * std::abs(static_cast<double>(value));
}

// tanh form vs reference: the library's 1 + tanh u cancels for x ≪ 0, leaving an absolute error
// ~eps in the bracket, i.e. eps·|x|/2 in the value; plus one final rounding.
template <class S>
double tanh_tolerance(long double x, long double value) {
  return 4 * eps_of<S>() *
         (std::abs(static_cast<double>(value)) + std::abs(static_cast<double>(x)));
}

// Analytic Jacobian vs finite differences: GELU is smooth with |GELU'''| ≤ 1, so the central
// difference errs by ~eps^(2/3): 1e-9 in double; float carries its own rounding of f (eps_f/h ≈
// 2.4e-5 relative to |f|, |f| ≤ 3 here), so 1e-3.
template <class S>
double fd_tolerance() {
  return std::is_same_v<S, float> ? 1e-3 : 1e-9;
}

// x = −10, −10 + step, ..., 10 as a 1 x n matrix.
template <class S>
matrix<S> grid(double step) {
  const auto n = static_cast<Eigen::Index>(std::llround(20 / step)) + 1;
  matrix<S> x(1, n);
  for (Eigen::Index k = 0; k < n; ++k)
    x(0, k) = static_cast<S>(-10 + step * static_cast<double>(k));
  return x;
}

}  // namespace

TEMPLATE_TEST_CASE("gelu forward: both forms match the long double reference on [-10, 10]",
                   "[gelu][forward]", float, double) {
  using S = TestType;
  const matrix<S> x = grid<S>(0.005);
  const matrix<S> y_erf = gelu<S>(gelu_approximation::erf).forward(x);
  const matrix<S> y_tanh = gelu<S>(gelu_approximation::tanh).forward(x);
  int erf_failures = 0, tanh_failures = 0;
  for (Eigen::Index k = 0; k < x.cols(); ++k) {
    const long double xl = static_cast<long double>(x(0, k));
    const long double ref_erf = resnorm_reference::gelu_erf(xl);
    const long double ref_tanh = resnorm_reference::gelu_tanh(xl);
    const double e_erf = std::abs(static_cast<double>(y_erf(0, k)) - static_cast<double>(ref_erf));
    const double e_tanh =
        std::abs(static_cast<double>(y_tanh(0, k)) - static_cast<double>(ref_tanh));
    if (!(e_erf <= erf_tolerance<S>(xl, ref_erf))) {
      ++erf_failures;
      INFO("x = " << static_cast<double>(xl) << ": erf form error " << e_erf);
      CHECK(e_erf <= erf_tolerance<S>(xl, ref_erf));
    }
    if (!(e_tanh <= tanh_tolerance<S>(xl, ref_tanh))) {
      ++tanh_failures;
      INFO("x = " << static_cast<double>(xl) << ": tanh form error " << e_tanh);
      CHECK(e_tanh <= tanh_tolerance<S>(xl, ref_tanh));
    }
  }
  CHECK(erf_failures == 0);
  CHECK(tanh_failures == 0);
}

TEMPLATE_TEST_CASE("gelu derivative: GELU'(0) = 1/2 for both forms", "[gelu][derivative]", float,
                   double) {
  using S = TestType;
  // Φ(0) = 1/2 and the x φ(x) term vanishes; tanh 0 = 0 likewise: exact in floating point.
  CHECK(resnorm::gelu_erf_derivative(S(0)) == S(0.5));
  CHECK(resnorm::gelu_tanh_derivative(S(0)) == S(0.5));
  const matrix<S> zero = matrix<S>::Zero(2, 3);
  CHECK((gelu<S>(gelu_approximation::erf).derivative(zero).array() == S(0.5)).all());
  CHECK((gelu<S>(gelu_approximation::tanh).derivative(zero).array() == S(0.5)).all());
}

TEMPLATE_TEST_CASE("gelu derivative: matches the long double reference on [-10, 10]",
                   "[gelu][derivative]", float, double) {
  using S = TestType;
  const matrix<S> x = grid<S>(0.01);
  const matrix<S> d_erf = gelu<S>(gelu_approximation::erf).derivative(x);
  const matrix<S> d_tanh = gelu<S>(gelu_approximation::tanh).derivative(x);
  for (Eigen::Index k = 0; k < x.cols(); ++k) {
    const long double xl = static_cast<long double>(x(0, k));
    const double xd = static_cast<double>(xl);
    CAPTURE(xd);
    // erf: Φ + x φ, where exp(−x²/2) has condition number x²/2: 8 eps (1 + x²) (Φ + |x| φ).
    const double erf_scale = static_cast<double>(resnorm_reference::normal_cdf(xl) +
                                                 std::abs(xl) * resnorm_reference::normal_pdf(xl));
    CHECK(std::abs(static_cast<double>(d_erf(0, k)) -
                   static_cast<double>(resnorm_reference::gelu_erf_derivative(xl))) <=
          8 * eps_of<S>() * (1 + xd * xd) * erf_scale);
    // tanh: 1 + tanh u and 1 − tanh² u carry absolute errors ~eps, the latter multiplied by
    // |x| · √(2/π)(1 + 3·0.044715 x²).
    const double du = std::sqrt(2 / std::numbers::pi) * (1 + 3 * 0.044715 * xd * xd);
    CHECK(std::abs(static_cast<double>(d_tanh(0, k)) -
                   static_cast<double>(resnorm_reference::gelu_tanh_derivative(xl))) <=
          8 * eps_of<S>() * (1 + std::abs(xd) * du));
  }
}

TEST_CASE("gelu derivative: matches central differences of the scalar forms",
          "[gelu][derivative]") {
  // h = 1e-5: truncation h²|f'''|/6 ≤ 2e-11, rounding eps·|f|/h ≤ 2.2e-10 for |f| ≤ 10.
  const double h = 1e-5;
  for (double x = -10; x <= 10; x += 0.0625) {
    CAPTURE(x);
    const double fd_erf = (resnorm::gelu_erf(x + h) - resnorm::gelu_erf(x - h)) / (2 * h);
    const double fd_tanh = (resnorm::gelu_tanh(x + h) - resnorm::gelu_tanh(x - h)) / (2 * h);
    CHECK(resnorm::gelu_erf_derivative(x) == Approx(fd_erf).margin(1e-9));
    CHECK(resnorm::gelu_tanh_derivative(x) == Approx(fd_tanh).margin(1e-9));
  }
}

TEST_CASE("gelu: max |erf form - tanh form| is about 4.73e-4, near |x| = 2.7", "[gelu][forward]") {
  // The bracket [4.6e-4, 4.8e-4] is first established in long double from the reference, then
  // the library's double and float forms must find the same maximum.
  const double step = 1e-3;
  const auto n = static_cast<Eigen::Index>(std::llround(20 / step)) + 1;
  long double ref_max = 0, ref_arg = 0;
  for (Eigen::Index k = 0; k < n; ++k) {
    const long double x = -10.0L + static_cast<long double>(step) * static_cast<long double>(k);
    const long double gap =
        std::abs(resnorm_reference::gelu_erf(x) - resnorm_reference::gelu_tanh(x));
    if (gap > ref_max) {
      ref_max = gap;
      ref_arg = x;
    }
  }
  CAPTURE(static_cast<double>(ref_max), static_cast<double>(ref_arg));
  CHECK(ref_max >= 4.6e-4L);
  CHECK(ref_max <= 4.8e-4L);
  CHECK(std::abs(ref_arg) >= 2.6L);
  CHECK(std::abs(ref_arg) <= 2.8L);

  const matrix<double> x = grid<double>(step);
  const matrix<double> gap_double = (gelu<double>(gelu_approximation::erf).forward(x) -
                                     gelu<double>(gelu_approximation::tanh).forward(x))
                                        .cwiseAbs();
  CHECK(gap_double.maxCoeff() == Approx(static_cast<double>(ref_max)).epsilon(1e-9));
  const matrix<float> xf = grid<float>(step);
  const matrix<float> gap_float = (gelu<float>(gelu_approximation::erf).forward(xf) -
                                   gelu<float>(gelu_approximation::tanh).forward(xf))
                                      .cwiseAbs();
  // Two float roundings of values ≤ 3 (≤ 3.6e-7 each) on a 4.7e-4 gap: 2e-3 relative.
  CHECK(static_cast<double>(gap_float.maxCoeff()) ==
        Approx(static_cast<double>(ref_max)).epsilon(2e-3));
}

TEMPLATE_TEST_CASE("gelu vjp, jvp, jacobian: match finite differences and each other",
                   "[gelu][vjp][jvp][jacobian]", float, double) {
  using S = TestType;
  for (const gelu_approximation form : {gelu_approximation::erf, gelu_approximation::tanh}) {
    for (const Eigen::Index rows : {0, 1, 3}) {
      for (const Eigen::Index dim : {1, 2, 16}) {
        CAPTURE(form == gelu_approximation::erf ? "erf" : "tanh", rows, dim);
        const gelu<S> f(form);
        const matrix<S> x = random_matrix<S>(rows, dim, 200 + rows * 5 + dim, 1.5);
        resnorm_test::check_derivatives(f, x, fd_tolerance<S>());
      }
    }
  }
}

TEMPLATE_TEST_CASE("gelu jacobian: diagonal, holding GELU'(x) in vec order", "[gelu][jacobian]",
                   float, double) {
  using S = TestType;
  const gelu<S> f;
  const matrix<S> x = random_matrix<S>(3, 4, 211, 2.0);
  const matrix<S> J = f.jacobian(x);
  REQUIRE(J.rows() == 12);
  REQUIRE(J.cols() == 12);
  for (Eigen::Index r = 0; r < 12; ++r) {
    for (Eigen::Index c = 0; c < 12; ++c) {
      CAPTURE(r, c);
      // Entry r of vec(x) is x(r / 4, r % 4).
      const S expected = r == c ? resnorm::gelu_erf_derivative(x(r / 4, r % 4)) : S(0);
      CHECK(J(r, c) == expected);
    }
  }
  // vjp and jvp multiply by the same diagonal: the same products up to the slope's last bit. A
  // compiler that contracts a·b + c into one FMA (GCC's default in C++, -ffp-contract=fast) may
  // round the slope differently in each inlined copy of it (seen with g++ -O3 -march=native
  // before resnorm's CMake target set -ffp-contract=off; a consumer compiling the header without
  // that target may still see it), so the bound is the slope's ulp plus the product's rounding.
  const matrix<S> v = random_matrix<S>(3, 4, 212);
  const matrix<S> expected = f.derivative(x).cwiseProduct(v);
  const auto within_last_bit = [&](const matrix<S>& product) {
    const S bound = 2 * std::numeric_limits<S>::epsilon();
    return ((product - expected).array().abs() <= bound * expected.array().abs()).all();
  };
  CHECK(within_last_bit(f.jvp(x, v)));
  CHECK(within_last_bit(f.vjp(x, v).dx));
}

TEMPLATE_TEST_CASE("gelu: x = +-30 gives x or 0 and derivative 1 or 0", "[gelu][edge]", float,
                   double) {
  using S = TestType;
  for (const gelu_approximation form : {gelu_approximation::erf, gelu_approximation::tanh}) {
    CAPTURE(form == gelu_approximation::erf ? "erf" : "tanh");
    matrix<S> x(1, 2);
    x << S(30), S(-30);
    const gelu<S> f(form);
    const matrix<S> y = f.forward(x), d = f.derivative(x);
    CHECK(y.allFinite());
    CHECK(d.allFinite());
    // Φ(30) = 1 − 5e-198 rounds to 1; Φ(−30) ≈ 5e-198 (erf: a subnormal-free tiny, tanh: 0).
    CHECK(y(0, 0) == S(30));
    CHECK(std::abs(static_cast<double>(y(0, 1))) <= 1e-150);
    CHECK(d(0, 0) == S(1));
    CHECK(std::abs(static_cast<double>(d(0, 1))) <= 1e-150);
  }
}

TEMPLATE_TEST_CASE("gelu: the largest finite |x| gives finite values and derivatives",
                   "[gelu][edge]", float, double) {
  using S = TestType;
  const S big = std::is_same_v<S, float> ? std::numeric_limits<S>::max() : S(1e200);
  for (const gelu_approximation form : {gelu_approximation::erf, gelu_approximation::tanh}) {
    CAPTURE(form == gelu_approximation::erf ? "erf" : "tanh");
    matrix<S> x(1, 2);
    x << big, -big;
    const gelu<S> f(form);
    const matrix<S> y = f.forward(x), d = f.derivative(x);
    CHECK(y(0, 0) == big);
    CHECK(y(0, 1) == S(0));
    // GELU' → 1 and 0: the x (1 − tanh² u) du term is 0 · (huge or inf), which must not be NaN.
    CHECK(d(0, 0) == S(1));
    CHECK(d(0, 1) == S(0));
  }
}

TEMPLATE_TEST_CASE("gelu: infinities give the limits and NaN stays NaN", "[gelu][edge]", float,
                   double, long double) {
  using S = TestType;
  // GELU(x) = x·Φ(x): x → +inf gives +inf, x → −inf gives 0 (from below); GELU'(x) → 1 and 0.
  const S inf = std::numeric_limits<S>::infinity(), nan = std::numeric_limits<S>::quiet_NaN();
  for (const gelu_approximation form : {gelu_approximation::erf, gelu_approximation::tanh}) {
    CAPTURE(form == gelu_approximation::erf ? "erf" : "tanh");
    matrix<S> x(1, 3);
    x << inf, -inf, nan;
    const gelu<S> f(form);
    const matrix<S> y = f.forward(x), d = f.derivative(x);
    CHECK(y(0, 0) == inf);
    CHECK(y(0, 1) == S(0));
    CHECK(std::isnan(y(0, 2)));
    CHECK(d(0, 0) == S(1));
    CHECK(d(0, 1) == S(0));
    CHECK(std::isnan(d(0, 2)));
  }
}
