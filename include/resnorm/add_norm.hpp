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
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/kernels/parallel.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"
#include "resnorm/kernels/simd.hpp"
#include "resnorm/kernels/storage.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

enum class add_norm_kind { layer_norm, rms_norm };

namespace kernels {

// The next row's pointers, pulled towards the cache while this row is worked on (the hardware
// prefetcher stops at each 4 KiB page): f and s during the add pass, x and y during the norm's
// last pass. The last row passes its own.
template <class T>
struct add_norm_next {
  const T* x;
  const T* f;
  T* s;
  T* y;
};

// s = x + f over a row, stored (rounded to T) at out, and the norm's sums of s in C: its first
// pass fused into the add, so that s is read back only from L1. The sums are folded as the
// norm's own pass folds them (simd::row_sums), so y carries the same bits as the norm run on the
// stored s. Squares: {Σs²} (RMSNorm); else {Σc, Σc²} of c = s − origin (LayerNorm's one pass,
// layer_norm_one_pass_moments). PrefetchOut: out is the matrix s, whose next row is fetched for
// writing (not for an L1 buffer). StreamS: out is the L1 buffer, and each pack also goes to s
// around the cache (its packs aligned to a stored pack: add_row_sum checks).
template <class C, bool Squares, bool PrefetchOut, bool StreamS = false, class T>
RESNORM_SIMD_INLINE auto add_row_sum_into(const T* RESNORM_RESTRICT x, const T* RESNORM_RESTRICT f,
                                          index d, T* RESNORM_RESTRICT out, add_norm_next<T> next,
                                          C origin, T* RESNORM_RESTRICT s = nullptr) {
  using simd::load;
  constexpr int sums = Squares ? 1 : 2;
  return simd::row_sums<C, sums>(d, [&](index j, auto tag) {
    if constexpr (simd::is_pack_tag<decltype(tag)>) {
      simd::prefetch_read(next.f + j);
      if constexpr (PrefetchOut) simd::prefetch_write(next.s + j);
    }
    auto v = load<C>(x + j, tag) + load<C>(f + j, tag);
    simd::store(out + j, v);
    if constexpr (StreamS) {
      if constexpr (simd::is_pack_tag<decltype(tag)>) {
        simd::store(s + j, v, simd::streaming_tag{});
      } else {
        simd::store(s + j, v);
      }
    }
    // The norm sees s as stored: rounded to T when T is narrower than C (bf16, or float rows
    // redone in double).
    if constexpr (!std::is_same_v<T, C>) v = load<C>(out + j, tag);
    if constexpr (Squares) {
      return std::array{simd::product{v, v}};
    } else {
      const auto c = v - origin;
      return std::tuple{c, simd::product{c, c}};
    }
  });
}

// add_row_sum_into s itself (local == nullptr), or into local, a buffer in L1 that the norm then
// reads, with s written around the cache: s is not read again soon (the next layer's add is a
// whole sublayer away), so its lines need not be fetched, nor evict x, f and y. Where a stored
// pack is a whole aligned cache line (float on AVX-512), the add's own loop streams it, so that
// the row's loads and s's stores share the time: 4096 x 4096 float 14.3 ms against 15.4 (medians
// of 3 runs of 3, alternating; AVX-512 Xeon). Otherwise s is copied out of the buffer afterwards,
// a line at a time: half-line streaming stores among the loop's loads left lines part-written
// (bf16 on AVX-512, 32-byte packs: 13.5 ms against 9.1).
template <class C, bool Squares, class T>
RESNORM_SIMD_INLINE auto add_row_sum(const T* x, const T* f, index d, T* s, T* local,
                                     add_norm_next<T> next, C origin = 0) {
  if (local == nullptr) return add_row_sum_into<C, Squares, true>(x, f, d, s, next, origin);
  if constexpr (simd::stored_pack_bytes<C, T> == cache_line_bytes) {
    if (reinterpret_cast<std::uintptr_t>(s) % cache_line_bytes == 0) {
      return add_row_sum_into<C, Squares, false, true>(x, f, d, local, next, origin, s);
    }
  }
  const auto sums = add_row_sum_into<C, Squares, false>(x, f, d, local, next, origin);
  stream_copy(s, local, static_cast<std::size_t>(d) * sizeof(T));
  return sums;
}

// The origin (layer_norm_origin) of s = x + f as it will be stored, from the row's first
// elements: the LayerNorm pass fused into the add needs it before s exists.
template <class C, class T>
RESNORM_SIMD_INLINE C add_row_origin(const T* x, const T* f, index d) {
  constexpr index head = origin_elements<C>;
  alignas(64) T s[head];
  if (d >= head) {
    // Two packs, rounded as the row's own pass rounds them (a scalar bf16 rounding per element
    // cost about as much as one pack of the row).
    for (index j = 0; j < head; j += simd::width<C>) {
      simd::store(s + j, simd::load<C>(x + j, simd::vector_tag{}) +
                             simd::load<C>(f + j, simd::vector_tag{}));
    }
    return layer_norm_origin<C>(s, head);
  }
  for (index j = 0; j < d; ++j) s[j] = store<T>(load_as<C>(x[j]) + load_as<C>(f[j]));
  return layer_norm_origin<C>(s, d);
}

// Elements of T the fused forward keeps in L1 per thread when streaming (32 KiB): the rows of s
// that the norm reads back. Wider rows (or groups) form s in place with ordinary stores.
template <class T>
inline constexpr index add_norm_local_elements = index(32768 / sizeof(T));

// One row: s = x + f, then y = LayerNorm(s) from L1 (local: see add_row_sum). Same bits as
// layer_norm_row_forward on s.
template <class C, bool HasGamma, bool HasBeta, class T>
RESNORM_WIDE_VECTORS row_stats add_layer_norm_row(const T* x, const T* f, index d,
                                                  const param_t<T>* gamma, const param_t<T>* beta,
                                                  double eps, bool stream, T* s, T* local, T* y,
                                                  add_norm_next<T> next) {
  const T* work = local ? local : s;
  const C origin = add_row_origin<C>(x, f, d);
  auto m = layer_norm_one_pass_moments<C>(origin, d, eps,
                                          add_row_sum<C, false>(x, f, d, s, local, next, origin));
  // As layer_norm_moments: the two passes, on the stored s, where the one pass does not hold.
  if (!m.in_range) m = layer_norm_two_pass_moments<C>(work, d, eps);
  return layer_norm_row_finish<C, HasGamma, HasBeta>(work, d, gamma, beta, eps, stream, y,
                                                     {next.x, next.y}, m);
}

// Whether add_layer_norm_rows_pipelined can run rows of s and y starting at these pointers, row
// strides in elements: both written around the cache pack by pack, a stored pack being a whole
// or half a line, so every row must start on a line (AVX-512: float, and bf16, whose half-line
// packs the loop writes a line at a time; elsewhere, AVX2 included, where it was not measured,
// the row-by-row path).
template <class C, class T>
bool pipelines_rows(const T* s, index s_stride, const T* y, index y_stride, index rows) {
  if constexpr (simd::register_bytes < 64 || simd::stored_pack_bytes<C, T> * 2 < cache_line_bytes) {
    return false;
  } else {
    return rows_on_cache_lines(s, s_stride, rows) && rows_on_cache_lines(y, y_stride, rows);
  }
}

// Rows begin … end − 1 of the streamed LayerNorm forward, two rows in flight: one loop streams row
// t's y (its apply, from the buffer holding s_t) while it forms s_{t+1} = x + f in the slots the
// apply has just read (below), streams it, and takes its one-pass sums. Row by row, the add pass
// waits on the loads of x and f and the apply pass on the stores of y; together they share the
// time. row(t) gives row t's pointers; local holds d elements; s and y pass pipelines_rows.
// stats_out(t, stats) receives each row's statistics. The same bits as add_layer_norm_row row by
// row: the sums and the apply are the same operations in the same order, only interleaved. A row
// the one pass does not hold takes the two-pass moments, a float row out of range (and the last
// row) the plain row finish. Float 4096 x 4096 on the AVX-512 Xeon: 10.1-10.4 ms against 12.4-13.1
// row by row (1.6x the unfused add then norm; 512 MiB rows 90.8 against 114 ms). Prefetching row t
// + 2's x and f in the loop as well made it 8 % slower (11.3-11.7 ms against 10.6-10.8).
template <class C, bool HasGamma, bool HasBeta, class T, class RowAt, class StatsOut>
RESNORM_WIDE_VECTORS void add_layer_norm_rows_pipelined(index begin, index end, index d,
                                                        const param_t<T>* gamma,
                                                        const param_t<T>* beta, double eps,
                                                        T* local, const RowAt& row,
                                                        const StatsOut& stats_out) {
  if (begin >= end) return;
  // Packs of half a line (bf16 on AVX-512, float on AVX2) are written around the cache a line at
  // a time (write_line_around_cache), as add_row_sum found half-line non-temporal stores among
  // the loop's loads slow. bf16 4096 x 4096 ran 7.0-9.3 ms (median 8.1) against 8.8-11.3 (9.5)
  // row by row, 4 alternating runs each on the AVX-512 Xeon, with the chains of row_sums
  // unrolled (simd.hpp).
  constexpr bool half_line_packs = simd::stored_pack_bytes<C, T> * 2 == cache_line_bytes;
  // The rounded first halves of the lines of s and y being formed.
  simd::vec<simd::raw_t<T>, simd::width<C>> first_half_s{}, first_half_y{};
  // One buffer: at each j the apply reads row t's s_j before the add stores row t + 1's s_j in
  // its place, so the store finds its line in L1 and the buffer is one row, not two, beside γ and
  // β (32 KiB at d = 4096 float, the whole L1): float 4096 x 4096 1.00-1.08x, 8192 x 1024
  // 1.01-1.17x, by the buffers' page offsets (Zen 4). Half-line packs keep each line's first
  // half of y in a register until the line is written, as they keep s's.
  T* const buffer = local;  // s of row t for its apply, overwritten by row t + 1's as the add runs
  auto add_pass = [&](index t) {
    const add_norm_next<T> r = row(t), next = row(t + 1 < end ? t + 1 : t);
    const C origin = add_row_origin<C>(r.x, r.f, d);
    auto m = layer_norm_one_pass_moments<C>(
        origin, d, eps, add_row_sum<C, false>(r.x, r.f, d, r.s, buffer, next, origin));
    if (!m.in_range) m = layer_norm_two_pass_moments<C>(buffer, d, eps);
    return m;
  };
  layer_norm_moments_t<C> m = add_pass(begin);
  for (index t = begin; t < end; ++t) {
    const add_norm_next<T> cur = row(t);
    if (t + 1 == end || !m.in_range) {
      const add_norm_next<T> next = row(t + 1 < end ? t + 1 : t);
      stats_out(t, layer_norm_row_finish<C, HasGamma, HasBeta>(buffer, d, gamma, beta, eps, true,
                                                               cur.y, {next.x, next.y}, m));
      if (t + 1 < end) m = add_pass(t + 1);
      continue;
    }
    const add_norm_next<T> next = row(t + 1);
    const C rstd = static_cast<C>(m.stats.rstd);
    const C hi = m.centre.hi, lo_rstd = -(m.centre.lo * rstd);
    const C origin = add_row_origin<C>(next.x, next.f, d);
    const auto sums = simd::row_sums<C, 2>(d, [&](index j, auto tag) {
      using simd::load;
      constexpr bool pack = simd::is_pack_tag<decltype(tag)>;
      // Half-line packs: the pack that ends a line writes the whole line of y and of s.
      const bool ends_line = half_line_packs && pack && (j / simd::width<C>) % 2 == 1;
      if constexpr (pack && half_line_packs) {
        const auto y_bits = simd::narrow<T>(layer_norm_apply_value<HasGamma, HasBeta>(
            buffer, j, tag, hi, rstd, lo_rstd, gamma, beta));
        if (ends_line) {
          simd::write_line_around_cache(cur.y + j - simd::width<C>, first_half_y, y_bits);
        } else {
          first_half_y = y_bits;
        }
      } else if constexpr (pack) {
        layer_norm_apply_at<HasGamma, HasBeta>(buffer, j, simd::streaming_tag{}, hi, rstd, lo_rstd,
                                               gamma, beta, cur.y);
      } else {
        layer_norm_apply_at<HasGamma, HasBeta>(buffer, j, tag, hi, rstd, lo_rstd, gamma, beta,
                                               cur.y);
      }
      auto v = load<C>(next.x + j, tag) + load<C>(next.f + j, tag);
      if constexpr (pack && half_line_packs) {
        // Rounded once: into the L1 buffer, and into the line of s with the line's other half.
        const auto bits = simd::narrow<T>(v);
        simd::store_bits(buffer + j, bits);
        if (ends_line) {
          simd::write_line_around_cache(next.s + j - simd::width<C>, first_half_s, bits);
        } else {
          first_half_s = bits;
        }
      } else if constexpr (pack) {
        simd::store(buffer + j, v);
        simd::store(next.s + j, v, simd::streaming_tag{});
      } else {
        simd::store(buffer + j, v);
        simd::store(next.s + j, v);
      }
      if constexpr (!std::is_same_v<T, C>) v = load<C>(buffer + j, tag);
      const auto c = v - origin;
      return std::tuple{c, simd::product{c, c}};
    });
    if constexpr (half_line_packs) {
      // An odd number of packs: the last one's line was not written.
      const index packs = d / simd::width<C>;
      if (packs % 2 == 1) {
        const index last = (packs - 1) * simd::width<C>;
        simd::write_around_cache(cur.y + last, first_half_y);   // that pack's y
        simd::write_around_cache(next.s + last, first_half_s);  // and its rounded s
      }
    }
    stats_out(t, m.stats);
    m = layer_norm_one_pass_moments<C>(origin, d, eps, sums);
    if (!m.in_range) m = layer_norm_two_pass_moments<C>(buffer, d, eps);
  }
}

// One row: s = x + f, then y = RMSNorm(s) from L1. Same bits as rms_norm_row_forward on s.
template <class C, bool HasGamma, class T>
RESNORM_WIDE_VECTORS double add_rms_norm_row(const T* x, const T* f, index d,
                                             const param_t<T>* gamma, double eps, bool stream, T* s,
                                             T* local, T* y, add_norm_next<T> next) {
  const T* work = local ? local : s;
  const double sum_ss = add_row_sum<C, true>(x, f, d, s, local, next)[0];
  const double inv_d = 1.0 / static_cast<double>(d);
  if (square_range<C>::handles(sum_ss, inv_d, eps)) {
    return rms_norm_row_finish<C, HasGamma>(
        work, d, gamma, stream, y, {1.0 / std::sqrt(sum_ss * inv_d + eps), true}, {next.x, next.y});
  }
  // Out of C's range (or NaN / Inf): the norm's own fallbacks, from the stored s.
  return rms_norm_row_forward<C, HasGamma>(work, d, gamma, eps, stream, y, {next.x, next.y});
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
  double* mean_out = data_or_null(mean);
  double* rstd_out = data_or_null(rstd);
  const auto* g = data_or_null(gamma);
  const auto* b = data_or_null(beta);
  auto next_of = [&](index t) {
    return add_norm_next<T>{x.row(t).data(), f.row(t).data(), s.row(t).data(), y.row(t).data()};
  };
  auto keep = [&](index t, double row_mean, double row_rstd) {
    if (mean_out) mean_out[t] = row_mean;
    if (rstd_out) rstd_out[t] = row_rstd;
  };
  // Narrow LayerNorm rows: the adds of a group, then the group's norms overlapped, as the
  // LayerNorm forward does (same bits).
  const bool grouped = kind == add_norm_kind::layer_norm &&
                       static_cast<std::size_t>(d) * sizeof(T) <= group_row_bytes;
  dispatch2(g != nullptr, b != nullptr, [&]<bool G, bool B>() {
    parallel_rows(x.rows(), d, [&](index begin, index end) {
      constexpr int R = forward_rows_per_group;
      // Streaming: the rows of s the norm reads back, kept here (see add_row_sum).
      alignas(64) T local[add_norm_local_elements<T>];
      const bool use_local = stream && d * (grouped ? R : 1) <= add_norm_local_elements<T>;
      auto local_row = [&](int r) { return use_local ? local + r * d : nullptr; };
      index t = begin;
      if (kind == add_norm_kind::layer_norm && !grouped && stream &&
          // Rows of up to half the buffer: wider ones ran slower pipelined (2048 x 8192 float
          // 0.965x, bench/HISTORY.md).
          2 * d <= add_norm_local_elements<T> &&
          pipelines_rows<C>(s.data(), s.outerStride(), y.data(), y.outerStride(), x.rows())) {
        add_layer_norm_rows_pipelined<C, G, B, T>(
            begin, end, d, g, b, eps, local, next_of,
            [&](index row, const row_stats& st) { keep(row, st.mean, st.rstd); });
        t = end;
      }
      if (grouped) {
        dispatch2(stream, false, [&]<bool S, bool>() {
          for (; t + R <= end; t += R) {
            const T* ss[R];
            T* ys[R];
            next_row<T> next[R];
            row_stats st[R];
            for (int r = 0; r < R; ++r) {
              T* s_row = s.row(t + r).data();
              const index n = t + r + R < end ? t + r + R : t + r;  // the next group's row
              add_row_sum<C, false>(x.row(t + r).data(), f.row(t + r).data(), d, s_row,
                                    local_row(r), next_of(n));
              ss[r] = use_local ? local_row(r) : s_row;
              ys[r] = y.row(t + r).data();
              next[r] = {x.row(n).data(), y.row(n).data()};
            }
            layer_norm_group_forward<C, R, G, B, S>(ss, d, g, b, eps, ys, st, next);
            for (int r = 0; r < R; ++r) keep(t + r, st[r].mean, st[r].rstd);
          }
        });
      }
      for (; t < end; ++t) {
        const add_norm_next<T> next = next_of(t + 1 < end ? t + 1 : t);
        if (kind == add_norm_kind::layer_norm) {
          const row_stats st =
              add_layer_norm_row<C, G, B>(x.row(t).data(), f.row(t).data(), d, g, b, eps, stream,
                                          s.row(t).data(), local_row(0), y.row(t).data(), next);
          keep(t, st.mean, st.rstd);
        } else {
          keep(t, 0.0,
               add_rms_norm_row<C, G>(x.row(t).data(), f.row(t).data(), d, g, eps, stream,
                                      s.row(t).data(), local_row(0), y.row(t).data(), next));
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
  ws.keep_clear_of({s.data(), ds.data(), dy.data(), dx.data()});
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
