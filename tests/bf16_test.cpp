// Tests of bf16 storage: the conversions, and every kernel with bf16 in and out against the float
// kernel on the same (widened) inputs, within bf16's precision.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "resnorm/add_norm.hpp"
#include "resnorm/gelu.hpp"
#include "resnorm/kernels/gelu_kernel.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"
#include "resnorm/kernels/simd.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/rms_norm.hpp"
#include "resnorm/transformer_stack.hpp"
#include "support/catch.hpp"
#include "support/test_util.hpp"

namespace {

using bf16 = resnorm::kernels::bf16;
using resnorm::matrix;
using resnorm::vector;
using resnorm_test::random_matrix;
using resnorm_test::random_vector;

// bf16 keeps 8 significant bits: rounding to nearest errs by at most 2^-9 relative. The float
// result it is compared with is itself a few float ulps from exact; 2^-8 covers both with room.
constexpr double bf16_relative = 0x1p-8;
// Absolute floor for outputs near 0, where a difference of inputs cancels.
constexpr double bf16_absolute = 1e-6;

matrix<bf16> to_bf16(const matrix<float>& m) { return m.cast<bf16>(); }
matrix<float> to_float(const matrix<bf16>& m) { return m.cast<float>(); }
// bf16 values (a matrix or a vector) as doubles, exactly: the inputs of a double reference.
template <class Derived>
auto to_double(const Eigen::MatrixBase<Derived>& m) {
  return m.template cast<float>().template cast<double>().eval();
}

// Every entry of a within bf16's rounding of b.
void check_close(const matrix<bf16>& a, const matrix<float>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  double worst = 0;
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    for (Eigen::Index j = 0; j < a.cols(); ++j) {
      const double ref = static_cast<double>(b(i, j));
      const double e = std::abs(static_cast<double>(static_cast<float>(a(i, j))) - ref) /
                       (bf16_relative * std::abs(ref) + bf16_absolute);
      worst = std::max(worst, e);
    }
  }
  CHECK(worst <= 1.0);
}

}  // namespace

TEST_CASE("bf16: rounding matches Eigen's conversion, NaN stays NaN", "[bf16]") {
  resnorm::normal_generator rng(9);
  for (int k = 0; k < 200000; ++k) {
    // Random bit patterns: every exponent, ties included (low 16 bits 0x8000 happen).
    const auto bits = static_cast<std::uint32_t>(rng.engine()());
    const float v = std::bit_cast<float>(bits);
    const bf16 ours = resnorm::kernels::store<bf16>(v);
    const bf16 eigen(v);
    if (std::isnan(v)) {
      CHECK(std::isnan(static_cast<float>(ours)));
    } else {
      CAPTURE(bits);
      CHECK(ours.value == eigen.value);
    }
    // Widening is exact.
    CHECK(std::bit_cast<std::uint32_t>(resnorm::kernels::load(ours)) ==
          static_cast<std::uint32_t>(ours.value) << 16);
  }
  // Ties go to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7.
  CHECK(resnorm::kernels::store<bf16>(1.0f + 0x1p-8f).value == bf16(1.0f).value);
}

// The row kernels convert whole packs (simd.hpp: a shuffle on AVX2, and pairs of packs written
// as one store): the same bits as the scalar conversions above, NaN included, on every lane and
// at every length (pairs, a last unpaired pack, the scalar tail) and offset.
TEST_CASE("bf16: pack conversions give the scalar conversions' bits", "[bf16]") {
  namespace k = resnorm::kernels;
  resnorm::normal_generator rng(10);
  constexpr Eigen::Index n = 1000;
  std::vector<float> x(n + 64);
  for (float& v : x) v = std::bit_cast<float>(static_cast<std::uint32_t>(rng.engine()()));
  std::vector<bf16> narrowed(n + 64), widened_source(n + 64);
  for (std::size_t j = 0; j < widened_source.size(); ++j) widened_source[j] = k::store<bf16>(x[j]);
  std::vector<float> widened(n + 64);
  for (const Eigen::Index length : {Eigen::Index(1), Eigen::Index(8), Eigen::Index(15),
                                    Eigen::Index(16), Eigen::Index(24), Eigen::Index(37), n}) {
    for (Eigen::Index offset = 0; offset < 16; ++offset) {
      CAPTURE(length, offset);
      std::fill(narrowed.begin(), narrowed.end(), bf16(0.5f));
      const float* in = x.data() + offset;
      bf16* out = narrowed.data() + offset;
      k::simd::for_each<float, bf16>(length, [&](Eigen::Index j, auto tag) {
        k::simd::store(out + j, k::simd::load<float>(in + j, tag), tag);
      });
      const bf16* source = widened_source.data() + offset;
      float* back = widened.data() + offset;
      k::simd::for_each<float, float>(length, [&](Eigen::Index j, auto tag) {
        k::simd::store(back + j, k::simd::load<float>(source + j, tag), tag);
      });
      bool same = true;
      for (Eigen::Index j = 0; j < length; ++j) {
        same = same && out[j].value == k::store<bf16>(in[j]).value &&
               std::bit_cast<std::uint32_t>(back[j]) ==
                   std::bit_cast<std::uint32_t>(k::load(source[j]));
      }
      CHECK(same);
      // Nothing written outside the row.
      CHECK(narrowed[static_cast<std::size_t>(offset + length)].value == bf16(0.5f).value);
      if (offset > 0)
        CHECK(narrowed[static_cast<std::size_t>(offset - 1)].value == bf16(0.5f).value);
    }
  }
}

TEST_CASE("bf16: every kernel matches float within bf16 precision", "[bf16]") {
  for (Eigen::Index rows : {0, 1, 3}) {
    for (Eigen::Index dim : {1, 2, 500}) {
      CAPTURE(rows, dim);
      // Inputs exactly representable in bf16, so both paths see the same numbers.
      const matrix<bf16> xb = to_bf16(random_matrix<float>(rows, dim, 1 + dim, 1.5, 0.5));
      const matrix<bf16> fb = to_bf16(random_matrix<float>(rows, dim, 2 + dim));
      const matrix<bf16> dyb = to_bf16(random_matrix<float>(rows, dim, 3 + dim));
      const matrix<float> x = to_float(xb), f = to_float(fb), dy = to_float(dyb);
      const vector<float> gamma = random_vector<float>(dim, 4, 0.3, 1.0);
      const vector<float> beta = random_vector<float>(dim, 5);
      resnorm::kernels::kernel_workspace ws;
      vector<double> mean(rows), rstd(rows), mean_b(rows), rstd_b(rows);
      matrix<float> y(rows, dim), dx(rows, dim), s(rows, dim);
      matrix<bf16> yb(rows, dim), dxb(rows, dim), sb(rows, dim);
      vector<float> dg(dim), db(dim), dgb(dim), dbb(dim);

      resnorm::layer_norm_forward_into<float>(x, gamma, beta, 1e-5, y, mean, rstd);
      resnorm::layer_norm_forward_into<bf16>(xb, gamma, beta, 1e-5, yb, mean_b, rstd_b);
      check_close(yb, y);
      CHECK(mean_b == mean);
      CHECK(rstd_b == rstd);
      resnorm::layer_norm_vjp_into<float>(x, dy, gamma, mean, rstd, dx, dg, db, ws);
      resnorm::layer_norm_vjp_into<bf16>(xb, dyb, gamma, mean, rstd, dxb, dgb, dbb, ws);
      check_close(dxb, dx);
      // dγ, dβ are summed in float from the same float values: the same bits.
      CHECK(dgb == dg);
      CHECK(dbb == db);

      resnorm::rms_norm_forward_into<float>(x, gamma, 1e-6, y, rstd);
      resnorm::rms_norm_forward_into<bf16>(xb, gamma, 1e-6, yb, rstd_b);
      check_close(yb, y);
      resnorm::rms_norm_vjp_into<float>(x, dy, gamma, rstd, dx, dg, ws);
      resnorm::rms_norm_vjp_into<bf16>(xb, dyb, gamma, rstd, dxb, dgb, ws);
      check_close(dxb, dx);
      CHECK(dgb == dg);

      for (const auto form :
           {resnorm::gelu_approximation::erf, resnorm::gelu_approximation::tanh}) {
        resnorm::gelu_forward_into<float>(x, form, y);
        resnorm::gelu_forward_into<bf16>(xb, form, yb);
        check_close(yb, y);
        resnorm::gelu_vjp_into<float>(x, dy, form, dx);
        resnorm::gelu_vjp_into<bf16>(xb, dyb, form, dxb);
        check_close(dxb, dx);
      }

      // add + norm: s rounds to bf16, then y = LN(s) of that s.
      resnorm::add_norm_forward_into<bf16>(resnorm::add_norm_kind::layer_norm, xb, fb, gamma, beta,
                                           1e-5, sb, yb, mean_b, rstd_b);
      check_close(sb, matrix<float>(x + f));
      resnorm::layer_norm_forward_into<float>(to_float(sb), gamma, beta, 1e-5, y, mean, rstd);
      check_close(yb, y);
      // ... by the bf16 LayerNorm's own row code (origin, sums, apply): the same bits.
      matrix<bf16> y_of_s(rows, dim);
      vector<double> mean_s(rows), rstd_s(rows);
      resnorm::layer_norm_forward_into<bf16>(sb, gamma, beta, 1e-5, y_of_s, mean_s, rstd_s);
      CHECK(resnorm_test::same_bits(yb.data(), y_of_s.data(), yb.size()));
      CHECK(mean_b == mean_s);
      CHECK(rstd_b == rstd_s);
    }
  }
}

// bf16 GELU is looked up in tables of GELU's double values (kernels/bf16_table.hpp). Over
// every one of the 65536 bf16 inputs (NaNs, infinities and subnormals included), and in rows
// that end inside, on and past the vjp's lookup chunks and the 16-lane gathers: the forward's
// and the vjp's bits are those of the C = double element loop that float storage runs
// (gelu_row), rounded from float to bf16.
TEST_CASE("bf16: GELU is the double kernel rounded, bit for bit, for every input", "[bf16][gelu]") {
  namespace k = resnorm::kernels;
  constexpr Eigen::Index chunk = k::gelu_lookup_chunk;
  const auto same_bits = [](const matrix<bf16>& a, const matrix<float>& b) {
    long differ = 0;
    for (Eigen::Index i = 0; i < a.size(); ++i) {
      const float bi = b.data()[i];
      // store<bf16> keeps a NaN a NaN; any NaN matches any NaN.
      const bool both_nan = std::isnan(static_cast<float>(a.data()[i])) && std::isnan(bi);
      differ += !both_nan && a.data()[i].value != k::store<bf16>(bi).value;
    }
    return differ;
  };
  matrix<bf16> every(256, 256);
  for (Eigen::Index i = 0; i < every.size(); ++i)
    every.data()[i].value = static_cast<unsigned short>(i);
  const matrix<bf16> dy_every = to_bf16(random_matrix<float>(256, 256, 11));
  const matrix<float> x = to_float(every), dy = to_float(dy_every);
  for (const auto form : {resnorm::gelu_approximation::erf, resnorm::gelu_approximation::tanh}) {
    CAPTURE(form == resnorm::gelu_approximation::erf);
    matrix<float> y(256, 256), dx(256, 256);
    matrix<bf16> yb(256, 256), dxb(256, 256);
    resnorm::gelu_forward_into<float, double>(x, form, y);
    resnorm::gelu_forward_into<bf16>(every, form, yb);
    CHECK(same_bits(yb, y) == 0);
    // C = float for bf16 takes the same tables.
    resnorm::gelu_forward_into<bf16, float>(every, form, yb);
    CHECK(same_bits(yb, y) == 0);
    resnorm::gelu_derivative_into<float, double>(x, form, y);
    resnorm::gelu_derivative_into<bf16>(every, form, yb);
    CHECK(same_bits(yb, y) == 0);
    resnorm::gelu_vjp_into<float, double>(x, dy, form, dx);
    resnorm::gelu_vjp_into<bf16>(every, dy_every, form, dxb);
    CHECK(same_bits(dxb, dx) == 0);
  }
  for (Eigen::Index dim :
       {Eigen::Index{1}, Eigen::Index{9}, chunk - 1, chunk, chunk + 1, 4 * chunk + 23}) {
    CAPTURE(dim);
    // Spread over the whole curve, both tails included.
    const matrix<bf16> xb = to_bf16(random_matrix<float>(3, dim, 7 + dim, 4.0));
    const matrix<bf16> dyb = to_bf16(random_matrix<float>(3, dim, 8 + dim));
    matrix<float> y(3, dim), dx(3, dim);
    matrix<bf16> yb(3, dim), dxb(3, dim);
    for (const auto form : {resnorm::gelu_approximation::erf, resnorm::gelu_approximation::tanh}) {
      resnorm::gelu_forward_into<float, double>(to_float(xb), form, y);
      resnorm::gelu_forward_into<bf16>(xb, form, yb);
      CHECK(same_bits(yb, y) == 0);
      resnorm::gelu_vjp_into<float, double>(to_float(xb), to_float(dyb), form, dx);
      resnorm::gelu_vjp_into<bf16>(xb, dyb, form, dxb);
      CHECK(same_bits(dxb, dx) == 0);
    }
  }
}

// The same against GELU computed here in long double: over every finite bf16 input, the
// forward is within half a bf16 ulp of exact (below bf16's smallest normal, half its subnormal
// spacing), plus the float rounding on the way (2^-24 relative, 2^-150 among float subnormals).
TEST_CASE("bf16: GELU forward is correctly rounded from its exact value", "[bf16][gelu]") {
  matrix<bf16> every(256, 256), y(256, 256);
  for (Eigen::Index i = 0; i < every.size(); ++i)
    every.data()[i].value = static_cast<unsigned short>(i);
  resnorm::gelu_forward_into<bf16>(every, resnorm::gelu_approximation::erf, y);
  double worst = 0;
  long checked = 0;
  for (Eigen::Index i = 0; i < every.size(); ++i) {
    const long double x = static_cast<long double>(static_cast<float>(every.data()[i]));
    if (!std::isfinite(x)) continue;
    const long double exact = 0.5L * x * std::erfc(-x / std::sqrt(2.0L));
    // Half an ulp of bf16 at exact: 2^(e - 8) for exact in [2^e, 2^(e+1)), floored at the
    // subnormal spacing 2^-133.
    const int e = exact == 0 ? -200 : std::ilogb(exact);
    const long double half_ulp = std::ldexp(1.0L, std::max(e, -126) - 8);
    const long double bound = half_ulp + std::abs(exact) * 0x1p-24L + 0x1p-150L;
    const long double got = static_cast<long double>(static_cast<float>(y.data()[i]));
    worst = std::max(worst, static_cast<double>(std::abs(got - exact) / bound));
    ++checked;
  }
  CHECK(checked == 65536 - 2 * 127 - 2);  // all but the 254 NaNs and the two infinities
  CHECK(worst <= 1.0);
}

// The layer classes with bf16 storage (parameters, inputs and outputs all bf16) compute in double
// and round each output once, through float (Eigen's conversion): within half a bf16 ulp of the
// double class's value on the same inputs, plus the float rounding on the way (2^-24 relative)
// and a floor for outputs that cancel to near 0, where the two classes' double sums differ in
// their last bits (2^-40 of the largest output).
TEST_CASE("bf16: the layer_norm, rms_norm and gelu classes round each output once", "[bf16]") {
  using dmatrix = matrix<double>;
  const auto check_rounded = [](const auto& got_bf16, const auto& ref) {
    REQUIRE(got_bf16.rows() == ref.rows());
    REQUIRE(got_bf16.cols() == ref.cols());
    const double floor = 0x1p-40 * std::max(1.0, ref.cwiseAbs().maxCoeff());
    double worst = 0;
    for (Eigen::Index i = 0; i < ref.size(); ++i) {
      const double exact = ref.data()[i];
      const double got = static_cast<double>(static_cast<float>(got_bf16.data()[i]));
      const int e = exact == 0 ? -200 : std::ilogb(exact);
      const double half_ulp = std::ldexp(1.0, std::max(e, -126) - 8);
      const double bound = half_ulp + std::abs(exact) * 0x1p-24 + floor;
      worst = std::max(worst, std::abs(got - exact) / bound);
    }
    CHECK(worst <= 1.0);
  };
  for (Eigen::Index dim : {1, 7, 64}) {
    CAPTURE(dim);
    const matrix<bf16> x = to_bf16(random_matrix<float>(4, dim, 20 + dim, 2.0, 3.0));
    const matrix<bf16> dy = to_bf16(random_matrix<float>(4, dim, 21 + dim));
    const matrix<bf16> v = to_bf16(random_matrix<float>(4, dim, 22 + dim));
    const vector<bf16> gamma = random_vector<float>(dim, 23, 0.3, 1.0).cast<bf16>();
    const vector<bf16> beta = random_vector<float>(dim, 24).cast<bf16>();
    const dmatrix xd = to_double(x), dyd = to_double(dy), vd = to_double(v);

    const resnorm::layer_norm<bf16> ln(gamma, beta, bf16(1e-5f));
    const resnorm::layer_norm<double> ln_d(to_double(gamma), to_double(beta), double(bf16(1e-5f)));
    check_rounded(ln.forward(x), ln_d.forward(xd));
    const auto grad = ln.vjp(x, dy);
    const auto grad_d = ln_d.vjp(xd, dyd);
    check_rounded(grad.dx, grad_d.dx);
    check_rounded(grad.dgamma, grad_d.dgamma);
    check_rounded(grad.dbeta, grad_d.dbeta);
    check_rounded(ln.jvp(x, v), ln_d.jvp(xd, vd));
    check_rounded(ln.jacobian(x), ln_d.jacobian(xd));

    const resnorm::rms_norm<bf16> rms(gamma, bf16(1e-6f));
    const resnorm::rms_norm<double> rms_d(to_double(gamma), double(bf16(1e-6f)));
    check_rounded(rms.forward(x), rms_d.forward(xd));
    const auto rms_grad = rms.vjp(x, dy);
    const auto rms_grad_d = rms_d.vjp(xd, dyd);
    check_rounded(rms_grad.dx, rms_grad_d.dx);
    check_rounded(rms_grad.dgamma, rms_grad_d.dgamma);
    check_rounded(rms.jvp(x, v), rms_d.jvp(xd, vd));

    for (const auto form : {resnorm::gelu_approximation::erf, resnorm::gelu_approximation::tanh}) {
      const resnorm::gelu<bf16> g(form);
      const resnorm::gelu<double> g_d(form);
      check_rounded(g.forward(x), g_d.forward(xd));
      check_rounded(g.derivative(x), g_d.derivative(xd));
      check_rounded(g.vjp(x, dy).dx, g_d.vjp(xd, dyd).dx);
      check_rounded(g.jvp(x, v), g_d.jvp(xd, vd));
    }
  }
}

// Every class takes bf16, the composites too: a two-layer stack of each placement, built from the
// same seed (weights drawn in double, rounded once to bf16), against the double stack. Each of the
// stack's roughly thirty roundings errs by at most 2^-9 relative; their sum, with the weights'
// own rounding carried through two normalised layers, stays within 2^-4 of the output's scale,
// while a wrong formula (or a value read as the wrong type) is off by order 1.
TEST_CASE("bf16: transformer stacks run in bf16 and follow the double stack", "[bf16]") {
  using dmatrix = matrix<double>;
  resnorm::transformer_config config;
  config.dim = 8;
  config.heads = 2;
  config.hidden = 16;
  config.layers = 2;
  const auto close_in_scale = [](const auto& got_bf16, const dmatrix& ref) {
    REQUIRE(got_bf16.rows() == ref.rows());
    REQUIRE(got_bf16.cols() == ref.cols());
    const dmatrix got = to_double(got_bf16);
    REQUIRE(got.allFinite());
    const double scale = std::max(1e-3, ref.cwiseAbs().maxCoeff());
    CHECK((got - ref).cwiseAbs().maxCoeff() <= 0x1p-4 * scale);
  };
  const matrix<bf16> x = to_bf16(random_matrix<float>(5, config.dim, 31, 1.0));
  const matrix<bf16> dy = to_bf16(random_matrix<float>(5, config.dim, 32, 1.0));
  const matrix<bf16> v = to_bf16(random_matrix<float>(5, config.dim, 33, 1.0));
  const dmatrix xd = to_double(x), dyd = to_double(dy), vd = to_double(v);
  enum class placement { pre_ln, post_ln, deep_norm };
  for (const placement p : {placement::pre_ln, placement::post_ln, placement::deep_norm}) {
    CAPTURE(static_cast<int>(p));  // 0 pre_ln, 1 post_ln, 2 deep_norm
    const auto build = [&](auto tag) {
      using stack = resnorm::transformer_stack<decltype(tag)>;
      switch (p) {
        case placement::pre_ln:
          return stack::pre_ln(config, 7);
        case placement::post_ln:
          return stack::post_ln(config, 7);
        case placement::deep_norm:
          break;
      }
      return stack::deep_norm(config, 7);
    };
    const auto low = build(bf16());
    const auto ref = build(double());
    close_in_scale(low.forward(x), ref.forward(xd));
    close_in_scale(low.vjp(x, dy).dx, ref.vjp(xd, dyd).dx);
    close_in_scale(low.jvp(x, v), ref.jvp(xd, vd));
    close_in_scale(low.jacobian(x), ref.jacobian(xd));
  }
}
