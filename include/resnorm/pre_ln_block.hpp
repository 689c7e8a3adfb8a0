// resnorm/pre_ln_block.hpp — the Pre-LN block: y = x + F(LN(x)).
//
//   x, y: T x d;  norm: LayerNorm (or any differentiable_map normaliser) on the branch only;
//   F (sublayer): any differentiable_map from T x d to T x d.
//
// Jacobian: I + J_F(u) · J_LN(x), u = LN(x). The identity stands alone: nothing sits on the
// highway, so dy reaches x undiminished whatever the branch does; with F ≡ 0 the block is exactly
// the identity. Cost of jacobian(): F's and LN's jacobian() plus one (T·d)² product.
#pragma once

#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

template <class NormGrad, class SublayerGrad, class Scalar>
struct pre_ln_block_grad {
  matrix<Scalar> dx;
  NormGrad norm;
  SublayerGrad sublayer;
};

template <class Sublayer, class Norm = layer_norm<typename Sublayer::scalar_type>>
class pre_ln_block {
  static_assert(require_differentiable_map<Sublayer>());
  static_assert(require_differentiable_map<Norm>());

 public:
  using scalar_type = typename Sublayer::scalar_type;
  using grad_type = pre_ln_block_grad<gradient_t<Norm>, gradient_t<Sublayer>, scalar_type>;

  Norm norm;  // model order: the branch reads LN(x), then F
  Sublayer sublayer;

  pre_ln_block() = default;
  pre_ln_block(Norm n, Sublayer f) : norm(std::move(n)), sublayer(std::move(f)) {}

  // y = x + F(LN(x))
  matrix<scalar_type> forward(matrix_cref<scalar_type> x) const {
    const matrix<scalar_type> u = norm.forward(x);
    return x + detail::forward_keeping_shape("pre_ln_block::forward", sublayer, u);
  }

  // dx = dy                    (highway)
  //    + J_LNᵀ (J_Fᵀ dy)       (branch: back through F at u = LN(x), then through LN at x)
  grad_type vjp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> dy) const {
    detail::check_same_shape("pre_ln_block::vjp", "dy", dy, "x", x);
    const matrix<scalar_type> u = norm.forward(x);
    auto sublayer_grad = detail::vjp_keeping_shape("pre_ln_block::vjp", sublayer, u,
                                                   [&] { return sublayer.vjp(u, dy); });
    auto norm_grad = norm.vjp(x, sublayer_grad.dx);
    matrix<scalar_type> dx = dy + norm_grad.dx;
    return {std::move(dx), std::move(norm_grad), std::move(sublayer_grad)};
  }

  // J v = v + J_F (J_LN v)
  matrix<scalar_type> jvp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> v) const {
    detail::check_same_shape("pre_ln_block::jvp", "v", v, "x", x);
    const matrix<scalar_type> u = norm.forward(x);
    const matrix<scalar_type> branch = sublayer.jvp(u, norm.jvp(x, v));
    detail::check_same_shape("pre_ln_block::jvp", "sublayer output", branch, "x", x);
    return v + branch;
  }

  // I + J_F(u) J_LN(x)
  matrix<scalar_type> jacobian(matrix_cref<scalar_type> x) const {
    const matrix<scalar_type> u = norm.forward(x);
    matrix<scalar_type> J = sublayer.jacobian(u) * norm.jacobian(x);
    detail::check_shape_preserving_jacobian("pre_ln_block::jacobian", J, x);
    J.diagonal().array() += scalar_type(1);
    return J;
  }
};

}  // namespace resnorm
