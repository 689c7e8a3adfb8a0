// resnorm/random.hpp — seeded normal draws that are the same on every machine.
//
// std::normal_distribution's output is implementation-defined (libstdc++ and libc++ differ), so
// seeded initialisation and seeded tests draw from std::mt19937_64, whose sequence the standard
// fixes, through our own Box–Muller transform. The same seed gives bitwise the same numbers
// with any conforming standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

#include "resnorm/matrix.hpp"

namespace resnorm {

class normal_generator {
 public:
  explicit normal_generator(std::uint64_t seed) : engine_(seed) {}

  // One N(0, 1) draw, in double.
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1]: never 0, so log(u1) is finite. 53 random bits, as std::generate_canonical
    // would give but with a fixed recipe.
    const double u1 = (static_cast<double>(engine_() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

  // A uniform draw in [0, 1), for tests that want one.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// rows x cols matrix of mean + std_dev · N(0, 1), filled in row-major order.
template <class Scalar>
matrix<Scalar> random_normal(index rows, index cols, normal_generator& rng, double std_dev = 1.0,
                             double mean = 0.0) {
  matrix<Scalar> m(rows, cols);
  for (index k = 0; k < m.size(); ++k) m.data()[k] = static_cast<Scalar>(mean + std_dev * rng());
  return m;
}

}  // namespace resnorm
