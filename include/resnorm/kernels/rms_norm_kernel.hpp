// resnorm/kernels/rms_norm_kernel.hpp — fused, vectorised RMSNorm rows, forward and backward.
//
//   forward:  y = gamma ⊙ x · rstd,  rstd = 1/sqrt(Σ_j x_j²/d + eps), per row
//   backward: g = dy ⊙ gamma, xhat = x · rstd,
//             dx = rstd · (g − xhat · mean(g ⊙ xhat)),  dγ = Σ_rows dy ⊙ xhat
//
// x, y, dx, dy: T x d of float, double or Eigen::bfloat16; arithmetic in C (compute_t<T> by
// default: float for float and bf16, double for double; pass C = double to round each float
// output once); gamma and dγ in param_t<T>; rstd per row in double. Σx² accumulates in C, with
// the range checks of layer_norm_kernel.hpp (float rows out of float's range are redone in
// double; double rows out of double's are scaled before squaring).
// An empty gamma means absent (1); an empty dγ or rstd output means "not wanted". Narrow rows
// (up to group_row_bytes) run in groups, as LayerNorm's do (8192 x 64 forward 1.4-1.7x faster than
// row by row, best of 6 alternating runs, AMD Zen 3).
//
// Memory modes of the backward: rms_norm_vjp_into reuses the forward's rstd (8 bytes per row
// kept); rms_norm_vjp_recompute_into recomputes it from x in L1 (nothing kept, one more pass).
//
// For an RMSNorm class: forward(x) = rms_norm_forward_into<S, accumulator_t<S>>(x, gamma, eps,
// y, rstd); vjp(x, dy) = rms_norm_vjp_recompute_into<S, accumulator_t<S>>(...) or, with the
// saved rstd, rms_norm_vjp_into<S, accumulator_t<S>>(x, dy, gamma, rstd, dx, dgamma, ws).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "resnorm/detail/check.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/kernels/parallel.hpp"
#include "resnorm/kernels/simd.hpp"
#include "resnorm/kernels/storage.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {
namespace kernels {

struct rms_moments {
  double rstd;
  bool in_range;  // false: redo the row in double (float arithmetic only)
};

// Σx² of a row, before its horizontal step (simd::row_partial_sums).
template <class C, class T>
RESNORM_SIMD_INLINE simd::row_partials<C, 1> rms_norm_square_partials(const T* x, index d) {
  return simd::row_partial_sums<C, 1>(d, [&](index j, auto tag) {
    const auto v = simd::load<C>(x + j, tag);
    return std::array{simd::product{v, v}};
  });
}

// rstd = 1/sqrt(Σx²/d + eps) (eps inside the square root), from sum_xx = Σx² accumulated in C.
// A float row whose squares leave float's range is flagged for double arithmetic, a double row
// outside double's is scaled before squaring (see square_range in layer_norm_kernel.hpp).
template <class C, class T>
RESNORM_SIMD_INLINE rms_moments rms_norm_moments(const T* x, index d, double eps, double sum_xx) {
  const double inv_d = 1.0 / static_cast<double>(d);
  if (square_range<C>::handles(sum_xx, inv_d, eps)) {
    // Apart from the sum with eps, so that no compiler fuses the two (rms_norm_group_moments
    // computes the same bits 8 rows at a time).
    const double mean_square = sum_xx * inv_d;
    return {1.0 / std::sqrt(mean_square + eps), true};
  }
  if constexpr (std::is_same_v<C, double>) {
    if (!std::isnan(sum_xx)) {
      // Scaled before squaring; a row holding ±Inf gets rstd = 0 (xhat = Inf·0 = NaN there).
      return {scaled_moments<false>(d, eps, [&](index j) { return load_as<double>(x[j]); })[1],
              true};
    }
    // NaN in the row: IEEE arithmetic carries it to every output of the row.
    return {1.0 / std::sqrt(sum_xx * inv_d + eps), true};
  } else {
    return {0.0, false};
  }
}

template <class C, class T>
RESNORM_SIMD_INLINE rms_moments rms_norm_moments(const T* x, index d, double eps) {
  return rms_norm_moments<C>(x, d, eps, simd::finish_sums(rms_norm_square_partials<C>(x, d))[0]);
}

template <class C, class T>
double rms_norm_row_rstd(const T* x, index d, double eps) {
  const rms_moments m = rms_norm_moments<C>(x, d, eps);
  return m.in_range ? m.rstd : rms_norm_moments<double>(x, d, eps).rstd;
}

// y_j = x_j · rstd · γ_j at j, for a pack or the tail element of the row (tag).
template <bool HasGamma, class C, class T, class Tag>
RESNORM_SIMD_INLINE void rms_norm_apply_at(const T* RESNORM_RESTRICT x, index j, Tag tag, C rstd,
                                           const param_t<T>* RESNORM_RESTRICT gamma,
                                           T* RESNORM_RESTRICT y) {
  auto v = simd::load<C>(x + j, tag) * rstd;
  if constexpr (HasGamma) v *= simd::load<C>(gamma + j, tag);
  simd::store(y + j, v, tag);
}

// y_j = x_j · rstd · γ_j over n elements; Stream: y written around the cache, same bits.
// Prefetch: the next row (next) is pulled towards the cache meanwhile, as LayerNorm's does.
template <bool HasGamma, bool Prefetch, bool Stream, class C, class T>
RESNORM_SIMD_INLINE void rms_norm_row_apply(const T* RESNORM_RESTRICT x, index n, C rstd,
                                            const param_t<T>* RESNORM_RESTRICT gamma,
                                            T* RESNORM_RESTRICT y, next_row<T> next) {
  auto body = [&](index j, auto tag) {
    prefetch_next_row<Prefetch, Stream>(next, j, tag);
    rms_norm_apply_at<HasGamma>(x, j, tag, rstd, gamma, y);
  };
  if constexpr (Stream) {
    simd::for_each_streaming<C>(n, y, body);
  } else {
    simd::for_each<C, T>(n, body);
  }
}

template <class C, bool HasGamma, class T>
RESNORM_WIDE_VECTORS double rms_norm_row_forward(const T* x, index d, const param_t<T>* gamma,
                                                 double eps, bool stream, T* y, next_row<T> next);

// y from the row's moments m, once they are in C's range (m.in_range). next: the row to pull in
// meanwhile, or this row's own pointers when there is none.
template <class C, bool HasGamma, class T>
RESNORM_SIMD_INLINE double rms_norm_row_finish(const T* x, index d, const param_t<T>* gamma,
                                               bool stream, T* y, rms_moments m, next_row<T> next) {
  const C r = static_cast<C>(m.rstd);
  // Branches written out, as in layer_norm_row_finish (GCC keeps dispatch2 out of line).
  const bool prefetch = next.in != x;
  if (stream && prefetch) {
    rms_norm_row_apply<HasGamma, true, true>(x, d, r, gamma, y, next);
  } else if (stream) {
    rms_norm_row_apply<HasGamma, false, true>(x, d, r, gamma, y, next);
  } else if (prefetch) {
    rms_norm_row_apply<HasGamma, true, false>(x, d, r, gamma, y, next);
  } else {
    rms_norm_row_apply<HasGamma, false, false>(x, d, r, gamma, y, next);
  }
  return m.rstd;
}

template <class C, bool HasGamma, class T>
RESNORM_WIDE_VECTORS double rms_norm_row_forward(const T* x, index d, const param_t<T>* gamma,
                                                 double eps, bool stream, T* y, next_row<T> next) {
  const rms_moments m = rms_norm_moments<C>(x, d, eps);
  if constexpr (!std::is_same_v<C, double>) {
    if (!m.in_range) {
      return rms_norm_row_forward<double, HasGamma>(x, d, gamma, eps, stream, y, next);
    }
  }
  return rms_norm_row_finish<C, HasGamma>(x, d, gamma, stream, y, m, next);
}

// Rows 0 … rows − 1 of a forward whose y stays in the cache, two rows in flight as in
// layer_norm_rows_overlapped: one loop writes row t's y while it sums the squares of row t + 1.
// rstd_out(t, rstd) receives each row's rstd. The same bits as rms_norm_row_forward row by row;
// a float row out of range, and the last row, take that plain row forward. Stream: y is written
// around the cache, a whole pack at a time (streams_rows_overlapped holds).
template <class C, bool HasGamma, bool Stream = false, class T, class RstdOut>
RESNORM_WIDE_VECTORS void rms_norm_rows_overlapped(const T* x, index x_stride, T* y, index y_stride,
                                                   index rows, index d, const param_t<T>* gamma,
                                                   double eps, const RstdOut& rstd_out) {
  if (rows <= 0) return;
  rms_moments m = rms_norm_moments<C>(x, d, eps);
  for (index t = 0; t < rows; ++t) {
    const T* row_x = x + t * x_stride;
    T* row_y = y + t * y_stride;
    if (t + 1 == rows || !m.in_range) {
      rstd_out(t, m.in_range ? rms_norm_row_finish<C, HasGamma>(row_x, d, gamma, Stream, row_y, m,
                                                                {row_x, row_y})
                             : rms_norm_row_forward<double, HasGamma>(row_x, d, gamma, eps, Stream,
                                                                      row_y, {row_x, row_y}));
      if (t + 1 < rows) m = rms_norm_moments<C>(row_x + x_stride, d, eps);
      continue;
    }
    // Formed only here: past the last row it could point beyond the matrix.
    const T* next_x = row_x + x_stride;
    const C rstd = static_cast<C>(m.rstd);
    const auto next_sums =
        overlapped_apply_order<C>(row_y, next_x, d)
            .visit([&](auto apply_at) RESNORM_SIMD_ALWAYS_INLINE {
              return simd::finish_sums(simd::row_partial_sums<C, 1>(d, [&](index j, auto tag) {
                if constexpr (simd::is_pack_tag<decltype(tag)>) {
                  using store_tag =
                      std::conditional_t<Stream, simd::streaming_tag, simd::vector_tag>;
                  rms_norm_apply_at<HasGamma>(row_x, apply_at(j), store_tag{}, rstd, gamma, row_y);
                } else {
                  rms_norm_apply_at<HasGamma>(row_x, j, tag, rstd, gamma, row_y);
                }
                const auto v = simd::load<C>(next_x + j, tag);
                return std::array{simd::product{v, v}};
              }));
            });
    rstd_out(t, m.rstd);
    m = rms_norm_moments<C>(next_x, d, eps, next_sums[0]);
  }
}

// rms_norm_moments of 8 rows whose squares C holds, in AVX-512 double lanes (row r in lane r), as
// layer_norm_group_one_pass_moments does for LayerNorm: the same bits; true where all 8 rows are
// in square_range, false where any is not (the caller goes row by row, as when a scalar call
// says so).
#if defined(__AVX512F__)
template <class C>
RESNORM_SIMD_INLINE bool rms_norm_group_moments(index d, double eps,
                                                const std::array<std::array<double, 1>, 8>& sums,
                                                double* rstd) {
  using v8d = simd::vec<double, 8>;
  v8d sum_xx;
  for (int r = 0; r < 8; ++r) sum_xx[r] = sums[static_cast<std::size_t>(r)][0];
  const double inv_d = 1.0 / static_cast<double>(d);
  const v8d mean_square = sum_xx * inv_d;
  const __mmask8 in_range = square_range<C>::handles_each(sum_xx, mean_square, eps);
  // (maskz: GCC 12's _mm512_sqrt_pd trips -Wuninitialized on its undefined pass-through.)
  const v8d inverse = 1.0 / v8d(_mm512_maskz_sqrt_pd(__mmask8(0xff), mean_square + eps));
  for (int r = 0; r < 8; ++r) rstd[r] = inverse[r];
  return in_range == 0xff;
}
#endif

// R narrow rows at once, as layer_norm_group_forward does: the R rows' sums of squares (a chain
// of dependent adds and a square root each) overlap instead of following one another. A group
// with a row outside C's range is redone row by row (the rows in range keep their bits).
template <class C, int R, bool HasGamma, bool Stream, class T>
RESNORM_WIDE_VECTORS void rms_norm_group_forward(const T* const* x, index d,
                                                 const param_t<T>* gamma, double eps, T* const* y,
                                                 double* rstd, const next_row<T>* next) {
  // The R rows' Σx² first, then their horizontal steps together.
  const auto sums = simd::finish_sums([&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array{rms_norm_square_partials<C>(x[I], d)...};
  }(std::make_index_sequence<R>{}));
  bool in_range = true;
#if defined(__AVX512F__)
  if constexpr (R == 8) {
    in_range = rms_norm_group_moments<C>(d, eps, sums, rstd);
  } else
#endif
  {
    for (int r = 0; r < R; ++r) {
      const rms_moments m = rms_norm_moments<C>(x[r], d, eps, sums[r][0]);
      rstd[r] = m.rstd;
      in_range = in_range && m.in_range;
    }
  }
  if (!in_range) {
    for (int r = 0; r < R; ++r) {
      rstd[r] = rms_norm_row_forward<C, HasGamma>(x[r], d, gamma, eps, Stream, y[r], next[r]);
    }
    return;
  }
  for (int r = 0; r < R; ++r) {
    rms_norm_row_apply<HasGamma, true, Stream>(x[r], d, static_cast<C>(rstd[r]), gamma, y[r],
                                               next[r]);
  }
}

// One row of the backward, b = mean(g ⊙ xhat):
//   dx_j = rstd · (g_j − xhat_j · b),   dγ_j += dy_j · xhat_j   (accumulated in A)
//   (+ ds_j when AddDs: fused add + norm)
// The uncentred case of norm_group_vjp (layer_norm_kernel.hpp), which does the work.
template <class C, bool HasGamma, bool WantDGamma, bool AddDs = false, class T, class A>
void rms_norm_row_vjp(const T* x, const T* dy, index d, const param_t<T>* gamma, double rstd, T* dx,
                      A* dgamma, const T* ds = nullptr) {
  const row_group<T, 1> row{{x}, {dy}, {ds}, {dx}, {row_stats{0.0, rstd}}};
  norm_group_vjp<C, 1, false, HasGamma, WantDGamma, false, AddDs>(row, d, gamma, dgamma,
                                                                  static_cast<A*>(nullptr));
}

template <class T, class C>
void rms_norm_vjp_rows(matrix_cref<T> x, matrix_cref<T> dy, const param_t<T>* gamma,
                       const double* rstd, double eps, matrix_ref<T> dx, param_t<T>* dgamma,
                       kernel_workspace& ws) {
  const index d = x.cols();
  ws.keep_clear_of({x.data(), dy.data(), dx.data()});
  dispatch2(gamma != nullptr, dgamma != nullptr, [&]<bool G, bool DG>() {
    blocked_vjp<C>(
        x.rows(), d, dgamma, static_cast<param_t<T>*>(nullptr), ws,
        [&](index begin, index end, C* dg, C*) {
          auto stats = [&](index t) {
            return row_stats{0.0, rstd ? rstd[t] : rms_norm_row_rstd<C>(x.row(t).data(), d, eps)};
          };
          norm_range_vjp<C, false, G, DG, false, false>(begin, end, x, dy,
                                                        static_cast<const T*>(nullptr), 0, gamma,
                                                        stats, dx, dg, static_cast<C*>(nullptr));
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
      index t = begin;
      if (static_cast<std::size_t>(d) * sizeof(T) <= kernels::group_row_bytes) {
        constexpr int R = kernels::forward_rows_per_group;
        kernels::dispatch2(stream, false, [&]<bool S, bool>() {
          for (; t + R <= end; t += R) {
            double r_out[R];
            const auto next = kernels::group_next_rows<R>(x, y, t, end);
            kernels::rms_norm_group_forward<C, R, G, S>(kernels::row_pointers<R>(x, t).data(), d, g,
                                                        eps, kernels::row_pointers<R>(y, t).data(),
                                                        r_out, next.data());
            for (int r = 0; rstd_out && r < R; ++r) rstd_out[t + r] = r_out[r];
          }
        });
      }
      if (kernels::overlaps_rows<C, T> && stream && t < end &&
          kernels::streams_rows_overlapped<C>(y.data(), y.outerStride(), y.rows())) {
        kernels::rms_norm_rows_overlapped<C, G, true>(x.row(t).data(), x.outerStride(),
                                                      y.row(t).data(), y.outerStride(), end - t, d,
                                                      g, eps, [&, first = t](index i, double r) {
                                                        if (rstd_out) rstd_out[first + i] = r;
                                                      });
        t = end;
      }
      if (kernels::overlaps_rows<C, T> && !stream && t < end) {
        kernels::rms_norm_rows_overlapped<C, G>(x.row(t).data(), x.outerStride(), y.row(t).data(),
                                                y.outerStride(), end - t, d, g, eps,
                                                [&, first = t](index i, double r) {
                                                  if (rstd_out) rstd_out[first + i] = r;
                                                });
        t = end;
      }
      for (; t < end; ++t) {
        const index next = t + 1 < end ? t + 1 : t;
        const double r =
            kernels::rms_norm_row_forward<C, G>(x.row(t).data(), d, g, eps, stream, y.row(t).data(),
                                                {x.row(next).data(), y.row(next).data()});
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
