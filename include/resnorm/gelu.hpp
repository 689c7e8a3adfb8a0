// resnorm/gelu.hpp — GELU, exact (erf) and tanh-approximated, elementwise on a T x d matrix.
//
//   exact: GELU(x) = x · Φ(x) = ½ · x · erfc(−x/√2)
//          GELU'(x) = Φ(x) + x · φ(x),  φ(x) = exp(−x²/2)/√(2π)
//   tanh:  GELU(x) ≈ ½ · x · (1 + tanh u),  u = √(2/π) · (x + 0.044715 x³)
//          GELU'(x) ≈ ½ (1 + tanh u) + ½ x (1 − tanh² u) · √(2/π) (1 + 3·0.044715 x²)
// The two forms differ by at most about 4.7e-4 (near |x| ≈ 2.7). GELU'(0) = ½, the small-signal
// gain of a GELU layer. The Jacobian is diagonal, diag(vec(GELU'(x))): jacobian() materialises
// the (T·d) x (T·d) matrix, vjp()/jvp() cost O(T·d).
//
// Numerics: evaluated in accumulator_t<Scalar> (double for float) and rounded once. erfc(−x/√2)
// rather than 1 + erf(x/√2) keeps relative accuracy for negative x, where 1 + erf cancels;
// 1 − tanh² rather than 1/cosh², which overflows for large |u|.
#pragma once

#include <cmath>
#include <numbers>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

enum class gelu_approximation { erf, tanh };

// ---- scalar forms --------------------------------------------------------------------------

template <class T>
T gelu_erf(T x) {
  using A = accumulator_t<T>;
  const A a = static_cast<A>(x);
  return static_cast<T>(A(0.5) * a * std::erfc(-a * std::numbers::sqrt2_v<A> / A(2)));
}

template <class T>
T gelu_erf_derivative(T x) {
  using A = accumulator_t<T>;
  const A a = static_cast<A>(x);
  const A cdf = A(0.5) * std::erfc(-a * std::numbers::sqrt2_v<A> / A(2));
  const A pdf =
      std::exp(A(-0.5) * a * a) * std::numbers::inv_sqrtpi_v<A> / std::numbers::sqrt2_v<A>;
  return static_cast<T>(cdf + a * pdf);
}

namespace detail {
template <class A>
inline constexpr A gelu_tanh_k0 =
    std::numbers::sqrt2_v<A>* std::numbers::inv_sqrtpi_v<A>;  // √(2/π)
template <class A>
inline constexpr A gelu_tanh_k1 = A(0.044715);
}  // namespace detail

template <class T>
T gelu_tanh(T x) {
  using A = accumulator_t<T>;
  const A a = static_cast<A>(x);
  const A u = detail::gelu_tanh_k0<A> * (a + detail::gelu_tanh_k1<A> * a * a * a);
  return static_cast<T>(A(0.5) * a * (A(1) + std::tanh(u)));
}

template <class T>
T gelu_tanh_derivative(T x) {
  using A = accumulator_t<T>;
  const A a = static_cast<A>(x);
  const A u = detail::gelu_tanh_k0<A> * (a + detail::gelu_tanh_k1<A> * a * a * a);
  const A th = std::tanh(u);
  const A du = detail::gelu_tanh_k0<A> * (A(1) + A(3) * detail::gelu_tanh_k1<A> * a * a);
  return static_cast<T>(A(0.5) * (A(1) + th) + A(0.5) * a * (A(1) - th * th) * du);
}

template <class T>
T gelu_value(T x, gelu_approximation approximation) {
  return approximation == gelu_approximation::erf ? gelu_erf(x) : gelu_tanh(x);
}

template <class T>
T gelu_derivative(T x, gelu_approximation approximation) {
  return approximation == gelu_approximation::erf ? gelu_erf_derivative(x)
                                                  : gelu_tanh_derivative(x);
}

// ---- the map -------------------------------------------------------------------------------

template <class Scalar>
struct gelu_grad {
  matrix<Scalar> dx;
};

template <class Scalar>
class gelu {
 public:
  using scalar_type = Scalar;

  gelu_approximation approximation = gelu_approximation::erf;

  gelu() = default;
  explicit gelu(gelu_approximation form) : approximation(form) {}

  matrix<Scalar> forward(matrix_cref<Scalar> x) const {
    return x.unaryExpr([a = approximation](Scalar s) { return gelu_value(s, a); });
  }

  // GELU'(x), elementwise: the diagonal of the Jacobian, as a T x d matrix.
  matrix<Scalar> derivative(matrix_cref<Scalar> x) const {
    return x.unaryExpr([a = approximation](Scalar s) { return gelu_derivative(s, a); });
  }

  // dx = dy ⊙ GELU'(x)
  gelu_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy) const {
    detail::check_same_shape("gelu::vjp", "dy", dy, "x", x);
    return {dy.cwiseProduct(derivative(x))};
  }

  // J v = GELU'(x) ⊙ v
  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    detail::check_same_shape("gelu::jvp", "v", v, "x", x);
    return v.cwiseProduct(derivative(x));
  }

  // diag(vec(GELU'(x)))
  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    const matrix<Scalar> g = derivative(x);
    matrix<Scalar> J = matrix<Scalar>::Zero(g.size(), g.size());
    J.diagonal() = Eigen::Map<const vector<Scalar>>(g.data(), g.size());
    return J;
  }
};

static_assert(differentiable_map<gelu<float>>);
static_assert(differentiable_map<gelu<double>>);

}  // namespace resnorm
