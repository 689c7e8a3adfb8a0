// bench/layer_norm_bench.cpp — LayerNorm forward and backward: resnorm's kernels (float, bf16),
// the naive Eigen expression, oneDNN, and the memcpy roofline. See bench_util.hpp for names
// and counters; bench/run_benchmarks.py for the ratio table.
#include "bench_util.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/layer_norm.hpp"

namespace {

using namespace resnorm_bench;
using resnorm::matrix;
using resnorm::vector;
using bf16 = resnorm::kernels::bf16;

constexpr double eps = 1e-5;

template <class T>
struct ln_data {
  aligned_matrix<T> x, dy, y, dx;
  vector<float> gamma, beta, dgamma, dbeta;
  vector<double> mean, rstd;
  resnorm::kernels::kernel_workspace ws;
  explicit ln_data(shape s)
      : x(s.rows, s.dim),
        dy(s.rows, s.dim),
        y(s.rows, s.dim),
        dx(s.rows, s.dim),
        gamma(vector<float>::Ones(s.dim) * 1.5f),
        beta(vector<float>::Constant(s.dim, 0.25f)),
        dgamma(s.dim),
        dbeta(s.dim),
        mean(s.rows),
        rstd(s.rows) {
    x.fill_normal(1, 2.0, 0.5);
    dy.fill_normal(2);
    ws.reserve(s.rows, s.dim);
  }
};

template <class T>
void forward_resnorm(benchmark::State& state, shape s) {
  ln_data<T> d(s);
  for (auto _ : state) {
    resnorm::layer_norm_forward_into<T>(d.x.cmap(), d.gamma, d.beta, eps, d.y.map(), d.mean,
                                        d.rstd);
    benchmark::DoNotOptimize(d.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, forward_bytes<T>(s));
}

template <class T>
void backward_resnorm(benchmark::State& state, shape s) {
  ln_data<T> d(s);
  resnorm::layer_norm_forward_into<T>(d.x.cmap(), d.gamma, d.beta, eps, d.y.map(), d.mean, d.rstd);
  for (auto _ : state) {
    resnorm::layer_norm_vjp_into<T>(d.x.cmap(), d.dy.cmap(), d.gamma, d.mean, d.rstd, d.dx.map(),
                                    d.dgamma, d.dbeta, d.ws);
    benchmark::DoNotOptimize(d.dx.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, backward_bytes<T>(s));
}

// What a user would write with Eigen: whole-matrix expressions with T x d temporaries.
void forward_naive(benchmark::State& state, shape s) {
  ln_data<float> d(s);
  matrix<float> y(s.rows, s.dim);
  for (auto _ : state) {
    const auto x = d.x.cmap().array();
    const Eigen::ArrayXf mean = x.rowwise().mean();
    const matrix<float> xc = x.colwise() - mean;
    const Eigen::ArrayXf rstd = (xc.array().square().rowwise().mean() + float(eps)).rsqrt();
    y = ((xc.array().colwise() * rstd).rowwise() * d.gamma.array().transpose()).rowwise() +
        d.beta.array().transpose();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, forward_bytes<float>(s));
}

void backward_naive(benchmark::State& state, shape s) {
  ln_data<float> d(s);
  matrix<float> dx(s.rows, s.dim);
  vector<float> dgamma(s.dim), dbeta(s.dim);
  for (auto _ : state) {
    const auto x = d.x.cmap().array();
    const auto dy = d.dy.cmap().array();
    const Eigen::ArrayXf mean = x.rowwise().mean();
    const matrix<float> xc = x.colwise() - mean;
    const Eigen::ArrayXf rstd = (xc.array().square().rowwise().mean() + float(eps)).rsqrt();
    const matrix<float> xhat = xc.array().colwise() * rstd;
    const matrix<float> g = dy.rowwise() * d.gamma.array().transpose();
    const Eigen::ArrayXf mean_g = g.array().rowwise().mean();
    const Eigen::ArrayXf mean_gx = (g.array() * xhat.array()).rowwise().mean();
    dx = ((g.array().colwise() - mean_g) - xhat.array().colwise() * mean_gx).colwise() * rstd;
    dgamma = (dy * xhat.array()).colwise().sum().transpose();
    dbeta = dy.colwise().sum().transpose();
    benchmark::DoNotOptimize(dx.data());
    benchmark::DoNotOptimize(dgamma.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, backward_bytes<float>(s));
}

#if RESNORM_BENCH_HAVE_DNNL
void forward_onednn(benchmark::State& state, shape s) {
  ln_data<float> d(s);
  auto& env = onednn_env::get();
  onednn_layer_norm ln{s, float(eps)};
  dnnl::memory src(ln.md, env.engine, d.x.data()), dst(ln.md, env.engine, d.y.data());
  dnnl::memory mean(ln.fwd_pd.mean_desc(), env.engine), var(ln.fwd_pd.variance_desc(), env.engine);
  dnnl::memory scale(onednn_vector_desc(s.dim), env.engine, d.gamma.data());
  dnnl::memory shift(onednn_vector_desc(s.dim), env.engine, d.beta.data());
  const std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, src},      {DNNL_ARG_DST, dst},     {DNNL_ARG_MEAN, mean},
      {DNNL_ARG_VARIANCE, var}, {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift}};
  for (auto _ : state) {
    ln.fwd.execute(env.stream, args);
    env.stream.wait();
    benchmark::ClobberMemory();
  }
  set_counters(state, s, forward_bytes<float>(s));
}

void backward_onednn(benchmark::State& state, shape s) {
  ln_data<float> d(s);
  auto& env = onednn_env::get();
  onednn_layer_norm ln{s, float(eps)};
  const auto bwd_pd = ln.bwd_pd();
  dnnl::layer_normalization_backward bwd(bwd_pd);
  dnnl::memory src(ln.md, env.engine, d.x.data()), dst(ln.md, env.engine, d.y.data());
  dnnl::memory diff_dst(ln.md, env.engine, d.dy.data()), diff_src(ln.md, env.engine, d.dx.data());
  dnnl::memory mean(ln.fwd_pd.mean_desc(), env.engine), var(ln.fwd_pd.variance_desc(), env.engine);
  dnnl::memory scale(onednn_vector_desc(s.dim), env.engine, d.gamma.data());
  dnnl::memory shift(onednn_vector_desc(s.dim), env.engine, d.beta.data());
  dnnl::memory diff_scale(onednn_vector_desc(s.dim), env.engine, d.dgamma.data());
  dnnl::memory diff_shift(onednn_vector_desc(s.dim), env.engine, d.dbeta.data());
  ln.fwd.execute(env.stream, {{DNNL_ARG_SRC, src},
                              {DNNL_ARG_DST, dst},
                              {DNNL_ARG_MEAN, mean},
                              {DNNL_ARG_VARIANCE, var},
                              {DNNL_ARG_SCALE, scale},
                              {DNNL_ARG_SHIFT, shift}});
  env.stream.wait();
  // The shift is passed although only its gradient is wanted: oneDNN 2.6 requires it.
  const std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src},
                                                      {DNNL_ARG_DIFF_DST, diff_dst},
                                                      {DNNL_ARG_MEAN, mean},
                                                      {DNNL_ARG_VARIANCE, var},
                                                      {DNNL_ARG_SCALE, scale},
                                                      {DNNL_ARG_SHIFT, shift},
                                                      {DNNL_ARG_DIFF_SRC, diff_src},
                                                      {DNNL_ARG_DIFF_SCALE, diff_scale},
                                                      {DNNL_ARG_DIFF_SHIFT, diff_shift}};
  for (auto _ : state) {
    bwd.execute(env.stream, args);
    env.stream.wait();
    benchmark::ClobberMemory();
  }
  set_counters(state, s, backward_bytes<float>(s));
}
#endif

const bool registered = [] {
  register_memcpy();
  register_cases("layer_norm_forward", "resnorm", forward_resnorm<float>);
  register_cases("layer_norm_forward", "resnorm_bf16", forward_resnorm<bf16>);
  register_cases("layer_norm_forward", "naive", forward_naive);
  register_cases("layer_norm_backward", "resnorm", backward_resnorm<float>);
  register_cases("layer_norm_backward", "resnorm_bf16", backward_resnorm<bf16>);
  register_cases("layer_norm_backward", "naive", backward_naive);
#if RESNORM_BENCH_HAVE_DNNL
  register_cases("layer_norm_forward", "onednn", forward_onednn);
  register_cases("layer_norm_backward", "onednn", backward_onednn);
#endif
  return true;
}();

}  // namespace
