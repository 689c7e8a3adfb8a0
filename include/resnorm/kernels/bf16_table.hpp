// resnorm/kernels/bf16_table.hpp — an elementwise function of bf16, tabulated over every input.
//
// A bf16 holds one of 2^16 bit patterns, so an elementwise f: bf16 → V is a table of 65536
// entries, filled once by evaluating f in double. A row then costs a load per element instead
// of f's arithmetic: GELU in float takes about 25 cycles per 8 lanes on AVX2 (exp, a division,
// a polynomial), which kept bf16 GELU at float's speed (0.74x float's elements per second at
// 4096 x 4096, AMD Zen 3) though it moves half the bytes. The table also makes the result exact:
// f's double value, rounded once to V (bf16 through float, as the double kernels round).
//
// Cost: 128 KiB per function tabulated to bf16, 256 KiB to float, in static storage (no heap),
// filled on a function's first use (a few milliseconds; thread-safe, as any function-local
// static). Only the entries a row's values reach are read: activations cluster within a few
// binades of 0, so the entries in use stay in L1 while the rest sits in memory.
#pragma once

#include <cstdint>
#include <type_traits>

#include "resnorm/kernels/storage.hpp"

namespace resnorm {
namespace kernels {

inline constexpr std::uint32_t bf16_patterns = 1u << 16;

// F{}(double) for every bf16 bit pattern, rounded to V (bf16 or float). F is an empty function
// object: its type alone names the table, so each function has one table per program.
template <class F, class V>
struct bf16_table {
  static_assert(std::is_same_v<V, bf16> || std::is_same_v<V, float>);
  // One entry past the last pattern (zero), so that a 4-byte gather of a bf16 entry (its bits
  // in the low half of the lane read) stays inside the table for the last pattern too.
  V at[bf16_patterns + 1] = {};

  bf16_table() {
    for (std::uint32_t bits = 0; bits < bf16_patterns; ++bits) {
      bf16 x;
      x.value = static_cast<unsigned short>(bits);
      // Through float as store<bf16>(double) rounds: the bits of the C = double kernels.
      at[bits] = store<V>(F{}(static_cast<double>(load(x))));
    }
  }

  V operator[](bf16 x) const { return at[x.value]; }
  const V* data() const { return at; }
};

// The table of F to V, filled on first use. Callers take it before starting threads, so the
// threads share the filled table rather than wait on its initialisation.
template <class F, class V>
const bf16_table<F, V>& bf16_table_of() {
  static const bf16_table<F, V> table;
  return table;
}

}  // namespace kernels
}  // namespace resnorm
