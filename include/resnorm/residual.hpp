// resnorm/residual.hpp — the residual connection y = x + h · F(x), one forward-Euler step.
//
//   x, y: T x d;  F: any differentiable_map from T x d to T x d;  h (step): a scalar, 1 by default.
//
// Jacobian: I + h · J_F(x). The identity is the gradient highway: vjp() passes dy through
// unchanged and adds the branch's h · J_Fᵀ dy. Cost: that of F plus O(T·d); jacobian() costs
// F's jacobian() plus a (T·d)-long diagonal update.
#pragma once

#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

template <class SublayerGrad, class Scalar>
struct residual_grad {
  matrix<Scalar> dx;
  SublayerGrad sublayer;  // F's gradients, for the loss through y (so they carry the factor h)
};

template <class Sublayer>
class residual {
  static_assert(require_differentiable_map<Sublayer>());

 public:
  using scalar_type = typename Sublayer::scalar_type;
  using grad_type = residual_grad<gradient_t<Sublayer>, scalar_type>;

  Sublayer sublayer;
  scalar_type step = scalar_type(1);  // h

  residual() = default;
  explicit residual(Sublayer f, scalar_type h = scalar_type(1)) : sublayer(std::move(f)), step(h) {}

  // y = x + h F(x)
  matrix<scalar_type> forward(matrix_cref<scalar_type> x) const {
    return x + step * detail::forward_keeping_shape("residual::forward", sublayer, x);
  }

  // dx = dy + J_Fᵀ (h dy):  the highway, plus the branch pulled back through F.
  grad_type vjp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> dy) const {
    detail::check_same_shape("residual::vjp", "dy", dy, "x", x);
    const matrix<scalar_type> h_dy = step * dy;
    grad_type grad{matrix<scalar_type>(),
                   detail::vjp_keeping_shape("residual::vjp", sublayer, x,
                                             [&] { return sublayer.vjp(x, h_dy); })};
    grad.dx = dy + grad.sublayer.dx;
    return grad;
  }

  // J v = v + h J_F v
  matrix<scalar_type> jvp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> v) const {
    detail::check_same_shape("residual::jvp", "v", v, "x", x);
    // J_F v has F's output shape: checked, so a width-changing F throws instead of
    // tripping Eigen's size assertion in the sum.
    const matrix<scalar_type> branch = sublayer.jvp(x, v);
    detail::check_same_shape("residual::jvp", "sublayer output", branch, "x", x);
    return v + step * branch;
  }

  // I + h J_F
  matrix<scalar_type> jacobian(matrix_cref<scalar_type> x) const {
    matrix<scalar_type> J = step * sublayer.jacobian(x);
    detail::check_shape_preserving_jacobian("residual::jacobian", J, x);
    J.diagonal().array() += scalar_type(1);
    return J;
  }
};

}  // namespace resnorm
