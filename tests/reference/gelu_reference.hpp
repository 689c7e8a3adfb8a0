// tests/reference/gelu_reference.hpp — GELU and its derivative in long double, scalar by scalar.
//
// A different code path from include/resnorm/gelu.hpp: long double, and each form written the
// way that keeps its own digits on both sides of 0.
//
//   erf:  GELU(x) = x Φ(x),  Φ(x) = erfc(−x/√2)/2 for x < 0,  1 − erfc(x/√2)/2 for x ≥ 0
//         GELU'(x) = Φ(x) + x φ(x),  φ(x) = exp(−x²/2) / √(2π)
//   tanh: GELU(x) ≈ ½ x (1 + tanh u) = x · σ(2u),  σ(z) = 1/(1 + e^(−z)),
//         u = √(2/π) (x + 0.044715 x³);  the σ form has no cancellation for x ≪ 0
//         GELU'(x) ≈ σ(2u) + x · 2σ(2u)(1 − σ(2u)) · √(2/π) (1 + 3 · 0.044715 x²)
//         (½(1 + tanh u) = σ(2u) and ½(1 − tanh² u) = 2σ(2u)(1 − σ(2u)))
#pragma once

#include <cmath>

namespace resnorm_reference {

inline constexpr long double pi_l = 3.141592653589793238462643383279502884L;
inline constexpr long double tanh_k1 = 0.044715L;

inline long double normal_cdf(long double x) {
  const long double z = x / std::sqrt(2.0L);
  return x < 0 ? 0.5L * std::erfc(-z) : 1.0L - 0.5L * std::erfc(z);
}

inline long double normal_pdf(long double x) {
  return std::exp(-0.5L * x * x) / std::sqrt(2.0L * pi_l);
}

inline long double gelu_erf(long double x) { return x * normal_cdf(x); }

inline long double gelu_erf_derivative(long double x) { return normal_cdf(x) + x * normal_pdf(x); }

inline long double sigmoid(long double z) { return 1.0L / (1.0L + std::exp(-z)); }

inline long double gelu_tanh_u(long double x) {
  return std::sqrt(2.0L / pi_l) * (x + tanh_k1 * x * x * x);
}

inline long double gelu_tanh(long double x) { return x * sigmoid(2.0L * gelu_tanh_u(x)); }

inline long double gelu_tanh_derivative(long double x) {
  const long double s = sigmoid(2.0L * gelu_tanh_u(x));
  const long double du = std::sqrt(2.0L / pi_l) * (1.0L + 3.0L * tanh_k1 * x * x);
  return s + x * 2.0L * s * (1.0L - s) * du;
}

}  // namespace resnorm_reference
