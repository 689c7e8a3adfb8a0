// tests/support/catch.hpp — the one Catch2 include for every resnorm test, v2 (2.13) or v3.
//
// Tests write
//
//   #include "support/catch.hpp"
//
// and then use, identically on both versions:
//
//   TEST_CASE, TEMPLATE_TEST_CASE, SECTION, CHECK, REQUIRE, CHECK_FALSE, REQUIRE_FALSE,
//   CAPTURE, INFO, CHECK_THAT / REQUIRE_THAT, CHECK_THROWS_AS / REQUIRE_THROWS_AS,
//   CHECK_THROWS_WITH / REQUIRE_THROWS_WITH, CHECK_THROWS_MATCHES / REQUIRE_THROWS_MATCHES,
//   CHECK_NOTHROW / REQUIRE_NOTHROW
//   Approx(x)                               unqualified (v2's global Approx, v3's Catch::Approx)
//   resnorm_test::contains("substring")     string matcher (v2 Contains, v3 ContainsSubstring)
//   resnorm_test::matches("regex")          string matcher, whole-string regex match
//   resnorm_test::message_contains("sub")   exception matcher: what() contains "sub"
//   resnorm_test::within_abs(target, margin), resnorm_test::within_rel(target, eps)
//
// e.g.
//   REQUIRE_THROWS_WITH(ln.forward(x), resnorm_test::contains("gamma has 3 elements"));
//   REQUIRE_THROWS_MATCHES(ln.forward(x), std::invalid_argument,
//                          resnorm_test::message_contains("layer_norm"));
//   CHECK(y(0, 0) == Approx(0.5).margin(1e-12));
//
// Spell Catch2's own matchers (Catch::Matchers::...) only through these helpers: their names
// and headers differ between the two versions. The build passes RESNORM_CATCH2_MAJOR (2 or 3)
// for the Catch2 it found; without it the header guesses from what is on the include path.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <utility>

#ifndef RESNORM_CATCH2_MAJOR
#if __has_include(<catch2/catch_test_macros.hpp>)
#define RESNORM_CATCH2_MAJOR 3
#else
#define RESNORM_CATCH2_MAJOR 2
#endif
#endif

#if RESNORM_CATCH2_MAJOR >= 3

// Individual headers rather than catch_all.hpp: catch_all pulls in the benchmark and generator
// machinery and roughly doubles the compile time of a small test file.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_message.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using Catch::Approx;

namespace resnorm_test::detail {
template <class T>
using matcher_base = Catch::Matchers::MatcherBase<T>;
}  // namespace resnorm_test::detail

namespace resnorm_test {
inline auto contains(const std::string& needle) {
  return Catch::Matchers::ContainsSubstring(needle);
}
}  // namespace resnorm_test

#else  // Catch2 v2: one header; Approx is already a global name.

#include <catch2/catch.hpp>

namespace resnorm_test::detail {
template <class T>
using matcher_base = Catch::Matchers::Impl::MatcherBase<T>;
}  // namespace resnorm_test::detail

namespace resnorm_test {
inline auto contains(const std::string& needle) { return Catch::Matchers::Contains(needle); }
}  // namespace resnorm_test

#endif

namespace resnorm_test {

// Regex over the WHOLE string (Catch2 semantics): use ".*word.*" to find a word.
inline auto matches(const std::string& regex) { return Catch::Matchers::Matches(regex); }

// |actual - target| <= margin.
inline auto within_abs(double target, double margin) {
  return Catch::Matchers::WithinAbs(target, margin);
}

// |actual - target| <= eps * max(|actual|, |target|).
inline auto within_rel(double target, double eps) {
  return Catch::Matchers::WithinRel(target, eps);
}

// For REQUIRE_THROWS_MATCHES(expr, ExceptionType, message_contains("...")): checks the type and
// part of the message in one assertion. Catch2's own Message() matcher wants the whole message.
class message_contains_matcher final : public detail::matcher_base<std::exception> {
 public:
  explicit message_contains_matcher(std::string needle) : needle_(std::move(needle)) {}

  bool match(const std::exception& e) const override {
    return std::string_view(e.what()).find(needle_) != std::string_view::npos;
  }

  std::string describe() const override { return "has a message containing \"" + needle_ + '"'; }

 private:
  std::string needle_;
};

inline message_contains_matcher message_contains(std::string needle) {
  return message_contains_matcher(std::move(needle));
}

}  // namespace resnorm_test
