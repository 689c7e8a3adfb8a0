// tests/reference/long_double_reference.hpp — LayerNorm / RMSNorm rows and the fused add + norm,
// forward and backward, in long double, one row at a time, plus the error measures the accuracy
// tests and the fuzz targets share.
//
// A different code path from include/resnorm/: plain loops over one row in long double (64-bit
// significand, 15-bit exponent, so no float or double input can overflow or underflow a sum of
// squares here). The backward is the closed form, O(d) per row; tests/accuracy_test.cpp checks it
// against the explicit Jacobian product of norm_kernel_reference.hpp.
//
//   LayerNorm: mean = Σx/d, var = Σ(x − mean)²/d (two passes), rstd = 1/sqrt(var + eps),
//              the mean held as mean + mean_lo (Σx/d, then the rest Σ(x − Σx/d)/d): long
//              double's 64 bits alone would move x − mean by 2^-64·kappa, 5e-12 at 1e8 + N(0, 1)
//              xhat = (x − mean)·rstd,  y = γ ⊙ xhat + β
//   RMSNorm:   mean := 0, var := Σx²/d, the same formulas (no β)
//   backward:  g = dy ⊙ γ,
//              dx = rstd·(g − mean(g) − xhat·mean(g ⊙ xhat))   (LayerNorm)
//              dx = rstd·(g − xhat·mean(g ⊙ xhat))             (RMSNorm)
//              dγ += dy ⊙ xhat,  dβ += dy                      (summed over rows)
//
// Error measures (all in long double, returned as double):
//   norm_wise_error(got, ref, n):  max_j |got_j − ref_j| / max(max_j |ref_j|, floor<S>),
//     floor<S> = min_normal(S) / eps(S): below it a correctly rounded S has an absolute error
//     (half a subnormal ulp) that is no longer small against the value, so values that tiny are
//     measured against the floor instead.
//   kappa(x, mean):  max_j |x_j| / max_j |x_j − mean|, the condition number of centring: a mean
//     off by one rounding of the accumulator moves every x − mean by eps_acc·kappa relative.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/gelu_reference.hpp"
#include "reference/norm_kernel_reference.hpp"  // norm_kind

namespace resnorm_reference {

using ld = long double;

struct ld_row_stats {
  ld mean = 0;     // 0 for RMSNorm
  ld mean_lo = 0;  // the rest of the mean, below mean's last bit
  ld var = 0;      // population variance (RMSNorm: mean of squares), eps not included
  ld rstd = 0;     // 1 / sqrt(var + eps)

  // v − (mean + mean_lo)
  template <class V>
  ld centred(V v) const {
    return (static_cast<ld>(v) - mean) - mean_lo;
  }
};

// Statistics of one row x[0, d).
template <class S>
ld_row_stats exact_row_stats(norm_kind kind, const S* x, Eigen::Index d, ld eps) {
  ld_row_stats s;
  if (kind == norm_kind::layer) {
    for (Eigen::Index j = 0; j < d; ++j) s.mean += static_cast<ld>(x[j]);
    s.mean /= static_cast<ld>(d);
    for (Eigen::Index j = 0; j < d; ++j) s.mean_lo += static_cast<ld>(x[j]) - s.mean;
    s.mean_lo /= static_cast<ld>(d);
    if (!std::isfinite(s.mean_lo)) s.mean_lo = 0;  // an Inf or NaN row: mean says it all
  }
  for (Eigen::Index j = 0; j < d; ++j) {
    const ld c = s.centred(x[j]);
    s.var += c * c;
  }
  s.var /= static_cast<ld>(d);
  s.rstd = 1.0L / std::sqrt(s.var + eps);
  return s;
}

// max_j |xhat_j| of one row: the scale of the error each xhat_j carries (a few roundings of the
// row's centring and rstd), and so of its share of dγ.
template <class S>
ld largest_xhat(const ld_row_stats& s, const S* x, Eigen::Index d) {
  ld largest = 0;
  for (Eigen::Index j = 0; j < d; ++j)
    largest = std::max(largest, std::abs(s.centred(x[j]) * s.rstd));
  return largest;
}

// y[0, d) of one row; gamma, beta: d values or nullptr (1 and 0).
template <class S, class P>
ld_row_stats exact_row_forward(norm_kind kind, const S* x, Eigen::Index d, const P* gamma,
                               const P* beta, ld eps, ld* y) {
  const ld_row_stats s = exact_row_stats(kind, x, d, eps);
  for (Eigen::Index j = 0; j < d; ++j) {
    const ld g = gamma ? static_cast<ld>(gamma[j]) : 1.0L;
    const ld b = beta ? static_cast<ld>(beta[j]) : 0.0L;
    y[j] = g * (s.centred(x[j]) * s.rstd) + b;
  }
  return s;
}

// dx[0, d) of one row, and dγ, dβ accumulated (each d values, or nullptr when not wanted).
// dx_scale receives rstd · max_j max(|g_j|, |xhat_j · mean(g ⊙ xhat)|), the size of the terms
// dx is a difference of: with one outlying x the second reaches sqrt(d) times the first, and a
// kernel's rounding of it (its xhat and mean(g ⊙ xhat) carry a few ulps each) with it.
template <class S, class P>
void exact_row_backward(norm_kind kind, const S* x, const S* dy, Eigen::Index d, const P* gamma,
                        ld eps, ld* dx, ld* dgamma, ld* dbeta, ld* dx_scale = nullptr) {
  const ld_row_stats s = exact_row_stats(kind, x, d, eps);
  auto xhat = [&](Eigen::Index j) { return s.centred(x[j]) * s.rstd; };
  auto g = [&](Eigen::Index j) {
    return static_cast<ld>(dy[j]) * (gamma ? static_cast<ld>(gamma[j]) : 1.0L);
  };
  ld sum_g = 0, sum_gx = 0, max_g = 0;
  for (Eigen::Index j = 0; j < d; ++j) {
    sum_g += g(j);
    sum_gx += g(j) * xhat(j);
    max_g = std::max(max_g, std::abs(g(j)));
  }
  const ld mean_g = kind == norm_kind::layer ? sum_g / static_cast<ld>(d) : 0.0L;
  const ld mean_gx = sum_gx / static_cast<ld>(d);
  ld max_term = max_g;
  for (Eigen::Index j = 0; j < d; ++j) {
    dx[j] = s.rstd * (g(j) - mean_g - xhat(j) * mean_gx);
    max_term = std::max(max_term, std::abs(xhat(j) * mean_gx));
    if (dgamma) dgamma[j] += static_cast<ld>(dy[j]) * xhat(j);
    if (dbeta) dbeta[j] += static_cast<ld>(dy[j]);
  }
  if (dx_scale) *dx_scale = s.rstd * max_term;
}

// The smallest magnitude measured relatively: min_normal(S) / eps(S) (see the header).
template <class S>
ld relative_floor() {
  return static_cast<ld>(std::numeric_limits<S>::min()) /
         static_cast<ld>(std::numeric_limits<S>::epsilon());
}

// max_j |got_j − ref_j| / max(scale, relative_floor<S>()), scale = max_j |ref_j| by default.
// NaN when a difference is NaN, so a NaN never passes a `<=` check.
template <class S>
double norm_wise_error(const S* got, const ld* ref, Eigen::Index n, ld scale = -1) {
  ld worst = 0, biggest = 0;
  for (Eigen::Index j = 0; j < n; ++j) {
    const ld e = std::abs(static_cast<ld>(got[j]) - ref[j]);
    if (std::isnan(e)) return std::numeric_limits<double>::quiet_NaN();
    worst = std::max(worst, e);
    biggest = std::max(biggest, std::abs(ref[j]));
  }
  if (scale < 0) scale = biggest;
  return static_cast<double>(worst / std::max(scale, relative_floor<S>()));
}

// max_j |x_j| / max_j |x_j − mean| (1 when mean = 0; infinite on a constant row).
template <class S>
double centring_kappa(const S* x, Eigen::Index d, ld mean) {
  ld big = 0, spread = 0;
  for (Eigen::Index j = 0; j < d; ++j) {
    big = std::max(big, std::abs(static_cast<ld>(x[j])));
    spread = std::max(spread, std::abs(static_cast<ld>(x[j]) - mean));
  }
  if (spread == 0) return big == 0 ? 1.0 : std::numeric_limits<double>::infinity();
  return std::max(1.0, static_cast<double>(big / spread));
}

// |got − ref| / max(scale, relative_floor<S>()), elementwise (GELU).
template <class S>
double elementwise_error(S got, ld ref, ld scale) {
  const ld e = std::abs(static_cast<ld>(got) - ref);
  if (std::isnan(e)) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(e / std::max(std::abs(scale), relative_floor<S>()));
}

// GELU' as the sum of its terms' magnitudes, the scale its rounding error is relative to:
//   erf:  |Φ(x)| + |x φ(x)|;   tanh: σ(2u) + |x · 2σ(1 − σ) · du|.
inline ld gelu_erf_derivative_scale(ld x) { return normal_cdf(x) + std::abs(x * normal_pdf(x)); }

inline ld gelu_tanh_derivative_scale(ld x) {
  const ld s = sigmoid(2.0L * gelu_tanh_u(x));
  const ld du = std::sqrt(2.0L / pi_l) * (1.0L + 3.0L * tanh_k1 * x * x);
  return s + std::abs(x * 2.0L * s * (1.0L - s) * du);
}

}  // namespace resnorm_reference
