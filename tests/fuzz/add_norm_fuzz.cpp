// libFuzzer target: the fused residual add + LayerNorm / RMSNorm (add_norm_forward, add_norm_vjp),
// on a shape, eps and values decoded from the input (layout: fuzz_common.hpp, with one more byte
// after the header whose low bit picks RMSNorm). s must be x + f exactly; y and dx must match the
// long double reference on s within the bound; a non-finite row stays in its row.
#include "fuzz_common.hpp"
#include "resnorm/add_norm.hpp"

namespace {

using namespace resnorm_fuzz;

template <class S>
void run_case(byte_reader& in, const header& h) {
  const bool rms = in.take<std::uint8_t>() & 1;
  const S eps = read_eps<S>(in, h.eps_choice);
  value_source<S> values(in, h.structured);
  resnorm::matrix<S> x = values.matrix(h.rows, h.dim);
  resnorm::matrix<S> f = values.matrix(h.rows, h.dim);
  resnorm::matrix<S> dy = values.matrix(h.rows, h.dim);
  resnorm::matrix<S> ds = values.matrix(h.rows, h.dim);
  const resnorm::vector<S> gamma =
      h.has_gamma ? resnorm::vector<S>(values.matrix(h.dim, 1)) : resnorm::vector<S>();
  const resnorm::vector<S> beta =
      h.has_beta && !rms ? resnorm::vector<S>(values.matrix(h.dim, 1)) : resnorm::vector<S>();
  const auto kind = rms ? resnorm::add_norm_kind::rms_norm : resnorm::add_norm_kind::layer_norm;
  const double base = std::is_same_v<S, float> ? 2e-6 : 1e-14;

  auto run = [&] {
    const auto out = resnorm::add_norm_forward<S>(kind, x, f, gamma, beta, double(eps));
    const auto g = resnorm::add_norm_vjp<S>(kind, out.s, ds, dy, gamma, out);
    return norm_outputs<S>{out.s, out.y, g.dx, g.dgamma, g.dbeta};
  };
  const norm_outputs<S> out = run();
  // s = x + f, one IEEE addition per element: bit for bit, except that any NaN matches any NaN
  // (same_values: which operand's NaN an addition hands on depends on the operand order).
  const resnorm::matrix<S> sum = x + f;
  RESNORM_FUZZ_CHECK(same_values(sum.data(), out.s.data(), std::size_t(sum.size())),
                     "add_norm: s is not x + f%s", "");
  check_norm<S>(rms ? "add_norm rms" : "add_norm layer", rms ? norm_kind::rms : norm_kind::layer,
                out, dy, ds, gamma, beta, eps, base, true);
  check_rows_isolated<S>("add_norm", {&x, &f, &dy, &ds}, run);
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
