// Tests of resnorm/differentiable_map.hpp: every primitive and block meets the concept, and a
// type missing any one member fails exactly that member's concept.
#include "resnorm/differentiable_map.hpp"

#include <string>
#include <type_traits>

#include "resnorm/gelu.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/linear.hpp"
#include "resnorm/post_ln_block.hpp"
#include "resnorm/pre_ln_block.hpp"
#include "resnorm/residual.hpp"
#include "resnorm/sequential.hpp"
#include "support/catch.hpp"

namespace {

using resnorm::differentiable_map;
using resnorm::matrix;
using resnorm::matrix_cref;

// ---- every primitive and block, in float and double ------------------------------------------

template <class S>
using mlp = resnorm::sequential<resnorm::linear<S>, resnorm::gelu<S>>;

template <class S>
constexpr bool all_maps() {
  return differentiable_map<resnorm::layer_norm<S>> && differentiable_map<resnorm::gelu<S>> &&
         differentiable_map<resnorm::linear<S>> &&
         differentiable_map<resnorm::residual<resnorm::linear<S>>> && differentiable_map<mlp<S>> &&
         differentiable_map<resnorm::pre_ln_block<mlp<S>>> &&
         differentiable_map<resnorm::post_ln_block<resnorm::linear<S>>> &&
         // Blocks nest: a block is a sublayer too.
         differentiable_map<resnorm::sequential<resnorm::pre_ln_block<resnorm::linear<S>>,
                                                resnorm::post_ln_block<mlp<S>>>> &&
         differentiable_map<resnorm::residual<resnorm::pre_ln_block<resnorm::gelu<S>>>>;
}
static_assert(all_maps<float>());
static_assert(all_maps<double>());

// The gradient aggregates, by name.
static_assert(std::is_same_v<resnorm::gradient_t<resnorm::layer_norm<float>>,
                             resnorm::layer_norm_grad<float>>);
static_assert(
    std::is_same_v<resnorm::gradient_t<resnorm::linear<double>>, resnorm::linear_grad<double>>);
static_assert(std::is_same_v<resnorm::gradient_t<mlp<double>>,
                             resnorm::sequential_grad<resnorm::linear_grad<double>,
                                                      resnorm::gelu_grad<double>, double>>);

// ---- types missing one member each ------------------------------------------------------------

struct grad_d {
  matrix<double> dx;
};
struct grad_without_dx {
  matrix<double> gradient;
};

struct complete {
  using scalar_type = double;
  matrix<double> forward(matrix_cref<double> x) const { return x; }
  grad_d vjp(matrix_cref<double>, matrix_cref<double> dy) const { return {dy}; }
  matrix<double> jvp(matrix_cref<double>, matrix_cref<double> v) const { return v; }
  matrix<double> jacobian(matrix_cref<double> x) const {
    return matrix<double>::Identity(x.size(), x.size());
  }
};

struct missing_scalar_type {
  matrix<double> forward(matrix_cref<double> x) const { return x; }
  grad_d vjp(matrix_cref<double>, matrix_cref<double> dy) const { return {dy}; }
  matrix<double> jvp(matrix_cref<double>, matrix_cref<double> v) const { return v; }
  matrix<double> jacobian(matrix_cref<double> x) const { return x; }
};

struct missing_forward {
  using scalar_type = double;
  grad_d vjp(matrix_cref<double>, matrix_cref<double> dy) const { return {dy}; }
  matrix<double> jvp(matrix_cref<double>, matrix_cref<double> v) const { return v; }
  matrix<double> jacobian(matrix_cref<double> x) const { return x; }
};

struct missing_vjp {
  using scalar_type = double;
  matrix<double> forward(matrix_cref<double> x) const { return x; }
  matrix<double> jvp(matrix_cref<double>, matrix_cref<double> v) const { return v; }
  matrix<double> jacobian(matrix_cref<double> x) const { return x; }
};

struct missing_jvp {
  using scalar_type = double;
  matrix<double> forward(matrix_cref<double> x) const { return x; }
  grad_d vjp(matrix_cref<double>, matrix_cref<double> dy) const { return {dy}; }
  matrix<double> jacobian(matrix_cref<double> x) const { return x; }
};

struct missing_jacobian {
  using scalar_type = double;
  matrix<double> forward(matrix_cref<double> x) const { return x; }
  grad_d vjp(matrix_cref<double>, matrix_cref<double> dy) const { return {dy}; }
  matrix<double> jvp(matrix_cref<double>, matrix_cref<double> v) const { return v; }
};

// vjp returns an aggregate whose gradient is not called dx.
struct vjp_without_dx {
  using scalar_type = double;
  matrix<double> forward(matrix_cref<double> x) const { return x; }
  grad_without_dx vjp(matrix_cref<double>, matrix_cref<double> dy) const { return {dy}; }
  matrix<double> jvp(matrix_cref<double>, matrix_cref<double> v) const { return v; }
  matrix<double> jacobian(matrix_cref<double> x) const { return x; }
};

// forward returns something that is not a matrix.
struct forward_returns_text {
  using scalar_type = double;
  std::string forward(matrix_cref<double>) const { return "y"; }
  grad_d vjp(matrix_cref<double>, matrix_cref<double> dy) const { return {dy}; }
  matrix<double> jvp(matrix_cref<double>, matrix_cref<double> v) const { return v; }
  matrix<double> jacobian(matrix_cref<double> x) const { return x; }
};

// forward exists but is not const: a block holds its sublayer by value and calls it const.
struct non_const_forward {
  using scalar_type = double;
  matrix<double> forward(matrix_cref<double> x) { return x; }
  grad_d vjp(matrix_cref<double>, matrix_cref<double> dy) const { return {dy}; }
  matrix<double> jvp(matrix_cref<double>, matrix_cref<double> v) const { return v; }
  matrix<double> jacobian(matrix_cref<double> x) const { return x; }
};

using namespace resnorm;  // the member concepts, unqualified below

static_assert(differentiable_map<complete>);
static_assert(require_differentiable_map<complete>());

static_assert(!has_scalar_type<missing_scalar_type>);
static_assert(!has_forward<missing_scalar_type>);  // every member concept needs scalar_type
static_assert(!differentiable_map<missing_scalar_type>);

static_assert(!has_forward<missing_forward>);
static_assert(has_vjp<missing_forward> && has_jvp<missing_forward> &&
              has_jacobian<missing_forward>);
static_assert(!differentiable_map<missing_forward>);

static_assert(!has_vjp<missing_vjp>);
static_assert(has_forward<missing_vjp> && has_jvp<missing_vjp> && has_jacobian<missing_vjp>);
static_assert(!differentiable_map<missing_vjp>);

static_assert(!has_jvp<missing_jvp>);
static_assert(has_forward<missing_jvp> && has_vjp<missing_jvp> && has_jacobian<missing_jvp>);
static_assert(!differentiable_map<missing_jvp>);

static_assert(!has_jacobian<missing_jacobian>);
static_assert(has_forward<missing_jacobian> && has_vjp<missing_jacobian> &&
              has_jvp<missing_jacobian>);
static_assert(!differentiable_map<missing_jacobian>);

static_assert(!has_vjp<vjp_without_dx>);
static_assert(!differentiable_map<vjp_without_dx>);

static_assert(!has_forward<forward_returns_text>);
static_assert(!differentiable_map<forward_returns_text>);

static_assert(!has_forward<non_const_forward>);
static_assert(!differentiable_map<non_const_forward>);

}  // namespace

TEST_CASE("differentiable_map: primitives and blocks meet the concept, incomplete types do not",
          "[differentiable_map]") {
  // The same facts as the static_asserts above, also reported at run time.
  CHECK(all_maps<float>());
  CHECK(all_maps<double>());
  CHECK(differentiable_map<complete>);
  CHECK_FALSE(differentiable_map<missing_scalar_type>);
  CHECK_FALSE(differentiable_map<missing_forward>);
  CHECK_FALSE(differentiable_map<missing_vjp>);
  CHECK_FALSE(differentiable_map<missing_jvp>);
  CHECK_FALSE(differentiable_map<missing_jacobian>);
  CHECK_FALSE(differentiable_map<vjp_without_dx>);
  CHECK_FALSE(differentiable_map<forward_returns_text>);
  CHECK_FALSE(differentiable_map<non_const_forward>);
}

TEST_CASE("differentiable_map: a complete test-local map nests inside the blocks",
          "[differentiable_map]") {
  // The identity map as a residual branch: y = x + x, J = 2I.
  const resnorm::residual<complete> block{complete{}};
  const matrix<double> x = matrix<double>::Constant(2, 3, 1.5);
  CHECK((block.forward(x).array() == 3.0).all());
  CHECK(block.jacobian(x).isApprox(2 * matrix<double>::Identity(6, 6)));
}
