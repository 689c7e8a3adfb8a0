// tests/reference/norm_kernel_reference.hpp — LayerNorm and RMSNorm rows, forward and backward,
// as plain loops in long double, for checking the row kernels.
//
// A different code path from include/resnorm/kernels/: the backward is the explicit product
// dx_j = Σ_i dy_i · ∂y_i/∂x_j with the Jacobian entries written out, not the kernels' closed
// form.
//   LayerNorm: ∂y_i/∂x_j = γ_i · rstd · (δ_ij − 1/d − xhat_i · xhat_j / d)
//   RMSNorm:   y_i = γ_i · x_i · rstd,  rstd = 1/sqrt(Σ x²/d + eps),
//              ∂y_i/∂x_j = γ_i · (δ_ij · rstd − x_i · x_j · rstd³ / d)
#pragma once

#include <Eigen/Core>
#include <cmath>

namespace resnorm_reference {

using ld_mat = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ld_vec = Eigen::Matrix<long double, Eigen::Dynamic, 1>;

enum class norm_kind { layer, rms };

struct norm_result {
  ld_mat y;     // T x d
  ld_vec mean;  // T (0 for RMSNorm)
  ld_vec rstd;  // T
};

struct norm_grad {
  ld_mat dx;      // T x d
  ld_vec dgamma;  // d
  ld_vec dbeta;   // d
};

// gamma, beta: length d, or empty (1 and 0).
template <class X, class P>
norm_result norm_forward(norm_kind kind, const X& x, const P& gamma, const P& beta,
                         long double eps) {
  const Eigen::Index T = x.rows(), d = x.cols();
  norm_result r{ld_mat(T, d), ld_vec::Zero(T), ld_vec(T)};
  for (Eigen::Index t = 0; t < T; ++t) {
    long double mean = 0;
    if (kind == norm_kind::layer) {
      for (Eigen::Index j = 0; j < d; ++j) mean += static_cast<long double>(x(t, j));
      mean /= static_cast<long double>(d);
    }
    long double ss = 0;
    for (Eigen::Index j = 0; j < d; ++j) {
      const long double c = static_cast<long double>(x(t, j)) - mean;
      ss += c * c;
    }
    const long double rstd = 1.0L / std::sqrt(ss / static_cast<long double>(d) + eps);
    r.mean[t] = mean;
    r.rstd[t] = rstd;
    for (Eigen::Index j = 0; j < d; ++j) {
      const long double g = gamma.size() ? static_cast<long double>(gamma[j]) : 1.0L;
      const long double b = beta.size() ? static_cast<long double>(beta[j]) : 0.0L;
      r.y(t, j) = g * (static_cast<long double>(x(t, j)) - mean) * rstd + b;
    }
  }
  return r;
}

template <class X, class P>
norm_grad norm_backward(norm_kind kind, const X& x, const X& dy, const P& gamma, long double eps) {
  const Eigen::Index T = x.rows(), d = x.cols();
  const P none;
  const norm_result f = norm_forward(kind, x, none, none, eps);  // f.y = xhat
  norm_grad g{ld_mat::Zero(T, d), ld_vec::Zero(d), ld_vec::Zero(d)};
  const long double inv_d = 1.0L / static_cast<long double>(d);
  for (Eigen::Index t = 0; t < T; ++t) {
    const long double r = f.rstd[t];
    for (Eigen::Index i = 0; i < d; ++i) {
      const long double dyi = static_cast<long double>(dy(t, i));
      const long double gi = gamma.size() ? static_cast<long double>(gamma[i]) : 1.0L;
      g.dgamma[i] += dyi * f.y(t, i);
      g.dbeta[i] += dyi;
      for (Eigen::Index j = 0; j < d; ++j) {
        const long double delta = i == j ? 1.0L : 0.0L;
        const long double jij =
            kind == norm_kind::layer
                ? gi * r * (delta - inv_d - f.y(t, i) * f.y(t, j) * inv_d)
                : gi * (delta * r - static_cast<long double>(x(t, i)) *
                                        static_cast<long double>(x(t, j)) * r * r * r * inv_d);
        g.dx(t, j) += dyi * jij;
      }
    }
  }
  return g;
}

}  // namespace resnorm_reference
