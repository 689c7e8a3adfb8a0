// resnorm/sequential.hpp — composition of two maps: y = Second(First(x)).
//
//   x: T x d_in -> First -> u: T x d_mid -> Second -> y: T x d_out.
//
// Jacobian: the chain rule, J = J_Second(u) · J_First(x). vjp() pulls dy back through Second
// then First; jvp() pushes v forward through First then Second. Each of vjp/jvp/jacobian
// recomputes u = First(x) once. Nest to compose more: sequential<A, sequential<B, C>>.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "resnorm/detail/check.hpp"
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
    constexpr const char* fn = "sequential::forward";
    const matrix<scalar_type> u = stage(fn, "first", [&] { return first.forward(x); });
    return stage(fn, "second", [&] { return second.forward(u); });
  }

  // dx = J_Firstᵀ (J_Secondᵀ dy)
  grad_type vjp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> dy) const {
    constexpr const char* fn = "sequential::vjp";
    const matrix<scalar_type> u = stage(fn, "first", [&] { return first.forward(x); });
    auto second_grad = stage(fn, "second", [&] { return second.vjp(u, dy); });
    auto first_grad = stage(fn, "first", [&] { return first.vjp(x, second_grad.dx); });
    matrix<scalar_type> dx = first_grad.dx;
    return {std::move(dx), std::move(first_grad), std::move(second_grad)};
  }

  // J v = J_Second (J_First v)
  matrix<scalar_type> jvp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> v) const {
    constexpr const char* fn = "sequential::jvp";
    const matrix<scalar_type> u = stage(fn, "first", [&] { return first.forward(x); });
    const matrix<scalar_type> first_v = stage(fn, "first", [&] { return first.jvp(x, v); });
    return stage(fn, "second", [&] { return second.jvp(u, first_v); });
  }

  matrix<scalar_type> jacobian(matrix_cref<scalar_type> x) const {
    constexpr const char* fn = "sequential::jacobian";
    const matrix<scalar_type> u = stage(fn, "first", [&] { return first.forward(x); });
    const matrix<scalar_type> second_jacobian =
        stage(fn, "second", [&] { return second.jacobian(u); });
    return second_jacobian * stage(fn, "first", [&] { return first.jacobian(x); });
  }

 private:
  // call() on one stage. The stages check their own arguments; their errors are passed on with
  // the composition's member and the stage in front ("sequential::forward: second: linear::
  // forward: x has 3 columns, weight is 4x2"), since a mismatch between the stages is a mistake
  // in the composition, not in the stage. Costs nothing unless a stage throws.
  template <class Call>
  static auto stage(const char* function, const char* name, const Call& call) {
    try {
      return call();
    } catch (const std::invalid_argument& e) {
      detail::fail(function, std::string(name) + ": " + e.what());
    }
  }
};

}  // namespace resnorm
