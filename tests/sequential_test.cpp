// Tests of resnorm/sequential.hpp: y = Second(First(x)), J = J_Second(u) J_First(x) with
// u = First(x), vjp nesting the parts' gradients as .first and .second.
#include "resnorm/sequential.hpp"

#include <limits>

#include "resnorm/gelu.hpp"
#include "resnorm/linear.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::gelu;
using resnorm::linear;
using resnorm::matrix;
using resnorm::sequential;
using resnorm_test::max_abs;
using resnorm_test::max_abs_diff;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;

template <class S>
double eps_of() {
  return static_cast<double>(std::numeric_limits<S>::epsilon());
}

// Compositions of smooth maps with |y| ≲ 5: eps^(2/3)·|y| with margin, 1e-8 and 2e-3.
template <class S>
double fd_tolerance() {
  return std::is_same_v<S, float> ? 2e-3 : 1e-8;
}

template <class S>
linear<S> make_linear(Eigen::Index d_in, Eigen::Index d_out, std::uint64_t seed) {
  return linear<S>(random_matrix<S>(d_in, d_out, seed, 0.5), random_vector<S>(d_out, seed + 1));
}

// x: 4 wide -> 6 -> 3: the widths change, so the Jacobians are not square.
template <class S>
using two_linears = sequential<linear<S>, linear<S>>;

template <class S>
using linear_gelu = sequential<linear<S>, gelu<S>>;

}  // namespace

TEMPLATE_TEST_CASE("sequential forward and jacobian: the chain rule J = J2(u) J1(x)",
                   "[sequential][forward][jacobian]", float, double) {
  using S = TestType;
  const two_linears<S> ll(make_linear<S>(4, 6, 600), make_linear<S>(6, 3, 602));
  const linear_gelu<S> lg(make_linear<S>(4, 6, 604), gelu<S>{});
  for (const Eigen::Index rows : {0, 1, 3}) {
    CAPTURE(rows);
    const matrix<S> x = random_matrix<S>(rows, 4, 606 + rows);
    CHECK(max_abs_diff(ll.forward(x), ll.second.forward(ll.first.forward(x))) == 0);
    CHECK(max_abs_diff(lg.forward(x), lg.second.forward(lg.first.forward(x))) == 0);

    const matrix<S> J_ll = ll.jacobian(x);
    REQUIRE(J_ll.rows() == rows * 3);
    REQUIRE(J_ll.cols() == rows * 4);
    const matrix<double> chain_ll =
        ll.second.jacobian(ll.first.forward(x)).template cast<double>() *
        ll.first.jacobian(x).template cast<double>();
    // A product of 6-term sums: 8 eps of the terms' size.
    CHECK(max_abs_diff(J_ll, chain_ll) <= 8 * eps_of<S>() * (1 + max_abs(chain_ll)));
    const matrix<double> chain_lg =
        lg.second.jacobian(lg.first.forward(x)).template cast<double>() *
        lg.first.jacobian(x).template cast<double>();
    CHECK(max_abs_diff(lg.jacobian(x), chain_lg) <= 8 * eps_of<S>() * (1 + max_abs(chain_lg)));

    resnorm_test::check_derivatives(ll, x, fd_tolerance<S>());
    resnorm_test::check_derivatives(lg, x, fd_tolerance<S>());
  }
}

TEMPLATE_TEST_CASE("sequential vjp: nests the gradients as .first and .second", "[sequential][vjp]",
                   float, double) {
  using S = TestType;
  const two_linears<S> ll(make_linear<S>(4, 6, 610), make_linear<S>(6, 3, 612));
  const matrix<S> x = random_matrix<S>(3, 4, 614);
  const matrix<S> u = random_matrix<S>(3, 3, 615);
  const auto grad = ll.vjp(x, u);

  // By hand: pull u back through the second linear at u1 = First(x), then through the first.
  const matrix<S> u1 = ll.first.forward(x);
  const auto second = ll.second.vjp(u1, u);
  const auto first = ll.first.vjp(x, second.dx);
  CHECK(max_abs_diff(grad.second.dx, second.dx) == 0);
  CHECK(max_abs_diff(grad.second.dweight, second.dweight) == 0);
  CHECK(max_abs_diff(grad.first.dweight, first.dweight) == 0);
  CHECK(max_abs_diff(grad.dx, first.dx) == 0);
  CHECK(max_abs_diff(grad.dx, grad.first.dx) == 0);

  // And against finite differences of ⟨u, F(x)⟩, by member name.
  resnorm_test::check_parameter_gradient(
      "first.weight", ll, x, u, [](auto& f) -> auto& { return f.first.weight; }, grad.first.dweight,
      fd_tolerance<S>());
  resnorm_test::check_parameter_gradient(
      "first.bias", ll, x, u, [](auto& f) -> auto& { return f.first.bias; }, grad.first.dbias,
      fd_tolerance<S>());
  resnorm_test::check_parameter_gradient(
      "second.weight", ll, x, u, [](auto& f) -> auto& { return f.second.weight; },
      grad.second.dweight, fd_tolerance<S>());

  const linear_gelu<S> lg(make_linear<S>(4, 6, 616), gelu<S>{});
  const matrix<S> v = random_matrix<S>(3, 6, 618);
  const auto grad_lg = lg.vjp(x, v);
  resnorm_test::check_parameter_gradient(
      "first.weight", lg, x, v, [](auto& f) -> auto& { return f.first.weight; },
      grad_lg.first.dweight, fd_tolerance<S>());
}
