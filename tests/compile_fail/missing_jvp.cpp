// Must not compile: a sublayer without jvp(x, v).
// resnorm::residual checks its sublayer with require_differentiable_map, whose static_assert
// names the missing member (tests/compile_fail/CMakeLists.txt matches the message).
#include "resnorm/residual.hpp"

namespace {

using S = double;
using resnorm::matrix;
using resnorm::matrix_cref;

struct broken_grad {
  matrix<S> dx;
};

struct broken_sublayer {
  using scalar_type = S;
  matrix<S> forward(matrix_cref<S> x) const { return x; }
  broken_grad vjp(matrix_cref<S>, matrix_cref<S> dy) const { return {dy}; }
  matrix<S> jacobian(matrix_cref<S> x) const { return matrix<S>::Identity(x.size(), x.size()); }
};

}  // namespace

int main() {
  const resnorm::residual<broken_sublayer> block{broken_sublayer{}};
  (void)block;
}
