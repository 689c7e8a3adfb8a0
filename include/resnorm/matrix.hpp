// resnorm/matrix.hpp — the matrix and vector types every resnorm primitive speaks.
//
// A batch of tokens is a row-major T x d matrix: one token per row, features along the row,
// so a row is contiguous and per-token work (normalisation, its Jacobian) walks memory in order.
// Per-feature parameters (gamma, beta, bias) are column vectors of length d, as in Eigen.
//
// Jacobians act on vec(x), the row-major flattening of x: entry (t, j) of a T x d matrix sits at
// index t * d + j. A map from T x d_in to T x d_out therefore has a (T * d_out) x (T * d_in)
// Jacobian whose entry [(t, i), (s, j)] is d y(t, i) / d x(s, j).
#pragma once

#include <Eigen/Core>
#include <type_traits>

namespace resnorm {

using index = Eigen::Index;

// T x d, one token per row.
template <class Scalar>
using matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Per-feature parameters (gamma, beta, bias) and per-row statistics.
template <class Scalar>
using vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

// Read-only view accepted by every entry point: a matrix, an Eigen::Map or a row-major block
// binds without a copy.
template <class Scalar>
using matrix_cref = Eigen::Ref<const matrix<Scalar>>;

template <class Scalar>
using vector_cref = Eigen::Ref<const vector<Scalar>>;

// The type reductions (means, variances, dot products along a row) accumulate in: at least as
// wide as double, so a float row of large offset keeps its mean to ~1e-16 relative and the
// centred values x - mean lose nothing to the rounding of the mean.
template <class Scalar>
using accumulator_t = std::conditional_t<(sizeof(Scalar) < sizeof(double)), double, Scalar>;

// Σ over the rows of m: a column vector of length m.cols(), summed in accumulator_t and rounded
// once (a bf16 running sum would keep 8 bits of a long column; Eigen's bf16 packet sum does not
// even compile under AVX-512). With no rows it is zeros, without forming Eigen's column blocks of
// an empty matrix (a null data pointer plus the column's offset: undefined behaviour, which
// clang's UBSan reports).
template <class Derived>
vector<typename Derived::Scalar> column_sums(const Eigen::MatrixBase<Derived>& m) {
  using Scalar = typename Derived::Scalar;
  if (m.rows() == 0) return vector<Scalar>::Zero(m.cols());
  return m.template cast<accumulator_t<Scalar>>()
      .colwise()
      .sum()
      .transpose()
      .template cast<Scalar>();
}

}  // namespace resnorm
