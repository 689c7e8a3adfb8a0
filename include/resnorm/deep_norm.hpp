// resnorm/deep_norm.hpp — DeepNorm's constants (Wang et al. 2022, "DeepNet: Scaling
// Transformers to 1,000 Layers", Table 1 / Figure 2) and the block that uses them.
//
//   block:  y = LN(α · x + F(x))                    (norm_block with post_ln placement, α ≠ 1)
//   init:   the weights of the FFN, the value projection and the output projection drawn with
//           Xavier-normal gain β; the query and key projections with gain 1.
//
// Constants for a stack of N layers:
//   decoder-only (GPT-like) or encoder-only (BERT-like):  α = (2N)^(1/4),  β = (8N)^(−1/4)
//     e.g. N = 1: α = 2^(1/4) ≈ 1.1892,  β = 8^(−1/4) ≈ 0.5946.
//   encoder-decoder (N encoder, M decoder layers), for reference only (the paper's Table 1 and
//   its reference code differ here, which is why β is a parameter everywhere else):
//     encoder α = 0.81 (N⁴M)^(1/16), β = 0.87 (N⁴M)^(−1/16);  decoder α = (3M)^(1/4),
//     β = (12M)^(−1/4).
#pragma once

#include <cmath>
#include <string>
#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/matrix.hpp"
#include "resnorm/norm_block.hpp"

namespace resnorm {

// α = (2N)^(1/4): the highway weight of every block of an N-layer decoder-only stack.
inline double deep_norm_alpha(index layers) {
  if (layers < 1)
    detail::fail("deep_norm_alpha", "layers must be >= 1, got " + std::to_string(layers));
  return std::pow(2.0 * static_cast<double>(layers), 0.25);
}

// β = (8N)^(−1/4): the initialisation gain of the FFN, value and output projections.
inline double deep_norm_beta(index layers) {
  if (layers < 1)
    detail::fail("deep_norm_beta", "layers must be >= 1, got " + std::to_string(layers));
  return std::pow(8.0 * static_cast<double>(layers), -0.25);
}

// y = LN(α x + F(x)) with α = deep_norm_alpha(layers).
template <class Sublayer, class Norm>
norm_block<Sublayer, Norm> make_deep_norm_block(Sublayer f, Norm n, index layers) {
  using S = typename Sublayer::scalar_type;
  return norm_block<Sublayer, Norm>::deep_norm(std::move(f), std::move(n),
                                               static_cast<S>(deep_norm_alpha(layers)));
}

}  // namespace resnorm
