// Tests for resnorm/transformer_stack.hpp: N layers, initialisation, backward, gradient norms.
#include "resnorm/transformer_stack.hpp"

#include <cmath>
#include <string>

#include "resnorm/dynamic_tanh.hpp"
#include "resnorm/finite_difference.hpp"
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
using stack = resnorm::transformer_stack<double>;
using resnorm::norm_placement;

// Tolerances, in one place.
// Central differences in double, step cbrt(eps) ≈ 6e-6: error ~eps^(2/3) ≈ 4e-11 relative to the
// O(1) entries (weights of std 0.3 keep every factor O(1)); 1e-6 is the spec's bound.
constexpr double fd_rel_tol = 1e-6;
// vjp/jvp against the explicit Jacobian (a product of N layer Jacobians), in double.
constexpr double consistency_tol = 1e-11;

// T = 3, d = 8, 2 heads, d_ff = 16; weights N(0, 0.3²) without depth scaling so every layer is
// far from the identity; random biases and norm parameters so none of their gradients is trivial.
stack random_stack(std::vector<norm_placement> placements, std::uint64_t seed) {
  const resnorm::transformer_config config{8, 2, 16,
                                           static_cast<resnorm::index>(placements.size())};
  resnorm::transformer_init init;
  init.std_dev = 0.3;
  init.scale_writers = false;
  stack s(config, std::move(placements), seed, init);
  resnorm::normal_generator rng(seed + 1000);
  auto perturb = [&](vector<double>& p, double mean) {
    p = vector<double>(resnorm::random_normal<double>(p.size(), 1, rng, 0.3, mean));
  };
  for (auto& l : s.layers) {
    perturb(l.attention.norm.gamma, 1.0);
    perturb(l.attention.norm.beta, 0.0);
    perturb(l.ffn.norm.gamma, 1.0);
    perturb(l.ffn.sublayer.b1, 0.0);
    perturb(l.ffn.sublayer.b2, 0.0);
  }
  perturb(s.final_norm.gamma, 1.0);
  return s;
}

const std::vector<std::pair<std::string, std::vector<norm_placement>>>& schemes() {
  static const std::vector<std::pair<std::string, std::vector<norm_placement>>> s = {
      {"pre_ln x2", resnorm::uniform_placements(2, norm_placement::pre_ln)},
      {"post_ln x2", resnorm::uniform_placements(2, norm_placement::post_ln)},
      {"pre_ln x3", resnorm::uniform_placements(3, norm_placement::pre_ln)},
      {"post_ln x3", resnorm::uniform_placements(3, norm_placement::post_ln)},
      {"post, pre, pre", {norm_placement::post_ln, norm_placement::pre_ln, norm_placement::pre_ln}},
  };
  return s;
}

}  // namespace

TEST_CASE("transformer_stack jacobian: matches finite differences for N = 2 and 3",
          "[transformer_stack][jacobian]") {
  std::uint64_t seed = 81;
  for (const auto& [name, placements] : schemes()) {
    for (const resnorm::index rows : {0, 1, 3}) {
      CAPTURE(name, rows);
      const stack s = random_stack(placements, seed++);
      resnorm::normal_generator rng(seed);
      const matrix<double> x = resnorm::random_normal<double>(rows, 8, rng);
      const auto check = resnorm::check_jacobian(s, x);
      INFO(check.describe());
      CHECK(check.max_rel_error <= fd_rel_tol);
    }
  }
}

TEST_CASE("transformer_stack vjp and jvp: agree with the explicit Jacobian",
          "[transformer_stack][vjp][jvp]") {
  std::uint64_t seed = 91;
  for (const auto& [name, placements] : schemes()) {
    CAPTURE(name);
    const stack s = random_stack(placements, seed++);
    resnorm::normal_generator rng(seed);
    const matrix<double> x = resnorm::random_normal<double>(3, 8, rng);
    const matrix<double> u = resnorm::random_normal<double>(3, 8, rng);
    const matrix<double> v = resnorm::random_normal<double>(3, 8, rng);
    const matrix<double> J = s.jacobian(x);
    const auto grad = s.vjp(x, u);
    const matrix<double> jv = s.jvp(x, v);
    CHECK(max_abs(vec(grad.dx) - J.transpose() * vec(u)) <= consistency_tol);
    CHECK(max_abs(vec(jv) - J * vec(v)) <= consistency_tol);
    REQUIRE(grad.layers.size() == placements.size());
  }
}

TEST_CASE("transformer_stack vjp: every layer's parameter gradients match finite differences",
          "[transformer_stack][vjp][parameters]") {
  std::uint64_t seed = 101;
  for (const auto& [name, placements] : schemes()) {
    CAPTURE(name);
    const stack s = random_stack(placements, seed++);
    resnorm::normal_generator rng(seed);
    const matrix<double> x = resnorm::random_normal<double>(3, 8, rng);
    const matrix<double> u = resnorm::random_normal<double>(3, 8, rng);
    const auto grad = s.vjp(x, u);
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      CAPTURE(l);
      auto fd = [&](auto get) {
        return resnorm::finite_difference_gradient(
            [&](const auto& p) {
              stack c = s;
              get(c.layers[l]) = p;
              return u.cwiseProduct(c.forward(x)).sum();
            },
            get(s.layers[l]));
      };
      const auto& g = grad.layers[l];
      CHECK(max_rel_diff(g.ffn.sublayer.dw2,
                         fd([](auto& c) -> auto& { return c.ffn.sublayer.w2; })) <= fd_rel_tol);
      CHECK(max_rel_diff(g.attention.sublayer.dwk, fd([](auto& c) -> auto& {
                           return c.attention.sublayer.wk;
                         })) <= fd_rel_tol);
      CHECK(max_rel_diff(g.attention.norm.dgamma, fd([](auto& c) -> auto& {
                           return c.attention.norm.gamma;
                         })) <= fd_rel_tol);
      CHECK(max_rel_diff(g.ffn.sublayer.db2,
                         fd([](auto& c) -> auto& { return c.ffn.sublayer.b2; })) <= fd_rel_tol);
    }
    if (s.use_final_norm) {
      const auto fd_gamma = resnorm::finite_difference_gradient(
          [&](const vector<double>& p) {
            stack c = s;
            c.final_norm.gamma = p;
            return u.cwiseProduct(c.forward(x)).sum();
          },
          s.final_norm.gamma);
      CHECK(max_rel_diff(grad.final_norm.dgamma, fd_gamma) <= fd_rel_tol);
    } else {
      CHECK(grad.final_norm.dgamma.size() == 0);
    }
  }
}

TEST_CASE("transformer_stack: gradient_norms reports each layer's norms",
          "[transformer_stack][vjp][norms]") {
  const stack s = random_stack(resnorm::uniform_placements(3, norm_placement::post_ln), 111);
  resnorm::normal_generator rng(112);
  const matrix<double> x = resnorm::random_normal<double>(3, 8, rng);
  const auto grad = s.vjp(x, resnorm::random_normal<double>(3, 8, rng));
  const auto norms = resnorm::gradient_norms(grad);
  REQUIRE(norms.size() == 3);
  for (std::size_t l = 0; l < 3; ++l) {
    CAPTURE(l);
    const auto& g = grad.layers[l];
    // Frobenius norms summed by hand.
    double dw2 = 0, dx = 0;
    for (resnorm::index k = 0; k < g.ffn.sublayer.dw2.size(); ++k) {
      dw2 += g.ffn.sublayer.dw2.data()[k] * g.ffn.sublayer.dw2.data()[k];
    }
    for (resnorm::index k = 0; k < g.dx.size(); ++k) dx += g.dx.data()[k] * g.dx.data()[k];
    CHECK(norms[l].ffn_dw2 == Approx(std::sqrt(dw2)).epsilon(1e-14));
    CHECK(norms[l].dx == Approx(std::sqrt(dx)).epsilon(1e-14));
    CHECK(norms[l].weights >= norms[l].ffn_dw2);
    CHECK(norms[l].ffn_dw2 > 0.0);
  }
  // Layer 0's dx is the gradient reaching the stack's input.
  CHECK((grad.layers[0].dx.array() == grad.dx.array()).all());
}

TEST_CASE("transformer_stack: Pre-LN with zero writing projections is the identity",
          "[transformer_stack][identity]") {
  // Wo = 0 and W2 = 0 (b2 = 0 at initialisation): both branches output exactly 0, so each
  // Pre-LN layer is x + 0 and its Jacobian I + 0·(…) = I. Tested: the stack WITHOUT its final
  // LayerNorm returns x bit for bit with Jacobian exactly I; WITH it, the stack equals LN_f(x)
  // and its Jacobian equals LN_f's, bit for bit.
  for (const resnorm::index layers : {1, 2, 3}) {
    CAPTURE(layers);
    stack s = stack::pre_ln({8, 2, 16, layers}, 121);
    for (auto& l : s.layers) {
      l.attention.sublayer.wo.setZero();
      l.ffn.sublayer.w2.setZero();
    }
    resnorm::normal_generator rng(122);
    for (const resnorm::index rows : {0, 1, 3}) {
      CAPTURE(rows);
      const matrix<double> x = resnorm::random_normal<double>(rows, 8, rng);
      REQUIRE(s.use_final_norm);
      CHECK((s.forward(x).array() == s.final_norm.forward(x).array()).all());
      CHECK((s.jacobian(x).array() == s.final_norm.jacobian(x).array()).all());
      stack bare = s;
      bare.use_final_norm = false;
      CHECK((bare.forward(x).array() == x.array()).all());
      CHECK(
          (bare.jacobian(x).array() == matrix<double>::Identity(rows * 8, rows * 8).array()).all());
      const matrix<double> u = resnorm::random_normal<double>(rows, 8, rng);
      CHECK((bare.vjp(x, u).dx.array() == u.array()).all());
    }
  }
}

TEST_CASE("transformer_stack: the same seed gives bitwise the same stack",
          "[transformer_stack][init]") {
  const resnorm::transformer_config c{8, 2, 32, 3};
  for (const auto& init :
       {resnorm::transformer_init{}, resnorm::transformer_init::xavier(),
        resnorm::transformer_init::xavier(resnorm::init_scheme::xavier_normal)}) {
    const stack a = stack::pre_ln(c, 2024, init), b = stack::pre_ln(c, 2024, init);
    const stack other = stack::pre_ln(c, 2025, init);
    for (std::size_t l = 0; l < 3; ++l) {
      CAPTURE(l);
      const auto& la = a.layers[l];
      const auto& lb = b.layers[l];
      CHECK((la.attention.sublayer.wq.array() == lb.attention.sublayer.wq.array()).all());
      CHECK((la.attention.sublayer.wk.array() == lb.attention.sublayer.wk.array()).all());
      CHECK((la.attention.sublayer.wv.array() == lb.attention.sublayer.wv.array()).all());
      CHECK((la.attention.sublayer.wo.array() == lb.attention.sublayer.wo.array()).all());
      CHECK((la.ffn.sublayer.w1.array() == lb.ffn.sublayer.w1.array()).all());
      CHECK((la.ffn.sublayer.w2.array() == lb.ffn.sublayer.w2.array()).all());
      CHECK_FALSE((la.ffn.sublayer.w1.array() == other.layers[l].ffn.sublayer.w1.array()).all());
    }
  }
  // The draw order is part of the contract: Wq of layer 0 comes first, from normal_generator(seed).
  const stack s = stack::pre_ln(c, 7);
  resnorm::normal_generator rng(7);
  const double first = 0.02 * rng();
  const double second = 0.02 * rng();
  CHECK(s.layers[0].attention.sublayer.wq(0, 0) == first);
  CHECK(s.layers[0].attention.sublayer.wq(0, 1) == second);
}

TEST_CASE("transformer_stack: initialisation statistics", "[transformer_stack][init]") {
  // d = 64, N = 8: Wq has 4096 entries, so a sample std is within ~1.1% (1/sqrt(2·4096)) of the
  // true one; 5% is ~4.5 standard errors.
  const resnorm::index d = 64, n = 8;
  const resnorm::transformer_config c{d, 4, 4 * d, n};
  auto sample_std = [](const matrix<double>& w) { return std::sqrt(w.squaredNorm() / w.size()); };
  SECTION("GPT-2: N(0, 0.02²), writers scaled by 1/sqrt(2N), biases 0, gamma 1") {
    const stack s = stack::pre_ln(c, 1);
    const auto& l = s.layers[3];
    CHECK(sample_std(l.attention.sublayer.wq) == Approx(0.02).epsilon(0.05));
    CHECK(sample_std(l.attention.sublayer.wo) == Approx(0.02 / std::sqrt(2.0 * n)).epsilon(0.05));
    CHECK(sample_std(l.ffn.sublayer.w1) == Approx(0.02).epsilon(0.05));
    CHECK(sample_std(l.ffn.sublayer.w2) == Approx(0.02 / std::sqrt(2.0 * n)).epsilon(0.05));
    CHECK((l.ffn.sublayer.b1.array() == 0.0).all());
    CHECK((l.attention.norm.gamma.array() == 1.0).all());
    CHECK((l.attention.norm.beta.array() == 0.0).all());
  }
  SECTION("Xavier-uniform, no depth scaling: U(−a, a), a = sqrt(6/(fan_in + fan_out))") {
    const stack s = stack::post_ln(c, 2, resnorm::transformer_init::xavier());
    const auto& w2 = s.layers[5].ffn.sublayer.w2;  // 256 x 64
    const double a = std::sqrt(6.0 / (256 + 64));
    CHECK(w2.cwiseAbs().maxCoeff() <= a);
    CHECK(w2.cwiseAbs().maxCoeff() >= 0.99 * a);
    CHECK(sample_std(w2) == Approx(a / std::sqrt(3.0)).epsilon(0.05));  // std of U(−a, a)
    CHECK(sample_std(s.layers[5].attention.sublayer.wo) ==
          Approx(std::sqrt(1.0 / d)).epsilon(0.05));
  }
  SECTION("DeepNorm: α = (2N)^(1/4) on every highway, Xavier-normal with gain β on V, O, FFN") {
    const stack s = stack::deep_norm(c, 3);
    const double alpha = std::pow(2.0 * n, 0.25), beta = std::pow(8.0 * n, -0.25);
    for (const auto& l : s.layers) {
      CHECK(l.placement() == norm_placement::post_ln);
      CHECK(l.attention.alpha == Approx(alpha).epsilon(1e-15));
      CHECK(l.ffn.alpha == Approx(alpha).epsilon(1e-15));
    }
    CHECK_FALSE(s.use_final_norm);
    const auto& l = s.layers[0];
    CHECK(sample_std(l.attention.sublayer.wq) == Approx(std::sqrt(1.0 / d)).epsilon(0.05));
    CHECK(sample_std(l.attention.sublayer.wv) == Approx(beta * std::sqrt(1.0 / d)).epsilon(0.05));
    CHECK(sample_std(l.ffn.sublayer.w1) ==
          Approx(beta * std::sqrt(2.0 / (d + 4 * d))).epsilon(0.05));
  }
}

TEST_CASE("transformer_stack: per-layer placements and Mix-LN", "[transformer_stack][placement]") {
  const auto p = resnorm::mix_ln_placements(8);
  REQUIRE(p.size() == 8);
  for (std::size_t l = 0; l < 8; ++l) {
    CAPTURE(l);
    CHECK(p[l] == (l < 2 ? norm_placement::post_ln : norm_placement::pre_ln));
  }
  const stack s = stack::mix_ln({8, 2, 16, 8}, 5);
  CHECK(s.layers[1].placement() == norm_placement::post_ln);
  CHECK(s.layers[2].placement() == norm_placement::pre_ln);
  CHECK(s.use_final_norm);
  CHECK_FALSE(stack::post_ln({8, 2, 16, 2}, 5).use_final_norm);
  // Any normaliser: an RMSNorm or DyT stack is a differentiable map like the others.
  resnorm::transformer_stack<double, resnorm::rms_norm<double>> r({8, 2, 16, 2},
                                                                  resnorm::mix_ln_placements(2), 9);
  resnorm::transformer_stack<double, resnorm::dynamic_tanh<double>> t(
      {8, 2, 16, 2}, resnorm::mix_ln_placements(2), 9);
  resnorm::normal_generator rng(10);
  const matrix<double> x = resnorm::random_normal<double>(3, 8, rng);
  CHECK(resnorm::check_jacobian(r, x).max_rel_error <= fd_rel_tol);
  CHECK(resnorm::check_jacobian(t, x).max_rel_error <= fd_rel_tol);
}

TEST_CASE("transformer_stack: bad input throws naming both shapes", "[transformer_stack][errors]") {
  CHECK_THROWS_MATCHES(stack::pre_ln({6, 4, 8, 2}, 1), std::invalid_argument,
                       resnorm_test::message_contains("d = 6 is not divisible by heads = 4"));
  CHECK_THROWS_MATCHES(
      stack({8, 2, 16, 3}, resnorm::uniform_placements(2, norm_placement::pre_ln), 1),
      std::invalid_argument,
      resnorm_test::message_contains("placements has 2 elements, config has 3"));
  const stack s = stack::pre_ln({8, 2, 16, 2}, 1);
  CHECK_THROWS_MATCHES(
      s.vjp(matrix<double>::Zero(3, 8), matrix<double>::Zero(2, 8)), std::invalid_argument,
      resnorm_test::message_contains("transformer_stack::vjp: dy is 2x8, x is 3x8"));
  CHECK_THROWS_AS(s.forward(matrix<double>::Zero(3, 5)), std::invalid_argument);
  // T = 0 and T = 1 work.
  CHECK(s.forward(matrix<double>(0, 8)).rows() == 0);
  CHECK(s.vjp(matrix<double>(0, 8), matrix<double>(0, 8)).dx.rows() == 0);
  CHECK(s.forward(matrix<double>::Ones(1, 8)).allFinite());
}
