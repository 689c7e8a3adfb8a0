// resnorm/kernels/gelu_kernel.hpp — vectorised GELU (erf and tanh forms), forward and backward.
//
//   erf:   GELU(x) = x · Φ(x),  Φ(x) = erfc(−x/√2)/2,   GELU'(x) = Φ(x) + x · φ(x)
//   tanh:  GELU(x) ≈ x · σ(2u),  u = √(2/π)(x + 0.044715 x³)   (½(1 + tanh u) = σ(2u))
//          GELU'(x) ≈ σ(2u) + x · 2σ(2u)(1 − σ(2u)) · √(2/π)(1 + 3 · 0.044715 x²)
//
// x, y, dx, dy: T x d of float, double or Eigen::bfloat16. Arithmetic C = compute_t<T> by
// default. In float, the kernels avoid libm so the loops vectorise:
//   e^x:   2^k · p(r), r = x − k ln 2 (ln 2 split in two, Cody–Waite), p the degree-7 Taylor
//          polynomial: |r| ≤ ln2/2 bounds its relative error by 0.347⁸/8! ≈ 5e-9;
//   erfc:  Abramowitz & Stegun 7.1.26, erfc(z) ≈ t·(a1 + t(a2 + t(a3 + t(a4 + t a5))))·e^(−z²),
//          t = 1/(1 + p z), z ≥ 0, with absolute error ≤ 1.5e-7 (the erf derivative);
//   Φ, σ(2u): for the forwards, F(x) ≈ 1/2 + x·P(x²)/Q(x²) on [−5.5, 5.5], P and Q of degree 5,
//          fitted for this library (absolute error 2e-8 before rounding), with no e^x.
// Stated accuracy of the float kernels against a double reference, every float x in [−10, 10]
// (tests/gelu_kernel_test.cpp sweeps them): |error| ≤ 1e-6 · max(1, |x|) for both forms and the
// erf derivative. That is an absolute bound: for x ≪ 0, where GELU(x) is tiny, the relative
// error of the float forwards grows as |GELU(x)| falls towards their absolute error of about
// 1e-7·|x|, past 100 % below x ≈ −5 (the sign stays right): use C = double, as the gelu class
// does, for relative accuracy.
// With C = double the kernels call std::erfc / std::exp per element and round once.
// bf16 (either C) looks each element up in a table of the C = double values (bf16_table.hpp):
// the same bits as the double element loop, at the cost of a load per element.
// Non-finite x, either C: NaN gives NaN; GELU(+inf) = +inf, GELU(−inf) = −0,
// GELU'(+inf) = 1, GELU'(−inf) = 0 — the limits, never inf · 0 = NaN.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "resnorm/detail/check.hpp"
#include "resnorm/kernels/bf16_table.hpp"
#include "resnorm/kernels/parallel.hpp"
#include "resnorm/kernels/simd.hpp"
#include "resnorm/kernels/storage.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

enum class gelu_approximation { erf, tanh };

namespace kernels {

// c ? a : b, as a bit mask over a and b (both already computed). GCC 12 keeps a `?:` whose arm
// does arithmetic as a branch under its default -ftrapping-math, even with the arm hoisted (it
// sinks it back), and a branch keeps the whole row loop scalar where there are no AVX-512 masks:
// GELU erf at 0.10x oneDNN on AVX2. The integer form has no arm to sink: the loop vectorises to
// a blend, with the same bits as `?:`.
// Other types (long double) take the plain `?:`.
template <class F>
RESNORM_SIMD_INLINE F select(bool c, F a, F b) {
  if constexpr (std::is_same_v<F, float> || std::is_same_v<F, double>) {
    using U = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
    const U mask = U(0) - static_cast<U>(c);
    return std::bit_cast<F>((std::bit_cast<U>(a) & mask) | (std::bit_cast<U>(b) & ~mask));
  } else {
    return c ? a : b;
  }
}

// The element functions below run inside the vectorised row loop, so they are always inlined:
// a call per element (which GCC chose when a translation unit instantiated several of them)
// runs the loop scalar, several times slower.
//
// e^x in float for x in [−87.3, 88.3], where 2^k is a normal float (outside it the result is
// meaningless: the exponent bits wrap). NaN in, NaN out.
RESNORM_SIMD_INLINE float exp_float_in_range(float x) {
  // k = round(x / ln 2): adding 1.5·2^23 rounds to an integer, and subtracting it again leaves k
  // (no -ffast-math, so the compiler keeps both operations). The multiply-adds are written as
  // simd::fma: resnorm builds with -ffp-contract=off, and left to the compiler they would be two
  // instructions each (GELU erf forward 0.7x oneDNN instead of 1.05-1.24x, AMD Zen 3).
  using simd::fma;
  const float shifted = fma(x, 1.44269504f, 12582912.f);
  const float k = shifted - 12582912.f;
  const float r = fma(-k, 1.42860677e-6f, fma(-k, 0.693145752f, x));
  float p = 1.f / 5040.f;
  p = fma(p, r, 1.f / 720.f);
  p = fma(p, r, 1.f / 120.f);
  p = fma(p, r, 1.f / 24.f);
  p = fma(p, r, 1.f / 6.f);
  p = fma(p, r, 0.5f);
  p = fma(p, r, 1.f);
  p = fma(p, r, 1.f);
  // 2^k built from shifted's bits, not by converting k to int: converting a NaN (or any float
  // out of int's range) is undefined behaviour. Between 2^23 and 2^24 a float's ulp is 1, so
  // bits(1.5·2^23 + k) = bits(1.5·2^23) + k; the unsigned arithmetic wraps, defined for every
  // input. For a NaN x the exponent bits are meaningless, but p is NaN and so is the product.
  const std::uint32_t k_bits =
      std::bit_cast<std::uint32_t>(shifted) - std::bit_cast<std::uint32_t>(12582912.f);
  const std::uint32_t biased = (k_bits + 127u) << 23;
  return p * std::bit_cast<float>(biased);
}

// e^x in float, clamped to [−87.3, 88.3] so that 2^k stays a normal float. NaN in, NaN out.
RESNORM_SIMD_INLINE float exp_float(float x) {
  // Comparisons rather than std::min/std::max, whose precondition a NaN breaks: every comparison
  // with NaN is false, so a NaN x passes through unchanged and reaches the result through r and p.
  return exp_float_in_range(select(x < -87.3f, -87.3f, select(x > 88.3f, 88.3f, x)));
}

// Φ(x) (the normal CDF) and e^(−x²/2), float.
struct phi_parts {
  float cdf, gauss;
};

RESNORM_SIMD_INLINE phi_parts normal_cdf_float(float x) {
  const float z = std::abs(x) * 0.707106781f;  // |x|/√2
  using simd::fma;
  const float t = 1.f / fma(0.3275911f, z, 1.f);
  float poly = 1.061405429f;
  poly = fma(poly, t, -1.453152027f);
  poly = fma(poly, t, 1.421413741f);
  poly = fma(poly, t, -0.284496736f);
  poly = fma(poly, t, 0.254829592f);
  const float gauss = exp_float(-z * z);
  const float half_erfc = 0.5f * t * poly * gauss;  // Φ(−|x|)
  return {select(x >= 0.f, 1.f - half_erfc, half_erfc), gauss};
}

// Beyond |x| = 13.2, e^(−x²/2) < e^(−87.3): exp_float holds it at that floor instead of letting
// it fall, so the float kernels drop the terms in φ there. They are below 1e-37 (|x|·φ(x) at
// |x| = 13.2), and from the held floor they would grow with |x|, to ±inf · φ at x = ±inf.
inline constexpr float gauss_floor_x = 13.2f;

inline constexpr double inv_sqrt_2pi = std::numbers::inv_sqrtpi / std::numbers::sqrt2;
inline constexpr double tanh_k0 = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // √(2/π)
inline constexpr double tanh_k1 = 0.044715;

// The factor F of x in a float GELU forward, y = x·F(x) (F = Φ for the erf form, σ(2u) for the
// tanh form), as F(x) ≈ 1/2 + x·P(x²)/Q(x²) with P and Q of degree 5 in x², on [low, high].
// Each F − 1/2 was fitted on [−5.5, 5.5] by iteratively reweighted least squares (Lawson's
// method) for the smallest largest error, 2.0e-8 (Φ) and 2.3e-8 (σ(2u)) in double; P(0) is F's
// slope at 0 (1/√(2π) for both). Every coefficient is positive: Q ≥ 1 and no term cancels. In
// float the 13 operations and the rounded coefficients add up to about 2e-7 (gelu_from_fit).
// Without e^x they take half the operations of x·Φ from erfc (normal_cdf_float) and two thirds
// of x / (1 + e^(−2u)).
struct gelu_factor_fit {
  float p[6];  // P's coefficients, x⁰ first
  float q[5];  // Q's, x² first (Q's constant is 1)
  float low;   // below: y = −0 (|GELU(x)| < 1.1e-7 there; x = −inf gives −0, not −inf·F)
  float high;  // above: y = x (F within 1e-7 of 1; a little further the rounded F can be
               // 1 + 2^-23, which would put y above x)
  RESNORM_SIMD_INLINE float operator()(float x) const {
    using simd::fma;
    const float s = x * x;
    float num = fma(fma(fma(fma(fma(p[5], s, p[4]), s, p[3]), s, p[2]), s, p[1]), s, p[0]);
    float den = fma(fma(fma(fma(fma(q[4], s, q[3]), s, q[2]), s, q[1]), s, q[0]), s, 1.f);
    return fma(x, num / den, 0.5f);
  }
};

// Φ(x). From 5.28 up (5.31 where the multiply-adds are fused) the rounded Φ can exceed 1.
inline constexpr gelu_factor_fit normal_cdf_fit{
    {3.989422619e-01f, 3.264854476e-02f, 4.600832704e-03f, 1.565116836e-04f, 6.262556326e-06f,
     2.361769802e-08f},
    {2.485042959e-01f, 2.795030922e-02f, 1.813928830e-03f, 6.970089453e-05f, 1.216531587e-06f},
    -5.5f,
    5.2f};

// σ(2u), u = √(2/π)(x + 0.044715 x³). From 4.93 up the rounded σ can exceed 1.
inline constexpr gelu_factor_fit tanh_sigma_fit{
    {3.989422917e-01f, 3.045388870e-02f, 3.642723663e-03f, 1.343812328e-04f, 7.098944934e-06f,
     2.438876656e-08f},
    {2.438287735e-01f, 2.439731918e-02f, 1.305373735e-03f, 7.620196993e-05f, 1.328338840e-06f},
    -5.5f,
    4.9f};

// y = x·F(x), with the sign of x: near low the rounded F may fall a few 1e-8 below 0, which
// would make y positive; copysign is one bitwise instruction, where clamping F to [0, 1] (compares
// and blends) made the erf forward 1.4x slower in the cache. With F ≤ 1 below high, y always lies
// between 0 and x. Over every float in [−10, 10] the error is at most 2.2e-7·max(1, |x|) for
// either form (2.6e-7 where the multiply-adds are not fused). Outside [low, high] the selects drop
// F (NaN at x = ±inf: inf/inf). A NaN x fails both comparisons and stays NaN.
RESNORM_SIMD_INLINE float gelu_from_fit(float x, const gelu_factor_fit& f) {
  return select(x < f.low, -0.f, select(x > f.high, x, std::copysign(x * f(x), x)));
}

template <class C>
RESNORM_SIMD_INLINE C gelu_erf_value(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return gelu_from_fit(x, normal_cdf_fit);
  } else {
    // erfc(−x/√2) keeps relative accuracy for x < 0, where 1 + erf cancels. Where it underflows
    // to 0, GELU(x) is −0 for every x ≤ −38.5, −inf included (where x · 0 would be NaN).
    const C two_cdf = std::erfc(-x * std::numbers::sqrt2_v<C> / C(2));
    return two_cdf == C(0) ? C(-0.0) : C(0.5) * x * two_cdf;
  }
}

template <class C>
RESNORM_SIMD_INLINE C gelu_erf_slope(C x) {
  if constexpr (std::is_same_v<C, float>) {
    const phi_parts p = normal_cdf_float(x);
    // Φ(x) alone beyond |x| = 13.2 (see gauss_floor_x); a NaN x fails the comparison and
    // reaches the result through Φ.
    const float tail =
        select(std::abs(x) < gauss_floor_x, x * (static_cast<float>(inv_sqrt_2pi) * p.gauss), 0.f);
    return p.cdf + tail;
  } else {
    const C cdf = C(0.5) * std::erfc(-x * std::numbers::sqrt2_v<C> / C(2));
    const C gauss = std::exp(C(-0.5) * x * x);
    // Once e^(−x²/2) underflows to 0 the term x·φ(x) is 0, also at x = ±inf (not ±inf · 0).
    return gauss == C(0) ? cdf : cdf + x * (gauss * static_cast<C>(inv_sqrt_2pi));
  }
}

// σ(2u): 1/(1 + e^(−2u)); no cancellation for x ≪ 0, unlike 1 + tanh u.
template <class C>
RESNORM_SIMD_INLINE C gelu_tanh_sigma(C x) {
  const C u = static_cast<C>(tanh_k0) * (x + static_cast<C>(tanh_k1) * x * x * x);
  if constexpr (std::is_same_v<C, float>) {
    return 1.f / (1.f + exp_float(-2.f * u));
  } else {
    return C(1) / (C(1) + std::exp(C(-2) * u));
  }
}

template <class C>
RESNORM_SIMD_INLINE C gelu_tanh_value(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return gelu_from_fit(x, tanh_sigma_fit);
  } else {
    const C s = gelu_tanh_sigma(x);
    // σ(2u) underflows to 0 for x ≪ 0: GELU(x) is then −0, also at x = −inf (not −inf · 0).
    return s == C(0) ? C(-0.0) : x * s;
  }
}

template <class C>
RESNORM_SIMD_INLINE C gelu_tanh_slope(C x) {
  const C s = gelu_tanh_sigma(x);
  const C du = static_cast<C>(tanh_k0) * (C(1) + C(3) * static_cast<C>(tanh_k1) * x * x);
  // 2σ(1 − σ) is exactly 0 where σ saturates; x · du may then overflow, and 0 · inf is NaN.
  // In float, exp_float clamps its argument, so σ(2u) bottoms out near 4.6e-39 instead of 0:
  // below x = −10 (2u < −87, where σ(2u) < FLT_MIN) GELU'(x) is under 1e-35, so the slope is 0.
  const C w = C(2) * s * (C(1) - s);
  // `|`, not `||`: a short circuit is a branch too (see select).
  const bool saturated = std::is_same_v<C, float> ? ((w == C(0)) | (x < C(-10))) : w == C(0);
  return select(saturated, select(x < C(0), C(0), s), s + x * w * du);
}

// GELU's value or its slope.
enum class gelu_part { value, slope };

// The four element functions as empty function objects: their types name the bf16 tables
// (bf16_table.hpp), and f(x) evaluates them in the type of x.
template <gelu_approximation Form, gelu_part Part>
struct gelu_function {
  template <class C>
  RESNORM_SIMD_INLINE C operator()(C x) const {
    if constexpr (Form == gelu_approximation::erf) {
      return Part == gelu_part::value ? gelu_erf_value(x) : gelu_erf_slope(x);
    } else {
      return Part == gelu_part::value ? gelu_tanh_value(x) : gelu_tanh_slope(x);
    }
  }
};

// A function the bf16 rows take from a table: stateless, so its type alone says what it is
// (the gelu class's lambdas carry the form at run time and take the element loop).
template <class F>
inline constexpr bool tabulable = std::is_empty_v<F>&& std::is_default_constructible_v<F>;

// The tables one call of gelu_rows reads, taken before its threads start: f rounded to bf16 for
// out = f(x), f rounded to float for out = dy ⊙ f(x) (the product then taken in float).
template <class F>
struct gelu_tables {
  const bf16_table<F, bf16>* value = nullptr;
  const bf16_table<F, float>* factor = nullptr;
};

// Elements of a bf16 row whose factors are looked up into an L1 buffer (1 KiB) before the
// vectorised multiply by dy.
inline constexpr index gelu_lookup_chunk = 256;

// out_j = f(x_j) (dy == nullptr) or dy_j · f(x_j) over n bf16 elements, f from its tables.
template <class F>
RESNORM_WIDE_VECTORS void gelu_row_tabulated(const bf16* RESNORM_RESTRICT x,
                                             const bf16* RESNORM_RESTRICT dy, index n,
                                             const gelu_tables<F>& tables,
                                             bf16* RESNORM_RESTRICT out) {
  index done = 0;  // elements looked up by the gathers
#if defined(__AVX512F__) && defined(__AVX512BW__)
  // 16 lookups per gather: a scalar lookup is two loads and a store per element, and the load
  // ports held the forward at one element per cycle (4096 x 4096 bf16 erf 1.66x float's elements
  // per second); the gather reads 16 table entries in one instruction. A bf16 entry is gathered
  // as the 4 bytes at its address (the table has one entry of padding past the last pattern)
  // and narrowed to its low half. On AMD Zen 5, where a gather takes about 19 cycles, scalar
  // loads measured 1.3-1.4x faster in one hour and 0.55-0.7x in the next (bench/HISTORY.md):
  // the gathers stay on every CPU.
  for (; done + 16 <= n; done += 16) {
    const index j = done;
    const __m512i bits = _mm512_maskz_cvtepu16_epi32(
        0xffff, _mm256_loadu_si256(static_cast<const __m256i*>(static_cast<const void*>(x + j))));
    if (!dy) {
      const __m512i entries = _mm512_i32gather_epi32(bits, tables.value->data(), 2);
      _mm256_storeu_si256(static_cast<__m256i*>(static_cast<void*>(out + j)),
                          _mm512_cvtepi32_epi16(entries));
    } else {
      const auto factor =
          std::bit_cast<simd::pack<float>>(_mm512_i32gather_ps(bits, tables.factor->data(), 4));
      simd::store(out + j, simd::load<float>(dy + j, simd::vector_tag{}) * factor);
    }
  }
#endif
  if (!dy) {
    for (index j = done; j < n; ++j) out[j] = (*tables.value)[x[j]];
    return;
  }
  // Lookups first, a chunk at a time, so that the multiply and the rounding to bf16 run as
  // packs rather than one element at a time beside each lookup.
  alignas(64) float factor[gelu_lookup_chunk];
  for (index j0 = done; j0 < n; j0 += gelu_lookup_chunk) {
    const index m = std::min(gelu_lookup_chunk, n - j0);
    for (index j = 0; j < m; ++j) factor[j] = (*tables.factor)[x[j0 + j]];
    simd::for_each<float, bf16>(m, [&](index j, auto tag) {
      simd::store(out + j0 + j,
                  simd::load<float>(dy + j0 + j, tag) * simd::load<float>(factor + j, tag), tag);
    });
  }
}

// out_j = f(x_j) (dy == nullptr) or dy_j · f(x_j), over n elements. The product is taken in
// param_t<T> (float for float and bf16) after rounding f to it, so with C = double the vjp is
// exactly dy ⊙ (the rounded derivative), as the gelu class promises.
template <class C, class T, class F>
RESNORM_WIDE_VECTORS void gelu_row(const T* RESNORM_RESTRICT x, const T* RESNORM_RESTRICT dy,
                                   index n, F f, T* RESNORM_RESTRICT out) {
  using P = param_t<T>;
  if (dy) {
    for (index j = 0; j < n; ++j) {
      out[j] = store<T>(load_as<P>(dy[j]) * static_cast<P>(f(load_as<C>(x[j]))));
    }
  } else {
    for (index j = 0; j < n; ++j) out[j] = store<T>(f(load_as<C>(x[j])));
  }
}

// out = f(x) or dy ⊙ f(x) row by row (dy_base: row t at dy_base + t·dy_stride, or nullptr).
// out_name: the caller's name for out (y, slope, dx), for the error message.
// bf16 with a stateless f looks f up (bf16_table.hpp) for any C: the tables hold f's double
// value, so the result has the bits of the C = double element loop, at the cost of a load.
template <class C, class T, class F>
void gelu_rows(const char* fn, matrix_cref<T> x, const T* dy_base, index dy_stride, F f,
               const char* out_name, matrix_ref<T> out) {
  detail::check_same_shape(fn, out_name, out, "x", x);
  const index d = x.cols();
  const bool stream = use_streaming_stores(static_cast<std::size_t>(out.size()) * sizeof(T));
  constexpr bool tabulated = std::is_same_v<T, bf16> && tabulable<F>;
  gelu_tables<F> tables;
  if constexpr (tabulated) {
    if (x.size() != 0) {
      if (dy_base) {
        tables.factor = &bf16_table_of<F, float>();
      } else {
        tables.value = &bf16_table_of<F, bf16>();
      }
    }
  }
  const auto row = [&](const T* xr, const T* dyr, index n, T* yr) {
    if constexpr (tabulated) {
      gelu_row_tabulated(xr, dyr, n, tables, yr);
    } else {
      gelu_row<C>(xr, dyr, n, f, yr);
    }
  };
  parallel_rows(x.rows(), d, [&](index begin, index end) {
    alignas(64) T buffer[stream_chunk];
    for (index t = begin; t < end; ++t) {
      const T* xr = x.row(t).data();
      const T* dyr = dy_base ? dy_base + t * dy_stride : nullptr;
      T* yr = out.row(t).data();
      if (!stream) {
        row(xr, dyr, d, yr);
        continue;
      }
      for (index j = 0; j < d; j += stream_chunk) {
        const index n = std::min(stream_chunk, d - j);
        row(xr + j, dyr ? dyr + j : nullptr, n, buffer);
        stream_copy(yr + j, buffer, static_cast<std::size_t>(n) * sizeof(T));
      }
    }
    if (stream) stream_fence();
  });
}

// body(gelu_function<form, Part>{}): the run-time form chosen once, as a type.
template <gelu_part Part, class Body>
void with_gelu_function(gelu_approximation form, Body body) {
  if (form == gelu_approximation::erf) {
    body(gelu_function<gelu_approximation::erf, Part>{});
  } else {
    body(gelu_function<gelu_approximation::tanh, Part>{});
  }
}

}  // namespace kernels

// y = GELU(x) into a caller-owned y (shape of x). Allocates nothing.
template <class T, class C = kernels::compute_t<T>>
void gelu_forward_into(matrix_cref<T> x, gelu_approximation form, matrix_ref<T> y) {
  kernels::with_gelu_function<kernels::gelu_part::value>(form, [&](auto f) {
    kernels::gelu_rows<C>("gelu_forward_into", x, static_cast<const T*>(nullptr), 0, f, "y", y);
  });
}

// slope = GELU'(x), elementwise, into a caller-owned matrix (shape of x).
template <class T, class C = kernels::compute_t<T>>
void gelu_derivative_into(matrix_cref<T> x, gelu_approximation form, matrix_ref<T> slope) {
  kernels::with_gelu_function<kernels::gelu_part::slope>(form, [&](auto f) {
    kernels::gelu_rows<C>("gelu_derivative_into", x, static_cast<const T*>(nullptr), 0, f, "slope",
                          slope);
  });
}

// dx = dy ⊙ GELU'(x) into a caller-owned dx (shape of x), one pass over x and dy.
template <class T, class C = kernels::compute_t<T>>
void gelu_vjp_into(matrix_cref<T> x, matrix_cref<T> dy, gelu_approximation form, matrix_ref<T> dx) {
  detail::check_same_shape("gelu_vjp_into", "dy", dy, "x", x);
  kernels::with_gelu_function<kernels::gelu_part::slope>(form, [&](auto f) {
    kernels::gelu_rows<C>("gelu_vjp_into", x, dy.data(), dy.outerStride(), f, "dx", dx);
  });
}

}  // namespace resnorm
