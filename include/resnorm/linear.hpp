// resnorm/linear.hpp — an affine sublayer in the row convention: y = x W + b.
//
//   x: T x d_in,  W (weight): d_in x d_out,  b (bias): d_out or empty (no bias),  y: T x d_out.
//
// Jacobian: block diagonal, one d_out x d_in block Wᵀ per token (tokens do not mix):
//   d y(t, i) / d x(s, j) = δ_ts · W(j, i).
// jacobian() materialises the (T·d_out) x (T·d_in) matrix; vjp()/jvp() cost one matrix product.
#pragma once

#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

template <class Scalar>
struct linear_grad {
  matrix<Scalar> dx;       // T x d_in
  matrix<Scalar> dweight;  // d_in x d_out
  vector<Scalar> dbias;    // d_out, empty when the layer has no bias
};

template <class Scalar>
class linear {
 public:
  using scalar_type = Scalar;

  matrix<Scalar> weight;  // d_in x d_out
  vector<Scalar> bias;    // d_out, or empty: no bias

  linear() = default;

  explicit linear(matrix<Scalar> w, vector<Scalar> b = {})
      : weight(std::move(w)), bias(std::move(b)) {
    check_bias("linear");
  }

  // Zero weight and bias of the given shape, to be filled by the caller.
  static linear zeros(index in_features, index out_features, bool with_bias = true) {
    return linear(matrix<Scalar>::Zero(in_features, out_features),
                  with_bias ? vector<Scalar>::Zero(out_features) : vector<Scalar>());
  }

  index in_features() const { return weight.rows(); }
  index out_features() const { return weight.cols(); }
  bool has_bias() const { return bias.size() != 0; }

  // y = x W + b
  matrix<Scalar> forward(matrix_cref<Scalar> x) const {
    check_x("linear::forward", x);
    matrix<Scalar> y = x * weight;
    if (has_bias()) y.rowwise() += bias.transpose();
    return y;
  }

  // dx = dy Wᵀ,  dW = xᵀ dy,  db = Σ_rows dy
  linear_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy) const {
    check_x("linear::vjp", x);
    if (dy.rows() != x.rows() || dy.cols() != out_features()) {
      detail::fail("linear::vjp", "dy is " + detail::shape_string(dy.rows(), dy.cols()) +
                                      ", expected " +
                                      detail::shape_string(x.rows(), out_features()) + " (x is " +
                                      detail::shape_string(x.rows(), x.cols()) + ", weight is " +
                                      detail::shape_string(weight.rows(), weight.cols()) + ")");
    }
    linear_grad<Scalar> grad{dy * weight.transpose(), x.transpose() * dy, {}};
    if (has_bias()) grad.dbias = column_sums(dy);
    return grad;
  }

  // J v = v W
  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    check_x("linear::jvp", x);
    detail::check_same_shape("linear::jvp", "v", v, "x", x);
    return v * weight;
  }

  // block t = Wᵀ
  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    check_x("linear::jacobian", x);
    const index T = x.rows(), n = in_features(), m = out_features();
    matrix<Scalar> J = matrix<Scalar>::Zero(T * m, T * n);
    for (index t = 0; t < T; ++t) J.block(t * m, t * n, m, n) = weight.transpose();
    return J;
  }

 private:
  void check_bias(const char* function) const {
    if (has_bias()) {
      detail::check_length(function, "bias", bias.size(), "weight", weight.cols(), "columns");
    }
  }

  void check_x(const char* function, const matrix_cref<Scalar>& x) const {
    detail::check_inner_dim(function, x, "weight", weight);
    check_bias(function);
  }
};

static_assert(differentiable_map<linear<float>>);
static_assert(differentiable_map<linear<double>>);

}  // namespace resnorm
