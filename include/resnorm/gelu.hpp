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
// rather than 1 + erf(x/√2) keeps relative accuracy for negative x, where 1 + erf cancels; for
// the same reason the tanh form is evaluated as x · σ(2u), σ the logistic function, and its
// 1 − tanh² u as 4 σ(2u) σ(−2u) (no 1/cosh², which overflows for large |u|).
//
// Speed: for float and double, forward, derivative, vjp and jvp run the row kernels of
// kernels/gelu_kernel.hpp in double arithmetic (the same formulas, rounded once); forward_into
// and vjp_into write into caller-owned storage. gelu_forward_into<float> and gelu_vjp_into<float>
// are the vectorised float kernels (absolute error ≤ 1e-6 · max(1, |x|), see there).
#pragma once

#include <cmath>
#include <numbers>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/kernels/gelu_kernel.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

// gelu_approximation { erf, tanh } is declared in kernels/gelu_kernel.hpp.

// ---- scalar forms --------------------------------------------------------------------------

template <class T>
T gelu_erf(T x) {
  using A = accumulator_t<T>;
  const A a = static_cast<A>(x);
  const A upper = std::erfc(-a * std::numbers::sqrt2_v<A> / A(2));
  // Far left the tail Φ(x) underflows to 0: the limit is −0 (x · 0 would be NaN at −inf).
  return static_cast<T>(upper == A(0) ? -A(0) : A(0.5) * a * upper);
}

template <class T>
T gelu_erf_derivative(T x) {
  using A = accumulator_t<T>;
  const A a = static_cast<A>(x);
  const A cdf = A(0.5) * std::erfc(-a * std::numbers::sqrt2_v<A> / A(2));
  const A pdf =
      std::exp(A(-0.5) * a * a) * std::numbers::inv_sqrtpi_v<A> / std::numbers::sqrt2_v<A>;
  // Where the density underflows, x · pdf → 0 (x · 0 would be NaN at ±inf).
  return static_cast<T>(pdf == A(0) ? cdf : cdf + a * pdf);
}

namespace detail {
template <class A>
inline constexpr A gelu_tanh_k0 =
    std::numbers::sqrt2_v<A>* std::numbers::inv_sqrtpi_v<A>;  // √(2/π)
template <class A>
inline constexpr A gelu_tanh_k1 = A(0.044715);
}  // namespace detail

// ½ x (1 + tanh u) = x · σ(2u), σ(t) = 1/(1 + exp(−t)): the logistic form keeps relative
// accuracy for x ≪ 0, where 1 + tanh u cancels to nothing.
template <class T>
T gelu_tanh(T x) {
  using A = accumulator_t<T>;
  const A a = static_cast<A>(x);
  const A u = detail::gelu_tanh_k0<A> * (a + detail::gelu_tanh_k1<A> * a * a * a);
  const A denominator = A(1) + std::exp(A(-2) * u);
  // x → −inf: x / inf would be NaN; the limit is −0.
  return static_cast<T>(std::isinf(denominator) ? -A(0) : a / denominator);
}

// ½ (1 + tanh u) + ½ x (1 − tanh² u) u' = s + 2 x s (1 − s) u', with s = σ(2u) and
// 1 − s = σ(−2u) evaluated directly (1 − s would cancel for x ≫ 0).
template <class T>
T gelu_tanh_derivative(T x) {
  using A = accumulator_t<T>;
  const A a = static_cast<A>(x);
  const A u = detail::gelu_tanh_k0<A> * (a + detail::gelu_tanh_k1<A> * a * a * a);
  const A s = A(1) / (A(1) + std::exp(A(-2) * u));
  const A one_minus_s = A(1) / (A(1) + std::exp(A(2) * u));
  const A du = detail::gelu_tanh_k0<A> * (A(1) + A(3) * detail::gelu_tanh_k1<A> * a * a);
  // Where s (1 − s) rounds to 0 the second term is 0, even though x · du may overflow: skip it
  // rather than form 0 · inf = NaN.
  const A sech2_quarter = s * one_minus_s;
  const A tail = sech2_quarter == A(0) ? A(0) : A(2) * a * sech2_quarter * du;
  return static_cast<T>(s + tail);
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
  // float, double and bf16 run the row kernels (GELU has no parameters to hold in another
  // type); other scalars (long double) the scalar forms above.
  static constexpr bool uses_kernel = kernels::has_kernel<Scalar>;

  gelu_approximation approximation = gelu_approximation::erf;

  gelu() = default;
  explicit gelu(gelu_approximation form) : approximation(form) {}

  matrix<Scalar> forward(matrix_cref<Scalar> x) const {
    if constexpr (uses_kernel) {
      matrix<Scalar> y(x.rows(), x.cols());
      forward_into(x, y);
      return y;
    } else {
      return x.unaryExpr([a = approximation](Scalar s) { return gelu_value(s, a); });
    }
  }

  // y = GELU(x) into y (shape of x), allocating nothing.
  void forward_into(matrix_cref<Scalar> x, matrix_ref<Scalar> y) const requires uses_kernel {
    map_into("gelu::forward_into", x, nullptr, "y", y,
             [a = approximation](accumulator_t<Scalar> v) { return gelu_value(v, a); });
  }

  // GELU'(x), elementwise: the diagonal of the Jacobian, as a T x d matrix.
  matrix<Scalar> derivative(matrix_cref<Scalar> x) const {
    if constexpr (uses_kernel) {
      matrix<Scalar> slope(x.rows(), x.cols());
      map_into("gelu::derivative", x, nullptr, "slope", slope,
               [a = approximation](accumulator_t<Scalar> v) { return gelu_derivative(v, a); });
      return slope;
    } else {
      return x.unaryExpr([a = approximation](Scalar s) { return gelu_derivative(s, a); });
    }
  }

  // dx = dy ⊙ GELU'(x)
  gelu_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy) const {
    detail::check_same_shape("gelu::vjp", "dy", dy, "x", x);
    if constexpr (uses_kernel) {
      gelu_grad<Scalar> grad{matrix<Scalar>(x.rows(), x.cols())};
      vjp_into(x, dy, grad.dx);
      return grad;
    } else {
      return {dy.cwiseProduct(derivative(x))};
    }
  }

  // dx = dy ⊙ GELU'(x) into dx (shape of x), allocating nothing.
  void vjp_into(matrix_cref<Scalar> x, matrix_cref<Scalar> dy,
                matrix_ref<Scalar> dx) const requires uses_kernel {
    detail::check_same_shape("gelu::vjp_into", "dy", dy, "x", x);
    map_into("gelu::vjp_into", x, &dy, "dx", dx,
             [a = approximation](accumulator_t<Scalar> v) { return gelu_derivative(v, a); });
  }

  // J v = GELU'(x) ⊙ v
  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    detail::check_same_shape("gelu::jvp", "v", v, "x", x);
    if constexpr (uses_kernel) {
      matrix<Scalar> out(x.rows(), x.cols());
      map_into("gelu::jvp", x, &v, "out", out,
               [a = approximation](accumulator_t<Scalar> s) { return gelu_derivative(s, a); });
      return out;
    } else {
      return v.cwiseProduct(derivative(x));
    }
  }

  // diag(vec(GELU'(x)))
  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    const matrix<Scalar> g = derivative(x);
    matrix<Scalar> J = matrix<Scalar>::Zero(g.size(), g.size());
    J.diagonal() = Eigen::Map<const vector<Scalar>>(g.data(), g.size());
    return J;
  }

 private:
  // out = f(x) or (*dy) ⊙ f(x) through the row kernels, f evaluated in the accumulator type by
  // the scalar forms above (so the class keeps their exact values: one rounding per output).
  template <class F>
  static void map_into(const char* fn, const matrix_cref<Scalar>& x, const matrix_cref<Scalar>* dy,
                       const char* out_name, matrix_ref<Scalar> out, F f) {
    const Scalar* dy_base = dy && dy->size() ? dy->data() : nullptr;
    const index stride = dy ? dy->outerStride() : 0;
    kernels::gelu_rows<accumulator_t<Scalar>>(fn, x, dy_base, stride, f, out_name, out);
  }
};

static_assert(differentiable_map<gelu<float>>);
static_assert(differentiable_map<gelu<double>>);

}  // namespace resnorm
