// experiments.hpp — the depth study: the lesson's experiments on residual stacks, LayerNorm
// placement and attention conditioning (1–7), and Xiong et al. 2020's gradient norms on real
// transformer stacks (8), each one a function of its seeds returning a plain struct.
//
// Shared by the depth_study program (which prints and plots the results) and by
// tests/depth_study_test.cpp (which checks each claim over several seeds). Everything is double,
// drawn from resnorm::normal_generator, and built from resnorm's own maps, so each result is a
// fixed function of its seed on every machine.
//
// Conventions: a single token is a 1 x d matrix (T = 1), so a map's jacobian() is d x d with
// entry (i, j) = d y_i / d x_j. The lesson writes δx_L = δx_0 ∏ J_l on row vectors; here the same
// product reads P_L = J_L ⋯ J_1 on columns, with the same singular values.
#pragma once

#include <Eigen/SVD>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "resnorm/gelu.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/linear.hpp"
#include "resnorm/matrix.hpp"
#include "resnorm/post_ln_block.hpp"
#include "resnorm/pre_ln_block.hpp"
#include "resnorm/random.hpp"
#include "resnorm/residual.hpp"
#include "resnorm/sequential.hpp"
#include "resnorm/transformer_stack.hpp"

namespace depth_study {

using mat = resnorm::matrix<double>;
using series = std::vector<double>;

// f(x) = GELU(x W): the lesson's random sublayer.
using gelu_sublayer = resnorm::sequential<resnorm::linear<double>, resnorm::gelu<double>>;
// f(x) = GELU(x W) − c: exercise 5's zero-mean sublayer (identity weight, bias −c).
using shifted_gelu_sublayer = resnorm::sequential<gelu_sublayer, resnorm::linear<double>>;

// GELU'(0): the small-signal gain of a GELU stage.
inline constexpr double gelu_gain_at_zero = 0.5;
// E[GELU(z)] for z ~ N(0, 1) = E[z Φ(z)] = E[φ(z)] (Stein) = 1/(2√π) ≈ 0.2821.
inline constexpr double gelu_mean_standard_normal = 0.5 * std::numbers::inv_sqrtpi;  // 1/(2√π)

inline gelu_sublayer make_gelu_sublayer(mat w) {
  return gelu_sublayer(resnorm::linear<double>(std::move(w)), resnorm::gelu<double>());
}

inline shifted_gelu_sublayer make_shifted_gelu_sublayer(mat w, double shift) {
  const resnorm::index d = w.cols();
  return shifted_gelu_sublayer(
      make_gelu_sublayer(std::move(w)),
      resnorm::linear<double>(mat::Identity(d, d), resnorm::vector<double>::Constant(d, -shift)));
}

// W = randn(d, d) / √d: norm-preserving on average (E|x W|² = |x|²).
inline mat random_weight(int d, resnorm::normal_generator& rng) {
  return resnorm::random_normal<double>(d, d, rng, 1.0 / std::sqrt(double(d)));
}

// Singular values, largest first.
inline Eigen::VectorXd singular_values(const mat& m) {
  return Eigen::JacobiSVD<Eigen::MatrixXd>(Eigen::MatrixXd(m)).singularValues();
}

// Σ log(v) / n, exponentiated.
inline double geometric_mean(const series& v) {
  double s = 0;
  for (const double x : v) s += std::log(x);
  return std::exp(s / double(v.size()));
}

// Least-squares slope of y against x.
inline double fitted_slope(const series& x, const series& y) {
  const double n = double(x.size());
  double mx = 0, my = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    mx += x[k] / n;
    my += y[k] / n;
  }
  double sxy = 0, sxx = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    sxy += (x[k] - mx) * (y[k] - my);
    sxx += (x[k] - mx) * (x[k] - mx);
  }
  return sxy / sxx;
}

// ================================================================================================
// 1. Magnitude vs depth: x <- f(x), x <- x + 0.1 f(x), x <- x + f(x), f = GELU(x W_l).
// ================================================================================================

struct magnitude_result {
  int d = 0, layers = 0;
  double h_small = 0, h_large = 0;
  series no_residual, residual_small, residual_large;  // |x_l|, l = 0..layers
  series ratio;                                        // |x_{l+1}| / |x_l| without residual
  double geometric_mean_ratio = 0;                     // → GELU'(0) = 1/2
  double log2_total_ratio = 0;                         // log2(|x_L| / |x_0|) without residual
};

inline magnitude_result magnitude_vs_depth(std::uint64_t seed, int d = 32, int layers = 24,
                                           double h_small = 0.1, double h_large = 1.0) {
  resnorm::normal_generator rng(seed);
  std::vector<mat> weights;
  for (int l = 0; l < layers; ++l) weights.push_back(random_weight(d, rng));
  const mat x0 = resnorm::random_normal<double>(1, d, rng);

  magnitude_result r{d, layers, h_small, h_large, {}, {}, {}, {}, 0, 0};
  mat plain = x0, small = x0, large = x0;
  r.no_residual.push_back(x0.norm());
  r.residual_small.push_back(x0.norm());
  r.residual_large.push_back(x0.norm());
  for (int l = 0; l < layers; ++l) {
    const gelu_sublayer f = make_gelu_sublayer(weights[l]);
    plain = f.forward(plain);
    small = resnorm::residual<gelu_sublayer>(f, h_small).forward(small);
    large = resnorm::residual<gelu_sublayer>(f, h_large).forward(large);
    r.no_residual.push_back(plain.norm());
    r.residual_small.push_back(small.norm());
    r.residual_large.push_back(large.norm());
    r.ratio.push_back(r.no_residual[l + 1] / r.no_residual[l]);
  }
  r.geometric_mean_ratio = geometric_mean(r.ratio);
  r.log2_total_ratio = std::log2(r.no_residual.back() / r.no_residual.front());
  return r;
}

// ================================================================================================
// 2. Jacobian product: σ_max, σ_min of J_l ⋯ J_1 vs depth, and the critical step h (exercise 3).
// ================================================================================================

struct singular_range {
  series max, min;  // per depth l = 1..layers
};

// Extreme singular values of the cumulative product of layer Jacobians along the trajectory of
// x_{l+1} = x_l + h f_l(x_l) (h = 0: the plain stack x_{l+1} = f_l(x_l)); at every depth, or only
// at the last (one SVD instead of one per layer).
inline singular_range residual_jacobian_product(const std::vector<mat>& weights, const mat& x0,
                                                double h, bool every_depth = true) {
  const resnorm::index d = x0.cols();
  singular_range r;
  mat product = mat::Identity(d, d), x = x0;
  for (const mat& w : weights) {
    const gelu_sublayer f = make_gelu_sublayer(w);
    if (h == 0) {
      product = f.jacobian(x) * product;  // J_l = diag(GELU'(x W)) Wᵀ
      x = f.forward(x);
    } else {
      const resnorm::residual<gelu_sublayer> block(f, h);
      product = block.jacobian(x) * product;  // I + h J_l
      x = block.forward(x);
    }
    if (!every_depth && &w != &weights.back()) continue;
    const Eigen::VectorXd s = singular_values(product);
    r.max.push_back(s(0));
    r.min.push_back(s(s.size() - 1));
  }
  return r;
}

struct jacobian_product_result {
  int d = 0, layers = 0;
  double h = 0;
  singular_range no_residual, residual;  // h = 0 (plain stack) and h
  double h_large = 0;
  double large_max = 0, large_min = 0;  // the 24-layer product at h_large (exercise 3)
  series sweep_h, sweep_max, sweep_min;
  double h_cross = std::numeric_limits<double>::quiet_NaN();  // first h with σ_max = 10
  double crossing_level = 10;
};

inline jacobian_product_result jacobian_product(std::uint64_t seed, int d = 32, int layers = 24,
                                                double h = 0.1, double h_large = 1.0,
                                                double sweep_lo = 0.05, double sweep_hi = 1.0,
                                                int sweep_points = 96) {
  resnorm::normal_generator rng(seed);
  std::vector<mat> weights;
  for (int l = 0; l < layers; ++l) weights.push_back(random_weight(d, rng));
  const mat x0 = resnorm::random_normal<double>(1, d, rng);

  jacobian_product_result r;
  r.d = d;
  r.layers = layers;
  r.h = h;
  r.h_large = h_large;
  r.no_residual = residual_jacobian_product(weights, x0, 0.0);
  r.residual = residual_jacobian_product(weights, x0, h);
  const singular_range large = residual_jacobian_product(weights, x0, h_large);
  r.large_max = large.max.back();
  r.large_min = large.min.back();

  for (int k = 0; k < sweep_points; ++k) {
    const double hk = sweep_lo + (sweep_hi - sweep_lo) * k / double(sweep_points - 1);
    const singular_range s = residual_jacobian_product(weights, x0, hk, false);
    r.sweep_h.push_back(hk);
    r.sweep_max.push_back(s.max.back());
    r.sweep_min.push_back(s.min.back());
  }
  // First crossing of σ_max = 10, interpolated linearly in log σ between grid points.
  for (std::size_t k = 1; k < r.sweep_h.size(); ++k) {
    const double a = std::log(r.sweep_max[k - 1]), b = std::log(r.sweep_max[k]);
    const double level = std::log(r.crossing_level);
    if (a < level && b >= level) {
      r.h_cross = r.sweep_h[k - 1] + (r.sweep_h[k] - r.sweep_h[k - 1]) * (level - a) / (b - a);
      break;
    }
  }
  return r;
}

// The GPT-2 output scaling 1/√(2N) for an N-block model.
inline double output_scale(int blocks) { return 1.0 / std::sqrt(2.0 * blocks); }

// ================================================================================================
// 3. Pre-LN vs Post-LN stream: |x_l|, and the Pre-LN stream's DC (|μ|√d) and AC parts.
// ================================================================================================

struct stream_result {
  int d = 0, layers = 0;
  double shift = 0;            // sublayer is GELU(z) − shift (exercise 5: 0.28)
  series pre_norm, post_norm;  // |x_l|, l = 0..layers
  series dc, ac;               // Pre-LN: |mean(x_l)|·√d and |x_l − mean(x_l)|
  series dc_lesson;            // the lesson's prediction dc_0 + l · mean(f_dc) · √d
  series dc_coherent;          // |mean(x_0) + l · mean(f_dc)| · √d (signed start)
  series dc_theory;            // |mean(x_0) + l · (E[GELU(z)] − shift)| · √d
  series ac_random_walk;       // √(ac_0² + l · mean |f − mean f|²)
  series f_dc;                 // per-layer mean of the written vector f
  double mean_f_dc = 0;        // → E[GELU(z)] − shift = 0.2821 − shift
  double mean_f_ac2 = 0;
  double growth_exponent = 0;  // fitted slope of log(|x_l|² − |x_0|²) against log l (Pre-LN)
};

inline stream_result stream_magnitude(std::uint64_t seed, int d = 32, int layers = 24,
                                      double shift = 0.0) {
  resnorm::normal_generator rng(seed);
  const mat x0 = resnorm::random_normal<double>(1, d, rng);
  const resnorm::layer_norm<double> norm;  // no affine: γ = 1, β = 0, ε = 1e-5
  const double root_d = std::sqrt(double(d));

  stream_result r;
  r.d = d;
  r.layers = layers;
  r.shift = shift;
  mat pre = x0, post = x0;
  auto record = [&] {
    const double mean = pre.mean();
    r.pre_norm.push_back(pre.norm());
    r.post_norm.push_back(post.norm());
    r.dc.push_back(std::abs(mean) * root_d);
    r.ac.push_back((pre.array() - mean).matrix().norm());
  };
  record();
  series f_ac2;
  for (int l = 0; l < layers; ++l) {
    const shifted_gelu_sublayer f = make_shifted_gelu_sublayer(random_weight(d, rng), shift);
    const mat next = resnorm::pre_ln_block<shifted_gelu_sublayer>(norm, f).forward(pre);
    const mat written = next - pre;  // f(LN(x))
    r.f_dc.push_back(written.mean());
    f_ac2.push_back((written.array() - written.mean()).matrix().squaredNorm());
    pre = next;
    post = resnorm::post_ln_block<shifted_gelu_sublayer>(f, norm).forward(post);
    record();
  }
  for (const double v : r.f_dc) r.mean_f_dc += v / layers;
  for (const double v : f_ac2) r.mean_f_ac2 += v / layers;
  const double mean0 = x0.mean();
  series log_l, log_growth;
  for (int l = 0; l <= layers; ++l) {
    r.dc_lesson.push_back(r.dc[0] + l * r.mean_f_dc * root_d);
    r.dc_coherent.push_back(std::abs(mean0 + l * r.mean_f_dc) * root_d);
    r.dc_theory.push_back(std::abs(mean0 + l * (gelu_mean_standard_normal - shift)) * root_d);
    r.ac_random_walk.push_back(std::sqrt(r.ac[0] * r.ac[0] + l * r.mean_f_ac2));
    const double growth = r.pre_norm[l] * r.pre_norm[l] - r.pre_norm[0] * r.pre_norm[0];
    if (l > 0 && growth > 0) {
      log_l.push_back(std::log(double(l)));
      log_growth.push_back(std::log(growth));
    }
  }
  r.growth_exponent = log_l.size() > 1 ? fitted_slope(log_l, log_growth) : 0.0;
  return r;
}

// ================================================================================================
// 4. Attention without LayerNorm: score variance and causal row entropy vs stream scale.
// ================================================================================================

// Causal softmax of one row of scores over positions 0..t, and its entropy in bits.
inline double causal_row_entropy_bits(const mat& scores, resnorm::index t) {
  const double top = scores.row(t).head(t + 1).maxCoeff();
  double z = 0;
  for (resnorm::index s = 0; s <= t; ++s) z += std::exp(scores(t, s) - top);
  double h = 0;
  for (resnorm::index s = 0; s <= t; ++s) {
    const double p = std::exp(scores(t, s) - top) / z;
    if (p > 0) h -= p * std::log2(p);
  }
  return h;
}

inline double mean_causal_entropy_bits(const mat& scores) {
  double sum = 0;
  for (resnorm::index t = 0; t < scores.rows(); ++t) sum += causal_row_entropy_bits(scores, t);
  return sum / double(scores.rows());
}

struct attention_scale_row {
  double scale = 0;
  double variance_raw = 0, variance_ln = 0;  // mean of S² over all T² scores
  double entropy_raw = 0, entropy_ln = 0;    // mean causal row entropy, bits
};

struct attention_result {
  int tokens = 0, d = 0;
  std::vector<attention_scale_row> rows;
  double max_entropy = 0;  // mean over rows of log2(t + 1): uniform causal attention
};

inline attention_result attention_without_ln(std::uint64_t seed, const series& scales,
                                             int tokens = 16, int d = 32) {
  resnorm::normal_generator rng(seed);
  const resnorm::linear<double> query(random_weight(d, rng)), key(random_weight(d, rng));
  const resnorm::layer_norm<double> norm;
  const double inv_root_d = 1.0 / std::sqrt(double(d));
  auto scores = [&](const mat& h) -> mat {
    return query.forward(h) * key.forward(h).transpose() * inv_root_d;  // T x T
  };

  attention_result r;
  r.tokens = tokens;
  r.d = d;
  for (int t = 0; t < tokens; ++t) r.max_entropy += std::log2(double(t + 1)) / tokens;
  for (const double s : scales) {
    const mat stream = resnorm::random_normal<double>(tokens, d, rng, s);
    const mat raw = scores(stream), normed = scores(norm.forward(stream));
    r.rows.push_back({s, raw.squaredNorm() / double(raw.size()),
                      normed.squaredNorm() / double(normed.size()), mean_causal_entropy_bits(raw),
                      mean_causal_entropy_bits(normed)});
  }
  return r;
}

// ================================================================================================
// 5. What LayerNorm discards: LN(x) vs LN(3x + 2); the singular values of the LN Jacobian.
// ================================================================================================

struct layer_norm_loss_result {
  int d = 0;
  double max_difference = 0;            // max |LN(x) − LN(3x + 2)|
  double predicted_max_difference = 0;  // max |x_i − μ| · |1/√(σ² + ε/9) − 1/√(σ² + ε)|
  series singular;                      // of ∂LN/∂x, largest first
  double rstd = 0;                      // 1/√(σ² + ε): the d − 2 equal singular values
  double eps_singular = 0;              // ε · rstd³: direction x̂
  int discarded = 0;                    // singular values < 1e-3
  series ln_x, ln_affine;               // LN(x), LN(3x + 2)
};

inline layer_norm_loss_result layer_norm_loss(std::uint64_t seed, int d = 6) {
  resnorm::normal_generator rng(seed);
  const mat x = resnorm::random_normal<double>(1, d, rng, 2.0, 1.0);
  const resnorm::layer_norm<double> norm;
  const mat affine = (3.0 * x.array() + 2.0).matrix();
  const mat y = norm.forward(x), y_affine = norm.forward(affine);

  layer_norm_loss_result r;
  r.d = d;
  r.max_difference = (y - y_affine).cwiseAbs().maxCoeff();
  // LN(a x + b) = (x − μ) / √(σ² + ε/a²): only ε sees the scale a.
  const double mean = x.mean();
  const double var = (x.array() - mean).square().mean();
  const double eps = norm.eps;
  r.predicted_max_difference = (x.array() - mean).abs().maxCoeff() *
                               std::abs(1 / std::sqrt(var + eps / 9) - 1 / std::sqrt(var + eps));
  const Eigen::VectorXd s = singular_values(norm.jacobian(x));
  r.singular.assign(s.data(), s.data() + s.size());
  r.rstd = 1 / std::sqrt(var + eps);
  r.eps_singular = eps * r.rstd * r.rstd * r.rstd;
  for (const double v : r.singular) r.discarded += v < 1e-3 ? 1 : 0;
  r.ln_x.assign(y.data(), y.data() + y.size());
  r.ln_affine.assign(y_affine.data(), y_affine.data() + y_affine.size());
  return r;
}

// ================================================================================================
// 6. Invertible residual: recover x from y = x + h f(x) by x <- y − h f(x).
// ================================================================================================

struct inversion_result {
  int d = 0, iterations = 0;
  double h_small = 0, h_large = 0;
  double sigma_max_w = 0;     // σ_max(W)
  double max_gelu_slope = 0;  // max GELU' on [−5, 5] (exact: GELU'(√2) ≈ 1.1289)
  double bound_small = 0, bound_large = 0;  // h · σ_max(W) · max GELU'
  series error_small, error_large;          // |x_k − x| for k = 0..iterations
};

inline inversion_result invert_residual(std::uint64_t seed, int d = 32, int iterations = 60,
                                        double h_small = 0.1, double h_large = 1.0) {
  resnorm::normal_generator rng(seed);
  const gelu_sublayer f = make_gelu_sublayer(random_weight(d, rng));
  const mat x_true = resnorm::random_normal<double>(1, d, rng);

  inversion_result r;
  r.d = d;
  r.iterations = iterations;
  r.h_small = h_small;
  r.h_large = h_large;
  r.sigma_max_w = singular_values(f.first.weight)(0);
  mat grid(1, 2001);
  for (int k = 0; k < 2001; ++k) grid(0, k) = -5.0 + 10.0 * k / 2000.0;
  r.max_gelu_slope = f.second.derivative(grid).maxCoeff();
  r.bound_small = h_small * r.sigma_max_w * r.max_gelu_slope;
  r.bound_large = h_large * r.sigma_max_w * r.max_gelu_slope;

  auto invert = [&](double h, series& error) {
    const mat y = resnorm::residual<gelu_sublayer>(f, h).forward(x_true);
    mat x = y;
    error.push_back((x - x_true).norm());
    for (int k = 0; k < iterations; ++k) {
      x = y - h * f.forward(x);  // the map x ↦ y − h f(x) has Lipschitz constant <= h Lip(f)
      error.push_back((x - x_true).norm());
    }
  };
  invert(h_small, r.error_small);
  invert(h_large, r.error_large);
  return r;
}

// ================================================================================================
// 7. Exercise 4: the Post-LN gradient path vs the Pre-LN one, singular values vs depth.
// ================================================================================================

struct ln_path_result {
  int d = 0, layers = 0;
  singular_range pre, post;
  series post_second_smallest;  // Post-LN σ_{d−1}: the smallest singular value off 1's direction
};

inline ln_path_result ln_gradient_path(std::uint64_t seed, int d = 32, int layers = 24) {
  resnorm::normal_generator rng(seed);
  const mat x0 = resnorm::random_normal<double>(1, d, rng);
  const resnorm::layer_norm<double> norm;

  ln_path_result r;
  r.d = d;
  r.layers = layers;
  mat pre = x0, post = x0;
  mat product_pre = mat::Identity(d, d), product_post = mat::Identity(d, d);
  for (int l = 0; l < layers; ++l) {
    const gelu_sublayer f = make_gelu_sublayer(random_weight(d, rng));
    const resnorm::pre_ln_block<gelu_sublayer> pre_block(norm, f);
    const resnorm::post_ln_block<gelu_sublayer> post_block(f, norm);
    product_pre = pre_block.jacobian(pre) * product_pre;      // I + J_F J_LN
    product_post = post_block.jacobian(post) * product_post;  // J_LN(z) (I + J_F)
    pre = pre_block.forward(pre);
    post = post_block.forward(post);
    const Eigen::VectorXd sp = singular_values(product_pre), sq = singular_values(product_post);
    r.pre.max.push_back(sp(0));
    r.pre.min.push_back(sp(d - 1));
    r.post.max.push_back(sq(0));
    r.post.min.push_back(sq(d - 1));
    r.post_second_smallest.push_back(sq(d - 2));
  }
  return r;
}

// ================================================================================================
// 8. Xiong et al. 2020 at initialisation: per-layer gradient norms of real transformer stacks.
// ================================================================================================
//
// Theorem 1 (Xiong et al. 2020), at initialisation: the gradient of the last layer's FFN output
// weight W2 is bounded by O(d sqrt(ln d)) for Post-LN, independently of N, and by
// O(d sqrt(ln d / N)) for Pre-LN (whose final LN divides by a stream that grows as sqrt(N)).
// Loss: L = <G, out> with G ~ N(0, 1), T x d, so dL/d out = G at every depth.

enum class stack_init { xavier, own };  // the paper's Xavier (no 1/sqrt(2N)), or the stack's

inline const char* to_string(stack_init i) { return i == stack_init::xavier ? "Xavier" : "own"; }

struct xiong_config {
  int d = 64, heads = 4, tokens = 16;
  std::vector<int> depths{6, 12, 24};
  int first_seed = 1, seeds = 8;  // gradient norms averaged over seeds first_seed, ... + seeds − 1
};

struct xiong_profile {
  int layers = 0;
  series w2;     // mean over seeds of |dL/dW2| of layer l = 1..N
  series input;  // mean over seeds of |dL/dx_l|, the gradient reaching layer l's input
};

struct xiong_placement {
  resnorm::norm_placement placement = resnorm::norm_placement::pre_ln;
  std::vector<xiong_profile> profiles;  // one per depth
  series last_w2;                       // mean |dL/dW2| of the last layer, per depth
  double slope = 0;                     // fitted d log(last_w2) / d log N
};

struct xiong_result {
  xiong_config config;
  stack_init init = stack_init::xavier;
  xiong_placement pre, post;
};

inline resnorm::transformer_init make_init(stack_init i) {
  return i == stack_init::xavier ? resnorm::transformer_init::xavier()
                                 : resnorm::transformer_init{};
}

// One stack of N layers at one seed: |dW2| and |dx_l| per layer.
inline std::vector<resnorm::layer_gradient_norms> stack_gradient_norms(
    resnorm::norm_placement where, stack_init init, const xiong_config& c, int layers,
    std::uint64_t seed) {
  resnorm::transformer_config config;
  config.dim = c.d;
  config.heads = c.heads;
  config.layers = layers;
  const resnorm::transformer_stack<double> stack(config, resnorm::uniform_placements(layers, where),
                                                 seed, make_init(init));
  // Input and loss direction from a generator of their own, so that they do not depend on N.
  resnorm::normal_generator rng(seed + 0x9e3779b97f4a7c15ULL);
  const mat x = resnorm::random_normal<double>(c.tokens, c.d, rng);
  const mat g = resnorm::random_normal<double>(c.tokens, c.d, rng);
  return resnorm::gradient_norms(stack.vjp(x, g));
}

inline xiong_placement xiong_profiles(resnorm::norm_placement where, stack_init init,
                                      const xiong_config& c) {
  xiong_placement r;
  r.placement = where;
  series log_n, log_w2;
  for (const int n : c.depths) {
    xiong_profile p{n, series(n, 0.0), series(n, 0.0)};
    for (int seed = c.first_seed; seed < c.first_seed + c.seeds; ++seed) {
      const auto norms = stack_gradient_norms(where, init, c, n, std::uint64_t(seed));
      for (int l = 0; l < n; ++l) {
        p.w2[l] += norms[l].ffn_dw2 / c.seeds;
        p.input[l] += norms[l].dx / c.seeds;
      }
    }
    r.last_w2.push_back(p.w2.back());
    log_n.push_back(std::log(double(n)));
    log_w2.push_back(std::log(p.w2.back()));
    r.profiles.push_back(std::move(p));
  }
  r.slope = fitted_slope(log_n, log_w2);
  return r;
}

inline xiong_result xiong_gradients(stack_init init, const xiong_config& c = {}) {
  return {c, init, xiong_profiles(resnorm::norm_placement::pre_ln, init, c),
          xiong_profiles(resnorm::norm_placement::post_ln, init, c)};
}

// Last layer's |dW2| over the first layer's, for the deepest stack: > 1 grows toward the output.
inline double output_to_input_ratio(const xiong_placement& p) {
  const series& w2 = p.profiles.back().w2;
  return w2.back() / w2.front();
}

}  // namespace depth_study
