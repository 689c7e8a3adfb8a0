// Tests that every public entry point rejects a misuse with std::invalid_argument whose message
// names the function, the argument and both shapes, e.g.
//   "layer_norm::forward: gamma has 3 elements, x has 4 columns".
//
// One helper, check_rejects(call, function, fragments), runs the call once for the type and the
// "function: " prefix, then once per fragment; a fragment quotes an argument with its size
// ("dy is 3x4", "x is 2x4"). Sizes are pairwise distinct (2 rows, 4 features, a wrong length of 3,
// 5 or 7), so a message that quotes the wrong size cannot pass by coincidence.

// Eigen's own assertions (a mismatched sum inside an entry point that does not check its
// arguments) throw here instead of aborting, so such a misuse fails its own test case rather than
// the whole executable. std::runtime_error is deliberately not std::invalid_argument.
#include <stdexcept>

namespace errors_test {
struct eigen_assertion : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace errors_test

// Before any Eigen header.
#define eigen_assert(x) \
  ((x) ? static_cast<void>(0) : throw errors_test::eigen_assertion("eigen_assert failed: " #x))

#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "resnorm/add_norm.hpp"
#include "resnorm/attention.hpp"
#include "resnorm/dynamic_tanh.hpp"
#include "resnorm/feed_forward.hpp"
#include "resnorm/finite_difference.hpp"
#include "resnorm/gelu.hpp"
#include "resnorm/kernels/gelu_kernel.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/linear.hpp"
#include "resnorm/norm_block.hpp"
#include "resnorm/post_ln_block.hpp"
#include "resnorm/pre_ln_block.hpp"
#include "resnorm/residual.hpp"
#include "resnorm/rms_norm.hpp"
#include "resnorm/sequential.hpp"
#include "resnorm/softmax.hpp"
#include "resnorm/transformer_layer.hpp"
#include "resnorm/transformer_stack.hpp"
#include "support/catch.hpp"

namespace {

using resnorm::index;
using resnorm::matrix;
using resnorm::vector;

// call() throws std::invalid_argument; its message starts with "function: " and contains every
// fragment.
template <class Call>
void check_rejects(const Call& call, const std::string& function,
                   std::initializer_list<std::string> fragments) {
  INFO("entry point: " << function);
  CHECK_THROWS_MATCHES(call(), std::invalid_argument,
                       resnorm_test::message_contains(function + ": "));
  for (const std::string& fragment : fragments) {
    CHECK_THROWS_WITH(call(), resnorm_test::contains(fragment));
  }
}

// The values never matter here: every call must fail before it computes anything.
template <class S>
matrix<S> ones(index rows, index cols) {
  return matrix<S>::Ones(rows, cols);
}

template <class S>
vector<S> ones(index size) {
  return vector<S>::Ones(size);
}

// x is 2x4 throughout; 3 is the wrong length of a per-feature vector or a wrong row count.
constexpr index rows = 2;
constexpr index dim = 4;

template <class S>
S nan() {
  return std::numeric_limits<S>::quiet_NaN();
}

// ---- layer_norm ------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("layer_norm: gamma or beta of the wrong length is rejected",
                   "[errors][layer_norm]", float, double, long double) {
  using S = TestType;
  const matrix<S> x = ones<S>(rows, dim), dy = ones<S>(rows, dim);
  SECTION("gamma") {
    const resnorm::layer_norm<S> ln(ones<S>(3), vector<S>());
    const std::initializer_list<std::string> f = {"gamma has 3 elements", "x has 4 columns"};
    check_rejects([&] { return ln.forward(x); }, "layer_norm::forward", f);
    check_rejects([&] { return ln.stats_of(x); }, "layer_norm::stats_of", f);
    check_rejects([&] { return ln.vjp(x, dy); }, "layer_norm::vjp", f);
    check_rejects([&] { return ln.jvp(x, dy); }, "layer_norm::jvp", f);
    check_rejects([&] { return ln.jacobian(x); }, "layer_norm::jacobian", f);
  }
  SECTION("beta") {
    const resnorm::layer_norm<S> ln(vector<S>(), ones<S>(5));
    const std::initializer_list<std::string> f = {"beta has 5 elements", "x has 4 columns"};
    check_rejects([&] { return ln.forward(x); }, "layer_norm::forward", f);
    check_rejects([&] { return ln.vjp(x, dy); }, "layer_norm::vjp", f);
    check_rejects([&] { return ln.jvp(x, dy); }, "layer_norm::jvp", f);
    check_rejects([&] { return ln.jacobian(x); }, "layer_norm::jacobian", f);
  }
}

TEMPLATE_TEST_CASE("layer_norm: dy, v or stats of the wrong shape are rejected",
                   "[errors][layer_norm]", float, double, long double) {
  using S = TestType;
  const resnorm::layer_norm<S> ln(dim);
  const matrix<S> x = ones<S>(rows, dim);
  check_rejects([&] { return ln.vjp(x, ones<S>(rows, 3)); }, "layer_norm::vjp",
                {"dy is 2x3", "x is 2x4"});
  check_rejects([&] { return ln.vjp(x, ones<S>(3, dim)); }, "layer_norm::vjp",
                {"dy is 3x4", "x is 2x4"});
  check_rejects([&] { return ln.jvp(x, ones<S>(rows, 5)); }, "layer_norm::jvp",
                {"v is 2x5", "x is 2x4"});

  const matrix<S> dy = ones<S>(rows, dim);
  resnorm::layer_norm_stats<S> stats = ln.stats_of(x);
  stats.mean.resize(3);
  check_rejects([&] { return ln.vjp(x, dy, stats); }, "layer_norm::vjp",
                {"stats.mean has 3 elements", "x has 2 rows"});
  stats = ln.stats_of(x);
  stats.rstd.resize(1);
  check_rejects([&] { return ln.vjp(x, dy, stats); }, "layer_norm::vjp",
                {"stats.rstd has 1 elements", "x has 2 rows"});
}

TEMPLATE_TEST_CASE("layer_norm: negative or NaN eps is rejected", "[errors][layer_norm]", float,
                   double, long double) {
  using S = TestType;
  check_rejects([] { return resnorm::layer_norm<S>(dim, S(-1)); }, "layer_norm",
                {"eps must be >= 0", "got -1"});
  check_rejects([] { return resnorm::layer_norm<S>(dim, nan<S>()); }, "layer_norm",
                {"eps must be >= 0", "nan"});
  check_rejects([] { return resnorm::layer_norm<S>(ones<S>(dim), ones<S>(dim), S(-1)); },
                "layer_norm", {"eps must be >= 0", "got -1"});
  // eps is a public member: set after construction, the next call still catches it.
  resnorm::layer_norm<S> ln(dim);
  ln.eps = nan<S>();
  const matrix<S> x = ones<S>(rows, dim);
  check_rejects([&] { return ln.forward(x); }, "layer_norm::forward", {"eps must be >= 0", "nan"});
  ln.eps = S(-1);
  check_rejects([&] { return ln.vjp(x, x); }, "layer_norm::vjp", {"eps must be >= 0", "got -1"});
}

TEMPLATE_TEST_CASE("layer_norm: constructor rejects a negative dim and mismatched gamma/beta",
                   "[errors][layer_norm]", float, double, long double) {
  using S = TestType;
  check_rejects([] { return resnorm::layer_norm<S>(-2); }, "layer_norm",
                {"dim must be >= 0", "got -2"});
  check_rejects([] { return resnorm::layer_norm<S>(ones<S>(dim), ones<S>(3)); }, "layer_norm",
                {"beta has 3 elements", "gamma has 4 elements"});
}

TEMPLATE_TEST_CASE("layer_norm: vjp_into rejects gradients of the wrong length",
                   "[errors][layer_norm][into]", float, double) {
  using S = TestType;
  const resnorm::layer_norm<S> ln(dim);
  const matrix<S> x = ones<S>(rows, dim), dy = ones<S>(rows, dim);
  const resnorm::layer_norm_stats<S> stats = ln.stats_of(x);
  matrix<S> dx(rows, dim);
  vector<S> dgamma(dim), dbeta(dim), short_gamma(3), long_beta(5);
  resnorm::kernels::kernel_workspace ws;
  check_rejects([&] { ln.vjp_into(x, dy, stats, dx, short_gamma, dbeta, ws); },
                "layer_norm::vjp_into", {"dgamma has 3 elements", "gamma has 4 elements"});
  check_rejects([&] { ln.vjp_into(x, dy, dx, dgamma, long_beta, ws); }, "layer_norm::vjp_into",
                {"dbeta has 5 elements", "beta has 4 elements"});
}

// The members check y, dx, dy and the stats themselves, so the message names the member called
// rather than the free kernel it hands them to; forward_into(x, y, stats) with empty stats is an
// error, not a request to skip them.
TEMPLATE_TEST_CASE("layer_norm: _into members name themselves and check y, dx, dy and stats",
                   "[errors][layer_norm][into]", float, double) {
  using S = TestType;
  const resnorm::layer_norm<S> ln(dim);
  const matrix<S> x = ones<S>(rows, dim), dy = ones<S>(rows, dim);
  matrix<S> y(rows, dim), dx(rows, dim), narrow(rows, 3);
  vector<S> dgamma(dim), dbeta(dim);
  resnorm::kernels::kernel_workspace ws;
  check_rejects([&] { ln.forward_into(x, narrow); }, "layer_norm::forward_into",
                {"y is 2x3", "x is 2x4"});
  resnorm::layer_norm_stats<S> stats{vector<double>(3), vector<double>(rows)};
  check_rejects([&] { ln.forward_into(x, y, stats); }, "layer_norm::forward_into",
                {"stats.mean has 3 elements", "x has 2 rows"});
  resnorm::layer_norm_stats<S> empty_stats;
  check_rejects([&] { ln.forward_into(x, y, empty_stats); }, "layer_norm::forward_into",
                {"stats.mean has 0 elements", "x has 2 rows"});
  check_rejects([&] { ln.vjp_into(x, dy, ln.stats_of(x), narrow, dgamma, dbeta, ws); },
                "layer_norm::vjp_into", {"dx is 2x3", "x is 2x4"});
  check_rejects([&] { ln.vjp_into(x, ones<S>(3, dim), ln.stats_of(x), dx, dgamma, dbeta, ws); },
                "layer_norm::vjp_into", {"dy is 3x4", "x is 2x4"});
  check_rejects([&] { ln.vjp_into(x, dy, stats, dx, dgamma, dbeta, ws); }, "layer_norm::vjp_into",
                {"stats.mean has 3 elements", "x has 2 rows"});
  check_rejects([&] { ln.vjp_into(x, dy, narrow, dgamma, dbeta, ws); }, "layer_norm::vjp_into",
                {"dx is 2x3", "x is 2x4"});
  const resnorm::layer_norm<S> short_gamma(ones<S>(3), vector<S>());
  check_rejects([&] { return short_gamma.forward_with_stats(x); }, "layer_norm::forward_with_stats",
                {"gamma has 3 elements", "x has 4 columns"});
}

// ---- rms_norm --------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("rms_norm: wrong gamma, dy, v, rstd, eps and dim are rejected",
                   "[errors][rms_norm]", float, double) {
  using S = TestType;
  const matrix<S> x = ones<S>(rows, dim), dy = ones<S>(rows, dim);
  const resnorm::rms_norm<S> short_gamma(ones<S>(3), S(1e-6));
  const std::initializer_list<std::string> f = {"gamma has 3 elements", "x has 4 columns"};
  check_rejects([&] { return short_gamma.forward(x); }, "rms_norm::forward", f);
  check_rejects([&] { return short_gamma.vjp(x, dy); }, "rms_norm::vjp", f);
  check_rejects([&] { return short_gamma.jvp(x, dy); }, "rms_norm::jvp", f);
  check_rejects([&] { return short_gamma.jacobian(x); }, "rms_norm::jacobian", f);

  const resnorm::rms_norm<S> rn(dim);
  check_rejects([&] { return rn.vjp(x, ones<S>(rows, 5)); }, "rms_norm::vjp",
                {"dy is 2x5", "x is 2x4"});
  check_rejects([&] { return rn.jvp(x, ones<S>(3, dim)); }, "rms_norm::jvp",
                {"v is 3x4", "x is 2x4"});
  const vector<resnorm::accumulator_t<S>> rstd(3);
  check_rejects([&] { return rn.vjp(x, dy, rstd); }, "rms_norm::vjp",
                {"rstd has 3 elements", "x has 2 rows"});

  check_rejects([] { return resnorm::rms_norm<S>(-2); }, "rms_norm",
                {"dim must be >= 0", "got -2"});
  check_rejects([] { return resnorm::rms_norm<S>(dim, S(-1)); }, "rms_norm",
                {"eps must be >= 0", "got -1"});
  check_rejects([] { return resnorm::rms_norm<S>(ones<S>(dim), nan<S>()); }, "rms_norm",
                {"eps must be >= 0", "nan"});
}

// forward_with_stats names itself, and rstd_of checks eps (a public member, so a negative or NaN
// eps can arrive after construction).
TEMPLATE_TEST_CASE("rms_norm: forward_with_stats and rstd_of name themselves and check eps",
                   "[errors][rms_norm]", float, double) {
  using S = TestType;
  const matrix<S> x = ones<S>(rows, dim);
  const resnorm::rms_norm<S> short_gamma(ones<S>(3), S(1e-6));
  check_rejects([&] { return short_gamma.forward_with_stats(x); }, "rms_norm::forward_with_stats",
                {"gamma has 3 elements", "x has 4 columns"});
  resnorm::rms_norm<S> rn(dim);
  rn.eps = S(-1);
  check_rejects([&] { return rn.rstd_of(x); }, "rms_norm::rstd_of", {"eps must be >= 0", "got -1"});
}

// ---- dynamic_tanh ----------------------------------------------------------------------------

TEMPLATE_TEST_CASE("dynamic_tanh: wrong gamma, beta, dy, v and dim are rejected",
                   "[errors][dynamic_tanh]", float, double) {
  using S = TestType;
  const matrix<S> x = ones<S>(rows, dim), dy = ones<S>(rows, dim);
  const resnorm::dynamic_tanh<S> short_gamma(S(0.5), ones<S>(3), vector<S>());
  const std::initializer_list<std::string> f = {"gamma has 3 elements", "x has 4 columns"};
  check_rejects([&] { return short_gamma.forward(x); }, "dynamic_tanh::forward", f);
  check_rejects([&] { return short_gamma.vjp(x, dy); }, "dynamic_tanh::vjp", f);
  check_rejects([&] { return short_gamma.jvp(x, dy); }, "dynamic_tanh::jvp", f);
  check_rejects([&] { return short_gamma.jacobian(x); }, "dynamic_tanh::jacobian", f);
  const resnorm::dynamic_tanh<S> long_beta(S(0.5), vector<S>(), ones<S>(5));
  check_rejects([&] { return long_beta.forward(x); }, "dynamic_tanh::forward",
                {"beta has 5 elements", "x has 4 columns"});

  const resnorm::dynamic_tanh<S> dyt(dim);
  check_rejects([&] { return dyt.vjp(x, ones<S>(rows, 3)); }, "dynamic_tanh::vjp",
                {"dy is 2x3", "x is 2x4"});
  check_rejects([&] { return dyt.jvp(x, ones<S>(3, dim)); }, "dynamic_tanh::jvp",
                {"v is 3x4", "x is 2x4"});
  check_rejects([] { return resnorm::dynamic_tanh<S>(-1); }, "dynamic_tanh",
                {"dim must be >= 0", "got -1"});
}

// The (alpha, gamma, beta) constructor checks beta's length against gamma's. derivative(x) reads
// gamma[j] for every column of x, so a gamma of the wrong length must be caught before the loop
// (a shorter one would read past its end; the test uses a longer one).
TEMPLATE_TEST_CASE("dynamic_tanh: constructor and derivative check gamma and beta",
                   "[errors][dynamic_tanh]", float, double) {
  using S = TestType;
  check_rejects([] { return resnorm::dynamic_tanh<S>(S(0.5), ones<S>(dim), ones<S>(3)); },
                "dynamic_tanh", {"beta has 3 elements", "gamma has 4 elements"});
  const resnorm::dynamic_tanh<S> long_gamma(S(0.5), ones<S>(5), vector<S>());
  const matrix<S> x = ones<S>(rows, dim);
  check_rejects([&] { return long_gamma.derivative(x); }, "dynamic_tanh::derivative",
                {"gamma has 5 elements", "x has 4 columns"});
}

// ---- gelu ------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("gelu: dy or v of the wrong shape is rejected", "[errors][gelu]", float, double,
                   long double) {
  using S = TestType;
  const resnorm::gelu<S> g;
  const matrix<S> x = ones<S>(rows, dim);
  check_rejects([&] { return g.vjp(x, ones<S>(rows, 3)); }, "gelu::vjp", {"dy is 2x3", "x is 2x4"});
  check_rejects([&] { return g.jvp(x, ones<S>(3, dim)); }, "gelu::jvp", {"v is 3x4", "x is 2x4"});
}

TEMPLATE_TEST_CASE("gelu: vjp_into rejects dy of the wrong shape", "[errors][gelu][into]", float,
                   double) {
  using S = TestType;
  const resnorm::gelu<S> g;
  const matrix<S> x = ones<S>(rows, dim);
  matrix<S> dx(rows, dim);
  check_rejects([&] { g.vjp_into(x, ones<S>(rows, 5), dx); }, "gelu::vjp_into",
                {"dy is 2x5", "x is 2x4"});
  check_rejects(
      [&] { resnorm::gelu_vjp_into<S>(x, ones<S>(3, dim), resnorm::gelu_approximation::erf, dx); },
      "gelu_vjp_into", {"dy is 3x4", "x is 2x4"});
}

// The _into forms name the output argument passed (y, slope, dx), not a generic "output".
TEMPLATE_TEST_CASE("gelu: _into forms name the output argument", "[errors][gelu][into]", float,
                   double) {
  using S = TestType;
  const resnorm::gelu<S> g;
  const matrix<S> x = ones<S>(rows, dim), dy = ones<S>(rows, dim);
  matrix<S> narrow(rows, 3);
  const auto erf = resnorm::gelu_approximation::erf;
  check_rejects([&] { g.forward_into(x, narrow); }, "gelu::forward_into", {"y is 2x3", "x is 2x4"});
  check_rejects([&] { g.vjp_into(x, dy, narrow); }, "gelu::vjp_into", {"dx is 2x3", "x is 2x4"});
  check_rejects([&] { resnorm::gelu_forward_into<S>(x, erf, narrow); }, "gelu_forward_into",
                {"y is 2x3", "x is 2x4"});
  check_rejects([&] { resnorm::gelu_derivative_into<S>(x, erf, narrow); }, "gelu_derivative_into",
                {"slope is 2x3", "x is 2x4"});
  check_rejects([&] { resnorm::gelu_vjp_into<S>(x, dy, erf, narrow); }, "gelu_vjp_into",
                {"dx is 2x3", "x is 2x4"});
}

// ---- linear ----------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("linear: x, dy, v and bias of the wrong shape are rejected", "[errors][linear]",
                   float, double) {
  using S = TestType;
  const resnorm::linear<S> lin(ones<S>(dim, 5), ones<S>(5));  // 4 -> 5
  const matrix<S> x3 = ones<S>(rows, 3), x = ones<S>(rows, dim);
  const std::initializer_list<std::string> f = {"x has 3 columns", "weight is 4x5"};
  check_rejects([&] { return lin.forward(x3); }, "linear::forward", f);
  check_rejects([&] { return lin.vjp(x3, ones<S>(rows, 5)); }, "linear::vjp", f);
  check_rejects([&] { return lin.jvp(x3, x3); }, "linear::jvp", f);
  check_rejects([&] { return lin.jacobian(x3); }, "linear::jacobian", f);

  check_rejects([&] { return lin.vjp(x, ones<S>(rows, dim)); }, "linear::vjp",
                {"dy is 2x4", "expected 2x5", "weight is 4x5"});
  check_rejects([&] { return lin.vjp(x, ones<S>(3, 5)); }, "linear::vjp",
                {"dy is 3x5", "expected 2x5", "x is 2x4"});
  check_rejects([&] { return lin.jvp(x, ones<S>(3, dim)); }, "linear::jvp",
                {"v is 3x4", "x is 2x4"});

  check_rejects([] { return resnorm::linear<S>(ones<S>(dim, 5), ones<S>(3)); }, "linear",
                {"bias has 3 elements", "weight has 5 columns"});
  // bias is a public member: a later mismatch is caught by the next call.
  resnorm::linear<S> changed = lin;
  changed.bias = ones<S>(7);
  check_rejects([&] { return changed.forward(x); }, "linear::forward",
                {"bias has 7 elements", "weight has 5 columns"});
}

// ---- residual, blocks and sequential with a sublayer that changes the width ----------------

// F: 4 -> 3 features, which no block with an identity highway can add to x.
template <class S>
resnorm::linear<S> narrowing() {
  return resnorm::linear<S>(ones<S>(dim, 3));
}

TEMPLATE_TEST_CASE("residual and blocks: a sublayer that changes the width is rejected",
                   "[errors][residual][pre_ln_block][post_ln_block][norm_block]", float, double) {
  using S = TestType;
  const matrix<S> x = ones<S>(rows, dim), dy = ones<S>(rows, dim);
  const std::initializer_list<std::string> out = {"sublayer output is 2x3", "x is 2x4"};
  // The Jacobian of F is (2·3) x (2·4).
  const std::initializer_list<std::string> jac = {"sublayer Jacobian is 6x8", "x has 8 entries"};

  const resnorm::residual<resnorm::linear<S>> res(narrowing<S>());
  check_rejects([&] { return res.forward(x); }, "residual::forward", out);
  check_rejects([&] { return res.jacobian(x); }, "residual::jacobian", jac);
  check_rejects([&] { return res.vjp(x, ones<S>(3, dim)); }, "residual::vjp",
                {"dy is 3x4", "x is 2x4"});
  check_rejects([&] { return res.jvp(x, ones<S>(rows, 5)); }, "residual::jvp",
                {"v is 2x5", "x is 2x4"});

  const resnorm::pre_ln_block<resnorm::linear<S>> pre(resnorm::layer_norm<S>(dim), narrowing<S>());
  check_rejects([&] { return pre.forward(x); }, "pre_ln_block::forward", out);
  check_rejects([&] { return pre.jacobian(x); }, "pre_ln_block::jacobian", jac);
  check_rejects([&] { return pre.vjp(x, ones<S>(rows, 3)); }, "pre_ln_block::vjp",
                {"dy is 2x3", "x is 2x4"});
  check_rejects([&] { return pre.jvp(x, ones<S>(3, dim)); }, "pre_ln_block::jvp",
                {"v is 3x4", "x is 2x4"});

  const resnorm::post_ln_block<resnorm::linear<S>> post(narrowing<S>(),
                                                        resnorm::layer_norm<S>(dim));
  check_rejects([&] { return post.forward(x); }, "post_ln_block::forward", out);
  check_rejects([&] { return post.jacobian(x); }, "post_ln_block::jacobian", jac);
  check_rejects([&] { return post.vjp(x, ones<S>(rows, 3)); }, "post_ln_block::vjp",
                {"dy is 2x3", "x is 2x4"});
  check_rejects([&] { return post.jvp(x, ones<S>(3, dim)); }, "post_ln_block::jvp",
                {"v is 3x4", "x is 2x4"});

  for (const auto where : {resnorm::norm_placement::pre_ln, resnorm::norm_placement::post_ln,
                           resnorm::norm_placement::sandwich_ln, resnorm::norm_placement::none}) {
    CAPTURE(resnorm::to_string(where));
    const resnorm::norm_block<resnorm::linear<S>> block(where, resnorm::layer_norm<S>(dim),
                                                        narrowing<S>());
    check_rejects([&] { return block.forward(x); }, "norm_block::forward", out);
    check_rejects([&] { return block.vjp(x, dy); }, "norm_block::vjp", out);
    check_rejects([&] { return block.jvp(x, dy); }, "norm_block::jvp", out);
    check_rejects([&] { return block.jacobian(x); }, "norm_block::jacobian", out);
  }
}

TEMPLATE_TEST_CASE("norm_block: a residual scale of the wrong length is rejected",
                   "[errors][norm_block]", float, double) {
  using S = TestType;
  const matrix<S> x = ones<S>(rows, dim);
  auto block = resnorm::norm_block<resnorm::gelu<S>>::layer_scale(resnorm::layer_norm<S>(dim),
                                                                  resnorm::gelu<S>(), 3);
  check_rejects([&] { return block.forward(x); }, "norm_block::forward",
                {"scale has 3 elements", "x has 4 columns"});
  check_rejects([&] { return block.vjp(x, x); }, "norm_block::vjp",
                {"scale has 3 elements", "x has 4 columns"});
}

// residual::vjp and pre_ln_block::vjp hand F a dy of x's shape, so a width-changing F must be
// reported as such under the block's name, not as F's complaint about dy; jvp checks J_F v.
TEMPLATE_TEST_CASE("residual and blocks: vjp and jvp name themselves for a width-changing sublayer",
                   "[errors][residual][pre_ln_block][post_ln_block]", float, double) {
  using S = TestType;
  const matrix<S> x = ones<S>(rows, dim), dy = ones<S>(rows, dim);
  const std::initializer_list<std::string> out = {"sublayer output is 2x3", "x is 2x4"};
  const resnorm::residual<resnorm::linear<S>> res(narrowing<S>());
  check_rejects([&] { return res.vjp(x, dy); }, "residual::vjp", out);
  check_rejects([&] { return res.jvp(x, dy); }, "residual::jvp", out);
  const resnorm::pre_ln_block<resnorm::linear<S>> pre(resnorm::layer_norm<S>(dim), narrowing<S>());
  check_rejects([&] { return pre.vjp(x, dy); }, "pre_ln_block::vjp", out);
  check_rejects([&] { return pre.jvp(x, dy); }, "pre_ln_block::jvp", out);
  const resnorm::post_ln_block<resnorm::linear<S>> post(narrowing<S>(),
                                                        resnorm::layer_norm<S>(dim));
  check_rejects([&] { return post.vjp(x, dy); }, "post_ln_block::vjp", out);
  check_rejects([&] { return post.jvp(x, dy); }, "post_ln_block::jvp", out);
}

// A stage's error comes out under the composition's member and the stage's name, keeping the
// stage's own shapes.
TEMPLATE_TEST_CASE("sequential: stages of incompatible widths name the composition",
                   "[errors][sequential]", float, double) {
  using S = TestType;
  // 4 -> 3, then a stage that expects 4 features.
  const resnorm::sequential<resnorm::linear<S>, resnorm::linear<S>> seq(
      narrowing<S>(), resnorm::linear<S>(ones<S>(dim, 2)));
  const matrix<S> x = ones<S>(rows, dim);
  const std::initializer_list<std::string> f = {"second", "x has 3 columns", "weight is 4x2"};
  check_rejects([&] { return seq.forward(x); }, "sequential::forward", f);
  check_rejects([&] { return seq.vjp(x, ones<S>(rows, 2)); }, "sequential::vjp", f);
  check_rejects([&] { return seq.jvp(x, x); }, "sequential::jvp", f);
  check_rejects([&] { return seq.jacobian(x); }, "sequential::jacobian", f);
}

// ---- softmax, feed_forward, causal_self_attention -------------------------------------------

TEMPLATE_TEST_CASE("softmax: dy or v of the wrong shape is rejected", "[errors][softmax]", float,
                   double) {
  using S = TestType;
  const resnorm::softmax<S> sm;
  const matrix<S> x = ones<S>(rows, dim);
  check_rejects([&] { return sm.vjp(x, ones<S>(rows, 3)); }, "softmax::vjp",
                {"dy is 2x3", "x is 2x4"});
  check_rejects([&] { return sm.jvp(x, ones<S>(3, dim)); }, "softmax::jvp",
                {"v is 3x4", "x is 2x4"});
}

TEMPLATE_TEST_CASE("feed_forward: wrong weight sizes, x, dy and v are rejected",
                   "[errors][feed_forward]", float, double) {
  using S = TestType;
  // d = 4, d_ff = 7.
  check_rejects(
      [] {
        return resnorm::feed_forward<S>(ones<S>(dim, 7), ones<S>(5), ones<S>(7, dim), ones<S>(dim));
      },
      "feed_forward", {"b1 has 5 elements", "w1 has 7 columns"});
  check_rejects(
      [] {
        return resnorm::feed_forward<S>(ones<S>(dim, 7), ones<S>(7), ones<S>(7, 3), ones<S>(dim));
      },
      "feed_forward", {"w2 is 7x3", "w1 is 4x7", "expects w2 7x4"});
  check_rejects(
      [] {
        return resnorm::feed_forward<S>(ones<S>(dim, 7), ones<S>(7), ones<S>(5, dim), ones<S>(dim));
      },
      "feed_forward", {"w2 is 5x4", "w1 is 4x7"});
  check_rejects(
      [] {
        return resnorm::feed_forward<S>(ones<S>(dim, 7), ones<S>(7), ones<S>(7, dim), ones<S>(3));
      },
      "feed_forward", {"b2 has 3 elements", "w2 has 4 columns"});

  const auto ffn = resnorm::feed_forward<S>::zeros(dim, 7);
  const matrix<S> x3 = ones<S>(rows, 3), x = ones<S>(rows, dim);
  const std::initializer_list<std::string> f = {"x has 3 columns", "w1 is 4x7"};
  check_rejects([&] { return ffn.forward(x3); }, "feed_forward::forward", f);
  check_rejects([&] { return ffn.vjp(x3, x3); }, "feed_forward::vjp", f);
  check_rejects([&] { return ffn.jvp(x3, x3); }, "feed_forward::jvp", f);
  check_rejects([&] { return ffn.jacobian(x3); }, "feed_forward::jacobian", f);
  check_rejects([&] { return ffn.vjp(x, ones<S>(3, dim)); }, "feed_forward::vjp",
                {"dy is 3x4", "x is 2x4"});
  check_rejects([&] { return ffn.jvp(x, ones<S>(rows, 5)); }, "feed_forward::jvp",
                {"v is 2x5", "x is 2x4"});
  // Weights are public members: a later mismatch is caught by the next call.
  auto changed = ffn;
  changed.w2 = ones<S>(7, 5);
  check_rejects([&] { return changed.forward(x); }, "feed_forward::forward",
                {"w2 is 7x5", "w1 is 4x7"});
}

TEMPLATE_TEST_CASE("causal_self_attention: heads, weight sizes, x and dy are checked",
                   "[errors][attention]", float, double) {
  using S = TestType;
  using attention = resnorm::causal_self_attention<S>;
  check_rejects([] { return attention::zeros(6, 4); }, "causal_self_attention",
                {"d = 6", "wq is 6x6", "not divisible by heads = 4"});
  check_rejects([] { return attention::zeros(dim, 0); }, "causal_self_attention",
                {"heads must be >= 1", "got 0"});
  const matrix<S> w = ones<S>(dim, dim);
  check_rejects([&] { return attention(ones<S>(dim, 5), w, w, w, 1); }, "causal_self_attention",
                {"wq is 4x5", "square"});
  check_rejects([&] { return attention(w, ones<S>(dim, 3), w, w, 1); }, "causal_self_attention",
                {"wk is 4x3", "wq is 4x4"});
  check_rejects([&] { return attention(w, w, ones<S>(5, dim), w, 1); }, "causal_self_attention",
                {"wv is 5x4", "wq is 4x4"});
  check_rejects([&] { return attention(w, w, w, ones<S>(3, 3), 1); }, "causal_self_attention",
                {"wo is 3x3", "wq is 4x4"});

  const auto mha = attention::zeros(dim, 2);
  const matrix<S> x3 = ones<S>(rows, 3), x = ones<S>(rows, dim);
  const std::initializer_list<std::string> f = {"x has 3 columns", "wq is 4x4"};
  check_rejects([&] { return mha.forward(x3); }, "causal_self_attention::forward", f);
  check_rejects([&] { return mha.vjp(x3, x3); }, "causal_self_attention::vjp", f);
  check_rejects([&] { return mha.jvp(x3, x3); }, "causal_self_attention::jvp", f);
  check_rejects([&] { return mha.jacobian(x3); }, "causal_self_attention::jacobian", f);
  check_rejects([&] { return mha.vjp(x, ones<S>(3, dim)); }, "causal_self_attention::vjp",
                {"dy is 3x4", "x is 2x4"});
  check_rejects([&] { return mha.jvp(x, ones<S>(rows, 5)); }, "causal_self_attention::jvp",
                {"v is 2x5", "x is 2x4"});
  // heads is a public member: d = 4 with 3 heads is caught by the next call.
  auto changed = mha;
  changed.heads = 3;
  check_rejects([&] { return changed.forward(x); }, "causal_self_attention::forward",
                {"d = 4", "not divisible by heads = 3"});
}

// ---- transformer_layer, transformer_stack ----------------------------------------------------

TEMPLATE_TEST_CASE(
    "transformer_layer and transformer_stack: a loss gradient of the wrong shape "
    "is rejected",
    "[errors][transformer_layer][transformer_stack]", float, double) {
  using S = TestType;
  const resnorm::transformer_layer<S> layer(
      resnorm::norm_placement::pre_ln, resnorm::causal_self_attention<S>::zeros(dim, 2),
      resnorm::layer_norm<S>(dim), resnorm::feed_forward<S>::zeros(dim, 7),
      resnorm::layer_norm<S>(dim));
  const matrix<S> x = ones<S>(rows, dim);
  check_rejects([&] { return layer.vjp(x, ones<S>(3, dim)); }, "transformer_layer::vjp",
                {"dz is 3x4", "x is 2x4"});
  check_rejects([&] { return layer.jvp(x, ones<S>(rows, 5)); }, "transformer_layer::jvp",
                {"v is 2x5", "x is 2x4"});

  resnorm::transformer_config config;
  config.dim = dim;
  config.heads = 2;
  config.hidden = 7;
  config.layers = 2;
  const auto stack = resnorm::transformer_stack<S>::pre_ln(config, 1);
  check_rejects([&] { return stack.vjp(x, ones<S>(rows, 3)); }, "transformer_stack::vjp",
                {"dy is 2x3", "x is 2x4"});
  check_rejects([&] { return stack.jvp(x, ones<S>(3, dim)); }, "transformer_stack::jvp",
                {"v is 3x4", "x is 2x4"});

  check_rejects(
      [&] {
        return resnorm::transformer_stack<S>(
            config, resnorm::uniform_placements(3, resnorm::norm_placement::pre_ln), 1);
      },
      "transformer_stack", {"placements has 3 elements", "config has 2 layers"});
  resnorm::transformer_config odd = config;
  odd.heads = 3;
  check_rejects([&] { return resnorm::transformer_stack<S>::pre_ln(odd, 1); }, "transformer_stack",
                {"d = 4", "not divisible by heads = 3"});
}

// ---- add_norm and the kernels' _into entry points --------------------------------------------

TEMPLATE_TEST_CASE(
    "add_norm: wrong shapes of f, s, y, gamma, beta, mean, rstd, dy, dx are "
    "rejected",
    "[errors][add_norm][into]", float, double) {
  using S = TestType;
  using P = resnorm::kernels::param_t<S>;
  using resnorm::add_norm_kind;
  const matrix<S> x = ones<S>(rows, dim), f = ones<S>(rows, dim);
  const vector<P> gamma = ones<P>(dim), beta = ones<P>(dim), short_gamma = ones<P>(3);
  matrix<S> s(rows, dim), y(rows, dim), narrow(rows, 3);
  vector<double> mean(rows), rstd(rows), long_stats(5);
  const auto ln = add_norm_kind::layer_norm;
  const char* fwd = "add_norm_forward_into";

  check_rejects(
      [&] {
        resnorm::add_norm_forward_into<S>(ln, x, ones<S>(3, dim), gamma, beta, 1e-5, s, y, mean,
                                          rstd);
      },
      fwd, {"f is 3x4", "x is 2x4"});
  check_rejects(
      [&] {
        resnorm::add_norm_forward_into<S>(ln, x, f, gamma, beta, 1e-5, narrow, y, mean, rstd);
      },
      fwd, {"s is 2x3", "x is 2x4"});
  check_rejects(
      [&] {
        resnorm::add_norm_forward_into<S>(ln, x, f, gamma, beta, 1e-5, s, narrow, mean, rstd);
      },
      fwd, {"y is 2x3", "x is 2x4"});
  check_rejects(
      [&] {
        resnorm::add_norm_forward_into<S>(ln, x, f, short_gamma, beta, 1e-5, s, y, mean, rstd);
      },
      fwd, {"gamma has 3 elements", "x has 4 columns"});
  check_rejects(
      [&] {
        resnorm::add_norm_forward_into<S>(ln, x, f, gamma, short_gamma, 1e-5, s, y, mean, rstd);
      },
      fwd, {"beta has 3 elements", "x has 4 columns"});
  check_rejects(
      [&] {
        resnorm::add_norm_forward_into<S>(ln, x, f, gamma, beta, 1e-5, s, y, long_stats, rstd);
      },
      fwd, {"mean has 5 elements", "x has 2 rows"});
  check_rejects(
      [&] {
        resnorm::add_norm_forward_into<S>(ln, x, f, gamma, beta, 1e-5, s, y, mean, long_stats);
      },
      fwd, {"rstd has 5 elements", "x has 2 rows"});
  check_rejects(
      [&] { resnorm::add_norm_forward_into<S>(ln, x, f, gamma, beta, -1.0, s, y, mean, rstd); },
      fwd, {"eps must be >= 0", "got -1"});
  check_rejects(
      [&] {
        resnorm::add_norm_forward_into<S>(add_norm_kind::rms_norm, x, f, gamma, beta, 1e-5, s, y,
                                          mean, rstd);
      },
      fwd, {"RMSNorm takes no beta", "got 4 elements"});
  check_rejects(
      [&] { return resnorm::add_norm_forward<S>(ln, x, ones<S>(rows, 5), gamma, beta, 1e-5); },
      "add_norm_forward", {"f is 2x5", "x is 2x4"});

  const auto out = resnorm::add_norm_forward<S>(ln, x, f, gamma, beta, 1e-5);
  const matrix<S> ds = ones<S>(rows, dim), dy = ones<S>(rows, dim);
  matrix<S> dx(rows, dim);
  vector<P> dgamma(dim), dbeta(dim), short_grad(3);
  resnorm::kernels::kernel_workspace ws;
  const char* bwd = "add_norm_vjp_into";
  check_rejects(
      [&] {
        resnorm::add_norm_vjp_into<S>(ln, out.s, ones<S>(3, dim), dy, gamma, out.mean, out.rstd, dx,
                                      dgamma, dbeta, ws);
      },
      bwd, {"ds is 3x4", "s is 2x4"});
  check_rejects(
      [&] {
        resnorm::add_norm_vjp_into<S>(ln, out.s, ds, ones<S>(rows, 5), gamma, out.mean, out.rstd,
                                      dx, dgamma, dbeta, ws);
      },
      bwd, {"dy is 2x5", "s is 2x4"});
  check_rejects(
      [&] {
        resnorm::add_norm_vjp_into<S>(ln, out.s, ds, dy, gamma, out.mean, out.rstd, narrow, dgamma,
                                      dbeta, ws);
      },
      bwd, {"dx is 2x3", "s is 2x4"});
  check_rejects(
      [&] {
        resnorm::add_norm_vjp_into<S>(ln, out.s, ds, dy, gamma, out.mean, out.rstd, dx, short_grad,
                                      dbeta, ws);
      },
      bwd, {"dgamma has 3 elements", "x has 4 columns"});
  check_rejects(
      [&] {
        resnorm::add_norm_vjp_into<S>(ln, out.s, ds, dy, gamma, out.mean, out.rstd, dx, dgamma,
                                      short_grad, ws);
      },
      bwd, {"dbeta has 3 elements", "x has 4 columns"});
  check_rejects(
      [&] {
        resnorm::add_norm_vjp_into<S>(ln, out.s, ds, dy, gamma, long_stats, out.rstd, dx, dgamma,
                                      dbeta, ws);
      },
      bwd, {"mean has 5 elements", "s has 2 rows"});
  check_rejects(
      [&] {
        resnorm::add_norm_vjp_into<S>(ln, out.s, ds, dy, gamma, out.mean, long_stats, dx, dgamma,
                                      dbeta, ws);
      },
      bwd, {"rstd has 5 elements", "s has 2 rows"});
  check_rejects([&] { return resnorm::add_norm_vjp<S>(ln, out.s, ds, dy, short_gamma, out); },
                "add_norm_vjp", {"gamma has 3 elements", "x has 4 columns"});
}

TEMPLATE_TEST_CASE("layer_norm and rms_norm kernels: wrong output sizes are rejected",
                   "[errors][layer_norm][rms_norm][into]", float, double) {
  using S = TestType;
  using P = resnorm::kernels::param_t<S>;
  const matrix<S> x = ones<S>(rows, dim), dy = ones<S>(rows, dim);
  const vector<P> gamma = ones<P>(dim), beta = ones<P>(dim), short_gamma = ones<P>(3);
  matrix<S> y(rows, dim), dx(rows, dim), narrow(rows, 3), short_rows(1, dim);
  vector<double> mean(rows), rstd(rows), long_stats(5);
  vector<P> dgamma(dim), dbeta(dim), short_grad(3);
  resnorm::kernels::kernel_workspace ws;

  const char* ln_fwd = "layer_norm_forward_into";
  check_rejects(
      [&] { resnorm::layer_norm_forward_into<S>(x, gamma, beta, 1e-5, narrow, mean, rstd); },
      ln_fwd, {"y is 2x3", "x is 2x4"});
  check_rejects(
      [&] { resnorm::layer_norm_forward_into<S>(x, gamma, beta, 1e-5, short_rows, mean, rstd); },
      ln_fwd, {"y is 1x4", "x is 2x4"});
  check_rejects(
      [&] { resnorm::layer_norm_forward_into<S>(x, short_gamma, beta, 1e-5, y, mean, rstd); },
      ln_fwd, {"gamma has 3 elements", "x has 4 columns"});
  check_rejects(
      [&] { resnorm::layer_norm_forward_into<S>(x, gamma, beta, 1e-5, y, long_stats, rstd); },
      ln_fwd, {"mean has 5 elements", "x has 2 rows"});
  check_rejects([&] { resnorm::layer_norm_forward_into<S>(x, gamma, beta, -1.0, y, mean, rstd); },
                ln_fwd, {"eps must be >= 0", "got -1"});

  const char* ln_bwd = "layer_norm_vjp_into";
  check_rejects(
      [&] { resnorm::layer_norm_vjp_into<S>(x, dy, gamma, mean, rstd, narrow, dgamma, dbeta, ws); },
      ln_bwd, {"dx is 2x3", "x is 2x4"});
  check_rejects(
      [&] {
        resnorm::layer_norm_vjp_into<S>(x, ones<S>(3, dim), gamma, mean, rstd, dx, dgamma, dbeta,
                                        ws);
      },
      ln_bwd, {"dy is 3x4", "x is 2x4"});
  check_rejects(
      [&] {
        resnorm::layer_norm_vjp_into<S>(x, dy, gamma, long_stats, rstd, dx, dgamma, dbeta, ws);
      },
      ln_bwd, {"mean has 5 elements", "x has 2 rows"});
  check_rejects(
      [&] { resnorm::layer_norm_vjp_into<S>(x, dy, gamma, mean, rstd, dx, short_grad, dbeta, ws); },
      ln_bwd, {"dgamma has 3 elements", "x has 4 columns"});
  check_rejects(
      [&] {
        resnorm::layer_norm_vjp_recompute_into<S>(x, dy, gamma, 1e-5, dx, dgamma, short_grad, ws);
      },
      "layer_norm_vjp_recompute_into", {"dbeta has 3 elements", "x has 4 columns"});
  check_rejects(
      [&] {
        resnorm::layer_norm_vjp_recompute_into<S>(x, dy, gamma, 1e-5, narrow, dgamma, dbeta, ws);
      },
      "layer_norm_vjp_recompute_into", {"dx is 2x3", "x is 2x4"});

  const char* rms_fwd = "rms_norm_forward_into";
  check_rejects([&] { resnorm::rms_norm_forward_into<S>(x, gamma, 1e-6, narrow, rstd); }, rms_fwd,
                {"y is 2x3", "x is 2x4"});
  check_rejects([&] { resnorm::rms_norm_forward_into<S>(x, gamma, 1e-6, y, long_stats); }, rms_fwd,
                {"rstd has 5 elements", "x has 2 rows"});
  check_rejects([&] { resnorm::rms_norm_forward_into<S>(x, short_gamma, 1e-6, y, rstd); }, rms_fwd,
                {"gamma has 3 elements", "x has 4 columns"});
  check_rejects([&] { resnorm::rms_norm_vjp_into<S>(x, dy, gamma, rstd, narrow, dgamma, ws); },
                "rms_norm_vjp_into", {"dx is 2x3", "x is 2x4"});
  check_rejects([&] { resnorm::rms_norm_vjp_into<S>(x, dy, gamma, long_stats, dx, dgamma, ws); },
                "rms_norm_vjp_into", {"rstd has 5 elements", "x has 2 rows"});
  check_rejects(
      [&] { resnorm::rms_norm_vjp_recompute_into<S>(x, dy, gamma, 1e-6, dx, short_grad, ws); },
      "rms_norm_vjp_recompute_into", {"dgamma has 3 elements", "x has 4 columns"});
  check_rejects(
      [&] {
        resnorm::rms_norm_vjp_recompute_into<S>(x, ones<S>(rows, 5), gamma, 1e-6, dx, dgamma, ws);
      },
      "rms_norm_vjp_recompute_into", {"dy is 2x5", "x is 2x4"});
}

// ---- finite differences ----------------------------------------------------------------------

TEST_CASE("compare_jacobians: Jacobians of different shapes are rejected",
          "[errors][finite_difference]") {
  const matrix<double> a = ones<double>(8, 8), b = ones<double>(8, 6);
  check_rejects([&] { return resnorm::compare_jacobians(a, b, rows); }, "compare_jacobians",
                {"analytic is 8x8", "numeric is 8x6"});
  check_rejects([&] { return resnorm::compare_jacobians(b, a, rows); }, "compare_jacobians",
                {"analytic is 8x6", "numeric is 8x8"});
}

TEST_CASE("check_jacobian: x the map does not take is rejected by the map",
          "[errors][finite_difference]") {
  const resnorm::linear<double> lin(ones<double>(dim, 5));
  const matrix<double> x3 = ones<double>(rows, 3);
  check_rejects([&] { return resnorm::check_jacobian(lin, x3); }, "linear::jacobian",
                {"x has 3 columns", "weight is 4x5"});
  check_rejects([&] { return resnorm::finite_difference_jacobian(lin, x3); }, "linear::forward",
                {"x has 3 columns", "weight is 4x5"});
}

// compare_jacobians splits rows and columns into tokens: a count that does not divide them would
// place the worst entry at a wrong (token, feature) without a word.
TEST_CASE("compare_jacobians: a token count that does not divide the Jacobian is rejected",
          "[errors][finite_difference]") {
  const matrix<double> a = ones<double>(8, 6);
  check_rejects([&] { return resnorm::compare_jacobians(a, a, 3); }, "compare_jacobians",
                {"analytic is 8x6", "tokens = 3"});
  check_rejects([&] { return resnorm::compare_jacobians(a, a, -1); }, "compare_jacobians",
                {"tokens must be >= 0", "got -1"});
}

}  // namespace
