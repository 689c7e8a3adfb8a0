// The worked examples of the source texts, checked against values derived by hand here.
//
// Each expected value is worked out in the test from the example's definition (sums, square
// roots, powers), never read off the library. Where the text is wrong the test holds the right
// value and says so; the README lists those slips.
#include "../examples/worked_examples.hpp"

#include <cmath>

#include "support/catch.hpp"

namespace {

// Exact arithmetic on small integers and one sqrt: double rounding only.
constexpr double exact = 1e-14;

}  // namespace

TEST_CASE("worked Ex 1: Post-LN forward normalises x + F(x) to (-1, -1, 1, 1)", "[worked][ex1]") {
  // z = (1+1, 3-1, 5+1, 7-1) = (2, 2, 6, 6); mean 16/4 = 4; deviations ±2 so var = 4, sigma = 2.
  const auto r = worked::ex1();
  const double z[] = {2, 2, 6, 6};
  for (int j = 0; j < 4; ++j) CHECK(r.z(0, j) == z[j]);
  CHECK(r.mean == 4.0);
  CHECK(r.variance == Approx(4.0).epsilon(exact));
  const double y[] = {-1, -1, 1, 1};  // (z - 4) / 2
  for (int j = 0; j < 4; ++j) CHECK(r.y(0, j) == Approx(y[j]).epsilon(exact));
}

TEST_CASE("worked Ex 2: Pre-LN keeps the stream's mean", "[worked][ex2]") {
  // mean 4, deviations (-3, -1, 1, 3), var 20/4 = 5: LN(x) = dev / sqrt(5); y = x + LN(x).
  const auto r = worked::ex2();
  const double x[] = {1, 3, 5, 7}, dev[] = {-3, -1, 1, 3};
  for (int j = 0; j < 4; ++j) {
    CAPTURE(j);
    CHECK(r.normalised(0, j) == Approx(dev[j] / std::sqrt(5.0)).epsilon(exact));
    CHECK(r.y(0, j) == Approx(x[j] + dev[j] / std::sqrt(5.0)).epsilon(exact));
  }
  // The text's rounded values, to the 4 decimals it prints.
  CHECK(r.y(0, 0) == Approx(-0.3416).margin(5e-5));
  CHECK(r.y(0, 3) == Approx(8.3416).margin(5e-5));
  CHECK(r.output_mean == Approx(4.0).epsilon(exact));
}

TEST_CASE("worked Ex 3: a constant row is NaN with eps = 0 and zero with eps > 0",
          "[worked][ex3]") {
  const auto r = worked::ex3();
  for (int j = 0; j < 4; ++j) {
    CHECK(std::isnan(r.y_eps0(0, j)));
    CHECK(r.y_eps(0, j) == 0.0);
  }
  CHECK(r.denominator_eps == Approx(std::sqrt(1e-5)).epsilon(exact));
  CHECK(r.denominator_eps == Approx(0.00316).margin(5e-6));  // the text's 3 digits
}

TEST_CASE("worked Ex 4: Post-LN divides a huge F back down and shrinks gradients 100x",
          "[worked][ex4]") {
  const auto r = worked::ex4();
  // z = (100, -100, 100, -100): mean 0, var 10000, so y = z / sqrt(10000 + 1e-5).
  const double s = std::sqrt(10000.0 + 1e-5);
  const double z[] = {100, -100, 100, -100};
  for (int j = 0; j < 4; ++j) CHECK(r.post_y(0, j) == Approx(z[j] / s).epsilon(exact));
  // J = J_LN(z) (I + 0): its non-zero singular values are 1/sqrt(var + eps) (see layer_norm.hpp);
  // the largest is the gradient factor the text reads as 1/100.
  CHECK(r.post_gradient_factor == Approx(1.0 / s).epsilon(1e-12));
  CHECK(r.post_expected_factor == Approx(1.0 / s).epsilon(exact));
  CHECK(r.post_gradient_factor == Approx(0.01).epsilon(1e-9));
  // Pre-LN: LN(0) = 0 (0 / sqrt(eps)), a zero-bias FFN maps 0 to 0, and x + 0 = 0.
  for (int j = 0; j < 4; ++j) {
    CHECK(r.pre_branch_input(0, j) == 0.0);
    CHECK(r.pre_y(0, j) == 0.0);
  }
}

TEST_CASE("worked Ex 5: the residual's Jacobian chained over 10 layers gives 1.3^10 and 0.65^10",
          "[worked][ex5]") {
  const auto r = worked::ex5();
  CHECK(r.pre_layer == Approx(1.3).epsilon(exact));
  CHECK(r.post_layer == Approx(0.65).epsilon(exact));
  // Expected values by repeated multiplication here; the library chained its own Jacobians.
  double pre = 1, post = 1;
  for (int l = 0; l < 10; ++l) {
    pre *= 1.3;
    post *= 0.65;
  }
  CHECK(r.pre_10 == Approx(pre).epsilon(1e-13));
  CHECK(r.post_10 == Approx(post).epsilon(1e-13));
  // The text truncates: "13.7858..." and "0.013462...".
  CHECK(std::floor(r.pre_10 * 1e4) == 137858.0);
  CHECK(std::floor(r.post_10 * 1e6) == 13462.0);
  CHECK(r.shrink_10 == Approx(74.28).margin(0.01));  // "shrinks ~74x"
}

TEST_CASE("worked Ex 6: the Pre-LN stream's variance grows as N v", "[worked][ex6]") {
  // The sample variance of M normal draws with variance s2 has standard deviation
  // s2 * sqrt(2 / (M - 1)); allow 5 of them, so a false failure has odds below 1e-6.
  const resnorm::index samples = 20000;
  for (int layers : {1, 24, 96}) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      CAPTURE(layers, seed);
      const double expected = layers * 1.0;
      const double tolerance = 5 * expected * std::sqrt(2.0 / (samples - 1));
      CHECK(std::abs(worked::ex6_stream_variance(layers, samples, 1.0, seed) - expected) <=
            tolerance);
    }
  }
  // sigma_stream = sqrt(N): the text's 4.8990 and 9.7980.
  CHECK(std::sqrt(24.0) == Approx(4.8990).margin(5e-5));
  CHECK(std::sqrt(96.0) == Approx(9.7980).margin(5e-5));
}

TEST_CASE("worked Ex 7: 0.65^96 is 1.1e-18, not the text's 1.9e-18", "[worked][ex7]") {
  double expected = 1;
  for (int l = 0; l < 96; ++l) expected *= 0.65;
  const double chained = worked::ex7_post_96();
  CHECK(chained == Approx(expected).epsilon(1e-12));
  CHECK(chained == Approx(1.0957e-18).epsilon(1e-4));
  // The text's value is 73 % too large; its conclusion (vanishing gradient) stands.
  CHECK(std::abs(chained - 1.9e-18) > 0.5e-18);
}

TEST_CASE("worked Ex 8: gamma and beta rescale and shift, signs survive", "[worked][ex8]") {
  // mean 1, deviations (-3, -1, 1, 3), var 5: y = 2 dev / sqrt(5) + 1.
  const auto r = worked::ex8();
  const double dev[] = {-3, -1, 1, 3};
  for (int j = 0; j < 4; ++j)
    CHECK(r.y(0, j) == Approx(2 * dev[j] / std::sqrt(5.0) + 1).epsilon(exact));
  const double text[] = {-1.6833, 0.1056, 1.8944, 3.6833};
  for (int j = 0; j < 4; ++j) CHECK(r.y(0, j) == Approx(text[j]).margin(5e-5));
  CHECK(r.y(0, 0) < 0);
  CHECK(r.output_mean == Approx(1.0).epsilon(exact));      // beta
  CHECK(r.output_variance == Approx(4.0).epsilon(exact));  // gamma^2
}

TEST_CASE("worked lesson: LayerNorm of (1, 2, 3, 4, 5) by hand", "[worked][lesson]") {
  // mean 3, population var (4 + 1 + 0 + 1 + 4)/5 = 2, y = (v - 3) / sqrt(2 + 1e-5).
  const auto r = worked::lesson_ln();
  const double s = std::sqrt(2.0 + 1e-5);
  for (int j = 0; j < 5; ++j) CHECK(r.y(0, j) == Approx((j + 1 - 3) / s).epsilon(exact));
  CHECK(r.y(0, 0) == Approx(-1.414210).margin(5e-7));  // the lesson's printed digits
  CHECK(std::abs(r.output_mean) < 1e-15);
  // std of the output: sqrt(2 / (2 + 1e-5)) = 1 - 2.5e-6 to first order.
  CHECK(r.output_std == Approx(std::sqrt(2.0 / (2.0 + 1e-5))).epsilon(exact));
  CHECK(r.output_std == Approx(1 - 2.5e-6).margin(1e-11));
}

TEST_CASE("worked overview: the printed LN Jacobian lacks a 1/d", "[worked][jacobian]") {
  // At z = (2, 2, 6, 6), gamma 1, eps 0: sigma = 2, zhat = (-1, -1, 1, 1), d = 4.
  // Right:   J[0][0] = (1 - 1/4 - zhat_0^2/4) / 2 = 0.25.
  // Printed: J[0][0] = (1 - 1/4 - zhat_0^2) / 2 = -0.125.
  const worked::matrix<double> z = worked::row({2, 2, 6, 6});
  const resnorm::layer_norm<double> ln(4, 0.0);
  CHECK(ln.jacobian(z)(0, 0) == Approx(0.25).epsilon(exact));
  CHECK(worked::overview_ln_jacobian_as_printed(z)(0, 0) == Approx(-0.125).epsilon(exact));
  CHECK(resnorm::check_jacobian(ln, z).max_rel_error < 1e-8);
}
