// The depth study's claims (examples/depth_study/experiments.hpp), each checked over several seeds
// with a tolerance from the statistics of the claim, and its SVG plots checked to be well formed.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "../examples/depth_study/experiments.hpp"
#include "../examples/depth_study/plots.hpp"
#include "../examples/depth_study/svg_plot.hpp"
#include "support/catch.hpp"

namespace {

using namespace depth_study;

// ---- Seeds and tolerances, in one place -------------------------------------------------------
//
// Seeds 1..6 for per-seed claims (each must hold on every seed), 1..8 for claims about a mean.
constexpr int per_seed_count = 6;
constexpr int mean_seed_count = 8;
// Geometric-mean per-layer ratio of the plain stack: GELU'(0) = 1/2 once the signal is small;
// the first layers (pre-activations ~ N(0, 1)) gain a little more. Spread over seeds: sd 0.02.
constexpr double ratio_lo = 0.45, ratio_hi = 0.55;
// Post-LN output norm: sqrt(d var / (var + eps)); eps/var <= 1e-4 for these unit-scale rows.
constexpr double post_ln_norm_rel = 1e-4;
// Means over mean_seed_count seeds at d = 256: the per-seed sd of DC(N)/prediction is about
// 0.04, of AC²/prediction² about 0.1, of the growth exponent about 0.06 (measured at d = 32 and
// scaled by sqrt(32/d), the 1/sqrt(d) law of the per-layer fluctuations). Tolerances are
// about 3 sd of the mean.
constexpr int stream_d = 256;
constexpr double dc_mean_tol = 0.05, ac_mean_tol = 0.12, exponent_tol = 0.15;
// Attention at T = 16, d = 32: E[S²] = s⁴ (1 + O(1/d)) raw and about 1 with LN; per-seed sd
// about 0.17, so the mean of 8 seeds is within 0.25 of 1 by > 4 sd.
constexpr double score_variance_tol = 0.25;
// Fixed-point inversion at h = 0.1 (contraction 0.22): 60 steps reach rounding level.
constexpr double inversion_error_max = 1e-12;
// Singular values from a JacobiSVD of an O(1) matrix: absolute error ~1e-16.
constexpr double singular_rel = 1e-9;
constexpr double zero_singular_max = 1e-14;
// Fitted log-log slope of the last layer's |dW2| over N = 6, 12, 24, each point a mean of 4
// seeds: the slope varies by about 0.05 between seed sets at d = 32.
constexpr double xiong_slope_tol = 0.15;

// ---- A small well-formedness check for the SVG text ------------------------------------------

struct svg_check {
  bool balanced = false;
  std::string error;
  int polylines = 0;
  std::string root;
};

// Tags balance, every '&' starts an entity, no raw '<' in text, one root element.
svg_check check_svg(const std::string& text) {
  svg_check c;
  std::vector<std::string> stack;
  int roots = 0;
  std::size_t k = 0;
  auto fail = [&](const std::string& what) {
    c.error = what + " at offset " + std::to_string(k);
    return c;
  };
  while (k < text.size()) {
    if (text[k] == '&') {
      const std::size_t end = text.find(';', k);
      if (end == std::string::npos) return fail("unterminated entity");
      const std::string entity = text.substr(k, end - k + 1);
      if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" &&
          entity != "&apos;") {
        return fail("unknown entity " + entity);
      }
      k = end + 1;
      continue;
    }
    if (text[k] == '>') return fail("raw '>' outside a tag");
    if (text[k] != '<') {
      ++k;
      continue;
    }
    if (text.compare(k, 2, "<?") == 0) {
      const std::size_t end = text.find("?>", k);
      if (end == std::string::npos) return fail("unterminated declaration");
      k = end + 2;
      continue;
    }
    if (text.compare(k, 4, "<!--") == 0) {
      const std::size_t end = text.find("-->", k);
      if (end == std::string::npos) return fail("unterminated comment");
      k = end + 3;
      continue;
    }
    // A tag: scan to its '>' outside quoted attribute values.
    std::size_t end = k + 1;
    char quote = 0;
    for (; end < text.size(); ++end) {
      if (quote) {
        if (text[end] == quote) quote = 0;
        if (text[end] == '<') return fail("raw '<' in an attribute");
      } else if (text[end] == '"' || text[end] == '\'') {
        quote = text[end];
      } else if (text[end] == '>') {
        break;
      } else if (text[end] == '<') {
        return fail("'<' inside a tag");
      }
    }
    if (end >= text.size()) return fail("unterminated tag");
    const std::string tag = text.substr(k + 1, end - k - 1);
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return fail("unexpected </" + name + ">");
      stack.pop_back();
    } else {
      const std::string name = tag.substr(0, tag.find_first_of(" \t\n/"));
      if (name.empty()) return fail("empty tag name");
      if (stack.empty()) {
        ++roots;
        c.root = name;
      }
      if (name == "polyline") ++c.polylines;
      if (tag.back() != '/') stack.push_back(name);
    }
    k = end + 1;
  }
  if (!stack.empty()) return fail("unclosed <" + stack.back() + ">");
  if (roots != 1) return fail(std::to_string(roots) + " root elements");
  c.balanced = true;
  return c;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream s;
  s << file.rdbuf();
  return s.str();
}

// Writes the plot, reads it back and checks it holds every series and legend label.
void check_written_plot(const svg_plot& plot, const std::string& name) {
  // In the working directory (the build tree under CTest), so that two build trees never write
  // the same file.
  const std::filesystem::path dir = std::filesystem::current_path() / "depth_study_test_plots";
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / (name + ".svg");
  plot.write(path);
  const std::string text = read_text(path);
  const svg_check c = check_svg(text);
  CAPTURE(name, c.error);
  CHECK(c.balanced);
  CHECK(c.root == "svg");
  CHECK(c.polylines == static_cast<int>(plot.series.size()));
  CHECK(text.find(detail::escape_xml(plot.title)) != std::string::npos);
  // The label as a text element's content. Built by appending: "literal" + std::string&& trips
  // g++ 12's -Wrestrict at -O3 (a false positive inside libstdc++'s string insert).
  const auto text_element = [](const std::string& label) {
    std::string element(">");
    element += detail::escape_xml(label);
    element += "</text>";
    return element;
  };
  for (const auto& s : plot.series) {
    CAPTURE(s.label);
    CHECK(text.find(text_element(s.label)) != std::string::npos);
  }
  for (const auto& r : plot.y_references) {
    CAPTURE(r.label);
    CHECK(text.find(text_element(r.label)) != std::string::npos);
  }
}

double mean_of(const series& v) {
  double s = 0;
  for (const double x : v) s += x / double(v.size());
  return s;
}

}  // namespace

// ================================================================================================

TEST_CASE("depth_study magnitude: the plain stack decays at GELU'(0) = 1/2 per layer",
          "[depth_study][magnitude]") {
  for (int seed = 1; seed <= per_seed_count; ++seed) {
    CAPTURE(seed);
    const magnitude_result r = magnitude_vs_depth(seed);
    REQUIRE(r.no_residual.size() == 25);
    CHECK(r.geometric_mean_ratio > ratio_lo);
    CHECK(r.geometric_mean_ratio < ratio_hi);
    // log2 of the total ratio is 24 log2 of the geometric mean, by definition.
    CHECK(r.log2_total_ratio == Approx(24 * std::log2(r.geometric_mean_ratio)).epsilon(1e-12));
    // h = 0.1: identity-dominated, the magnitude stays O(1) of where it started.
    const double small = r.residual_small.back() / r.residual_small.front();
    CHECK(small > 0.5);
    CHECK(small < 2.0);
    // h = 1: no collapse, but growth by orders of magnitude.
    CHECK(r.residual_large.back() / r.residual_large.front() > 100);
  }
}

TEST_CASE("depth_study jacobian_product: residual keeps the product conditioned; h = 1 does not",
          "[depth_study][jacobian]") {
  for (int seed = 1; seed <= per_seed_count; ++seed) {
    CAPTURE(seed);
    const jacobian_product_result r = jacobian_product(seed, 32, 24, 0.1, 1.0, 0.05, 1.0, 20);
    // Plain stack: σ_max <= Π σ_max(W_l) · max GELU' shrinks like the signal, ~2^-24.
    CHECK(r.no_residual.max.back() < 1e-4);
    // h = 0.1: both extreme singular values stay O(1) after 24 layers.
    CHECK(r.residual.min.back() > 0.4);
    CHECK(r.residual.max.back() < 4.0);
    // Exercise 3, h = 1: σ_max ~ 1e4 and a very ill-conditioned product — but not singular.
    CHECK(r.large_max > 1e3);
    CHECK(r.large_min / r.large_max < 1e-6);
    CHECK(r.large_min > 0);
    // The critical step (σ_max = 10) lies above 1/sqrt(2N) for N = 12 (0.204), hence for N = 48.
    REQUIRE(std::isfinite(r.h_cross));
    CHECK(r.h_cross > output_scale(12));
    CHECK(r.h_cross < 0.5);
  }
  CHECK(output_scale(12) == Approx(1 / std::sqrt(24.0)));
  CHECK(output_scale(48) == Approx(1 / std::sqrt(96.0)));
}

TEST_CASE("depth_study stream: Post-LN stays at sqrt(d); Pre-LN grows, DC coherently",
          "[depth_study][stream]") {
  SECTION("Post-LN renormalises every layer, Pre-LN grows") {
    for (int seed = 1; seed <= per_seed_count; ++seed) {
      CAPTURE(seed);
      const stream_result r = stream_magnitude(seed);
      for (int l = 1; l <= r.layers; ++l) {
        CAPTURE(l);
        CHECK(r.post_norm[l] == Approx(std::sqrt(32.0)).epsilon(post_ln_norm_rel));
      }
      CHECK(r.pre_norm.back() > 4 * r.pre_norm.front());
    }
  }
  SECTION("DC part is coherent (E[GELU(z)] = 1/(2 sqrt(pi)) per layer), AC a random walk") {
    series dc_ratio, ac_ratio2, f_dc, exponent;
    for (int seed = 1; seed <= mean_seed_count; ++seed) {
      const stream_result r = stream_magnitude(seed, stream_d, 24);
      dc_ratio.push_back(r.dc.back() / r.dc_theory.back());
      ac_ratio2.push_back(r.ac.back() * r.ac.back() /
                          (r.ac_random_walk.back() * r.ac_random_walk.back()));
      f_dc.push_back(r.mean_f_dc);
      exponent.push_back(r.growth_exponent);
    }
    CHECK(gelu_mean_standard_normal == Approx(0.28209479177387814));  // 1/(2 sqrt(pi))
    CHECK(mean_of(f_dc) == Approx(gelu_mean_standard_normal).margin(0.02));
    CHECK(mean_of(dc_ratio) == Approx(1).margin(dc_mean_tol));
    CHECK(mean_of(ac_ratio2) == Approx(1).margin(ac_mean_tol));
    // |x_l|² − |x_0|² grows faster than l (the DC part goes as l², the AC part as l).
    CHECK(mean_of(exponent) > 1.4);
  }
  SECTION("exercise 5: zero-mean sublayers leave a random walk, |x_l|² − |x_0|² ~ l") {
    series exponent, f_dc;
    for (int seed = 1; seed <= mean_seed_count; ++seed) {
      const stream_result r = stream_magnitude(seed, stream_d, 24, 0.28);
      exponent.push_back(r.growth_exponent);
      f_dc.push_back(r.mean_f_dc);
      CHECK(r.pre_norm.back() > 2 * r.pre_norm.front());  // still grows: the final LN is needed
    }
    CHECK(mean_of(f_dc) == Approx(gelu_mean_standard_normal - 0.28).margin(0.02));
    CHECK(mean_of(exponent) == Approx(1).margin(exponent_tol));
  }
  SECTION("the lesson's DC prediction needs a signed start") {
    // |μ_0 + l m| √d and |μ_0| √d + l m √d agree iff μ_0 and m have the same sign. Find a seed with
    // μ_0 < 0 among the first few and check the lesson's form misses where the signed one holds.
    bool found = false;
    for (int seed = 1; seed <= 16 && !found; ++seed) {
      const stream_result r = stream_magnitude(seed);
      if (r.dc_lesson.back() - r.dc_coherent.back() > 1e-9 * r.dc.back()) {
        found = true;
        CAPTURE(seed);
        CHECK(r.dc.back() == Approx(r.dc_coherent.back()).epsilon(1e-12));
        CHECK(r.dc.back() < r.dc_lesson.back());
      }
    }
    CHECK(found);
  }
}

TEST_CASE("depth_study attention: without LN the scores scale as s^4 and the rows collapse",
          "[depth_study][attention]") {
  SECTION("entropy with LN > 2 bits at every scale, without LN at s = 16 < 0.1 bits") {
    for (int seed = 1; seed <= per_seed_count; ++seed) {
      CAPTURE(seed);
      const attention_result r = attention_without_ln(seed, {1, 4, 16});
      for (const auto& row : r.rows) {
        CAPTURE(row.scale);
        CHECK(row.entropy_ln > 2.0);
        CHECK(row.entropy_ln <= r.max_entropy + 1e-12);
      }
      CHECK(r.rows[2].entropy_raw < 0.1);
    }
  }
  SECTION("E[S²] = s⁴ without LN and about 1 with LN, averaged over seeds") {
    const series scales{1, 4, 16};
    series raw[3], ln[3];
    for (int seed = 1; seed <= mean_seed_count; ++seed) {
      const attention_result r = attention_without_ln(seed, scales);
      for (int k = 0; k < 3; ++k) {
        raw[k].push_back(r.rows[k].variance_raw / std::pow(scales[k], 4));
        ln[k].push_back(r.rows[k].variance_ln);
      }
    }
    for (int k = 0; k < 3; ++k) {
      CAPTURE(scales[k]);
      CHECK(mean_of(raw[k]) == Approx(1).margin(score_variance_tol));
      CHECK(mean_of(ln[k]) == Approx(1).margin(score_variance_tol));
    }
  }
  SECTION("entropy of uniform causal rows is log2(t + 1); the mean is log2(16!)/16") {
    const mat zeros = mat::Zero(16, 16);
    for (resnorm::index t = 0; t < 16; ++t) {
      CHECK(causal_row_entropy_bits(zeros, t) == Approx(std::log2(double(t + 1))).margin(1e-12));
    }
    const double expected = std::lgamma(17.0) / std::numbers::ln2 / 16;
    CHECK(attention_without_ln(1, {1}).max_entropy == Approx(expected).epsilon(1e-12));
  }
}

TEST_CASE("depth_study layer_norm: LN discards the row mean and the row scale",
          "[depth_study][layer_norm]") {
  for (const int d : {3, 6, 32}) {
    for (int seed = 1; seed <= per_seed_count; ++seed) {
      CAPTURE(d, seed);
      const layer_norm_loss_result r = layer_norm_loss(seed, d);
      // LN(3x + 2) = (x − μ)/sqrt(σ² + ε/9): differs from LN(x) only through ε.
      CHECK(r.max_difference == Approx(r.predicted_max_difference).epsilon(1e-6));
      CHECK(r.max_difference > 0);
      REQUIRE(static_cast<int>(r.singular.size()) == d);
      for (int i = 0; i < d - 2; ++i) CHECK(r.singular[i] == Approx(r.rstd).epsilon(singular_rel));
      CHECK(r.singular[d - 2] == Approx(r.eps_singular).epsilon(1e-6));
      CHECK(r.singular[d - 1] < zero_singular_max);
      CHECK(r.discarded == 2);
    }
  }
}

TEST_CASE("depth_study inversion: a contracting residual is inverted to machine precision",
          "[depth_study][inversion]") {
  // max GELU' = GELU'(√2) = Φ(√2) + √2 φ(√2), where GELU'' = φ (2 − x²) vanishes.
  const double exact_max_slope = 0.5 * std::erfc(-1.0) + std::numbers::sqrt2 * std::exp(-1.0) /
                                                             std::sqrt(2 * std::numbers::pi);
  for (int seed = 1; seed <= per_seed_count; ++seed) {
    CAPTURE(seed);
    const inversion_result r = invert_residual(seed);
    CHECK(r.max_gelu_slope == Approx(exact_max_slope).epsilon(1e-5));
    CHECK(r.bound_small < 1);
    CHECK(r.bound_large > 1);
    CHECK(r.error_small.back() < inversion_error_max);
    // Banach: each step shrinks the error by at least the contraction bound.
    for (std::size_t k = 1; k < r.error_small.size(); ++k) {
      if (r.error_small[k - 1] < 1e-14) break;
      CAPTURE(k);
      CHECK(r.error_small[k] <= r.bound_small * r.error_small[k - 1]);
    }
  }
}

TEST_CASE("depth_study ln_gradient_path: Post-LN's product loses 2 directions, Pre-LN's none",
          "[depth_study][gradient_path]") {
  for (int seed = 1; seed <= per_seed_count; ++seed) {
    CAPTURE(seed);
    const ln_path_result r = ln_gradient_path(seed);
    for (int l = 0; l < r.layers; ++l) {
      CAPTURE(l + 1);
      // 1ᵀ J_LN = 0 for every LN on the path: exactly singular.
      CHECK(r.post.min[l] < 1e-12 * r.post.max[l]);
      // The row-scale direction too, once two LNs are composed.
      if (l >= 2) CHECK(r.post_second_smallest[l] < 1e-9 * r.post.max[l]);
      CHECK(r.pre.min[l] > 1e-3);
    }
    // Measured direction: the Pre-LN product's σ_max grows with depth.
    CHECK(r.pre.max.back() > 2 * r.pre.max.front());
  }
}

TEST_CASE("depth_study svg_plot: well-formed, one polyline per series, every label",
          "[depth_study][svg]") {
  SECTION("a hand-made plot with characters that need escaping") {
    svg_plot p("a < b & \"c\"", "x > 0", "y");
    p.log_y = true;
    p.add({"first & <one>", {1, 2, 3}, {1e-3, 1, 1e3}, "", "", true});
    p.add({"second", {1, 2, 3}, {0, -1, 5}, "", "6 4", false});  // two points undrawable on log
    p.add({"empty", {}, {}, "", "", false});
    p.y_references.push_back({10, "ten", "#888888"});
    p.x_references.push_back({2, "x = 2", "#888888"});
    const svg_check c = check_svg(p.render());
    CAPTURE(c.error);
    CHECK(c.balanced);
    CHECK(c.polylines == 3);
    check_written_plot(p, "hand_made");
    CHECK_THROWS_AS(p.add({"bad", {1, 2}, {1}, "", "", false}), std::invalid_argument);
  }
  SECTION("the checker rejects broken text") {
    CHECK_FALSE(check_svg("<svg><g></svg>").balanced);
    CHECK_FALSE(check_svg("<svg>a & b</svg>").balanced);
    CHECK_FALSE(check_svg("<svg/><svg/>").balanced);
    CHECK(check_svg("<?xml version=\"1.0\"?><svg><g/></svg>").balanced);
  }
  SECTION("every plot of the study") {
    check_written_plot(plot_magnitude(magnitude_vs_depth(1)), "magnitude");
    const jacobian_product_result j = jacobian_product(1, 32, 24, 0.1, 1.0, 0.05, 1.0, 12);
    check_written_plot(plot_jacobian_product(j), "jacobian_product");
    check_written_plot(plot_critical_step(j), "critical_step");
    const stream_result s = stream_magnitude(1);
    check_written_plot(plot_stream(s), "stream");
    check_written_plot(plot_stream_split(s, "split"), "stream_split");
    const attention_result a = attention_without_ln(1, {1, 4, 16});
    check_written_plot(plot_attention_variance(a), "attention_variance");
    check_written_plot(plot_attention_entropy(a), "attention_entropy");
    check_written_plot(plot_layer_norm_loss(layer_norm_loss(1)), "layer_norm_jacobian");
    check_written_plot(plot_inversion(invert_residual(1)), "invertible_residual");
    check_written_plot(plot_ln_gradient_path(ln_gradient_path(1, 16, 6)), "ln_gradient_path");
  }
}

TEST_CASE("depth_study xiong: last-layer |dW2| scales as N^(-1/2) for Pre-LN, N^0 for Post-LN",
          "[depth_study][xiong]") {
  // Xavier initialisation as the paper, d = 32, T = 8, N = 6, 12, 24; means over 4 seeds. Two
  // disjoint seed sets, so the slope is not a property of one draw.
  xiong_config c;
  c.d = 32;
  c.tokens = 8;
  c.seeds = 4;
  for (const int first_seed : {1, 5}) {
    c.first_seed = first_seed;
    CAPTURE(first_seed);
    const xiong_result r = xiong_gradients(stack_init::xavier, c);
    CHECK(r.pre.slope == Approx(-0.5).margin(xiong_slope_tol));
    CHECK(r.post.slope == Approx(0.0).margin(xiong_slope_tol));
    // Profiles, in the direction measured: Pre-LN's |dW2| falls toward the output (not flat),
    // and Post-LN's profile rises relative to Pre-LN's.
    CHECK(output_to_input_ratio(r.pre) < 0.5);
    CHECK(output_to_input_ratio(r.post) > 2 * output_to_input_ratio(r.pre));
  }
  SECTION("with the stack's own small initialisation the stream barely grows: no N dependence") {
    c.first_seed = 1;
    const xiong_result r = xiong_gradients(stack_init::own, c);
    CHECK(r.pre.slope == Approx(0.0).margin(xiong_slope_tol));
    CHECK(r.post.slope == Approx(0.0).margin(xiong_slope_tol));
  }
  SECTION("plots") {
    c.depths = {2, 4};
    c.seeds = 1;
    const xiong_result x = xiong_gradients(stack_init::xavier, c);
    const xiong_result o = xiong_gradients(stack_init::own, c);
    check_written_plot(plot_xiong_last_layer(x, o), "xiong_last_layer");
    check_written_plot(plot_xiong_profiles(x, o, false), "xiong_profiles");
    check_written_plot(plot_xiong_profiles(x, o, true), "xiong_input_gradient");
  }
}
