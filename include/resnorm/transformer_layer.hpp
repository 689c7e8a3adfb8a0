// resnorm/transformer_layer.hpp — one transformer layer: attention block, then FFN block.
//
//   Pre-LN:   y = x + MHA(LN₁(x));    z = y + FFN(LN₂(y))
//   Post-LN:  y = LN₁(x + MHA(x));    z = LN₂(y + FFN(y))
//   and every other placement of norm_block.hpp (Sandwich-LN, DeepNorm, ReZero, LayerScale),
//   the two blocks of a layer sharing one placement.
//
//   x, y, z: T x d;  MHA: causal_self_attention (d x d projections, `heads` heads);
//   FFN: feed_forward (d -> d_ff -> d);  LN₁, LN₂: Norm (layer_norm by default; rms_norm,
//   dynamic_tanh, ... work too).
//
// Jacobian: J = J_ffn_block(y) · J_attention_block(x), (T·d) x (T·d) and block lower triangular
// in tokens (the attention mixes token s into token t ≥ s only). vjp() recomputes y = the
// attention block's output once; jacobian() costs both blocks' jacobian() and one (T·d)²
// product.
#pragma once

#include <utility>

#include "resnorm/attention.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/feed_forward.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/matrix.hpp"
#include "resnorm/norm_block.hpp"

namespace resnorm {

template <class AttentionGrad, class FfnGrad, class Scalar>
struct transformer_layer_grad {
  matrix<Scalar> dx;        // gradient reaching the layer's input
  AttentionGrad attention;  // .norm (LN₁), .sublayer.dwq … .dwo, .dscale
  FfnGrad ffn;              // .norm (LN₂), .sublayer.dw1, .db1, .dw2, .db2, .dscale
};

template <class Scalar, class Norm = layer_norm<Scalar>>
class transformer_layer {
 public:
  using scalar_type = Scalar;
  using attention_block = norm_block<causal_self_attention<Scalar>, Norm>;
  using ffn_block = norm_block<feed_forward<Scalar>, Norm>;
  using grad_type =
      transformer_layer_grad<gradient_t<attention_block>, gradient_t<ffn_block>, Scalar>;

  attention_block attention;  // model order: attention first, then the FFN
  ffn_block ffn;

  transformer_layer() = default;
  transformer_layer(attention_block a, ffn_block f) : attention(std::move(a)), ffn(std::move(f)) {}

  // Both blocks with placement `where`, norms N₁ and N₂.
  transformer_layer(norm_placement where, causal_self_attention<Scalar> mha, Norm n1,
                    feed_forward<Scalar> mlp, Norm n2)
      : attention(where, std::move(n1), std::move(mha)),
        ffn(where, std::move(n2), std::move(mlp)) {}

  norm_placement placement() const { return attention.placement; }

  // z = FFN_block(MHA_block(x))
  matrix<Scalar> forward(matrix_cref<Scalar> x) const { return ffn.forward(attention.forward(x)); }

  // dy → back through the FFN block at y = MHA_block(x) → back through the attention block at x
  grad_type vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dz) const {
    detail::check_same_shape("transformer_layer::vjp", "dz", dz, "x", x);
    const matrix<Scalar> y = attention.forward(x);
    auto ffn_grad = ffn.vjp(y, dz);
    auto attention_grad = attention.vjp(x, ffn_grad.dx);
    matrix<Scalar> dx = attention_grad.dx;
    return {std::move(dx), std::move(attention_grad), std::move(ffn_grad)};
  }

  // J v = J_ffn_block(y) (J_attention_block(x) v)
  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    detail::check_same_shape("transformer_layer::jvp", "v", v, "x", x);
    const matrix<Scalar> y = attention.forward(x);
    return ffn.jvp(y, attention.jvp(x, v));
  }

  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    const matrix<Scalar> y = attention.forward(x);
    return ffn.jacobian(y) * attention.jacobian(x);
  }
};

static_assert(differentiable_map<transformer_layer<float>>);
static_assert(differentiable_map<transformer_layer<double>>);

}  // namespace resnorm
