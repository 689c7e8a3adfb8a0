// tests/fuzz/fuzz_common.hpp — decoding a fuzz input into a case, and the checks every norm target
// shares: each finite row against the long double reference, each non-finite row kept in its row.
//
// Input layout (every field optional: a short input reads zeros):
//   byte 0        flags: bit 0 double (else float), bit 1 gamma, bit 2 beta, bit 3 structured
//                 values (offset + small spread, else raw bit patterns), bits 4-5 eps choice
//   byte 1, 2     rows = b1 % 9, dim = b2 % 65 (0 allowed for both)
//   next S        eps when the eps choice is 3 (absolute value; NaN becomes 0), else
//                 {1e-5, 1e-12, 0}
//   next S, S     offset and scale of structured values
//   then          x, dy (and f, ds for add+norm), gamma, beta: raw S bit patterns, or, when
//                 structured, one signed byte each: offset + scale · byte / 16
//
// A violated check prints the case and calls __builtin_trap(), which libFuzzer reports as a crash
// and saves the input.
//
// Every finite row is checked against the reference, at every magnitude: rows whose squares
// leave float's range, eps = 0 on rows of subnormal spread, |γ·dy| near the top of float,
// |x| > 1e154 in double. (Earlier versions kept those out of the checks as known defects;
// the kernels now handle them, see kernels/layer_norm_kernel.hpp.)
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "reference/long_double_reference.hpp"
#include "resnorm/matrix.hpp"

#define RESNORM_FUZZ_CHECK(condition, ...)                                                      \
  do {                                                                                          \
    if (!(condition)) {                                                                         \
      std::fprintf(stderr, "resnorm fuzz: check failed: %s at %s:%d\n  ", #condition, __FILE__, \
                   __LINE__);                                                                   \
      std::fprintf(stderr, __VA_ARGS__);                                                        \
      std::fprintf(stderr, "\n");                                                               \
      __builtin_trap();                                                                         \
    }                                                                                           \
  } while (0)

namespace resnorm_fuzz {

using Index = Eigen::Index;
using resnorm_reference::ld;
using resnorm_reference::norm_kind;

class byte_reader {
 public:
  byte_reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  template <class T>
  T take() {
    T value{};
    if (size_ >= sizeof(T)) {
      std::memcpy(&value, data_, sizeof(T));
      data_ += sizeof(T);
      size_ -= sizeof(T);
    }
    return value;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
};

struct header {
  bool is_double, has_gamma, has_beta, structured;
  int eps_choice;
  Index rows, dim;
};

inline header read_header(byte_reader& in) {
  const auto flags = in.take<std::uint8_t>();
  header h{};
  h.is_double = flags & 1;
  h.has_gamma = flags & 2;
  h.has_beta = flags & 4;
  h.structured = flags & 8;
  h.eps_choice = (flags >> 4) & 3;
  h.rows = in.take<std::uint8_t>() % 9;
  h.dim = in.take<std::uint8_t>() % 65;
  return h;
}

template <class S>
struct value_source {
  byte_reader& in;
  bool structured;
  S offset = 0, scale = 1;

  value_source(byte_reader& reader, bool structured_values)
      : in(reader), structured(structured_values) {
    offset = in.take<S>();
    scale = in.take<S>();
  }

  S next() {
    if (!structured) return in.take<S>();
    const auto k = in.take<std::int8_t>();
    return static_cast<S>(offset + scale * static_cast<S>(k) / S(16));
  }

  resnorm::matrix<S> matrix(Index rows, Index cols) {
    resnorm::matrix<S> m(rows, cols);
    for (Index k = 0; k < m.size(); ++k) m.data()[k] = next();
    return m;
  }
};

template <class S>
S read_eps(byte_reader& in, int choice) {
  const S raw = in.take<S>();
  switch (choice) {
    case 0:
      return static_cast<S>(1e-5);
    case 1:
      return static_cast<S>(1e-12);
    case 2:
      return S(0);
    default:
      return std::isnan(raw) ? S(0) : std::abs(raw);
  }
}

// memcmp of n elements that accepts the null data pointer of an empty matrix.
template <class S>
bool same_bits(const S* a, const S* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, sizeof(S) * n) == 0;
}

// Bitwise equal, except that any two NaNs count as equal: which NaN's sign and payload an
// operation on two NaNs returns depends on the order of the operands in the instruction, and
// compilers treat + and * as commutative, so two inlined copies of one row's sums may hand on
// different NaNs (found by the LayerNorm fuzzer: a row of three different NaNs gave dx = NaN with
// different bits from saved statistics than from recomputed ones). Every finite or infinite
// value must match bit for bit.
template <class S>
bool same_values(const S* a, const S* b, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    if (std::isnan(a[k]) && std::isnan(b[k])) continue;
    if (std::memcmp(&a[k], &b[k], sizeof(S)) != 0) return false;
  }
  return true;
}

template <class M>
bool row_finite(const M& m, Index t) {
  return m.cols() == 0 || m.row(t).allFinite();
}

// A copy of m with the rows in `bad` set to zero.
template <class S>
resnorm::matrix<S> zero_rows(resnorm::matrix<S> m, const std::vector<bool>& bad) {
  for (Index t = 0; t < m.rows(); ++t) {
    if (bad[static_cast<std::size_t>(t)]) m.row(t).setZero();
  }
  return m;
}

template <class S>
constexpr double eps_of() {
  return std::numeric_limits<S>::epsilon();
}

// The outputs of one norm path.
template <class S>
struct norm_outputs {
  resnorm::matrix<S> s, y, dx;  // s: the normalised input (x + f for add+norm, else x)
  resnorm::vector<S> dgamma, dbeta;
};

// Checks one norm path's outputs against the reference, row by row (see the header).
//   base: the path's rounding bound; float_arithmetic: the path computes in float (for S = float);
//   ds: the extra gradient added to dx (add+norm), or empty.
template <class S>
void check_norm(const char* what, norm_kind kind, const norm_outputs<S>& out,
                const resnorm::matrix<S>& dy, const resnorm::matrix<S>& ds,
                const resnorm::vector<S>& gamma, const resnorm::vector<S>& beta, S eps, double base,
                bool float_arithmetic) {
  const Index T = out.s.rows(), d = out.s.cols();
  if (d == 0) return;
  const bool params_finite = gamma.allFinite() && beta.allFinite();
  if (!params_finite) return;  // every row is affected: nothing to compare
  const S* g = gamma.size() ? gamma.data() : nullptr;
  const S* b = beta.size() ? beta.data() : nullptr;
  const ld big = static_cast<ld>(std::numeric_limits<S>::max()) / 16;
  std::vector<ld> y(d), dx(d), dgamma(d, 0.0L), dbeta(d, 0.0L), dgamma_scale(d, 0.0L),
      dbeta_scale(d, 0.0L);
  // dγ_j = Σ_t dy_tj·xhat_tj carries each row's xhat error, which is relative to the row's
  // largest |xhat| (tol·max|xhat|), not to xhat_tj: a column where xhat is small gets it in full.
  std::vector<ld> dgamma_xhat_error(d, 0.0L);
  bool sums_checkable = true;
  double worst_row_tol = 0;  // the sums carry each row's xhat error, bounded by its tolerance
  for (Index t = 0; t < T; ++t) {
    if (!row_finite(out.s, t) || !row_finite(dy, t) || (ds.size() && !row_finite(ds, t))) {
      sums_checkable = false;
      continue;
    }
    const S* s = out.s.row(t).data();
    const auto st = resnorm_reference::exact_row_forward(kind, s, d, g, b, ld(eps), y.data());
    ld dx_scale = 0;
    resnorm_reference::exact_row_backward(kind, s, dy.row(t).data(), d, g, ld(eps), dx.data(),
                                          dgamma.data(), dbeta.data(), &dx_scale);
    // y's scale is max|γ|·max|xhat| + max|β|: xhat carries an error relative to the row's
    // spread (max|xhat|), not to each entry, so a γ that is zero but where xhat is tiny must not
    // turn that entry's cancellation into the whole row's relative error.
    //
    // The same loop gathers what decides whether the row is inside the accuracy domain (below):
    // subnormal inputs, and xhat entries too small for S to hold in full.
    const ld s_min = static_cast<ld>(std::numeric_limits<S>::min());
    const ld full_bits = s_min * static_cast<ld>(1ULL << std::numeric_limits<S>::digits);
    ld y_scale = 0, ds_scale = 0, max_gamma = 0, max_beta = 0, max_xhat_abs = 0, max_centred = 0;
    ld max_g = 0;  // max|γ·dy|
    bool subnormal_input = false, tiny_xhat = false;
    for (Index j = 0; j < d; ++j) {
      const ld centred = st.centred(s[j]);
      const ld xhat = centred * st.rstd;
      max_centred = std::max(max_centred, std::abs(centred));
      max_xhat_abs = std::max(max_xhat_abs, std::abs(xhat));
      tiny_xhat = tiny_xhat || (xhat != 0 && std::abs(xhat) < full_bits);
      max_g = std::max(max_g, std::abs(ld(dy(t, j)) * (g ? ld(g[j]) : 1.0L)));
      for (const ld v : {ld(s[j]), ld(dy(t, j)), g ? ld(g[j]) : 1.0L}) {
        subnormal_input = subnormal_input || (v != 0 && std::abs(v) < s_min);
      }
      max_gamma = std::max(max_gamma, g ? std::abs(ld(g[j])) : 1.0L);
      max_beta = std::max(max_beta, b ? std::abs(ld(b[j])) : 0.0L);
      dgamma_scale[j] += std::abs(ld(dy(t, j)) * xhat);
      dbeta_scale[j] += std::abs(ld(dy(t, j)));
      if (ds.size()) {
        dx[j] += ld(ds(t, j));
        ds_scale = std::max(ds_scale, std::abs(ld(ds(t, j))));
      }
    }
    y_scale = max_gamma * max_xhat_abs + max_beta;
    // Outputs beyond the range of S, or an infinite rstd (eps = 0 on a constant row): no digits
    // to compare.
    if (!std::isfinite(st.rstd) || y_scale > big || dx_scale + ds_scale > big) {
      sums_checkable = false;
      continue;
    }
    // Every path centres a row on its mean as hi + lo, so the row's offset does not enter: the
    // path's own bound, whatever max|x| / max|x − mean|. Except where the centred values are
    // themselves subnormal doubles (|x| < 2^-970 and a spread below 2^-1022): there x − hi is
    // exact but lo and (x − hi) − lo are rounded to the subnormal spacing, one spacing of error
    // against the row's largest |x − mean| (a fuzz find: 1.7e-307 + spread 3.5e-312 at 4.7e-13).
    // Float rows of such spread are redone in double, where they are normal.
    const ld spacing = std::numeric_limits<double>::denorm_min();
    const double tol = std::is_same_v<S, double> && max_centred > 0
                           ? base + static_cast<double>(4 * spacing / max_centred)
                           : base;
    worst_row_tol = std::max(worst_row_tol, tol);
    for (Index j = 0; j < d && max_xhat_abs > 0; ++j) {
      dgamma_xhat_error[j] += std::abs(ld(dy(t, j))) * ld(tol) * max_xhat_abs;
    }
    // Outside the documented accuracy domain (README, "Accuracy on hostile rows"), checked only
    // for NaN isolation and by the sanitizers: subnormal values among the inputs, or products
    // γ·dy and γ·dy·xhat that sink into S's subnormals (they keep only the bits that range
    // holds), and, in double, rstd beyond double (eps = 0 on a row of subnormal spread) or
    // |γ·dy| past 2^1900. Sums or products γ·dy that merely overflow double are inside: double
    // rows rescale g (norm_group_vjp), float rows go to double.
    const ld double_max = static_cast<ld>(std::numeric_limits<double>::max());
    const bool tiny_products = (max_g != 0 && max_g < full_bits) ||
                               (max_g * max_xhat_abs != 0 && max_g * max_xhat_abs < full_bits);
    // An xhat entry (x·rstd) that sinks into S's subnormals loses its bits in y = γ·xhat + β
    // and in dγ's products dy·xhat: outside too.
    const bool beyond_double =
        subnormal_input || tiny_products || tiny_xhat ||
        (std::is_same_v<S, double> && (st.rstd > double_max || max_g > 0x1p1900L));
    if (beyond_double) {
      sums_checkable = false;
      continue;
    }
    const double y_err =
        resnorm_reference::norm_wise_error(out.y.row(t).data(), y.data(), d, y_scale);
    const double dx_err =
        resnorm_reference::norm_wise_error(out.dx.row(t).data(), dx.data(), d, dx_scale + ds_scale);
    RESNORM_FUZZ_CHECK(y_err <= tol, "%s: row %ld of %ldx%ld, eps %g: y error %g > %g", what,
                       long(t), long(T), long(d), double(eps), y_err, tol);
    // A dx whose whole scale lies in S's subnormal range has no relative digits to compare.
    RESNORM_FUZZ_CHECK(dx_err <= tol || dx_scale + ds_scale < full_bits,
                       "%s: row %ld of %ldx%ld, eps %g: dx error %g > %g", what, long(t), long(T),
                       long(d), double(eps), dx_err, tol);
  }
  if (!sums_checkable) return;
  const double c_eps =
      std::is_same_v<S, float> && float_arithmetic ? eps_of<float>() : eps_of<double>();
  const double sum_tol = base * 4 + double(T) * c_eps * 4 + 1e-12 + 2 * worst_row_tol;
  for (Index j = 0; j < d; ++j) {
    if (dgamma_scale[j] > big || dbeta_scale[j] > big) continue;  // sums beyond the range of S
    if (out.dgamma.size()) {
      const double e =
          resnorm_reference::norm_wise_error(&out.dgamma[j], &dgamma[j], 1, dgamma_scale[j]);
      // Or, absolutely, within the sum's rounding plus the rows' xhat errors (a column whose
      // exact xhat is 0, so that its scale is 0, still carries them).
      const ld abs_error = std::abs(static_cast<ld>(out.dgamma[j]) - dgamma[j]);
      const ld allowed = static_cast<ld>(sum_tol) * dgamma_scale[j] + dgamma_xhat_error[j];
      RESNORM_FUZZ_CHECK(e <= sum_tol || abs_error <= allowed,
                         "%s: dgamma[%ld] error %g > %g (absolute %Lg > %Lg)", what, long(j), e,
                         sum_tol, abs_error, allowed);
    }
    if (out.dbeta.size()) {
      const double e =
          resnorm_reference::norm_wise_error(&out.dbeta[j], &dbeta[j], 1, dbeta_scale[j]);
      RESNORM_FUZZ_CHECK(e <= sum_tol, "%s: dbeta[%ld] error %g > %g", what, long(j), e, sum_tol);
    }
  }
}

// Rows holding a NaN or ±Inf (in any input of that row) must not change any other row: the
// outputs equal, bit for bit, those of a run with the bad rows zeroed.
template <class S, class Run>
void check_rows_isolated(const char* what, const std::vector<resnorm::matrix<S>*>& inputs,
                         const Run& run) {
  if (inputs.empty() || inputs[0]->cols() == 0) return;
  const Index T = inputs[0]->rows();
  std::vector<bool> bad(static_cast<std::size_t>(T), false);
  bool any = false;
  for (Index t = 0; t < T; ++t) {
    for (const auto* m : inputs) {
      if (!row_finite(*m, t)) bad[static_cast<std::size_t>(t)] = true;
    }
    any = any || bad[static_cast<std::size_t>(t)];
  }
  if (!any) return;
  const norm_outputs<S> dirty = run();
  std::vector<resnorm::matrix<S>> saved;
  for (auto* m : inputs) {
    saved.push_back(*m);
    *m = zero_rows(*m, bad);
  }
  const norm_outputs<S> clean = run();
  for (std::size_t k = 0; k < inputs.size(); ++k) *inputs[k] = saved[k];
  for (Index t = 0; t < T; ++t) {
    if (bad[static_cast<std::size_t>(t)]) continue;
    // NaN compares unequal to itself: compare bit patterns.
    const std::size_t n = static_cast<std::size_t>(dirty.y.cols());
    const bool same_y = same_bits(dirty.y.row(t).data(), clean.y.row(t).data(), n);
    const bool same_dx = same_bits(dirty.dx.row(t).data(), clean.dx.row(t).data(), n);
    RESNORM_FUZZ_CHECK(same_y && same_dx, "%s: a non-finite row changed row %ld", what, long(t));
  }
}

}  // namespace resnorm_fuzz
