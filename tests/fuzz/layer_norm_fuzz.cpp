// libFuzzer target: LayerNorm, the class (forward, vjp recomputing and from saved stats) and the
// _into kernels (float arithmetic for float), on a shape, eps and values decoded from the input
// (layout: fuzz_common.hpp). Finite rows must match the long double reference within the bound;
// a non-finite row must leave every other row unchanged.
#include "fuzz_common.hpp"
#include "resnorm/layer_norm.hpp"

namespace {

using namespace resnorm_fuzz;

template <class S>
void run_case(byte_reader& in, const header& h) {
  const S eps = read_eps<S>(in, h.eps_choice);
  value_source<S> values(in, h.structured);
  resnorm::matrix<S> x = values.matrix(h.rows, h.dim);
  resnorm::matrix<S> dy = values.matrix(h.rows, h.dim);
  const resnorm::vector<S> gamma =
      h.has_gamma ? resnorm::vector<S>(values.matrix(h.dim, 1)) : resnorm::vector<S>();
  const resnorm::vector<S> beta =
      h.has_beta ? resnorm::vector<S>(values.matrix(h.dim, 1)) : resnorm::vector<S>();
  const resnorm::matrix<S> no_ds;
  const double base = std::is_same_v<S, float> ? 2.5e-7 : 1e-14;
  const double base_into = std::is_same_v<S, float> ? 2e-6 : 1e-14;

  const resnorm::layer_norm<S> ln(gamma, beta, eps);
  auto run_class = [&] {
    const auto out = ln.forward_with_stats(x);
    const auto g = ln.vjp(x, dy);
    const auto g_stats = ln.vjp(x, dy, out.stats);
    RESNORM_FUZZ_CHECK(same_values(g.dx.data(), g_stats.dx.data(), std::size_t(g.dx.size())),
                       "layer_norm: vjp recompute and vjp from saved stats differ%s", "");
    RESNORM_FUZZ_CHECK(ln.forward(x).size() == out.y.size(), "layer_norm: forward shape%s", "");
    return norm_outputs<S>{x, out.y, g.dx, g.dgamma, g.dbeta};
  };
  auto run_into = [&] {
    norm_outputs<S> o{x, resnorm::matrix<S>(h.rows, h.dim), resnorm::matrix<S>(h.rows, h.dim),
                      resnorm::vector<S>(gamma.size() ? h.dim : 0),
                      resnorm::vector<S>(beta.size() ? h.dim : 0)};
    resnorm::vector<double> mean(h.rows), rstd(h.rows);
    resnorm::kernels::kernel_workspace ws;
    resnorm::layer_norm_forward_into<S>(x, gamma, beta, double(eps), o.y, mean, rstd);
    resnorm::layer_norm_vjp_into<S>(x, dy, gamma, mean, rstd, o.dx, o.dgamma, o.dbeta, ws);
    resnorm::matrix<S> dx2(h.rows, h.dim);
    resnorm::vector<S> dg2(o.dgamma.size()), db2(o.dbeta.size());
    resnorm::layer_norm_vjp_recompute_into<S>(x, dy, gamma, double(eps), dx2, dg2, db2, ws);
    RESNORM_FUZZ_CHECK(same_values(dx2.data(), o.dx.data(), std::size_t(dx2.size())),
                       "layer_norm_vjp_recompute_into and layer_norm_vjp_into differ%s", "");
    return o;
  };
  check_norm<S>("layer_norm", norm_kind::layer, run_class(), dy, no_ds, gamma, beta, eps, base,
                false);
  check_norm<S>("layer_norm_forward_into", norm_kind::layer, run_into(), dy, no_ds, gamma, beta,
                eps, base_into, true);
  check_rows_isolated<S>("layer_norm", {&x, &dy}, run_class);
  check_rows_isolated<S>("layer_norm_forward_into", {&x, &dy}, run_into);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  byte_reader in(data, size);
  const header h = read_header(in);
  if (h.is_double) {
    run_case<double>(in, h);
  } else {
    run_case<float>(in, h);
  }
  return 0;
}
