// resnorm/detail/check.hpp — argument checks shared by every public entry point.
//
// Checks are always on (not asserts): each costs one comparison per call, never per element,
// and throws std::invalid_argument naming the function, the argument and both shapes.
#pragma once

#include <Eigen/Core>
#include <stdexcept>
#include <string>

namespace resnorm::detail {

inline std::string shape_string(Eigen::Index rows, Eigen::Index cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

[[noreturn]] inline void fail(const char* function, const std::string& what) {
  throw std::invalid_argument(std::string(function) + ": " + what);
}

// "layer_norm: gamma has 3 elements, x has 4 columns"
inline void check_length(const char* function, const char* name, Eigen::Index length,
                         const char* against, Eigen::Index expected, const char* unit) {
  if (length != expected) {
    fail(function, std::string(name) + " has " + std::to_string(length) + " elements, " + against +
                       " has " + std::to_string(expected) + " " + unit);
  }
}

// "layer_norm::vjp: dy is 2x3, x is 2x4"
template <class A, class B>
void check_same_shape(const char* function, const char* name_a, const A& a, const char* name_b,
                      const B& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) {
    fail(function, std::string(name_a) + " is " + shape_string(a.rows(), a.cols()) + ", " + name_b +
                       " is " + shape_string(b.rows(), b.cols()));
  }
}

// "linear: x has 5 columns, weight is 4x8 (expects 4 input features)"
template <class X, class W>
void check_inner_dim(const char* function, const X& x, const char* name_w, const W& w) {
  if (x.cols() != w.rows()) {
    fail(function, "x has " + std::to_string(x.cols()) + " columns, " + name_w + " is " +
                       shape_string(w.rows(), w.cols()) + " (expects " + std::to_string(w.rows()) +
                       " input features)");
  }
}

template <class Scalar>
void check_epsilon(const char* function, Scalar eps) {
  // !(eps >= 0) also rejects NaN.
  if (!(eps >= Scalar(0))) fail(function, "eps must be >= 0, got " + std::to_string(double(eps)));
}

// F(x) for a sublayer on a residual highway, which must return the shape of x.
template <class F, class X>
auto forward_keeping_shape(const char* function, const F& f, const X& x) {
  auto y = f.forward(x);
  check_same_shape(function, "sublayer output", y, "x", x);
  return y;
}

// vjp() of a sublayer on a residual highway, which hands the sublayer a dy of x's shape: right
// only if F keeps that shape. Finding out up front would cost a forward pass of F on every call,
// so F runs forward only once its vjp has thrown: if F changes the shape, that is the error to
// report, under the caller's name; otherwise (or if F rejects x itself) the vjp's own error
// stands.
template <class F, class X, class Vjp>
auto vjp_keeping_shape(const char* function, const F& f, const X& x, const Vjp& vjp) {
  try {
    return vjp();
  } catch (const std::invalid_argument&) {
    Eigen::Index rows = x.rows(), cols = x.cols();
    try {
      const auto y = f.forward(x);
      rows = y.rows();
      cols = y.cols();
    } catch (const std::invalid_argument&) {
      // F rejects x itself, as its vjp just did: the vjp's error is rethrown below.
    }
    if (rows != x.rows() || cols != x.cols()) {
      fail(function, "sublayer output is " + shape_string(rows, cols) + ", x is " +
                         shape_string(x.rows(), x.cols()));
    }
    throw;
  }
}

// A block whose highway adds the identity needs the sublayer to keep x's shape, so its
// Jacobian must be (T·d) x (T·d).
template <class J, class X>
void check_shape_preserving_jacobian(const char* function, const J& jacobian, const X& x) {
  if (jacobian.rows() != x.size() || jacobian.cols() != x.size()) {
    fail(function, "sublayer Jacobian is " + shape_string(jacobian.rows(), jacobian.cols()) +
                       ", x has " + std::to_string(x.size()) +
                       " entries (the sublayer must keep the shape of x)");
  }
}

}  // namespace resnorm::detail
