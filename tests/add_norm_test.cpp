// Tests of add_norm.hpp: the fused s = x + f, y = norm(s) against the unfused kernels and the
// long-double loops, and its backward dx = ds + J_normᵀ dy, for LayerNorm and RMSNorm.
#include "resnorm/add_norm.hpp"

#include <cstdint>
#include <limits>
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
    S* const on_boundary = resnorm_test::first_line_in(s_store);
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

// The streamed LayerNorm forward with two rows in flight (row t's apply in the loop of row
// t + 1's add), called directly as the streamed rows above, against the in-place rows one at a
// time. Among ordinary rows: a row of large offset and tiny spread (the one pass does not hold:
// two passes), a float row whose squares overflow (redone in double), a NaN row, each first,
// inside and last. s and y rows start on 64-byte lines, as add_norm_forward_into requires.
TEMPLATE_TEST_CASE("add_norm: pipelined streamed rows equal in-place rows bit for bit",
                   "[add_norm][stream]", float, double, Eigen::bfloat16) {
  using S = TestType;
  namespace k = resnorm::kernels;
  using C = k::compute_t<S>;
  using P = k::param_t<S>;
  constexpr Eigen::Index line = 64 / sizeof(S);
  const Eigen::Index rows = 7;
  // 51: three packs of 16 (float and bf16 on AVX-512), an odd number of the half-line packs
  // that bf16 writes a line at a time, then a tail.
  for (const Eigen::Index d : {1, 5, 37, 51, 1024, 2500}) {
    const Eigen::Index stride = (d + line - 1) / line * line;  // rows start on lines
    const matrix<S> x = random_matrix<float>(rows, d, 196 + d, 2.0, 0.5).template cast<S>();
    const matrix<S> f = random_matrix<float>(rows, d, 197 + d).template cast<S>();
    const vector<P> gamma = random_vector<P>(d, 198);
    const vector<P> beta = random_vector<P>(d, 199);
    const matrix<double> z = random_matrix<double>(1, d, 200 + d);
    for (const Eigen::Index special : {Eigen::Index(0), Eigen::Index(3), rows - 1}) {
      for (const int what : {0, 1, 2}) {
        CAPTURE(d, special, what);
        matrix<S> xs = x;
        for (Eigen::Index j = 0; j < d; ++j) {
          // tiny: x + f = 3000 + 2^-10·z (f cancelled up to rounding), far outside the one pass.
          const double tiny = 3000.0 + 0x1p-10 * z(0, j) - static_cast<double>(f(special, j));
          const double huge = j % 2 ? 1e30 : -1e30;
          const double nan = std::numeric_limits<double>::quiet_NaN();
          xs(special, j) = static_cast<S>(what == 0 ? tiny : what == 1 ? huge : nan);
        }
        matrix<S> s_a(rows, d), y_a(rows, d), local(2, d);
        vector<double> mean_a(rows), rstd_a(rows), mean_b(rows), rstd_b(rows);
        for (Eigen::Index t = 0; t < rows; ++t) {
          const k::add_norm_next<S> own{xs.row(t).data(), f.row(t).data(), s_a.row(t).data(),
                                        y_a.row(t).data()};
          const k::row_stats a = k::add_layer_norm_row<C, true, true>(
              own.x, own.f, d, gamma.data(), beta.data(), 1e-5, false, own.s,
              static_cast<S*>(nullptr), own.y, own);
          mean_a(t) = a.mean;
          rstd_a(t) = a.rstd;
        }
        std::vector<S> store(static_cast<std::size_t>(2 * rows * stride + line));
        S* const s_b = resnorm_test::first_line_in(store);
        S* const y_b = s_b + rows * stride;
        // Admitted on AVX-512, where a stored pack is a whole line (float) or half (bf16).
        REQUIRE(k::pipelines_rows<C>(s_b, stride, y_b, stride, rows) ==
                (k::simd::register_bytes == 64 && k::simd::stored_pack_bytes<C, S> >= 32));
        k::add_layer_norm_rows_pipelined<C, true, true, S>(
            0, rows, d, gamma.data(), beta.data(), 1e-5, local.data(),
            [&](Eigen::Index t) {
              return k::add_norm_next<S>{xs.row(t).data(), f.row(t).data(), s_b + t * stride,
                                         y_b + t * stride};
            },
            [&](Eigen::Index t, const k::row_stats& st) {
              mean_b(t) = st.mean;
              rstd_b(t) = st.rstd;
            });
        k::stream_fence();
        for (Eigen::Index t = 0; t < rows; ++t) {
          CAPTURE(t);
          CHECK(resnorm_test::same_bits(s_b + t * stride, s_a.row(t).data(), d));
          CHECK(resnorm_test::same_bits(y_b + t * stride, y_a.row(t).data(), d));
        }
        CHECK(resnorm_test::same_bits(mean_b.data(), mean_a.data(), rows));
        CHECK(resnorm_test::same_bits(rstd_b.data(), rstd_a.data(), rows));
      }
    }
  }
}
