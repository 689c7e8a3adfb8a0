// resnorm/add_norm.hpp — the fused residual add + norm of a Pre-LN stack, forward and backward.
//
//   forward:  s = x + f,  y = norm(s)      (norm: LayerNorm or RMSNorm, per row)
//   backward: given ds (the gradient reaching s from the next residual add) and dy:
//             dx = df = ds + J_normᵀ dy,   dγ = Σ_rows dy ⊙ ŝ,  dβ = Σ_rows dy
//
// x, f, s, y, ds, dy, dx: T x d of float, double or Eigen::bfloat16; gamma, beta, dγ, dβ in
// param_t<T>; mean/rstd per row in double. One pass: s is formed in registers, written once, and
// normalised from L1 (the unfused form writes s, then reads it back from memory). The backward
// reads s, ds and dy once and writes dx once. bf16: s is rounded to bf16 before normalising, so
// y = norm(s) of the s that is returned. Arithmetic C = compute_t<T> by default (see
// kernels/storage.hpp).
//
// Jacobian: ∂(s, y)/∂x = ∂(s, y)/∂f = [I; J_norm(s)], block diagonal by row as the norm's.
// Memory modes: the backward takes the forward's mean/rstd (16 / 8 bytes per row kept); the
// recompute forms of the norms (layer_norm_vjp_recompute_into) apply equally, with ds added.
#pragma once

#include <algorithm>

#include "resnorm/detail/check.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/kernels/parallel.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"
#include "resnorm/kernels/storage.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

enum class add_norm_kind { layer_norm, rms_norm };

namespace kernels {

// Rows up to this width keep s in an L1 buffer and stream it out; wider rows write s normally
// and normalise it from cache.
inline constexpr index add_norm_row_buffer = 8192;

template <class C, class T>
RESNORM_WIDE_VECTORS void add_row(const T* RESNORM_RESTRICT x, const T* RESNORM_RESTRICT f, index n,
                                  T* RESNORM_RESTRICT s) {
  for (index j = 0; j < n; ++j) s[j] = store<T>(load_as<C>(x[j]) + load_as<C>(f[j]));
}

template <class C, class T>
void add_norm_forward_rows(const char* fn, add_norm_kind kind, matrix_cref<T> x, matrix_cref<T> f,
                           vector_cref<param_t<T>> gamma, vector_cref<param_t<T>> beta, double eps,
                           matrix_ref<T> s, matrix_ref<T> y, vector_ref<double> mean,
                           vector_ref<double> rstd) {
  detail::check_epsilon(fn, eps);
  detail::check_same_shape(fn, "f", f, "x", x);
  detail::check_same_shape(fn, "s", s, "x", x);
  detail::check_same_shape(fn, "y", y, "x", x);
  check_params<T>(fn, x.cols(), gamma);
  check_params<T>(fn, x.cols(), beta, "beta");
  check_optional_rows<T>(fn, "mean", mean.size(), x.rows());
  check_optional_rows<T>(fn, "rstd", rstd.size(), x.rows());
  if (kind == add_norm_kind::rms_norm && beta.size() != 0) {
    detail::fail(fn, "RMSNorm takes no beta, got " + std::to_string(beta.size()) + " elements");
  }
  const index d = x.cols();
  const bool stream = use_streaming_stores(static_cast<std::size_t>(y.size()) * sizeof(T));
  const bool buffer_s = stream && d <= add_norm_row_buffer;
  double* mean_out = data_or_null(mean);
  double* rstd_out = data_or_null(rstd);
  const auto* g = data_or_null(gamma);
  const auto* b = data_or_null(beta);
  dispatch2(g != nullptr, b != nullptr, [&]<bool G, bool B>() {
    parallel_rows(x.rows(), d, [&](index begin, index end) {
      alignas(64) T buffer[add_norm_row_buffer];
      for (index t = begin; t < end; ++t) {
        T* s_row = s.row(t).data();
        // s into L1 (the buffer, streamed out) or into s itself (normalised from cache).
        T* s_cached = buffer_s ? buffer : s_row;
        add_row<C>(x.row(t).data(), f.row(t).data(), d, s_cached);
        if (buffer_s) stream_copy(s_row, buffer, static_cast<std::size_t>(d) * sizeof(T));
        if (kind == add_norm_kind::layer_norm) {
          const index next = t + 1 < end ? t + 1 : t;
          const row_stats st =
              layer_norm_row_forward<C, G, B>(s_cached, d, g, b, eps, stream, y.row(t).data(),
                                              next_row<T>{x.row(next).data(), y.row(next).data()});
          if (mean_out) mean_out[t] = st.mean;
          if (rstd_out) rstd_out[t] = st.rstd;
        } else {
          const double r = rms_norm_row_forward<C, G>(s_cached, d, g, eps, stream, y.row(t).data());
          if (mean_out) mean_out[t] = 0;
          if (rstd_out) rstd_out[t] = r;
        }
      }
      if (stream) stream_fence();
    });
  });
}

template <class C, class T>
void add_norm_vjp_rows(const char* fn, add_norm_kind kind, matrix_cref<T> s, matrix_cref<T> ds,
                       matrix_cref<T> dy, vector_cref<param_t<T>> gamma,
                       Eigen::Ref<const vector<double>> mean, Eigen::Ref<const vector<double>> rstd,
                       matrix_ref<T> dx, vector_ref<param_t<T>> dgamma,
                       vector_ref<param_t<T>> dbeta, kernel_workspace& ws) {
  detail::check_same_shape(fn, "ds", ds, "s", s);
  detail::check_same_shape(fn, "dy", dy, "s", s);
  detail::check_same_shape(fn, "dx", dx, "s", s);
  check_params<T>(fn, s.cols(), gamma);
  check_params<T>(fn, s.cols(), dgamma, "dgamma");
  check_params<T>(fn, s.cols(), dbeta, "dbeta");
  if (kind == add_norm_kind::layer_norm) {
    detail::check_length(fn, "mean", mean.size(), "s", s.rows(), "rows");
  }
  detail::check_length(fn, "rstd", rstd.size(), "s", s.rows(), "rows");
  const index d = s.cols();
  const auto* g = data_or_null(gamma);
  auto* dg_out = data_or_null(dgamma);
  auto* db_out = kind == add_norm_kind::layer_norm ? data_or_null(dbeta) : nullptr;
  if (kind == add_norm_kind::rms_norm && dbeta.size() != 0) dbeta.setZero();
  dispatch2(g != nullptr, dg_out != nullptr, [&]<bool G, bool DG>() {
    dispatch2(db_out != nullptr, false, [&]<bool DB, bool>() {
      blocked_vjp<C>(s.rows(), d, dg_out, db_out, ws, [&](index begin, index end, C* dg, C* db) {
        if (kind == add_norm_kind::layer_norm) {
          auto stats = [&](index t) { return row_stats{mean[t], rstd[t]}; };
          norm_range_vjp<C, true, G, DG, DB, true>(begin, end, s, dy, ds.data(), ds.outerStride(),
                                                   g, stats, dx, dg, db);
        } else {
          // RMSNorm keeps no mean (the argument may be empty).
          auto stats = [&](index t) { return row_stats{0.0, rstd[t]}; };
          norm_range_vjp<C, false, G, DG, false, true>(begin, end, s, dy, ds.data(),
                                                       ds.outerStride(), g, stats, dx, dg,
                                                       static_cast<C*>(nullptr));
        }
      });
    });
  });
}

}  // namespace kernels

template <class S>
struct add_norm_output {
  matrix<S> s;          // T x d, the new residual stream x + f
  matrix<S> y;          // T x d, norm(s)
  vector<double> mean;  // T (zeros for RMSNorm)
  vector<double> rstd;  // T
};

template <class S>
struct add_norm_grad {
  matrix<S> dx;                        // T x d: the gradient for x and for f alike
  vector<kernels::param_t<S>> dgamma;  // d, empty without gamma
  vector<kernels::param_t<S>> dbeta;   // d, empty without beta (always empty for RMSNorm)
};

// ---- forward -----------------------------------------------------------------------------------

// s = x + f and y = norm(s) into caller-owned s, y (shape of x) and mean, rstd (length T, or
// empty). Allocates nothing. beta must be empty for RMSNorm.
template <class T, class C = kernels::compute_t<T>>
void add_norm_forward_into(add_norm_kind kind, matrix_cref<T> x, matrix_cref<T> f,
                           vector_cref<kernels::param_t<T>> gamma,
                           vector_cref<kernels::param_t<T>> beta, double eps, matrix_ref<T> s,
                           matrix_ref<T> y, vector_ref<double> mean, vector_ref<double> rstd) {
  kernels::add_norm_forward_rows<C, T>("add_norm_forward_into", kind, x, f, gamma, beta, eps, s, y,
                                       mean, rstd);
}

template <class T, class C = kernels::compute_t<T>>
add_norm_output<T> add_norm_forward(add_norm_kind kind, matrix_cref<T> x, matrix_cref<T> f,
                                    vector_cref<kernels::param_t<T>> gamma,
                                    vector_cref<kernels::param_t<T>> beta, double eps) {
  add_norm_output<T> out{matrix<T>(x.rows(), x.cols()), matrix<T>(x.rows(), x.cols()),
                         vector<double>(x.rows()), vector<double>(x.rows())};
  kernels::add_norm_forward_rows<C, T>("add_norm_forward", kind, x, f, gamma, beta, eps, out.s,
                                       out.y, out.mean, out.rstd);
  return out;
}

// ---- vjp (backward) ----------------------------------------------------------------------------
//
//   dx = ds + J_norm(s)ᵀ dy,  with the forward's saved mean/rstd (mean unused for RMSNorm).

template <class T, class C = kernels::compute_t<T>>
void add_norm_vjp_into(add_norm_kind kind, matrix_cref<T> s, matrix_cref<T> ds, matrix_cref<T> dy,
                       vector_cref<kernels::param_t<T>> gamma,
                       Eigen::Ref<const vector<double>> mean, Eigen::Ref<const vector<double>> rstd,
                       matrix_ref<T> dx, vector_ref<kernels::param_t<T>> dgamma,
                       vector_ref<kernels::param_t<T>> dbeta, kernels::kernel_workspace& ws) {
  kernels::add_norm_vjp_rows<C, T>("add_norm_vjp_into", kind, s, ds, dy, gamma, mean, rstd, dx,
                                   dgamma, dbeta, ws);
}

// want_dbeta: LayerNorm with a beta (RMSNorm has none).
template <class T, class C = kernels::compute_t<T>>
add_norm_grad<T> add_norm_vjp(add_norm_kind kind, matrix_cref<T> s, matrix_cref<T> ds,
                              matrix_cref<T> dy, vector_cref<kernels::param_t<T>> gamma,
                              const add_norm_output<T>& forward, bool want_dbeta = true) {
  using P = kernels::param_t<T>;
  add_norm_grad<T> grad{matrix<T>(s.rows(), s.cols()), vector<P>(gamma.size()),
                        vector<P>(want_dbeta && kind == add_norm_kind::layer_norm ? s.cols() : 0)};
  kernels::kernel_workspace ws;
  kernels::add_norm_vjp_rows<C, T>("add_norm_vjp", kind, s, ds, dy, gamma, forward.mean,
                                   forward.rstd, grad.dx, grad.dgamma, grad.dbeta, ws);
  return grad;
}

}  // namespace resnorm
