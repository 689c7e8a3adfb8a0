// tests/support/test_util.hpp — small helpers shared by resnorm's tests.
//
//   max_abs_diff(a, b), max_abs(a)        worst entry, in double, of any two Eigen objects
//   max_rel_diff(a, b)                    max |a − b| relative to max |b|
//   same_bits(a, b, n)                    n elements at a and b bitwise equal
//   values_around(values)                 each value, its negation, one ulp either side; NaN, ±inf
//   group_tally, check_group_tally(t)     a vectorised group against its rows one by one
//   vec(m), unvec(v, rows, cols)          row-major flattening, as Jacobians index it
//   random_matrix<S>(rows, cols, seed)    seeded N(mean, std²) entries via resnorm::random_normal
//   check_derivatives(f, x, tolerance)    jacobian() vs finite differences, vjp vs Jᵀu,
//                                         jvp vs Jv and ⟨u, Jv⟩ = ⟨Jᵀu, v⟩, each CHECKed
//   check_parameter_gradient(...)         a parameter gradient vs finite differences of ⟨u, F(x)⟩
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "resnorm/finite_difference.hpp"
#include "resnorm/matrix.hpp"
#include "resnorm/random.hpp"
#include "support/catch.hpp"

namespace resnorm_test {

using resnorm::index;
using dmatrix = resnorm::matrix<double>;
using dvector = resnorm::vector<double>;

// Bitwise equality of n elements (−0 and +0 differ, a NaN equals its own bits). n = 0 is
// equal without a call: memcmp must not be passed an empty matrix's null data().
template <class S>
bool same_bits(const S* a, const S* b, index n) {
  return n == 0 || std::memcmp(a, b, sizeof(S) * static_cast<std::size_t>(n)) == 0;
}

// Each value of both signs and one ulp either side of it, then NaN and the infinities: the
// edges of a range test.
inline std::vector<double> values_around(const std::vector<double>& values) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> out;
  for (double v : values) {
    for (double s : {v, -v}) {
      out.insert(out.end(), {s, std::nextafter(s, -inf), std::nextafter(s, inf)});
    }
  }
  out.insert(out.end(), {std::numeric_limits<double>::quiet_NaN(), inf, -inf});
  return out;
}

// An element of v drawn uniformly.
template <class V>
const typename V::value_type& pick(const V& v, std::mt19937_64& draw) {
  return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(draw)];
}

// The tally of a vectorised group's answers (all rows held, or refused to the rows' own path)
// against the rows' answers one by one.
struct group_tally {
  int mismatches = 0, held = 0, refused = 0;
  void add(bool same, bool group_held) {
    mismatches += !same;
    (group_held ? held : refused) += 1;
  }
};

// No mismatch, and both answers reached often: a comparison that only ever saw one answer
// could not fail on the other.
inline void check_group_tally(const group_tally& tally, int at_least = 1000) {
  CHECK(tally.mismatches == 0);
  CHECK(tally.held > at_least);
  CHECK(tally.refused > at_least);
}

// The first 64-byte (cache line) boundary in buffer, where the streamed kernels' tests place
// rows; the buffer needs 64 bytes more than the rows it holds.
template <class S>
S* first_line_in(std::vector<S>& buffer) {
  const std::size_t past = reinterpret_cast<std::uintptr_t>(buffer.data()) % 64;
  return buffer.data() + (64 - past) % 64 / sizeof(S);
}

// max |a − b| over all entries, in double; NaN as soon as one difference is NaN, so a NaN never
// passes a `<= tolerance` check.
template <class A, class B>
double max_abs_diff(const Eigen::DenseBase<A>& a, const Eigen::DenseBase<B>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  double worst = 0;
  for (index i = 0; i < a.rows(); ++i) {
    for (index j = 0; j < a.cols(); ++j) {
      const double e = std::abs(static_cast<double>(a(i, j)) - static_cast<double>(b(i, j)));
      if (std::isnan(e)) return e;
      worst = std::max(worst, e);
    }
  }
  return worst;
}

// max |a| over all entries, in double (0 when empty); NaN as soon as one entry is NaN, so a NaN
// never passes a `<= tolerance` check.
template <class A>
double max_abs(const Eigen::DenseBase<A>& a) {
  double worst = 0;
  for (index i = 0; i < a.rows(); ++i) {
    for (index j = 0; j < a.cols(); ++j) {
      const double e = std::abs(static_cast<double>(a(i, j)));
      if (std::isnan(e)) return e;
      worst = std::max(worst, e);
    }
  }
  return worst;
}

// max |a − b| / max |b| over all entries, in double: the error of a relative to the reference b
// (divided by 1 when b is all zeros, 0 when both are empty).
template <class A, class B>
double max_rel_diff(const Eigen::DenseBase<A>& a, const Eigen::DenseBase<B>& b) {
  const double scale = max_abs(b);
  const double error =
      max_abs((a.derived().template cast<double>() - b.derived().template cast<double>()).eval());
  return error / (scale > 0 ? scale : 1.0);
}

// vec(m): entry (t, j) of a T x d matrix at index t * d + j (see matrix.hpp).
template <class S>
resnorm::vector<S> vec(const resnorm::matrix<S>& m) {
  return Eigen::Map<const resnorm::vector<S>>(m.data(), m.size());
}

template <class S>
resnorm::matrix<S> unvec(const resnorm::vector<S>& v, index rows, index cols) {
  REQUIRE(v.size() == rows * cols);
  return Eigen::Map<const resnorm::matrix<S>>(v.data(), rows, cols);
}

template <class S>
resnorm::matrix<S> random_matrix(index rows, index cols, std::uint64_t seed, double std_dev = 1.0,
                                 double mean = 0.0) {
  resnorm::normal_generator rng(seed);
  return resnorm::random_normal<S>(rows, cols, rng, std_dev, mean);
}

template <class S>
resnorm::vector<S> random_vector(index size, std::uint64_t seed, double std_dev = 1.0,
                                 double mean = 0.0) {
  return vec(random_matrix<S>(size, 1, seed, std_dev, mean));
}

// Tolerance of the algebraic identities vjp = Jᵀu, jvp = Jv and ⟨u, Jv⟩ = ⟨Jᵀu, v⟩, relative to
// the size of the terms summed (max|J|·max|u|, resp. ‖u‖·‖J‖_F·‖v‖): both sides are the same
// sums in a different order, so they differ by rounding only, at most ~n·eps for n ≤ a few
// hundred terms; a wrong formula is off by O(1).
template <class S>
double consistency_tolerance() {
  return 1000.0 * static_cast<double>(std::numeric_limits<S>::epsilon());
}

// The three-way check of a map's derivatives at x: jacobian() against central finite differences
// (max_rel_error <= fd_tolerance), vjp(x, u).dx against Jᵀ vec(u), jvp(x, v) against J vec(v),
// and the adjoint identity, for seeded random u (shaped like F(x)) and v (shaped like x).
// entry_scale: the size of the terms an entry of J is a difference of, when larger than max|J|
// (LayerNorm's entries are rstd·(δ − 1/d − xhat xhat/d), which cancel to ~eps·rstd at d = 2);
// the rounding of vjp and jvp scales with it.
template <class F>
void check_derivatives(const F& f, const resnorm::matrix<typename F::scalar_type>& x,
                       double fd_tolerance, double entry_scale = 0, std::uint64_t seed = 20260101) {
  using S = typename F::scalar_type;
  const double tol = consistency_tolerance<S>();

  const resnorm::jacobian_check fd = resnorm::check_jacobian(f, x);
  {
    INFO("jacobian() vs finite differences: " << fd.describe());
    CHECK(fd.max_rel_error <= fd_tolerance);
  }

  const resnorm::matrix<S> y = f.forward(x);
  const resnorm::matrix<S> u = random_matrix<S>(y.rows(), y.cols(), seed);
  const resnorm::matrix<S> v = random_matrix<S>(x.rows(), x.cols(), seed + 1);
  const dmatrix J = f.jacobian(x).template cast<double>();
  REQUIRE(J.rows() == y.size());
  REQUIRE(J.cols() == x.size());

  const resnorm::matrix<S> dx = f.vjp(x, u).dx;
  const resnorm::matrix<S> jv = f.jvp(x, v);
  REQUIRE(dx.rows() == x.rows());
  REQUIRE(dx.cols() == x.cols());
  REQUIRE(jv.rows() == y.rows());
  REQUIRE(jv.cols() == y.cols());

  const double j_scale = std::max(entry_scale, max_abs(J));
  const dvector jt_u = J.transpose() * vec(u).template cast<double>();
  const dvector j_v = J * vec(v).template cast<double>();
  const double vjp_error = max_abs_diff(vec(dx), jt_u);
  const double jvp_error = max_abs_diff(vec(jv), j_v);
  {
    INFO("vjp vs J^T u: max abs error " << vjp_error << ", scale " << j_scale * max_abs(u));
    CHECK(vjp_error <= tol * j_scale * max_abs(u));
  }
  {
    INFO("jvp vs J v: max abs error " << jvp_error << ", scale " << j_scale * max_abs(v));
    CHECK(jvp_error <= tol * j_scale * max_abs(v));
  }

  const double u_jv = vec(u).template cast<double>().dot(vec(jv).template cast<double>());
  const double jtu_v = vec(dx).template cast<double>().dot(vec(v).template cast<double>());
  const double adjoint_scale =
      vec(u).template cast<double>().norm() * J.norm() * vec(v).template cast<double>().norm();
  {
    INFO("adjoint identity: <u, Jv> = " << u_jv << ", <J^T u, v> = " << jtu_v << ", scale "
                                        << adjoint_scale);
    CHECK(std::abs(u_jv - jtu_v) <= tol * adjoint_scale);
  }
}

// A parameter gradient (dgamma, dweight, ...) of the loss ⟨u, F(x)⟩ against central differences:
// access(f) returns a reference to the parameter inside a copy of f, so nested parameters are
// reached by member name (e.g. [](auto& b) -> auto& { return b.norm.gamma; }). Passes when
// max|analytic − numeric| <= tolerance · (1 + max|numeric|).
template <class F, class Access, class Gradient>
void check_parameter_gradient(const char* name, const F& f,
                              const resnorm::matrix<typename F::scalar_type>& x,
                              const resnorm::matrix<typename F::scalar_type>& u, Access access,
                              const Gradient& analytic, double tolerance) {
  F copy = f;
  const auto p0 = access(copy);  // the parameter's value, by copy
  const auto loss = [&](const std::decay_t<decltype(p0)>& p) {
    access(copy) = p;
    return (u.template cast<double>().array() * copy.forward(x).template cast<double>().array())
        .sum();
  };
  const auto numeric = resnorm::finite_difference_gradient(loss, p0);
  INFO("gradient of <u, F(x)> with respect to " << name);
  REQUIRE(analytic.rows() == numeric.rows());
  REQUIRE(analytic.cols() == numeric.cols());
  const double error = max_abs_diff(analytic, numeric);
  INFO("max abs error " << error << ", scale " << max_abs(numeric));
  CHECK(error <= tolerance * (1 + max_abs(numeric)));
}

}  // namespace resnorm_test
