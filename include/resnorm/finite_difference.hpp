// resnorm/finite_difference.hpp — central finite differences, to check analytic derivatives.
//
// finite_difference_jacobian(f, x): column k of the (T·d_out) x (T·d_in) Jacobian is
//   (vec f(x + h_k e_k) − vec f(x − h_k e_k)) / (2 h_k),
// formed in double whatever f's scalar, with a step chosen per entry:
//   h_k = relative_step · max(1, |x_k|),  relative_step = cbrt(machine epsilon of the scalar)
// by default, which balances the O(h²) truncation error of the central difference against the
// O(eps/h) rounding error: both ~eps^(2/3), about 4e-11 in double and 2.4e-5 in float (relative
// to the size of f's third derivative and of f). The step actually taken is (x + h) − x, so the
// divisor matches the perturbation exactly in the scalar's arithmetic.
//
// check_jacobian(f, x) compares f.jacobian(x) with it and reports the worst absolute error, the
// error relative to the largest entry of the numeric Jacobian, and where the worst entry sits.
// finite_difference_gradient(loss, p) does the same for a scalar loss of a parameter array,
// for checking parameter gradients (dgamma, dweight, ...).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

struct finite_difference_options {
  double relative_step = 0;  // 0: cbrt(machine epsilon) of the map's scalar type
};

struct jacobian_check {
  double max_abs_error = 0;  // max |analytic − numeric| over all entries
  double max_rel_error = 0;  // max_abs_error / max |numeric| (0 when both are all zero)
  double scale = 0;          // max |numeric|
  index row = -1, col = -1;  // the worst entry, in vec(y) x vec(x) indexing (see matrix.hpp)
  index output_token = -1, output_feature = -1;  // row as (t, i) of y
  index input_token = -1, input_feature = -1;    // col as (s, j) of x
  double analytic = 0, numeric = 0;              // the two values at the worst entry

  std::string describe() const {
    std::ostringstream s;
    s << "max abs error " << max_abs_error << ", relative " << max_rel_error << " (scale " << scale
      << ") at J[" << row << ", " << col << "] = d y(" << output_token << ", " << output_feature
      << ") / d x(" << input_token << ", " << input_feature << "): analytic " << analytic
      << ", numeric " << numeric;
    return s.str();
  }
};

namespace detail {

template <class Scalar>
double default_relative_step(double relative_step) {
  return relative_step > 0 ? relative_step
                           : std::cbrt(static_cast<double>(std::numeric_limits<Scalar>::epsilon()));
}

// Perturbs entry k of p by ±h and returns the two exactly representable steps taken.
template <class Array>
std::pair<double, double> perturbed_pair(const Array& p, index k, double relative_step, Array& plus,
                                         Array& minus) {
  using Scalar = typename Array::Scalar;
  const Scalar center = p.data()[k];
  const Scalar h =
      static_cast<Scalar>(relative_step * std::max(1.0, std::abs(static_cast<double>(center))));
  plus.data()[k] = center + h;
  minus.data()[k] = center - h;
  return {static_cast<double>(plus.data()[k]) - static_cast<double>(center),
          static_cast<double>(center) - static_cast<double>(minus.data()[k])};
}

}  // namespace detail

template <class F>
matrix<double> finite_difference_jacobian(const F& f, matrix_cref<typename F::scalar_type> x,
                                          finite_difference_options options = {}) {
  static_assert(require_differentiable_map<F>());
  using Scalar = typename F::scalar_type;
  const double relative_step = detail::default_relative_step<Scalar>(options.relative_step);
  const matrix<Scalar> x0 = x;
  const index outputs = f.forward(x0).size();
  matrix<double> J(outputs, x0.size());
  matrix<Scalar> plus = x0, minus = x0;
  for (index k = 0; k < x0.size(); ++k) {
    const auto [step_up, step_down] = detail::perturbed_pair(x0, k, relative_step, plus, minus);
    const matrix<Scalar> y_plus = f.forward(plus), y_minus = f.forward(minus);
    J.col(k) = (Eigen::Map<const vector<Scalar>>(y_plus.data(), outputs).template cast<double>() -
                Eigen::Map<const vector<Scalar>>(y_minus.data(), outputs).template cast<double>()) /
               (step_up + step_down);
    plus.data()[k] = x0.data()[k];
    minus.data()[k] = x0.data()[k];
  }
  return J;
}

// Compares two Jacobians of the same map; shapes give the token/feature decomposition.
// tokens = 0 skips it (the worst entry's token and feature stay −1).
inline jacobian_check compare_jacobians(const matrix<double>& analytic,
                                        const matrix<double>& numeric, index tokens) {
  detail::check_same_shape("compare_jacobians", "analytic", analytic, "numeric", numeric);
  // A (T·d_out) x (T·d_in) Jacobian: any other token count would place the worst entry at a
  // wrong (token, feature) without a word.
  if (tokens < 0) {
    detail::fail("compare_jacobians", "tokens must be >= 0, got " + std::to_string(tokens));
  }
  if (tokens > 0 && (analytic.rows() % tokens != 0 || analytic.cols() % tokens != 0)) {
    detail::fail("compare_jacobians", "analytic is " +
                                          detail::shape_string(analytic.rows(), analytic.cols()) +
                                          ", tokens = " + std::to_string(tokens) +
                                          " (rows and columns must be multiples of tokens)");
  }
  jacobian_check c;
  c.scale = numeric.size() ? numeric.cwiseAbs().maxCoeff() : 0.0;
  for (index r = 0; r < analytic.rows(); ++r) {
    for (index k = 0; k < analytic.cols(); ++k) {
      const double e = std::abs(analytic(r, k) - numeric(r, k));
      // !(e <= max) also catches a NaN error, which must never pass unnoticed.
      if (c.row < 0 || (!std::isnan(c.max_abs_error) && !(e <= c.max_abs_error))) {
        c.max_abs_error = e;
        c.row = r;
        c.col = k;
      }
    }
  }
  if (c.row >= 0) {
    c.analytic = analytic(c.row, c.col);
    c.numeric = numeric(c.row, c.col);
    const index d_out = tokens > 0 ? analytic.rows() / tokens : 0;
    const index d_in = tokens > 0 ? analytic.cols() / tokens : 0;
    if (d_out > 0 && d_in > 0) {
      c.output_token = c.row / d_out;
      c.output_feature = c.row % d_out;
      c.input_token = c.col / d_in;
      c.input_feature = c.col % d_in;
    }
  }
  c.max_rel_error = c.scale > 0
                        ? c.max_abs_error / c.scale
                        : (c.max_abs_error > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  if (std::isnan(c.max_abs_error)) c.max_rel_error = c.max_abs_error;
  return c;
}

template <class F>
jacobian_check check_jacobian(const F& f, matrix_cref<typename F::scalar_type> x,
                              finite_difference_options options = {}) {
  const matrix<double> analytic = f.jacobian(x).template cast<double>();
  const matrix<double> numeric = finite_difference_jacobian(f, x, options);
  return compare_jacobians(analytic, numeric, x.rows());
}

// Gradient of a scalar loss(p) with respect to every entry of p (a matrix or vector), by
// central differences: the reference for parameter gradients such as dgamma or dweight.
template <class Array, class Loss>
Eigen::Matrix<double, Array::RowsAtCompileTime, Array::ColsAtCompileTime,
              Array::IsRowMajor ? Eigen::RowMajor : Eigen::ColMajor>
finite_difference_gradient(Loss&& loss, const Array& p, finite_difference_options options = {}) {
  using Scalar = typename Array::Scalar;
  const double relative_step = detail::default_relative_step<Scalar>(options.relative_step);
  Eigen::Matrix<double, Array::RowsAtCompileTime, Array::ColsAtCompileTime,
                Array::IsRowMajor ? Eigen::RowMajor : Eigen::ColMajor>
      grad(p.rows(), p.cols());
  Array plus = p, minus = p;
  for (index k = 0; k < p.size(); ++k) {
    const auto [step_up, step_down] = detail::perturbed_pair(p, k, relative_step, plus, minus);
    grad.data()[k] = (static_cast<double>(loss(plus)) - static_cast<double>(loss(minus))) /
                     (step_up + step_down);
    plus.data()[k] = p.data()[k];
    minus.data()[k] = p.data()[k];
  }
  return grad;
}

}  // namespace resnorm
