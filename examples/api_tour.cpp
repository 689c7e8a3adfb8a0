// api_tour — the README's tour of the API, built and run so that it never goes stale.
#include <iostream>
#include <resnorm/resnorm.hpp>

int main() {
  using namespace resnorm;

  matrix<double> x(2, 4);  // T = 2 tokens, d = 4 features
  x << 1, 3, 5, 7,         //
      -2, 0, 2, 4;

  layer_norm<double> ln(4);  // gamma = 1, beta = 0, eps = 1e-5
  matrix<double> y = ln.forward(x);
  auto [y2, stats] = ln.forward_with_stats(x);  // plus per-row mean and rstd = 1/sqrt(var + eps)
  auto [dx, dgamma, dbeta] = ln.vjp(x, y, stats);

  // A sublayer F(u) = GELU(u W), and the two placements around it.
  normal_generator rng(42);  // seeded, identical on every machine
  using ffn = sequential<linear<double>, gelu<double>>;
  ffn f(linear<double>(random_normal<double>(4, 4, rng, 0.5)), gelu<double>());

  pre_ln_block<ffn> pre(layer_norm<double>(4), f);    // y = x + F(LN(x))
  post_ln_block<ffn> post(f, layer_norm<double>(4));  // y = LN(x + F(x))

  auto g = pre.vjp(x, matrix<double>::Ones(2, 4));  // gradients nest by member name
  std::cout << "dx:\n"
            << g.dx << "\nnorm.dgamma: " << g.norm.dgamma.transpose()
            << "\nsublayer.first.dweight:\n"
            << g.sublayer.first.dweight << "\n";

  matrix<double> J = post.jacobian(x);    // (T·d) x (T·d) = 8 x 8
  auto report = check_jacobian(post, x);  // against central finite differences, in double
  std::cout << "Post-LN Jacobian " << J.rows() << "x" << J.cols() << ": " << report.describe()
            << "\n";
  std::cout << "LN: y(0, 0) = " << y(0, 0) << ", dgamma = " << dgamma.transpose() << "\n";
  return report.max_rel_error < 1e-7 && y2.isApprox(y) && dx.allFinite() && dbeta.size() == 4 ? 0
                                                                                              : 1;
}
