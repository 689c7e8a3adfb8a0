// tests/reference/linear_reference.hpp — y = x W + b as plain loops in long double.
//
//   x: T x d_in,  W: d_in x d_out,  b: d_out or empty (no bias),
//   y(t, i) = Σ_j x(t, j) W(j, i) + b_i.
#pragma once

#include <Eigen/Core>

#include "reference/layer_norm_reference.hpp"  // ld_matrix
#include "resnorm/matrix.hpp"

namespace resnorm_reference {

template <class S>
ld_matrix linear_forward(const resnorm::matrix<S>& x, const resnorm::matrix<S>& weight,
                         const resnorm::vector<S>& bias = resnorm::vector<S>()) {
  const Eigen::Index T = x.rows(), d_in = weight.rows(), d_out = weight.cols();
  ld_matrix y(T, d_out);
  for (Eigen::Index t = 0; t < T; ++t) {
    for (Eigen::Index i = 0; i < d_out; ++i) {
      long double sum = bias.size() ? static_cast<long double>(bias[i]) : 0.0L;
      for (Eigen::Index j = 0; j < d_in; ++j) {
        sum += static_cast<long double>(x(t, j)) * static_cast<long double>(weight(j, i));
      }
      y(t, i) = sum;
    }
  }
  return y;
}

}  // namespace resnorm_reference
