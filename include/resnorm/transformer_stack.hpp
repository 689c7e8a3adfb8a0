// resnorm/transformer_stack.hpp — N transformer layers, an optional final norm, a seeded
// initialisation, and the backward pass with per-layer gradient norms.
//
//   x_0 = x,  x_{l+1} = layer_l(x_l)  (l = 0 … N−1),  out = N_f(x_N) if final_norm is used else x_N
//   x, out: T x d. Each layer has its own placement (norm_block.hpp), so mixed schemes are a
//   vector of placements: mix_ln_placements(N) gives Post-LN for the first ⌊N/4⌋ layers and
//   Pre-LN after (Li et al. 2024). The final norm is used when the last layer leaves its output
//   un-normalised (pre_ln, sandwich_ln), as GPT-2 does.
//
// Initialisation (transformer_init), drawn from normal_generator(seed) in a fixed order —
// per layer Wq, Wk, Wv, Wo, W1, W2, each row-major — so one seed gives bitwise the same stack on
// every machine:
//   normal:          W ~ N(0, std_dev²), std_dev = 0.02 (GPT-2)
//   xavier_normal:   W ~ N(0, 2/(fan_in + fan_out))
//   xavier_uniform:  W ~ U(−a, a), a = sqrt(6/(fan_in + fan_out))   (Xiong et al. 2020 use Xavier)
//   scale_writers:   Wo and W2, which write into the residual stream, times 1/sqrt(2N) (GPT-2)
//   deep_norm_gain:  Wv, Wo, W1, W2 times β (DeepNet's gain; see deep_norm.hpp)
//   biases 0; every norm built as Norm(d) (layer_norm: γ = 1, β = 0).
//
// Backward: vjp() keeps each layer's input x_l (T x d, N + 1 of them) and frees it as soon as
// that layer's backward has run; inside a layer the intermediates are recomputed from x_l (one
// extra forward per layer instead of storing every attention matrix).
// Jacobian: the product of the layers' (and the final norm's) Jacobians, (T·d) x (T·d): O(N)
// products of (T·d)² matrices — for tests and study only.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "resnorm/attention.hpp"
#include "resnorm/deep_norm.hpp"
#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/feed_forward.hpp"
#include "resnorm/gelu.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/matrix.hpp"
#include "resnorm/norm_block.hpp"
#include "resnorm/random.hpp"
#include "resnorm/transformer_layer.hpp"

namespace resnorm {

struct transformer_config {
  index dim = 0;     // d
  index heads = 1;   // d must be divisible by heads
  index hidden = 0;  // d_ff; 0 means 4·d
  index layers = 0;  // N
  gelu_approximation gelu = gelu_approximation::erf;
};

enum class init_scheme { normal, xavier_normal, xavier_uniform };

struct transformer_init {
  init_scheme scheme = init_scheme::normal;
  double std_dev = 0.02;        // for init_scheme::normal
  bool scale_writers = true;    // Wo and W2 times 1/sqrt(2N)
  double deep_norm_gain = 1.0;  // Wv, Wo, W1, W2 times this (1: off)

  // Xiong et al. 2020: Xavier, no depth scaling.
  static transformer_init xavier(init_scheme s = init_scheme::xavier_uniform) {
    return {s, 0.0, false, 1.0};
  }
  // DeepNet: Xavier-normal, gain β on Wv, Wo, W1, W2, no 1/sqrt(2N).
  static transformer_init deep_norm(index layers) {
    return {init_scheme::xavier_normal, 0.0, false, resnorm::deep_norm_beta(layers)};
  }
};

// Post-LN for the first ⌊N/4⌋ layers, Pre-LN after (Mix-LN).
inline std::vector<norm_placement> mix_ln_placements(index layers, double post_fraction = 0.25) {
  std::vector<norm_placement> p(static_cast<std::size_t>(layers < 0 ? 0 : layers),
                                norm_placement::pre_ln);
  const auto post =
      static_cast<std::size_t>(std::floor(post_fraction * static_cast<double>(layers)));
  for (std::size_t l = 0; l < post && l < p.size(); ++l) p[l] = norm_placement::post_ln;
  return p;
}

inline std::vector<norm_placement> uniform_placements(index layers, norm_placement where) {
  return std::vector<norm_placement>(static_cast<std::size_t>(layers < 0 ? 0 : layers), where);
}

// One row per layer, for a depth study.
struct layer_gradient_norms {
  double dx = 0;             // ‖∂loss/∂x_l‖_F: the gradient reaching layer l's input
  double ffn_dw2 = 0;        // ‖∂loss/∂W2‖_F of the layer's FFN
  double attention_dwo = 0;  // ‖∂loss/∂Wo‖_F of the layer's attention
  double weights = 0;        // ‖·‖_F over all of the layer's projection weights and biases
};

template <class LayerGrad, class NormGrad, class Scalar>
struct transformer_stack_grad {
  matrix<Scalar> dx;              // gradient reaching the stack's input
  std::vector<LayerGrad> layers;  // one per layer, in model order
  NormGrad final_norm;            // empty members when the stack has no final norm
};

template <class Scalar, class Norm = layer_norm<Scalar>>
class transformer_stack {
 public:
  using scalar_type = Scalar;
  using layer_type = transformer_layer<Scalar, Norm>;
  using grad_type = transformer_stack_grad<gradient_t<layer_type>, gradient_t<Norm>, Scalar>;

  std::vector<layer_type> layers;
  Norm final_norm;
  bool use_final_norm = false;

  transformer_stack() = default;

  // N = config.layers layers with the given placements (one per layer), initialised from seed.
  transformer_stack(const transformer_config& config, std::vector<norm_placement> placements,
                    std::uint64_t seed, const transformer_init& init = {}) {
    const char* fn = "transformer_stack";
    if (config.layers < 0)
      detail::fail(fn, "layers must be >= 0, got " + std::to_string(config.layers));
    detail::check_length(fn, "placements", static_cast<index>(placements.size()), "config",
                         config.layers, "layers");
    if (config.heads < 1 || config.dim % config.heads != 0) {
      detail::fail(fn, "d = " + std::to_string(config.dim) +
                           " is not divisible by heads = " + std::to_string(config.heads));
    }
    const index d = config.dim, h = config.hidden > 0 ? config.hidden : 4 * config.dim;
    const double writer = init.scale_writers && config.layers > 0
                              ? 1.0 / std::sqrt(2.0 * static_cast<double>(config.layers))
                              : 1.0;
    const double beta = init.deep_norm_gain;
    normal_generator rng(seed);
    layers.reserve(placements.size());
    for (const norm_placement where : placements) {
      matrix<Scalar> wq = draw(d, d, init, 1.0, rng);
      matrix<Scalar> wk = draw(d, d, init, 1.0, rng);
      matrix<Scalar> wv = draw(d, d, init, beta, rng);
      matrix<Scalar> wo = draw(d, d, init, beta * writer, rng);
      matrix<Scalar> w1 = draw(d, h, init, beta, rng);
      matrix<Scalar> w2 = draw(h, d, init, beta * writer, rng);
      layers.emplace_back(where,
                          causal_self_attention<Scalar>(std::move(wq), std::move(wk), std::move(wv),
                                                        std::move(wo), config.heads),
                          Norm(d),
                          feed_forward<Scalar>(std::move(w1), vector<Scalar>::Zero(h),
                                               std::move(w2), vector<Scalar>::Zero(d), config.gelu),
                          Norm(d));
    }
    final_norm = Norm(d);
    use_final_norm = !placements.empty() && (placements.back() == norm_placement::pre_ln ||
                                             placements.back() == norm_placement::sandwich_ln);
  }

  // The stacks of the table in norm_block.hpp, one line each.
  static transformer_stack pre_ln(const transformer_config& c, std::uint64_t seed,
                                  const transformer_init& init = {}) {
    return transformer_stack(c, uniform_placements(c.layers, norm_placement::pre_ln), seed, init);
  }
  static transformer_stack post_ln(const transformer_config& c, std::uint64_t seed,
                                   const transformer_init& init = {}) {
    return transformer_stack(c, uniform_placements(c.layers, norm_placement::post_ln), seed, init);
  }
  static transformer_stack mix_ln(const transformer_config& c, std::uint64_t seed,
                                  const transformer_init& init = {}) {
    return transformer_stack(c, mix_ln_placements(c.layers), seed, init);
  }
  // Post-LN with α = (2N)^(1/4) on every highway and DeepNet's β initialisation.
  static transformer_stack deep_norm(const transformer_config& c, std::uint64_t seed) {
    transformer_stack s(c, uniform_placements(c.layers, norm_placement::post_ln), seed,
                        transformer_init::deep_norm(c.layers < 1 ? 1 : c.layers));
    const Scalar alpha = static_cast<Scalar>(deep_norm_alpha(c.layers < 1 ? 1 : c.layers));
    for (auto& l : s.layers) {
      l.attention.alpha = alpha;
      l.ffn.alpha = alpha;
    }
    return s;
  }

  index size() const { return static_cast<index>(layers.size()); }

  // ---- forward
  // -----------------------------------------------------------------------------------

  matrix<Scalar> forward(matrix_cref<Scalar> x) const {
    matrix<Scalar> h = x;
    for (const auto& layer : layers) h = layer.forward(h);
    return use_final_norm ? final_norm.forward(h) : h;
  }

  // ---- vjp (backward)
  // ----------------------------------------------------------------------------
  //   g_N = J_Nf(x_N)ᵀ dy (or dy);   g_l = J_layer_l(x_l)ᵀ g_{l+1};   dx = g_0
  //   x_l is released right after layer l's backward.

  grad_type vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy) const {
    detail::check_same_shape("transformer_stack::vjp", "dy", dy, "x", x);
    std::vector<matrix<Scalar>> inputs;  // x_0 … x_N
    inputs.reserve(layers.size() + 1);
    inputs.emplace_back(x);
    for (const auto& layer : layers) inputs.push_back(layer.forward(inputs.back()));
    grad_type grad{};
    grad.layers.resize(layers.size());
    matrix<Scalar> g;
    if (use_final_norm) {
      grad.final_norm = final_norm.vjp(inputs.back(), dy);
      g = grad.final_norm.dx;
    } else {
      g = dy;
    }
    inputs.pop_back();  // x_N is no longer needed
    for (std::size_t l = layers.size(); l-- > 0;) {
      grad.layers[l] = layers[l].vjp(inputs.back(), g);
      inputs.pop_back();
      g = grad.layers[l].dx;
    }
    grad.dx = std::move(g);
    return grad;
  }

  // ---- jvp
  // ---------------------------------------------------------------------------------------

  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    detail::check_same_shape("transformer_stack::jvp", "v", v, "x", x);
    matrix<Scalar> h = x, t = v;
    for (const auto& layer : layers) {
      t = layer.jvp(h, t);
      h = layer.forward(h);
    }
    return use_final_norm ? final_norm.jvp(h, t) : t;
  }

  // ---- jacobian
  // ----------------------------------------------------------------------------------
  //   J = J_Nf(x_N) · J_{N−1}(x_{N−1}) ⋯ J_0(x_0)

  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    matrix<Scalar> h = x;
    matrix<Scalar> J = matrix<Scalar>::Identity(x.size(), x.size());
    for (const auto& layer : layers) {
      J = layer.jacobian(h) * J;
      h = layer.forward(h);
    }
    return use_final_norm ? matrix<Scalar>(final_norm.jacobian(h) * J) : J;
  }

 private:
  // rows x cols weight, scaled by gain, per the scheme.
  static matrix<Scalar> draw(index rows, index cols, const transformer_init& init, double gain,
                             normal_generator& rng) {
    const double fan = static_cast<double>(rows + cols);
    switch (init.scheme) {
      case init_scheme::xavier_uniform: {
        const double a = gain * std::sqrt(6.0 / fan);
        matrix<Scalar> w(rows, cols);
        for (index k = 0; k < w.size(); ++k) {
          w.data()[k] = static_cast<Scalar>(a * (2.0 * rng.uniform() - 1.0));
        }
        return w;
      }
      case init_scheme::xavier_normal:
        return random_normal<Scalar>(rows, cols, rng, gain * std::sqrt(2.0 / fan));
      case init_scheme::normal:
        break;
    }
    return random_normal<Scalar>(rows, cols, rng, gain * init.std_dev);
  }
};

// Per-layer Frobenius norms of a stack's gradient, in model order.
template <class LayerGrad, class NormGrad, class Scalar>
std::vector<layer_gradient_norms> gradient_norms(
    const transformer_stack_grad<LayerGrad, NormGrad, Scalar>& grad) {
  std::vector<layer_gradient_norms> out;
  out.reserve(grad.layers.size());
  for (const auto& l : grad.layers) {
    const auto& a = l.attention.sublayer;
    const auto& f = l.ffn.sublayer;
    layer_gradient_norms n;
    n.dx = static_cast<double>(l.dx.norm());
    n.ffn_dw2 = static_cast<double>(f.dw2.norm());
    n.attention_dwo = static_cast<double>(a.dwo.norm());
    const double sq = static_cast<double>(
        a.dwq.squaredNorm() + a.dwk.squaredNorm() + a.dwv.squaredNorm() + a.dwo.squaredNorm() +
        f.dw1.squaredNorm() + f.db1.squaredNorm() + f.dw2.squaredNorm() + f.db2.squaredNorm());
    n.weights = std::sqrt(sq);
    out.push_back(n);
  }
  return out;
}

static_assert(differentiable_map<transformer_stack<float>>);
static_assert(differentiable_map<transformer_stack<double>>);

}  // namespace resnorm
