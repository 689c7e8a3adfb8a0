// bench/rms_norm_bench.cpp — RMSNorm forward and backward: resnorm's kernels (float, bf16), the
// naive Eigen expression and the memcpy roofline (oneDNN 2.6 has no RMSNorm primitive).
#include "bench_util.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"

namespace {

using namespace resnorm_bench;
using resnorm::matrix;
using resnorm::vector;
using bf16 = resnorm::kernels::bf16;

constexpr double eps = 1e-6;

template <class T>
struct rms_data {
  aligned_matrix<T> x, dy, y, dx;
  vector<float> gamma, dgamma;
  vector<double> rstd;
  resnorm::kernels::kernel_workspace ws;
  explicit rms_data(shape s)
      : x(s.rows, s.dim),
        dy(s.rows, s.dim),
        y(s.rows, s.dim),
        dx(s.rows, s.dim),
        gamma(vector<float>::Ones(s.dim) * 1.5f),
        dgamma(s.dim),
        rstd(s.rows) {
    x.fill_normal(1, 2.0, 0.5);
    dy.fill_normal(2);
    ws.reserve(s.rows, s.dim);
  }
};

template <class T>
void forward_resnorm(benchmark::State& state, shape s) {
  rms_data<T> d(s);
  for (auto _ : state) {
    resnorm::rms_norm_forward_into<T>(d.x.cmap(), d.gamma, eps, d.y.map(), d.rstd);
    benchmark::DoNotOptimize(d.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, forward_bytes<T>(s));
}

template <class T>
void backward_resnorm(benchmark::State& state, shape s) {
  rms_data<T> d(s);
  resnorm::rms_norm_forward_into<T>(d.x.cmap(), d.gamma, eps, d.y.map(), d.rstd);
  for (auto _ : state) {
    resnorm::rms_norm_vjp_into<T>(d.x.cmap(), d.dy.cmap(), d.gamma, d.rstd, d.dx.map(), d.dgamma,
                                  d.ws);
    benchmark::DoNotOptimize(d.dx.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, backward_bytes<T>(s) - 8.0 * static_cast<double>(s.rows));
}

void forward_naive(benchmark::State& state, shape s) {
  rms_data<float> d(s);
  matrix<float> y(s.rows, s.dim);
  for (auto _ : state) {
    const auto x = d.x.cmap().array();
    const Eigen::ArrayXf rstd = (x.square().rowwise().mean() + float(eps)).rsqrt();
    y = (x.colwise() * rstd).rowwise() * d.gamma.array().transpose();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, forward_bytes<float>(s));
}

void backward_naive(benchmark::State& state, shape s) {
  rms_data<float> d(s);
  matrix<float> dx(s.rows, s.dim);
  vector<float> dgamma(s.dim);
  for (auto _ : state) {
    const auto x = d.x.cmap().array();
    const auto dy = d.dy.cmap().array();
    const Eigen::ArrayXf rstd = (x.square().rowwise().mean() + float(eps)).rsqrt();
    const matrix<float> xhat = x.colwise() * rstd;
    const matrix<float> g = dy.rowwise() * d.gamma.array().transpose();
    const Eigen::ArrayXf mean_gx = (g.array() * xhat.array()).rowwise().mean();
    dx = (g.array() - xhat.array().colwise() * mean_gx).colwise() * rstd;
    dgamma = (dy * xhat.array()).colwise().sum().transpose();
    benchmark::DoNotOptimize(dx.data());
    benchmark::DoNotOptimize(dgamma.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, backward_bytes<float>(s) - 8.0 * static_cast<double>(s.rows));
}

const bool registered = [] {
  register_memcpy();
  register_cases("rms_norm_forward", "resnorm", forward_resnorm<float>);
  register_cases("rms_norm_forward", "resnorm_bf16", forward_resnorm<bf16>);
  register_cases("rms_norm_forward", "naive", forward_naive);
  register_cases("rms_norm_backward", "resnorm", backward_resnorm<float>);
  register_cases("rms_norm_backward", "resnorm_bf16", backward_resnorm<bf16>);
  register_cases("rms_norm_backward", "naive", backward_naive);
  return true;
}();

}  // namespace
