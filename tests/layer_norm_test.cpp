// Tests of resnorm/layer_norm.hpp: forward against the long double reference and hand-computed
// values, the statistics, the invariances, the derivatives (three ways), the spectrum of the
// Jacobian, non-finite and degenerate rows, argument checks and the Eigen view types.
#include "resnorm/layer_norm.hpp"

#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "reference/layer_norm_reference.hpp"
#include "resnorm/finite_difference.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::layer_norm;
using resnorm::matrix;
using resnorm::vector;
using resnorm_test::max_abs;
using resnorm_test::max_abs_diff;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;

// ---- tolerances, one place -------------------------------------------------------------------

template <class S>
double eps_of() {
  return static_cast<double>(std::numeric_limits<S>::epsilon());
}

// Forward vs the long double reference, per entry, relative to 1 + |y|: the float path computes
// in double and rounds once (≤ eps/2); the double path sums d ≤ 64 terms for the mean and the
// variance, whose worst-case relative error is (d − 1)·eps/2 ≤ 32 eps.
template <class S>
double forward_tolerance() {
  return 32 * eps_of<S>();
}

// Analytic Jacobian vs central finite differences (max_rel_error of check_jacobian). The step
// h = eps^(1/3) balances truncation h²·|f'''|/6 against rounding eps·|f|/h, both ~eps^(2/3)
// (5e-11 in double, 2.4e-5 in float) times the conditioning: LN's higher derivatives grow like
// rstd^k and |y| reaches sqrt(d) = 8 at d = 64, so allow a factor of ~100 on top: 1e-7 in
// double, 2e-3 in float.
template <class S>
double fd_tolerance() {
  return std::is_same_v<S, float> ? 2e-3 : 1e-7;
}

const std::vector<Eigen::Index> row_counts = {0, 1, 3};
const std::vector<Eigen::Index> dims = {1, 2, 5, 64};

enum class affine { none, gamma, gamma_beta, beta };

const char* affine_name(affine a) {
  switch (a) {
    case affine::none:
      return "none";
    case affine::gamma:
      return "gamma";
    case affine::gamma_beta:
      return "gamma and beta";
    case affine::beta:
      return "beta";
  }
  return "?";
}

// A layer with seeded random gamma (around 1) and beta, or without them.
template <class S>
layer_norm<S> make_layer(Eigen::Index dim, affine a, S eps = S(1e-5)) {
  vector<S> gamma, beta;
  if (a == affine::gamma || a == affine::gamma_beta) gamma = random_vector<S>(dim, 11, 0.5, 1.0);
  if (a == affine::beta || a == affine::gamma_beta) beta = random_vector<S>(dim, 12, 0.5, 0.0);
  return layer_norm<S>(gamma, beta, eps);
}

template <class S>
double reference_error(const layer_norm<S>& ln, const matrix<S>& x) {
  const auto y_ref =
      resnorm_reference::layer_norm_forward(x, static_cast<long double>(ln.eps), ln.gamma, ln.beta);
  const matrix<S> y = ln.forward(x);
  double worst = 0;
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    for (Eigen::Index j = 0; j < x.cols(); ++j) {
      const double ref = static_cast<double>(y_ref(t, j));
      const double e = std::abs(static_cast<double>(y(t, j)) - ref) / (1 + std::abs(ref));
      if (!(e <= worst)) worst = e;
    }
  }
  return worst;
}

}  // namespace

// ---- forward ---------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("layer_norm forward: matches the long double reference", "[layer_norm][forward]",
                   float, double) {
  for (const affine a : {affine::none, affine::gamma, affine::gamma_beta, affine::beta}) {
    for (const Eigen::Index rows : row_counts) {
      for (const Eigen::Index dim : dims) {
        CAPTURE(affine_name(a), rows, dim);
        const layer_norm<TestType> ln = make_layer<TestType>(dim, a);
        // Offset 3 and spread 2: the mean matters and the variance is far from eps.
        const matrix<TestType> x = random_matrix<TestType>(rows, dim, 100 + rows * 7 + dim, 2, 3);
        const matrix<TestType> y = ln.forward(x);
        REQUIRE(y.rows() == rows);
        REQUIRE(y.cols() == dim);
        CHECK(reference_error(ln, x) <= forward_tolerance<TestType>());
      }
    }
  }
}

TEMPLATE_TEST_CASE("layer_norm forward: LN([1, 2, 3, 4, 5]) by hand", "[layer_norm][forward]",
                   float, double) {
  const layer_norm<TestType> ln(5, TestType(1e-5));
  matrix<TestType> x(1, 5);
  x << 1, 2, 3, 4, 5;
  // mean 3, population variance (4 + 1 + 0 + 1 + 4)/5 = 2; eps as the layer stores it.
  const double eps = static_cast<double>(ln.eps);
  const matrix<TestType> y = ln.forward(x);
  for (Eigen::Index j = 0; j < 5; ++j) {
    CAPTURE(j);
    const double expected = (static_cast<double>(j + 1) - 3) / std::sqrt(2 + eps);
    CHECK(static_cast<double>(y(0, j)) == Approx(expected).epsilon(4 * eps_of<TestType>()));
  }
  // Mean 0, population std sqrt(2 / (2 + eps)) — just below 1 because of eps.
  const double mean = y.template cast<double>().mean();
  const double std_dev = std::sqrt((y.template cast<double>().array() - mean).square().mean());
  CHECK(std::abs(mean) <= 4 * eps_of<TestType>());
  CHECK(std_dev == Approx(std::sqrt(2 / (2 + eps))).epsilon(4 * eps_of<TestType>()));
  CHECK(std_dev < 1);
}

TEMPLATE_TEST_CASE("layer_norm forward: each output row has mean 0 and std sqrt(var/(var+eps))",
                   "[layer_norm][forward]", float, double) {
  const Eigen::Index dim = 64;
  const layer_norm<TestType> ln(dim, TestType(1e-5), resnorm::layer_norm_affine::none);
  // Rows of spread 1, 0.01 and 0.003 around different means: eps barely matters in the first
  // row, visibly in the second (var ≈ 1e-4) and strongly in the third (var ≈ eps).
  matrix<TestType> x(3, dim);
  x.row(0) = random_matrix<TestType>(1, dim, 21, 1.0, -2.0);
  x.row(1) = random_matrix<TestType>(1, dim, 22, 0.01, 5.0);
  x.row(2) = random_matrix<TestType>(1, dim, 23, 0.003, 0.25);
  const auto stats = resnorm_reference::layer_norm_stats(x, static_cast<long double>(ln.eps));
  const matrix<double> y = ln.forward(x).template cast<double>();
  for (Eigen::Index t = 0; t < 3; ++t) {
    CAPTURE(t);
    const double var = static_cast<double>(stats.var[t]);
    // Averages of 64 outputs each rounded to ~eps|y| with |y| ≤ 8, plus the rounding of the
    // computed mean, eps·|mean| absolute, which shifts every xhat by eps·|mean|·rstd.
    const double tol = 64 * eps_of<TestType>() *
                       (1 + std::abs(static_cast<double>(stats.mean[t] * stats.rstd[t])));
    const double mean = y.row(t).mean();
    const double std_dev = std::sqrt((y.row(t).array() - mean).square().mean());
    CHECK(std::abs(mean) <= tol);
    CHECK(std_dev == Approx(std::sqrt(var / (var + static_cast<double>(ln.eps)))).epsilon(tol));
  }
  // The eps effect is real in the third row: its std is well below 1.
  CHECK(std::sqrt((y.row(2).array() - y.row(2).mean()).square().mean()) < 0.8);
}

TEST_CASE("layer_norm forward: LN(a x + b) = LN(x) with eps = 0", "[layer_norm][forward]") {
  const Eigen::Index dim = 16;
  const layer_norm<double> ln(dim, 0.0, resnorm::layer_norm_affine::none);
  const matrix<double> x = random_matrix<double>(3, dim, 31);
  for (const double a : {3.7, 0.02, 150.0, -1.5}) {
    for (const double b : {0.0, -2.5, 40.0}) {
      CAPTURE(a, b);
      const matrix<double> moved = (a * x.array() + b).matrix();
      // Scaling by a < 0 flips the sign: LN(a x + b) = sign(a) LN(x).
      const double sign = a < 0 ? -1.0 : 1.0;
      CHECK(max_abs_diff(ln.forward(moved), sign * ln.forward(x)) <= 1e-12);
    }
  }
}

TEST_CASE("layer_norm forward: LN(a x + b) with eps > 0 differs by sqrt((var+eps)/(var+eps/a²))",
          "[layer_norm][forward]") {
  const Eigen::Index dim = 16;
  const double eps = 1e-5;
  const layer_norm<double> ln(dim, eps, resnorm::layer_norm_affine::none);
  // Spread 0.1: var ≈ 1e-2, so eps/var ≈ 1e-3 and the effect is far above rounding.
  const matrix<double> x = random_matrix<double>(3, dim, 32, 0.1, 1.0);
  const auto stats = resnorm_reference::layer_norm_stats(x, 0.0L);
  for (const double a : {3.0, 0.5}) {
    const double b = -7.0;
    CAPTURE(a, b);
    const matrix<double> moved = (a * x.array() + b).matrix();
    const matrix<double> y = ln.forward(x), y_moved = ln.forward(moved);
    // LN(a x + b) = a (x − mean) / sqrt(a² var + eps) = LN(x) · sqrt((var + eps)/(var + eps/a²)).
    for (Eigen::Index t = 0; t < 3; ++t) {
      CAPTURE(t);
      const double var = static_cast<double>(stats.var[t]);
      const double ratio = std::sqrt((var + eps) / (var + eps / (a * a)));
      CHECK(max_abs_diff(y_moved.row(t), ratio * y.row(t)) <= 1e-12);
      // ... and that difference is genuinely there.
      CHECK(max_abs_diff(y_moved.row(t), y.row(t)) > 1e-6);
    }
  }
}

TEMPLATE_TEST_CASE("layer_norm forward_with_stats: mean and rstd match the reference",
                   "[layer_norm][forward]", float, double) {
  for (const Eigen::Index rows : row_counts) {
    for (const Eigen::Index dim : dims) {
      CAPTURE(rows, dim);
      const layer_norm<TestType> ln = make_layer<TestType>(dim, affine::gamma_beta);
      const matrix<TestType> x = random_matrix<TestType>(rows, dim, 41 + dim, 1.5, -1.0);
      const auto out = ln.forward_with_stats(x);
      const auto ref = resnorm_reference::layer_norm_stats(x, static_cast<long double>(ln.eps));
      REQUIRE(out.stats.mean.size() == rows);
      REQUIRE(out.stats.rstd.size() == rows);
      // Stored in double for both scalars, but a float layer may compute them in float
      // arithmetic: the bound is the forward's, in the layer's own eps.
      for (Eigen::Index t = 0; t < rows; ++t) {
        CAPTURE(t);
        const double tol = forward_tolerance<TestType>();
        CHECK(out.stats.mean[t] ==
              Approx(static_cast<double>(ref.mean[t])).epsilon(tol).margin(tol));
        CHECK(out.stats.rstd[t] == Approx(static_cast<double>(ref.rstd[t])).epsilon(tol));
      }
      CHECK(max_abs_diff(out.y, ln.forward(x)) == 0);
    }
  }
}

// ---- vjp -------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("layer_norm vjp: the overload taking stats gives the same gradients",
                   "[layer_norm][vjp]", float, double) {
  const layer_norm<TestType> ln = make_layer<TestType>(5, affine::gamma_beta);
  const matrix<TestType> x = random_matrix<TestType>(3, 5, 51);
  const matrix<TestType> dy = random_matrix<TestType>(3, 5, 52);
  const auto a = ln.vjp(x, dy);
  const auto b = ln.vjp(x, dy, ln.forward_with_stats(x).stats);
  CHECK(max_abs_diff(a.dx, b.dx) == 0);
  CHECK(max_abs_diff(a.dgamma, b.dgamma) == 0);
  CHECK(max_abs_diff(a.dbeta, b.dbeta) == 0);
}

TEMPLATE_TEST_CASE("layer_norm vjp: dgamma and dbeta match finite differences of <u, LN(x)>",
                   "[layer_norm][vjp]", float, double) {
  using S = TestType;
  for (const Eigen::Index rows : row_counts) {
    for (const Eigen::Index dim : {1, 2, 5, 64}) {
      CAPTURE(rows, dim);
      const layer_norm<S> ln = make_layer<S>(dim, affine::gamma_beta);
      const matrix<S> x = random_matrix<S>(rows, dim, 61 + dim, 1.0, 0.5);
      const matrix<S> u = random_matrix<S>(rows, dim, 62 + dim);
      const auto grad = ln.vjp(x, u);
      REQUIRE(grad.dgamma.size() == dim);
      REQUIRE(grad.dbeta.size() == dim);

      // The loss is linear in gamma and in beta: central differences are exact up to rounding
      // of the loss (~eps·Σ|u y|) divided by the step (eps^(1/3)·max(1, |p|)).
      const auto loss_of_gamma = [&](const vector<S>& g) {
        return (u.template cast<double>().array() *
                layer_norm<S>(g, ln.beta, ln.eps).forward(x).template cast<double>().array())
            .sum();
      };
      const auto loss_of_beta = [&](const vector<S>& b) {
        return (u.template cast<double>().array() *
                layer_norm<S>(ln.gamma, b, ln.eps).forward(x).template cast<double>().array())
            .sum();
      };
      const auto dgamma_fd = resnorm::finite_difference_gradient(loss_of_gamma, ln.gamma);
      const auto dbeta_fd = resnorm::finite_difference_gradient(loss_of_beta, ln.beta);
      const double scale = 1 + max_abs(dgamma_fd) + max_abs(dbeta_fd);
      CHECK(max_abs_diff(grad.dgamma, dgamma_fd) <= fd_tolerance<S>() * scale);
      CHECK(max_abs_diff(grad.dbeta, dbeta_fd) <= fd_tolerance<S>() * scale);
      // dbeta = Σ_rows u exactly as a sum; dgamma = Σ_rows u ⊙ xhat against the reference.
      const auto xhat = resnorm_reference::layer_norm_xhat(x, static_cast<long double>(ln.eps));
      for (Eigen::Index j = 0; j < dim; ++j) {
        long double dg = 0, db = 0;
        for (Eigen::Index t = 0; t < rows; ++t) {
          dg += static_cast<long double>(u(t, j)) * xhat(t, j);
          db += static_cast<long double>(u(t, j));
        }
        CHECK(static_cast<double>(grad.dgamma[j]) ==
              Approx(static_cast<double>(dg)).margin(16 * eps_of<S>()));
        CHECK(static_cast<double>(grad.dbeta[j]) ==
              Approx(static_cast<double>(db)).margin(16 * eps_of<S>()));
      }
    }
  }
}

// The size of the terms LayerNorm's Jacobian entries are differences of: max|gamma| · max rstd.
template <class S>
double entry_scale(const layer_norm<S>& ln, const matrix<S>& x) {
  const auto stats = resnorm_reference::layer_norm_stats(x, static_cast<long double>(ln.eps));
  const double rstd = x.rows() ? static_cast<double>(stats.rstd.maxCoeff()) : 0.0;
  return rstd * (ln.has_gamma() ? max_abs(ln.gamma) : 1.0);
}

TEMPLATE_TEST_CASE("layer_norm vjp, jvp, jacobian: match finite differences and each other",
                   "[layer_norm][vjp][jvp][jacobian]", float, double) {
  using S = TestType;
  for (const affine a : {affine::none, affine::gamma_beta}) {
    for (const Eigen::Index rows : row_counts) {
      for (const Eigen::Index dim : dims) {
        // At d = 2 the Jacobian is only its eps term, eps·rstd³/2 · [[1, −1], [−1, 1]]: with
        // eps = 1e-5 it sits below float's finite-difference noise (eps_f/h ≈ 2.4e-5), so that
        // width is checked where the term is O(1).
        const S eps = dim == 2 ? S(0.5) : S(1e-5);
        CAPTURE(affine_name(a), rows, dim, eps);
        const layer_norm<S> ln = make_layer<S>(dim, a, eps);
        const matrix<S> x = random_matrix<S>(rows, dim, 71 + 3 * rows + dim, 1.0, 0.3);
        resnorm_test::check_derivatives(ln, x, fd_tolerance<S>(), entry_scale(ln, x));
      }
    }
  }
}

TEMPLATE_TEST_CASE("layer_norm jacobian: matches the closed form entry by entry",
                   "[layer_norm][jacobian]", float, double) {
  using S = TestType;
  for (const Eigen::Index dim : {1, 2, 5, 64}) {
    CAPTURE(dim);
    const layer_norm<S> ln = make_layer<S>(dim, affine::gamma_beta);
    const matrix<S> x = random_matrix<S>(3, dim, 81 + dim, 2.0, 1.0);
    const auto J_ref =
        resnorm_reference::layer_norm_jacobian(x, static_cast<long double>(ln.eps), ln.gamma);
    const matrix<S> J = ln.jacobian(x);
    // Entries are gamma·rstd·(δ − 1/d − xhat xhat/d), computed in the accumulator type and
    // rounded once: the error scales with the terms, gamma·rstd, not with the (possibly
    // cancelled, at d = 2) entry.
    CHECK(max_abs_diff(J, J_ref) <= 16 * eps_of<S>() * entry_scale(ln, x));
  }
}

TEMPLATE_TEST_CASE("layer_norm jacobian: J 1 = 0, each row's block annihilates the ones direction",
                   "[layer_norm][jacobian]", float, double) {
  using S = TestType;
  for (const affine a : {affine::none, affine::gamma_beta}) {
    for (const Eigen::Index dim : {1, 2, 5, 64}) {
      CAPTURE(affine_name(a), dim);
      const layer_norm<S> ln = make_layer<S>(dim, a);
      const matrix<S> x = random_matrix<S>(3, dim, 91 + dim, 1.0, -4.0);
      const matrix<double> J = ln.jacobian(x).template cast<double>();
      const resnorm::vector<double> J_ones = J * resnorm::vector<double>::Ones(J.cols());
      // A sum of d entries of size ≤ max|J| that cancels exactly in exact arithmetic.
      CHECK(max_abs(J_ones) <= 2 * dim * eps_of<S>() * max_abs(J));
      const matrix<S> ones = matrix<S>::Ones(3, dim);
      CHECK(max_abs(ln.jvp(x, ones)) <= 2 * dim * eps_of<S>() * max_abs(J));
    }
  }
}

TEST_CASE("layer_norm jacobian: singular values rstd (d-2 times), eps rstd^3 and 0",
          "[layer_norm][jacobian]") {
  // gamma = 1. Per row, J_t = rstd (I − 1 1ᵀ/d − xhat xhatᵀ/d) with 1 ⟂ xhat and
  // |xhat|² = d var/(var + eps): 1 is mapped to 0, xhat to rstd (1 − var/(var + eps)) xhat
  // = eps rstd³ xhat, and the d − 2 directions orthogonal to both to rstd times themselves.
  for (const double eps : {1e-5, 0.0}) {
    for (const Eigen::Index dim : {2, 5, 64}) {
      CAPTURE(eps, dim);
      const layer_norm<double> ln(dim, eps, resnorm::layer_norm_affine::none);
      matrix<double> x(3, dim);
      x.row(0) = random_matrix<double>(1, dim, 101, 1.0, 0.0);
      x.row(1) = random_matrix<double>(1, dim, 102, 0.01, 3.0);  // var ≈ 1e-4: eps rstd³ ≈ 8
      x.row(2) = random_matrix<double>(1, dim, 103, 0.1, -1.0);
      const auto stats = resnorm_reference::layer_norm_stats(x, static_cast<long double>(eps));
      const matrix<double> J = ln.jacobian(x);
      for (Eigen::Index t = 0; t < 3; ++t) {
        CAPTURE(t);
        const double var = static_cast<double>(stats.var[t]);
        const double rstd = 1 / std::sqrt(var + eps);
        const matrix<double> block = J.block(t * dim, t * dim, dim, dim);
        Eigen::JacobiSVD<Eigen::MatrixXd> svd(block, Eigen::ComputeFullV);
        std::vector<double> expected(static_cast<std::size_t>(dim - 2), rstd);
        expected.push_back(eps * rstd * rstd * rstd);
        expected.push_back(0.0);
        std::sort(expected.begin(), expected.end(), std::greater<>());
        const Eigen::VectorXd& sv = svd.singularValues();  // descending
        // SVD in double: singular values to ~eps·‖J‖ = eps·rstd, plus the rounding of the
        // centred values, eps·|mean| absolute, i.e. eps·|mean|·rstd relative in xhat.
        const double mean = static_cast<double>(stats.mean[t]);
        const double tol = 64 * eps_of<double>() * rstd * (1 + std::abs(mean) * rstd);
        for (Eigen::Index k = 0; k < dim; ++k) {
          CAPTURE(k);
          CHECK(std::abs(sv[k] - expected[static_cast<std::size_t>(k)]) <= tol);
        }
        // The smallest singular value's right vector is 1/sqrt(d) (eps > 0: it is unique).
        if (eps > 0) {
          const Eigen::VectorXd ones = Eigen::VectorXd::Ones(dim) / std::sqrt(double(dim));
          CHECK(std::abs(svd.matrixV().col(dim - 1).dot(ones)) == Approx(1).epsilon(1e-10));
          // and xhat/|xhat| belongs to eps rstd³, the second smallest (below rstd for var > 0).
          Eigen::VectorXd xhat = (x.row(t).array() - static_cast<double>(stats.mean[t])).matrix();
          xhat.normalize();
          CHECK(std::abs(svd.matrixV().col(dim - 2).dot(xhat)) == Approx(1).epsilon(1e-10));
        }
      }
    }
  }
}

// ---- degenerate and non-finite input ----------------------------------------------------------

TEST_CASE("layer_norm forward: eps = 0 on a constant row gives NaN in that row only",
          "[layer_norm][forward][edge]") {
  const layer_norm<double> ln(5, 0.0, resnorm::layer_norm_affine::none);
  matrix<double> x = random_matrix<double>(3, 5, 111);
  x.row(1).setConstant(3.0);  // exactly representable: mean 3, var 0, rstd = inf, 0 · inf = NaN
  const matrix<double> y = ln.forward(x);
  for (Eigen::Index j = 0; j < 5; ++j) CHECK(std::isnan(y(1, j)));
  const auto y_ref = resnorm_reference::layer_norm_forward(x, 0.0L);
  for (const Eigen::Index t : {0, 2}) {
    CAPTURE(t);
    CHECK(y.row(t).allFinite());
    CHECK(max_abs_diff(y.row(t), y_ref.row(t)) <= forward_tolerance<double>() * 3);
  }
}

TEST_CASE("layer_norm: NaN and infinities stay in their row", "[layer_norm][forward][edge]") {
  const layer_norm<double> ln = make_layer<double>(5, affine::gamma_beta);
  const matrix<double> clean = random_matrix<double>(3, 5, 121);
  const matrix<double> dy = random_matrix<double>(3, 5, 122);
  const matrix<double> y_clean = ln.forward(clean);
  const matrix<double> dx_clean = ln.vjp(clean, dy).dx;
  const matrix<double> jv_clean = ln.jvp(clean, dy);
  for (const double bad :
       {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity()}) {
    CAPTURE(bad);
    matrix<double> x = clean;
    x(1, 2) = bad;
    const matrix<double> y = ln.forward(x);
    const matrix<double> dx = ln.vjp(x, dy).dx;
    const matrix<double> jv = ln.jvp(x, dy);
    // The mean and the variance of row 1 are NaN (inf − inf), so all of it is NaN.
    for (Eigen::Index j = 0; j < 5; ++j) {
      CHECK(std::isnan(y(1, j)));
      CHECK(std::isnan(dx(1, j)));
      CHECK(std::isnan(jv(1, j)));
    }
    for (const Eigen::Index t : {0, 2}) {
      CAPTURE(t);
      CHECK(max_abs_diff(y.row(t), y_clean.row(t)) == 0);
      CHECK(max_abs_diff(dx.row(t), dx_clean.row(t)) == 0);
      CHECK(max_abs_diff(jv.row(t), jv_clean.row(t)) == 0);
    }
  }
}

TEMPLATE_TEST_CASE("layer_norm: zero rows give empty results", "[layer_norm][edge]", float,
                   double) {
  const layer_norm<TestType> ln = make_layer<TestType>(4, affine::gamma_beta);
  const matrix<TestType> x(0, 4);
  CHECK(ln.forward(x).rows() == 0);
  CHECK(ln.forward(x).cols() == 4);
  const auto grad = ln.vjp(x, x);
  CHECK(grad.dx.rows() == 0);
  CHECK(grad.dx.cols() == 4);
  // A sum over no rows: zero gradients of the right length.
  REQUIRE(grad.dgamma.size() == 4);
  REQUIRE(grad.dbeta.size() == 4);
  CHECK(max_abs(grad.dgamma) == 0);
  CHECK(max_abs(grad.dbeta) == 0);
  CHECK(ln.jvp(x, x).rows() == 0);
  CHECK(ln.jacobian(x).size() == 0);
  CHECK(ln.forward_with_stats(x).stats.mean.size() == 0);
}

TEMPLATE_TEST_CASE("layer_norm forward: d = 1 gives beta", "[layer_norm][forward][edge]", float,
                   double) {
  const layer_norm<TestType> ln = make_layer<TestType>(1, affine::gamma_beta);
  const matrix<TestType> x = random_matrix<TestType>(3, 1, 131, 10.0);
  const matrix<TestType> y = ln.forward(x);
  // x − mean is exactly 0 for a single feature, so y = gamma · 0 + beta exactly.
  for (Eigen::Index t = 0; t < 3; ++t) CHECK(y(t, 0) == ln.beta[0]);
  // No direction survives: the Jacobian and every gradient wrt x vanish.
  CHECK(max_abs(ln.jacobian(x)) == 0);
  CHECK(max_abs(ln.vjp(x, x).dx) == 0);
}

// ---- argument checks -------------------------------------------------------------------------

TEST_CASE("layer_norm: bad arguments throw std::invalid_argument naming both shapes",
          "[layer_norm][errors]") {
  using resnorm_test::contains;
  using resnorm_test::message_contains;
  const matrix<double> x = random_matrix<double>(2, 5, 141);

  SECTION("gamma length differs from d") {
    const layer_norm<double> ln(random_vector<double>(4, 1), vector<double>());
    REQUIRE_THROWS_MATCHES(ln.forward(x), std::invalid_argument,
                           message_contains("gamma has 4 elements"));
    CHECK_THROWS_WITH(ln.forward(x), contains("x has 5 columns"));
    CHECK_THROWS_WITH(ln.vjp(x, x), contains("x has 5 columns"));
    CHECK_THROWS_WITH(ln.jvp(x, x), contains("gamma has 4 elements"));
    CHECK_THROWS_WITH(ln.jacobian(x), contains("gamma has 4 elements"));
  }
  SECTION("beta length differs from d") {
    const layer_norm<double> ln(vector<double>(), random_vector<double>(7, 2));
    REQUIRE_THROWS_MATCHES(ln.forward(x), std::invalid_argument,
                           message_contains("beta has 7 elements"));
    CHECK_THROWS_WITH(ln.forward(x), contains("x has 5 columns"));
  }
  SECTION("gamma and beta of different lengths") {
    REQUIRE_THROWS_AS(layer_norm<double>(random_vector<double>(4, 1), random_vector<double>(6, 2)),
                      std::invalid_argument);
    CHECK_THROWS_WITH(layer_norm<double>(random_vector<double>(4, 1), random_vector<double>(6, 2)),
                      contains("6") && contains("4"));
  }
  SECTION("dy shape differs from x") {
    const layer_norm<double> ln(5);
    const matrix<double> dy = random_matrix<double>(3, 5, 142);
    REQUIRE_THROWS_MATCHES(ln.vjp(x, dy), std::invalid_argument, message_contains("dy is 3x5"));
    CHECK_THROWS_WITH(ln.vjp(x, dy), contains("x is 2x5"));
    CHECK_THROWS_WITH(ln.jvp(x, dy), contains("3x5") && contains("2x5"));
  }
  SECTION("stats of the wrong length") {
    const layer_norm<double> ln(5);
    const auto stats = ln.forward_with_stats(random_matrix<double>(3, 5, 143)).stats;
    REQUIRE_THROWS_MATCHES(ln.vjp(x, x, stats), std::invalid_argument,
                           message_contains("has 3 elements"));
    CHECK_THROWS_WITH(ln.vjp(x, x, stats), contains("x has 2 rows"));
  }
  SECTION("eps < 0 or NaN") {
    CHECK_THROWS_AS(layer_norm<double>(5, -1e-5), std::invalid_argument);
    CHECK_THROWS_WITH(layer_norm<double>(5, -1e-5), contains("eps"));
    CHECK_THROWS_AS(layer_norm<double>(5, std::numeric_limits<double>::quiet_NaN()),
                    std::invalid_argument);
    layer_norm<double> ln(5);
    ln.eps = -1;  // a public member: the entry points check it again
    CHECK_THROWS_WITH(ln.forward(x), contains("eps"));
    ln.eps = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH(ln.forward(x), contains("eps"));
    CHECK_THROWS_AS(ln.vjp(x, x), std::invalid_argument);
  }
}

// ---- Eigen views -----------------------------------------------------------------------------

TEMPLATE_TEST_CASE("layer_norm: Map, row-major block and Ref inputs bind without a copy and agree",
                   "[layer_norm][eigen]", float, double) {
  using S = TestType;
  const Eigen::Index dim = 7;
  const layer_norm<S> ln = make_layer<S>(dim, affine::gamma_beta);
  const matrix<S> big = random_matrix<S>(4, dim, 151, 1.0, 2.0);
  const matrix<S> plain = big.middleRows(1, 2);
  const matrix<S> dy = random_matrix<S>(2, dim, 152);

  // Each view binds to matrix_cref without a temporary: the Ref points into big itself.
  const Eigen::Map<const matrix<S>> map(big.data() + dim, 2, dim);
  const resnorm::matrix_cref<S> from_map(map);
  const resnorm::matrix_cref<S> from_block(big.middleRows(1, 2));
  CHECK(from_map.data() == big.data() + dim);
  CHECK(from_block.data() == big.data() + dim);

  // Summation order may follow the address's alignment: allow a few ulps.
  const double tol = 8 * eps_of<S>() * (1 + max_abs(ln.forward(plain)));
  const matrix<S> y = ln.forward(plain);
  CHECK(max_abs_diff(ln.forward(map), y) <= tol);
  CHECK(max_abs_diff(ln.forward(big.middleRows(1, 2)), y) <= tol);
  CHECK(max_abs_diff(ln.forward(from_block), y) <= tol);

  const auto grad = ln.vjp(plain, dy);
  const auto grad_map = ln.vjp(map, dy);
  const auto grad_block = ln.vjp(big.middleRows(1, 2), dy);
  const double gtol = 8 * eps_of<S>() * (1 + max_abs(grad.dx) + max_abs(grad.dgamma));
  CHECK(max_abs_diff(grad_map.dx, grad.dx) <= gtol);
  CHECK(max_abs_diff(grad_block.dx, grad.dx) <= gtol);
  CHECK(max_abs_diff(grad_block.dgamma, grad.dgamma) <= gtol);
  CHECK(max_abs_diff(ln.jvp(from_map, dy), ln.jvp(plain, dy)) <= gtol);
  CHECK(max_abs_diff(ln.jacobian(from_block), ln.jacobian(plain)) <= gtol);

  // A column block of a row-major matrix has an outer stride: it binds without a copy too.
  const matrix<S> wide = random_matrix<S>(2, dim + 3, 153);
  const resnorm::matrix_cref<S> cols(wide.middleCols(2, dim));
  CHECK(cols.data() == wide.data() + 2);
  const matrix<S> cols_plain = wide.middleCols(2, dim);
  CHECK(max_abs_diff(ln.forward(cols), ln.forward(cols_plain)) <= tol);
}
