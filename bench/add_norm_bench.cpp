// bench/add_norm_bench.cpp — fused residual add + LayerNorm (s = x + f, y = LN(s)) against the
// unfused form (the add, then resnorm's LayerNorm), forward and backward, float and bf16.
#include "bench_util.hpp"
#include "resnorm/add_norm.hpp"

namespace {

using namespace resnorm_bench;
using resnorm::add_norm_kind;
using resnorm::vector;
using bf16 = resnorm::kernels::bf16;

constexpr double eps = 1e-5;

template <class T>
struct add_data {
  aligned_matrix<T> x, f, s, y, ds, dy, dx;
  vector<float> gamma, beta, dgamma, dbeta;
  vector<double> mean, rstd;
  resnorm::kernels::kernel_workspace ws;
  explicit add_data(shape sh)
      : x(sh.rows, sh.dim),
        f(sh.rows, sh.dim),
        s(sh.rows, sh.dim),
        y(sh.rows, sh.dim),
        ds(sh.rows, sh.dim),
        dy(sh.rows, sh.dim),
        dx(sh.rows, sh.dim),
        gamma(vector<float>::Ones(sh.dim) * 1.5f),
        beta(vector<float>::Constant(sh.dim, 0.25f)),
        dgamma(sh.dim),
        dbeta(sh.dim),
        mean(sh.rows),
        rstd(sh.rows) {
    x.fill_normal(1, 2.0, 0.5);
    f.fill_normal(2);
    ds.fill_normal(3);
    dy.fill_normal(4);
    ws.reserve(sh.rows, sh.dim);
  }
};

// Forward moves x, f in and s, y out; backward s, ds, dy in (and the stats) and dx out.
template <class T>
double add_bytes(shape s) {
  return 4.0 * static_cast<double>(s.rows * s.dim) * sizeof(T);
}

template <class T>
void forward_fused(benchmark::State& state, shape s) {
  add_data<T> d(s);
  for (auto _ : state) {
    resnorm::add_norm_forward_into<T>(add_norm_kind::layer_norm, d.x.cmap(), d.f.cmap(), d.gamma,
                                      d.beta, eps, d.s.map(), d.y.map(), d.mean, d.rstd);
    benchmark::DoNotOptimize(d.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, add_bytes<T>(s));
}

void forward_unfused(benchmark::State& state, shape s) {
  add_data<float> d(s);
  for (auto _ : state) {
    d.s.map().noalias() = d.x.cmap() + d.f.cmap();
    resnorm::layer_norm_forward_into<float>(d.s.cmap(), d.gamma, d.beta, eps, d.y.map(), d.mean,
                                            d.rstd);
    benchmark::DoNotOptimize(d.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, add_bytes<float>(s));
}

template <class T>
void backward_fused(benchmark::State& state, shape s) {
  add_data<T> d(s);
  resnorm::add_norm_forward_into<T>(add_norm_kind::layer_norm, d.x.cmap(), d.f.cmap(), d.gamma,
                                    d.beta, eps, d.s.map(), d.y.map(), d.mean, d.rstd);
  for (auto _ : state) {
    resnorm::add_norm_vjp_into<T>(add_norm_kind::layer_norm, d.s.cmap(), d.ds.cmap(), d.dy.cmap(),
                                  d.gamma, d.mean, d.rstd, d.dx.map(), d.dgamma, d.dbeta, d.ws);
    benchmark::DoNotOptimize(d.dx.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, add_bytes<T>(s) + 16.0 * static_cast<double>(s.rows));
}

void backward_unfused(benchmark::State& state, shape s) {
  add_data<float> d(s);
  resnorm::add_norm_forward_into<float>(add_norm_kind::layer_norm, d.x.cmap(), d.f.cmap(), d.gamma,
                                        d.beta, eps, d.s.map(), d.y.map(), d.mean, d.rstd);
  for (auto _ : state) {
    resnorm::layer_norm_vjp_into<float>(d.s.cmap(), d.dy.cmap(), d.gamma, d.mean, d.rstd,
                                        d.dx.map(), d.dgamma, d.dbeta, d.ws);
    d.dx.map() += d.ds.cmap();
    benchmark::DoNotOptimize(d.dx.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, add_bytes<float>(s) + 16.0 * static_cast<double>(s.rows));
}

const bool registered = [] {
  register_memcpy();
  register_cases("add_layer_norm_forward", "resnorm", forward_fused<float>);
  register_cases("add_layer_norm_forward", "resnorm_bf16", forward_fused<bf16>);
  register_cases("add_layer_norm_forward", "unfused", forward_unfused);
  register_cases("add_layer_norm_backward", "resnorm", backward_fused<float>);
  register_cases("add_layer_norm_backward", "resnorm_bf16", backward_fused<bf16>);
  register_cases("add_layer_norm_backward", "unfused", backward_unfused);
  return true;
}();

}  // namespace
