// Tests for resnorm/norm_block.hpp (every placement) and resnorm/deep_norm.hpp.
#include "resnorm/norm_block.hpp"

#include <cmath>
#include <string>

#include "resnorm/attention.hpp"
#include "resnorm/deep_norm.hpp"
#include "resnorm/dynamic_tanh.hpp"
#include "resnorm/feed_forward.hpp"
#include "resnorm/finite_difference.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/linear.hpp"
#include "resnorm/post_ln_block.hpp"
#include "resnorm/pre_ln_block.hpp"
#include "resnorm/random.hpp"
#include "resnorm/rms_norm.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::matrix;
using resnorm::vector;
using resnorm_test::max_abs;
using resnorm_test::max_rel_diff;
using resnorm_test::vec;
using ffn = resnorm::feed_forward<double>;
using ln = resnorm::layer_norm<double>;
using block = resnorm::norm_block<ffn, ln>;

// Tolerances, in one place.
// Central differences in double, step cbrt(eps) ≈ 6e-6: error ~eps^(2/3) ≈ 4e-11 relative to the
// O(1) entries; 1e-6 is the spec's bound and far below any wrong term.
constexpr double fd_rel_tol = 1e-6;
// vjp/jvp against the explicit Jacobian (products of the pieces' Jacobians), in double.
constexpr double consistency_tol = 1e-12;

ffn random_ffn(resnorm::index dim, resnorm::normal_generator& rng) {
  const matrix<double> b1 = resnorm::random_normal<double>(2 * dim, 1, rng, 0.3);
  const matrix<double> b2 = resnorm::random_normal<double>(dim, 1, rng, 0.3);
  return ffn(resnorm::random_normal<double>(dim, 2 * dim, rng, 0.5), vector<double>(b1),
             resnorm::random_normal<double>(2 * dim, dim, rng, 0.5), vector<double>(b2));
}

ln random_ln(resnorm::index dim, resnorm::normal_generator& rng) {
  const matrix<double> g = resnorm::random_normal<double>(dim, 1, rng, 0.3, 1.0);
  const matrix<double> b = resnorm::random_normal<double>(dim, 1, rng, 0.3);
  return ln(vector<double>(g), vector<double>(b), 1e-5);
}

// Every variant of the table, with non-trivial parameters (a residual scale far from 0 so the
// branch's derivatives are visible).
std::vector<std::pair<std::string, block>> variants(resnorm::index dim,
                                                    resnorm::normal_generator& rng) {
  std::vector<std::pair<std::string, block>> out;
  out.emplace_back("pre_ln", block::pre_ln(random_ln(dim, rng), random_ffn(dim, rng)));
  out.emplace_back("post_ln", block::post_ln(random_ffn(dim, rng), random_ln(dim, rng)));
  out.emplace_back("sandwich_ln", block::sandwich_ln(random_ln(dim, rng), random_ffn(dim, rng),
                                                     random_ln(dim, rng)));
  out.emplace_back("deep_norm",
                   resnorm::make_deep_norm_block(random_ffn(dim, rng), random_ln(dim, rng), 3));
  out.emplace_back("rezero", block::rezero(random_ffn(dim, rng), 0.7));
  block scaled = block::layer_scale(random_ln(dim, rng), random_ffn(dim, rng), dim);
  scaled.scale = vector<double>(resnorm::random_normal<double>(dim, 1, rng, 0.5, 1.0));
  out.emplace_back("layer_scale", scaled);
  return out;
}

}  // namespace

TEST_CASE("norm_block: each placement computes its formula", "[norm_block][forward]") {
  resnorm::normal_generator rng(61);
  const resnorm::index d = 5;
  const matrix<double> x = resnorm::random_normal<double>(3, d, rng);
  const ffn f = random_ffn(d, rng);
  const ln n1 = random_ln(d, rng), n2 = random_ln(d, rng);
  vector<double> a(d);
  a << 0.1, -0.2, 0.3, 0.4, -0.5;
  // Each formula composed by hand from the pieces.
  CHECK(max_abs(block::pre_ln(n1, f).forward(x) - (x + f.forward(n1.forward(x)))) == 0.0);
  CHECK(max_abs(block::post_ln(f, n1).forward(x) - n1.forward(x + f.forward(x))) == 0.0);
  CHECK(max_abs(block::sandwich_ln(n1, f, n2).forward(x) -
                (x + n2.forward(f.forward(n1.forward(x))))) == 0.0);
  const double alpha = std::pow(6.0, 0.25);
  CHECK(max_abs(block::deep_norm(f, n1, alpha).forward(x) - n1.forward(alpha * x + f.forward(x))) ==
        0.0);
  CHECK(max_abs(block::rezero(f, 0.25).forward(x) - (x + 0.25 * f.forward(x))) <= 1e-15);
  block scaled = block::layer_scale(n1, f, d);
  scaled.scale = a;
  CHECK(max_abs(scaled.forward(x) - (x + f.forward(n1.forward(x)) * a.asDiagonal())) <= 1e-15);
  // The pre/post placements agree with the single-purpose blocks.
  const resnorm::pre_ln_block<ffn> pre(n1, f);
  const resnorm::post_ln_block<ffn> post(f, n1);
  const matrix<double> u = resnorm::random_normal<double>(3, d, rng);
  CHECK(max_abs(block::pre_ln(n1, f).vjp(x, u).dx - pre.vjp(x, u).dx) <= 1e-14);
  CHECK(max_abs(block::post_ln(f, n1).vjp(x, u).dx - post.vjp(x, u).dx) <= 1e-14);
}

TEST_CASE("norm_block jacobian: matches finite differences for every placement",
          "[norm_block][jacobian]") {
  resnorm::normal_generator rng(62);
  // No d = 2: LayerNorm of two features outputs ±gamma whatever x is, so a block ending in LN
  // has a Jacobian of size eps·rstd³ ≈ 1e-6 there, and a relative error of FD noise is
  // meaningless against it.
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const resnorm::index dim : {3, 8}) {
      for (const auto& [name, b] : variants(dim, rng)) {
        CAPTURE(name, rows, dim);
        const matrix<double> x = resnorm::random_normal<double>(rows, dim, rng);
        const auto check = resnorm::check_jacobian(b, x);
        INFO(check.describe());
        CHECK(check.max_rel_error <= fd_rel_tol);
      }
    }
  }
}

TEST_CASE("norm_block vjp and jvp: agree with the explicit Jacobian for every placement",
          "[norm_block][vjp][jvp]") {
  resnorm::normal_generator rng(63);
  for (const resnorm::index rows : {0, 1, 3}) {
    for (const auto& [name, b] : variants(6, rng)) {
      CAPTURE(name, rows);
      const matrix<double> x = resnorm::random_normal<double>(rows, 6, rng);
      const matrix<double> u = resnorm::random_normal<double>(rows, 6, rng);
      const matrix<double> v = resnorm::random_normal<double>(rows, 6, rng);
      const matrix<double> J = b.jacobian(x);
      const matrix<double> dx = b.vjp(x, u).dx, jv = b.jvp(x, v);
      CHECK(max_abs(vec(dx) - J.transpose() * vec(u)) <= consistency_tol);
      CHECK(max_abs(vec(jv) - J * vec(v)) <= consistency_tol);
      CHECK(u.cwiseProduct(jv).sum() == Approx(dx.cwiseProduct(v).sum()).margin(consistency_tol));
    }
  }
}

TEST_CASE("norm_block vjp: parameter gradients match finite differences",
          "[norm_block][vjp][parameters]") {
  resnorm::normal_generator rng(64);
  for (const auto& variant : variants(4, rng)) {
    // Named references, not structured bindings: clang 14 cannot capture those in a lambda.
    const std::string& name = variant.first;
    const block& b = variant.second;
    CAPTURE(name);
    const matrix<double> x = resnorm::random_normal<double>(3, 4, rng);
    const matrix<double> u = resnorm::random_normal<double>(3, 4, rng);
    const auto grad = b.vjp(x, u);
    // loss(θ) = ⟨u, block_θ(x)⟩, perturbing one parameter through a setter.
    auto fd = [&](auto get) {
      return resnorm::finite_difference_gradient(
          [&](const auto& p) {
            auto c = b;
            get(c) = p;
            return u.cwiseProduct(c.forward(x)).sum();
          },
          get(b));
    };
    CHECK(max_rel_diff(grad.sublayer.dw1, fd([](auto& c) -> auto& { return c.sublayer.w1; })) <=
          fd_rel_tol);
    CHECK(max_rel_diff(grad.sublayer.db2, fd([](auto& c) -> auto& { return c.sublayer.b2; })) <=
          fd_rel_tol);
    if (b.placement != resnorm::norm_placement::none) {
      CHECK(max_rel_diff(grad.norm.dgamma, fd([](auto& c) -> auto& { return c.norm.gamma; })) <=
            fd_rel_tol);
      CHECK(max_rel_diff(grad.norm.dbeta, fd([](auto& c) -> auto& { return c.norm.beta; })) <=
            fd_rel_tol);
    } else {
      CHECK(grad.norm.dx.size() == 0);
    }
    if (b.placement == resnorm::norm_placement::sandwich_ln) {
      CHECK(max_rel_diff(grad.branch_norm.dgamma,
                         fd([](auto& c) -> auto& { return c.branch_norm.gamma; })) <= fd_rel_tol);
    }
    if (b.has_scale()) {
      CHECK(max_rel_diff(grad.dscale, fd([](auto& c) -> auto& { return c.scale; })) <= fd_rel_tol);
    } else {
      CHECK(grad.dscale.size() == 0);
    }
  }
}

TEST_CASE("norm_block: ReZero at initialisation is exactly the identity", "[norm_block][rezero]") {
  resnorm::normal_generator rng(65);
  const block b = block::rezero(random_ffn(6, rng));
  REQUIRE(b.scale.size() == 1);
  CHECK(b.scale[0] == 0.0);
  const matrix<double> x = resnorm::random_normal<double>(3, 6, rng);
  CHECK((b.forward(x).array() == x.array()).all());
  CHECK((b.jacobian(x).array() == matrix<double>::Identity(18, 18).array()).all());
  // Its gradient still reaches a: da = ⟨dy, F(x)⟩, so training can move it off 0.
  const matrix<double> u = resnorm::random_normal<double>(3, 6, rng);
  CHECK(b.vjp(x, u).dscale[0] ==
        Approx(u.cwiseProduct(b.sublayer.forward(x)).sum()).epsilon(1e-14));
  // LayerScale starts near the identity: a = 1e-4 by default.
  const block s = block::layer_scale(ln(6), random_ffn(6, rng), 6);
  CHECK((s.scale.array() == 1e-4).all());
}

TEST_CASE("deep_norm: constants of the DeepNet paper", "[norm_block][deep_norm]") {
  // N = 1: α = 2^(1/4), β = 8^(−1/4), the values Wang et al. 2022 give for one layer.
  CHECK(resnorm::deep_norm_alpha(1) == Approx(std::sqrt(std::sqrt(2.0))).epsilon(1e-15));
  CHECK(resnorm::deep_norm_beta(1) == Approx(1.0 / std::sqrt(std::sqrt(8.0))).epsilon(1e-15));
  CHECK(resnorm::deep_norm_alpha(1) == Approx(1.189207115).epsilon(1e-9));
  CHECK(resnorm::deep_norm_beta(1) == Approx(0.594603558).epsilon(1e-9));
  // N = 50 (a 100-sublayer stack): α = 100^(1/4) = sqrt(10), β = 400^(−1/4) = 1/sqrt(20).
  CHECK(resnorm::deep_norm_alpha(50) == Approx(std::sqrt(10.0)).epsilon(1e-15));
  CHECK(resnorm::deep_norm_beta(50) == Approx(1.0 / std::sqrt(20.0)).epsilon(1e-15));
  CHECK_THROWS_AS(resnorm::deep_norm_alpha(0), std::invalid_argument);
  resnorm::normal_generator rng(66);
  const auto b = resnorm::make_deep_norm_block(random_ffn(4, rng), ln(4), 1);
  CHECK(b.alpha == resnorm::deep_norm_alpha(1));
  CHECK(b.placement == resnorm::norm_placement::post_ln);
}

TEST_CASE("norm_block: attention (a token-mixing sublayer) and other norms",
          "[norm_block][attention]") {
  resnorm::normal_generator rng(67);
  using attention = resnorm::causal_self_attention<double>;
  const attention f(resnorm::random_normal<double>(8, 8, rng, 0.5),
                    resnorm::random_normal<double>(8, 8, rng, 0.5),
                    resnorm::random_normal<double>(8, 8, rng, 0.5),
                    resnorm::random_normal<double>(8, 8, rng, 0.5), 2);
  const matrix<double> x = resnorm::random_normal<double>(3, 8, rng);
  for (const auto where : {resnorm::norm_placement::pre_ln, resnorm::norm_placement::post_ln,
                           resnorm::norm_placement::sandwich_ln}) {
    CAPTURE(resnorm::to_string(where));
    resnorm::norm_block<attention> b(where, random_ln(8, rng), f);
    b.branch_norm = random_ln(8, rng);
    const auto check = resnorm::check_jacobian(b, x);
    INFO(check.describe());
    CHECK(check.max_rel_error <= fd_rel_tol);
    resnorm::norm_block<attention, resnorm::rms_norm<double>> r(where, resnorm::rms_norm<double>(8),
                                                                f);
    r.branch_norm = resnorm::rms_norm<double>(8);
    CHECK(resnorm::check_jacobian(r, x).max_rel_error <= fd_rel_tol);
    resnorm::norm_block<attention, resnorm::dynamic_tanh<double>> t(
        where, resnorm::dynamic_tanh<double>(8), f);
    t.branch_norm = resnorm::dynamic_tanh<double>(8);
    CHECK(resnorm::check_jacobian(t, x).max_rel_error <= fd_rel_tol);
  }
}

TEST_CASE("norm_block: bad shapes throw naming both shapes", "[norm_block][errors]") {
  resnorm::normal_generator rng(68);
  block b = block::layer_scale(ln(4), random_ffn(4, rng), 3);
  const matrix<double> x = matrix<double>::Zero(2, 4);
  CHECK_THROWS_MATCHES(b.forward(x), std::invalid_argument,
                       resnorm_test::message_contains("scale has 3 elements, x has 4 columns"));
  b.scale.resize(0);
  CHECK_THROWS_MATCHES(b.vjp(x, matrix<double>::Zero(2, 3)), std::invalid_argument,
                       resnorm_test::message_contains("norm_block::vjp: dy is 2x3, x is 2x4"));
  // A sublayer that changes the width cannot sit on a highway.
  using narrowing = resnorm::linear<double>;
  const resnorm::norm_block<narrowing> w(resnorm::norm_placement::pre_ln, ln(),
                                         narrowing(matrix<double>::Zero(4, 3)));
  CHECK_THROWS_MATCHES(w.forward(x), std::invalid_argument,
                       resnorm_test::message_contains("sublayer output is 2x3, x is 2x4"));
}
