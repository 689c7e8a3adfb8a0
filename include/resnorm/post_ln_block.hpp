// resnorm/post_ln_block.hpp — the Post-LN block of the 2017 Transformer: y = LN(x + F(x)).
//
//   x, y: T x d;  F (sublayer): any differentiable_map from T x d to T x d;
//   norm: LayerNorm (or any differentiable_map normaliser), applied to the sum z = x + F(x).
//
// Jacobian: J_LN(z) · (I + J_F(x)). LN sits on the highway: the identity reaches x only after
// passing through J_LN(z), whose gain is gamma/sqrt(var(z) + eps) and whose rank is d − 2 —
// a large F shrinks every gradient, the highway's included. With F ≡ 0 the block is LN itself.
// Cost of jacobian(): F's and LN's jacobian() plus one (T·d)² product.
#pragma once

#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

template <class SublayerGrad, class NormGrad, class Scalar>
struct post_ln_block_grad {
  matrix<Scalar> dx;
  SublayerGrad sublayer;
  NormGrad norm;
};

template <class Sublayer, class Norm = layer_norm<typename Sublayer::scalar_type>>
class post_ln_block {
  static_assert(require_differentiable_map<Sublayer>());
  static_assert(require_differentiable_map<Norm>());

 public:
  using scalar_type = typename Sublayer::scalar_type;
  using grad_type = post_ln_block_grad<gradient_t<Sublayer>, gradient_t<Norm>, scalar_type>;

  Sublayer sublayer;  // model order: F, the add, then LN
  Norm norm;

  post_ln_block() = default;
  post_ln_block(Sublayer f, Norm n) : sublayer(std::move(f)), norm(std::move(n)) {}

  // y = LN(x + F(x))
  matrix<scalar_type> forward(matrix_cref<scalar_type> x) const {
    return norm.forward(sum("post_ln_block::forward", x));
  }

  // g  = J_LN(z)ᵀ dy           (through LN at z = x + F(x): the highway pays this too)
  // dx = g + J_F(x)ᵀ g          (highway + branch)
  grad_type vjp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> dy) const {
    detail::check_same_shape("post_ln_block::vjp", "dy", dy, "x", x);
    auto norm_grad = norm.vjp(sum("post_ln_block::vjp", x), dy);
    auto sublayer_grad = sublayer.vjp(x, norm_grad.dx);
    matrix<scalar_type> dx = norm_grad.dx + sublayer_grad.dx;
    return {std::move(dx), std::move(sublayer_grad), std::move(norm_grad)};
  }

  // J v = J_LN(z) (v + J_F v)
  matrix<scalar_type> jvp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> v) const {
    detail::check_same_shape("post_ln_block::jvp", "v", v, "x", x);
    const matrix<scalar_type> z = sum("post_ln_block::jvp", x);
    const matrix<scalar_type> branch = sublayer.jvp(x, v);
    detail::check_same_shape("post_ln_block::jvp", "sublayer output", branch, "x", x);
    return norm.jvp(z, v + branch);
  }

  // J_LN(z) (I + J_F(x))
  matrix<scalar_type> jacobian(matrix_cref<scalar_type> x) const {
    matrix<scalar_type> residual_jacobian = sublayer.jacobian(x);
    detail::check_shape_preserving_jacobian("post_ln_block::jacobian", residual_jacobian, x);
    residual_jacobian.diagonal().array() += scalar_type(1);
    return norm.jacobian(sum("post_ln_block::jacobian", x)) * residual_jacobian;
  }

 private:
  // z = x + F(x), the residual sum LN normalises.
  matrix<scalar_type> sum(const char* function, matrix_cref<scalar_type> x) const {
    return x + detail::forward_keeping_shape(function, sublayer, x);
  }
};

}  // namespace resnorm
