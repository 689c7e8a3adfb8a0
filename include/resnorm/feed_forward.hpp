// resnorm/feed_forward.hpp — the position-wise feed-forward sublayer of a transformer.
//
//   y = GELU(x W1 + b1) W2 + b2        (row convention, one token per row)
//   x: T x d,  W1: d x d_ff,  b1: d_ff,  h = x W1 + b1: T x d_ff,  W2: d_ff x d,  b2: d,  y: T x d.
//   GELU exact (erf) or tanh-approximated (see gelu.hpp).
//
// Jacobian: block diagonal, tokens do not mix; the d x d block of token t is
//   J_t = W2ᵀ · diag(GELU'(h_t)) · W1ᵀ.
// jacobian() materialises the (T·d) x (T·d) matrix: O(T²d²) memory and O(T·d²·d_ff) time;
// vjp()/jvp() cost two matrix products each, O(T·d·d_ff).
#pragma once

#include <string>
#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/gelu.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

template <class Scalar>
struct feed_forward_grad {
  matrix<Scalar> dx;   // T x d
  matrix<Scalar> dw1;  // d x d_ff
  vector<Scalar> db1;  // d_ff
  matrix<Scalar> dw2;  // d_ff x d
  vector<Scalar> db2;  // d
};

template <class Scalar>
class feed_forward {
 public:
  using scalar_type = Scalar;

  matrix<Scalar> w1;  // d x d_ff
  vector<Scalar> b1;  // d_ff
  matrix<Scalar> w2;  // d_ff x d
  vector<Scalar> b2;  // d
  gelu_approximation approximation = gelu_approximation::erf;

  feed_forward() = default;

  feed_forward(matrix<Scalar> weight1, vector<Scalar> bias1, matrix<Scalar> weight2,
               vector<Scalar> bias2, gelu_approximation form = gelu_approximation::erf)
      : w1(std::move(weight1)),
        b1(std::move(bias1)),
        w2(std::move(weight2)),
        b2(std::move(bias2)),
        approximation(form) {
    check_parameters("feed_forward");
  }

  // All parameters zero: dim -> hidden -> dim, to be filled by the caller.
  static feed_forward zeros(index dim, index hidden,
                            gelu_approximation form = gelu_approximation::erf) {
    return feed_forward(matrix<Scalar>::Zero(dim, hidden), vector<Scalar>::Zero(hidden),
                        matrix<Scalar>::Zero(hidden, dim), vector<Scalar>::Zero(dim), form);
  }

  index dim() const { return w1.rows(); }
  index hidden_dim() const { return w1.cols(); }

  // y = GELU(x W1 + b1) W2 + b2
  matrix<Scalar> forward(matrix_cref<Scalar> x) const {
    check_x("feed_forward::forward", x);
    matrix<Scalar> y = activation().forward(pre_activation(x)) * w2;
    y.rowwise() += b2.transpose();
    return y;
  }

  // With h = x W1 + b1 and a = GELU(h):
  //   dW2 = aᵀ dy,   db2 = Σ_rows dy                      (output projection)
  //   dh  = (dy W2ᵀ) ⊙ GELU'(h)                           (back through the activation)
  //   dW1 = xᵀ dh,   db1 = Σ_rows dh,   dx = dh W1ᵀ       (input projection)
  feed_forward_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy) const {
    check_x("feed_forward::vjp", x);
    detail::check_same_shape("feed_forward::vjp", "dy", dy, "x", x);
    const matrix<Scalar> h = pre_activation(x);
    const gelu<Scalar> act = activation();
    feed_forward_grad<Scalar> grad;
    grad.dw2 = act.forward(h).transpose() * dy;
    grad.db2 = column_sums(dy);
    const matrix<Scalar> dh = (dy * w2.transpose()).cwiseProduct(act.derivative(h));
    grad.dw1 = x.transpose() * dh;
    grad.db1 = column_sums(dh);
    grad.dx = dh * w1.transpose();
    return grad;
  }

  // J v = ((v W1) ⊙ GELU'(h)) W2
  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    check_x("feed_forward::jvp", x);
    detail::check_same_shape("feed_forward::jvp", "v", v, "x", x);
    return ((v * w1).cwiseProduct(activation().derivative(pre_activation(x)))) * w2;
  }

  // block t = W2ᵀ diag(GELU'(h_t)) W1ᵀ
  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    check_x("feed_forward::jacobian", x);
    const matrix<Scalar> g = activation().derivative(pre_activation(x));
    const index T = x.rows(), d = dim();
    matrix<Scalar> J = matrix<Scalar>::Zero(T * d, T * d);
    for (index t = 0; t < T; ++t) {
      J.block(t * d, t * d, d, d).noalias() =
          w2.transpose() * g.row(t).transpose().asDiagonal() * w1.transpose();
    }
    return J;
  }

 private:
  gelu<Scalar> activation() const { return gelu<Scalar>(approximation); }

  // h = x W1 + b1
  matrix<Scalar> pre_activation(matrix_cref<Scalar> x) const {
    matrix<Scalar> h = x * w1;
    h.rowwise() += b1.transpose();
    return h;
  }

  void check_parameters(const char* function) const {
    detail::check_length(function, "b1", b1.size(), "w1", w1.cols(), "columns");
    if (w2.rows() != w1.cols() || w2.cols() != w1.rows()) {
      detail::fail(function, "w2 is " + detail::shape_string(w2.rows(), w2.cols()) + ", w1 is " +
                                 detail::shape_string(w1.rows(), w1.cols()) + " (expects w2 " +
                                 detail::shape_string(w1.cols(), w1.rows()) + ")");
    }
    detail::check_length(function, "b2", b2.size(), "w2", w2.cols(), "columns");
  }

  void check_x(const char* function, const matrix_cref<Scalar>& x) const {
    check_parameters(function);
    detail::check_inner_dim(function, x, "w1", w1);
  }
};

static_assert(differentiable_map<feed_forward<float>>);
static_assert(differentiable_map<feed_forward<double>>);

}  // namespace resnorm
