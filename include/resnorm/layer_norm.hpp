// resnorm/layer_norm.hpp — LayerNorm over the features of each token, with its exact derivatives.
//
//   y = gamma ⊙ (x − mean) / sqrt(var + eps) + beta,   per row of a T x d matrix x,
//   mean = Σ_j x_j / d,  var = Σ_j (x_j − mean)² / d   (population variance, eps inside the sqrt).
//
// gamma and beta (length d) are optional: an empty vector means "absent" (gamma = 1, beta = 0),
// which gives the no-affine and no-bias forms; a layer_norm without gamma works on any width.
//
// Jacobian: block diagonal, one d x d block per token, never coupling tokens:
//   J_t = diag(gamma) · rstd · (I − 1 1ᵀ/d − xhat xhatᵀ/d),   rstd = 1/sqrt(var + eps),
//   xhat = (x − mean) · rstd  (eps inside, exactly as the forward computes it).
// With gamma = 1 and eps > 0 its singular values are rstd (d − 2 times), eps·rstd³ (direction
// xhat) and 0 (direction 1). jacobian() materialises the (T·d) x (T·d) matrix: O(T²d²) memory,
// for tests and study; vjp()/jvp() cost O(T·d).
//
// Numerics: statistics accumulate in accumulator_t<Scalar> (double for float) and use two passes
// (mean, then Σ(x − mean)²), so rows with a large offset or a tiny spread keep their digits; the
// naive E[x²] − E[x]² loses them all (and can go negative). eps = 0 on a constant row gives
// 0 · inf = NaN in that row, as the maths says; NaN or ±Inf in one row stays in that row.
//
// Speed: for float and double, forward and vjp run the fused row kernels of
// kernels/layer_norm_kernel.hpp (one read of x, one write of y), instantiated with double
// arithmetic so each float output is rounded once; layer_norm_forward_into<float> and
// layer_norm_vjp_into<float> are the same kernels in float arithmetic (a few ulps, ~2x faster on
// cached rows). Other scalars take the plain loops below. forward_into
// and vjp_into write into caller-owned storage and allocate nothing. Backward memory modes:
//   vjp(x, dy, stats) / vjp_into(x, dy, stats, ...): reuse the forward's mean and rstd,
//     16 bytes per row kept from the forward (the default for training);
//   vjp(x, dy) / vjp_into(x, dy, ...): recompute them from x, nothing kept, two more in-cache
//     passes per row.
#pragma once

#include <cmath>
#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

// Which of LayerNorm's per-feature parameters a layer_norm(dim, ...) is built with.
enum class layer_norm_affine { none, scale, scale_and_shift };

// Per-row statistics of a forward pass, kept for the backward.
template <class Scalar>
struct layer_norm_stats {
  vector<accumulator_t<Scalar>> mean;  // T
  vector<accumulator_t<Scalar>> rstd;  // T, 1/sqrt(var + eps)
};

template <class Scalar>
struct layer_norm_output {
  matrix<Scalar> y;
  layer_norm_stats<Scalar> stats;
};

template <class Scalar>
struct layer_norm_grad {
  matrix<Scalar> dx;      // T x d
  vector<Scalar> dgamma;  // d, empty when the layer has no gamma
  vector<Scalar> dbeta;   // d, empty when the layer has no beta
};

template <class Scalar>
class layer_norm {
 public:
  using scalar_type = Scalar;
  using accumulator_type = accumulator_t<Scalar>;
  // float and double run the row kernels; other scalars (bf16, long double) the plain loops.
  static constexpr bool uses_kernel = kernels::has_kernel_with_own_params<Scalar>;

  vector<Scalar> gamma;       // d, or empty: no scale
  vector<Scalar> beta;        // d, or empty: no shift
  Scalar eps = Scalar(1e-5);  // as PyTorch's default

  // No gamma, no beta: pure standardisation, any width.
  layer_norm() = default;

  // gamma = 1, beta = 0 of length dim, as at initialisation.
  explicit layer_norm(index dim, Scalar epsilon = Scalar(1e-5),
                      layer_norm_affine affine = layer_norm_affine::scale_and_shift)
      : eps(epsilon) {
    if (dim < 0) detail::fail("layer_norm", "dim must be >= 0, got " + std::to_string(dim));
    detail::check_epsilon("layer_norm", eps);
    if (affine != layer_norm_affine::none) gamma = vector<Scalar>::Ones(dim);
    if (affine == layer_norm_affine::scale_and_shift) beta = vector<Scalar>::Zero(dim);
  }

  // Given gamma and beta (either may be empty: absent).
  layer_norm(vector<Scalar> scale, vector<Scalar> shift, Scalar epsilon = Scalar(1e-5))
      : gamma(std::move(scale)), beta(std::move(shift)), eps(epsilon) {
    detail::check_epsilon("layer_norm", eps);
    if (has_gamma() && has_beta()) {
      detail::check_length("layer_norm", "beta", beta.size(), "gamma", gamma.size(), "elements");
    }
  }

  bool has_gamma() const { return gamma.size() != 0; }
  bool has_beta() const { return beta.size() != 0; }

  // ---- forward -------------------------------------------------------------------------------

  matrix<Scalar> forward(matrix_cref<Scalar> x) const {
    check_x("layer_norm::forward", x);
    if constexpr (uses_kernel) {
      matrix<Scalar> y(x.rows(), x.cols());
      layer_norm_forward_into<Scalar, accumulator_type>(x, gamma, beta, static_cast<double>(eps), y,
                                                        no_stats(), no_stats());
      return y;
    } else {
      return forward_with_stats(x).y;
    }
  }

  // The forward pass plus the per-row mean and rstd, which vjp(x, dy, stats) reuses.
  layer_norm_output<Scalar> forward_with_stats(matrix_cref<Scalar> x) const {
    check_x("layer_norm::forward_with_stats", x);
    layer_norm_output<Scalar> out;
    out.y.resize(x.rows(), x.cols());
    if constexpr (uses_kernel) {
      out.stats.mean.resize(x.rows());
      out.stats.rstd.resize(x.rows());
      forward_into(x, out.y, out.stats);
    } else {
      out.stats = stats_of(x);
      forward_reference(x, out.stats, out.y);
    }
    return out;
  }

  // y = LN(x) into y (same shape as x), allocating nothing.
  void forward_into(matrix_cref<Scalar> x, matrix_ref<Scalar> y) const requires uses_kernel {
    check_x("layer_norm::forward_into", x);
    detail::check_same_shape("layer_norm::forward_into", "y", y, "x", x);
    layer_norm_forward_into<Scalar, accumulator_type>(x, gamma, beta, static_cast<double>(eps), y,
                                                      no_stats(), no_stats());
  }

  // y = LN(x) and its statistics (stats.mean, stats.rstd: already of length T), allocating
  // nothing.
  void forward_into(matrix_cref<Scalar> x, matrix_ref<Scalar> y,
                    layer_norm_stats<Scalar>& stats) const requires uses_kernel {
    check_x("layer_norm::forward_into", x);
    detail::check_same_shape("layer_norm::forward_into", "y", y, "x", x);
    // The kernel reads empty statistics as "not wanted"; here they were asked for, so empty
    // ones are a mistake to report, not to skip silently.
    check_stats("layer_norm::forward_into", stats, x);
    layer_norm_forward_into<Scalar, accumulator_type>(x, gamma, beta, static_cast<double>(eps), y,
                                                      stats.mean, stats.rstd);
  }

  // Per-row mean and rstd, two-pass: mean first, then the mean of squared deviations.
  layer_norm_stats<Scalar> stats_of(matrix_cref<Scalar> x) const {
    check_x("layer_norm::stats_of", x);
    const accumulator_type d = static_cast<accumulator_type>(x.cols());
    layer_norm_stats<Scalar> s{vector<accumulator_type>(x.rows()),
                               vector<accumulator_type>(x.rows())};
    if constexpr (uses_kernel) {
      for (index t = 0; t < x.rows(); ++t) {
        const kernels::row_stats r = kernels::layer_norm_row_stats<accumulator_type>(
            x.row(t).data(), x.cols(), static_cast<double>(eps));
        s.mean[t] = r.mean;
        s.rstd[t] = r.rstd;
      }
      return s;
    }
    for (index t = 0; t < x.rows(); ++t) {
      const auto row = x.row(t).template cast<accumulator_type>().array();
      const accumulator_type mean = row.sum() / d;
      const accumulator_type var = (row - mean).square().sum() / d;
      s.mean[t] = mean;
      // eps inside the square root, as the definition (and PyTorch) has it.
      s.rstd[t] = accumulator_type(1) / std::sqrt(var + static_cast<accumulator_type>(eps));
    }
    return s;
  }

  // ---- vjp (backward) ------------------------------------------------------------------------
  //
  // With g = dy ⊙ gamma and xhat = (x − mean) · rstd, per row:
  //   dx     = rstd · ( g − mean(g) − xhat · mean(g ⊙ xhat) )
  //                     └ direct ┘  └ via mean ┘ └── via rstd ──┘
  //   dgamma = Σ_rows dy ⊙ xhat,    dbeta = Σ_rows dy.

  // Recomputes mean and rstd from x (nothing kept from the forward).
  layer_norm_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy) const {
    check_x("layer_norm::vjp", x);
    if constexpr (uses_kernel) {
      detail::check_same_shape("layer_norm::vjp", "dy", dy, "x", x);
      layer_norm_grad<Scalar> grad = empty_grad(x);
      kernels::kernel_workspace ws;
      vjp_into(x, dy, grad.dx, grad.dgamma, grad.dbeta, ws);
      return grad;
    } else {
      return vjp(x, dy, stats_of(x));
    }
  }

  layer_norm_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy,
                              const layer_norm_stats<Scalar>& stats) const {
    check_x("layer_norm::vjp", x);
    detail::check_same_shape("layer_norm::vjp", "dy", dy, "x", x);
    check_stats("layer_norm::vjp", stats, x);
    if constexpr (uses_kernel) {
      layer_norm_grad<Scalar> grad = empty_grad(x);
      kernels::kernel_workspace ws;
      vjp_into(x, dy, stats, grad.dx, grad.dgamma, grad.dbeta, ws);
      return grad;
    }
    const index d = x.cols();
    const accumulator_type inv_d = d > 0 ? accumulator_type(1) / accumulator_type(d) : 0;
    layer_norm_grad<Scalar> grad{matrix<Scalar>(x.rows(), d), {}, {}};
    using acc_row = Eigen::Array<accumulator_type, 1, Eigen::Dynamic>;
    acc_row dgamma = acc_row::Zero(has_gamma() ? d : 0);
    acc_row dbeta = acc_row::Zero(has_beta() ? d : 0);
    acc_row xhat(d), g(d);
    for (index t = 0; t < x.rows(); ++t) {
      const accumulator_type mean = stats.mean[t], rstd = stats.rstd[t];
      const auto dy_t = dy.row(t).template cast<accumulator_type>().array();
      xhat = (x.row(t).template cast<accumulator_type>().array() - mean) * rstd;
      if (has_gamma()) {
        g = dy_t * gamma_row();
        dgamma += dy_t * xhat;
      } else {
        g = dy_t;
      }
      if (has_beta()) dbeta += dy_t;
      const accumulator_type mean_g = g.sum() * inv_d;
      const accumulator_type mean_g_xhat = (g * xhat).sum() * inv_d;
      grad.dx.row(t) = (rstd * (g - mean_g - xhat * mean_g_xhat)).template cast<Scalar>();
    }
    if (has_gamma()) grad.dgamma = dgamma.transpose().matrix().template cast<Scalar>();
    if (has_beta()) grad.dbeta = dbeta.transpose().matrix().template cast<Scalar>();
    return grad;
  }

  // dx, dgamma, dbeta from the saved statistics into caller-owned storage: dx shaped like x,
  // dgamma (dbeta) of length d when the layer has gamma (beta), else empty. ws is reusable
  // scratch; once it has served this size, the call allocates nothing.
  void vjp_into(matrix_cref<Scalar> x, matrix_cref<Scalar> dy,
                const layer_norm_stats<Scalar>& stats, matrix_ref<Scalar> dx,
                vector_ref<Scalar> dgamma, vector_ref<Scalar> dbeta,
                kernels::kernel_workspace& ws) const requires uses_kernel {
    check_x("layer_norm::vjp_into", x);
    detail::check_same_shape("layer_norm::vjp_into", "dy", dy, "x", x);
    check_stats("layer_norm::vjp_into", stats, x);
    detail::check_same_shape("layer_norm::vjp_into", "dx", dx, "x", x);
    check_grad_shapes("layer_norm::vjp_into", dgamma, dbeta);
    layer_norm_vjp_into<Scalar, accumulator_type>(x, dy, gamma, stats.mean, stats.rstd, dx, dgamma,
                                                  dbeta, ws);
  }

  // The same, recomputing the statistics from x.
  void vjp_into(matrix_cref<Scalar> x, matrix_cref<Scalar> dy, matrix_ref<Scalar> dx,
                vector_ref<Scalar> dgamma, vector_ref<Scalar> dbeta,
                kernels::kernel_workspace& ws) const requires uses_kernel {
    check_x("layer_norm::vjp_into", x);
    detail::check_same_shape("layer_norm::vjp_into", "dy", dy, "x", x);
    detail::check_same_shape("layer_norm::vjp_into", "dx", dx, "x", x);
    check_grad_shapes("layer_norm::vjp_into", dgamma, dbeta);
    layer_norm_vjp_recompute_into<Scalar, accumulator_type>(x, dy, gamma, static_cast<double>(eps),
                                                            dx, dgamma, dbeta, ws);
  }

  // ---- jvp -----------------------------------------------------------------------------------
  //   J v = gamma ⊙ rstd · ( v − mean(v) − xhat · mean(xhat ⊙ v) ),  per row.

  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    check_x("layer_norm::jvp", x);
    detail::check_same_shape("layer_norm::jvp", "v", v, "x", x);
    const layer_norm_stats<Scalar> stats = stats_of(x);
    const index d = x.cols();
    const accumulator_type inv_d = d > 0 ? accumulator_type(1) / accumulator_type(d) : 0;
    matrix<Scalar> out(x.rows(), d);
    Eigen::Array<accumulator_type, 1, Eigen::Dynamic> xhat(d), w(d);
    for (index t = 0; t < x.rows(); ++t) {
      const accumulator_type mean = stats.mean[t], rstd = stats.rstd[t];
      const auto v_t = v.row(t).template cast<accumulator_type>().array();
      xhat = (x.row(t).template cast<accumulator_type>().array() - mean) * rstd;
      w = rstd * (v_t - v_t.sum() * inv_d - xhat * ((xhat * v_t).sum() * inv_d));
      if (has_gamma()) w *= gamma_row();
      out.row(t) = w.template cast<Scalar>();
    }
    return out;
  }

  // ---- jacobian ------------------------------------------------------------------------------
  //   block t = diag(gamma) · rstd · (I − 1 1ᵀ/d − xhat xhatᵀ/d)

  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    check_x("layer_norm::jacobian", x);
    const layer_norm_stats<Scalar> stats = stats_of(x);
    const index T = x.rows(), d = x.cols();
    const accumulator_type inv_d = d > 0 ? accumulator_type(1) / accumulator_type(d) : 0;
    matrix<Scalar> J = matrix<Scalar>::Zero(T * d, T * d);
    using acc_matrix = Eigen::Matrix<accumulator_type, Eigen::Dynamic, Eigen::Dynamic>;
    for (index t = 0; t < T; ++t) {
      const Eigen::Matrix<accumulator_type, Eigen::Dynamic, 1> xhat =
          ((x.row(t).template cast<accumulator_type>().array() - stats.mean[t]) * stats.rstd[t])
              .matrix()
              .transpose();
      acc_matrix block = acc_matrix::Identity(d, d);
      block.array() -= inv_d;
      block.noalias() -= inv_d * xhat * xhat.transpose();
      block *= stats.rstd[t];
      if (has_gamma()) block = gamma.template cast<accumulator_type>().asDiagonal() * block;
      J.block(t * d, t * d, d, d) = block.template cast<Scalar>();
    }
    return J;
  }

 private:
  static vector_ref<double> no_stats() { return Eigen::Map<vector<double>>(nullptr, 0); }

  layer_norm_grad<Scalar> empty_grad(const matrix_cref<Scalar>& x) const {
    return {matrix<Scalar>(x.rows(), x.cols()), vector<Scalar>(has_gamma() ? x.cols() : 0),
            vector<Scalar>(has_beta() ? x.cols() : 0)};
  }

  // One mean and one rstd per row of x.
  static void check_stats(const char* function, const layer_norm_stats<Scalar>& stats,
                          const matrix_cref<Scalar>& x) {
    detail::check_length(function, "stats.mean", stats.mean.size(), "x", x.rows(), "rows");
    detail::check_length(function, "stats.rstd", stats.rstd.size(), "x", x.rows(), "rows");
  }

  void check_grad_shapes(const char* function, const vector_ref<Scalar>& dgamma,
                         const vector_ref<Scalar>& dbeta) const {
    detail::check_length(function, "dgamma", dgamma.size(), "gamma", gamma.size(), "elements");
    detail::check_length(function, "dbeta", dbeta.size(), "beta", beta.size(), "elements");
  }

  // Plain loops for scalars without a kernel (long double): xhat in the accumulator type, gamma
  // and beta applied before rounding.
  void forward_reference(const matrix_cref<Scalar>& x, const layer_norm_stats<Scalar>& stats,
                         matrix<Scalar>& out) const {
    for (index t = 0; t < x.rows(); ++t) {
      const accumulator_type mean = stats.mean[t], rstd = stats.rstd[t];
      const auto xhat = (x.row(t).template cast<accumulator_type>().array() - mean) * rstd;
      auto y = out.row(t).array();
      if (has_gamma() && has_beta()) {
        y = (xhat * gamma_row() + beta_row()).template cast<Scalar>();
      } else if (has_gamma()) {
        y = (xhat * gamma_row()).template cast<Scalar>();
      } else if (has_beta()) {
        y = (xhat + beta_row()).template cast<Scalar>();
      } else {
        y = xhat.template cast<Scalar>();
      }
    }
  }

  auto gamma_row() const { return gamma.transpose().template cast<accumulator_type>().array(); }
  auto beta_row() const { return beta.transpose().template cast<accumulator_type>().array(); }

  void check_x(const char* function, const matrix_cref<Scalar>& x) const {
    detail::check_epsilon(function, eps);
    if (has_gamma())
      detail::check_length(function, "gamma", gamma.size(), "x", x.cols(), "columns");
    if (has_beta()) detail::check_length(function, "beta", beta.size(), "x", x.cols(), "columns");
  }
};

static_assert(differentiable_map<layer_norm<float>>);
static_assert(differentiable_map<layer_norm<double>>);

}  // namespace resnorm
