// Tests that the row kernels compute the same bits on 1, 2 and 4 OpenMP threads (forward outputs,
// dx, and dγ/dβ, whose reduction runs over fixed row blocks). Built without OpenMP
// (RESNORM_OPENMP=OFF) the kernels are serial and this file checks that 1 thread is reported.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "resnorm/add_norm.hpp"
#include "resnorm/kernels/gelu_kernel.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

using resnorm::matrix;
using resnorm::vector;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;

struct outputs {
  matrix<float> ln_y, ln_dx, rms_y, rms_dx, gelu_y, gelu_dx, add_s, add_y, add_dx;
  vector<float> ln_dgamma, ln_dbeta, rms_dgamma, add_dgamma, add_dbeta;
  vector<double> ln_mean, ln_rstd;
  matrix<resnorm::kernels::bf16> gelu_bf16_y, gelu_bf16_dx;  // the tabulated path
};

// Everything once, on the current thread count. Shapes above parallel_min_elements so the
// kernels do split, with row counts that do not divide evenly among 2 or 4 threads.
outputs run_all(Eigen::Index rows, Eigen::Index dim) {
  const matrix<float> x = random_matrix<float>(rows, dim, 1, 2.0, 0.5);
  const matrix<float> f = random_matrix<float>(rows, dim, 2);
  const matrix<float> dy = random_matrix<float>(rows, dim, 3);
  const vector<float> gamma = random_vector<float>(dim, 4, 0.3, 1.0);
  const vector<float> beta = random_vector<float>(dim, 5);
  outputs o;
  resnorm::kernels::kernel_workspace ws;
  auto m = [&] { return matrix<float>(rows, dim); };
  o.ln_y = m(), o.ln_dx = m(), o.rms_y = m(), o.rms_dx = m(), o.gelu_y = m(), o.gelu_dx = m();
  o.add_s = m(), o.add_y = m(), o.add_dx = m();
  o.ln_dgamma.resize(dim), o.ln_dbeta.resize(dim), o.rms_dgamma.resize(dim);
  o.add_dgamma.resize(dim), o.add_dbeta.resize(dim);
  o.ln_mean.resize(rows), o.ln_rstd.resize(rows);
  vector<double> rstd(rows), mean2(rows), rstd2(rows);
  resnorm::layer_norm_forward_into<float>(x, gamma, beta, 1e-5, o.ln_y, o.ln_mean, o.ln_rstd);
  resnorm::layer_norm_vjp_into<float>(x, dy, gamma, o.ln_mean, o.ln_rstd, o.ln_dx, o.ln_dgamma,
                                      o.ln_dbeta, ws);
  resnorm::rms_norm_forward_into<float>(x, gamma, 1e-6, o.rms_y, rstd);
  resnorm::rms_norm_vjp_into<float>(x, dy, gamma, rstd, o.rms_dx, o.rms_dgamma, ws);
  resnorm::gelu_forward_into<float>(x, resnorm::gelu_approximation::erf, o.gelu_y);
  resnorm::gelu_vjp_into<float>(x, dy, resnorm::gelu_approximation::tanh, o.gelu_dx);
  using bf16 = resnorm::kernels::bf16;
  const matrix<bf16> xb = x.cast<bf16>(), dyb = dy.cast<bf16>();
  o.gelu_bf16_y.resize(rows, dim), o.gelu_bf16_dx.resize(rows, dim);
  resnorm::gelu_forward_into<bf16>(xb, resnorm::gelu_approximation::erf, o.gelu_bf16_y);
  resnorm::gelu_vjp_into<bf16>(xb, dyb, resnorm::gelu_approximation::tanh, o.gelu_bf16_dx);
  resnorm::add_norm_forward_into<float>(resnorm::add_norm_kind::layer_norm, x, f, gamma, beta, 1e-5,
                                        o.add_s, o.add_y, mean2, rstd2);
  resnorm::add_norm_vjp_into<float>(resnorm::add_norm_kind::layer_norm, o.add_s, f, dy, gamma,
                                    mean2, rstd2, o.add_dx, o.add_dgamma, o.add_dbeta, ws);
  return o;
}

void check_same(const outputs& a, const outputs& b) {
  CHECK(a.ln_y == b.ln_y);
  CHECK(a.ln_mean == b.ln_mean);
  CHECK(a.ln_rstd == b.ln_rstd);
  CHECK(a.ln_dx == b.ln_dx);
  CHECK(a.ln_dgamma == b.ln_dgamma);
  CHECK(a.ln_dbeta == b.ln_dbeta);
  CHECK(a.rms_y == b.rms_y);
  CHECK(a.rms_dx == b.rms_dx);
  CHECK(a.rms_dgamma == b.rms_dgamma);
  CHECK(a.gelu_y == b.gelu_y);
  CHECK(a.gelu_dx == b.gelu_dx);
  // Same shapes by construction (run_all); bf16 has no bitwise ==.
  CHECK(resnorm_test::same_bits(a.gelu_bf16_y.data(), b.gelu_bf16_y.data(), a.gelu_bf16_y.size()));
  CHECK(
      resnorm_test::same_bits(a.gelu_bf16_dx.data(), b.gelu_bf16_dx.data(), a.gelu_bf16_dx.size()));
  CHECK(a.add_s == b.add_s);
  CHECK(a.add_y == b.add_y);
  CHECK(a.add_dx == b.add_dx);
  CHECK(a.add_dgamma == b.add_dgamma);
  CHECK(a.add_dbeta == b.add_dbeta);
}

}  // namespace

TEST_CASE("kernels: 1, 2 and 4 threads give the same bits", "[threads]") {
#if defined(_OPENMP)
  const int saved = omp_get_max_threads();
  for (const auto& [rows, dim] :
       std::vector<std::pair<Eigen::Index, Eigen::Index>>{{1031, 96}, {203, 1000}, {4099, 17}}) {
    CAPTURE(rows, dim);
    omp_set_num_threads(1);
    REQUIRE(resnorm::kernels::thread_count() == 1);
    const outputs one = run_all(rows, dim);
    for (int threads : {2, 4}) {
      CAPTURE(threads);
      omp_set_num_threads(threads);
      REQUIRE(resnorm::kernels::thread_count() == threads);
      check_same(one, run_all(rows, dim));
    }
  }
  omp_set_num_threads(saved);
#else
  // Serial build: one thread, and the blocked reduction is repeatable.
  CHECK(resnorm::kernels::thread_count() == 1);
  check_same(run_all(1031, 96), run_all(1031, 96));
#endif
}

// The backward's per-block accumulators start on cache lines (kernel_workspace::slot), whatever
// alignment the heap gives its storage, and two blocks' slots never share a line; float and
// double, for row widths that are and are not a multiple of a line. The first slot starts, modulo
// 4 KiB, on the line keep_clear_of chose: the middle of the widest gap between the rows' offsets.
TEST_CASE("kernels: the workspace's accumulator slots start on cache lines", "[threads]") {
  namespace k = resnorm::kernels;
  const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  alignas(4096) static unsigned char page[2 * 4096];
  const auto at = [&](std::size_t offset) { return static_cast<const void*>(page + offset); };
  // The rows' offsets, and the line half way round the widest gap between them (by hand).
  struct placement {
    std::array<const void*, 3> rows;  // null: no row
    std::uintptr_t line;
  };
  const placement placements[] = {
      {{at(0)}, 2048},                      // one row: half a page on
      {{at(0), at(0), at(0)}, 2048},        // x, dy and dx at one offset
      {{at(0), at(1024), at(2048)}, 3072},  // the gap from 2048 round to 4096
      {{at(100), nullptr}, 2112},           // 2148, rounded down to a line; null rows skipped
      {{at(4000), at(50)}, 1984},           // the gap from 50 to 4000: 2025, rounded down
      {{at(2), at(4094)}, 2048},            // bf16 rows at 2-byte offsets
  };
  CHECK(k::quietest_line_in_page({nullptr}) == 0);
  for (const placement& p : placements) {
    CAPTURE(p.line);
    CHECK(k::quietest_line_in_page({p.rows[0], p.rows[1], p.rows[2]}) == p.line);
    for (const Eigen::Index dim :
         {Eigen::Index{1}, Eigen::Index{17}, Eigen::Index{64}, Eigen::Index{1000}}) {
      CAPTURE(dim);
      k::kernel_workspace ws;
      const Eigen::Index rows = 4099;
      ws.reserve(rows, dim);
      ws.keep_clear_of({p.rows[0], p.rows[1], p.rows[2]});
      CHECK(address(ws.slot<float>(0, dim)) % 4096 == p.line);
      CHECK(address(ws.slot<double>(0, dim)) % 4096 == p.line);
      const auto on_line = [&](const void* q) { return address(q) % k::cache_line_bytes == 0; };
      for (Eigen::Index b = 0; b < k::reduction_blocks(rows); ++b) {
        CAPTURE(b);
        CHECK(on_line(ws.slot<float>(b, dim)));
        CHECK(on_line(ws.slot<double>(b, dim)));
        // The dβ half, one slot_stride further.
        const std::size_t stride = k::kernel_workspace::slot_stride(dim);
        CHECK(on_line(ws.slot<float>(b, dim) + stride));
        CHECK(on_line(ws.slot<double>(b, dim) + stride));
      }
    }
  }
}
