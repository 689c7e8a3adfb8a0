// resnorm/kernels/layer_norm_kernel.hpp — fused, vectorised LayerNorm rows, forward and backward.
//
//   forward:  y = gamma ⊙ (x − mean) · rstd + beta,  rstd = 1/sqrt(var + eps), per row
//   backward: g = dy ⊙ gamma, xhat = (x − mean) · rstd,
//             dx = rstd · (g − mean(g) − xhat · mean(g ⊙ xhat)),  dγ = Σ_rows dy ⊙ xhat,
//             dβ = Σ_rows dy
//
// x, y, dx, dy: T x d of float, double or Eigen::bfloat16 (storage); arithmetic in C
// (compute_t<T> by default: float for float and bf16, double for double); gamma, beta, dγ, dβ in
// param_t<T>; mean and rstd per row in double. An empty gamma / beta means absent; an empty
// dγ / dβ / mean / rstd output means "not wanted". The rows are written in simd.hpp's packs.
//
// Memory traffic: the forward reads x once and writes y once (plus 16 bytes of stats per row);
// the row's second pass (its apply) hits L1, and runs in the same loop as the next row's first
// pass wherever y stays in the cache (layer_norm_rows_overlapped). The backward reads x and dy once
// and writes dx once. Forward outputs past streaming_min_bytes (storage.hpp) are written around the
// cache (non-temporal stores); the backward's dx only in AVX-512 builds, for an x of
// next_vjp_row_min_bytes or more (streams_vjp_dx).
//   saved-stats backward (layer_norm_vjp_into): needs the forward's mean and rstd, 16 B per row.
//   recompute backward (layer_norm_vjp_recompute_into): needs nothing kept from the forward and
//     recomputes the statistics from x in L1: an extra in-cache pass per row (two for a row the
//     one-pass moments do not hold), no extra memory.
//
// Numerics (layer_norm_moments): one pass sums c = x − origin and c², the origin being the mean
// of the row's first few elements, and forms mean = origin + Σc/d, var = Σc²/d − (Σc/d)²: never
// E[x²] − E[x]² about 0, and the pass is kept only while (Σc/d)² ≤ var, so the subtraction can
// cost at most one bit of the variance. A row that fails that test (its first elements far from
// its mean) takes the corrected two-pass algorithm: a first pass sums x, the second sums
// c = x − mean0 and c², and corrects both the mean (mean0 + Σc/d) and the variance. The mean is
// kept as hi + lo so that x − mean is formed with one rounding even on rows of large offset
// (x = 1e4 + N(0, 1) in float). A float row whose squares would overflow or underflow float
// (|x − mean| ≳ 1e19, or a spread ≲ 1e-14), or that holds NaN or ±Inf, is
// redone in double arithmetic; in double, such rows (|x − mean| ≳ 1e154 or ≲ 1e-145) are
// scaled by a power of two before squaring. In the backward, a float row whose sums leave float's
// range goes to double, and a double row whose Σg or Σg·xhat overflows (g = dy ⊙ γ) sums
// g·2^-s instead and scales dx back. Sums are folded in a fixed order and dγ, dβ are
// reduced in fixed row blocks (parallel.hpp): any thread count, the same bits.
//
// Non-finite rows: a NaN or ±Inf in row t makes all of row t's y and dx NaN (its mean and
// variance are NaN) and leaves every other row's y and dx bit for bit as they would be without
// it. The column sums follow IEEE arithmetic with no masking: dβ = Σ_t dy_t never reads x and is
// unaffected; dγ = Σ_t dy_t ⊙ xhat_t is NaN in every column, because row t's xhat is NaN
// throughout. (RMSNorm: an Inf at column j of row t gives xhat_t = 0·Inf = NaN at j only and 0
// elsewhere, so only dγ_j is NaN.) A caller that wants to skip such rows must drop them first.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/kernels/parallel.hpp"
#include "resnorm/kernels/simd.hpp"
#include "resnorm/kernels/storage.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

namespace kernels {

struct row_stats {
  double mean, rstd;
};

// x − mean as (x − hi) − lo: hi is a value of C near the mean (the mean rounded to C, or the
// row's origin, layer_norm_origin), lo the rest. x − hi is exact for x within a factor 2 of hi
// (Sterbenz), so on a row of large offset the centred value is rounded once, where x − C(mean)
// would carry half an ulp of the mean into every element.
template <class C>
struct row_centre {
  C hi = 0, lo = 0;
  row_centre() = default;
  explicit row_centre(double mean)
      : hi(static_cast<C>(mean)), lo(static_cast<C>(mean - static_cast<double>(hi))) {}
  row_centre(C high, C low) : hi(high), lo(low) {}
  template <class V>
  V operator()(V v) const {
    return (v - hi) - lo;
  }
};

#if defined(__AVX512F__)
// Bit r set where lane r of v is finite: an ordered compare of |v| with the largest double is
// false for NaN and ±Inf alike, as std::isfinite is.
inline __mmask8 finite_lanes(simd::vec<double, 8> v) {
  return _mm512_cmp_pd_mask(_mm512_abs_pd(v), _mm512_set1_pd(std::numeric_limits<double>::max()),
                            _CMP_LE_OQ);
}
#endif

// The thresholds within which C arithmetic computes a row's variance to full precision: the
// mean of the squares must neither overflow nor sink towards C's subnormals (where squares lose
// their low bits), unless eps is large enough to swamp whatever was lost.
template <class C>
struct square_range {
  static constexpr double min_mean_square = std::is_same_v<C, float> ? 0x1p-90 : 0x1p-960;
  // In float, eps never excuses a tiny spread: xhat = (x − mean)·rstd would itself be a
  // subnormal float, which a large γ brings back into view with a few bits left.
  static constexpr double eps_dominates =
      std::is_same_v<C, float> ? std::numeric_limits<double>::infinity() : 0x1p-900;
  static bool handles(double square_sum, double inv_d, double eps) {
    // A zero sum is no exception: squares of tiny nonzero values underflow to 0 as well.
    return std::isfinite(square_sum) &&
           (square_sum * inv_d >= min_mean_square || eps >= eps_dominates);
  }
#if defined(__AVX512F__)
  // handles() of 8 rows at once, bit r for lane r: their sums of squares and those times inv_d.
  static __mmask8 handles_each(simd::vec<double, 8> square_sum, simd::vec<double, 8> mean_square,
                               double eps) {
    // Ordered compares: false for NaN, as isfinite and >= are.
    const __mmask8 finite = finite_lanes(square_sum);
    if (eps >= eps_dominates) return finite;
    return finite & _mm512_cmp_pd_mask(mean_square, _mm512_set1_pd(min_mean_square), _CMP_GE_OQ);
  }
#endif
};

// The moments of a double row outside square_range: each value v_j is scaled by 2^-e (2^e the
// largest |v_j|) before squaring, so neither the squares nor their sum leave the double range.
// value(j) returns v_j; returns {shift, rstd}. Centred (LayerNorm): shift = Σv/d and
// rstd = 1/sqrt(var(v) + eps). Not centred (RMSNorm): shift = 0, rstd = 1/sqrt(Σv²/d + eps).
template <bool Centred = true, class Value>
std::array<double, 2> scaled_moments(index d, double eps, const Value& value) {
  double largest = 0;
  for (index j = 0; j < d; ++j) largest = std::max(largest, std::abs(value(j)));
  if (largest == 0 || !std::isfinite(largest)) {
    return {0.0, 1.0 / std::sqrt(largest * largest + eps)};
  }
  const int e = std::ilogb(largest);
  double sum = 0, squares = 0;
  for (index j = 0; j < d; ++j) {
    const double v = std::ldexp(value(j), -e);
    if constexpr (Centred) sum += v;
    squares += v * v;
  }
  // Divided by d, not multiplied by a rounded 1/d, and apart, so that no compiler fuses them
  // into one FMA: on a constant row (every v the same u, its sums exact) shift is u and
  // mean_square u² exactly, so var is 0 and x − mean is 0, where a rounded shift² would leave a
  // residue standing in for eps (layer_norm_corrected_moments).
  const auto n = static_cast<double>(d);
  const double shift = sum / n;
  const double mean_square = squares / n;
  const double shift_square = shift * shift;
  const double var = std::max(mean_square - shift_square, 0.0);
  // var + eps in units of 2^(2e). If eps does not fit those units it swamps var; if var is 0
  // (a constant row) eps alone counts, even where it underflows those units.
  const double eps_scaled = std::ldexp(eps, -2 * e);
  const double rstd = std::isfinite(eps_scaled) && var != 0
                          ? std::ldexp(1.0 / std::sqrt(var + eps_scaled), -e)
                          : 1.0 / std::sqrt(eps);
  return {std::ldexp(shift, e), rstd};
}

// Whether the apply's two products, (x − hi)·rstd and lo·rstd, stay inside C's range for every x
// of a row with Σc² = sum_cc (c = x − hi; sqrt(Σc²) bounds every |c| and |lo|) and rstd² =
// 1/(var + eps): whether sqrt(Σc²)·rstd ≤ 2^100, asked without the square root (which on the
// rows' critical path made the 8192 x 64 forward 7 % slower). On ordinary rows sqrt(Σc²)·rstd is
// near sqrt(d). A float row of one value far from 0 with a tiny eps (var 0, rstd = 1/sqrt(eps),
// up to 2^75) whose first mean missed that value by an ulp breaks it: the products overflow to
// infinities of opposite signs and y is NaN where it should be β. Such rows are redone in
// double, as rows outside square_range are.
template <class C>
bool centred_products_fit(double sum_cc, double var_plus_eps) {
  if constexpr (std::is_same_v<C, float>) {
    return !(sum_cc > 0x1p200 * var_plus_eps);
  } else {
    return true;
  }
}

// The centre for the apply, whose products are (x − hi)·rstd and lo·rstd, in double. Where
// lo·rstd leaves the range, as on a constant row far from 0 with a tiny eps (var = 0, rstd =
// 1/sqrt(eps) up to 2^537, lo the first mean's miss of the row's value: 2^560 + 0 x N(0, 1) with
// eps = 1e-312), the two products overflow to infinities of opposite signs and y would be NaN
// where it is β: there hi + lo rounded to one double, the row's value itself, so that x − mean is
// exactly 0. (float rows ask centred_products_fit and go to double instead.)
inline row_centre<double> fitted_centre(double hi, double lo, double rstd) {
  return std::isfinite(lo * rstd) ? row_centre<double>(hi, lo) : row_centre<double>(hi + lo);
}

template <class C>
struct layer_norm_moments_t {
  row_stats stats;       // mean (corrected) and rstd, in double
  row_centre<C> centre;  // the same mean as hi + lo, for the row's next pass
  bool in_range;         // false: redo the row in double (float arithmetic only)
};

// First pass: Σx, before its horizontal step (simd::row_partial_sums).
template <class C, class T>
RESNORM_SIMD_INLINE simd::row_partials<C, 1> layer_norm_sum_partials(const T* x, index d) {
  return simd::row_partial_sums<C, 1>(
      d, [&](index j, auto tag) { return std::array{simd::load<C>(x + j, tag)}; });
}

// The row's first mean, Σx/d to C's precision (the second pass corrects it), from sum = Σx.
template <class C, class T>
RESNORM_SIMD_INLINE double layer_norm_first_mean(const T* x, index d, double sum) {
  const double inv_d = 1.0 / static_cast<double>(d);
  const double mean0 = sum * inv_d;
  if constexpr (std::is_same_v<C, double>) {
    // Σx overflowed although every x is finite (to ±Inf, or to NaN where lanes overflowed to
    // both signs): sum x/d instead. (A row holding NaN or ±Inf gets NaN or ±Inf again.)
    if (!std::isfinite(mean0)) {
      return simd::row_sums<C, 1>(
          d, [&](index j, auto tag) { return std::array{simd::load<C>(x + j, tag) * inv_d}; })[0];
    }
  }
  return mean0;
}

template <class C, class T>
RESNORM_SIMD_INLINE double layer_norm_first_mean(const T* x, index d) {
  return layer_norm_first_mean<C>(x, d, simd::finish_sums(layer_norm_sum_partials<C>(x, d))[0]);
}

// Σc and Σc² of c = x − hi, before their horizontal step: the two-pass algorithm's second pass
// (hi: the first mean rounded to C, so that x − hi is exact on a row of large offset), or the
// one pass about the row's origin (hi = layer_norm_origin).
template <class C, class T>
RESNORM_SIMD_INLINE simd::row_partials<C, 2> layer_norm_centred_partials(const T* x, index d,
                                                                         C hi) {
  return simd::row_partial_sums<C, 2>(d, [&](index j, auto tag) {
    const auto c = simd::load<C>(x + j, tag) - hi;
    return std::tuple{c, simd::product{c, c}};
  });
}

// The corrected moments from the second pass's sums: mean = hi + Σc/d, var = Σc²/d − (Σc/d)².
template <class C, class T>
RESNORM_SIMD_INLINE layer_norm_moments_t<C> layer_norm_corrected_moments(
    const T* x, index d, double eps, double mean0, std::array<double, 2> centred_sums) {
  const auto [sum_c, sum_cc] = centred_sums;
  const double inv_d = 1.0 / static_cast<double>(d);
  const C hi = static_cast<C>(mean0);
  // Σc/d and Σc²/d divided, not multiplied by the rounded inv_d: on a constant row whose first
  // mean missed its value (every c the same u, the sums exact) delta is then u and Σc²/d u², so
  // var is 0 and (x − hi) − lo is 0, y = β. With inv_d, var was the rounding of u², which
  // outweighs a tiny eps (double rows of 6e-86 with eps = 1.8e-307 gave y = β·(1 + 1.5e-8): a
  // fuzz find); this pass runs only where the one pass does not hold.
  const auto n = static_cast<double>(d);
  const double delta = sum_c / n;
  // The corrected mean keeps hi and puts the correction in lo, so x − hi stays exact.
  const row_centre<C> centre(hi, static_cast<C>(delta));
  const double mean = static_cast<double>(hi) + delta;
  if (std::isfinite(mean0) && square_range<C>::handles(sum_cc, inv_d, eps)) {
    // Apart, as in scaled_moments and the one pass: no FMA.
    const double mean_square = sum_cc / n;
    const double delta_square = delta * delta;
    const double var = std::max(mean_square - delta_square, 0.0);
    // eps inside the square root, as in the definition.
    if (centred_products_fit<C>(sum_cc, var + eps)) {
      const double rstd = 1.0 / std::sqrt(var + eps);
      if constexpr (std::is_same_v<C, double>) {
        return {{mean, rstd}, fitted_centre(hi, delta, rstd), true};
      } else {
        return {{mean, rstd}, centre, true};
      }
    }
  }
  if constexpr (std::is_same_v<C, double>) {
    if (std::isfinite(mean0)) {
      const auto [shift, rstd] =
          scaled_moments(d, eps, [&](index j) { return load_as<double>(x[j]) - hi; });
      // The centre keeps shift apart from hi, as above: hi + shift rounded to one double would
      // move every x − mean by up to half an ulp of the mean.
      return {{hi + shift, rstd}, fitted_centre(hi, shift, rstd), true};
    }
    // NaN or ±Inf in the row: IEEE arithmetic carries it to every output of the row.
    return {{mean, 1.0 / std::sqrt(sum_cc * inv_d + eps)}, centre, true};
  } else {
    return {{mean, 0.0}, centre, false};
  }
}

template <class C, class T>
RESNORM_SIMD_INLINE layer_norm_moments_t<C> layer_norm_corrected_moments(const T* x, index d,
                                                                         double eps, double mean0) {
  return layer_norm_corrected_moments<C>(
      x, d, eps, mean0,
      simd::finish_sums(layer_norm_centred_partials<C>(x, d, static_cast<C>(mean0))));
}

// The corrected two-pass moments: the fallback of the one-pass moments below.
template <class C, class T>
RESNORM_SIMD_INLINE layer_norm_moments_t<C> layer_norm_two_pass_moments(const T* x, index d,
                                                                        double eps) {
  return layer_norm_corrected_moments<C>(x, d, eps, layer_norm_first_mean<C>(x, d));
}

// Elements that fix the origin of a row's one-pass sums.
template <class C>
inline constexpr index origin_elements = 2 * simd::width<C>;

// The origin of a row's one-pass sums: the mean of its first origin_elements<C> elements (of
// all d in a shorter row), in C. Any finite origin gives the moments; one near the row's mean
// keeps the one-pass variance from cancelling. From 2 · width elements of a row of N(μ, σ²),
// the origin lies within 0.71σ of μ (|z| < 2.83) for 99.5 % of rows of 64 elements or more.
template <class C, class T>
RESNORM_SIMD_INLINE C layer_norm_origin(const T* x, index d) {
  constexpr index head = origin_elements<C>;
  if (d >= head) {
    const simd::pack<C> two =
        simd::load<C>(x, simd::vector_tag{}) + simd::load<C>(x + head / 2, simd::vector_tag{});
    return static_cast<C>(simd::sum_lanes<C, simd::width<C>>(two) *
                          (1.0 / static_cast<double>(head)));  // exact
  }
  C sum = 0;
  for (index j = 0; j < d; ++j) sum += load_as<C>(x[j]);
  return sum / static_cast<C>(d);
}

// The moments from one pass about origin, sums = {Σc, Σc²} of c = x − origin:
// mean = origin + Σc/d, var = Σc²/d − (Σc/d)². The subtraction cancels as (Σc/d)² nears Σc²/d,
// so the pass holds the moments only while (Σc/d)² ≤ var, where Σc²/d ≤ 2·var and at most one
// bit of var is lost to the rounding of Σc²; otherwise, and for every row the two-pass
// algorithm treats specially (sums that are not finite, squares outside square_range: NaN, Inf,
// overflow, tiny spreads), in_range is false and the caller runs layer_norm_two_pass_moments.
// x − origin is exact wherever x is within a factor 2 of the origin, as x − hi is (row_centre).
template <class C>
RESNORM_SIMD_INLINE layer_norm_moments_t<C> layer_norm_one_pass_moments(
    C origin, index d, double eps, std::array<double, 2> sums) {
  const auto [sum_c, sum_cc] = sums;
  const double inv_d = 1.0 / static_cast<double>(d);
  const double delta = sum_c * inv_d;
  // One operation per statement, so that no compiler fuses them (clang fuses a·b − c·d within
  // one expression): layer_norm_group_one_pass_moments computes the same bits 8 rows at a time.
  const double mean_square = sum_cc * inv_d;
  const double delta_square = delta * delta;
  const double var = mean_square - delta_square;
  // eps inside the square root, as in the definition.
  const double rstd = 1.0 / std::sqrt(var + eps);
  bool held = std::isfinite(delta) && square_range<C>::handles(sum_cc, inv_d, eps) &&
              delta_square <= var && centred_products_fit<C>(sum_cc, var + eps);
  // A double centre whose lo·rstd overflows takes the two passes' fitted_centre.
  if constexpr (std::is_same_v<C, double>) held = held && std::isfinite(delta * rstd);
  return {{static_cast<double>(origin) + delta, rstd},
          row_centre<C>(origin, static_cast<C>(delta)),
          held};
}

// layer_norm_one_pass_moments of 8 rows at once, in AVX-512 double lanes (row r in lane r): the
// same operations, so the same bits and the same answer to whether the pass holds, without 8
// scalar square roots, divisions and chains of range tests. Fills mean, rstd, hi and lo and
// returns true where all 8 rows hold; false where any does not (the caller redoes the group row
// by row, as it does when a scalar call says so). Narrow rows spend a large share of their time
// here: 8192 x 64 float forward ran 1.148x faster with the moments stubbed out.
#if defined(__AVX512F__)
template <class C>
RESNORM_SIMD_INLINE bool layer_norm_group_one_pass_moments(
    const std::array<C, 8>& origin, index d, double eps,
    const std::array<std::array<double, 2>, 8>& sums, std::array<double, 8>& mean,
    std::array<double, 8>& rstd, std::array<C, 8>& hi, std::array<C, 8>& lo) {
  using v8d = simd::vec<double, 8>;
  using v8c = simd::vec<C, 8>;
  v8d sum_c, sum_cc, origin_d;
  for (int r = 0; r < 8; ++r) {
    sum_c[r] = sums[static_cast<std::size_t>(r)][0];
    sum_cc[r] = sums[static_cast<std::size_t>(r)][1];
    origin_d[r] = static_cast<double>(origin[static_cast<std::size_t>(r)]);
  }
  const double inv_d = 1.0 / static_cast<double>(d);
  const v8d delta = sum_c * inv_d;
  const v8d mean_square = sum_cc * inv_d;
  const v8d delta_square = delta * delta;
  const v8d var = mean_square - delta_square;
  const v8d var_plus_eps = var + eps;
  // Every compare ordered (false for NaN) unless marked, as the scalar tests are written.
  const __mmask8 finite_delta = finite_lanes(delta);
  const __mmask8 squares_in_range = square_range<C>::handles_each(sum_cc, mean_square, eps);
  const __mmask8 not_cancelled = _mm512_cmp_pd_mask(delta_square, var, _CMP_LE_OQ);
  __mmask8 products_fit = 0xff;
  if constexpr (std::is_same_v<C, float>) {
    // centred_products_fit: !(Σc² > 2^200·(var + eps)), true for NaN (unordered).
    const v8d bound = var_plus_eps * 0x1p200;
    products_fit = _mm512_cmp_pd_mask(sum_cc, bound, _CMP_NGT_UQ);
  }
  // (maskz: GCC 12's _mm512_sqrt_pd trips -Wuninitialized on its undefined pass-through.)
  const v8d root = _mm512_maskz_sqrt_pd(__mmask8(0xff), var_plus_eps);
  const v8d inverse = 1.0 / root;
  __mmask8 held = finite_delta & squares_in_range & not_cancelled & products_fit;
  if constexpr (std::is_same_v<C, double>) {
    // As the scalar pass: a centre whose lo·rstd overflows is not held.
    held &= finite_lanes(delta * inverse);
  }
  const v8d centre = origin_d + delta;
  const v8c delta_c = __builtin_convertvector(delta, v8c);
  for (int r = 0; r < 8; ++r) {
    const auto i = static_cast<std::size_t>(r);
    mean[i] = centre[r];
    rstd[i] = inverse[r];
    hi[i] = origin[i];
    lo[i] = delta_c[r];
  }
  return held == 0xff;
}
#endif

// One pass about the row's origin; the corrected two passes where that does not hold.
template <class C, class T>
RESNORM_SIMD_INLINE layer_norm_moments_t<C> layer_norm_moments(const T* x, index d, double eps) {
  const C origin = layer_norm_origin<C>(x, d);
  const auto m = layer_norm_one_pass_moments<C>(
      origin, d, eps, simd::finish_sums(layer_norm_centred_partials<C>(x, d, origin)));
  return m.in_range ? m : layer_norm_two_pass_moments<C>(x, d, eps);
}

// mean and rstd of one row, in double.
template <class C, class T>
row_stats layer_norm_row_stats(const T* x, index d, double eps) {
  const auto m = layer_norm_moments<C>(x, d, eps);
  if constexpr (!std::is_same_v<C, double>) {
    if (!m.in_range) return layer_norm_moments<double>(x, d, eps).stats;
  }
  return m.stats;
}

// Rows handled together by the group kernels. The forward of narrow rows overlaps 8 (its passes
// keep nothing in registers from one row to the next; 8192 x 64 and 512 x 64 ran 8-10 % faster
// than with 4, best of 7 alternating runs, AMD Zen 3); the backward 4, as its second pass keeps
// 6 constants per row in registers (16 of them on AVX2), and wide rows 2 (wide_rows_per_group).
inline constexpr int forward_rows_per_group = 8;
inline constexpr int rows_per_group = 4;

// Pointers to rows t … t + R − 1 of m (a group's rows).
template <int R, class M>
RESNORM_SIMD_INLINE auto row_pointers(M& m, index t) {
  std::array<decltype(m.row(0).data()), R> p;
  for (int r = 0; r < R; ++r) p[r] = m.row(t + r).data();
  return p;
}

// The row a row kernel should pull towards the cache while it works on this one (the next row
// of x and of the output; the current row's own pointers for the last row).
template <class T>
struct next_row {
  const T* in;
  T* out;
};

// In a row's last pass, body(j, tag) pulls next's packs at j towards the cache (reading the
// next input, and writing the next output unless it is streamed: skipping that read is what
// streaming is for). Streamed rows (outputs past streaming_min_bytes, so inputs from memory) pull
// the next input into L2 only: sent to L1, the next row of x displaced the γ and β that the
// apply reads beside this one. Float LayerNorm forward 4096 x 4096 1.19x, 32768 x 4096 1.16x,
// bf16 4096 x 4096 1.27x, float RMSNorm 4096 x 4096 1.05x and 32768 x 4096 1.06x faster; not
// prefetching at all lost 14 % (AMD Zen 4, bench/ab, geometric means of both placements).
template <bool Prefetch, bool Stream, class T, class Tag>
RESNORM_SIMD_INLINE void prefetch_next_row(const next_row<T>& next, index j, Tag) {
  if constexpr (Prefetch && simd::is_pack_tag<Tag>) {
    simd::prefetch_read<Stream ? simd::prefetch_to::l2 : simd::prefetch_to::l1>(next.in + j);
    if constexpr (!Stream) simd::prefetch_write(next.out + j);
  }
}

// The next_row of each row of a group starting at row t of x (and y): the same row R on, or the
// row itself past end.
template <int R, class MX, class MY>
RESNORM_SIMD_INLINE auto group_next_rows(MX& x, MY& y, index t, index end) {
  std::array<next_row<std::remove_cvref_t<decltype(*y.row(0).data())>>, R> next;
  for (int r = 0; r < R; ++r) {
    const index n = t + r + R < end ? t + r + R : t + r;
    next[static_cast<std::size_t>(r)] = {x.row(n).data(), y.row(n).data()};
  }
  return next;
}

// y_j = ((x_j − hi) − lo) · rstd · γ_j + β_j at j, for a pack or the tail element of the row
// (tag), as (x_j − hi)·rstd − lo·rstd; lo_rstd = −lo·rstd. In C, before its rounding to T.
template <bool HasGamma, bool HasBeta, class C, class T, class Tag>
RESNORM_SIMD_INLINE auto layer_norm_apply_value(const T* RESNORM_RESTRICT x, index j, Tag tag, C hi,
                                                C rstd, C lo_rstd,
                                                const param_t<T>* RESNORM_RESTRICT gamma,
                                                const param_t<T>* RESNORM_RESTRICT beta) {
  using simd::load, simd::splat;
  auto v = simd::fma(load<C>(x + j, tag) - hi, splat(rstd, tag), splat(lo_rstd, tag));
  if constexpr (HasGamma && HasBeta) {
    v = simd::fma(v, load<C>(gamma + j, tag), load<C>(beta + j, tag));
  } else if constexpr (HasGamma) {
    v *= load<C>(gamma + j, tag);
  } else if constexpr (HasBeta) {
    v += load<C>(beta + j, tag);
  }
  return v;
}

// That y_j, stored.
template <bool HasGamma, bool HasBeta, class C, class T, class Tag>
RESNORM_SIMD_INLINE void layer_norm_apply_at(const T* RESNORM_RESTRICT x, index j, Tag tag, C hi,
                                             C rstd, C lo_rstd,
                                             const param_t<T>* RESNORM_RESTRICT gamma,
                                             const param_t<T>* RESNORM_RESTRICT beta,
                                             T* RESNORM_RESTRICT y) {
  simd::store(y + j,
              layer_norm_apply_value<HasGamma, HasBeta>(x, j, tag, hi, rstd, lo_rstd, gamma, beta),
              tag);
}

// That y over n elements. Stream: y is written around the cache (simd::for_each_streaming), with
// the same bits.
template <bool HasGamma, bool HasBeta, bool Prefetch, bool Stream, class C, class T>
RESNORM_SIMD_INLINE void layer_norm_row_apply(const T* RESNORM_RESTRICT x, index n,
                                              const row_centre<C>& centre, C rstd,
                                              const param_t<T>* RESNORM_RESTRICT gamma,
                                              const param_t<T>* RESNORM_RESTRICT beta,
                                              T* RESNORM_RESTRICT y, next_row<T> next) {
  const C lo_rstd = -(centre.lo * rstd);
  auto body = [&](index j, auto tag) {
    prefetch_next_row<Prefetch, Stream>(next, j, tag);
    layer_norm_apply_at<HasGamma, HasBeta>(x, j, tag, centre.hi, rstd, lo_rstd, gamma, beta, y);
  };
  if constexpr (Stream) {
    simd::for_each_streaming<C>(n, y, body);
  } else {
    simd::for_each<C, T>(n, body);
  }
}

template <class C, bool HasGamma, bool HasBeta, class T>
RESNORM_WIDE_VECTORS row_stats layer_norm_row_forward(const T* x, index d, const param_t<T>* gamma,
                                                      const param_t<T>* beta, double eps,
                                                      bool stream, T* y, next_row<T> next);

// The rest of a row's forward once its moments m are known: y from them, or the whole row again
// in double when they are out of C's range.
template <class C, bool HasGamma, bool HasBeta, class T>
RESNORM_SIMD_INLINE row_stats layer_norm_row_finish(const T* x, index d, const param_t<T>* gamma,
                                                    const param_t<T>* beta, double eps, bool stream,
                                                    T* y, next_row<T> next,
                                                    const layer_norm_moments_t<C>& m) {
  if constexpr (!std::is_same_v<C, double>) {
    if (!m.in_range) {
      return layer_norm_row_forward<double, HasGamma, HasBeta>(x, d, gamma, beta, eps, stream, y,
                                                               next);
    }
  }
  const C r = static_cast<C>(m.stats.rstd);
  // The last row (or the only one) has nothing to pull in. Branches written out rather than
  // dispatch2 (parallel.hpp): GCC keeps dispatch2 out of line, and the row's work with it
  // (1024 x 1024 forward 8-15 % slower in an A/B run).
  const bool prefetch = next.in != x;
  if (stream && prefetch) {
    layer_norm_row_apply<HasGamma, HasBeta, true, true>(x, d, m.centre, r, gamma, beta, y, next);
  } else if (stream) {
    layer_norm_row_apply<HasGamma, HasBeta, false, true>(x, d, m.centre, r, gamma, beta, y, next);
  } else if (prefetch) {
    layer_norm_row_apply<HasGamma, HasBeta, true, false>(x, d, m.centre, r, gamma, beta, y, next);
  } else {
    layer_norm_row_apply<HasGamma, HasBeta, false, false>(x, d, m.centre, r, gamma, beta, y, next);
  }
  return m.stats;
}

template <class C, bool HasGamma, bool HasBeta, class T>
RESNORM_WIDE_VECTORS row_stats layer_norm_row_forward(const T* x, index d, const param_t<T>* gamma,
                                                      const param_t<T>* beta, double eps,
                                                      bool stream, T* y, next_row<T> next) {
  return layer_norm_row_finish<C, HasGamma, HasBeta>(x, d, gamma, beta, eps, stream, y, next,
                                                     layer_norm_moments<C>(x, d, eps));
}

// Whether the row forwards of C stored as T run overlapped. Not where packs store in pairs (bf16
// on AVX2, simd::pairs_stores): the sums' loop runs one pack at a time, and with unpaired stores
// the overlap gained nothing (bf16 64 x 768 0.96x, 1024 x 1024 1.06x).
template <class C, class T>
inline constexpr bool overlaps_rows = !simd::pairs_stores<C, T>;

// Whether rows of y (starting at y, stride elements apart) can each be written around the cache
// pack by pack from their first element: every row starts on a cache line.
template <class T>
bool rows_on_cache_lines(const T* y, index stride, index rows) {
  return reinterpret_cast<std::uintptr_t>(y) % cache_line_bytes == 0 &&
         (rows <= 1 || static_cast<std::size_t>(stride) * sizeof(T) % cache_line_bytes == 0);
}

// Whether the streamed forward runs layer_norm_rows_overlapped (Stream) on these rows of y: for
// storage narrower than the arithmetic (bf16), whose apply does twice the work per byte (and
// rounds), where a stored pack is at least half a line (AVX-512: on AVX2, bf16 pairs its stores
// and does not overlap rows) and the rows start on cache lines. Measured on the AVX-512 Xeon
// (480 MiB L3), LayerNorm forward, alternating runs: bf16 4096 x 4096 (in L3) 2.65 ms against 3.31
// row by row, RMSNorm 2.47-2.54 against 2.85; but 32768 x 4096 (from memory) 32.2-33.9 ms against
// 30.5-31.4, and float gained 2 % at 4096 x 4096 and lost 8 % at 32768 x 4096 (56.4 against 52.1
// ms), so float keeps the row-by-row streamed forward. Prefetching row t + 2 did not mend the
// loss from memory (float 67-90 ms). Not on AMD CPUs: on Zen 5 (AVX-512, 4096 x 4096 from memory)
// the overlapped bf16 rows took 3.8 ms against 2.6 row by row, RMSNorm 2.4 against 2.1 (medians
// of 6 alternating runs).
template <class C, class T>
bool streams_rows_overlapped(const T* y, index stride, index rows) {
  return sizeof(T) < sizeof(C) && simd::stored_pack_bytes<C, T> * 2 >= cache_line_bytes &&
         rows_on_cache_lines(y, stride, rows) && !amd_cpu();
}

// Where an overlapped forward (layer_norm_rows_overlapped) applies row t while it sums pack j of
// row t + 1: at pack j + shift, wrapping round the row's whole packs (the tail stays in place).
// A store to the address of a nearby load modulo 4 KiB is taken by the CPU for a possible
// dependency and holds the load back (4K aliasing): where row t of y and row t + 1 of x lie within
// 256 bytes of each other modulo 4 KiB (x and y at one page offset, rows a multiple of 4 KiB long,
// as in large allocations), the apply runs 2 KiB (or half a row, if shorter) ahead of the sums;
// elsewhere in step. With x and y at offset 0, float 1024 x 1024 LayerNorm forward 1.11-1.18x,
// RMSNorm 1.15x and LayerNorm 512 x 2048 1.05x faster; with them 1 KiB apart, and for bf16 (rows of
// 2 KiB), within the noise (AMD Zen 4, bench/ab, geometric means of both placements).
template <class C>
struct overlapped_apply_order {
  index shift = 0;  // elements, a multiple of the pack width
  index whole = 0;  // elements in the row's whole packs

  template <class T>
  overlapped_apply_order(const T* y_row, const T* next_x, index d) {
    constexpr index w = simd::width<C>;
    constexpr std::uintptr_t near = 256;
    whole = d / w * w;
    const std::uintptr_t apart =
        (reinterpret_cast<std::uintptr_t>(y_row) - reinterpret_cast<std::uintptr_t>(next_x)) %
        l1_set_span;
    if (apart < near || apart > l1_set_span - near) {
      const index half_span = static_cast<index>(l1_set_span / 2 / sizeof(T));
      shift = std::min(half_span, whole / 2) / w * w;
    }
  }
  // body(at), at(j) the pack of row t applied beside pack j of row t + 1: the identity where the
  // rows run in step, so that their loop carries no index arithmetic (which cost 5 % of the float
  // 1024 x 1024 forward).
  template <class Body>
  RESNORM_SIMD_INLINE auto visit(const Body& body) const {
    if (shift == 0) return body([](index j) RESNORM_SIMD_ALWAYS_INLINE { return j; });
    return body([this](index j) RESNORM_SIMD_ALWAYS_INLINE {
      const index moved = j + shift;
      return moved >= whole ? moved - whole : moved;
    });
  }
};

// Rows 0 … rows − 1 of a forward whose y stays in the cache (no streaming stores), two rows in
// flight: one loop writes row t's y (its apply, from L1) while it takes the one-pass sums of row
// t + 1 (from L2 or L3), so that the stores of one row and the loads of the next share the time;
// apart, each pass waits on its own traffic. Row t of x is x + t·x_stride, of y y + t·y_stride;
// stats_out(t, stats) receives each row's statistics. The same bits as layer_norm_row_forward row
// by row: the sums and the apply are the same operations in the same order, only interleaved. A
// row the one pass does not hold takes the two-pass moments as there, and a float row out of
// range (and the last row) the plain row forward. Nothing is prefetched: the loop's own loads of
// row t + 1 run ahead of its stores (prefetching row t + 2 as well made float 1024 x 1024 1.3x
// slower). Float 1024 x 1024 ran 1.23x, 64 x 768 1.41x faster than row by row (medians of 12
// paired runs, AMD Zen 3). Stream: y is written around the cache, a whole pack at a time (the
// rows of y start on cache lines: streams_rows_overlapped), for outputs past streaming_min_bytes.
template <class C, bool HasGamma, bool HasBeta, bool Stream = false, class T, class StatsOut>
RESNORM_WIDE_VECTORS void layer_norm_rows_overlapped(const T* x, index x_stride, T* y,
                                                     index y_stride, index rows, index d,
                                                     const param_t<T>* gamma,
                                                     const param_t<T>* beta, double eps,
                                                     const StatsOut& stats_out) {
  if (rows <= 0) return;
  layer_norm_moments_t<C> m = layer_norm_moments<C>(x, d, eps);
  for (index t = 0; t < rows; ++t) {
    const T* row_x = x + t * x_stride;
    T* row_y = y + t * y_stride;
    if (t + 1 == rows || !m.in_range) {
      stats_out(t, layer_norm_row_finish<C, HasGamma, HasBeta>(row_x, d, gamma, beta, eps, Stream,
                                                               row_y, {row_x, row_y}, m));
      if (t + 1 < rows) m = layer_norm_moments<C>(row_x + x_stride, d, eps);
      continue;
    }
    // Formed only here: past the last row it could point beyond the matrix.
    const T* next_x = row_x + x_stride;
    const C rstd = static_cast<C>(m.stats.rstd);
    const C hi = m.centre.hi, lo_rstd = -(m.centre.lo * rstd);
    const C origin = layer_norm_origin<C>(next_x, d);
    const auto next_sums =
        overlapped_apply_order<C>(row_y, next_x, d)
            .visit([&](auto apply_at) RESNORM_SIMD_ALWAYS_INLINE {
              return simd::finish_sums(simd::row_partial_sums<C, 2>(d, [&](index j, auto tag) {
                if constexpr (simd::is_pack_tag<decltype(tag)>) {
                  using store_tag =
                      std::conditional_t<Stream, simd::streaming_tag, simd::vector_tag>;
                  layer_norm_apply_at<HasGamma, HasBeta>(row_x, apply_at(j), store_tag{}, hi, rstd,
                                                         lo_rstd, gamma, beta, row_y);
                } else {
                  layer_norm_apply_at<HasGamma, HasBeta>(row_x, j, tag, hi, rstd, lo_rstd, gamma,
                                                         beta, row_y);
                }
                const auto c = simd::load<C>(next_x + j, tag) - origin;
                return std::tuple{c, simd::product{c, c}};
              }));
            });
    stats_out(t, m.stats);
    m = layer_norm_one_pass_moments<C>(origin, d, eps, next_sums);
    if (!m.in_range) m = layer_norm_two_pass_moments<C>(next_x, d, eps);
  }
}

// R narrow rows at once: each pass runs over the R rows before the next pass starts, so the R
// rows' reductions (a chain of dependent adds and a square root each) overlap instead of
// following one another. A group with a row that the one pass does not hold (see
// layer_norm_one_pass_moments) is redone row by row, with the same bits as layer_norm_row_forward.
template <class C, int R, bool HasGamma, bool HasBeta, bool Stream, class T>
RESNORM_WIDE_VECTORS void layer_norm_group_forward(const T* const* x, index d,
                                                   const param_t<T>* gamma, const param_t<T>* beta,
                                                   double eps, T* const* y, row_stats* stats,
                                                   const next_row<T>* next) {
  // Each pass's sums for the R rows first, then their horizontal steps together.
  auto each_row = [&]<class F>(const F& partials_of) RESNORM_SIMD_ALWAYS_INLINE {
    return simd::finish_sums([&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::array{partials_of(static_cast<int>(I))...};
    }(std::make_index_sequence<R>{}));
  };
  std::array<C, R> origin;
  for (int r = 0; r < R; ++r) origin[r] = layer_norm_origin<C>(x[r], d);
  const auto sums =
      each_row([&](int r) { return layer_norm_centred_partials<C>(x[r], d, origin[r]); });
  // Kept field by field, in arrays of scalars: an array of the 25-byte moments structs was
  // filled through a stack temporary and copied with wider loads than the stores that wrote it,
  // which miss store forwarding: a stall on every row (8192 x 64 forward 1.16x faster without;
  // AMD Zen 3).
  std::array<double, R> mean, rstd;
  std::array<C, R> hi, lo;
  bool held = true;
#if defined(__AVX512F__)
  if constexpr (R == 8) {
    held = layer_norm_group_one_pass_moments<C>(origin, d, eps, sums, mean, rstd, hi, lo);
  } else
#endif
  {
    for (int r = 0; r < R; ++r) {
      const layer_norm_moments_t<C> m = layer_norm_one_pass_moments<C>(origin[r], d, eps, sums[r]);
      mean[r] = m.stats.mean;
      rstd[r] = m.stats.rstd;
      hi[r] = m.centre.hi;
      lo[r] = m.centre.lo;
      held = held && m.in_range;
    }
  }
  if (!held) {
    for (int r = 0; r < R; ++r) {
      stats[r] = layer_norm_row_forward<C, HasGamma, HasBeta>(x[r], d, gamma, beta, eps, Stream,
                                                              y[r], next[r]);
    }
    return;
  }
  for (int r = 0; r < R; ++r) {
    layer_norm_row_apply<HasGamma, HasBeta, true, Stream>(
        x[r], d, row_centre<C>(hi[r], lo[r]), static_cast<C>(rstd[r]), gamma, beta, y[r], next[r]);
    stats[r].mean = mean[r];
    stats[r].rstd = rstd[r];
  }
}

// Rows up to this many bytes are normalised in groups (forward_rows_per_group in the forwards,
// rows_per_group in the backward): their own passes are too short to hide the reductions'
// latency.
inline constexpr std::size_t group_row_bytes = 2048;

// True when float arithmetic holds a backward row: no overflow (stats, Σg, Σg·xhat below 2^100),
// sums that are 0 or at least 2^-100, and a mean that row_centre<float> holds: hi + lo within
// 2^-48 of it (its low part lo a normal float, which a mean of 2^-102 or more guarantees), or
// exactly. A smaller mean, rounded into lo's subnormals, would be off by up to 2^-150, which is
// not small against a spread of a few float ulps of such a row (xhat = (x − mean)·rstd then
// carries it in full); such rows go to double. Inside the accuracy domain (no subnormal inputs,
// products or xhat) nothing else in the float backward loses bits, so no sum over xhat² is taken.
inline bool float_backward_in_range(row_stats s, double sum_g, double sum_gx) {
  constexpr double limit = 0x1p100;
  // Every test is written to fail for NaN (a NaN or Inf in the row goes to double, where IEEE
  // arithmetic carries it to the row's outputs).
  const double g = std::abs(sum_g), gx = std::abs(sum_gx);
  const bool sums_finite = g <= limit && gx <= limit;
  const bool sums_not_tiny = (g == 0 && gx == 0) || g >= 1 / limit || gx >= 1 / limit;
  if (!(std::abs(s.mean) <= 0x1p127 && s.rstd >= 1 / limit && s.rstd <= limit && sums_finite &&
        sums_not_tiny)) {
    return false;
  }
  const double rest = s.mean - static_cast<double>(static_cast<float>(s.mean));  // exact
  return std::abs(s.mean) >= 0x1p-102 || rest == static_cast<double>(static_cast<float>(rest));
}

// float_backward_in_range of four rows at once, with AVX-512 (row r's stats s[r] and sums
// sum_g[r], sum_gx[r]): the same answer as the four calls, in a few vector compares on the two
// sums and the two statistics of each row, which lie in one register each, where the scalar tests
// and their branches were a fifth of the 8192 x 64 backward. Without AVX-512, the four calls.
inline bool float_backward_group_in_range(const std::array<row_stats, 4>& s,
                                          const std::array<double, 4>& sum_g,
                                          const std::array<double, 4>& sum_gx) {
#if defined(__AVX512F__)
  // Lane 2r holds row r's Σg (its mean), lane 2r + 1 its Σg·xhat (its rstd); a row is in range
  // where its even lane's bit of the result is set. Every compare is ordered: false for NaN.
  constexpr double limit = 0x1p100;
  const __m512d sums = _mm512_setr_pd(sum_g[0], sum_gx[0], sum_g[1], sum_gx[1], sum_g[2], sum_gx[2],
                                      sum_g[3], sum_gx[3]);
  const __m512d abs_sums = _mm512_abs_pd(sums);
  const unsigned finite = _mm512_cmp_pd_mask(abs_sums, _mm512_set1_pd(limit), _CMP_LE_OQ);
  const unsigned large = _mm512_cmp_pd_mask(abs_sums, _mm512_set1_pd(1 / limit), _CMP_GE_OQ);
  const unsigned zero = _mm512_cmp_pd_mask(abs_sums, _mm512_setzero_pd(), _CMP_EQ_OQ);
  const unsigned sums_ok = (finite & (finite >> 1)) & ((zero & (zero >> 1)) | large | (large >> 1));
  const __m512d stats = _mm512_setr_pd(s[0].mean, s[0].rstd, s[1].mean, s[1].rstd, s[2].mean,
                                       s[2].rstd, s[3].mean, s[3].rstd);
  // |mean| ≤ 2^127; 2^-100 ≤ rstd ≤ 2^100 (a negative rstd fails the lower bound).
  const __m512d abs_stats = _mm512_abs_pd(stats);
  const __m512d upper =
      _mm512_setr_pd(0x1p127, limit, 0x1p127, limit, 0x1p127, limit, 0x1p127, limit);
  const __m512d lower = _mm512_setr_pd(0, 1 / limit, 0, 1 / limit, 0, 1 / limit, 0, 1 / limit);
  const unsigned below = _mm512_cmp_pd_mask(abs_stats, upper, _CMP_LE_OQ);
  const unsigned above = _mm512_cmp_pd_mask(stats, lower, _CMP_GE_OQ) | 0x55;
  const unsigned stats_ok = below & above & ((below & above) >> 1);
  // The mean held by hi + lo (even lanes): |mean| ≥ 2^-102, or its rest after rounding to float
  // is itself a float.
  // (Rounded through GCC's vector conversions: GCC 12's _mm512_cvtpd_ps trips -Wuninitialized.)
  using v8d = simd::vec<double, 8>;
  using v8f = simd::vec<float, 8>;
  auto through_float = [](v8d v) {
    return __builtin_convertvector(__builtin_convertvector(v, v8f), v8d);
  };
  const __m512d rest = stats - through_float(stats);
  const unsigned rest_exact = _mm512_cmp_pd_mask(rest, through_float(rest), _CMP_EQ_OQ);
  const unsigned mean_held =
      _mm512_cmp_pd_mask(abs_stats, _mm512_set1_pd(0x1p-102), _CMP_GE_OQ) | rest_exact;
  return (sums_ok & stats_ok & mean_held & 0x55u) == 0x55u;
#else
  bool in_range = true;
  for (int r = 0; r < 4; ++r) {
    in_range = in_range && float_backward_in_range(s[r], sum_g[r], sum_gx[r]);
  }
  return in_range;
#endif
}

// The row after a backward row that goes alone (a wide row not paired), pulled towards the cache
// during the row's second pass, which reads x and dy from the cache: the hardware prefetcher stops
// at each 4 KiB page. x == nullptr: none. Only for an x of next_vjp_row_min_bytes or more: smaller
// inputs are usually still in the cache, where the prefetches only cost (64 x 768 float backward
// 6 % slower with them, 1024 x 1024 10 % faster, 4096 x 4096 15-22 %). The next rows of x and dy
// go to L2, not L1, where they displaced the lines of this row, γ and the dγ/dβ slots: float
// 4096 x 4096 1.28x, 2048 x 2048 1.31x, 4096 x 768 1.20x, 32768 x 4096 1.28x, bf16 4096 x 4096
// 1.16x faster; 1024 x 1024 and 512 x 2048 within the noise (0.97-1.07x; AMD Zen 4, bench/ab).
inline constexpr std::size_t next_vjp_row_min_bytes = std::size_t(1) << 20;
template <class T>
struct next_vjp_row {
  const T* x = nullptr;
  const T* dy = nullptr;
  const T* ds = nullptr;  // AddDs only
  T* dx = nullptr;
  bool stream_dx = false;  // with x: this row's dx written around the cache (streams_vjp_dx)
};

// Whether a backward that prefetches its next rows (an x of next_vjp_row_min_bytes or more) writes
// dx with non-temporal stores: then dx's lines are not first read for ownership, which ordinary
// stores must do, and the reads of x and dy keep the bandwidth. AVX-512 builds only, where it was
// measured: float, one thread, on the AVX-512 Xeon (260 MiB L3), alternating runs of
// layer_norm_vjp_into: 4096 x 4096 14.2-16.5 ms against 18.3-19.5, 1024 x 1024 0.53-0.55 ms
// against 0.57-0.71, 256 x 1024 0.11-0.13 ms against 0.14-0.17, 8192 x 768 2.8-3.0 ms against
// 3.2-3.6. On AMD Zen 3 (AVX2) it lost: 4096 x 4096 float 23 ms against 19.7 ms, bf16 21 ms against
// 13.7 ms (medians of 5 alternating runs). On AMD Zen 5 (AVX-512) it wins from memory and loses
// in the cache: float 4096 x 4096 7.8 ms against 9.4 (medians of 8 alternating processes),
// 1024 x 1024 0.31 ms against 0.27 (medians of 150 samples alternating in one process), so AMD
// CPUs stream dx only past streaming_min_bytes.
inline constexpr bool streams_vjp_dx = simd::register_bytes == 64;

// The smallest x (bytes) whose backward streams dx, where streams_vjp_dx allows it.
inline std::size_t streamed_dx_min_bytes() {
  return amd_cpu() ? std::max(next_vjp_row_min_bytes, streaming_min_bytes) : next_vjp_row_min_bytes;
}

// The centre of a row in the double backward. Its saved mean is the true mean rounded to double,
// off by up to half an ulp of the mean, and that error times rstd moves every xhat: 1e-8 of dx on
// a row of 1e8 + N(0, 1). So the row is summed once more, lo = Σ(x − mean)/d, and lo kept beside
// the mean as the forward keeps hi + lo: x − mean is exact by Sterbenz's lemma for every x within
// a factor 2 of the mean, which on a row of large offset is nearly all of them. Double rows take
// this pass always: the error's share of xhat is ulp(mean) / max|x − mean|, which rstd does not
// bound where eps outweighs the variance (1e-10 of dγ on a row of 1.1e-37 with spread 5e-44 and
// eps = 1.1e-42, |mean|·rstd 1.4e-16: a fuzz find). float and bf16 rows, whose spread is at least
// an ulp of float unless they are constant, need it only past 16 standard deviations of offset, and
// even there a double mean holds 29 bits more than their centring can use.
template <class T>
row_centre<double> corrected_centre(const T* x, index d, row_stats s) {
  if constexpr (std::is_same_v<T, double>) {
    if (!std::isfinite(s.mean)) return row_centre<double>(s.mean);
  } else {
    if (!(std::abs(s.mean) * s.rstd > 16)) return row_centre<double>(s.mean);  // also NaN, Inf
  }
  const double sum_c = simd::row_sums<double, 1>(
      d, [&](index j, auto tag) { return std::array{simd::load<double>(x + j, tag) - s.mean}; })[0];
  const double lo = sum_c / static_cast<double>(d);
  // Σ(x − mean) past double's range (values near DBL_MAX on either side of the mean): the spread
  // is then as large as the mean, and the mean's half ulp nothing to it.
  if (!std::isfinite(lo)) return row_centre<double>(s.mean);
  return fitted_centre(s.mean, lo, s.rstd);
}

// R rows of a backward, processed together so that dγ and dβ are loaded and stored once per R
// rows rather than once per row (their read-modify-write is most of the stores of a row), and
// so that the R rows' reductions overlap. Row r: x[r], dy[r], stats s[r], writes dx[r] (+ ds[r]).
template <class T, int R>
struct row_group {
  const T* x[R];
  const T* dy[R];
  const T* ds[R];  // used only by the fused add + norm (AddDs)
  T* dx[R];
  row_stats s[R];
};

// Float groups of rows this long run norm_group_vjp with d fixed at compile time (FixedD), its
// loops over 4 packs (8 on AVX2) unrolled and its tails gone: 1.11x at 8192 x 64 (AVX-512,
// Zen 5), where a row is a few dozen instructions and the loops' counting and branches were a
// large part of them.
// 64 is the width of an attention head, over which per-head norms (QK-norm) run on many rows.
inline constexpr index fixed_group_length = 64;

// The backward of each row of the group. With a = mean(g), b = mean(g ⊙ xhat):
//   dx_j = rstd · (g_j − a − xhat_j · b)
//   dγ_j += Σ_r dy_j · xhat_j,  dβ_j += Σ_r dy_j     (accumulated in A, the workspace's type)
//   (+ ds_j, the gradient arriving from another use of x, when AddDs: fused add + norm)
// Centred: LayerNorm (xhat = (x − mean)·rstd). Not centred: RMSNorm (xhat = x·rstd, a = 0, no
// dβ), which is the same computation without the mean.
// A float group with a row whose sums leave float's range (or NaN/Inf) is redone in double.
template <class C, int R, bool Centred, bool HasGamma, bool WantDGamma, bool WantDBeta, bool AddDs,
          index FixedD = 0, class T, class A>
RESNORM_WIDE_VECTORS void norm_group_vjp(const row_group<T, R>& rows, index d,
                                         const param_t<T>* RESNORM_RESTRICT gamma,
                                         A* RESNORM_RESTRICT dgamma, A* RESNORM_RESTRICT dbeta,
                                         next_vjp_row<T> next = {}) {
  // The row length as a constant where the caller fixed it (fixed_group_length).
  if constexpr (FixedD != 0) d = FixedD;
  using simd::load, simd::splat;
  // g_scale: 1, or (double rows only) the power of two that brings g = dy ⊙ γ back into range
  // when its sums overflow; out_scale = rstd / g_scale then undoes it in dx (dx is linear in g).
  struct row_constants {
    row_centre<C> centre;
    C rstd = 0, lo_rstd = 0, a = 0, b = 0, g_scale = 1, out_scale = 0;
  };
  auto constants_of = [&](int r) {
    const C rstd = static_cast<C>(rows.s[r].rstd);
    const row_centre<C> centre = [&] {
      if constexpr (Centred && std::is_same_v<C, double>) {
        return corrected_centre(rows.x[r], d, rows.s[r]);
      } else {
        return row_centre<C>(rows.s[r].mean);
      }
    }();
    return row_constants{centre, rstd, -(centre.lo * rstd), C(0), C(0), C(1), rstd};
  };
  // Built entry by entry rather than default-constructed and assigned: the default
  // construction became a `rep stos` on every group (3.6 % of the 8192 x 64 backward).
  auto k = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<row_constants, R>{constants_of(static_cast<int>(I))...};
  }
  (std::make_index_sequence<R>{});
  bool in_range = true;
  auto xhat_of = [&](int r, index j, auto tag) {
    if constexpr (Centred) {
      return simd::fma(load<C>(rows.x[r] + j, tag) - k[r].centre.hi, splat(k[r].rstd, tag),
                       splat(k[r].lo_rstd, tag));
    } else {
      return load<C>(rows.x[r] + j, tag) * k[r].rstd;
    }
  };
  // g = dy·γ at j, from dy_j loaded by the caller.
  auto g_from = [&](int r, auto dy_j, index j, auto tag) {
    auto g = dy_j;
    // Scaled first (exact: a power of two), as dy·γ itself may overflow.
    if constexpr (std::is_same_v<C, double>) g *= k[r].g_scale;
    if constexpr (HasGamma) g *= load<C>(gamma + j, tag);
    return g;
  };
  const double inv_d = 1.0 / static_cast<double>(d);
  // Σg (Centred only) and Σg·xhat of row r, before their horizontal step, in the chains per sum
  // the backward had when it also summed xhat² (two for LayerNorm): sum_chains<2> = 4 left
  // 8192 x 64 4 % and paired 64 x 768 rows 2 % slower (medians of 150 alternating samples).
  constexpr int S = Centred ? 2 : 1;
  constexpr int chains = simd::sum_chains<S + 1>;
  // Inlined by force: GCC kept it out of line (it is called twice in double), and the row's
  // constants and accumulators went through memory with it.
  // A group of narrow rows (R = rows_per_group: at most group_row_bytes of T each) keeps the
  // packs of xhat its sums compute in L1 for its second pass, which loads them instead of
  // forming them again from x (the same values: the same operations).
  constexpr bool keeps_xhat = R == rows_per_group;
  constexpr index kept_length = keeps_xhat ? static_cast<index>(group_row_bytes / sizeof(T)) : 1;
  alignas(64) C kept_xhat[R][kept_length];
  auto partials_of = [&](int r) RESNORM_SIMD_ALWAYS_INLINE {
    return simd::row_partial_sums<C, S, chains>(d, [&](index j, auto tag) {
      const auto g = g_from(r, load<C>(rows.dy[r] + j, tag), j, tag);
      const auto xhat = xhat_of(r, j, tag);
      if constexpr (keeps_xhat && simd::is_pack_tag<decltype(tag)>) {
        simd::store(&kept_xhat[r][j], xhat, simd::vector_tag{});
      }
      if constexpr (Centred) {
        return std::tuple{g, simd::product{g, xhat}};
      } else {
        return std::array{simd::product{g, xhat}};
      }
    });
  };
  // The R rows' sums first, then their horizontal steps together (simd::finish_sums of a group).
  auto sums = simd::finish_sums([&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array{partials_of(static_cast<int>(I))...};
  }(std::make_index_sequence<R>{}));
  // Row r's Σg (0 where not centred) and Σg·xhat, as they stand (the double rows may sum again).
  auto sum_g_of = [&](int r) { return Centred ? sums[r][0] : 0.0; };
  auto sum_gx_of = [&](int r) { return sums[r][S - 1]; };
  // Four float rows: their range checked together (the same answer as row by row).
  constexpr bool group_check = !std::is_same_v<C, double> && R == 4;
  if constexpr (group_check) {
    std::array<row_stats, 4> stats;
    std::array<double, 4> sum_g, sum_gx;
    for (int r = 0; r < R; ++r) {
      stats[r] = rows.s[r];
      sum_g[r] = sum_g_of(r);
      sum_gx[r] = sum_gx_of(r);
    }
    in_range = float_backward_group_in_range(stats, sum_g, sum_gx);
  }
  for (int r = 0; r < R; ++r) {
    if constexpr (std::is_same_v<C, double>) {
      // Σg or Σg·xhat beyond 2^1000 (up to d·|g|·sqrt(d) of finite g, or g = dy·γ itself past
      // double): sum g·2^-s instead, with the largest |g| brought near 2^900. Its exponent is
      // taken as max(ilogb dy + ilogb γ), which cannot overflow. A NaN or Inf in the row leaves
      // it unscaled: its outputs are NaN either way.
      if (!(std::abs(sum_g_of(r)) <= 0x1p1000 && std::abs(sum_gx_of(r)) <= 0x1p1000)) {
        int largest = std::numeric_limits<int>::min();
        bool finite = true;
        for (index j = 0; j < d; ++j) {
          const double dy_j = load_as<double>(rows.dy[r][j]);
          const double gamma_j = HasGamma ? load_as<double>(gamma[j]) : 1.0;
          // ilogb of NaN, Inf or 0 is not an exponent (INT_MIN / INT_MAX / FP_ILOGB0).
          const bool finite_j = std::isfinite(dy_j) && std::isfinite(gamma_j);
          finite = finite && finite_j;
          if (finite_j && dy_j != 0 && gamma_j != 0) {
            largest = std::max(largest, std::ilogb(dy_j) + std::ilogb(gamma_j));
          }
        }
        if (finite && largest > 900) {
          // At most 2^-1022, the smallest normal power of two: |g| up to 2^1900 is covered, past
          // both |dy| and |γ| near 1e300 the sums still overflow (outside the stated domain).
          const int shift = std::min(largest - 900, 1022);
          k[r].g_scale = std::ldexp(1.0, -shift);
          k[r].out_scale = std::ldexp(k[r].rstd, shift);
          sums[r] = simd::finish_sums(partials_of(r));
        }
      }
    } else if constexpr (!group_check) {
      in_range = in_range && float_backward_in_range(rows.s[r], sum_g_of(r), sum_gx_of(r));
    }
    k[r].a = static_cast<C>(sum_g_of(r) * inv_d);
    k[r].b = static_cast<C>(sum_gx_of(r) * inv_d);
  }
  if constexpr (!std::is_same_v<C, double>) {
    if (!in_range) {
      // Row by row: a single row in range stays in C (the same bits as in a group), a single
      // row out of range goes to double.
      for (int r = 0; r < R; ++r) {
        const row_group<T, 1> row{
            {rows.x[r]}, {rows.dy[r]}, {rows.ds[r]}, {rows.dx[r]}, {rows.s[r]}};
        if constexpr (R == 1) {
          norm_group_vjp<double, 1, Centred, HasGamma, WantDGamma, WantDBeta, AddDs>(row, d, gamma,
                                                                                     dgamma, dbeta);
        } else {
          norm_group_vjp<C, 1, Centred, HasGamma, WantDGamma, WantDBeta, AddDs>(row, d, gamma,
                                                                                dgamma, dbeta);
        }
      }
      return;
    }
  }
  // d = 1: xhat = 0 and the Jacobian is exactly 0. Computed, g − a would leave g's rounding
  // error (times rstd = 1/sqrt(eps)) wherever the compiler fuses dy·γ − a into one FMA.
  const bool zero_jacobian = Centred && d == 1;
  auto body = [&](index j, auto tag) {
    auto dgamma_j = splat(C(0), tag);
    auto dbeta_j = splat(C(0), tag);
    if constexpr (WantDGamma) dgamma_j = load<C>(dgamma + j, tag);
    if constexpr (WantDBeta) dbeta_j = load<C>(dbeta + j, tag);
    for (int r = 0; r < R; ++r) {
      const auto xhat = [&] {
        if constexpr (keeps_xhat && simd::is_pack_tag<decltype(tag)>) {
          return load<C>(&kept_xhat[r][j], simd::vector_tag{});
        } else {
          return xhat_of(r, j, tag);
        }
      }();
      // Loaded once, before dx is stored. dx and dy are not restrict, so a load after the store
      // is a second load, and presumably one that waits on the store's address check (x, dy and
      // dx rows from aligned buffers share their low 12 bits; not confirmed with counters, which
      // this VM lacks). Without the reload the float backward ran 1.00-1.24x faster (medians of
      // 15-20 interleaved in-process runs, two runs, 64 x 768 to 8192 x 64; AMD Zen 3).
      const auto dy_j = load<C>(rows.dy[r] + j, tag);
      auto v = g_from(r, dy_j, j, tag);
      if constexpr (Centred) v -= k[r].a;
      v = simd::fma(xhat, splat(-k[r].b, tag), v) * k[r].out_scale;
      if (zero_jacobian) v = xhat * C(0);  // 0, or NaN from a NaN row
      if constexpr (AddDs) v += load<C>(rows.ds[r] + j, tag);
      simd::store(rows.dx[r] + j, v, tag);
      if constexpr (WantDGamma) dgamma_j = simd::fma(dy_j, xhat, dgamma_j);
      if constexpr (WantDBeta) dbeta_j += dy_j;
    }
    if constexpr (WantDGamma) simd::store(dgamma + j, dgamma_j);
    if constexpr (WantDBeta) simd::store(dbeta + j, dbeta_j);
  };
  if constexpr (R == 1) {
    if (next.x != nullptr) {
      // body, pulling next's packs at j towards the cache: x, dy (and ds), and dx unless its
      // stores go around the cache (a streaming_tag), as prefetch_next_row does in the forward.
      auto prefetching = [&](index j, auto tag) {
        using Tag = decltype(tag);
        if constexpr (simd::is_pack_tag<Tag>) {
          // Into L2 only: see next_vjp_row.
          constexpr auto l2 = simd::prefetch_to::l2;
          simd::prefetch_read<l2>(next.x + j);
          simd::prefetch_read<l2>(next.dy + j);
          if constexpr (AddDs) simd::prefetch_read<l2>(next.ds + j);
          if constexpr (!std::is_base_of_v<simd::streaming_tag, Tag>) {
            simd::prefetch_write(next.dx + j);
          }
        }
        body(j, tag);
      };
      // The same bits either way: only where the stores of dx go differs.
      if (next.stream_dx) {
        simd::for_each_streaming<C, T>(d, rows.dx[0], prefetching);
      } else {
        simd::for_each<C, T>(d, prefetching);
      }
      return;
    }
  }
  if constexpr (FixedD != 0) {
    simd::for_each_of_length<C, T, FixedD>(body);
  } else {
    simd::for_each<C, T>(d, body);
  }
}

// One row of the backward (a group of one).
template <class C, bool HasGamma, bool WantDGamma, bool WantDBeta, bool AddDs = false, class T,
          class A>
void layer_norm_row_vjp(const T* x, const T* dy, index d, const param_t<T>* gamma, row_stats s,
                        T* dx, A* dgamma, A* dbeta, const T* ds = nullptr) {
  const row_group<T, 1> row{{x}, {dy}, {ds}, {dx}, {s}};
  norm_group_vjp<C, 1, true, HasGamma, WantDGamma, WantDBeta, AddDs>(row, d, gamma, dgamma, dbeta);
}

// Wide backward rows of an x below paired_vjp_max_bytes go two at a time (dγ and dβ loaded and
// stored once per pair) unless a row stride of x, dy, dx or ds is a multiple of 4 KiB: then the
// two rows of each sit at the same offset modulo 4 KiB, and with γ, dγ, dβ a pair keeps 9 or more
// streams over one 8-way L1 set. In pairs, float 64 x 768 ran 1.06-1.10x and 512 x 768
// 1.08-1.19x faster than alone (LayerNorm, RMSNorm, add + LN; in-process A/B, medians of 20-30
// interleaved runs, AMD Zen 3). Not from memory: 4096 x 768 (x, dy, dx of 12 MiB each, past the
// 32 MiB L3) ran 0.67-0.79x, and 0.76-0.82x with the next pair prefetched; there the rows alone,
// with next_vjp_row, keep more of the bandwidth. 4 rows at a time were slower in the cache too
// (0.90x at 64 x 768: 4 rows' constants do not fit AVX2's 16 registers beside the pass's own).
inline constexpr int wide_rows_per_group = 2;
inline constexpr std::size_t paired_vjp_max_bytes = std::size_t(4) << 20;
inline bool row_stride_spares_l1_sets(index stride, std::size_t element_bytes) {
  return static_cast<std::size_t>(stride) * element_bytes % 4096 != 0;
}

// Rows [begin, end) of a backward, narrow ones in groups of rows_per_group, wide ones in pairs
// where their strides allow: what one reduction block of blocked_vjp runs. stats(t) gives row t's
// mean and rstd; ds may be empty.
template <class C, bool Centred, bool HasGamma, bool WantDGamma, bool WantDBeta, bool AddDs,
          class T, class A, class Stats>
void norm_range_vjp(index begin, index end, matrix_cref<T> x, matrix_cref<T> dy, const T* ds_data,
                    index ds_stride, const param_t<T>* gamma, const Stats& stats, matrix_ref<T> dx,
                    A* dgamma, A* dbeta) {
  const index d = x.cols();
  auto fill = [&]<int R>(row_group<T, R>& g, index t) {
    for (int r = 0; r < R; ++r) {
      g.x[r] = x.row(t + r).data();
      g.dy[r] = dy.row(t + r).data();
      g.ds[r] = ds_data ? ds_data + (t + r) * ds_stride : nullptr;
      g.dx[r] = dx.row(t + r).data();
      g.s[r] = stats(t + r);
    }
  };
  index t = begin;
  // Rows from t in groups of R, while enabled and R rows remain.
  auto groups_of = [&]<int R>(std::integral_constant<int, R>, bool enabled) {
    auto run = [&]<index FixedD>(std::integral_constant<index, FixedD>) {
      for (; enabled && t + R <= end; t += R) {
        row_group<T, R> g;
        fill(g, t);
        norm_group_vjp<C, R, Centred, HasGamma, WantDGamma, WantDBeta, AddDs, FixedD>(
            g, d, gamma, dgamma, dbeta);
      }
    };
    if constexpr (std::is_same_v<C, float> && R == rows_per_group) {
      if (d == fixed_group_length) {
        run(std::integral_constant<index, fixed_group_length>{});
        return;
      }
    }
    run(std::integral_constant<index, 0>{});
  };
  // Narrow rows only: a group of wide rows keeps 4 rows each of x, dy and dx (plus dγ, dβ) at
  // the same offset modulo 4 KiB when the row length is a power of two, 14 streams over one L1
  // set of 8 ways. Ungrouped, 1024 x 1024 ran in 0.82-0.87 ms against 1.8 ms (Zen 3). On the
  // AVX-512 Xeon, wide rows in groups of 4 or 8 (dx streamed) halved the time of rows in L2
  // (16 x 4096 float 25-30 µs against 48-52) but lost from memory (4096 x 4096 16.4-17.1 ms
  // against 13.6-17.6 alone, bf16 in groups of 8 36-41 ms against 9.1-9.4).
  const bool grouped = static_cast<std::size_t>(d) * sizeof(T) <= group_row_bytes;
  groups_of(std::integral_constant<int, rows_per_group>{}, grouped);
  auto spares = [](index stride) { return row_stride_spares_l1_sets(stride, sizeof(T)); };
  const bool paired = !grouped &&
                      static_cast<std::size_t>(x.size()) * sizeof(T) < paired_vjp_max_bytes &&
                      spares(x.outerStride()) && spares(dy.outerStride()) &&
                      spares(dx.outerStride()) && (ds_data == nullptr || spares(ds_stride));
  groups_of(std::integral_constant<int, wide_rows_per_group>{}, paired);
  const bool prefetch = static_cast<std::size_t>(x.size()) * sizeof(T) >= next_vjp_row_min_bytes;
  const bool stream = prefetch && streams_vjp_dx &&
                      static_cast<std::size_t>(x.size()) * sizeof(T) >= streamed_dx_min_bytes();
  for (; t < end; ++t) {
    row_group<T, 1> g;
    fill(g, t);
    next_vjp_row<T> next;
    if (prefetch) {
      // The last row prefetches itself again (the next row of another thread's block is not ours
      // to pull in).
      const index n = t + 1 < end ? t + 1 : t;
      next = {x.row(n).data(), dy.row(n).data(), ds_data ? ds_data + n * ds_stride : nullptr,
              dx.row(n).data(), stream};
    }
    norm_group_vjp<C, 1, Centred, HasGamma, WantDGamma, WantDBeta, AddDs>(g, d, gamma, dgamma,
                                                                          dbeta, next);
  }
  if (stream) stream_fence();
}

template <class T, class C>
void layer_norm_vjp_rows(matrix_cref<T> x, matrix_cref<T> dy, const param_t<T>* gamma,
                         const double* mean, const double* rstd, double eps, matrix_ref<T> dx,
                         param_t<T>* dgamma, param_t<T>* dbeta, kernel_workspace& ws) {
  const index d = x.cols();
  ws.keep_clear_of({x.data(), dy.data(), dx.data()});
  dispatch2(gamma != nullptr, dgamma != nullptr, [&]<bool G, bool DG>() {
    dispatch2(dbeta != nullptr, false, [&]<bool DB, bool>() {
      blocked_vjp<C>(x.rows(), d, dgamma, dbeta, ws, [&](index begin, index end, C* dg, C* db) {
        auto stats = [&](index t) {
          return mean ? row_stats{mean[t], rstd[t]}
                      : layer_norm_row_stats<C>(x.row(t).data(), d, eps);
        };
        norm_range_vjp<C, true, G, DG, DB, false>(begin, end, x, dy, static_cast<const T*>(nullptr),
                                                  0, gamma, stats, dx, dg, db);
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
      index t = begin;
      if (static_cast<std::size_t>(d) * sizeof(T) <= kernels::group_row_bytes) {
        constexpr int R = kernels::forward_rows_per_group;
        kernels::dispatch2(stream, false, [&]<bool S, bool>() {
          for (; t + R <= end; t += R) {
            const auto xs = kernels::row_pointers<R>(x, t);
            const auto ys = kernels::row_pointers<R>(y, t);
            const auto next = kernels::group_next_rows<R>(x, y, t, end);
            kernels::row_stats s[R];
            kernels::layer_norm_group_forward<C, R, G, B, S>(xs.data(), d, g, b, eps, ys.data(), s,
                                                             next.data());
            for (int r = 0; r < R; ++r) {
              if (mean_out) mean_out[t + r] = s[r].mean;
              if (rstd_out) rstd_out[t + r] = s[r].rstd;
            }
          }
        });
      }
      if (kernels::overlaps_rows<C, T> && stream && t < end &&
          kernels::streams_rows_overlapped<C>(y.data(), y.outerStride(), y.rows())) {
        kernels::layer_norm_rows_overlapped<C, G, B, true>(
            x.row(t).data(), x.outerStride(), y.row(t).data(), y.outerStride(), end - t, d, g, b,
            eps, [&, first = t](index i, kernels::row_stats s) {
              if (mean_out) mean_out[first + i] = s.mean;
              if (rstd_out) rstd_out[first + i] = s.rstd;
            });
        t = end;
      }
      if (kernels::overlaps_rows<C, T> && !stream && t < end) {
        kernels::layer_norm_rows_overlapped<C, G, B>(
            x.row(t).data(), x.outerStride(), y.row(t).data(), y.outerStride(), end - t, d, g, b,
            eps, [&, first = t](index i, kernels::row_stats s) {
              if (mean_out) mean_out[first + i] = s.mean;
              if (rstd_out) rstd_out[first + i] = s.rstd;
            });
        t = end;
      }
      for (; t < end; ++t) {
        const index next = t + 1 < end ? t + 1 : t;
        const kernels::row_stats s = kernels::layer_norm_row_forward<C, G, B>(
            x.row(t).data(), d, g, b, eps, stream, y.row(t).data(),
            {x.row(next).data(), y.row(next).data()});
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

// The same, recomputing mean and rstd from x (memory: nothing kept from the forward; cost: one
// more pass per row over x while it sits in L1, two for a row the one-pass moments refuse).
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
