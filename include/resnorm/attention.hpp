// resnorm/attention.hpp — causal multi-head self-attention, the sublayer where tokens mix.
//
//   Q = x Wq,  K = x Wk,  V = x Wv                     x: T x d,  Wq, Wk, Wv, Wo: d x d
//   per head h (columns [h·d_k, (h+1)·d_k) of Q, K, V, d_k = d / heads):
//     S_h = Q_h K_hᵀ / sqrt(d_k)                       T x T scores
//     S_h(t, u) = −inf for u > t                       causal mask: token t reads tokens ≤ t
//     P_h = softmax_rows(S_h)                          max-subtracted (softmax.hpp); P_h(t, u>t) =
//     0 O_h = P_h V_h                                    T x d_k
//   y = O Wo,  O = [O_1 … O_heads]                     T x d
// No biases on the projections (add a linear before/after for them).
//
// Jacobian: the full (T·d) x (T·d) matrix, block lower triangular in tokens. Its d x d block
// [t, s] = ∂y(t, :)/∂x(s, :) is exactly zero for s > t (the mask), and for s ≤ t
//   ∂y_t/∂x_s = Woᵀ · stack_h [ P_h(t,s) Wv_hᵀ                                        (values)
//                 + δ_ts · c · (V_h − 1 O_h(t))ᵀ diag(P_h(t, :)) K_h Wq_hᵀ               (queries)
//                 + c · P_h(t,s) (V_h(s) − O_h(t))ᵀ (Q_h(t) Wk_hᵀ) ]                     (keys)
// with c = 1/sqrt(d_k), Wq_h = Wq's columns of head h, Q_h(t) the row t of Q_h.
// jacobian() materialises it: O(T²d²) memory, O(T²·d³ + T³·d²) time. vjp()/jvp() cost
// O(T·d² + T²·d) and never form it.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/matrix.hpp"
#include "resnorm/softmax.hpp"

namespace resnorm {

template <class Scalar>
struct causal_self_attention_grad {
  matrix<Scalar> dx;   // T x d
  matrix<Scalar> dwq;  // d x d
  matrix<Scalar> dwk;  // d x d
  matrix<Scalar> dwv;  // d x d
  matrix<Scalar> dwo;  // d x d
};

// The intermediate values of one forward pass, which vjp() and jvp() reuse.
template <class Scalar>
struct causal_self_attention_activations {
  matrix<Scalar> q, k, v;             // T x d each
  std::vector<matrix<Scalar>> probs;  // per head, T x T, zero above the diagonal
  matrix<Scalar> o;                   // T x d, heads concatenated, before Wo
  matrix<Scalar> y;                   // T x d
};

template <class Scalar>
class causal_self_attention {
 public:
  using scalar_type = Scalar;

  matrix<Scalar> wq, wk, wv, wo;  // d x d each
  index heads = 1;

  causal_self_attention() = default;

  causal_self_attention(matrix<Scalar> query, matrix<Scalar> key, matrix<Scalar> value,
                        matrix<Scalar> output, index num_heads)
      : wq(std::move(query)),
        wk(std::move(key)),
        wv(std::move(value)),
        wo(std::move(output)),
        heads(num_heads) {
    check_parameters("causal_self_attention");
  }

  // All weights zero, to be filled by the caller.
  static causal_self_attention zeros(index dim, index num_heads) {
    const matrix<Scalar> z = matrix<Scalar>::Zero(dim, dim);
    return causal_self_attention(z, z, z, z, num_heads);
  }

  index dim() const { return wq.rows(); }
  index head_dim() const { return heads > 0 ? dim() / heads : 0; }

  // ---- forward ---------------------------------------------------------------------------------

  matrix<Scalar> forward(matrix_cref<Scalar> x) const { return forward_activations(x).y; }

  causal_self_attention_activations<Scalar> forward_activations(matrix_cref<Scalar> x) const {
    check_x("causal_self_attention::forward", x);
    const index T = x.rows(), dk = head_dim();
    const Scalar c = score_scale();
    const Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
    causal_self_attention_activations<Scalar> a;
    a.q = x * wq;
    a.k = x * wk;
    a.v = x * wv;
    a.o.resize(T, dim());
    a.probs.reserve(static_cast<std::size_t>(heads));
    // No tokens, no heads to run: the per-head column blocks of an empty matrix would offset a
    // null data pointer (undefined behaviour). The other passes skip them the same way.
    for (index h = 0; T > 0 && h < heads; ++h) {
      matrix<Scalar> s = c * (a.q.middleCols(h * dk, dk) * a.k.middleCols(h * dk, dk).transpose());
      for (index t = 0; t < T; ++t) s.row(t).tail(T - t - 1).setConstant(minus_inf);
      a.probs.push_back(softmax_rows<Scalar>(s));
      a.o.middleCols(h * dk, dk).noalias() = a.probs.back() * a.v.middleCols(h * dk, dk);
    }
    a.y = a.o * wo;
    return a;
  }

  // ---- vjp (backward) --------------------------------------------------------------------------
  //   dO  = dy Woᵀ,                 dWo = Oᵀ dy
  //   per head:  dP_h = dO_h V_hᵀ,  dV_h = P_hᵀ dO_h
  //              dS_h = P_h ⊙ (dP_h − rowsum(P_h ⊙ dP_h))     (softmax; masked entries stay 0)
  //              dQ_h = c · dS_h K_h,   dK_h = c · dS_hᵀ Q_h
  //   dWq = xᵀ dQ,  dWk = xᵀ dK,  dWv = xᵀ dV
  //   dx  = dQ Wqᵀ + dK Wkᵀ + dV Wvᵀ     (x feeds all three projections)

  causal_self_attention_grad<Scalar> vjp(matrix_cref<Scalar> x, matrix_cref<Scalar> dy) const {
    check_x("causal_self_attention::vjp", x);
    detail::check_same_shape("causal_self_attention::vjp", "dy", dy, "x", x);
    const auto a = forward_activations(x);
    const index T = x.rows(), dk = head_dim();
    const Scalar c = score_scale();
    causal_self_attention_grad<Scalar> grad;
    grad.dwo = a.o.transpose() * dy;
    const matrix<Scalar> d_o = dy * wo.transpose();
    matrix<Scalar> dq(T, dim()), dk_all(T, dim()), dv(T, dim());
    for (index h = 0; T > 0 && h < heads; ++h) {
      const auto& p = a.probs[static_cast<std::size_t>(h)];
      const matrix<Scalar> dp = d_o.middleCols(h * dk, dk) * a.v.middleCols(h * dk, dk).transpose();
      dv.middleCols(h * dk, dk).noalias() = p.transpose() * d_o.middleCols(h * dk, dk);
      const matrix<Scalar> ds = softmax_rows_vjp<Scalar>(p, dp);
      dq.middleCols(h * dk, dk).noalias() = c * (ds * a.k.middleCols(h * dk, dk));
      dk_all.middleCols(h * dk, dk).noalias() = c * (ds.transpose() * a.q.middleCols(h * dk, dk));
    }
    grad.dwq = x.transpose() * dq;
    grad.dwk = x.transpose() * dk_all;
    grad.dwv = x.transpose() * dv;
    grad.dx = dq * wq.transpose() + dk_all * wk.transpose() + dv * wv.transpose();
    return grad;
  }

  // ---- jvp -------------------------------------------------------------------------------------
  //   Q' = v Wq,  K' = v Wk,  V' = v Wv
  //   per head:  S_h' = c · (Q_h' K_hᵀ + Q_h K_h'ᵀ)
  //              P_h' = P_h ⊙ (S_h' − rowsum(P_h ⊙ S_h'))      (masked entries stay 0)
  //              O_h' = P_h' V_h + P_h V_h'
  //   J v = O' Wo

  matrix<Scalar> jvp(matrix_cref<Scalar> x, matrix_cref<Scalar> v) const {
    check_x("causal_self_attention::jvp", x);
    detail::check_same_shape("causal_self_attention::jvp", "v", v, "x", x);
    const auto a = forward_activations(x);
    const index T = x.rows(), dk = head_dim();
    const Scalar c = score_scale();
    const matrix<Scalar> dq = v * wq, dk_all = v * wk, dv = v * wv;
    matrix<Scalar> d_o(T, dim());
    for (index h = 0; T > 0 && h < heads; ++h) {
      const auto& p = a.probs[static_cast<std::size_t>(h)];
      const matrix<Scalar> ds =
          c * (dq.middleCols(h * dk, dk) * a.k.middleCols(h * dk, dk).transpose() +
               a.q.middleCols(h * dk, dk) * dk_all.middleCols(h * dk, dk).transpose());
      const matrix<Scalar> dp = softmax_rows_vjp<Scalar>(p, ds);
      d_o.middleCols(h * dk, dk).noalias() =
          dp * a.v.middleCols(h * dk, dk) + p * dv.middleCols(h * dk, dk);
    }
    return d_o * wo;
  }

  // ---- jacobian --------------------------------------------------------------------------------
  //   block [t, s] as in the header comment: zero for s > t.

  matrix<Scalar> jacobian(matrix_cref<Scalar> x) const {
    check_x("causal_self_attention::jacobian", x);
    const auto a = forward_activations(x);
    const index T = x.rows(), d = dim(), dk = head_dim();
    const Scalar c = score_scale();
    matrix<Scalar> J = matrix<Scalar>::Zero(T * d, T * d);
    matrix<Scalar> d_o(d, d);  // ∂O(t, :)/∂x(s, :), heads stacked along the rows
    for (index t = 0; t < T; ++t) {
      for (index s = 0; s <= t; ++s) {
        for (index h = 0; h < heads; ++h) {
          const auto& p = a.probs[static_cast<std::size_t>(h)];
          const auto cols = [&](const matrix<Scalar>& m) { return m.middleCols(h * dk, dk); };
          const auto wq_h = wq.middleCols(h * dk, dk);
          const auto wk_h = wk.middleCols(h * dk, dk);
          const auto wv_h = wv.middleCols(h * dk, dk);
          auto block = d_o.middleRows(h * dk, dk);
          // values: P(t,s) Wv_hᵀ
          block.noalias() = p(t, s) * wv_h.transpose();
          // keys: c P(t,s) (V_h(s) − O_h(t))ᵀ (Q_h(t) Wk_hᵀ)
          const vector<Scalar> centred_s = (cols(a.v).row(s) - cols(a.o).row(t)).transpose();
          block.noalias() += (c * p(t, s)) * centred_s * (cols(a.q).row(t) * wk_h.transpose());
          // queries (s = t only): c (V_h − 1 O_h(t))ᵀ diag(P(t, :)) K_h Wq_hᵀ
          if (s == t) {
            matrix<Scalar> centred = cols(a.v);
            centred.rowwise() -= cols(a.o).row(t);
            const matrix<Scalar> weighted_k = p.row(t).transpose().asDiagonal() * cols(a.k);
            block.noalias() += c * (centred.transpose() * weighted_k) * wq_h.transpose();
          }
        }
        J.block(t * d, s * d, d, d).noalias() = wo.transpose() * d_o;
      }
    }
    return J;
  }

 private:
  // c = 1/sqrt(d_k): keeps the scores' variance O(1) when Q and K entries are.
  Scalar score_scale() const {
    const index dk = head_dim();
    return dk > 0 ? Scalar(1) / static_cast<Scalar>(std::sqrt(static_cast<Scalar>(dk))) : Scalar(0);
  }

  void check_parameters(const char* function) const {
    if (heads < 1) detail::fail(function, "heads must be >= 1, got " + std::to_string(heads));
    if (wq.cols() != wq.rows()) {
      detail::fail(function, "wq is " + detail::shape_string(wq.rows(), wq.cols()) +
                                 " (expects a square d x d matrix)");
    }
    detail::check_same_shape(function, "wk", wk, "wq", wq);
    detail::check_same_shape(function, "wv", wv, "wq", wq);
    detail::check_same_shape(function, "wo", wo, "wq", wq);
    if (dim() % heads != 0) {
      detail::fail(function, "d = " + std::to_string(dim()) + " (wq is " +
                                 detail::shape_string(wq.rows(), wq.cols()) +
                                 ") is not divisible by heads = " + std::to_string(heads));
    }
  }

  void check_x(const char* function, const matrix_cref<Scalar>& x) const {
    check_parameters(function);
    detail::check_inner_dim(function, x, "wq", wq);
  }
};

static_assert(differentiable_map<causal_self_attention<float>>);
static_assert(differentiable_map<causal_self_attention<double>>);

}  // namespace resnorm
