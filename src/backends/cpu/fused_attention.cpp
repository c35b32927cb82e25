// backends/cpu/fused_attention.cpp — kiln.Attention on the CPU (float32): per (batch, head),
// scores = scale * Q K^T (sgemm), then the bool mask's fill, + the additive mask, softmax over keys, then P V (sgemm) written straight into
// the [B, S, H*Dv] output. Q, K, V stay in their projected [B, S, H*D] layout (heads are strided
// views), so no transposes or reshapes are materialized; sequence-first [S, B, H*D] tensors (torch's
// nn.MultiheadAttention), heads-first [B, H, S, D] ones and grouped K/V heads are read the same way
// with other strides (ops::attention_geometry). Also kiln.Rotary, the rotary embedding the attention's
// Q and K come from.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <limits>

#include "backends/cpu/fused_common.h"
#include "backends/staged_kernel.h"
#include "ops/nn.h"
#include "ops/params_nn.h"

namespace kiln::cpu::fused {
namespace {

// One row of scores: the bool mask's fill (crow, stride cstride), + the additive mask (mrow, stride
// mstride), softmax. The max and the sum are vector reductions (omp simd); compiled for AVX2+FMA where
// the CPU has it (a scalar sum is one dependent add per score).
[[gnu::always_inline]] inline void softmax_row_body(float* row, int64_t T, const bool* crow, int64_t cstride, const float* mrow,
                                                    int64_t mstride, const ops::FusedAttentionParams& a) {
  if (crow)
    for (int64_t t = 0; t < T; ++t)
      if (crow[t * cstride] == a.mask_fill_where_true) row[t] = a.mask_fill;
  if (mrow && mstride == 1) {
#pragma omp simd
    for (int64_t t = 0; t < T; ++t) row[t] += mrow[t];
  } else if (mrow) {
    for (int64_t t = 0; t < T; ++t) row[t] += mrow[t * mstride];
  }
  float mx = 0;
  const float sum = math::exp_row_f32(row, row, T, &mx);
  // Every score -inf (the sum is 0, or NaN as -inf - -inf is), or a NaN or +inf score (NaN): the
  // softmax is NaN, which zero_nan_rows maps to 0.
  if (a.zero_nan_rows && !(sum > 0.0f && sum <= std::numeric_limits<float>::max())) {
    std::fill(row, row + T, 0.0f);
    return;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t t = 0; t < T; ++t) row[t] *= inv;
}
[[gnu::target("avx2,fma")]] void softmax_row_avx2(float* row, int64_t T, const bool* crow, int64_t cstride, const float* mrow,
                                                  int64_t mstride, const ops::FusedAttentionParams& a) {
  softmax_row_body(row, T, crow, cstride, mrow, mstride, a);
}
[[gnu::target(KILN_TARGET_AVX512)]] void softmax_row_avx512(float* row, int64_t T, const bool* crow, int64_t cstride, const float* mrow,
                                        int64_t mstride, const ops::FusedAttentionParams& a) {
  softmax_row_body(row, T, crow, cstride, mrow, mstride, a);
}
void softmax_row(float* row, int64_t T, const bool* crow, int64_t cstride, const float* mrow, int64_t mstride,
                 const ops::FusedAttentionParams& a) {
  if (has_avx512()) softmax_row_avx512(row, T, crow, cstride, mrow, mstride, a);
  else if (has_avx2_fma()) softmax_row_avx2(row, T, crow, cstride, mrow, mstride, a);
  else softmax_row_body(row, T, crow, cstride, mrow, mstride, a);
}

// The attention's geometry for one input-shape signature, and how its (batch, head) jobs split into
// parts, each with its own block of scores in the workspace (never more parts than blocks, whatever
// the threads at run time).
struct AttentionPlan {
  ops::AttentionGeometry g;
  int64_t ms[4] = {0, 0, 0, 0}, cs[4] = {0, 0, 0, 0};  // the masks' strides over [B, H, S, T]
  int64_t parts = 1;
};

Status attention_reshape(ReshapeContext& rc, const ops::FusedAttentionParams& a) {
  if (rc.in.size() < 3 || !rc.in[0].present || !rc.in[1].present || !rc.in[2].present) return rc.error("Q, K, V are required");
  auto plan = std::make_shared<AttentionPlan>();
  AttentionPlan& p = *plan;
  if (std::string why = ops::attention_geometry(a, rc.in[0].shape, rc.in[1].shape, rc.in[2].shape, &p.g); !why.empty())
    return rc.error(why);
  const ops::AttentionGeometry& g = p.g;
  const int64_t full[4] = {g.B, g.H, g.S, g.T};
  if (rc.in.size() > 3 && rc.in[3].present) {
    const Shape& m = rc.in[3].shape;
    if (rc.in[3].dtype != DataType::kFloat32) return rc.error("mask must be float32");
    if (!ops::attention_mask_strides(m, full, p.ms, a.mask_batch_period))
      return rc.error("mask " + shape_to_string(m) + " does not broadcast to [B, H, S, T]" +
                      (a.mask_batch_period ? " with batch period " + std::to_string(a.mask_batch_period) : std::string()));
  } else if (a.mask_batch_period) {
    return rc.error("mask_batch_period is given without an additive mask");
  }
  if (rc.in.size() > 4 && rc.in[4].present) {
    if (rc.in[4].dtype != DataType::kBool) return rc.error("the bool mask must be bool");
    if (!ops::attention_mask_strides(rc.in[4].shape, full, p.cs))
      return rc.error("bool mask " + shape_to_string(rc.in[4].shape) + " does not broadcast to [B, H, S, T]");
  }
  p.parts = std::max<int64_t>(1, std::min<int64_t>(g.B * g.H, omp_get_max_threads()));
  rc.workspace_bytes = static_cast<size_t>(p.parts * g.S * g.T) * sizeof(float);
  rc.out[0] = {DataType::kFloat32, a.heads_first       ? Shape{g.B, g.S, g.H, g.Dv}
                                   : a.sequence_first ? Shape{g.S, g.B, g.H * g.Dv}
                                                      : Shape{g.B, g.S, g.H * g.Dv}};
  rc.state = std::move(plan);
  return Status::Ok();
}

Status attention(KernelContext& ctx, const ops::FusedAttentionParams& a) {
  const AttentionPlan& p = shape_state<AttentionPlan>(ctx);
  const int64_t B = p.g.B, S = p.g.S, T = p.g.T, H = p.g.H, D = p.g.D, Dv = p.g.Dv;
  const int64_t group = H / p.g.Hkv;  // query heads per K/V head
  const Tensor& q = ctx.input(0);
  const float* mask = ctx.has_input(3) ? ctx.input(3).data<float>() : nullptr;
  const bool* cond = ctx.num_inputs() > 4 && ctx.has_input(4) ? ctx.input(4).data<bool>() : nullptr;
  const int64_t* ms = p.ms;
  const int64_t* cs = p.cs;
  Tensor& y = ctx.output(0);
  if (y.numel() == 0) return Status::Ok();
  const float* pq = q.data<float>();
  const float* pk = a.packed_qkv ? pq + H * D : ctx.input(1).data<float>();
  const float* pv = a.packed_qkv ? pq + 2 * H * D : ctx.input(2).data<float>();
  float* py = y.data<float>();
  if (T == 0) {
    // softmax over nothing: NaN, or 0 under zero_nan_rows
    std::fill(py, py + y.numel(), a.zero_nan_rows ? 0.0f : std::numeric_limits<float>::quiet_NaN());
    return Status::Ok();
  }
  const ops::AttentionStrides& st = p.g.st;
  const int64_t jobs = B * H, parts = p.parts;
  float* const all_scores = static_cast<float*>(ctx.workspace());
  parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t part = p0; part < p1; ++part) {
      float* scores = all_scores + part * S * T;
      for (int64_t j = part * jobs / parts; j < (part + 1) * jobs / parts; ++j) {
        const int64_t b = j / H, h = j % H;
        const int64_t mb = a.mask_batch_period ? b % a.mask_batch_period : b;  // the mask's batch entry
        const float* qb = pq + b * st.q_batch + h * st.q_head;
        const float* kb = pk + b * st.k_batch + h / group * st.k_head;
        const float* vb = pv + b * st.v_batch + h / group * st.v_head;
        float* yb = py + b * st.y_batch + h * Dv;
        if (D == 0)  // empty heads: every score 0 (oneDNN refuses leading dims of 0)
          std::fill(scores, scores + S * T, 0.0f);
        else
          dnnl_sgemm('N', 'T', S, T, D, a.scale, qb, st.q_row, kb, st.k_row, 0.0f, scores, T);
        for (int64_t s = 0; s < S; ++s) softmax_row(scores + s * T, T, cond ? cond + b * cs[0] + h * cs[1] + s * cs[2] : nullptr,
                                                    cs[3], mask ? mask + mb * ms[0] + h * ms[1] + s * ms[2] : nullptr, ms[3], a);
        dnnl_sgemm('N', 'N', S, Dv, T, 1.0f, scores, T, vb, st.v_row, 0.0f, yb, st.y_row);
      }
    }
  });
  return Status::Ok();
}

// ---- Rotary(X, COS, SIN): X·COS + rotate_half(X)·SIN per row of D (ops::rotary_geometry), float32.

// The offset of row `row` of a tensor broadcast to the rows of `outer` with these strides.
int64_t row_offset(int64_t row, const std::vector<int64_t>& outer, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (int i = static_cast<int>(outer.size()) - 1; i >= 0; --i) {
    off += (row % outer[i]) * strides[i];
    row /= outer[i];
  }
  return off;
}

Status rotary_reshape(ReshapeContext& rc) {
  if (rc.in.size() < 3 || !rc.in[0].present || !rc.in[1].present || !rc.in[2].present) return rc.error("X, COS and SIN are required");
  auto g = std::make_shared<ops::RotaryGeometry>();
  if (std::string why = ops::rotary_geometry(rc.in[0].shape, rc.in[1].shape, rc.in[2].shape, g.get()); !why.empty())
    return rc.error(why);
  rc.out[0] = {DataType::kFloat32, rc.in[0].shape};
  rc.state = std::move(g);
  return Status::Ok();
}

Status rotary(KernelContext& ctx) {
  const ops::RotaryGeometry& g = shape_state<ops::RotaryGeometry>(ctx);
  const float* x = ctx.input(0).data<float>();
  const float* c = ctx.input(1).data<float>();
  const float* sn = ctx.input(2).data<float>();
  float* y = ctx.output(0).data<float>();
  const int64_t d = g.d, h = d / 2;
  parallel_for(g.rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * d;
      float* yr = y + r * d;
      const float* cr = c + row_offset(r, g.outer, g.cos_outer);
      const float* sr = sn + row_offset(r, g.outer, g.sin_outer);
      for (int64_t i = 0; i < h; ++i) {
        const float a = xr[i], b = xr[i + h];
        yr[i] = a * cr[i * g.cos_last] - b * sr[i * g.sin_last];
        yr[i + h] = b * cr[(i + h) * g.cos_last] + a * sr[(i + h) * g.sin_last];
      }
    }
  });
  return Status::Ok();
}

}  // namespace

void register_fused_attention(KernelRegistry& r) {
  r.add({"Rotary", "kiln", 1, 1 << 30, "cpu.Rotary.f32",
         [](const ir::Node& n) -> std::string {
           for (int i = 0; i < 3; ++i)
             if (!n.has_input(i) || n.inputs[i]->type.dtype != DataType::kFloat32) return "float32 X, COS, SIN only";
           return "";
         },
         [](const ir::Node&, KernelInit&) { return make_staged(rotary_reshape, rotary); }});
  r.add({"Attention", "kiln", 1, 1 << 30, "cpu.Attention.f32.sgemm",
         [](const ir::Node& n) -> std::string {
           for (int i = 0; i < 3; ++i)
             if (!n.has_input(i) || n.inputs[i]->type.dtype != DataType::kFloat32) return "float32 Q, K, V only";
           return ops::fused_attention_attrs_error(ops::parse_fused_attention(n));
         },
         [](const ir::Node& n, KernelInit&) {
           const ops::FusedAttentionParams a = ops::parse_fused_attention(n);
           return make_staged([a](ReshapeContext& rc) { return attention_reshape(rc, a); },
                              [a](KernelContext& ctx) { return attention(ctx, a); });
         }});
}

}  // namespace kiln::cpu::fused
