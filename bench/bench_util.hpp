// bench/bench_util.hpp — shared pieces of resnorm's benchmarks: the shapes, page-aligned
// buffers, the memcpy roofline, the byte counters and thin oneDNN wrappers.
//
// Case names: <op>/<impl>/rows:R/dim:D, e.g. layer_norm_forward/resnorm/rows:4096/dim:4096.
// Every case sets bytes_per_second (the bytes the operation must move: forward reads x and
// writes y; backward reads x, dy and the saved stats and writes dx) and items_per_second
// (elements of x). The roofline memcpy/memcpy/rows:R/dim:D copies R·D floats (reads and writes
// R·D·4 bytes each), so "% of memcpy" compares bytes per second at the same footprint.
//
// oneDNN cases exist when the build found it (RESNORM_BENCH_HAVE_DNNL = 1); the primitives are
// created once, outside the timed loop.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "resnorm/kernels/parallel.hpp"
#include "resnorm/matrix.hpp"
#include "resnorm/random.hpp"

#ifndef RESNORM_BENCH_HAVE_DNNL
#define RESNORM_BENCH_HAVE_DNNL 0
#endif
#if RESNORM_BENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace resnorm_bench {

using resnorm::index;

struct shape {
  index rows, dim;
};

// The default shapes; 32768 x 4096 (512 MiB per float matrix) only with RESNORM_BENCH_LARGE=1
// in the environment, so a default run stays short.
inline std::vector<shape> shapes() {
  std::vector<shape> s = {{1, 4096}, {64, 768}, {1024, 1024}, {4096, 4096}, {8192, 64}};
  const char* large = std::getenv("RESNORM_BENCH_LARGE");
  if (large && std::string(large) == "1") s.push_back({32768, 4096});
  return s;
}

inline std::string case_name(const char* op, const char* impl, shape s) {
  return std::string(op) + "/" + impl + "/rows:" + std::to_string(s.rows) +
         "/dim:" + std::to_string(s.dim);
}

// Registers fn(state, shape) as <op>/<impl>/rows:R/dim:D for every shape.
template <class Fn>
void register_cases(const char* op, const char* impl, Fn fn) {
  for (const shape s : shapes()) {
    benchmark::RegisterBenchmark(case_name(op, impl, s).c_str(), [fn, s](benchmark::State& state) {
      fn(state, s);
    })->UseRealTime();
  }
}

// ---- page-aligned buffers --------------------------------------------------------------------

// A row-major rows x dim buffer starting on a 4 KiB page, touched once so the timed loop sees
// no page faults (buffers at different page offsets changed a triad's speed 2x). Buffers of
// 2 MiB and more sit on 2 MiB pages where the kernel grants them (Linux transparent huge pages
// in madvise mode), as a framework's tensor allocator would arrange: a 64 MiB matrix on 4 KiB
// pages costs a TLB miss every page, which is the page tables' speed, not the kernel's. (The
// run-to-run spread of L3-resident cases on the shared VM, up to 25 %, remains.)
template <class T>
class aligned_matrix {
 public:
  aligned_matrix(index rows, index dim) : rows_(rows), dim_(dim) {
    constexpr std::size_t huge_page = std::size_t(2) << 20;
    const std::size_t wanted = static_cast<std::size_t>(rows * dim) * sizeof(T);
    const std::size_t align = wanted >= huge_page ? huge_page : 4096;
    const std::size_t bytes = std::max<std::size_t>((wanted + align - 1) / align * align, align);
    data_.reset(static_cast<T*>(std::aligned_alloc(align, bytes)));
#if defined(__linux__)
    if (align == huge_page) madvise(static_cast<void*>(data_.get()), bytes, MADV_HUGEPAGE);
#endif
    std::memset(static_cast<void*>(data_.get()), 0, bytes);
  }
  Eigen::Map<resnorm::matrix<T>> map() { return {data_.get(), rows_, dim_}; }
  Eigen::Map<const resnorm::matrix<T>> cmap() const { return {data_.get(), rows_, dim_}; }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t bytes() const { return static_cast<std::size_t>(rows_ * dim_) * sizeof(T); }

  // Seeded N(mean, std²) entries, identical on every machine.
  void fill_normal(std::uint64_t seed, double std_dev = 1.0, double mean = 0.0) {
    resnorm::normal_generator rng(seed);
    for (index k = 0; k < rows_ * dim_; ++k)
      data_[k] = T(static_cast<float>(mean + std_dev * rng()));
  }

 private:
  struct free_deleter {
    void operator()(T* p) const { std::free(p); }
  };
  index rows_, dim_;
  std::unique_ptr<T[], free_deleter> data_;
};

// ---- counters --------------------------------------------------------------------------------

inline void set_counters(benchmark::State& state, shape s, double bytes_per_call) {
  state.SetBytesProcessed(
      static_cast<std::int64_t>(static_cast<double>(state.iterations()) * bytes_per_call));
  state.SetItemsProcessed(state.iterations() * s.rows * s.dim);
}

// Forward: read x, write y.
template <class T>
double forward_bytes(shape s) {
  return 2.0 * static_cast<double>(s.rows * s.dim) * sizeof(T);
}

// Backward: read x and dy, write dx, read the saved stats (two doubles per row).
template <class T>
double backward_bytes(shape s) {
  return 3.0 * static_cast<double>(s.rows * s.dim) * sizeof(T) + 16.0 * static_cast<double>(s.rows);
}

// ---- the roofline ----------------------------------------------------------------------------

// Split over rows by the kernels' own parallel_rows: with OpenMP and more than one thread
// (OMP_NUM_THREADS) each thread copies its share, the memory's own scaling against which the
// kernels' "2 threads / 1 thread" is read; below parallel_min_elements one memcpy of it all.
inline void memcpy_case(benchmark::State& state, shape s) {
  aligned_matrix<float> src(s.rows, s.dim), dst(s.rows, s.dim);
  src.fill_normal(1);
  const std::size_t row_bytes = static_cast<std::size_t>(s.dim) * sizeof(float);
  for (auto _ : state) {
    resnorm::kernels::parallel_rows(s.rows, s.dim, [&](index begin, index end) {
      std::memcpy(dst.data() + begin * s.dim, src.data() + begin * s.dim,
                  static_cast<std::size_t>(end - begin) * row_bytes);
    });
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, forward_bytes<float>(s));
}

inline void register_memcpy() { register_cases("memcpy", "memcpy", memcpy_case); }

// ---- oneDNN ----------------------------------------------------------------------------------

#if RESNORM_BENCH_HAVE_DNNL
struct onednn_env {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  static onednn_env& get() {
    static onednn_env env;
    return env;
  }
};

inline dnnl::memory::desc onednn_matrix_desc(shape s) {
  return dnnl::memory::desc({s.rows, s.dim}, dnnl::memory::data_type::f32,
                            dnnl::memory::format_tag::ab);
}

inline dnnl::memory::desc onednn_vector_desc(index n) {
  return dnnl::memory::desc({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
}

// LayerNorm with scale and shift (forward_training: writes mean and variance, as resnorm's
// forward writes mean and rstd).
struct onednn_layer_norm {
  shape s;
  float eps;
  dnnl::memory::desc md = onednn_matrix_desc(s);
  dnnl::layer_normalization_forward::primitive_desc fwd_pd{
      dnnl::layer_normalization_forward::desc(
          dnnl::prop_kind::forward_training, md, eps,
          dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift),
      onednn_env::get().engine};
  dnnl::layer_normalization_forward fwd{fwd_pd};

  dnnl::layer_normalization_backward::primitive_desc bwd_pd() const {
    return {dnnl::layer_normalization_backward::desc(
                dnnl::prop_kind::backward, md, md, eps,
                dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift),
            onednn_env::get().engine, fwd_pd};
  }
};

struct onednn_eltwise {
  dnnl::memory::desc md;
  dnnl::eltwise_forward::primitive_desc fwd_pd;
  dnnl::eltwise_forward fwd;
  dnnl::eltwise_backward::primitive_desc bwd_pd;
  dnnl::eltwise_backward bwd;

  onednn_eltwise(shape s, dnnl::algorithm alg)
      : md(onednn_matrix_desc(s)),
        fwd_pd(dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, md, 0.f, 0.f),
               onednn_env::get().engine),
        fwd(fwd_pd),
        bwd_pd(dnnl::eltwise_backward::desc(alg, md, md, 0.f, 0.f), onednn_env::get().engine,
               fwd_pd),
        bwd(bwd_pd) {}
};
#endif

}  // namespace resnorm_bench
