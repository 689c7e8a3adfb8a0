// bench/gelu_bench.cpp — GELU forward (erf, tanh) and erf backward: resnorm's float and bf16
// kernels, the naive scalar-libm loop, oneDNN's eltwise primitives and the memcpy roofline.
#include <cmath>

#include "bench_util.hpp"
#include "resnorm/kernels/gelu_kernel.hpp"

namespace {

using namespace resnorm_bench;
using resnorm::gelu_approximation;
using resnorm::matrix;
using bf16 = resnorm::kernels::bf16;

template <class T, gelu_approximation Form>
void forward_resnorm(benchmark::State& state, shape s) {
  aligned_matrix<T> x(s.rows, s.dim), y(s.rows, s.dim);
  x.fill_normal(1, 3.0);
  for (auto _ : state) {
    resnorm::gelu_forward_into<T>(x.cmap(), Form, y.map());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, forward_bytes<T>(s));
}

template <class T>
void backward_resnorm(benchmark::State& state, shape s) {
  aligned_matrix<T> x(s.rows, s.dim), dy(s.rows, s.dim), dx(s.rows, s.dim);
  x.fill_normal(1, 3.0);
  dy.fill_normal(2);
  for (auto _ : state) {
    resnorm::gelu_vjp_into<T>(x.cmap(), dy.cmap(), gelu_approximation::erf, dx.map());
    benchmark::DoNotOptimize(dx.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, 3.0 * static_cast<double>(s.rows * s.dim) * sizeof(T));
}

// What a user would write: the textbook formula, element by element, with libm.
template <gelu_approximation Form>
void forward_naive(benchmark::State& state, shape s) {
  aligned_matrix<float> x(s.rows, s.dim);
  x.fill_normal(1, 3.0);
  matrix<float> y(s.rows, s.dim);
  for (auto _ : state) {
    if constexpr (Form == gelu_approximation::erf) {
      y = x.cmap().unaryExpr([](float v) { return 0.5f * v * (1.f + std::erf(v * 0.70710678f)); });
    } else {
      y = x.cmap().unaryExpr([](float v) {
        return 0.5f * v * (1.f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
      });
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, forward_bytes<float>(s));
}

void backward_naive(benchmark::State& state, shape s) {
  aligned_matrix<float> x(s.rows, s.dim), dy(s.rows, s.dim);
  x.fill_normal(1, 3.0);
  dy.fill_normal(2);
  matrix<float> dx(s.rows, s.dim);
  for (auto _ : state) {
    dx = dy.cmap().cwiseProduct(x.cmap().unaryExpr([](float v) {
      return 0.5f * (1.f + std::erf(v * 0.70710678f)) + v * std::exp(-0.5f * v * v) * 0.39894228f;
    }));
    benchmark::DoNotOptimize(dx.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, 3.0 * static_cast<double>(s.rows * s.dim) * sizeof(float));
}

#if RESNORM_BENCH_HAVE_DNNL
template <dnnl::algorithm Alg>
void forward_onednn(benchmark::State& state, shape s) {
  aligned_matrix<float> x(s.rows, s.dim), y(s.rows, s.dim);
  x.fill_normal(1, 3.0);
  auto& env = onednn_env::get();
  onednn_eltwise e(s, Alg);
  dnnl::memory src(e.md, env.engine, x.data()), dst(e.md, env.engine, y.data());
  const std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  for (auto _ : state) {
    e.fwd.execute(env.stream, args);
    env.stream.wait();
    benchmark::ClobberMemory();
  }
  set_counters(state, s, forward_bytes<float>(s));
}

void backward_onednn(benchmark::State& state, shape s) {
  aligned_matrix<float> x(s.rows, s.dim), dy(s.rows, s.dim), dx(s.rows, s.dim);
  x.fill_normal(1, 3.0);
  dy.fill_normal(2);
  auto& env = onednn_env::get();
  onednn_eltwise e(s, dnnl::algorithm::eltwise_gelu_erf);
  dnnl::memory src(e.md, env.engine, x.data()), diff_dst(e.md, env.engine, dy.data()),
      diff_src(e.md, env.engine, dx.data());
  const std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, diff_src}};
  for (auto _ : state) {
    e.bwd.execute(env.stream, args);
    env.stream.wait();
    benchmark::ClobberMemory();
  }
  set_counters(state, s, 3.0 * static_cast<double>(s.rows * s.dim) * sizeof(float));
}
#endif

const bool registered = [] {
  register_memcpy();
  register_cases("gelu_erf_forward", "resnorm", forward_resnorm<float, gelu_approximation::erf>);
  register_cases("gelu_erf_forward", "resnorm_bf16",
                 forward_resnorm<bf16, gelu_approximation::erf>);
  register_cases("gelu_erf_forward", "naive", forward_naive<gelu_approximation::erf>);
  register_cases("gelu_tanh_forward", "resnorm", forward_resnorm<float, gelu_approximation::tanh>);
  register_cases("gelu_tanh_forward", "resnorm_bf16",
                 forward_resnorm<bf16, gelu_approximation::tanh>);
  register_cases("gelu_tanh_forward", "naive", forward_naive<gelu_approximation::tanh>);
  register_cases("gelu_erf_backward", "resnorm", backward_resnorm<float>);
  register_cases("gelu_erf_backward", "resnorm_bf16", backward_resnorm<bf16>);
  register_cases("gelu_erf_backward", "naive", backward_naive);
#if RESNORM_BENCH_HAVE_DNNL
  register_cases("gelu_erf_forward", "onednn", forward_onednn<dnnl::algorithm::eltwise_gelu_erf>);
  register_cases("gelu_tanh_forward", "onednn", forward_onednn<dnnl::algorithm::eltwise_gelu_tanh>);
  register_cases("gelu_erf_backward", "onednn", backward_onednn);
#endif
  return true;
}();

}  // namespace
