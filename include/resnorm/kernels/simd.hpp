// resnorm/kernels/simd.hpp — the small vector layer the row kernels are written in.
//
// pack<C> is one native SIMD register of C (float or double): 64 bytes with AVX-512, 32 with
// AVX, 16 otherwise (SSE2, or the compiler's generic lowering elsewhere). It is a GCC/Clang
// vector-extension type, so + − * work lane by lane and a scalar operand is broadcast; the
// width follows the instruction set the translation unit is compiled for, which is why a
// kernel's rounding can differ between an AVX-512 and an SSE2 build (never between threads).
//
// The row kernels are written once, as generic lambdas body(j, tag) that run on a whole pack
// (tag = vector_tag, elements j … j + width − 1) in the main loop and on a single element
// (tag = scalar_tag) in the row's tail; load<C>(p, tag) returns a pack or a scalar to match.
// Loads widen the storage type (float, double, bf16) to C, stores narrow back with rounding to
// nearest (bf16: ties to even, NaN kept NaN).
//
// row_sums keeps several independent accumulators per sum, so consecutive adds do not wait on each
// other, and folds them in a fixed order: the result depends on the row length alone. A group of
// rows may finish its sums together (finish_sums, sum_lanes_each): the same additions in the same
// order, so a row has the same bits in a group as alone.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "resnorm/kernels/storage.hpp"
#include "resnorm/matrix.hpp"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

// The helpers below are a few instructions each and run inside the row loops: inlined always,
// so that a row's constants and accumulators stay in registers across them.
#if defined(__GNUC__) || defined(__clang__)
#define RESNORM_SIMD_ALWAYS_INLINE __attribute__((always_inline))
#else
#define RESNORM_SIMD_ALWAYS_INLINE
#endif
#define RESNORM_SIMD_INLINE inline RESNORM_SIMD_ALWAYS_INLINE

namespace resnorm::kernels::simd {

#if defined(__AVX512F__)
inline constexpr int register_bytes = 64;
#elif defined(__AVX__)
inline constexpr int register_bytes = 32;
#else
inline constexpr int register_bytes = 16;
#endif

template <class E, int N>
struct vector_of {
  typedef E type __attribute__((vector_size(N * sizeof(E))));
};

// N lanes of E.
template <class E, int N>
using vec = typename vector_of<E, N>::type;

// The same lanes at any address aligned to E: what the loads and stores go through. A store of
// this type tells the compiler that only E objects change; a memcpy (char access) would let it
// assume any object might, and reload every row pointer and row constant after each store.
template <class E, int N>
struct unaligned_vector_of {
  typedef E type __attribute__((vector_size(N * sizeof(E)), aligned(alignof(E))));
};

// Lanes of C in one register.
template <class C>
inline constexpr int width = register_bytes / static_cast<int>(sizeof(C));

template <class C>
using pack = vec<C, width<C>>;

struct vector_tag {};
struct scalar_tag {};
// A whole pack whose store bypasses the cache (a non-temporal store): its destination is aligned
// to the store's width. Loads and arithmetic treat it as vector_tag.
struct streaming_tag : vector_tag {};

// Packs that store 16 bytes (bf16 from float on AVX2: 8 lanes) go out in pairs, one 32-byte
// store per two packs: with one store per pack a bf16 row had half as many cache-line misses in
// flight as a float row (the store queue holds 4 stores per line instead of 2), and the stores
// stalled the row (LayerNorm forward 1024 x 1024 bf16: 31 % of the loop's cycles on the store),
// as did 16-byte non-temporal stores (4096 x 4096: 9.5 ms, against 7.7 ms cached; AMD Zen 3).
template <class C, class T>
inline constexpr bool pairs_stores = register_bytes == 32 &&
                                     static_cast<std::size_t>(width<C>) * sizeof(T) == 16;

// The first packs of the pairs a body is storing, not yet rounded to the stored type, in the
// order it stores them (one per output row: at most 4), until the second packs come: the two are
// rounded and gathered together (narrow_pair).
template <class C>
struct store_pairs {
  std::array<pack<C>, 4> pending;
  int next = 0;
};
// A pack whose store is the first (Second = false) or second half of a 32-byte store; Base is
// vector_tag (an ordinary store) or streaming_tag (around the cache, 32-byte aligned).
template <bool Second, class Base, class C>
struct paired_tag : Base {
  store_pairs<C>* pairs;
};

// True for the tags of a whole pack (vector_tag, streaming_tag).
template <class Tag>
inline constexpr bool is_pack_tag = std::is_base_of_v<vector_tag, Tag>;

// The storage bits of T: bf16 is loaded as its 16-bit pattern.
template <class T>
using raw_t = std::conditional_t<std::is_same_v<T, bf16>, std::uint16_t, T>;

// ---- loads and stores ------------------------------------------------------------------------

// width<C> elements of T at p (any alignment), widened to C.
template <class C, class T>
RESNORM_SIMD_INLINE pack<C> load(const T* p, vector_tag) {
  constexpr int n = width<C>;
  vec<raw_t<T>, n> raw;
  std::memcpy(&raw, p, sizeof raw);
  if constexpr (std::is_same_v<T, bf16>) {
#if defined(__AVX2__) && !defined(__AVX512F__)
    // One shuffle: the 16 bytes sit in both halves of the register and each element's two bytes
    // move to the top of its float lane, zeros below. The generic form below compiles to two
    // widening moves, an insert and a shift (four shuffle-port instructions on AMD Zen 3).
    if constexpr (std::is_same_v<C, float>) {
      const __m256i both = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(static_cast<const __m128i*>(static_cast<const void*>(p))));
      const __m256i to_high_half =
          _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,  //
                           -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
      return std::bit_cast<pack<C>>(_mm256_shuffle_epi8(both, to_high_half));
    }
#endif
#if defined(__AVX512F__)
    // One widening move and one shift: the generic form below compiles to two 8-lane widening
    // moves, an insert and the shift (five of the 13 instructions of the bf16 LayerNorm
    // forward's apply loop; AVX-512 Xeon).
    if constexpr (std::is_same_v<C, float> && n == 16) {
      // The zero-masking forms with every lane kept: GCC 12 warns (-Wuninitialized) inside the
      // unmasked ones, which start from an undefined register.
      const __m512i widened = _mm512_maskz_cvtepu16_epi32(0xffff, std::bit_cast<__m256i>(raw));
      return std::bit_cast<pack<C>>(std::bit_cast<vec<std::uint32_t, 16>>(widened) << 16);
    }
#endif
    // The 16 stored bits are the high half of a float.
    const auto bits = __builtin_convertvector(raw, vec<std::uint32_t, n>) << 16;
    return __builtin_convertvector(std::bit_cast<vec<float, n>>(bits), pack<C>);
  } else {
    return __builtin_convertvector(raw, pack<C>);
  }
}

template <class C, class T>
RESNORM_SIMD_INLINE C load(const T* p, scalar_tag) {
  return load_as<C>(*p);
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// Eight floats rounded to bf16 in place: each lane's high half holds its bf16 bits (to nearest,
// ties to even; a NaN becomes the quiet NaN of its sign, one blend on a float compare), the low
// half is left over. The bits of the generic form in narrow().
RESNORM_SIMD_INLINE __m256i bf16_in_high_halves(vec<float, 8> v) {
  const __m256 f = std::bit_cast<__m256>(v);
  const __m256i u = std::bit_cast<__m256i>(v);
  const __m256i lowest_kept = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lowest_kept);
  const __m256i quiet_nan = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
  const __m256 is_nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  return std::bit_cast<__m256i>(
      _mm256_blendv_ps(std::bit_cast<__m256>(rounded), std::bit_cast<__m256>(quiet_nan), is_nan));
}
#endif

// The storage bits of v rounded to T: a vector of raw_t<T>, one lane per lane of v.
template <class T, class V>
RESNORM_SIMD_INLINE auto narrow(V v) requires(!std::is_floating_point_v<V>) {
  using C = std::remove_cvref_t<decltype(v[0])>;
  constexpr int n = static_cast<int>(sizeof(V) / sizeof(C));
  using bits_t = vec<raw_t<T>, n>;
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  // One instruction rounds 16 floats to bf16 (to nearest even, NaN kept quiet NaN), but it takes
  // a subnormal float for zero, where the integer form below rounds it (to a subnormal bf16, or
  // up to the smallest normal): a pack that holds one goes that way, so that every path gives
  // the scalar conversion's bits (bf16 has float's exponent range, subnormals included).
  if constexpr (std::is_same_v<T, bf16> && std::is_same_v<C, float> && n == 16) {
    constexpr int subnormal = 0x20;  // vfpclassps category
    if (_mm512_fpclass_ps_mask(std::bit_cast<__m512>(v), subnormal) == 0) {
      return std::bit_cast<bits_t>(_mm512_cvtneps_pbh(std::bit_cast<__m512>(v)));
    }
  }
#endif
#if defined(__AVX2__) && !defined(__AVX512F__)
  // The same bits in 9 instructions instead of 16: the rounding is done in place (see
  // bf16_in_high_halves), and one byte shuffle plus one permute gather the high halves.
  if constexpr (std::is_same_v<T, bf16> && std::is_same_v<C, float> && n == 8) {
    const __m256i high_halves =
        _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1,  //
                         2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i gathered =
        _mm256_permute4x64_epi64(_mm256_shuffle_epi8(bf16_in_high_halves(v), high_halves), 0x08);
    return std::bit_cast<bits_t>(_mm256_castsi256_si128(gathered));
  }
#endif
  if constexpr (std::is_same_v<T, bf16>) {
    using u32 = vec<std::uint32_t, n>;
    const u32 u = std::bit_cast<u32>(__builtin_convertvector(v, vec<float, n>));
    // Round to nearest, ties to even; a NaN becomes the quiet NaN of its sign (see store()).
    const u32 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const u32 quiet_nan = (u >> 16) | 0x40u;
    const u32 nan_mask = std::bit_cast<u32>((u & 0x7fffffffu) > 0x7f800000u);
    const u32 bits = (quiet_nan & nan_mask) | (rounded & ~nan_mask);
    return __builtin_convertvector(bits, bits_t);
  } else {
    return __builtin_convertvector(v, bits_t);
  }
}

// The lanes of a, then those of b, in one vector of twice as many.
template <class V>
RESNORM_SIMD_INLINE auto join(V a, V b) {
  constexpr int n = static_cast<int>(sizeof(V) / sizeof(a[0]));
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return __builtin_shufflevector(a, b, static_cast<int>(I)...);
  }
  (std::make_index_sequence<2 * n>{});
}

// The storage bits of a and then b, rounded to T: a vector of raw_t<T> of twice their lanes.
template <class T, class V>
RESNORM_SIMD_INLINE auto narrow_pair(V a, V b) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  using C = std::remove_cvref_t<decltype(a[0])>;
  constexpr int n = static_cast<int>(sizeof(V) / sizeof(C));
  // Both rounded in place, shifted down and packed to 16 bits in one instruction (it works
  // within each 16-byte half: a's low four, b's low four, a's high four, b's high four), then
  // one permute puts the four groups in order: two shifts and two shuffles where gathering each
  // pack alone and joining them took five shuffles.
  if constexpr (std::is_same_v<T, bf16> && std::is_same_v<C, float> && n == 8) {
    const __m256i packed = _mm256_packus_epi32(_mm256_srli_epi32(bf16_in_high_halves(a), 16),
                                               _mm256_srli_epi32(bf16_in_high_halves(b), 16));
    return std::bit_cast<vec<std::uint16_t, 16>>(_mm256_permute4x64_epi64(packed, 0xd8));
  }
#endif
  return join(narrow<T>(a), narrow<T>(b));
}

// Storage bits already rounded to T (narrow), written at p (any alignment).
template <class T, class Bits>
RESNORM_SIMD_INLINE void store_bits(T* p, Bits bits) {
  using lane_t = std::remove_cvref_t<decltype(bits[0])>;
  using unaligned_t =
      typename unaligned_vector_of<lane_t, static_cast<int>(sizeof(Bits) / sizeof(lane_t))>::type;
  *reinterpret_cast<unaligned_t*>(static_cast<void*>(p)) = bits;
}

// Rounds v to T and writes width<C> elements at p (any alignment).
template <class T, class V>
RESNORM_SIMD_INLINE void store(T* p, V v) requires(!std::is_floating_point_v<V>) {
  store_bits(p, narrow<T>(v));
}

// store_bits with a non-temporal store: the line goes to memory without being read first (no
// read-for-ownership) and without displacing the cache's working set. p is aligned to the
// store's width (for_each_streaming sees to it); no x86: an ordinary store.
template <class Bits>
RESNORM_SIMD_INLINE void write_around_cache(void* p, const Bits& bits) {
  constexpr std::size_t bytes = sizeof(Bits);
#if defined(__AVX512F__)
  if constexpr (bytes == 64) {
    _mm512_stream_si512(static_cast<__m512i*>(p), std::bit_cast<__m512i>(bits));
    return;
  }
#endif
#if defined(__AVX__)
  if constexpr (bytes == 32) {
    _mm256_stream_si256(static_cast<__m256i*>(p), std::bit_cast<__m256i>(bits));
    return;
  }
#endif
#if defined(__SSE2__)
  if constexpr (bytes == 16) {
    _mm_stream_si128(static_cast<__m128i*>(p), std::bit_cast<__m128i>(bits));
    return;
  }
  if constexpr (bytes == 4) {
    _mm_stream_si32(static_cast<int*>(p), std::bit_cast<int>(bits));
    return;
  }
#if defined(__x86_64__)
  if constexpr (bytes == 8) {
    _mm_stream_si64(static_cast<long long*>(p), std::bit_cast<long long>(bits));
    return;
  }
#endif
#endif
  std::memcpy(p, &bits, bytes);
}

// Two halves of a 64-byte line of storage bits, a then b, written around the cache from p (aligned
// to the line): one store with AVX-512; two with AVX2, whose registers hold half a line (joined,
// the line would be a vector no register holds, passed through memory and stored by memcpy, an
// ordinary store).
template <class Bits>
RESNORM_SIMD_INLINE void write_line_around_cache(void* p, const Bits& a, const Bits& b) {
  static_assert(sizeof(Bits) == 32, "two halves of a 64-byte line");
#if defined(__AVX512F__)
  write_around_cache(p, join(a, b));
#else
  write_around_cache(p, a);
  write_around_cache(static_cast<char*>(p) + sizeof(Bits), b);
#endif
}

template <class T, class C>
RESNORM_SIMD_INLINE void store(T* p, C v) requires std::is_floating_point_v<C> {
  *p = kernels::store<T>(v);
}

// store() chosen by the loop's tag: a pack (vector_tag), a pack around the cache (streaming_tag),
// or the tail's single element (scalar_tag).
template <class T, class V>
RESNORM_SIMD_INLINE void store(T* p, V v, vector_tag) {
  store(p, v);
}
template <class T, class V>
RESNORM_SIMD_INLINE void store(T* p, V v, streaming_tag) {
  write_around_cache(static_cast<void*>(p), narrow<T>(v));
}
// Bodies must not read back what they store: the first pack of a pair is written with the
// second.
template <class T, class V, bool Second, class Base, class C>
RESNORM_SIMD_INLINE void store(T* p, V v, paired_tag<Second, Base, C> tag) {
  // A body stores at most one pack per output row: a backward group's rows_per_group = 4 or
  // wide_rows_per_group = 2 (a forward body stores one row).
  assert(tag.pairs->next < static_cast<int>(tag.pairs->pending.size()));
  auto& first = tag.pairs->pending[static_cast<std::size_t>(tag.pairs->next++)];
  if constexpr (!Second) {
    first = v;
  } else {
    // Vector types throughout: an std::array here went through the stack (a store-forwarding
    // stall on every pair).
    const auto both = std::bit_cast<vec<std::uint64_t, 4>>(narrow_pair<T>(first, v));
    void* start = static_cast<void*>(p - 16 / sizeof(T));
    if constexpr (std::is_base_of_v<streaming_tag, Base>) {
      write_around_cache(start, both);
    } else {
      // As the lanes of T's storage (see unaligned_vector_of): the stored bytes are T objects.
      using lanes = typename unaligned_vector_of<raw_t<T>, 32 / sizeof(T)>::type;
      *static_cast<lanes*>(start) = std::bit_cast<vec<raw_t<T>, 32 / sizeof(T)>>(both);
    }
  }
}
template <class T, class C>
RESNORM_SIMD_INLINE void store(T* p, C v, scalar_tag) {
  store(p, v);
}

// ---- arithmetic ------------------------------------------------------------------------------

// a·b + c, fused where the hardware has FMA (one rounding), else multiply then add.
template <class F>
RESNORM_SIMD_INLINE F fma(F a, F b, F c) requires std::is_floating_point_v<F> {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}
template <class V>
RESNORM_SIMD_INLINE V fma(V a, V b, V c) requires(!std::is_floating_point_v<V>) {
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64 && sizeof(a[0]) == 4)
    return std::bit_cast<V>(_mm512_fmadd_ps(a, b, c));
  if constexpr (sizeof(V) == 64 && sizeof(a[0]) == 8)
    return std::bit_cast<V>(_mm512_fmadd_pd(a, b, c));
#endif
#if defined(__FMA__)
  if constexpr (sizeof(V) == 32 && sizeof(a[0]) == 4)
    return std::bit_cast<V>(_mm256_fmadd_ps(a, b, c));
  if constexpr (sizeof(V) == 32 && sizeof(a[0]) == 8)
    return std::bit_cast<V>(_mm256_fmadd_pd(a, b, c));
#endif
  return a * b + c;
}

// A pack with every lane v (or v itself in the scalar tail).
template <class C>
RESNORM_SIMD_INLINE pack<C> splat(C v, vector_tag) {
  return pack<C>{} + v;
}
template <class C>
RESNORM_SIMD_INLINE C splat(C v, scalar_tag) {
  return v;
}

// ---- prefetch --------------------------------------------------------------------------------

// Asks for the cache line holding p ahead of its use (read, or write: fetched for ownership).
// The hardware streamer does not cross a 4 KiB page, so a kernel that walks a matrix row by row
// prefetches the next row while it works on this one; otherwise each row starts on misses.
// prefetch_to::l2 stops short of L1 (the line is pulled on into L1 by the row's own loads later):
// a whole next row sent to L1 evicts the lines the current row still reads there (its x, γ, β).
enum class prefetch_to { l2 = 2, l1 = 3 };  // __builtin_prefetch's locality
template <prefetch_to Level = prefetch_to::l1, class T>
RESNORM_SIMD_INLINE void prefetch_read(const T* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, static_cast<int>(Level));
#else
  (void)p;
#endif
}
template <class T>
RESNORM_SIMD_INLINE void prefetch_write(T* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 1, 3);
#else
  (void)p;
#endif
}

// ---- horizontal sums -------------------------------------------------------------------------

template <int Offset, class V, std::size_t... I>
RESNORM_SIMD_INLINE auto half_of(V v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, (Offset + static_cast<int>(I))...);
}

// Σ of the N lanes in double, as a fixed halving tree (low half + high half, recursively).
template <class E, int N>
RESNORM_SIMD_INLINE double sum_lanes(vec<E, N> v) {
  if constexpr (N == 1) {
    return static_cast<double>(v[0]);
  } else if constexpr (std::is_same_v<E, float>) {
    const auto lo = half_of<0>(v, std::make_index_sequence<N / 2>{});
    const auto hi = half_of<N / 2>(v, std::make_index_sequence<N / 2>{});
    return sum_lanes<double, N / 2>(__builtin_convertvector(lo, vec<double, N / 2>) +
                                    __builtin_convertvector(hi, vec<double, N / 2>));
  } else {
    return sum_lanes<E, N / 2>(half_of<0>(v, std::make_index_sequence<N / 2>{}) +
                               half_of<N / 2>(v, std::make_index_sequence<N / 2>{}));
  }
}

// The lanes of v as doubles, halved once: a float pack's low half plus its high half (the first
// step of sum_lanes), a double pack as it is.
template <class C>
RESNORM_SIMD_INLINE auto halved_in_double(pack<C> v) {
  constexpr int w = width<C>;
  if constexpr (std::is_same_v<C, float>) {
    return __builtin_convertvector(half_of<0>(v, std::make_index_sequence<w / 2>{}),
                                   vec<double, w / 2>) +
           __builtin_convertvector(half_of<w / 2>(v, std::make_index_sequence<w / 2>{}),
                                   vec<double, w / 2>);
  } else {
    return v;
  }
}

// Lane indices for sum_lanes_each's halving steps on two vectors a (lanes 0 … n−1) and b (n …
// 2n−1) made of segments of S lanes. Lane l of the result takes a segment's low half (Low) or
// high half from a (the first n/2 lanes) or b (the rest); the sum of the two results holds the
// segments halved, a's first.
template <int S, int n, bool Low>
constexpr int segment_half_lane(int l) {
  const int half = S / 2;
  const int from_b = l >= n / 2 ? n : 0;
  const int segment = (l % (n / 2)) / half, offset = l % half;
  return from_b + segment * S + offset + (Low ? 0 : half);
}
// The last step (segments of two lanes) interleaves instead, as vunpcklpd / vunpckhpd do:
// lane 2k is a's segment k summed, lane 2k + 1 is b's.
template <int n, bool Low>
constexpr int pair_lane(int l) {
  return (l % 2 == 0 ? l : n + l - 1) + (Low ? 0 : 1);
}

// One halving step over K vectors of n doubles in segments of S lanes: K / 2 vectors in segments
// of S / 2, vectors 2i and 2i + 1 combined into one. Each segment's low half is added to its
// high half, in that order, as sum_lanes adds them.
template <int S, int n, std::size_t K, std::size_t... L>
RESNORM_SIMD_INLINE std::array<vec<double, n>, K / 2> halve_segments(
    const std::array<vec<double, n>, K>& v, std::index_sequence<L...>) {
  std::array<vec<double, n>, K / 2> out;
  for (std::size_t i = 0; i < K / 2; ++i) {
    const auto a = v[2 * i], b = v[2 * i + 1];
    if constexpr (S == 2) {
      out[i] = __builtin_shufflevector(a, b, pair_lane<n, true>(L)...) +
               __builtin_shufflevector(a, b, pair_lane<n, false>(L)...);
    } else {
      out[i] = __builtin_shufflevector(a, b, segment_half_lane<S, n, true>(L)...) +
               __builtin_shufflevector(a, b, segment_half_lane<S, n, false>(L)...);
    }
  }
  return out;
}

template <int S, int n, std::size_t K>
RESNORM_SIMD_INLINE auto halve_down(const std::array<vec<double, n>, K>& v) {
  if constexpr (S == 1) {
    return v;
  } else {
    return halve_down<S / 2, n>(halve_segments<S, n>(v, std::make_index_sequence<n>{}));
  }
}

// sum_lanes of each of M packs, computed together: the same additions in the same order, so the
// same bits, but each halving step adds the halves of several packs in one vector add instead of
// folding one pack at a time down to a scalar. For the reductions of a group of narrow rows,
// whose one-pack-at-a-time folds were a third of the narrow backward's time.
template <class C, std::size_t M>
RESNORM_SIMD_INLINE std::array<double, M> sum_lanes_each(const std::array<pack<C>, M>& v) {
  using halved = decltype(halved_in_double<C>(v[0]));
  constexpr int n = sizeof(halved) / sizeof(double);
  // Padded with zero packs to a whole number of n (each step pairs vectors, log2(n) steps).
  constexpr std::size_t K = (M + n - 1) / n * n;
  std::array<halved, K> q;
  for (std::size_t m = 0; m < K; ++m) q[m] = m < M ? halved_in_double<C>(v[m]) : halved{};
  const std::array<halved, K / n> sums = halve_down<n, n>(q);
  // Pack m's sum is in vector m / n: with r = m mod n, in lane 2r for the first n/2 packs of
  // the vector, 2(r − n/2) + 1 for the others (see pair_lane).
  std::array<double, M> out;
  for (std::size_t m = 0; m < M; ++m) {
    const int r = static_cast<int>(m % n);
    out[m] = sums[m / n][r < n / 2 ? 2 * r : 2 * (r - n / 2) + 1];
  }
  return out;
}

// ---- row loops -------------------------------------------------------------------------------

// Two packs at a time, the second's stores completing the first's (see pairs_stores).
template <class C, class Base, class Body>
RESNORM_SIMD_INLINE void for_each_pair(index j, const Body& body) {
  store_pairs<C> pairs;
  body(j, paired_tag<false, Base, C>{{}, &pairs});
  pairs.next = 0;
  body(j + width<C>, paired_tag<true, Base, C>{{}, &pairs});
}

// body(j, vector_tag{}) for each whole pack of the row (or paired tags, two packs at a time,
// where packs of C stored as T are 16 bytes), then body(j, scalar_tag{}) for the tail. T: the
// type the body stores.
template <class C, class T = C, class Body>
RESNORM_SIMD_INLINE void for_each(index d, const Body& body) {
  constexpr index w = width<C>;
  index j = 0;
  if constexpr (pairs_stores<C, T>) {
    for (; j + 2 * w <= d; j += 2 * w) for_each_pair<C, vector_tag>(j, body);
  }
  for (; j + w <= d; j += w) body(j, vector_tag{});
  for (; j < d; ++j) body(j, scalar_tag{});
}

// for_each over a row of D elements, D a constant: the same calls, in loops of constant counts
// (which the compiler unrolls). for_each with a constant d kept its tail loop in GCC 12, and a
// warning that the loop overflows (-Waggressive-loop-optimizations).
template <class C, class T, index D, class Body>
RESNORM_SIMD_INLINE void for_each_of_length(const Body& body) {
  constexpr index w = width<C>;
  constexpr index pairs_end = pairs_stores<C, T> ? D - D % (2 * w) : 0;
  constexpr index packs_end = D - D % w;
  if constexpr (pairs_stores<C, T>) {
    for (index j = 0; j < pairs_end; j += 2 * w) for_each_pair<C, vector_tag>(j, body);
  }
  for (index j = pairs_end; j < packs_end; j += w) body(j, vector_tag{});
  for (index j = packs_end; j < D; ++j) body(j, scalar_tag{});
}

// The bytes one pack of C occupies once stored as T.
template <class C, class T>
inline constexpr std::size_t stored_pack_bytes = static_cast<std::size_t>(width<C>) * sizeof(T);

// The alignment of out + j that for_each_streaming's non-temporal stores need: one stored pack,
// or two where they are paired.
template <class C, class T>
inline constexpr std::size_t stream_align_bytes =
    pairs_stores<C, T> ? 2 * stored_pack_bytes<C, T> : stored_pack_bytes<C, T>;

// for_each for a row whose stores bypass the cache: body(j, scalar_tag{}) until out + j is
// aligned to stream_align_bytes, then the whole packs with streaming tags (streaming_tag, or
// paired ones), then a last unpaired pack (vector_tag) and the tail. Element-wise bodies
// compute the same bits either way; only where the stores go differs.
template <class C, class T, class Body>
RESNORM_SIMD_INLINE void for_each_streaming(index d, const T* out, const Body& body) {
  constexpr index w = width<C>;
  constexpr std::size_t align = stream_align_bytes<C, T>;
  const std::size_t misaligned = reinterpret_cast<std::uintptr_t>(out) % align;
  // Elements before the first aligned pack; a T* is T-aligned, so (align − misaligned) divides.
  index j = 0;
  const index head = misaligned == 0
                         ? 0
                         : std::min<index>(d, static_cast<index>((align - misaligned) / sizeof(T)));
  for (; j < head; ++j) body(j, scalar_tag{});
  if constexpr (pairs_stores<C, T>) {
    for (; j + 2 * w <= d; j += 2 * w) for_each_pair<C, streaming_tag>(j, body);
    for (; j + w <= d; j += w) body(j, vector_tag{});
  } else {
    for (; j + w <= d; j += w) body(j, streaming_tag{});
  }
  for (; j < d; ++j) body(j, scalar_tag{});
}

// Independent accumulator chains per sum in row_sums: enough for consecutive adds (latency 3-4
// cycles, two pipes) not to wait on each other, while the N sums' chains stay within 8 registers.
template <int N>
inline constexpr int sum_chains = N == 1   ? 8
                                  : N == 2 ? 4
                                           : 2;

// The chains acc[First, First + Count) folded as a balanced tree (the same order every call).
template <int First, int Count, class Acc>
RESNORM_SIMD_INLINE auto fold_chains(const Acc& acc, int n) {
  if constexpr (Count == 1) {
    return acc[First][n];
  } else {
    return fold_chains<First, Count / 2>(acc, n) +
           fold_chains<First + Count / 2, Count / 2>(acc, n);
  }
}

// A row_sums term that is a product a·b. The pack sums add it with one FMA (acc + a·b, rounded
// once) instead of a multiply and an add: resnorm builds with -ffp-contract=off, so the compiler
// no longer fuses the two, and the unfused pair costs an instruction and a rounding per pack.
template <class V>
struct product {
  V a, b;
};
template <class V>
product(V, V) -> product<V>;  // clang 14 does not deduce an aggregate's arguments

template <class V>
RESNORM_SIMD_INLINE void accumulate(V& acc, V term) {
  acc += term;
}
template <class V>
RESNORM_SIMD_INLINE void accumulate(V& acc, product<V> term) {
  acc = fma(term.a, term.b, acc);
}

// A tail term in double (a product of two floats is exact there).
template <class C>
RESNORM_SIMD_INLINE double tail_term(C term) {
  return static_cast<double>(term);
}
template <class C>
RESNORM_SIMD_INLINE double tail_term(product<C> term) {
  return static_cast<double>(term.a) * static_cast<double>(term.b);
}

// A row's N sums before their horizontal step: each sum's chains folded into one pack, and the
// tail's terms summed in double.
template <class C, int N>
struct row_partials {
  std::array<pack<C>, N> packs;
  std::array<double, N> tail;
};

// The partial sums of Σ_j terms(j)[n] over a row of length d. terms(j, tag) returns N terms,
// packs (or scalars in the tail) or products of two, as a std::array or, where plain terms and
// products mix, a std::tuple. Packs accumulate in C in K independent chains (sum_chains<N> unless
// given), folded in a fixed tree; the tail accumulates in double.
template <class C, int N, int K = sum_chains<N>, class Terms>
RESNORM_SIMD_INLINE row_partials<C, N> row_partial_sums(index d, const Terms& terms) {
  constexpr index w = width<C>;
  using sums = std::array<pack<C>, N>;
  // Built from zero packs rather than value-initialised (`{}`) or zeroed in a loop: GCC turns
  // either into a memset of the accumulators, emitted as `rep stos`, whose start-up cost on every
  // row made the backward of 64-wide rows 1.7 times slower (8192 x 64: 1.32 ms against 0.76 ms;
  // AMD Zen 3, -march=native).
  auto zeros = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return sums{((void)I, splat(C(0), vector_tag{}))...};
  };
  auto acc = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<sums, K>{((void)I, zeros(std::make_index_sequence<N>{}))...};
  }
  (std::make_index_sequence<K>{});
  constexpr auto each = std::make_index_sequence<N>{};
  auto add = [&]<std::size_t... I>(auto& a, const auto& t, std::index_sequence<I...>) {
    (accumulate(a[I], std::get<I>(t)), ...);
  };
  // The K chains' packs written out (a fold over the chains, not a loop): GCC left a loop over k
  // rolled where terms is large (the bf16 fused add + LayerNorm), and the accumulators, indexed
  // by a run-time k, lived in memory.
  auto add_chains = [&]<std::size_t... k>(index j0, std::index_sequence<k...>)
      RESNORM_SIMD_ALWAYS_INLINE {
    (add(acc[k], terms(j0 + static_cast<index>(k) * w, vector_tag{}), each), ...);
  };
  index j = 0;
  for (; j + K * w <= d; j += K * w) add_chains(j, std::make_index_sequence<K>{});
  for (; j + w <= d; j += w) add(acc[0], terms(j, vector_tag{}), each);
  std::array<double, N> tail{};
  auto add_tail = [&]<std::size_t... I>(const auto& t, std::index_sequence<I...>) {
    ((tail[I] += tail_term(std::get<I>(t))), ...);
  };
  for (; j < d; ++j) add_tail(terms(j, scalar_tag{}), each);
  // Built from the folds directly: a value-initialised result is a `rep stos` again (above).
  auto folded = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return row_partials<C, N>{{fold_chains<0, K>(acc, static_cast<int>(I))...}, tail};
  };
  return folded(each);
}

// The N sums of a row from its partials: each pack's lanes, then the tail.
template <class C, int N>
RESNORM_SIMD_INLINE std::array<double, N> finish_sums(const row_partials<C, N>& p) {
  std::array<double, N> out;
  for (int n = 0; n < N; ++n) out[n] = sum_lanes<C, width<C>>(p.packs[n]) + p.tail[n];
  return out;
}

// finish_sums of R rows at once (sum_lanes_each): the same bits as row by row.
template <class C, int N, std::size_t R>
RESNORM_SIMD_INLINE std::array<std::array<double, N>, R> finish_sums(
    const std::array<row_partials<C, N>, R>& p) {
  std::array<pack<C>, R * N> packs;
  for (std::size_t r = 0; r < R; ++r) {
    for (int n = 0; n < N; ++n) packs[r * N + static_cast<std::size_t>(n)] = p[r].packs[n];
  }
  const std::array<double, R* N> lanes = sum_lanes_each<C>(packs);
  std::array<std::array<double, N>, R> out;
  for (std::size_t r = 0; r < R; ++r) {
    for (int n = 0; n < N; ++n) {
      out[r][n] = lanes[r * N + static_cast<std::size_t>(n)] + p[r].tail[n];
    }
  }
  return out;
}

// The N sums Σ_j terms(j)[n] over a row of length d, each returned in double (see
// row_partial_sums for terms).
template <class C, int N, class Terms>
RESNORM_SIMD_INLINE std::array<double, N> row_sums(index d, const Terms& terms) {
  return finish_sums(row_partial_sums<C, N>(d, terms));
}

}  // namespace resnorm::kernels::simd
