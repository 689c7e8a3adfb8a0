// Downstream consumer for the install_and_consume test, built once against an installed resnorm
// (find_package) and once against the source tree (add_subdirectory). It proves the package is
// usable as shipped: the umbrella header is found, C++20 and Eigen come with resnorm::resnorm,
// and a layer_norm runs. The maths is tested elsewhere.
#include <cstdio>
#include <resnorm/resnorm.hpp>

static_assert(__cplusplus >= 202002L, "resnorm::resnorm must bring C++20 to its consumers");

int main() {
  constexpr Eigen::Index rows = 2;
  constexpr Eigen::Index dim = 4;
  resnorm::matrix<double> x(rows, dim);
  x << 1.0, 2.0, 3.0, 4.0,  //
      -1.0, 0.0, 5.0, 2.0;

  const resnorm::layer_norm<double> ln(dim);
  const resnorm::matrix<double> y = ln.forward(x);

  if (y.rows() != rows || y.cols() != dim || !y.allFinite()) {
    std::fprintf(stderr, "consumer: layer_norm forward gave a %ldx%ld result, expected %ldx%ld\n",
                 static_cast<long>(y.rows()), static_cast<long>(y.cols()), static_cast<long>(rows),
                 static_cast<long>(dim));
    return 1;
  }
  std::printf("consumer: layer_norm<double>(%ld).forward of a %ldx%ld batch, y(0, 0) = %.6f\n",
              static_cast<long>(dim), static_cast<long>(rows), static_cast<long>(dim), y(0, 0));
  return 0;
}
