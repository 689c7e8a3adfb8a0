// resnorm/rms_norm.hpp — RMSNorm over the features of each token, with its exact derivatives.
//
//   y = gamma ⊙ x · rstd,   rstd = 1 / sqrt(mean_j(x_j²) + eps),   per row of a T x d matrix x.
//
// No centring and no beta (Zhang & Sennrich 2019): it rescales each token to unit root mean
// square. gamma (length d) is optional: an empty vector means gamma = 1, and then any width works.
//
// Jacobian: block diagonal, one d x d block per token, never coupling tokens:
//   J_t = diag(gamma) · rstd · (I − xhat xhatᵀ / d),   xhat = x · rstd.
// With gamma = 1 its singular values are rstd (d − 1 times) and eps·rstd³ (direction x): unlike
// LayerNorm's, the ones direction is not annihilated. jacobian() materialises the (T·d) x (T·d)
// matrix: O(T²d²) memory, for tests and study; vjp()/jvp() cost O(T·d).
//
// Numerics: mean(x²) accumulates in accumulator_t<Scalar> (double for float), eps inside the
// square root; eps = 0 on an all-zero row gives 0 · inf = NaN in that row, as the maths says.
// For float and double, forward, rstd_of and the saved-stats vjp run the row kernels of
// kernels/rms_norm_kernel.hpp in double arithmetic (each output rounded once; rows whose squares
// leave the double range are scaled first); other scalars (long double) take the loops below.
#pragma once

#include <cmath>
#include <string>
#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

template <class Scalar>
struct rms_norm_output {
  matrix<Scalar> y;
  vector<accumulator_t<Scalar>> rstd;  // T, 1/sqrt(mean(x²) + eps)
};

template <class Scalar>
struct rms_norm_grad {
  matrix<Scalar> dx;      // T x d
  vector<Scalar> dgamma;  // d, empty when the layer has no gamma
};

template <class Scalar>
class rms_norm {
 public:
  using scalar_type = Scalar;
  using accumulator_type = accumulator_t<Scalar>;
  // float and double run the row kernels; other scalars (bf16, long double) the plain loops.
  static constexpr bool uses_kernel = kernels::has_kernel_with_own_params<Scalar>;

  vector<Scalar> gamma;       // d, or empty: no scale
  Scalar eps = Scalar(1e-6);  // as T5 and LLaMA

  // No gamma: pure rescaling, any width.
  rms_norm() = default;

  // gamma = 1 of length dim (or no gamma), as at initialisation.
  explicit rms_norm(index dim, Scalar epsilon = Scalar(1e-6), bool with_gamma = true)
      : eps(epsilon) {
    if (dim < 0) detail::fail("rms_norm", "dim must be >= 0, got " + std::to_string(dim));
    detail::check_epsilon("rms_norm", eps);
    if (with_gamma) gamma = vector<Scalar>::Ones(dim);
  }

  rms_norm(vector<Scalar> scale, Scalar epsilon) : gamma(std::move(scale)), eps(epsilon) {
    detail::check_epsilon("rms_norm", eps);
  }

  bool has_gamma() const { return gamma.size() != 0; }

  // ---- forward -------------------------------------------------------------------------------

  matrix<Scalar> forward(matrix_cref<Scalar> x) const {
    check_x("rms_norm::forward", x);
    return forward_with_stats(x).y;
  }

  rms_norm_output<Scalar> forward_with_stats(matrix_cref<Scalar> x) const {
    check_x("rms_norm::forward_with_stats", x);
    if constexpr (uses_kernel) {
      rms_norm_output<Scalar> out{matrix<Scalar>(x.rows(), x.cols()),
                                  vector<accumulator_type>(x.rows())};
      rms_norm_forward_into<Scalar, accumulator_type>(x, gamma, static_cast<double>(eps), out.y,
                                                      out.rstd);
      return out;
    }
    rms_norm_output<Scalar> out{matrix<Scalar>(x.rows(), x.cols()), rstd_of(x)};
    for (index t = 0; t < x.rows(); ++t) {
      const auto xhat = x.row(t).template cast<accumulator_type>().array() * out.rstd[t];
      if (has_gamma()) {
        out.y.row(t) = (xhat * gamma_row()).template cast<Scalar>();
      } else {
        out.y.row(t) = xhat.template cast<Scalar>();
      }
    }
    return out;
  }

  // Per-row 1/sqrt(mean(x²) + eps).
  vector<accumulator_type> rstd_of(matrix_cref<Scalar> x) const {
    // eps is a public member, so it is checked on every call, not only at construction.
    check_x("rms_norm::rstd_of", x);
    vector<accumulator_type> rstd(x.rows());
    if constexpr (uses_kernel) {
      for (index t = 0; t < x.rows(); ++t) {
        rstd[t] =
            kernels::rms_norm_row_rstd<double>(x.row(t).data(), x.cols(), static_cast<double>(eps));
      }
      return rstd;
    }
    const accumulator_type d = static_cast<accumulator_type>(x.cols());
    for (index t = 0; t < x.rows(); ++t) {
      const accumulator_type ms =
          d > 0 ? x.row(t).template cast<accumulator_type>().squaredNorm() / d : 0;
      rstd[t] = accumulator_type(1) / std::sqrt(ms + static_cast<accumulator_type>(eps));
    }
    return rstd;
  }

  // ---- vjp (backward) ------------------------------------------------------------------------
  //
  // With g = dy ⊙ gamma and xhat = x · rstd, per row:
  //   dx     = rstd · ( g − xhat · mean(g ⊙ xhat) )
  //                     └direct┘ └── via rstd ──┘
  //   dgamma = Σ_rows dy ⊙ xhat.

  rms_norm_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy) const {
    check_x("rms_norm::vjp", x);
    return vjp(x, dy, rstd_of(x));
  }

  rms_norm_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy,
                            const vector<accumulator_type>& rstd) const {
    check_x("rms_norm::vjp", x);
    detail::check_same_shape("rms_norm::vjp", "dy", dy, "x", x);
    detail::check_length("rms_norm::vjp", "rstd", rstd.size(), "x", x.rows(), "rows");
    const index d = x.cols();
    if constexpr (uses_kernel) {
      rms_norm_grad<Scalar> grad{matrix<Scalar>(x.rows(), d), vector<Scalar>(has_gamma() ? d : 0)};
      kernels::kernel_workspace ws;
      rms_norm_vjp_into<Scalar, accumulator_type>(x, dy, gamma, rstd, grad.dx, grad.dgamma, ws);
      return grad;
    }
    const accumulator_type inv_d = d > 0 ? accumulator_type(1) / accumulator_type(d) : 0;
    using acc_row = Eigen::Array<accumulator_type, 1, Eigen::Dynamic>;
    acc_row dgamma = acc_row::Zero(has_gamma() ? d : 0);
    acc_row xhat(d), g(d);
    rms_norm_grad<Scalar> grad{matrix<Scalar>(x.rows(), d), {}};
    for (index t = 0; t < x.rows(); ++t) {
      const auto dy_t = dy.row(t).template cast<accumulator_type>().array();
      xhat = x.row(t).template cast<accumulator_type>().array() * rstd[t];
      if (has_gamma()) {
        g = dy_t * gamma_row();
        dgamma += dy_t * xhat;
      } else {
        g = dy_t;
      }
      const accumulator_type mean_g_xhat = (g * xhat).sum() * inv_d;
      grad.dx.row(t) = (rstd[t] * (g - xhat * mean_g_xhat)).template cast<Scalar>();
    }
    if (has_gamma()) grad.dgamma = dgamma.transpose().matrix().template cast<Scalar>();
    return grad;
  }

  // ---- jvp -----------------------------------------------------------------------------------
  //   J v = gamma ⊙ rstd · ( v − xhat · mean(xhat ⊙ v) ),  per row.

  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    check_x("rms_norm::jvp", x);
    detail::check_same_shape("rms_norm::jvp", "v", v, "x", x);
    const vector<accumulator_type> rstd = rstd_of(x);
    const index d = x.cols();
    const accumulator_type inv_d = d > 0 ? accumulator_type(1) / accumulator_type(d) : 0;
    matrix<Scalar> out(x.rows(), d);
    Eigen::Array<accumulator_type, 1, Eigen::Dynamic> xhat(d), w(d);
    for (index t = 0; t < x.rows(); ++t) {
      const auto v_t = v.row(t).template cast<accumulator_type>().array();
      xhat = x.row(t).template cast<accumulator_type>().array() * rstd[t];
      w = rstd[t] * (v_t - xhat * ((xhat * v_t).sum() * inv_d));
      if (has_gamma()) w *= gamma_row();
      out.row(t) = w.template cast<Scalar>();
    }
    return out;
  }

  // ---- jacobian ------------------------------------------------------------------------------
  //   block t = diag(gamma) · rstd · (I − xhat xhatᵀ / d)

  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    check_x("rms_norm::jacobian", x);
    const vector<accumulator_type> rstd = rstd_of(x);
    const index T = x.rows(), d = x.cols();
    const accumulator_type inv_d = d > 0 ? accumulator_type(1) / accumulator_type(d) : 0;
    using acc_matrix = Eigen::Matrix<accumulator_type, Eigen::Dynamic, Eigen::Dynamic>;
    matrix<Scalar> J = matrix<Scalar>::Zero(T * d, T * d);
    for (index t = 0; t < T; ++t) {
      const vector<accumulator_type> xhat =
          x.row(t).transpose().template cast<accumulator_type>() * rstd[t];
      acc_matrix block = acc_matrix::Identity(d, d);
      block.noalias() -= inv_d * xhat * xhat.transpose();
      block *= rstd[t];
      if (has_gamma()) block = gamma.template cast<accumulator_type>().asDiagonal() * block;
      J.block(t * d, t * d, d, d) = block.template cast<Scalar>();
    }
    return J;
  }

 private:
  auto gamma_row() const { return gamma.transpose().template cast<accumulator_type>().array(); }

  void check_x(const char* function, const matrix_cref<Scalar>& x) const {
    detail::check_epsilon(function, eps);
    if (has_gamma())
      detail::check_length(function, "gamma", gamma.size(), "x", x.cols(), "columns");
  }
};

static_assert(differentiable_map<rms_norm<float>>);
static_assert(differentiable_map<rms_norm<double>>);

}  // namespace resnorm
