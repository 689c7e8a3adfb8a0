// bench/ab/ab_variant.cpp — the kernel calls of an A/B comparison, compiled once per side.
//
// compare.sh compiles this file twice, against two include trees, with the library's namespace
// renamed (-Dresnorm=resnorm_a, -Dresnorm=resnorm_b) and the entry point named by
// RESNORM_AB_SIDE, so that both versions of every inline kernel link into one program.
#include "resnorm/add_norm.hpp"
#include "resnorm/kernels/gelu_kernel.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"

#ifndef RESNORM_AB_SIDE
#error "compile with -DRESNORM_AB_SIDE=a or b (see compare.sh)"
#endif
#define RESNORM_AB_JOIN2(name, side) name##_##side
#define RESNORM_AB_JOIN(name, side) RESNORM_AB_JOIN2(name, side)

namespace {

// The buffers of one case, owned by ab_main.cpp and shared by both sides.
struct buffers {
  const void* x;
  const void* f;  // dy for the backwards
  void* y;        // dx for the backwards
  void* s;        // the fused add + norm's s
  const float *gamma, *beta;
  float *dgamma, *dbeta;
  double *mean, *rstd;
  long rows, dim;
};

template <class T>
using out_map = Eigen::Map<resnorm::matrix<T>>;
template <class T>
using in_map = Eigen::Map<const resnorm::matrix<T>>;

template <class T>
void run(int op, const buffers& b) {
  static resnorm::kernels::kernel_workspace ws;
  ws.reserve(b.rows, b.dim);
  const in_map<T> x(static_cast<const T*>(b.x), b.rows, b.dim);
  const in_map<T> f(static_cast<const T*>(b.f), b.rows, b.dim);
  out_map<T> y(static_cast<T*>(b.y), b.rows, b.dim);
  const Eigen::Map<const Eigen::VectorXf> gamma(b.gamma, b.dim), beta(b.beta, b.dim);
  Eigen::Map<Eigen::VectorXf> dgamma(b.dgamma, b.dim), dbeta(b.dbeta, b.dim);
  Eigen::Map<Eigen::VectorXd> mean(b.mean, b.rows), rstd(b.rstd, b.rows);
  constexpr double eps = 1e-5;
  switch (op) {
    case 0:
      resnorm::layer_norm_forward_into<T>(x, gamma, beta, eps, y, mean, rstd);
      break;
    case 1:
      resnorm::layer_norm_vjp_into<T>(x, f, gamma, mean, rstd, y, dgamma, dbeta, ws);
      break;
    case 2:
      resnorm::rms_norm_forward_into<T>(x, gamma, eps, y, rstd);
      break;
    case 3:
      resnorm::rms_norm_vjp_into<T>(x, f, gamma, rstd, y, dgamma, ws);
      break;
    case 5:
      resnorm::gelu_forward_into<T>(x, resnorm::gelu_approximation::erf, y);
      break;
    case 6:
      resnorm::gelu_vjp_into<T>(x, f, resnorm::gelu_approximation::erf, y);
      break;
    case 7:
      resnorm::gelu_forward_into<T>(x, resnorm::gelu_approximation::tanh, y);
      break;
    default:
      resnorm::add_norm_forward_into<T>(resnorm::add_norm_kind::layer_norm, x, f, gamma, beta, eps,
                                        out_map<T>(static_cast<T*>(b.s), b.rows, b.dim), y, mean,
                                        rstd);
  }
}

}  // namespace

// op: 0 LayerNorm forward, 1 its backward, 2 RMSNorm forward, 3 its backward, 4 add + LayerNorm
// forward, 5 GELU (erf) forward, 6 its vjp, 7 GELU (tanh) forward; bf16: the storage type is
// Eigen::bfloat16 (else float).
// The backwards read the statistics the forward (op 0 or 2) left in mean and rstd.
void RESNORM_AB_JOIN(run_case, RESNORM_AB_SIDE)(int op, bool bf16, const void* x, const void* f,
                                                void* y, void* s, const float* gamma,
                                                const float* beta, float* dgamma, float* dbeta,
                                                double* mean, double* rstd, long rows, long dim) {
  const buffers b{x, f, y, s, gamma, beta, dgamma, dbeta, mean, rstd, rows, dim};
  if (bf16) {
    run<Eigen::bfloat16>(op, b);
  } else {
    run<float>(op, b);
  }
}
