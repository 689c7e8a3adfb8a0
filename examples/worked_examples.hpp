// examples/worked_examples.hpp — the worked examples of the source texts, computed with resnorm.
//
// Ex 1–8 of "Residual connections and layer norm placement: Worked examples" and the lesson's
// LayerNorm by hand. Each function builds the example's model from resnorm's primitives and
// returns what it computed; worked_examples.cpp prints it beside the text's numbers and
// tests/worked_examples_test.cpp checks it against values derived by hand.
#pragma once

#include <Eigen/SVD>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <resnorm/resnorm.hpp>

namespace worked {

using resnorm::index;
using resnorm::matrix;
using resnorm::vector;

inline matrix<double> row(std::initializer_list<double> values) {
  matrix<double> m(1, static_cast<index>(values.size()));
  index j = 0;
  for (double v : values) m(0, j++) = v;
  return m;
}

// A sublayer that returns a fixed vector whatever its input: Linear with W = 0 and bias c.
// Its Jacobian is 0, which is what the examples mean by "suppose the sublayer returns c".
inline resnorm::linear<double> constant_sublayer(const matrix<double>& c) {
  return resnorm::linear<double>(matrix<double>::Zero(c.cols(), c.cols()), c.row(0).transpose());
}

// The identity sublayer F(u) = u: Linear with W = I and no bias.
inline resnorm::linear<double> identity_sublayer(index d) {
  return resnorm::linear<double>(matrix<double>::Identity(d, d));
}

// ---- Ex 1: Post-LN forward, x = (1, 3, 5, 7), F(x) = (1, -1, 1, -1), gamma 1, beta 0, eps 0 --

struct ex1_result {
  matrix<double> z;  // x + F(x)
  double mean, variance;
  matrix<double> y;  // LN(z)
};

inline ex1_result ex1() {
  const matrix<double> x = row({1, 3, 5, 7});
  const resnorm::post_ln_block<resnorm::linear<double>> block(
      constant_sublayer(row({1, -1, 1, -1})), resnorm::layer_norm<double>(4, 0.0));
  const matrix<double> z = x + block.sublayer.forward(x);
  const auto stats = block.norm.stats_of(z);
  return {z, stats.mean[0], 1.0 / (stats.rstd[0] * stats.rstd[0]), block.forward(x)};
}

// ---- Ex 2: Pre-LN forward, same x, identity sublayer, eps 0 --------------------------------

struct ex2_result {
  matrix<double> normalised;  // LN(x)
  matrix<double> y;           // x + F(LN(x))
  double output_mean;
};

inline ex2_result ex2() {
  const matrix<double> x = row({1, 3, 5, 7});
  const resnorm::pre_ln_block<resnorm::linear<double>> block(resnorm::layer_norm<double>(4, 0.0),
                                                             identity_sublayer(4));
  const matrix<double> y = block.forward(x);
  return {block.norm.forward(x), y, y.mean()};
}

// ---- Ex 3: LN of a constant row, eps = 0 and eps = 1e-5 -------------------------------------

struct ex3_result {
  matrix<double> y_eps0;   // NaN: 0 / 0
  matrix<double> y_eps;    // 0
  double denominator_eps;  // sqrt(0 + 1e-5)
};

inline ex3_result ex3() {
  const matrix<double> x = row({5, 5, 5, 5});
  const resnorm::layer_norm<double> ln0(4, 0.0), ln(4, 1e-5);
  return {ln0.forward(x), ln.forward(x), 1.0 / ln.stats_of(x).rstd[0]};
}

// ---- Ex 4: a huge sublayer output at initialisation, x = 0, eps = 1e-5 ----------------------
//
// Post-LN: F(0) = (100, -100, 100, -100), so z = F(0) and LN divides it back to ±1; the gradient
// factor is read off the block's analytic Jacobian J_LN(z)(I + J_F): its largest singular value.
// Pre-LN: F is a zero-bias FFN with huge random weights, F(u) = GELU(u W1) W2. LN(0) = 0, so
// F(0) = 0 and the output stays 0; the block's Jacobian is I + J_F(0) J_LN(0).

struct ex4_result {
  matrix<double> post_y;
  double post_gradient_factor;  // sigma_max of the Post-LN block Jacobian
  double post_expected_factor;  // 1 / sqrt(sigma^2 + eps) of z
  matrix<double> pre_y;
  matrix<double> pre_branch_input;  // LN(0)
};

using ffn =
    resnorm::sequential<resnorm::linear<double>,
                        resnorm::sequential<resnorm::gelu<double>, resnorm::linear<double>>>;

inline ffn zero_bias_ffn(index d, double weight_scale, std::uint64_t seed) {
  resnorm::normal_generator rng(seed);
  return ffn(resnorm::linear<double>(resnorm::random_normal<double>(d, 4 * d, rng, weight_scale)),
             {resnorm::gelu<double>(), resnorm::linear<double>(resnorm::random_normal<double>(
                                           4 * d, d, rng, weight_scale))});
}

inline ex4_result ex4() {
  const matrix<double> x = matrix<double>::Zero(1, 4);
  const resnorm::post_ln_block<resnorm::linear<double>> post(
      constant_sublayer(row({100, -100, 100, -100})), resnorm::layer_norm<double>(4, 1e-5));
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(post.jacobian(x));
  const matrix<double> z = x + post.sublayer.forward(x);

  const resnorm::pre_ln_block<ffn> pre(resnorm::layer_norm<double>(4, 1e-5),
                                       zero_bias_ffn(4, 100.0, 4));
  return {post.forward(x), svd.singularValues()(0), post.norm.stats_of(z).rstd[0], pre.forward(x),
          pre.norm.forward(x)};
}

// ---- Ex 5 and Ex 7: the "+1" highway, chained layer by layer --------------------------------
//
// Pre-LN toy layer: x <- x + F(x), F(x) = 0.3 x (a residual around a 1x1 Linear), derivative 1.3.
// Post-LN toy layer: the same, then the text's toy normaliser that scales by 1/sigma = 0.5
// (a 1x1 Linear of weight 0.5), derivative 0.65. The product of the layers' Jacobians, each
// evaluated at that layer's own input, is the end-to-end derivative.

using toy_pre_layer = resnorm::residual<resnorm::linear<double>>;
using toy_post_layer = resnorm::sequential<toy_pre_layer, resnorm::linear<double>>;

inline toy_pre_layer toy_pre() {
  return toy_pre_layer(resnorm::linear<double>(matrix<double>::Constant(1, 1, 0.3)));
}

inline toy_post_layer toy_post() {
  return toy_post_layer(toy_pre(), resnorm::linear<double>(matrix<double>::Constant(1, 1, 0.5)));
}

template <class Layer>
double chained_derivative(const Layer& layer, int layers, double x0) {
  matrix<double> x = matrix<double>::Constant(1, 1, x0);
  matrix<double> product = matrix<double>::Identity(1, 1);
  for (int l = 0; l < layers; ++l) {
    product = layer.jacobian(x) * product;  // J_l · ... · J_1
    x = layer.forward(x);
  }
  return product(0, 0);
}

struct ex5_result {
  double pre_layer, post_layer;  // one layer's derivative
  double pre_10, post_10;        // ten layers
  double shrink_10;              // 1 / post_10: the text's "shrinks ~74x"
};

inline ex5_result ex5() {
  const toy_pre_layer pre = toy_pre();
  const toy_post_layer post = toy_post();
  const double pre_10 = chained_derivative(pre, 10, 1.0);
  const double post_10 = chained_derivative(post, 10, 1.0);
  return {chained_derivative(pre, 1, 1.0), chained_derivative(post, 1, 1.0), pre_10, post_10,
          1.0 / post_10};
}

inline double ex7_post_96() { return chained_derivative(toy_post(), 96, 1.0); }

// ---- Ex 6: variance of a Pre-LN stream after N independent unit-variance writes ------------
//
// Independent streams of d = 64 features, each a 1 x d row through N residual layers whose
// branch writes a fresh N(0, v) vector (a Linear with W = 0 and a random bias). After N layers
// the sample variance over all streams' features estimates Var(x_N) = N v. At least `samples`
// values are drawn (rounded up to whole streams).

inline double ex6_stream_variance(int layers, index samples, double v, std::uint64_t seed) {
  constexpr index d = 64;
  const index streams = (samples + d - 1) / d;
  resnorm::normal_generator rng(seed);
  double sum = 0, sum_of_squares = 0;
  for (index s = 0; s < streams; ++s) {
    matrix<double> x = matrix<double>::Zero(1, d);
    for (int l = 0; l < layers; ++l) {
      const matrix<double> write = resnorm::random_normal<double>(1, d, rng, std::sqrt(v));
      const resnorm::residual<resnorm::linear<double>> layer(constant_sublayer(write));
      x = layer.forward(x);
    }
    sum += x.sum();
    sum_of_squares += x.squaredNorm();
  }
  const double n = static_cast<double>(streams * d);
  return (sum_of_squares - sum * sum / n) / (n - 1);
}

// ---- Ex 8: gamma = 2, beta = 1, eps = 0 on x = (-2, 0, 2, 4) --------------------------------

struct ex8_result {
  matrix<double> y;
  double output_mean, output_variance;
};

inline ex8_result ex8() {
  const resnorm::layer_norm<double> ln(vector<double>::Constant(4, 2.0),
                                       vector<double>::Constant(4, 1.0), 0.0);
  const matrix<double> y = ln.forward(row({-2, 0, 2, 4}));
  const double mean = y.mean();
  return {y, mean, (y.array() - mean).square().mean()};
}

// ---- The overview's LN Jacobian formula, as printed ----------------------------------------
//
// The overview writes dLN_i/dz_j = (gamma/sigma)(delta_ij − 1/d − (z_i − mu)(z_j − mu)/sigma²);
// the last term lacks a factor 1/d. Returned here as printed (gamma = 1, eps = 0) so that it can
// be set beside the analytic Jacobian and finite differences.

inline matrix<double> overview_ln_jacobian_as_printed(const matrix<double>& z) {
  const index d = z.cols();
  const double mu = z.mean();
  const double var = (z.array() - mu).square().mean();
  const double sigma = std::sqrt(var);
  matrix<double> J(d, d);
  for (index i = 0; i < d; ++i) {
    for (index j = 0; j < d; ++j) {
      J(i, j) = ((i == j ? 1.0 : 0.0) - 1.0 / static_cast<double>(d) -
                 (z(0, i) - mu) * (z(0, j) - mu) / var) /
                sigma;
    }
  }
  return J;
}

// ---- The lesson's LayerNorm by hand: v = (1, 2, 3, 4, 5), eps = 1e-5 ------------------------

struct lesson_ln_result {
  matrix<double> y;
  double output_mean, output_std;
};

inline lesson_ln_result lesson_ln() {
  const resnorm::layer_norm<double> ln(5);
  const matrix<double> y = ln.forward(row({1, 2, 3, 4, 5}));
  const double mean = y.mean();
  return {y, mean, std::sqrt((y.array() - mean).square().mean())};
}

}  // namespace worked
