// resnorm/sequential.hpp — composition of two maps: y = Second(First(x)).
//
//   x: T x d_in -> First -> u: T x d_mid -> Second -> y: T x d_out.
//
// Jacobian: the chain rule, J = J_Second(u) · J_First(x). vjp() pulls dy back through Second
// then First; jvp() pushes v forward through First then Second. Each of vjp/jvp/jacobian
// recomputes u = First(x) once. Nest to compose more: sequential<A, sequential<B, C>>.
#pragma once

#include <type_traits>
#include <utility>

#include "resnorm/differentiable_map.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

template <class FirstGrad, class SecondGrad, class Scalar>
struct sequential_grad {
  matrix<Scalar> dx;
  FirstGrad first;
  SecondGrad second;
};

template <class First, class Second>
class sequential {
  static_assert(require_differentiable_map<First>());
  static_assert(require_differentiable_map<Second>());
  static_assert(std::is_same_v<typename First::scalar_type, typename Second::scalar_type>,
                "sequential: First and Second must share one scalar_type");

 public:
  using scalar_type = typename First::scalar_type;
  using grad_type = sequential_grad<gradient_t<First>, gradient_t<Second>, scalar_type>;

  First first;
  Second second;

  sequential() = default;
  sequential(First f, Second g) : first(std::move(f)), second(std::move(g)) {}

  matrix<scalar_type> forward(matrix_cref<scalar_type> x) const {
    return second.forward(first.forward(x));
  }

  // dx = J_Firstᵀ (J_Secondᵀ dy)
  grad_type vjp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> dy) const {
    const matrix<scalar_type> u = first.forward(x);
    auto second_grad = second.vjp(u, dy);
    auto first_grad = first.vjp(x, second_grad.dx);
    matrix<scalar_type> dx = first_grad.dx;
    return {std::move(dx), std::move(first_grad), std::move(second_grad)};
  }

  // J v = J_Second (J_First v)
  matrix<scalar_type> jvp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> v) const {
    const matrix<scalar_type> u = first.forward(x);
    return second.jvp(u, first.jvp(x, v));
  }

  matrix<scalar_type> jacobian(matrix_cref<scalar_type> x) const {
    const matrix<scalar_type> u = first.forward(x);
    return second.jacobian(u) * first.jacobian(x);
  }
};

}  // namespace resnorm
