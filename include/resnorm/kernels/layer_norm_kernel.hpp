// resnorm/kernels/layer_norm_kernel.hpp — fused, vectorised LayerNorm rows, forward and backward.
//
//   forward:  y = gamma ⊙ (x − mean) · rstd + beta,  rstd = 1/sqrt(var + eps), per row
//   backward: g = dy ⊙ gamma, xhat = (x − mean) · rstd,
//             dx = rstd · (g − mean(g) − xhat · mean(g ⊙ xhat)),  dγ = Σ_rows dy ⊙ xhat,
//             dβ = Σ_rows dy
//
// x, y, dx, dy: T x d of float, double or Eigen::bfloat16 (storage); arithmetic in
// compute_t<T> (float for float and bf16, double for double); gamma, beta, dγ, dβ in
// compute_t<T>; mean and rstd per row in double. An empty gamma / beta means absent; an empty
// dγ / dβ / mean / rstd output means "not wanted".
//
// Memory traffic: the forward reads x once and writes y once (plus 16 bytes of stats per row);
// the row's later passes hit L1. The backward reads x and dy once and writes dx once.
//   saved-stats backward (layer_norm_vjp_into): needs the forward's mean and rstd, 16 B per row.
//   recompute backward (layer_norm_vjp_recompute_into): needs nothing kept from the forward and
//     recomputes the statistics from x in L1: two extra in-cache passes per row, no extra memory.
//
// Numerics: the mean is accumulated in double and kept as hi + lo (split_mean), so x − mean is
// formed with one rounding even on rows of large offset (x = 1e4 + N(0, 1)); the variance is a
// second pass over the centred values, never E[x²] − E[x]². Lanes are folded in a fixed order
// and dγ, dβ are reduced in fixed row blocks (parallel.hpp): any thread count, the same bits.
#pragma once

#include <cmath>

#include "resnorm/detail/check.hpp"
#include "resnorm/kernels/parallel.hpp"
#include "resnorm/kernels/storage.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

namespace kernels {

struct row_stats {
  double mean, rstd;
};

// Two passes over the row (the second from L1): mean = Σx/d in double, then
// var = Σ((x − hi) − lo)²/d on the centred values.
template <class C, class T>
RESNORM_WIDE_VECTORS row_stats layer_norm_row_stats(const T* x, index d, double eps) {
  const double mean = sum_in_double(x, d) / static_cast<double>(d);
  const split_mean<C> m(mean);
  // The squares accumulate in double even when C is float: a float row of magnitude ≳ 1e19 has
  // centred values whose squares overflow float although its variance is finite in double.
  constexpr int lanes = lane_count<C>;
  double acc[lanes] = {};
  index j = 0;
  for (; j + lanes <= d; j += lanes) {
    for (int k = 0; k < lanes; ++k) {
      const double c = static_cast<double>(m.centre(load_as<C>(x[j + k])));
      acc[k] += c * c;
    }
  }
  double tail = 0;
  for (; j < d; ++j) {
    const double c = static_cast<double>(m.centre(load_as<C>(x[j])));
    tail += c * c;
  }
  const double var = (fold_lanes(acc) + tail) / static_cast<double>(d);
  // eps inside the square root, as in the definition.
  return {mean, 1.0 / std::sqrt(var + eps)};
}

// y_j = ((x_j − hi) − lo) · rstd · γ_j + β_j over n elements.
template <bool HasGamma, bool HasBeta, class C, class T>
RESNORM_WIDE_VECTORS void layer_norm_row_apply(const T* RESNORM_RESTRICT x, index n,
                                               const split_mean<C>& m, C rstd,
                                               const param_t<T>* RESNORM_RESTRICT gamma,
                                               const param_t<T>* RESNORM_RESTRICT beta,
                                               T* RESNORM_RESTRICT y) {
  for (index j = 0; j < n; ++j) {
    C v = m.centre(load_as<C>(x[j])) * rstd;
    if constexpr (HasGamma) v *= static_cast<C>(gamma[j]);
    if constexpr (HasBeta) v += static_cast<C>(beta[j]);
    y[j] = store<T>(v);
  }
}

template <class C, bool HasGamma, bool HasBeta, class T>
row_stats layer_norm_row_forward(const T* x, index d, const param_t<T>* gamma,
                                 const param_t<T>* beta, double eps, bool stream, T* y) {
  const row_stats s = layer_norm_row_stats<C>(x, d, eps);
  const split_mean<C> m(s.mean);
  const C r = static_cast<C>(s.rstd);
  if (!stream) {
    layer_norm_row_apply<HasGamma, HasBeta, C>(x, d, m, r, gamma, beta, y);
    return s;
  }
  // Computed a chunk at a time into L1, then written around the cache.
  alignas(64) T buffer[stream_chunk];
  for (index j = 0; j < d; j += stream_chunk) {
    const index n = std::min(stream_chunk, d - j);
    layer_norm_row_apply<HasGamma, HasBeta, C>(x + j, n, m, r, HasGamma ? gamma + j : nullptr,
                                               HasBeta ? beta + j : nullptr, buffer);
    stream_copy(y + j, buffer, static_cast<std::size_t>(n) * sizeof(T));
  }
  return s;
}

// One row of the backward. With a = mean(g), b = mean(g ⊙ xhat):
//   dx_j = rstd · (g_j − a − xhat_j · b)
//   dγ_j += dy_j · xhat_j,  dβ_j += dy_j          (accumulated in the compute type)
//   (+ ds_j, the gradient arriving from another use of x, when AddDs: fused add + norm)
template <class C, bool HasGamma, bool WantDGamma, bool WantDBeta, bool AddDs = false, class T>
RESNORM_WIDE_VECTORS void layer_norm_row_vjp(const T* RESNORM_RESTRICT x,
                                             const T* RESNORM_RESTRICT dy, index d,
                                             const param_t<T>* RESNORM_RESTRICT gamma, row_stats s,
                                             T* RESNORM_RESTRICT dx, C* RESNORM_RESTRICT dgamma,
                                             C* RESNORM_RESTRICT dbeta,
                                             const T* RESNORM_RESTRICT ds = nullptr) {
  const split_mean<C> m(s.mean);
  const C r = static_cast<C>(s.rstd);
  constexpr int lanes = lane_count<C>;
  C acc_g[lanes] = {}, acc_gx[lanes] = {};
  index j = 0;
  for (; j + lanes <= d; j += lanes) {
    for (int k = 0; k < lanes; ++k) {
      const C xhat = m.centre(load_as<C>(x[j + k])) * r;
      C g = load_as<C>(dy[j + k]);
      if constexpr (HasGamma) g *= static_cast<C>(gamma[j + k]);
      acc_g[k] += g;
      acc_gx[k] += g * xhat;
    }
  }
  double tail_g = 0, tail_gx = 0;
  for (; j < d; ++j) {
    const C xhat = m.centre(load_as<C>(x[j])) * r;
    C g = load_as<C>(dy[j]);
    if constexpr (HasGamma) g *= static_cast<C>(gamma[j]);
    tail_g += static_cast<double>(g);
    tail_gx += static_cast<double>(g * xhat);
  }
  const double inv_d = 1.0 / static_cast<double>(d);
  const C a = static_cast<C>((fold_lanes(acc_g) + tail_g) * inv_d);
  const C b = static_cast<C>((fold_lanes(acc_gx) + tail_gx) * inv_d);
  for (j = 0; j < d; ++j) {
    const C xhat = m.centre(load_as<C>(x[j])) * r;
    const C dyj = load_as<C>(dy[j]);
    C g = dyj;
    if constexpr (HasGamma) g *= static_cast<C>(gamma[j]);
    C v = r * (g - a - xhat * b);
    if constexpr (AddDs) v += load_as<C>(ds[j]);
    dx[j] = store<T>(v);
    if constexpr (WantDGamma) dgamma[j] += dyj * xhat;
    if constexpr (WantDBeta) dbeta[j] += dyj;
  }
}

template <class T, class C>
void layer_norm_vjp_rows(matrix_cref<T> x, matrix_cref<T> dy, const param_t<T>* gamma,
                         const double* mean, const double* rstd, double eps, matrix_ref<T> dx,
                         param_t<T>* dgamma, param_t<T>* dbeta, kernel_workspace& ws) {
  const index d = x.cols();
  dispatch2(gamma != nullptr, dgamma != nullptr, [&]<bool G, bool DG>() {
    dispatch2(dbeta != nullptr, false, [&]<bool DB, bool>() {
      blocked_vjp<C>(x.rows(), d, dgamma, dbeta, ws, [&](index t, C* dg, C* db) {
        const row_stats s =
            mean ? row_stats{mean[t], rstd[t]} : layer_norm_row_stats<C>(x.row(t).data(), d, eps);
        layer_norm_row_vjp<C, G, DG, DB>(x.row(t).data(), dy.row(t).data(), d, gamma, s,
                                         dx.row(t).data(), dg, db);
      });
    });
  });
}

}  // namespace kernels

// ---- forward -----------------------------------------------------------------------------------

// y = LN(x) into a caller-owned y (same shape as x); mean and rstd (length T each, or empty to
// skip) receive the per-row statistics the saved-stats backward reuses. Allocates nothing.
template <class T, class C = kernels::compute_t<T>>
void layer_norm_forward_into(matrix_cref<T> x, vector_cref<kernels::param_t<T>> gamma,
                             vector_cref<kernels::param_t<T>> beta, double eps, matrix_ref<T> y,
                             vector_ref<double> mean, vector_ref<double> rstd) {
  constexpr const char* fn = "layer_norm_forward_into";
  detail::check_epsilon(fn, eps);
  kernels::check_params<T>(fn, x.cols(), gamma);
  kernels::check_params<T>(fn, x.cols(), beta, "beta");
  detail::check_same_shape(fn, "y", y, "x", x);
  kernels::check_optional_rows<T>(fn, "mean", mean.size(), x.rows());
  kernels::check_optional_rows<T>(fn, "rstd", rstd.size(), x.rows());
  const index d = x.cols();
  const bool stream = kernels::use_streaming_stores(static_cast<std::size_t>(y.size()) * sizeof(T));
  double* mean_out = kernels::data_or_null(mean);
  double* rstd_out = kernels::data_or_null(rstd);
  const auto* g = kernels::data_or_null(gamma);
  const auto* b = kernels::data_or_null(beta);
  kernels::dispatch2(g != nullptr, b != nullptr, [&]<bool G, bool B>() {
    kernels::parallel_rows(x.rows(), d, [&](index begin, index end) {
      for (index t = begin; t < end; ++t) {
        const kernels::row_stats s = kernels::layer_norm_row_forward<C, G, B>(
            x.row(t).data(), d, g, b, eps, stream, y.row(t).data());
        if (mean_out) mean_out[t] = s.mean;
        if (rstd_out) rstd_out[t] = s.rstd;
      }
      if (stream) kernels::stream_fence();
    });
  });
}

// ---- vjp (backward) ----------------------------------------------------------------------------

// dx, dγ, dβ from the forward's saved mean and rstd (memory: 16 bytes per row kept between the
// passes). dgamma / dbeta: length d, or empty when not wanted. ws: reused scratch for the
// fixed-order dγ/dβ reduction; after its first use at a size, allocates nothing.
template <class T, class C = kernels::compute_t<T>>
void layer_norm_vjp_into(matrix_cref<T> x, matrix_cref<T> dy,
                         vector_cref<kernels::param_t<T>> gamma,
                         Eigen::Ref<const vector<double>> mean,
                         Eigen::Ref<const vector<double>> rstd, matrix_ref<T> dx,
                         vector_ref<kernels::param_t<T>> dgamma,
                         vector_ref<kernels::param_t<T>> dbeta, kernels::kernel_workspace& ws) {
  constexpr const char* fn = "layer_norm_vjp_into";
  kernels::check_params<T>(fn, x.cols(), gamma);
  detail::check_same_shape(fn, "dy", dy, "x", x);
  detail::check_same_shape(fn, "dx", dx, "x", x);
  detail::check_length(fn, "mean", mean.size(), "x", x.rows(), "rows");
  detail::check_length(fn, "rstd", rstd.size(), "x", x.rows(), "rows");
  kernels::check_params<T>(fn, x.cols(), dgamma, "dgamma");
  kernels::check_params<T>(fn, x.cols(), dbeta, "dbeta");
  kernels::layer_norm_vjp_rows<T, C>(x, dy, kernels::data_or_null(gamma), mean.data(), rstd.data(),
                                     0.0, dx, kernels::data_or_null(dgamma),
                                     kernels::data_or_null(dbeta), ws);
}

// The same, recomputing mean and rstd from x (memory: nothing kept from the forward; cost: two
// more passes per row over x while it sits in L1).
template <class T, class C = kernels::compute_t<T>>
void layer_norm_vjp_recompute_into(matrix_cref<T> x, matrix_cref<T> dy,
                                   vector_cref<kernels::param_t<T>> gamma, double eps,
                                   matrix_ref<T> dx, vector_ref<kernels::param_t<T>> dgamma,
                                   vector_ref<kernels::param_t<T>> dbeta,
                                   kernels::kernel_workspace& ws) {
  constexpr const char* fn = "layer_norm_vjp_recompute_into";
  detail::check_epsilon(fn, eps);
  kernels::check_params<T>(fn, x.cols(), gamma);
  detail::check_same_shape(fn, "dy", dy, "x", x);
  detail::check_same_shape(fn, "dx", dx, "x", x);
  kernels::check_params<T>(fn, x.cols(), dgamma, "dgamma");
  kernels::check_params<T>(fn, x.cols(), dbeta, "dbeta");
  kernels::layer_norm_vjp_rows<T, C>(x, dy, kernels::data_or_null(gamma), nullptr, nullptr, eps, dx,
                                     kernels::data_or_null(dgamma), kernels::data_or_null(dbeta),
                                     ws);
}

}  // namespace resnorm
