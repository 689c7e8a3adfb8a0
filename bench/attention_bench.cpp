// Benchmarks for resnorm/attention.hpp: causal multi-head self-attention, forward and vjp.
// Cost model: O(T·d²) for the four projections plus O(T²·d) for scores and the weighted sum.
#include <benchmark/benchmark.h>

#include "resnorm/attention.hpp"
#include "resnorm/random.hpp"

namespace {

resnorm::causal_self_attention<float> make_attention(resnorm::index dim, resnorm::index heads) {
  resnorm::normal_generator rng(1);
  auto w = [&] { return resnorm::random_normal<float>(dim, dim, rng, 0.02); };
  return resnorm::causal_self_attention<float>(w(), w(), w(), w(), heads);
}

void BM_causal_self_attention_forward(benchmark::State& state) {
  const resnorm::index rows = state.range(0), dim = state.range(1);
  const auto f = make_attention(dim, 4);
  resnorm::normal_generator rng(2);
  const resnorm::matrix<float> x = resnorm::random_normal<float>(rows, dim, rng);
  for (auto _ : state) {
    resnorm::matrix<float> y = f.forward(x);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * rows * dim *
                          static_cast<std::int64_t>(sizeof(float)));
}

void BM_causal_self_attention_vjp(benchmark::State& state) {
  const resnorm::index rows = state.range(0), dim = state.range(1);
  const auto f = make_attention(dim, 4);
  resnorm::normal_generator rng(3);
  const resnorm::matrix<float> x = resnorm::random_normal<float>(rows, dim, rng);
  const resnorm::matrix<float> dy = resnorm::random_normal<float>(rows, dim, rng);
  for (auto _ : state) {
    auto grad = f.vjp(x, dy);
    benchmark::DoNotOptimize(grad.dx.data());
  }
  state.SetBytesProcessed(state.iterations() * 3 * rows * dim *
                          static_cast<std::int64_t>(sizeof(float)));
}

}  // namespace

BENCHMARK(BM_causal_self_attention_forward)
    ->ArgsProduct({{64, 256}, {256}})
    ->ArgNames({"rows", "dim"});
BENCHMARK(BM_causal_self_attention_vjp)->ArgsProduct({{64, 256}, {256}})->ArgNames({"rows", "dim"});
