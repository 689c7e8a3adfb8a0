// resnorm/dynamic_tanh.hpp — Dynamic Tanh (DyT, Zhu et al. 2025), a drop-in for LayerNorm.
//
//   y = gamma ⊙ tanh(alpha · x) + beta,   elementwise on a T x d matrix x,
//   alpha: a learned scalar (0.5 at initialisation, the paper's default for non-LLM models),
//   gamma, beta: per-feature (length d) or empty (absent: gamma = 1, beta = 0).
//
// No statistics: each entry is squashed on its own, so tokens and features never mix.
// Jacobian: diagonal, diag(vec(gamma ⊙ alpha · (1 − tanh²(alpha · x)))). It is a
// differentiable_map, so it can stand wherever a LayerNorm does (the Norm parameter of
// pre_ln_block, post_ln_block, norm_block). jacobian() materialises the (T·d) x (T·d) matrix;
// vjp()/jvp() cost O(T·d).
//
// Numerics: evaluated in accumulator_t<Scalar> and rounded once; 1 − tanh² rather than 1/cosh²,
// which overflows for large |alpha·x|.
#pragma once

#include <cmath>
#include <string>
#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

template <class Scalar>
struct dynamic_tanh_grad {
  matrix<Scalar> dx;      // T x d
  Scalar dalpha;          // scalar
  vector<Scalar> dgamma;  // d, empty when the layer has no gamma
  vector<Scalar> dbeta;   // d, empty when the layer has no beta
};

template <class Scalar>
class dynamic_tanh {
 public:
  using scalar_type = Scalar;
  using accumulator_type = accumulator_t<Scalar>;

  Scalar alpha = Scalar(0.5);
  vector<Scalar> gamma;  // d, or empty
  vector<Scalar> beta;   // d, or empty

  dynamic_tanh() = default;

  // gamma = 1, beta = 0 of length dim, alpha as given.
  explicit dynamic_tanh(index dim, Scalar initial_alpha = Scalar(0.5))
      : alpha(initial_alpha),
        gamma(vector<Scalar>::Ones(dim < 0 ? 0 : dim)),
        beta(vector<Scalar>::Zero(dim < 0 ? 0 : dim)) {
    if (dim < 0) detail::fail("dynamic_tanh", "dim must be >= 0, got " + std::to_string(dim));
  }

  dynamic_tanh(Scalar initial_alpha, vector<Scalar> scale, vector<Scalar> shift)
      : alpha(initial_alpha), gamma(std::move(scale)), beta(std::move(shift)) {
    if (has_gamma() && has_beta()) {
      detail::check_length("dynamic_tanh", "beta", beta.size(), "gamma", gamma.size(), "elements");
    }
  }

  bool has_gamma() const { return gamma.size() != 0; }
  bool has_beta() const { return beta.size() != 0; }

  // y = gamma ⊙ tanh(alpha x) + beta
  matrix<Scalar> forward(matrix_cref<Scalar> x) const {
    check_x("dynamic_tanh::forward", x);
    matrix<Scalar> y(x.rows(), x.cols());
    for (index t = 0; t < x.rows(); ++t) {
      for (index j = 0; j < x.cols(); ++j) {
        const accumulator_type th = std::tanh(a() * static_cast<accumulator_type>(x(t, j)));
        y(t, j) = static_cast<Scalar>(th * gamma_at(j) + beta_at(j));
      }
    }
    return y;
  }

  // With th = tanh(alpha x) and s = 1 − th²:
  //   dx     = dy ⊙ gamma ⊙ alpha ⊙ s
  //   dalpha = Σ dy ⊙ gamma ⊙ x ⊙ s      (alpha is shared by every entry)
  //   dgamma = Σ_rows dy ⊙ th,   dbeta = Σ_rows dy
  dynamic_tanh_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy) const {
    check_x("dynamic_tanh::vjp", x);
    detail::check_same_shape("dynamic_tanh::vjp", "dy", dy, "x", x);
    const index d = x.cols();
    using acc_vector = Eigen::Matrix<accumulator_type, Eigen::Dynamic, 1>;
    acc_vector dgamma = acc_vector::Zero(has_gamma() ? d : 0);
    acc_vector dbeta = acc_vector::Zero(has_beta() ? d : 0);
    accumulator_type dalpha = 0;
    dynamic_tanh_grad<Scalar> grad{matrix<Scalar>(x.rows(), d), Scalar(0), {}, {}};
    for (index t = 0; t < x.rows(); ++t) {
      for (index j = 0; j < d; ++j) {
        const accumulator_type xv = static_cast<accumulator_type>(x(t, j));
        const accumulator_type g = static_cast<accumulator_type>(dy(t, j)) * gamma_at(j);
        const accumulator_type th = std::tanh(a() * xv);
        const accumulator_type s = accumulator_type(1) - th * th;
        grad.dx(t, j) = static_cast<Scalar>(g * a() * s);
        dalpha += g * xv * s;
        if (has_gamma()) dgamma[j] += static_cast<accumulator_type>(dy(t, j)) * th;
        if (has_beta()) dbeta[j] += static_cast<accumulator_type>(dy(t, j));
      }
    }
    grad.dalpha = static_cast<Scalar>(dalpha);
    if (has_gamma()) grad.dgamma = dgamma.template cast<Scalar>();
    if (has_beta()) grad.dbeta = dbeta.template cast<Scalar>();
    return grad;
  }

  // J v = gamma ⊙ alpha (1 − tanh²(alpha x)) ⊙ v
  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    check_x("dynamic_tanh::jvp", x);
    detail::check_same_shape("dynamic_tanh::jvp", "v", v, "x", x);
    return v.cwiseProduct(derivative(x));
  }

  // diag(vec(gamma ⊙ alpha (1 − tanh²(alpha x))))
  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    check_x("dynamic_tanh::jacobian", x);
    const matrix<Scalar> g = derivative(x);
    matrix<Scalar> J = matrix<Scalar>::Zero(g.size(), g.size());
    J.diagonal() = Eigen::Map<const vector<Scalar>>(g.data(), g.size());
    return J;
  }

  // ∂y/∂x elementwise: the Jacobian's diagonal as a T x d matrix.
  matrix<Scalar> derivative(matrix_cref<Scalar> x) const {
    // The loop reads gamma[j] for every column j of x.
    check_x("dynamic_tanh::derivative", x);
    matrix<Scalar> out(x.rows(), x.cols());
    for (index t = 0; t < x.rows(); ++t) {
      for (index j = 0; j < x.cols(); ++j) {
        const accumulator_type th = std::tanh(a() * static_cast<accumulator_type>(x(t, j)));
        out(t, j) = static_cast<Scalar>(gamma_at(j) * a() * (accumulator_type(1) - th * th));
      }
    }
    return out;
  }

 private:
  accumulator_type a() const { return static_cast<accumulator_type>(alpha); }
  accumulator_type gamma_at(index j) const {
    return has_gamma() ? static_cast<accumulator_type>(gamma[j]) : accumulator_type(1);
  }
  accumulator_type beta_at(index j) const {
    return has_beta() ? static_cast<accumulator_type>(beta[j]) : accumulator_type(0);
  }

  void check_x(const char* function, const matrix_cref<Scalar>& x) const {
    if (has_gamma())
      detail::check_length(function, "gamma", gamma.size(), "x", x.cols(), "columns");
    if (has_beta()) detail::check_length(function, "beta", beta.size(), "x", x.cols(), "columns");
  }
};

static_assert(differentiable_map<dynamic_tanh<float>>);
static_assert(differentiable_map<dynamic_tanh<double>>);

}  // namespace resnorm
