// tests/reference/layer_norm_reference.hpp — LayerNorm as plain scalar loops in long double.
//
// A different code path from include/resnorm/layer_norm.hpp, for comparing against it: explicit
// loops, long double throughout, the Jacobian built entry by entry from its closed form.
//
//   mean_t = Σ_j x(t, j) / d,   var_t = Σ_j (x(t, j) − mean_t)² / d   (two passes, population)
//   rstd_t = 1 / sqrt(var_t + eps),   xhat(t, j) = (x(t, j) − mean_t) · rstd_t
//   y(t, j) = gamma_j · xhat(t, j) + beta_j           (gamma, beta: length d, or empty = absent)
//   d y(t, i) / d x(t, j) = gamma_i · rstd_t · (δ_ij − 1/d − xhat(t, i) · xhat(t, j) / d)
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstddef>

#include "resnorm/matrix.hpp"

namespace resnorm_reference {

using ld_matrix = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ld_vector = Eigen::Matrix<long double, Eigen::Dynamic, 1>;

struct layer_norm_row_stats {
  ld_vector mean;  // T
  ld_vector var;   // T, population variance (eps not included)
  ld_vector rstd;  // T, 1 / sqrt(var + eps)
};

template <class S>
layer_norm_row_stats layer_norm_stats(const resnorm::matrix<S>& x, long double eps) {
  const Eigen::Index rows = x.rows(), d = x.cols();
  layer_norm_row_stats s{ld_vector(rows), ld_vector(rows), ld_vector(rows)};
  for (Eigen::Index t = 0; t < rows; ++t) {
    long double sum = 0;
    for (Eigen::Index j = 0; j < d; ++j) sum += static_cast<long double>(x(t, j));
    const long double mean = sum / static_cast<long double>(d);
    long double squares = 0;
    for (Eigen::Index j = 0; j < d; ++j) {
      const long double c = static_cast<long double>(x(t, j)) - mean;
      squares += c * c;
    }
    const long double var = squares / static_cast<long double>(d);
    s.mean[t] = mean;
    s.var[t] = var;
    s.rstd[t] = 1.0L / std::sqrt(var + eps);
  }
  return s;
}

template <class S>
ld_matrix layer_norm_xhat(const resnorm::matrix<S>& x, long double eps) {
  const layer_norm_row_stats s = layer_norm_stats(x, eps);
  ld_matrix xhat(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    for (Eigen::Index j = 0; j < x.cols(); ++j) {
      xhat(t, j) = (static_cast<long double>(x(t, j)) - s.mean[t]) * s.rstd[t];
    }
  }
  return xhat;
}

// y = gamma ⊙ xhat + beta per row; an empty gamma means 1, an empty beta means 0.
template <class S>
ld_matrix layer_norm_forward(const resnorm::matrix<S>& x, long double eps,
                             const resnorm::vector<S>& gamma = resnorm::vector<S>(),
                             const resnorm::vector<S>& beta = resnorm::vector<S>()) {
  const ld_matrix xhat = layer_norm_xhat(x, eps);
  ld_matrix y(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    for (Eigen::Index j = 0; j < x.cols(); ++j) {
      const long double g = gamma.size() ? static_cast<long double>(gamma[j]) : 1.0L;
      const long double b = beta.size() ? static_cast<long double>(beta[j]) : 0.0L;
      y(t, j) = g * xhat(t, j) + b;
    }
  }
  return y;
}

// The d x d Jacobian of row t, entry (i, j) = d y(t, i) / d x(t, j).
template <class S>
ld_matrix layer_norm_row_jacobian(const resnorm::matrix<S>& x, Eigen::Index t, long double eps,
                                  const resnorm::vector<S>& gamma = resnorm::vector<S>()) {
  const Eigen::Index d = x.cols();
  const layer_norm_row_stats s = layer_norm_stats(x, eps);
  const ld_matrix xhat = layer_norm_xhat(x, eps);
  const long double inv_d = 1.0L / static_cast<long double>(d);
  ld_matrix J(d, d);
  for (Eigen::Index i = 0; i < d; ++i) {
    const long double g = gamma.size() ? static_cast<long double>(gamma[i]) : 1.0L;
    for (Eigen::Index j = 0; j < d; ++j) {
      const long double delta = i == j ? 1.0L : 0.0L;
      J(i, j) = g * s.rstd[t] * (delta - inv_d - xhat(t, i) * xhat(t, j) * inv_d);
    }
  }
  return J;
}

// The full (T·d) x (T·d) Jacobian in row-major vec order: the row blocks on the diagonal.
template <class S>
ld_matrix layer_norm_jacobian(const resnorm::matrix<S>& x, long double eps,
                              const resnorm::vector<S>& gamma = resnorm::vector<S>()) {
  const Eigen::Index T = x.rows(), d = x.cols();
  ld_matrix J = ld_matrix::Zero(T * d, T * d);
  for (Eigen::Index t = 0; t < T; ++t) {
    J.block(t * d, t * d, d, d) = layer_norm_row_jacobian(x, t, eps, gamma);
  }
  return J;
}

}  // namespace resnorm_reference
