// Tests of add_norm.hpp: the fused s = x + f, y = norm(s) against the unfused kernels and the
// long-double loops, and its backward dx = ds + J_normᵀ dy, for LayerNorm and RMSNorm.
#include "resnorm/add_norm.hpp"

#include <cstdint>
#include <vector>

#include "reference/norm_kernel_reference.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using resnorm::add_norm_kind;
using resnorm::matrix;
using resnorm::vector;
using resnorm_test::max_abs;
using resnorm_test::max_abs_diff;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;

// As in the norm kernel tests: a few roundings per output in the compute type plus sums of up to
// a few hundred terms; a wrong term is off by O(1).
template <class S>
double tolerance() {
  return std::is_same_v<S, float> ? 4e-6 : 1e-13;
}

}  // namespace

TEMPLATE_TEST_CASE("add_norm forward and vjp: fused equals add then norm", "[add_norm]", float,
                   double) {
  using S = TestType;
  const double eps = 1e-5;
  for (const add_norm_kind kind : {add_norm_kind::layer_norm, add_norm_kind::rms_norm}) {
    const bool ln = kind == add_norm_kind::layer_norm;
    const auto ref_kind =
        ln ? resnorm_reference::norm_kind::layer : resnorm_reference::norm_kind::rms;
    for (Eigen::Index rows : {0, 1, 3}) {
      for (Eigen::Index dim : {1, 2, 300}) {
        CAPTURE(ln, rows, dim);
        const matrix<S> x = random_matrix<S>(rows, dim, 1 + dim, 1.0, 0.5);
        const matrix<S> f = random_matrix<S>(rows, dim, 2 + dim, 0.7);
        const matrix<S> ds = random_matrix<S>(rows, dim, 3 + dim);
        const matrix<S> dy = random_matrix<S>(rows, dim, 4 + dim);
        const vector<S> gamma = random_vector<S>(dim, 5, 0.3, 1.0);
        const vector<S> beta = ln ? random_vector<S>(dim, 6) : vector<S>();

        const auto out = resnorm::add_norm_forward<S>(kind, x, f, gamma, beta, eps);
        // s is the rounded sum, exactly.
        CHECK(out.s == matrix<S>(x + f));
        // y is the norm of that s, by the same row code as the unfused kernel: the same bits.
        matrix<S> y(rows, dim);
        vector<double> mean(rows), rstd(rows);
        if (ln) {
          resnorm::layer_norm_forward_into<S>(out.s, gamma, beta, eps, y, mean, rstd);
        } else {
          resnorm::rms_norm_forward_into<S>(out.s, gamma, eps, y, rstd);
        }
        CHECK(out.y == y);
        CHECK(out.rstd == rstd);

        const auto grad = resnorm::add_norm_vjp<S>(kind, out.s, ds, dy, gamma, out);
        const auto ref = resnorm_reference::norm_backward(ref_kind, out.s, dy, gamma,
                                                          static_cast<long double>(eps));
        const resnorm_reference::ld_mat expected = ds.template cast<long double>() + ref.dx;
        CHECK(max_abs_diff(grad.dx, expected) <= tolerance<S>() * std::max(1.0, max_abs(expected)));
        CHECK(max_abs_diff(grad.dgamma, ref.dgamma) <=
              tolerance<S>() * std::max(1.0, max_abs(ref.dgamma)) * 3);
        if (ln) {
          CHECK(max_abs_diff(grad.dbeta, ref.dbeta) <=
                tolerance<S>() * std::max(1.0, max_abs(ref.dbeta)) * 3);
        } else {
          CHECK(grad.dbeta.size() == 0);
        }
      }
    }
  }
}

TEST_CASE("add_norm: arguments are checked", "[add_norm][errors]") {
  const matrix<float> x = matrix<float>::Zero(2, 3), f = matrix<float>::Zero(2, 4);
  matrix<float> s(2, 3), y(2, 3);
  vector<double> mean(2), rstd(2);
  const vector<float> none, beta = vector<float>::Zero(3);
  REQUIRE_THROWS_MATCHES(
      resnorm::add_norm_forward_into<float>(add_norm_kind::layer_norm, x, f, none, none, 1e-5, s, y,
                                            mean, rstd),
      std::invalid_argument,
      resnorm_test::message_contains("add_norm_forward_into: f is 2x4, x is 2x3"));
  REQUIRE_THROWS_MATCHES(resnorm::add_norm_forward_into<float>(add_norm_kind::rms_norm, x, x, none,
                                                               beta, 1e-5, s, y, mean, rstd),
                         std::invalid_argument,
                         resnorm_test::message_contains("RMSNorm takes no beta"));
}

// Outputs past kernels::streaming_min_bytes: s is formed in an L1 buffer, the norm reads it
// there, and s and y are written around the cache. Too large to allocate in a test, so the row
// kernels are called with a buffer and stream = true directly, against the in-place rows. s sits
// on a 64-byte boundary (streamed from the add's loop where a stored pack is a cache line) and
// one element past it (copied out of the buffer after the loop).
TEMPLATE_TEST_CASE("add_norm: streamed rows equal in-place rows bit for bit", "[add_norm][stream]",
                   float, double, Eigen::bfloat16) {
  using S = TestType;
  namespace k = resnorm::kernels;
  using C = k::compute_t<S>;
  using P = k::param_t<S>;
  for (const Eigen::Index d : {1, 5, 37, 1024, 2500}) {
    CAPTURE(d);
    const matrix<S> x = random_matrix<float>(1, d, 96 + d, 2.0, 0.5).template cast<S>();
    const matrix<S> f = random_matrix<float>(1, d, 97 + d).template cast<S>();
    const vector<P> gamma = random_vector<P>(d, 98);
    const vector<P> beta = random_vector<P>(d, 99);
    matrix<S> s_a(1, d), y_a(1, d), y_b(1, d), local(1, d);
    std::vector<S> s_store(static_cast<std::size_t>(d) + 64);
    const std::size_t past_boundary = reinterpret_cast<std::uintptr_t>(s_store.data()) % 64;
    S* const on_boundary = s_store.data() + (64 - past_boundary) % 64 / sizeof(S);
    for (const int offset : {0, 1}) {
      CAPTURE(offset);
      Eigen::Map<matrix<S>> s_b(on_boundary + offset, 1, d);
      const k::add_norm_next<S> next_a{x.data(), f.data(), s_a.data(), y_a.data()};
      const k::add_norm_next<S> next_b{x.data(), f.data(), s_b.data(), y_b.data()};
      const k::row_stats a = k::add_layer_norm_row<C, true, true>(
          x.data(), f.data(), d, gamma.data(), beta.data(), 1e-5, false, s_a.data(),
          static_cast<S*>(nullptr), y_a.data(), next_a);
      const k::row_stats b = k::add_layer_norm_row<C, true, true>(
          x.data(), f.data(), d, gamma.data(), beta.data(), 1e-5, true, s_b.data(), local.data(),
          y_b.data(), next_b);
      k::stream_fence();
      CHECK(a.mean == b.mean);
      CHECK(a.rstd == b.rstd);
      CHECK(s_a == s_b);
      CHECK(y_a == y_b);
      const double ra =
          k::add_rms_norm_row<C, true>(x.data(), f.data(), d, gamma.data(), 1e-5, false, s_a.data(),
                                       static_cast<S*>(nullptr), y_a.data(), next_a);
      const double rb =
          k::add_rms_norm_row<C, true>(x.data(), f.data(), d, gamma.data(), 1e-5, true, s_b.data(),
                                       local.data(), y_b.data(), next_b);
      k::stream_fence();
      CHECK(ra == rb);
      CHECK(s_a == s_b);
      CHECK(y_a == y_b);
    }
  }
}
