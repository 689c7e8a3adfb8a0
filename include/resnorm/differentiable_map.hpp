// resnorm/differentiable_map.hpp — the one interface every primitive, sublayer and block meets.
//
// A differentiable map F takes a T x d_in batch x (one token per row) to a T x d_out batch and
// provides, in this order:
//
//   using scalar_type = ...;                               // float, double, ...
//   matrix<S> forward (matrix_cref<S> x) const;            // y = F(x)
//   G         vjp     (matrix_cref<S> x,                   // vector-Jacobian product (what other
//                      matrix_cref<S> dy) const;           //   frameworks call backward): G is an
//                                                          //   aggregate whose first member is
//                                                          //   `matrix<S> dx` = J^T dy, followed
//                                                          by
//                                                          //   the gradients of F's parameters
//   matrix<S> jvp     (matrix_cref<S> x,                   // Jacobian-vector product J v, with v
//                      matrix_cref<S> v) const;            //   shaped like x
//   matrix<S> jacobian(matrix_cref<S> x) const;            // explicit (T*d_out) x (T*d_in) matrix
//
// with J indexed as described in matrix.hpp (row-major vec). Maps that mix tokens (attention)
// meet the same interface: their Jacobian is simply not block diagonal.
//
// Blocks (residual, pre_ln_block, post_ln_block, sequential) take any differentiable map as their
// sublayer and are differentiable maps themselves, so they nest. Each checks its sublayer with
// require_differentiable_map<F>(), which names the first missing member in the error.
#pragma once

#include <concepts>

#include "resnorm/matrix.hpp"

namespace resnorm {

template <class F>
concept has_scalar_type = requires {
  typename F::scalar_type;
};

template <class F>
concept has_forward = has_scalar_type<F> &&
    requires(const F& f, matrix_cref<typename F::scalar_type> x) {
  { f.forward(x) } -> std::convertible_to<matrix<typename F::scalar_type>>;
};

template <class F>
concept has_vjp = has_scalar_type<F> &&
    requires(const F& f, matrix_cref<typename F::scalar_type> x) {
  { f.vjp(x, x).dx } -> std::convertible_to<matrix<typename F::scalar_type>>;
};

template <class F>
concept has_jvp = has_scalar_type<F> &&
    requires(const F& f, matrix_cref<typename F::scalar_type> x) {
  { f.jvp(x, x) } -> std::convertible_to<matrix<typename F::scalar_type>>;
};

template <class F>
concept has_jacobian = has_scalar_type<F> &&
    requires(const F& f, matrix_cref<typename F::scalar_type> x) {
  { f.jacobian(x) } -> std::convertible_to<matrix<typename F::scalar_type>>;
};

template <class F>
concept differentiable_map =
    has_scalar_type<F> && has_forward<F> && has_vjp<F> && has_jvp<F> && has_jacobian<F>;

// The gradient aggregate returned by F::vjp.
template <class F>
using gradient_t =
    decltype(std::declval<const F&>().vjp(std::declval<matrix_cref<typename F::scalar_type>>(),
                                          std::declval<matrix_cref<typename F::scalar_type>>()));

// Use as `static_assert(require_differentiable_map<Sublayer>());` inside a block: unlike a
// constrained template parameter, it reports which member is missing, one message each.
template <class F>
consteval bool require_differentiable_map() {
  static_assert(has_scalar_type<F>,
                "resnorm: sublayer lacks `using scalar_type = ...;` (see differentiable_map.hpp)");
  if constexpr (has_scalar_type<F>) {
    static_assert(has_forward<F>,
                  "resnorm: sublayer lacks `matrix<scalar_type> forward(matrix_cref<scalar_type> "
                  "x) const` (see differentiable_map.hpp)");
    static_assert(has_vjp<F>,
                  "resnorm: sublayer lacks `vjp(x, dy) const` returning an aggregate whose first "
                  "member is `matrix<scalar_type> dx` (see differentiable_map.hpp)");
    static_assert(has_jvp<F>,
                  "resnorm: sublayer lacks `matrix<scalar_type> jvp(x, v) const` "
                  "(see differentiable_map.hpp)");
    static_assert(has_jacobian<F>,
                  "resnorm: sublayer lacks `matrix<scalar_type> jacobian(x) const` "
                  "(see differentiable_map.hpp)");
  }
  return differentiable_map<F>;
}

}  // namespace resnorm
