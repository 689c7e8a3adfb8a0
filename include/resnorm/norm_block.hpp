// resnorm/norm_block.hpp — one residual block type for every placement of the normaliser.
//
//   u = N(x)          if the norm sits before the sublayer (pre_ln, sandwich_ln), else u = x
//   f = F(u)
//   g = N_b(f)        if sandwich_ln (a second norm on the branch output), else g = f
//   b = a ⊙ g         if a residual scale a is set (1 entry: a scalar; d entries: per feature)
//   z = α·x + b       α = 1 except DeepNorm
//   y = N(z)          if the norm sits after the add (post_ln), else y = z
//
//   x, y: T x d;  F: any differentiable_map from T x d to T x d;  N, N_b: any normaliser that
//   is a differentiable_map (layer_norm, rms_norm, dynamic_tanh, ...).
//
// clang-format off
// | variant     | formula                        | norm vs highway            | block Jacobian                    | source                        |
// |-------------|--------------------------------|----------------------------|-----------------------------------|-------------------------------|
// | Post-LN     | y = LN(x + F(x))               | on it, after the add       | J_LN(z) (I + J_F(x))              | Vaswani et al. 2017           |
// | Pre-LN      | y = x + F(LN(x))               | off it, on the branch      | I + J_F(u) J_LN(x)                | Radford et al. 2019 (GPT-2);  |
// |             |                                |   before F                 |                                   |   Xiong et al. 2020           |
// | Sandwich-LN | y = x + LN_b(F(LN(x)))         | off it, branch in and out  | I + J_LNb(f) J_F(u) J_LN(x)       | Ding et al. 2021 (CogView)    |
// | DeepNorm    | y = LN(α x + F(x)),            | on it, after an up-        | J_LN(z) (α I + J_F(x))            | Wang et al. 2022 (DeepNet)    |
// |             |   α = (2N)^(1/4)               |   weighted add             |                                   |                               |
// | ReZero      | y = x + a F(x), a = 0 at init  | none                       | I + a J_F(x)                      | Bachlechner et al. 2020       |
// | LayerScale  | y = x + diag(a) F(LN(x)),      | off it, on the branch      | I + diag(a) J_F(u) J_LN(x)        | Touvron et al. 2021 (CaiT)    |
// |             |   a small at init (1e-4)       |   before F                 |                                   |                               |
// | Mix-LN      | Post-LN in the first N/4       | per layer                  | product of the layers' Jacobians  | Li et al. 2024                |
// |             |   layers, Pre-LN after         |                            |                                   |                               |
// | RMSNorm     | N(x) = γ ⊙ x / sqrt(mean(x²)+ε)| wherever LN is             | per token diag(γ) r (I − x̂x̂ᵀ/d)   | Zhang & Sennrich 2019         |
// | DyT         | N(x) = γ ⊙ tanh(α x) + β       | wherever LN is             | diag(γ ⊙ α (1 − tanh²(α x)))      | Zhu et al. 2025               |
//
// clang-format on
// (u = LN(x), f = F(u), z the sum the output norm reads, r = 1/sqrt(mean(x²)+ε), x̂ = r x.)
// Only the blocks with the norm off the highway (Pre-LN, Sandwich-LN, ReZero, LayerScale) keep
// the identity in their Jacobian: dy reaches x undiminished. Post-LN and DeepNorm pass the
// highway through J_LN(z), whose gain is γ/sqrt(var(z) + ε); DeepNorm's α > 1 makes x dominate
// z, which bounds how far one layer's update moves the output (Wang et al. 2022, §3).
//
// Cost: vjp()/jvp() cost those of F and the norms plus O(T·d); jacobian() costs F's and the
// norms' jacobian() plus up to three (T·d)² products.
#pragma once

#include <string>
#include <utility>

#include "resnorm/detail/check.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm {

// Where the normaliser sits relative to the residual highway.
enum class norm_placement {
  pre_ln,       // y = α x + a ⊙ F(N(x))
  post_ln,      // y = N(α x + a ⊙ F(x))   (DeepNorm: post_ln with α ≠ 1)
  sandwich_ln,  // y = α x + a ⊙ N_b(F(N(x)))
  none,         // y = α x + a ⊙ F(x)     (ReZero: a scalar a)
};

inline const char* to_string(norm_placement p) {
  switch (p) {
    case norm_placement::pre_ln:
      return "pre_ln";
    case norm_placement::post_ln:
      return "post_ln";
    case norm_placement::sandwich_ln:
      return "sandwich_ln";
    case norm_placement::none:
      return "none";
  }
  return "?";
}

template <class NormGrad, class SublayerGrad, class Scalar>
struct norm_block_grad {
  matrix<Scalar> dx;
  NormGrad norm;  // N's gradients (empty members when the placement is none)
  SublayerGrad sublayer;
  NormGrad branch_norm;   // N_b's gradients (sandwich_ln only)
  vector<Scalar> dscale;  // da: 1 or d entries, empty when the block has no residual scale
};

template <class Sublayer, class Norm = layer_norm<typename Sublayer::scalar_type>>
class norm_block {
  static_assert(require_differentiable_map<Sublayer>());
  static_assert(require_differentiable_map<Norm>());

 public:
  using scalar_type = typename Sublayer::scalar_type;
  using grad_type = norm_block_grad<gradient_t<Norm>, gradient_t<Sublayer>, scalar_type>;

  norm_placement placement = norm_placement::pre_ln;
  Norm norm;  // before F (pre_ln, sandwich_ln) or after the add (post_ln)
  Sublayer sublayer;
  Norm branch_norm;                    // on F's output, sandwich_ln only
  scalar_type alpha = scalar_type(1);  // highway weight α
  vector<scalar_type> scale;           // residual scale a: empty (none), 1 entry or d entries

  norm_block() = default;
  norm_block(norm_placement where, Norm n, Sublayer f)
      : placement(where), norm(std::move(n)), sublayer(std::move(f)) {}

  // ---- the named variants (see the table above) -------------------------------------------------

  static norm_block pre_ln(Norm n, Sublayer f) {
    return norm_block(norm_placement::pre_ln, std::move(n), std::move(f));
  }
  static norm_block post_ln(Sublayer f, Norm n) {
    return norm_block(norm_placement::post_ln, std::move(n), std::move(f));
  }
  static norm_block sandwich_ln(Norm pre, Sublayer f, Norm post) {
    norm_block b(norm_placement::sandwich_ln, std::move(pre), std::move(f));
    b.branch_norm = std::move(post);
    return b;
  }
  // y = LN(α x + F(x)); α from deep_norm.hpp.
  static norm_block deep_norm(Sublayer f, Norm n, scalar_type highway_weight) {
    norm_block b(norm_placement::post_ln, std::move(n), std::move(f));
    b.alpha = highway_weight;
    return b;
  }
  // y = x + a F(x), a scalar, 0 at initialisation: the block starts as the identity.
  static norm_block rezero(Sublayer f, scalar_type initial = scalar_type(0)) {
    norm_block b(norm_placement::none, Norm(), std::move(f));
    b.scale = vector<scalar_type>::Constant(1, initial);
    return b;
  }
  // y = x + diag(a) F(LN(x)), a per feature, small at initialisation.
  static norm_block layer_scale(Norm n, Sublayer f, index dim,
                                scalar_type initial = scalar_type(1e-4)) {
    norm_block b(norm_placement::pre_ln, std::move(n), std::move(f));
    b.scale = vector<scalar_type>::Constant(dim, initial);
    return b;
  }

  bool norm_before() const {
    return placement == norm_placement::pre_ln || placement == norm_placement::sandwich_ln;
  }
  bool norm_after() const { return placement == norm_placement::post_ln; }
  bool norm_on_branch() const { return placement == norm_placement::sandwich_ln; }
  bool has_scale() const { return scale.size() != 0; }

  // ---- forward
  // -----------------------------------------------------------------------------------

  matrix<scalar_type> forward(matrix_cref<scalar_type> x) const {
    const auto p = pass("norm_block::forward", x);
    return norm_after() ? norm.forward(p.z) : p.z;
  }

  // ---- vjp (backward)
  // ----------------------------------------------------------------------------
  //   dz = J_N(z)ᵀ dy  (post_ln) or dy       through the output norm; the highway pays it too
  //   da = Σ dz ⊙ g    (over everything for a scalar a, over rows for a per-feature a)
  //   dg = a ⊙ dz,  df = J_Nb(f)ᵀ dg (sandwich),  du = J_F(u)ᵀ df
  //   dx = α dz                              (highway)
  //      + J_N(x)ᵀ du  (pre_ln, sandwich) or du   (branch)

  grad_type vjp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> dy) const {
    detail::check_same_shape("norm_block::vjp", "dy", dy, "x", x);
    const auto p = pass("norm_block::vjp", x);
    grad_type grad{};
    matrix<scalar_type> dz;
    if (norm_after()) {
      grad.norm = norm.vjp(p.z, dy);
      dz = grad.norm.dx;
    } else {
      dz = dy;
    }
    matrix<scalar_type> dg = dz;
    if (has_scale()) {
      const matrix<scalar_type> dz_g = dz.cwiseProduct(p.g);
      if (scale.size() == 1) {
        grad.dscale = vector<scalar_type>::Constant(1, dz_g.sum());
        dg *= scale[0];
      } else {
        grad.dscale = column_sums(dz_g);
        dg = dg * scale.asDiagonal();
      }
    }
    if (norm_on_branch()) {
      grad.branch_norm = branch_norm.vjp(p.f, dg);
      dg = grad.branch_norm.dx;
    }
    grad.sublayer = sublayer.vjp(p.u, dg);
    if (norm_before()) {
      grad.norm = norm.vjp(x, grad.sublayer.dx);
      grad.dx = alpha * dz + grad.norm.dx;
    } else {
      grad.dx = alpha * dz + grad.sublayer.dx;
    }
    return grad;
  }

  // ---- jvp
  // ---------------------------------------------------------------------------------------
  //   u' = J_N(x) v or v,  f' = J_F(u) u',  g' = J_Nb(f) f' or f',  z' = α v + a ⊙ g'
  //   J v = J_N(z) z' (post_ln) or z'

  matrix<scalar_type> jvp(matrix_cref<scalar_type> x, matrix_cref<scalar_type> v) const {
    detail::check_same_shape("norm_block::jvp", "v", v, "x", x);
    const auto p = pass("norm_block::jvp", x);
    matrix<scalar_type> g_dot =
        sublayer.jvp(p.u, norm_before() ? norm.jvp(x, v) : matrix<scalar_type>(v));
    if (norm_on_branch()) g_dot = branch_norm.jvp(p.f, g_dot);
    if (has_scale()) g_dot = scale_rows(g_dot);
    matrix<scalar_type> z_dot = alpha * v + g_dot;
    return norm_after() ? norm.jvp(p.z, z_dot) : z_dot;
  }

  // ---- jacobian
  // ----------------------------------------------------------------------------------
  //   J = J_N(z) · (α I + diag(a) · J_Nb(f) · J_F(u) · J_N(x)),  absent factors being I

  matrix<scalar_type> jacobian(matrix_cref<scalar_type> x) const {
    const auto p = pass("norm_block::jacobian", x);
    matrix<scalar_type> J = sublayer.jacobian(p.u);
    if (norm_before()) J = J * norm.jacobian(x);
    detail::check_shape_preserving_jacobian("norm_block::jacobian", J, x);
    if (norm_on_branch()) J = branch_norm.jacobian(p.f) * J;
    if (has_scale()) {
      // Row (t, i) of the branch's Jacobian scales by a_i (or the scalar a).
      const index d = x.cols();
      for (index r = 0; r < J.rows(); ++r) J.row(r) *= scale.size() == 1 ? scale[0] : scale[r % d];
    }
    J.diagonal().array() += alpha;
    if (norm_after()) J = norm.jacobian(p.z) * J;
    return J;
  }

 private:
  struct intermediates {
    matrix<scalar_type> u, f, g, z;  // T x d each, as in the header comment
  };

  // Everything up to z = α x + a ⊙ g, checking shapes on the way.
  intermediates pass(const char* function, matrix_cref<scalar_type> x) const {
    if (has_scale() && scale.size() != 1) {
      detail::check_length(function, "scale", scale.size(), "x", x.cols(), "columns (or 1)");
    }
    intermediates p;
    p.u = norm_before() ? norm.forward(x) : matrix<scalar_type>(x);
    p.f = sublayer.forward(p.u);
    detail::check_same_shape(function, "sublayer output", p.f, "x", x);
    p.g = norm_on_branch() ? branch_norm.forward(p.f) : p.f;
    p.z = alpha * x + (has_scale() ? scale_rows(p.g) : p.g);
    return p;
  }

  // a ⊙ m, a broadcast over the rows (a scalar when it has one entry).
  matrix<scalar_type> scale_rows(const matrix<scalar_type>& m) const {
    if (scale.size() == 1) return scale[0] * m;
    return m * scale.asDiagonal();
  }
};

}  // namespace resnorm
