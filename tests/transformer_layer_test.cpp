// Tests for resnorm/transformer_layer.hpp: attention block then FFN block, in every placement.
#include "resnorm/transformer_layer.hpp"

#include <string>

#include "resnorm/finite_difference.hpp"
#include "resnorm/random.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::matrix;
using resnorm::vector;
using resnorm_test::max_abs;
using resnorm_test::max_rel_diff;
using resnorm_test::vec;
using layer = resnorm::transformer_layer<double>;
using resnorm::norm_placement;

// Tolerances, in one place.
// Central differences in double, step cbrt(eps) ≈ 6e-6: error ~eps^(2/3) ≈ 4e-11 relative to the
// O(1) entries (weights of std 0.5 keep every factor O(1)); 1e-6 is the spec's bound.
constexpr double fd_rel_tol = 1e-6;
// vjp/jvp against the explicit Jacobian, in double.
constexpr double consistency_tol = 1e-12;

resnorm::layer_norm<double> random_ln(resnorm::index d, resnorm::normal_generator& rng) {
  return resnorm::layer_norm<double>(
      vector<double>(resnorm::random_normal<double>(d, 1, rng, 0.3, 1.0)),
      vector<double>(resnorm::random_normal<double>(d, 1, rng, 0.3)), 1e-5);
}

// d = 8, 2 heads, d_ff = 16, every parameter random and O(1).
layer random_layer(norm_placement where, resnorm::normal_generator& rng) {
  const resnorm::index d = 8, h = 16;
  auto w = [&](resnorm::index r, resnorm::index c) {
    return resnorm::random_normal<double>(r, c, rng, 0.5);
  };
  resnorm::causal_self_attention<double> mha(w(d, d), w(d, d), w(d, d), w(d, d), 2);
  resnorm::feed_forward<double> ffn(w(d, h), vector<double>(w(h, 1)), w(h, d),
                                    vector<double>(w(d, 1)));
  layer l(where, mha, random_ln(d, rng), ffn, random_ln(d, rng));
  l.attention.branch_norm = random_ln(d, rng);
  l.ffn.branch_norm = random_ln(d, rng);
  return l;
}

}  // namespace

TEST_CASE("transformer_layer forward: Pre-LN and Post-LN formulas composed by hand",
          "[transformer_layer][forward]") {
  resnorm::normal_generator rng(71);
  const matrix<double> x = resnorm::random_normal<double>(3, 8, rng);
  const layer pre = random_layer(norm_placement::pre_ln, rng);
  const auto& mha = pre.attention.sublayer;
  const auto& ffn = pre.ffn.sublayer;
  const auto& ln1 = pre.attention.norm;
  const auto& ln2 = pre.ffn.norm;
  // Pre-LN: y = x + MHA(LN₁(x)); z = y + FFN(LN₂(y)).
  const matrix<double> y_pre = x + mha.forward(ln1.forward(x));
  CHECK(max_abs(pre.forward(x) - (y_pre + ffn.forward(ln2.forward(y_pre)))) == 0.0);
  // Post-LN with the same pieces: y = LN₁(x + MHA(x)); z = LN₂(y + FFN(y)).
  layer post = pre;
  post.attention.placement = norm_placement::post_ln;
  post.ffn.placement = norm_placement::post_ln;
  const matrix<double> y_post = ln1.forward(x + mha.forward(x));
  CHECK(max_abs(post.forward(x) - ln2.forward(y_post + ffn.forward(y_post))) == 0.0);
  CHECK(post.placement() == norm_placement::post_ln);
}

TEST_CASE("transformer_layer jacobian: matches finite differences in every placement",
          "[transformer_layer][jacobian]") {
  resnorm::normal_generator rng(72);
  for (const auto where : {norm_placement::pre_ln, norm_placement::post_ln,
                           norm_placement::sandwich_ln, norm_placement::none}) {
    for (const resnorm::index rows : {0, 1, 3}) {
      CAPTURE(resnorm::to_string(where), rows);
      const layer l = random_layer(where, rng);
      const matrix<double> x = resnorm::random_normal<double>(rows, 8, rng);
      const auto check = resnorm::check_jacobian(l, x);
      INFO(check.describe());
      CHECK(check.max_rel_error <= fd_rel_tol);
    }
  }
}

TEST_CASE("transformer_layer vjp and jvp: agree with the explicit Jacobian",
          "[transformer_layer][vjp][jvp]") {
  resnorm::normal_generator rng(73);
  for (const auto where : {norm_placement::pre_ln, norm_placement::post_ln}) {
    for (const resnorm::index rows : {0, 1, 4}) {
      CAPTURE(resnorm::to_string(where), rows);
      const layer l = random_layer(where, rng);
      const matrix<double> x = resnorm::random_normal<double>(rows, 8, rng);
      const matrix<double> u = resnorm::random_normal<double>(rows, 8, rng);
      const matrix<double> v = resnorm::random_normal<double>(rows, 8, rng);
      const matrix<double> J = l.jacobian(x);
      const matrix<double> dx = l.vjp(x, u).dx, jv = l.jvp(x, v);
      CHECK(max_abs(vec(dx) - J.transpose() * vec(u)) <= consistency_tol);
      CHECK(max_abs(vec(jv) - J * vec(v)) <= consistency_tol);
      CHECK(u.cwiseProduct(jv).sum() == Approx(dx.cwiseProduct(v).sum()).margin(consistency_tol));
      // Causality survives the whole layer: ∂z_t/∂x_s = 0 exactly for s > t.
      for (resnorm::index t = 0; t < rows; ++t) {
        for (resnorm::index s = t + 1; s < rows; ++s) {
          CHECK((J.block(t * 8, s * 8, 8, 8).array() == 0.0).all());
        }
      }
    }
  }
}

TEST_CASE("transformer_layer vjp: parameter gradients match finite differences",
          "[transformer_layer][vjp][parameters]") {
  resnorm::normal_generator rng(74);
  for (const auto where : {norm_placement::pre_ln, norm_placement::post_ln}) {
    CAPTURE(resnorm::to_string(where));
    const layer l = random_layer(where, rng);
    const matrix<double> x = resnorm::random_normal<double>(3, 8, rng);
    const matrix<double> u = resnorm::random_normal<double>(3, 8, rng);
    const auto grad = l.vjp(x, u);
    auto fd = [&](auto get) {
      return resnorm::finite_difference_gradient(
          [&](const auto& p) {
            layer c = l;
            get(c) = p;
            return u.cwiseProduct(c.forward(x)).sum();
          },
          get(l));
    };
    CHECK(max_rel_diff(grad.attention.sublayer.dwq,
                       fd([](auto& c) -> auto& { return c.attention.sublayer.wq; })) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.attention.sublayer.dwo,
                       fd([](auto& c) -> auto& { return c.attention.sublayer.wo; })) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.attention.norm.dgamma,
                       fd([](auto& c) -> auto& { return c.attention.norm.gamma; })) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.ffn.sublayer.dw2,
                       fd([](auto& c) -> auto& { return c.ffn.sublayer.w2; })) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.ffn.sublayer.db1,
                       fd([](auto& c) -> auto& { return c.ffn.sublayer.b1; })) <= fd_rel_tol);
    CHECK(max_rel_diff(grad.ffn.norm.dbeta, fd([](auto& c) -> auto& { return c.ffn.norm.beta; })) <=
          fd_rel_tol);
  }
}

TEST_CASE("transformer_layer: bad shapes throw naming both shapes", "[transformer_layer][errors]") {
  resnorm::normal_generator rng(75);
  const layer l = random_layer(norm_placement::pre_ln, rng);
  CHECK_THROWS_MATCHES(
      l.vjp(matrix<double>::Zero(3, 8), matrix<double>::Zero(3, 7)), std::invalid_argument,
      resnorm_test::message_contains("transformer_layer::vjp: dz is 3x7, x is 3x8"));
  CHECK_THROWS_MATCHES(l.forward(matrix<double>::Zero(3, 6)), std::invalid_argument,
                       resnorm_test::message_contains("6 columns"));
}
