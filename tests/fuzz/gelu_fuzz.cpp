// libFuzzer target: GELU (erf and tanh forms), the class (forward, vjp) and the _into kernels
// (float arithmetic for float), on a shape and values decoded from the input (layout:
// fuzz_common.hpp; bit 1 of the flags picks the tanh form, eps is not used). Each finite element
// must match the long double reference: the class to a few ulps (relative, the derivative relative
// to the sum of its terms' magnitudes, in double times 1 + x² for erfc's conditioning), the float
// kernels to their stated 1e-6 · max(1, |x|). The class rounds GELU' to S before multiplying by dy
// (gelu.hpp), so dx is compared relative to |dy| · max(GELU' terms, min_normal/eps). A non-finite
// element must leave the others unchanged.
#include "fuzz_common.hpp"
#include "resnorm/gelu.hpp"

namespace {

using namespace resnorm_fuzz;

template <class S>
struct gelu_out {
  resnorm::matrix<S> y, dx;
};

template <class S>
void check_gelu(const char* what, bool tanh_form, bool kernel, const resnorm::matrix<S>& x,
                const resnorm::matrix<S>& dy, const gelu_out<S>& out) {
  const bool float_kernel = kernel && std::is_same_v<S, float>;
  const double tol = std::is_same_v<S, float> ? 2.5e-7 : 8 * eps_of<double>();
  for (Index k = 0; k < x.size(); ++k) {
    const ld xv = x.data()[k], dyv = dy.data()[k];
    if (!std::isfinite(xv) || !std::isfinite(dyv)) continue;
    const ld ref = tanh_form ? resnorm_reference::gelu_tanh(xv) : resnorm_reference::gelu_erf(xv);
    const ld slope = tanh_form ? resnorm_reference::gelu_tanh_derivative(xv)
                               : resnorm_reference::gelu_erf_derivative(xv);
    const ld slope_scale = tanh_form ? resnorm_reference::gelu_tanh_derivative_scale(xv)
                                     : resnorm_reference::gelu_erf_derivative_scale(xv);
    const ld big = static_cast<ld>(std::numeric_limits<S>::max()) / 4;
    // dx beyond the range of S (for the float kernels: with the slope's stated error included).
    const ld slope_bound =
        float_kernel ? std::abs(slope) + 1e-6L * std::max(1.0L, std::abs(xv)) : slope_scale;
    if (std::abs(dyv) * slope_bound > big) continue;
    const S y = out.y.data()[k], dx = out.dx.data()[k];
    if (float_kernel) {
      const ld scale = std::max(1.0L, std::abs(xv));
      const double e_y = double(std::abs(ld(y) - ref) / scale);
      const double e_dx =
          double(std::abs(ld(dx) - dyv * slope) / (scale * std::max(1.0L, std::abs(dyv))));
      RESNORM_FUZZ_CHECK(e_y <= 1e-6, "%s: x = %.9g: y = %.9g, exact %.9Lg", what, double(xv),
                         double(y), ref);
      RESNORM_FUZZ_CHECK(e_dx <= 1e-6, "%s: x = %.9g, dy = %.9g: dx = %.9g, exact %.9Lg", what,
                         double(xv), double(dyv), double(dx), dyv * slope);
    } else {
      const double cond = std::is_same_v<S, double> ? double(1 + xv * xv) : 1.0;
      const double e_y = resnorm_reference::elementwise_error<S>(y, ref, ref) / cond;
      const double e_dx = resnorm_reference::elementwise_error<S>(
                              dx, dyv * slope,
                              dyv * std::max(slope_scale, resnorm_reference::relative_floor<S>())) /
                          cond;
      RESNORM_FUZZ_CHECK(e_y <= tol, "%s: x = %.17g: y = %.17g, exact %.17Lg", what, double(xv),
                         double(y), ref);
      RESNORM_FUZZ_CHECK(e_dx <= tol, "%s: x = %.17g, dy = %.17g: dx = %.17g, exact %.17Lg", what,
                         double(xv), double(dyv), double(dx), dyv * slope);
    }
  }
}

template <class S>
void run_case(byte_reader& in, const header& h) {
  const bool tanh_form = h.has_gamma;
  const auto form =
      tanh_form ? resnorm::gelu_approximation::tanh : resnorm::gelu_approximation::erf;
  value_source<S> values(in, h.structured);
  resnorm::matrix<S> x = values.matrix(h.rows, h.dim);
  resnorm::matrix<S> dy = values.matrix(h.rows, h.dim);
  const resnorm::gelu<S> g(form);
  auto run_class = [&] { return gelu_out<S>{g.forward(x), g.vjp(x, dy).dx}; };
  auto run_into = [&] {
    gelu_out<S> o{resnorm::matrix<S>(h.rows, h.dim), resnorm::matrix<S>(h.rows, h.dim)};
    resnorm::gelu_forward_into<S>(x, form, o.y);
    resnorm::gelu_vjp_into<S>(x, dy, form, o.dx);
    return o;
  };
  check_gelu<S>("gelu class", tanh_form, false, x, dy, run_class());
  check_gelu<S>("gelu _into", tanh_form, true, x, dy, run_into());

  // Non-finite elements: every other element as in a run with them zeroed (bit for bit).
  if (x.allFinite() && dy.allFinite()) return;
  const auto dirty = run_class();
  const auto dirty_into = run_into();
  const resnorm::matrix<S> x0 = x, dy0 = dy;
  for (Index k = 0; k < x.size(); ++k) {
    if (!std::isfinite(x0.data()[k]) || !std::isfinite(dy0.data()[k])) {
      x.data()[k] = 0;
      dy.data()[k] = 0;
    }
  }
  const auto clean = run_class();
  const auto clean_into = run_into();
  for (Index k = 0; k < x.size(); ++k) {
    if (!std::isfinite(x0.data()[k]) || !std::isfinite(dy0.data()[k])) continue;
    RESNORM_FUZZ_CHECK(same_bits(&dirty.y.data()[k], &clean.y.data()[k], 1) &&
                           same_bits(&dirty.dx.data()[k], &clean.dx.data()[k], 1),
                       "gelu class: a non-finite element changed element %ld", long(k));
    RESNORM_FUZZ_CHECK(same_bits(&dirty_into.y.data()[k], &clean_into.y.data()[k], 1) &&
                           same_bits(&dirty_into.dx.data()[k], &clean_into.dx.data()[k], 1),
                       "gelu _into: a non-finite element changed element %ld", long(k));
  }
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
