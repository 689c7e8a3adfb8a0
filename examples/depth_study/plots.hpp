// plots.hpp — one svg_plot per figure of the depth study, built from the experiments' results.
//
// Each function only arranges series; the numbers come from experiments.hpp. The program writes
// the plots to <out_dir>/<name>.svg; the tests write them to a scratch folder and check them.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "experiments.hpp"
#include "svg_plot.hpp"

namespace depth_study {

// 0, 1, ..., n − 1 (+ offset).
inline series range_series(std::size_t n, double offset = 0) {
  series v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = double(k) + offset;
  return v;
}

inline std::string fixed(double v, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
  return buffer;
}

inline svg_plot plot_magnitude(const magnitude_result& r) {
  svg_plot p("Activation magnitude vs depth (" + std::to_string(r.layers) +
                 " random GELU sublayers, d = " + std::to_string(r.d) + ")",
             "layer index l", "|x_l| (log scale)");
  p.log_y = true;
  const series l = range_series(r.no_residual.size());
  p.add({"no residual: x <- f(x)", l, r.no_residual, "#d62728", "", true});
  p.add({"x <- x + " + fixed(r.h_small, 1) + " f(x)", l, r.residual_small, "#1f77b4", "", true});
  p.add({"x <- x + " + fixed(r.h_large, 1) + " f(x)", l, r.residual_large, "#2ca02c", "", true});
  series halving(l.size());
  for (std::size_t k = 0; k < l.size(); ++k) {
    halving[k] = r.no_residual.front() * std::pow(gelu_gain_at_zero, double(k));
  }
  p.add({"|x_0| (1/2)^l: gain GELU'(0)", l, halving, "#7f7f7f", "6 4", false});
  return p;
}

inline svg_plot plot_jacobian_product(const jacobian_product_result& r) {
  svg_plot p("Cumulative Jacobian product: extreme singular values vs depth", "layer index l",
             "singular value (log scale)");
  p.log_y = true;
  const series l = range_series(r.no_residual.max.size(), 1);
  const std::string h = "h = " + fixed(r.h, 1);
  p.add({"no residual: sigma_max", l, r.no_residual.max, "#d62728", "", false});
  p.add({"no residual: sigma_min", l, r.no_residual.min, "#d62728", "6 4", false});
  p.add({h + ": sigma_max", l, r.residual.max, "#1f77b4", "", false});
  p.add({h + ": sigma_min", l, r.residual.min, "#1f77b4", "6 4", false});
  p.y_references.push_back({1.0, "1", "#7f7f7f"});
  return p;
}

inline svg_plot plot_critical_step(const jacobian_product_result& r) {
  svg_plot p(
      "Exercise 3: singular values of the " + std::to_string(r.layers) + "-layer product vs step h",
      "step h", "singular value (log scale)");
  p.log_y = true;
  p.add({"sigma_max", r.sweep_h, r.sweep_max, "#1f77b4", "", false});
  p.add({"sigma_min", r.sweep_h, r.sweep_min, "#1f77b4", "6 4", false});
  p.y_references.push_back({r.crossing_level, "sigma_max = 10", "#d62728"});
  p.x_references.push_back({output_scale(12), "1/sqrt(2N), N = 12", "#2ca02c"});
  p.x_references.push_back({output_scale(48), "1/sqrt(2N), N = 48", "#ff7f0e"});
  return p;
}

inline svg_plot plot_stream(const stream_result& r) {
  svg_plot p("Residual-stream magnitude vs depth, Pre-LN vs Post-LN", "layer index l", "|x_l|");
  const series l = range_series(r.pre_norm.size());
  p.add({"Pre-LN |x_l|", l, r.pre_norm, "#1f77b4", "", true});
  p.add({"Post-LN |x_l|", l, r.post_norm, "#d62728", "", true});
  p.y_references.push_back({std::sqrt(double(r.d)), "sqrt(d)", "#7f7f7f"});
  return p;
}

inline svg_plot plot_stream_split(const stream_result& r, const std::string& title) {
  svg_plot p(title, "layer index l", "norm of the part");
  const series l = range_series(r.dc.size());
  p.add({"DC part |mu| sqrt(d) (measured)", l, r.dc, "#ff7f0e", "", true});
  p.add({"coherent: linear in l", l, r.dc_coherent, "#ff7f0e", "6 4", false});
  p.add({"coherent, E[f] from theory", l, r.dc_theory, "#8c564b", "2 2", false});
  p.add({"AC part (measured)", l, r.ac, "#1f77b4", "", true});
  p.add({"random walk: sqrt(l)", l, r.ac_random_walk, "#1f77b4", "6 4", false});
  return p;
}

inline svg_plot plot_attention_variance(const attention_result& r) {
  svg_plot p("Attention score variance vs stream scale (T = " + std::to_string(r.tokens) +
                 ", d = " + std::to_string(r.d) + ")",
             "stream scale s", "mean of S^2 (log scale)");
  p.log_x = true;
  p.log_y = true;
  series s, raw, ln, fourth;
  for (const auto& row : r.rows) {
    s.push_back(row.scale);
    raw.push_back(row.variance_raw);
    ln.push_back(row.variance_ln);
    fourth.push_back(std::pow(row.scale, 4));
  }
  p.add({"without LN", s, raw, "#d62728", "", true});
  p.add({"with LN", s, ln, "#1f77b4", "", true});
  p.add({"s^4", s, fourth, "#7f7f7f", "6 4", false});
  return p;
}

inline svg_plot plot_attention_entropy(const attention_result& r) {
  svg_plot p("Mean causal row entropy vs stream scale", "stream scale s", "entropy (bits)");
  p.log_x = true;
  series s, raw, ln;
  for (const auto& row : r.rows) {
    s.push_back(row.scale);
    raw.push_back(row.entropy_raw);
    ln.push_back(row.entropy_ln);
  }
  p.add({"without LN", s, raw, "#d62728", "", true});
  p.add({"with LN", s, ln, "#1f77b4", "", true});
  p.y_references.push_back({r.max_entropy, "uniform causal rows", "#7f7f7f"});
  return p;
}

inline svg_plot plot_layer_norm_loss(const layer_norm_loss_result& r) {
  svg_plot p("Singular values of the LayerNorm Jacobian (d = " + std::to_string(r.d) + ")",
             "index (largest first)", "singular value (log scale)");
  p.log_y = true;
  // The exact zero is drawn at 1e-17, its rounding floor, so that it shows on a log axis.
  series s = r.singular;
  for (double& v : s) v = std::max(v, 1e-17);
  p.add({"sigma_i of dLN/dx", range_series(s.size(), 1), s, "#1f77b4", "", true});
  p.y_references.push_back({r.rstd, "1/sqrt(var + eps)", "#2ca02c"});
  p.y_references.push_back({r.eps_singular, "eps / (var + eps)^(3/2)", "#ff7f0e"});
  return p;
}

inline svg_plot plot_inversion(const inversion_result& r) {
  svg_plot p("Fixed-point inversion of y = x + h f(x)", "iteration k", "|x_k - x| (log scale)");
  p.log_y = true;
  const series k = range_series(r.error_small.size());
  p.add({"h = " + fixed(r.h_small, 1) + " (bound " + fixed(r.bound_small, 3) + ")", k,
         r.error_small, "#1f77b4", "", false});
  p.add({"h = " + fixed(r.h_large, 1) + " (bound " + fixed(r.bound_large, 3) + ")", k,
         r.error_large, "#d62728", "", false});
  series geometric(k.size());
  for (std::size_t j = 0; j < k.size(); ++j) {
    geometric[j] = r.error_small.front() * std::pow(r.bound_small, double(j));
  }
  p.add({"|x_0 - x| bound^k", k, geometric, "#1f77b4", "6 4", false});
  return p;
}

inline svg_plot plot_ln_gradient_path(const ln_path_result& r) {
  svg_plot p("Exercise 4: singular values of the Jacobian product, Pre-LN vs Post-LN",
             "layer index l", "singular value (log scale)");
  p.log_y = true;
  const series l = range_series(r.pre.max.size(), 1);
  series post_min = r.post.min, post_next = r.post_second_smallest;
  for (double& v : post_min) v = std::max(v, 1e-17);
  for (double& v : post_next) v = std::max(v, 1e-17);
  p.add({"Pre-LN sigma_max", l, r.pre.max, "#1f77b4", "", false});
  p.add({"Pre-LN sigma_min", l, r.pre.min, "#1f77b4", "6 4", false});
  p.add({"Post-LN sigma_max", l, r.post.max, "#d62728", "", false});
  p.add({"Post-LN sigma_(d-1)", l, post_next, "#d62728", "2 2", false});
  p.add({"Post-LN sigma_min", l, post_min, "#d62728", "6 4", false});
  p.y_references.push_back({1.0, "1", "#7f7f7f"});
  return p;
}

// Last layer's |dL/dW2| against N on log-log axes, with N^(-1/2) and N^0 through the first point.
inline svg_plot plot_xiong_last_layer(const xiong_result& xavier, const xiong_result& own) {
  svg_plot p(
      "Xiong et al.: last layer's |dL/dW2| vs depth N (d = " + std::to_string(xavier.config.d) +
          ", mean of " + std::to_string(xavier.config.seeds) + " seeds)",
      "layers N", "|dL/dW2| of the last layer");
  p.log_x = true;
  p.log_y = true;
  series n;
  for (const int v : xavier.config.depths) n.push_back(v);
  auto label = [](const char* what, const xiong_placement& r) {
    return std::string(what) + ", slope " + fixed(r.slope, 2);
  };
  p.add({label("Pre-LN, Xavier", xavier.pre), n, xavier.pre.last_w2, "#1f77b4", "", true});
  p.add({label("Post-LN, Xavier", xavier.post), n, xavier.post.last_w2, "#d62728", "", true});
  p.add({label("Pre-LN, own init", own.pre), n, own.pre.last_w2, "#1f77b4", "2 2", true});
  p.add({label("Post-LN, own init", own.post), n, own.post.last_w2, "#d62728", "2 2", true});
  series half(n.size()), flat(n.size());
  for (std::size_t k = 0; k < n.size(); ++k) {
    half[k] = xavier.pre.last_w2.front() * std::pow(n[k] / n.front(), -0.5);
    flat[k] = xavier.post.last_w2.front();
  }
  p.add({"Theorem 1, Pre-LN: N^(-1/2)", n, half, "#7f7f7f", "6 4", false});
  p.add({"Theorem 1, Post-LN: N^0", n, flat, "#7f7f7f", "2 4", false});
  return p;
}

// Per-layer |dL/dW2| (or |dL/dx_l|) of the deepest stacks.
inline svg_plot plot_xiong_profiles(const xiong_result& xavier, const xiong_result& own,
                                    bool input_gradient) {
  const int n = xavier.pre.profiles.back().layers;
  svg_plot p(std::string("Xiong et al.: ") +
                 (input_gradient ? "gradient reaching each layer's input" : "per-layer |dL/dW2|") +
                 ", N = " + std::to_string(n),
             "layer index l", input_gradient ? "|dL/dx_l| (log scale)" : "|dL/dW2| (log scale)");
  p.log_y = true;
  auto pick = [&](const xiong_placement& r) {
    return input_gradient ? r.profiles.back().input : r.profiles.back().w2;
  };
  const series l = range_series(std::size_t(n), 1);
  p.add({"Pre-LN, Xavier", l, pick(xavier.pre), "#1f77b4", "", true});
  p.add({"Post-LN, Xavier", l, pick(xavier.post), "#d62728", "", true});
  p.add({"Pre-LN, own init", l, pick(own.pre), "#1f77b4", "2 2", false});
  p.add({"Post-LN, own init", l, pick(own.post), "#d62728", "2 2", false});
  return p;
}

}  // namespace depth_study
