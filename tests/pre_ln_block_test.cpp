// Tests of resnorm/pre_ln_block.hpp: y = x + F(LN(x)) with sublayers linear, linear → gelu and a
// zero linear: forward and J = I + J_F(u) J_LN(x) composed from the pieces in the test, the
// derivative triple, nested gradients by member name, and the exact identity when F ≡ 0.
#include "resnorm/pre_ln_block.hpp"

#include <limits>

#include "resnorm/gelu.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/linear.hpp"
#include "resnorm/sequential.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::gelu;
using resnorm::layer_norm;
using resnorm::linear;
using resnorm::matrix;
using resnorm::pre_ln_block;
using resnorm::sequential;
using resnorm_test::dmatrix;
using resnorm_test::max_abs;
using resnorm_test::max_abs_diff;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;

template <class S>
double eps_of() {
  return static_cast<double>(std::numeric_limits<S>::epsilon());
}

// Derivatives vs central differences, as for layer_norm: eps^(2/3) times LN's conditioning
// (rstd^k, |y| ≤ sqrt(d)), with a factor ~100 of margin: 1e-7 in double, 2e-3 in float.
template <class S>
double fd_tolerance() {
  return std::is_same_v<S, float> ? 2e-3 : 1e-7;
}

template <class S>
using mlp = sequential<linear<S>, gelu<S>>;

// At d = 2 LayerNorm's Jacobian is only its eps term, eps·rstd³/2, below float's
// finite-difference noise for eps = 1e-5; there eps = 0.5 makes it O(1) (see layer_norm_test).
template <class S>
layer_norm<S> make_norm(Eigen::Index dim) {
  const S eps = dim == 2 ? S(0.5) : S(1e-5);
  return layer_norm<S>(random_vector<S>(dim, 700, 0.3, 1.0), random_vector<S>(dim, 701, 0.3), eps);
}

template <class S>
linear<S> make_linear(Eigen::Index dim) {
  return linear<S>(random_matrix<S>(dim, dim, 702, 0.5), random_vector<S>(dim, 703));
}

template <class S>
mlp<S> make_mlp(Eigen::Index dim) {
  return mlp<S>(make_linear<S>(dim), gelu<S>{});
}

// Forward, Jacobian and vjp of the block against the same quantities composed by hand from the
// block's own pieces, then the derivative triple.
template <class Sublayer>
void check_against_pieces(const pre_ln_block<Sublayer>& block,
                          const matrix<typename Sublayer::scalar_type>& x) {
  using S = typename Sublayer::scalar_type;
  const Eigen::Index n = x.size();
  const matrix<S> u = block.norm.forward(x);
  const matrix<S> y_pieces = x + block.sublayer.forward(u);
  CHECK(max_abs_diff(block.forward(x), y_pieces) <= eps_of<S>() * (1 + max_abs(y_pieces)));

  const dmatrix J_F = block.sublayer.jacobian(u).template cast<double>();
  const dmatrix J_LN = block.norm.jacobian(x).template cast<double>();
  const dmatrix J_pieces = dmatrix::Identity(n, n) + J_F * J_LN;
  // The product in S against the product in double of the same S entries: d-term sums.
  const double d = static_cast<double>(x.cols());
  CHECK(max_abs_diff(block.jacobian(x), J_pieces) <=
        4 * d * eps_of<S>() * (1 + max_abs(J_F) * max_abs(J_LN)));

  const matrix<S> dy = random_matrix<S>(x.rows(), x.cols(), 710);
  const auto grad = block.vjp(x, dy);
  const auto sublayer_grad = block.sublayer.vjp(u, dy);
  const auto norm_grad = block.norm.vjp(x, sublayer_grad.dx);
  const matrix<S> dx_pieces = dy + norm_grad.dx;
  CHECK(max_abs_diff(grad.dx, dx_pieces) <= eps_of<S>() * (1 + max_abs(dx_pieces)));
  CHECK(max_abs_diff(grad.norm.dgamma, norm_grad.dgamma) == 0);
  CHECK(max_abs_diff(grad.norm.dbeta, norm_grad.dbeta) == 0);

  resnorm_test::check_derivatives(block, x, fd_tolerance<S>());
}

}  // namespace

TEMPLATE_TEST_CASE("pre_ln_block with linear: forward, jacobian and vjp compose from the pieces",
                   "[pre_ln_block][forward][vjp][jvp][jacobian]", float, double) {
  using S = TestType;
  for (const Eigen::Index rows : {0, 1, 3}) {
    for (const Eigen::Index dim : {1, 2, 6}) {
      CAPTURE(rows, dim);
      const pre_ln_block<linear<S>> block(make_norm<S>(dim), make_linear<S>(dim));
      check_against_pieces(block, random_matrix<S>(rows, dim, 720 + rows + dim, 1.0, 0.5));
    }
  }
}

TEMPLATE_TEST_CASE("pre_ln_block with linear then gelu: forward, jacobian and vjp compose",
                   "[pre_ln_block][forward][vjp][jvp][jacobian]", float, double) {
  using S = TestType;
  for (const Eigen::Index rows : {0, 1, 3}) {
    for (const Eigen::Index dim : {1, 2, 6}) {
      CAPTURE(rows, dim);
      const pre_ln_block<mlp<S>> block(make_norm<S>(dim), make_mlp<S>(dim));
      check_against_pieces(block, random_matrix<S>(rows, dim, 730 + rows + dim, 1.0, 0.5));
    }
  }
}

TEMPLATE_TEST_CASE("pre_ln_block vjp: nested gradients match finite differences by member name",
                   "[pre_ln_block][vjp]", float, double) {
  using S = TestType;
  const Eigen::Index dim = 6;
  const matrix<S> x = random_matrix<S>(3, dim, 740, 1.0, 0.5);
  const matrix<S> u = random_matrix<S>(3, dim, 741);
  const double tol = fd_tolerance<S>();

  const pre_ln_block<linear<S>> block(make_norm<S>(dim), make_linear<S>(dim));
  const auto grad = block.vjp(x, u);
  resnorm_test::check_parameter_gradient(
      "norm.gamma", block, x, u, [](auto& b) -> auto& { return b.norm.gamma; }, grad.norm.dgamma,
      tol);
  resnorm_test::check_parameter_gradient(
      "norm.beta", block, x, u, [](auto& b) -> auto& { return b.norm.beta; }, grad.norm.dbeta, tol);
  resnorm_test::check_parameter_gradient(
      "sublayer.weight", block, x, u, [](auto& b) -> auto& { return b.sublayer.weight; },
      grad.sublayer.dweight, tol);
  resnorm_test::check_parameter_gradient(
      "sublayer.bias", block, x, u, [](auto& b) -> auto& { return b.sublayer.bias; },
      grad.sublayer.dbias, tol);

  const pre_ln_block<mlp<S>> mlp_block(make_norm<S>(dim), make_mlp<S>(dim));
  const auto mlp_grad = mlp_block.vjp(x, u);
  resnorm_test::check_parameter_gradient(
      "norm.gamma", mlp_block, x, u, [](auto& b) -> auto& { return b.norm.gamma; },
      mlp_grad.norm.dgamma, tol);
  resnorm_test::check_parameter_gradient(
      "sublayer.first.weight", mlp_block, x, u,
      [](auto& b) -> auto& { return b.sublayer.first.weight; }, mlp_grad.sublayer.first.dweight,
      tol);
  resnorm_test::check_parameter_gradient(
      "sublayer.first.bias", mlp_block, x, u,
      [](auto& b) -> auto& { return b.sublayer.first.bias; }, mlp_grad.sublayer.first.dbias, tol);
}

TEMPLATE_TEST_CASE("pre_ln_block: a zero sublayer makes the block exactly the identity",
                   "[pre_ln_block][edge]", float, double) {
  using S = TestType;
  for (const Eigen::Index rows : {0, 1, 3}) {
    CAPTURE(rows);
    const Eigen::Index dim = 6;
    const pre_ln_block<linear<S>> block(make_norm<S>(dim), linear<S>::zeros(dim, dim));
    const matrix<S> x = random_matrix<S>(rows, dim, 750, 3.0, 1.0);
    const matrix<S> dy = random_matrix<S>(rows, dim, 751);
    // F ≡ 0: x + 0, I + 0 · J_LN and dy + J_LNᵀ 0 are exact.
    CHECK(max_abs_diff(block.forward(x), x) == 0);
    CHECK(max_abs_diff(block.jacobian(x), matrix<S>::Identity(rows * dim, rows * dim)) == 0);
    CHECK(max_abs_diff(block.jvp(x, dy), dy) == 0);
    const auto grad = block.vjp(x, dy);
    CHECK(max_abs_diff(grad.dx, dy) == 0);
    // Nothing reaches LN through a zero F; W = 0 still has its gradient LN(x)ᵀ dy.
    CHECK(max_abs(grad.norm.dgamma) == 0);
    CHECK(max_abs(grad.norm.dbeta) == 0);
    const matrix<S> dweight = block.norm.forward(x).transpose() * dy;
    CHECK(max_abs_diff(grad.sublayer.dweight, dweight) <=
          16 * eps_of<S>() * (1 + max_abs(dweight)));
  }
}
