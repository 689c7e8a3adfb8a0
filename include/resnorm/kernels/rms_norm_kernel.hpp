// resnorm/kernels/rms_norm_kernel.hpp — fused, vectorised RMSNorm rows, forward and backward.
//
//   forward:  y = gamma ⊙ x · rstd,  rstd = 1/sqrt(Σ_j x_j²/d + eps), per row
//   backward: g = dy ⊙ gamma, xhat = x · rstd,
//             dx = rstd · (g − xhat · mean(g ⊙ xhat)),  dγ = Σ_rows dy ⊙ xhat
//
// x, y, dx, dy: T x d of float, double or Eigen::bfloat16; arithmetic in C (compute_t<T> by
// default: float for float and bf16, double for double; pass C = double to round each float
// output once); gamma and dγ in param_t<T>; rstd per row in double. Σx² accumulates in double.
// An empty gamma means absent (1); an empty dγ or rstd output means "not wanted".
//
// Memory modes of the backward: rms_norm_vjp_into reuses the forward's rstd (8 bytes per row
// kept); rms_norm_vjp_recompute_into recomputes it from x in L1 (nothing kept, one more pass).
//
// For an RMSNorm class: forward(x) = rms_norm_forward_into<S, accumulator_t<S>>(x, gamma, eps,
// y, rstd); vjp(x, dy) = rms_norm_vjp_recompute_into<S, accumulator_t<S>>(...) or, with the
// saved rstd, rms_norm_vjp_into<S, accumulator_t<S>>(x, dy, gamma, rstd, dx, dgamma, ws).
#pragma once

#include <cmath>

#include "resnorm/detail/check.hpp"
#include "resnorm/kernels/parallel.hpp"
#include "resnorm/kernels/storage.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {
namespace kernels {

// rstd = 1/sqrt(Σx²/d + eps), Σx² in double (eps inside the square root).
template <class T>
double rms_norm_row_rstd(const T* x, index d, double eps) {
  return 1.0 / std::sqrt(square_sum_in_double(x, d) / static_cast<double>(d) + eps);
}

// y_j = x_j · rstd · γ_j over n elements.
template <bool HasGamma, class C, class T>
RESNORM_WIDE_VECTORS void rms_norm_row_apply(const T* RESNORM_RESTRICT x, index n, C rstd,
                                             const param_t<T>* RESNORM_RESTRICT gamma,
                                             T* RESNORM_RESTRICT y) {
  for (index j = 0; j < n; ++j) {
    C v = load_as<C>(x[j]) * rstd;
    if constexpr (HasGamma) v *= static_cast<C>(gamma[j]);
    y[j] = store<T>(v);
  }
}

template <class C, bool HasGamma, class T>
double rms_norm_row_forward(const T* x, index d, const param_t<T>* gamma, double eps, bool stream,
                            T* y) {
  const double rstd = rms_norm_row_rstd(x, d, eps);
  const C r = static_cast<C>(rstd);
  if (!stream) {
    rms_norm_row_apply<HasGamma>(x, d, r, gamma, y);
    return rstd;
  }
  alignas(64) T buffer[stream_chunk];
  for (index j = 0; j < d; j += stream_chunk) {
    const index n = std::min(stream_chunk, d - j);
    rms_norm_row_apply<HasGamma>(x + j, n, r, HasGamma ? gamma + j : nullptr, buffer);
    stream_copy(y + j, buffer, static_cast<std::size_t>(n) * sizeof(T));
  }
  return rstd;
}

// One row of the backward, b = mean(g ⊙ xhat):
//   dx_j = rstd · (g_j − xhat_j · b),   dγ_j += dy_j · xhat_j
//   (+ ds_j when AddDs: fused add + norm)
template <class C, bool HasGamma, bool WantDGamma, bool AddDs = false, class T>
RESNORM_WIDE_VECTORS void rms_norm_row_vjp(const T* RESNORM_RESTRICT x,
                                           const T* RESNORM_RESTRICT dy, index d,
                                           const param_t<T>* RESNORM_RESTRICT gamma, double rstd,
                                           T* RESNORM_RESTRICT dx, C* RESNORM_RESTRICT dgamma,
                                           const T* RESNORM_RESTRICT ds = nullptr) {
  const C r = static_cast<C>(rstd);
  constexpr int lanes = lane_count<C>;
  C acc[lanes] = {};
  index j = 0;
  for (; j + lanes <= d; j += lanes) {
    for (int k = 0; k < lanes; ++k) {
      C g = load_as<C>(dy[j + k]);
      if constexpr (HasGamma) g *= static_cast<C>(gamma[j + k]);
      acc[k] += g * (load_as<C>(x[j + k]) * r);
    }
  }
  double tail = 0;
  for (; j < d; ++j) {
    C g = load_as<C>(dy[j]);
    if constexpr (HasGamma) g *= static_cast<C>(gamma[j]);
    tail += static_cast<double>(g * (load_as<C>(x[j]) * r));
  }
  const C b = static_cast<C>((fold_lanes(acc) + tail) / static_cast<double>(d));
  for (j = 0; j < d; ++j) {
    const C xhat = load_as<C>(x[j]) * r;
    const C dyj = load_as<C>(dy[j]);
    C g = dyj;
    if constexpr (HasGamma) g *= static_cast<C>(gamma[j]);
    C v = r * (g - xhat * b);
    if constexpr (AddDs) v += load_as<C>(ds[j]);
    dx[j] = store<T>(v);
    if constexpr (WantDGamma) dgamma[j] += dyj * xhat;
  }
}

template <class T, class C>
void rms_norm_vjp_rows(matrix_cref<T> x, matrix_cref<T> dy, const param_t<T>* gamma,
                       const double* rstd, double eps, matrix_ref<T> dx, param_t<T>* dgamma,
                       kernel_workspace& ws) {
  const index d = x.cols();
  dispatch2(gamma != nullptr, dgamma != nullptr, [&]<bool G, bool DG>() {
    blocked_vjp<C>(x.rows(), d, dgamma, static_cast<param_t<T>*>(nullptr), ws,
                   [&](index t, C* dg, C*) {
                     const double r = rstd ? rstd[t] : rms_norm_row_rstd(x.row(t).data(), d, eps);
                     rms_norm_row_vjp<C, G, DG>(x.row(t).data(), dy.row(t).data(), d, gamma, r,
                                                dx.row(t).data(), dg);
                   });
  });
}

}  // namespace kernels

// ---- forward -----------------------------------------------------------------------------------

// y = RMSNorm(x) into a caller-owned y (shape of x); rstd (length T, or empty) receives the
// per-row 1/sqrt(mean(x²) + eps) for the saved-stats backward. Allocates nothing.
template <class T, class C = kernels::compute_t<T>>
void rms_norm_forward_into(matrix_cref<T> x, vector_cref<kernels::param_t<T>> gamma, double eps,
                           matrix_ref<T> y, vector_ref<double> rstd) {
  constexpr const char* fn = "rms_norm_forward_into";
  detail::check_epsilon(fn, eps);
  kernels::check_params<T>(fn, x.cols(), gamma);
  detail::check_same_shape(fn, "y", y, "x", x);
  kernels::check_optional_rows<T>(fn, "rstd", rstd.size(), x.rows());
  const index d = x.cols();
  const bool stream = kernels::use_streaming_stores(static_cast<std::size_t>(y.size()) * sizeof(T));
  double* rstd_out = kernels::data_or_null(rstd);
  const auto* g = kernels::data_or_null(gamma);
  kernels::dispatch2(g != nullptr, false, [&]<bool G, bool>() {
    kernels::parallel_rows(x.rows(), d, [&](index begin, index end) {
      for (index t = begin; t < end; ++t) {
        const double r = kernels::rms_norm_row_forward<C, G>(x.row(t).data(), d, g, eps, stream,
                                                             y.row(t).data());
        if (rstd_out) rstd_out[t] = r;
      }
      if (stream) kernels::stream_fence();
    });
  });
}

// ---- vjp (backward) ----------------------------------------------------------------------------

// dx and dγ from the forward's saved rstd (8 bytes per row kept). dgamma: length d or empty.
// ws: reusable scratch for the fixed-order dγ reduction.
template <class T, class C = kernels::compute_t<T>>
void rms_norm_vjp_into(matrix_cref<T> x, matrix_cref<T> dy, vector_cref<kernels::param_t<T>> gamma,
                       Eigen::Ref<const vector<double>> rstd, matrix_ref<T> dx,
                       vector_ref<kernels::param_t<T>> dgamma, kernels::kernel_workspace& ws) {
  constexpr const char* fn = "rms_norm_vjp_into";
  kernels::check_params<T>(fn, x.cols(), gamma);
  detail::check_same_shape(fn, "dy", dy, "x", x);
  detail::check_same_shape(fn, "dx", dx, "x", x);
  detail::check_length(fn, "rstd", rstd.size(), "x", x.rows(), "rows");
  kernels::check_params<T>(fn, x.cols(), dgamma, "dgamma");
  kernels::rms_norm_vjp_rows<T, C>(x, dy, kernels::data_or_null(gamma), rstd.data(), 0.0, dx,
                                   kernels::data_or_null(dgamma), ws);
}

// The same, recomputing rstd from x (nothing kept from the forward).
template <class T, class C = kernels::compute_t<T>>
void rms_norm_vjp_recompute_into(matrix_cref<T> x, matrix_cref<T> dy,
                                 vector_cref<kernels::param_t<T>> gamma, double eps,
                                 matrix_ref<T> dx, vector_ref<kernels::param_t<T>> dgamma,
                                 kernels::kernel_workspace& ws) {
  constexpr const char* fn = "rms_norm_vjp_recompute_into";
  detail::check_epsilon(fn, eps);
  kernels::check_params<T>(fn, x.cols(), gamma);
  detail::check_same_shape(fn, "dy", dy, "x", x);
  detail::check_same_shape(fn, "dx", dx, "x", x);
  kernels::check_params<T>(fn, x.cols(), dgamma, "dgamma");
  kernels::rms_norm_vjp_rows<T, C>(x, dy, kernels::data_or_null(gamma), nullptr, eps, dx,
                                   kernels::data_or_null(dgamma), ws);
}

}  // namespace resnorm
