// resnorm/softmax.hpp — the row softmax, max-subtracted, with its exact derivatives.
//
//   p(t, j) = exp(x(t, j) − m_t) / Σ_k exp(x(t, k) − m_t),   m_t = max_k x(t, k),
//   per row of a T x d matrix x; y = p is T x d and each row sums to 1.
//
// Subtracting the row maximum changes nothing mathematically (softmax(x + c) = softmax(x)) but
// keeps every exponent ≤ 0, so exp never overflows and the largest term is exactly 1, so the
// denominator is ≥ 1. Entries equal to −inf (a causal mask) give p = 0 exactly; a row that is
// entirely −inf has no defined softmax and gives NaN, as the maths says.
//
// Jacobian: block diagonal, one d x d block per row, never coupling rows:
//   J_t = diag(p_t) − p_t p_tᵀ   (symmetric, J_t 1 = 0 because softmax(x + c1) = softmax(x)).
// jacobian() materialises the (T·d) x (T·d) matrix: O(T²d²) memory, for tests and study;
// vjp()/jvp() cost O(T·d).
#pragma once

#include <cmath>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

// ---- free functions on the probabilities, shared with attention -------------------------------

// p = softmax(x) row by row; the sum accumulates in accumulator_t<Scalar>.
template <class Scalar>
matrix<Scalar> softmax_rows(matrix_cref<Scalar> x) {
  using A = accumulator_t<Scalar>;
  matrix<Scalar> p(x.rows(), x.cols());
  for (index t = 0; t < x.rows(); ++t) {
    if (x.cols() == 0) continue;
    const Scalar m = x.row(t).maxCoeff();
    A sum = 0;
    for (index j = 0; j < x.cols(); ++j) {
      // exp(x − m) ≤ 1; an entry of −inf gives exactly 0.
      const A e = std::exp(static_cast<A>(x(t, j)) - static_cast<A>(m));
      p(t, j) = static_cast<Scalar>(e);
      sum += e;
    }
    p.row(t) = (p.row(t).template cast<A>() / sum).template cast<Scalar>();
  }
  return p;
}

// dx = p ⊙ (dy − ⟨dy, p⟩_row)   — Jᵀ dy with J = diag(p) − p pᵀ (J is symmetric).
// The same formula is J v, so it serves the jvp too.
template <class Scalar>
matrix<Scalar> softmax_rows_vjp(matrix_cref<Scalar> p, matrix_cref<Scalar> dy) {
  using A = accumulator_t<Scalar>;
  matrix<Scalar> dx(p.rows(), p.cols());
  for (index t = 0; t < p.rows(); ++t) {
    const auto p_t = p.row(t).template cast<A>().array();
    const auto dy_t = dy.row(t).template cast<A>().array();
    const A dot = (p_t * dy_t).sum();
    dx.row(t) = (p_t * (dy_t - dot)).template cast<Scalar>();
  }
  return dx;
}

// ---- the map ---------------------------------------------------------------------------------

template <class Scalar>
struct softmax_grad {
  matrix<Scalar> dx;
};

template <class Scalar>
class softmax {
 public:
  using scalar_type = Scalar;

  matrix<Scalar> forward(matrix_cref<Scalar> x) const { return softmax_rows<Scalar>(x); }

  // dx = p ⊙ (dy − Σ_j dy_j p_j),  per row
  //      └direct┘ └ via the normaliser ┘
  softmax_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy) const {
    detail::check_same_shape("softmax::vjp", "dy", dy, "x", x);
    const matrix<Scalar> p = softmax_rows<Scalar>(x);
    return {softmax_rows_vjp<Scalar>(p, dy)};
  }

  // J v = p ⊙ (v − Σ_j v_j p_j),  per row (J is symmetric)
  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    detail::check_same_shape("softmax::jvp", "v", v, "x", x);
    const matrix<Scalar> p = softmax_rows<Scalar>(x);
    return softmax_rows_vjp<Scalar>(p, v);
  }

  // block t = diag(p_t) − p_t p_tᵀ
  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    const matrix<Scalar> p = softmax_rows<Scalar>(x);
    const index T = x.rows(), d = x.cols();
    matrix<Scalar> J = matrix<Scalar>::Zero(T * d, T * d);
    for (index t = 0; t < T; ++t) {
      const vector<Scalar> p_t = p.row(t).transpose();
      auto block = J.block(t * d, t * d, d, d);
      block.noalias() = -p_t * p_t.transpose();
      block.diagonal() += p_t;
    }
    return J;
  }
};

static_assert(differentiable_map<softmax<float>>);
static_assert(differentiable_map<softmax<double>>);

}  // namespace resnorm
