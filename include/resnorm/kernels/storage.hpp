// resnorm/kernels/storage.hpp — how the row kernels read and write their element types.
//
// A kernel stores T (float, double or Eigen::bfloat16) and computes in compute_t<T>: double for
// double, float otherwise. bf16 widens to float exactly (its bits are the top 16 of a float) and
// narrows with round-to-nearest-even, quiet NaN kept NaN. Both are written as integer shifts and
// selects, so the compiler vectorises them (no call into Eigen's scalar conversion per element).
//
// Non-temporal (streaming) stores send the bytes to memory without first pulling the
// destination's cache lines in (no read-for-ownership) and without evicting the working set. They
// pay off only for outputs larger than the cache, so callers choose them by size
// (use_streaming_stores); stream_copy is memcpy written that way.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "resnorm/detail/check.hpp"
#include "resnorm/matrix.hpp"

// No-alias promise on kernel row pointers: without it GCC versions every loop over x, dy, dx,
// gamma and dgamma (all float*) for overlap, or gives up vectorising.
// Row loops built for AVX-512 use the full 512-bit registers: GCC otherwise prefers 256-bit
// vectors on recent Intel cores, which halves the arithmetic throughput of the GELU and
// normalisation loops (their cost when the rows sit in cache).
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define RESNORM_WIDE_VECTORS __attribute__((noinline, target("prefer-vector-width=512")))
#else
#define RESNORM_WIDE_VECTORS
#endif

#if defined(__GNUC__) || defined(__clang__)
#define RESNORM_RESTRICT __restrict__
#else
#define RESNORM_RESTRICT
#endif

namespace resnorm {

// Caller-owned outputs of the _into entry points.
template <class T>
using matrix_ref = Eigen::Ref<matrix<T>>;
template <class T>
using vector_ref = Eigen::Ref<vector<T>>;

namespace kernels {

using bf16 = Eigen::bfloat16;

// Per-feature parameters (gamma, beta) and their gradients: float for float and bf16 storage.
template <class T>
using param_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The arithmetic of the fast kernels: float for float and bf16 (the data's own precision, with
// the mean kept in double), double for double. The layer_norm class instantiates the same
// kernels with C = double for float, to round each output once.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The storage types the row kernels are instantiated for; other scalars (long double) take the
// plain loops in the public classes.
template <class T>
inline constexpr bool has_kernel =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16>;

// The storage types whose kernels take parameters (γ, β) of the storage type itself: the ones
// the layer_norm and rms_norm classes, which hold Scalar parameters, run the kernels for. bf16
// kernels take float parameters (param_t), so those classes run their plain loops in bf16.
template <class T>
inline constexpr bool has_kernel_with_own_params = has_kernel<T>&& std::is_same_v<param_t<T>, T>;

// ---- element conversion --------------------------------------------------------------------

inline float load(float v) { return v; }
inline double load(double v) { return v; }
// bf16 → float: the 16 stored bits become the high half of the float (exact).
inline float load(bf16 v) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(v.value) << 16);
}

// load, then widen to the compute type C.
template <class C, class T>
C load_as(T v) {
  return static_cast<C>(load(v));
}

// Round a compute-type value into storage type T.
template <class T, class V>
T store(V v) {
  if constexpr (std::is_same_v<T, bf16>) {
    // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit, then truncate.
    // A NaN keeps its sign and becomes a quiet NaN (0x7fc0 | sign) instead of rounding to Inf.
    const std::uint32_t u = std::bit_cast<std::uint32_t>(static_cast<float>(v));
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const std::uint32_t quiet_nan = (u >> 16) | 0x40u;
    const bool is_nan = (u & 0x7fffffffu) > 0x7f800000u;
    T out;
    out.value = static_cast<unsigned short>(is_nan ? quiet_nan : rounded);
    return out;
  } else {
    return static_cast<T>(v);
  }
}

// ---- streaming stores ----------------------------------------------------------------------

// Outputs at least this large (bytes) bypass the cache: the norms write their packs with
// non-temporal stores straight from registers (simd::for_each_streaming), GELU a chunk at a time
// from L1 (stream_copy). Measured on the development machine (AMD EPYC Zen 3 VM, 32 MiB L3,
// single thread, LayerNorm forward, float, interleaved): 4096 x 4096 (64 MiB) took 10.1-10.8 ms
// streamed against 14.6-18.6 ms cached. Below this size the output (and often the input) stays
// in the last-level cache, where ordinary stores win. (An earlier form that computed a chunk into
// L1 and then copied it out measured 18-19 % slower than ordinary stores on an AVX-512 Xeon.)
inline constexpr std::size_t streaming_min_bytes = std::size_t(16) << 20;

// Whether this is an AMD CPU, read once. Asked by the two streaming choices that measured
// opposite ways on the Intel and AMD machines resnorm is benchmarked on, both about
// non-temporal stores into data the last-level cache would otherwise hold
// (layer_norm_kernel.hpp: streams_rows_overlapped, streamed_dx_min_bytes).
inline bool amd_cpu() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
#else
  return false;
#endif
}

inline bool use_streaming_stores(std::size_t output_bytes) {
#if defined(__SSE2__)
  return output_bytes >= streaming_min_bytes;
#else
  (void)output_bytes;
  return false;
#endif
}

// The cache line: what non-temporal stores should fill whole, aligned, before the line leaves
// the write-combining buffer (a part-written line costs a read-modify-write in memory).
inline constexpr std::size_t cache_line_bytes = 64;

// memcpy(dst, src, bytes) with non-temporal stores for the line-aligned middle of dst.
inline void stream_copy(void* dst, const void* src, std::size_t bytes) {
  constexpr std::size_t line = cache_line_bytes;
  static_assert(line == 64, "each pass of the loop below stores 64 bytes");
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
#if defined(__SSE2__)
  const std::size_t head =
      std::min(bytes, (line - reinterpret_cast<std::uintptr_t>(d) % line) % line);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= line; bytes -= line, d += line, s += line) {
#if defined(__AVX512F__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d),
                        _mm512_loadu_si512(reinterpret_cast<const void*>(s)));
#elif defined(__AVX__)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32)));
#else
    for (std::size_t k = 0; k < line; k += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + k)));
    }
#endif
  }
#endif
  std::memcpy(d, s, bytes);
}

// Orders the non-temporal stores before anything that follows (another thread reading y).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Elements per chunk when a row is computed into an L1 buffer and then streamed out.
inline constexpr index stream_chunk = 1024;

// ---- argument checks shared by the _into entry points -------------------------------------

template <class V>
auto data_or_null(V& v) -> decltype(v.data()) {
  return v.size() == 0 ? nullptr : v.data();
}

template <class T>
void check_params(const char* function, index cols, const vector_cref<param_t<T>>& gamma,
                  const char* name = "gamma") {
  if (gamma.size() != 0) detail::check_length(function, name, gamma.size(), "x", cols, "columns");
}

template <class T>
void check_optional_rows(const char* function, const char* name, index size, index rows) {
  if (size != 0) detail::check_length(function, name, size, "x", rows, "rows");
}

}  // namespace kernels
}  // namespace resnorm
