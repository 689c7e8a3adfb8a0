// Tests that the _into entry points allocate nothing: a counting global operator new (std::vector,
// the workspace) plus Eigen's own heap check (Eigen allocates with malloc, not operator new:
// EIGEN_RUNTIME_NO_MALLOC makes each Eigen heap allocation ask eigen_assert, which here counts
// instead of aborting). One warm-up call per kernel (which may size the reusable workspace),
// then the same calls with both counts required to stay put.
#include <atomic>
#include <cstdlib>
#include <new>

namespace allocation_test {
inline std::atomic<long> eigen_heap{0};
inline void eigen_check_failed() { ++eigen_heap; }
}  // namespace allocation_test

// Before any Eigen header.
#define EIGEN_RUNTIME_NO_MALLOC
#define eigen_assert(x) ((x) ? static_cast<void>(0) : allocation_test::eigen_check_failed())

#include "resnorm/add_norm.hpp"
#include "resnorm/gelu.hpp"
#include "resnorm/kernels/gelu_kernel.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"
#include "resnorm/layer_norm.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {
std::atomic<long> allocations{0};
}  // namespace

// Every non-aligned form, not only operator new(size_t): the library's array and nothrow forms
// call that one, but AddressSanitizer's runtime supplies its own, and a block from its nothrow
// new (Catch2 uses one) freed by the delete below is an alloc-dealloc mismatch.
void* operator new(std::size_t size) {
  ++allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  ++allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

using resnorm::matrix;
using resnorm::vector;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;

}  // namespace

// bf16 GELU fills its tables on first use, in static storage: the first call allocates nothing
// either.
TEST_CASE("kernels: bf16 GELU's first calls allocate nothing", "[allocation]") {
  using bf16 = resnorm::kernels::bf16;
  const matrix<bf16> x = random_matrix<float>(8, 40, 6).cast<bf16>();
  const matrix<bf16> dy = random_matrix<float>(8, 40, 7).cast<bf16>();
  matrix<bf16> y(8, 40);
  const long before = allocations.load();
  const long eigen_before = allocation_test::eigen_heap.load();
  Eigen::internal::set_is_malloc_allowed(false);
  resnorm::gelu_forward_into<bf16>(x, resnorm::gelu_approximation::erf, y);
  resnorm::gelu_vjp_into<bf16>(x, dy, resnorm::gelu_approximation::tanh, y);
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK(allocations.load() - before == 0);
  CHECK(allocation_test::eigen_heap.load() - eigen_before == 0);
  // The tables were filled: GELU(1) = Φ(1) ≈ 0.841345, 215.38 units of 2^-8: 0.83984375 in bf16.
  const matrix<bf16> one = matrix<float>::Ones(1, 1).cast<bf16>();
  matrix<bf16> y1(1, 1);
  resnorm::gelu_forward_into<bf16>(one, resnorm::gelu_approximation::erf, y1);
  CHECK(static_cast<float>(y1(0, 0)) == 0.83984375f);
}

TEST_CASE("kernels: the _into entry points allocate nothing", "[allocation]") {
  const Eigen::Index rows = 64, dim = 96;
  const matrix<float> x = random_matrix<float>(rows, dim, 1);
  const matrix<float> f = random_matrix<float>(rows, dim, 2);
  const matrix<float> dy = random_matrix<float>(rows, dim, 3);
  const vector<float> gamma = random_vector<float>(dim, 4), beta = random_vector<float>(dim, 5);
  matrix<float> y(rows, dim), dx(rows, dim), s(rows, dim);
  vector<float> dgamma(dim), dbeta(dim);
  vector<double> mean(rows), rstd(rows);
  resnorm::kernels::kernel_workspace ws;
  const resnorm::layer_norm<float> ln(gamma, beta, 1e-5f);
  resnorm::layer_norm_stats<float> stats{vector<double>(rows), vector<double>(rows)};
  const resnorm::gelu<float> act;

  auto run = [&] {
    resnorm::layer_norm_forward_into<float>(x, gamma, beta, 1e-5, y, mean, rstd);
    resnorm::layer_norm_vjp_into<float>(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, ws);
    resnorm::layer_norm_vjp_recompute_into<float>(x, dy, gamma, 1e-5, dx, dgamma, dbeta, ws);
    resnorm::rms_norm_forward_into<float>(x, gamma, 1e-6, y, rstd);
    resnorm::rms_norm_vjp_into<float>(x, dy, gamma, rstd, dx, dgamma, ws);
    resnorm::gelu_forward_into<float>(x, resnorm::gelu_approximation::erf, y);
    resnorm::gelu_vjp_into<float>(x, dy, resnorm::gelu_approximation::tanh, dx);
    resnorm::add_norm_forward_into<float>(resnorm::add_norm_kind::layer_norm, x, f, gamma, beta,
                                          1e-5, s, y, mean, rstd);
    resnorm::add_norm_vjp_into<float>(resnorm::add_norm_kind::layer_norm, s, f, dy, gamma, mean,
                                      rstd, dx, dgamma, dbeta, ws);
    ln.forward_into(x, y, stats);
    ln.vjp_into(x, dy, stats, dx, dgamma, dbeta, ws);
    act.forward_into(x, y);
    act.vjp_into(x, dy, dx);
  };
  run();  // sizes the workspace
  const long before = allocations.load();
  const long eigen_before = allocation_test::eigen_heap.load();
  Eigen::internal::set_is_malloc_allowed(false);
  run();
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK(allocations.load() - before == 0);
  CHECK(allocation_test::eigen_heap.load() - eigen_before == 0);

  // Both counters do count: a fresh workspace grows a std::vector, a plain forward allocates its
  // result through Eigen.
  resnorm::kernels::kernel_workspace fresh_ws;
  resnorm::layer_norm_vjp_into<float>(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, fresh_ws);
  CHECK(allocations.load() - before >= 1);
  Eigen::internal::set_is_malloc_allowed(false);
  const matrix<float> fresh = ln.forward(x);
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK(allocation_test::eigen_heap.load() - eigen_before >= 1);
  CHECK(fresh.rows() == rows);
}
