// backends/cpu/attention.cpp — Attention (opset 23/24) and LinearAttention (opset 27) on the CPU.
//
// Attention: per (batch, query head) one GEMM S = scale * Q K^T ([Sq, Stot]), then softcap, the
// additive bias (attn_mask, causal, nonpad_kv_seqlen), a row softmax and Y = P V. K and V are first
// gathered into one [B, Hkv, Stot, D] buffer (past concatenated with the new tokens), which also
// becomes present_key/present_value. Float types are computed in float (double for float64);
// float32 GEMMs go through oneDNN's sgemm.
#include <cmath>
#include <limits>
#include <memory>

#include "backends/cpu/nn_common.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

using nn::ReadAs;
using nn::WriteAs;

// Geometry of one Q/K/V-like input: element (b, h, s, d) lives at base(b, h) + s * row + d.
struct HeadLayout {
  int64_t heads = 0, seq = 0, dim = 0;
  bool packed = false;  // 3-D [B, S, H*D]
  int64_t base(int64_t b, int64_t h) const {
    return packed ? b * seq * heads * dim + h * dim : (b * heads + h) * seq * dim;
  }
  int64_t row() const { return packed ? heads * dim : dim; }
};

Status head_layout(KernelContext& ctx, const Tensor& t, int64_t heads_attr, const char* what, HeadLayout& l) {
  if (t.rank() == 4) {
    l = {t.dim(1), t.dim(2), t.dim(3), false};
    return Status::Ok();
  }
  if (heads_attr <= 0) return ctx.error(std::string(what) + " is 3-D: q_num_heads and kv_num_heads are required");
  if (t.dim(2) % heads_attr != 0)
    return ctx.error(std::string(what) + " hidden size " + std::to_string(t.dim(2)) + " is not divisible by " +
                     std::to_string(heads_attr) + " heads");
  l = {heads_attr, t.dim(1), t.dim(2) / heads_attr, true};
  return Status::Ok();
}

// attn_mask broadcast to [B, Hq, Sq, Lm] (right-aligned): strides, 0 on broadcast dims.
struct MaskView {
  int64_t stride[4] = {0, 0, 0, 0};
  int64_t len = 0;  // last dim (may be shorter than Stot; the rest is masked out)
};

Status mask_view(KernelContext& ctx, const Tensor& m, const int64_t target[4], MaskView& v) {
  if (m.rank() < 1 || m.rank() > 4) return ctx.error("attn_mask must have rank 1 to 4");
  v.len = m.dim(-1);
  int64_t s = 1;
  for (int i = 3, k = m.rank() - 1; k >= 0; --i, --k) {
    const int64_t d = m.dim(k);
    const int64_t want = i == 3 ? v.len : target[i];
    if (d != 1 && d != want)
      return ctx.error("attn_mask shape " + shape_to_string(m.shape()) + " does not broadcast to (" +
                       std::to_string(target[0]) + ", " + std::to_string(target[1]) + ", " +
                       std::to_string(target[2]) + ", " + std::to_string(target[3]) + ")");
    v.stride[i] = d == 1 ? 0 : s;
    s *= d;
  }
  if (v.len > target[3]) return ctx.error("attn_mask's last dim is longer than the total sequence length");
  return Status::Ok();
}

// Copies past (if any) and the new tokens of one K or V input into a [B, H, Stot, D] buffer.
template <typename C>
void gather_kv(const C* x, const HeadLayout& l, const C* past, int64_t P, int64_t B, std::vector<C>& out) {
  const int64_t T = P + l.seq, D = l.dim;
  out.resize(static_cast<size_t>(B * l.heads * T * D));
  parallel_for(B * l.heads, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t bh = b0; bh < b1; ++bh) {
      const int64_t b = bh / l.heads, h = bh % l.heads;
      C* dst = out.data() + bh * T * D;
      if (P) std::copy(past + bh * P * D, past + (bh + 1) * P * D, dst);
      for (int64_t s = 0; s < l.seq; ++s) {
        const C* src = x + l.base(b, h) + s * l.row();
        std::copy(src, src + D, dst + (P + s) * D);
      }
    }
  });
}

template <typename C>
void write_present(KernelContext& ctx, int idx, DataType dt, const Shape& shape, const std::vector<C>& buf) {
  if (!ctx.has_output(idx)) return;
  Tensor& t = ctx.output(idx, dt, shape);
  WriteAs<C> w(t);
  std::copy(buf.begin(), buf.end(), w.data());
  w.commit();
}

template <typename C>
Status attention(KernelContext& ctx, const ops::AttentionParams& a) {
  const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
  if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4))
    return ctx.error("Q, K and V must all be 3-D or all 4-D");
  const int64_t B = q.dim(0);
  if (k.dim(0) != B || v.dim(0) != B) return ctx.error("Q, K and V must have the same batch size");
  HeadLayout ql, kl, vl;
  KILN_RETURN_IF_ERROR(head_layout(ctx, q, a.q_num_heads, "Q", ql));
  KILN_RETURN_IF_ERROR(head_layout(ctx, k, a.kv_num_heads, "K", kl));
  KILN_RETURN_IF_ERROR(head_layout(ctx, v, a.kv_num_heads, "V", vl));
  const int64_t Hq = ql.heads, Hkv = kl.heads, Sq = ql.seq, D = ql.dim, Dv = vl.dim;
  if (kl.dim != D) return ctx.error("Q and K head sizes differ");
  if (vl.heads != Hkv || vl.seq != kl.seq) return ctx.error("K and V disagree in heads or sequence length");
  if (Hkv == 0 || Hq % Hkv != 0) return ctx.error("q_num_heads must be a multiple of kv_num_heads");
  const bool has_past = ctx.has_input(4) && ctx.has_input(5);
  if (ctx.has_input(4) != ctx.has_input(5)) return ctx.error("past_key and past_value must be given together");
  int64_t P = 0;
  if (has_past) {
    const Tensor &pk = ctx.input(4), &pv = ctx.input(5);
    P = pk.rank() == 4 ? pk.dim(2) : -1;
    if (pk.shape() != Shape{B, Hkv, P, D} || pv.shape() != Shape{B, Hkv, P, Dv})
      return ctx.error("past_key/past_value must be (batch, kv_num_heads, past_len, head_size)");
  }
  const int64_t T = P + kl.seq;

  ReadAs<C> qv(q), kv(k), vv(v);
  std::vector<C> kbuf, vbuf;
  {
    ReadAs<C> pk(has_past ? ctx.input(4) : q), pv(has_past ? ctx.input(5) : q);
    gather_kv<C>(kv.data(), kl, has_past ? pk.data() : nullptr, P, B, kbuf);
    gather_kv<C>(vv.data(), vl, has_past ? pv.data() : nullptr, P, B, vbuf);
  }
  write_present<C>(ctx, 1, k.dtype(), {B, Hkv, T, D}, kbuf);
  write_present<C>(ctx, 2, v.dtype(), {B, Hkv, T, Dv}, vbuf);

  // Additive bias sources.
  const bool has_mask = ctx.has_input(3);
  MaskView mv;
  const int64_t target[4] = {B, Hq, Sq, T};
  std::vector<C> mask;
  if (has_mask) {
    const Tensor& m = ctx.input(3);
    KILN_RETURN_IF_ERROR(mask_view(ctx, m, target, mv));
    mask.resize(static_cast<size_t>(m.numel()));
    const C ninf = -std::numeric_limits<C>::infinity();
    for (int64_t i = 0; i < m.numel(); ++i)
      mask[i] = m.dtype() == DataType::kBool ? (m.data<bool>()[i] ? C(0) : ninf) : nn::load_as<C>(m, i);
  }
  std::vector<int64_t> nonpad;
  if (ctx.has_input(6)) {
    const Tensor& n = ctx.input(6);
    if (n.numel() != B) return ctx.error("nonpad_kv_seqlen must have batch_size elements");
    for (int64_t i = 0; i < B; ++i) nonpad.push_back(nn::load_as<int64_t>(n, i));
  }

  const Shape yshape = ql.packed ? Shape{B, Sq, Hq * Dv} : Shape{B, Hq, Sq, Dv};
  Tensor& y = ctx.output(0, q.dtype(), yshape);
  WriteAs<C> yw(y);
  Tensor* qk = ctx.has_output(3) ? &ctx.output(3, q.dtype(), {B, Hq, Sq, T}) : nullptr;
  std::unique_ptr<WriteAs<C>> qkw(qk ? new WriteAs<C>(*qk) : nullptr);

  const C scale = a.has_scale ? C(a.scale) : C(1) / std::sqrt(C(D));
  const C cap = C(a.softcap);
  const int64_t group = Hq / Hkv;
  const int64_t ydim_row = ql.packed ? Hq * Dv : Dv;
  const C ninf = -std::numeric_limits<C>::infinity();
  parallel_for(B * Hq, 1, [&](int64_t t0, int64_t t1) {
    std::vector<C> s(static_cast<size_t>(Sq * T));
    for (int64_t bh = t0; bh < t1; ++bh) {
      const int64_t b = bh / Hq, h = bh % Hq, hk = h / group;
      const C* kp = kbuf.data() + (b * Hkv + hk) * T * D;
      const C* vp = vbuf.data() + (b * Hkv + hk) * T * Dv;
      nn::gemm<C>(false, true, Sq, T, D, scale, qv.data() + ql.base(b, h), ql.row(), kp, D, C(0), s.data(), T);
      C* qko = qkw ? qkw->data() + bh * Sq * T : nullptr;
      for (int64_t i = 0; i < Sq; ++i) {
        C* row = s.data() + i * T;
        const int64_t limit = nonpad.empty() ? T : std::min<int64_t>(T, nonpad[b]);
        C mx = ninf;
        for (int64_t j = 0; j < T; ++j) {
          C x = row[j];
          if (qko && a.qk_matmul_output_mode == 0) qko[i * T + j] = x;
          if (cap > 0) x = cap * std::tanh(x / cap);
          if (qko && a.qk_matmul_output_mode == 1) qko[i * T + j] = x;
          if (has_mask) {
            if (j >= mv.len) x = ninf;
            else x += mask[b * mv.stride[0] + h * mv.stride[1] + i * mv.stride[2] + j * mv.stride[3]];
          }
          if (a.is_causal && j > i + P) x = ninf;
          if (j >= limit) x = ninf;
          if (qko && a.qk_matmul_output_mode == 2) qko[i * T + j] = x;
          row[j] = x;
          mx = std::max(mx, x);
        }
        if (mx == ninf) {  // a fully masked row: softmax is 0/0, as in the reference
          for (int64_t j = 0; j < T; ++j) row[j] = std::numeric_limits<C>::quiet_NaN();
        } else {
          C sum = 0;
          for (int64_t j = 0; j < T; ++j) sum += (row[j] = std::exp(row[j] - mx));
          const C inv = C(1) / sum;
          for (int64_t j = 0; j < T; ++j) row[j] *= inv;
        }
        if (qko && a.qk_matmul_output_mode == 3) std::copy(row, row + T, qko + i * T);
      }
      C* yp = yw.data() + (ql.packed ? b * Sq * Hq * Dv + h * Dv : bh * Sq * Dv);
      nn::gemm<C>(false, false, Sq, Dv, T, C(1), s.data(), T, vp, Dv, C(0), yp, ydim_row);
    }
  });
  yw.commit();
  if (qkw) qkw->commit();
  return Status::Ok();
}

// ---- LinearAttention: a recurrent state S [d_k, d_v] per (batch, kv head), updated token by token.

Status linear_attention(KernelContext& ctx, const ops::LinearAttentionParams& a) {
  using LinRule = ops::LinearAttentionParams::UpdateRule;
  const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
  const bool gated = a.update_rule == LinRule::kGated || a.update_rule == LinRule::kGatedDelta;
  const bool delta = a.update_rule == LinRule::kDelta || a.update_rule == LinRule::kGatedDelta;
  if (q.rank() != 3 || k.rank() != 3 || v.rank() != 3) return ctx.error("query, key and value must be 3-D (B, T, H*D)");
  const int64_t Hq = a.q_num_heads, Hk = a.kv_num_heads;
  if (Hq <= 0 || Hk <= 0 || Hq % Hk != 0) return ctx.error("q_num_heads must be a positive multiple of kv_num_heads");
  const int64_t B = q.dim(0), T = q.dim(1);
  if (q.dim(2) % Hq || k.dim(2) % Hk || v.dim(2) % Hk) return ctx.error("hidden sizes are not divisible by the heads");
  const int64_t dk = q.dim(2) / Hq, dv = v.dim(2) / Hk;
  if (k.shape() != Shape{B, T, Hk * dk} || v.dim(0) != B || v.dim(1) != T)
    return ctx.error("key/value shapes do not match query");
  if (gated != ctx.has_input(4)) return ctx.error(gated ? "this update_rule needs decay" : "this update_rule takes no decay");
  if (delta != ctx.has_input(5)) return ctx.error(delta ? "this update_rule needs beta" : "this update_rule takes no beta");
  int64_t decay_w = 0, beta_w = 0;
  if (gated) {
    const Tensor& g = ctx.input(4);
    decay_w = g.rank() == 3 ? g.dim(2) : -1;
    if (g.rank() != 3 || g.dim(0) != B || g.dim(1) != T || (decay_w != Hk && decay_w != Hk * dk))
      return ctx.error("decay must be (B, T, kv_num_heads) or (B, T, kv_num_heads*d_k)");
  }
  if (delta) {
    const Tensor& bt = ctx.input(5);
    beta_w = bt.rank() == 3 ? bt.dim(2) : -1;
    if (bt.rank() != 3 || bt.dim(0) != B || bt.dim(1) != T || (beta_w != Hk && beta_w != 1))
      return ctx.error("beta must be (B, T, kv_num_heads) or (B, T, 1)");
  }
  const bool has_past = ctx.has_input(3);
  if (has_past && ctx.input(3).shape() != Shape{B, Hk, dk, dv})
    return ctx.error("past_state must be (B, kv_num_heads, d_k, d_v)");
  // present_state takes past_state's type: a float state stored into an integer one was undefined
  // (a float of -3398 into uint16; fuzz_model).
  if (has_past && !nn::visit_real(ctx.input(3).dtype(), [](auto) {}))
    return ctx.error(std::string("past_state must be a floating-point tensor, got ") + dtype_name(ctx.input(3).dtype()));
  const float scale = a.scale != 0 ? a.scale : 1.0f / std::sqrt(static_cast<float>(dk));

  ReadAs<float> qv(q), kv(k), vv(v);
  ReadAs<float> gv(gated ? ctx.input(4) : q), bv(delta ? ctx.input(5) : q);
  std::vector<float> state(static_cast<size_t>(B * Hk * dk * dv), 0.0f);
  if (has_past) {
    ReadAs<float> pv(ctx.input(3));
    std::copy(pv.data(), pv.data() + state.size(), state.begin());
  }
  Tensor& y = ctx.output(0, q.dtype(), {B, T, Hq * dv});
  WriteAs<float> yw(y);
  const int64_t group = Hq / Hk;
  parallel_for(B * Hk, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> u(static_cast<size_t>(dv));
    for (int64_t bh = t0; bh < t1; ++bh) {
      const int64_t b = bh / Hk, h = bh % Hk;
      float* S = state.data() + bh * dk * dv;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t bt = b * T + t;
        const float* kt = kv.data() + bt * Hk * dk + h * dk;
        const float* vt = vv.data() + bt * Hk * dv + h * dv;
        if (gated) {
          for (int64_t d = 0; d < dk; ++d) {
            const float g = std::exp(gv[bt * decay_w + (decay_w == Hk ? h : h * dk + d)]);
            for (int64_t m = 0; m < dv; ++m) S[d * dv + m] *= g;
          }
        }
        if (delta) {
          const float beta = bv[bt * beta_w + (beta_w == 1 ? 0 : h)];
          for (int64_t m = 0; m < dv; ++m) {
            float r = 0;
            for (int64_t d = 0; d < dk; ++d) r += S[d * dv + m] * kt[d];
            u[m] = beta * (vt[m] - r);
          }
        } else {
          std::copy(vt, vt + dv, u.begin());
        }
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t m = 0; m < dv; ++m) S[d * dv + m] += kt[d] * u[m];
        for (int64_t g = 0; g < group; ++g) {
          const int64_t hq = h * group + g;
          const float* qt = qv.data() + bt * Hq * dk + hq * dk;
          float* out = yw.data() + bt * Hq * dv + hq * dv;
          for (int64_t m = 0; m < dv; ++m) out[m] = 0;
          for (int64_t d = 0; d < dk; ++d)
            for (int64_t m = 0; m < dv; ++m) out[m] += qt[d] * S[d * dv + m];
          for (int64_t m = 0; m < dv; ++m) out[m] *= scale;
        }
      }
    }
  });
  yw.commit();
  if (ctx.has_output(1)) {
    Tensor& ps = ctx.output(1, has_past ? ctx.input(3).dtype() : q.dtype(), {B, Hk, dk, dv});
    WriteAs<float> pw(ps);
    std::copy(state.begin(), state.end(), pw.data());
    pw.commit();
  }
  return Status::Ok();
}

// ---- FlexAttention (ai.onnx.preview): scores = scale * Q K^T in the softmax precision (float32, or
// float64 for float64 inputs), then the optional score_mod subgraph, a softmax, the optional
// prob_mod subgraph and Y = P V. Each modifier runs once on the whole (B, Hq, L, S) tensor.
struct FlexAttrs {
  ops::FlexAttentionParams p;
  std::shared_ptr<CompiledGraph> score_mod, prob_mod;
};

template <typename C>
Status run_modifier(KernelContext& ctx, const CompiledGraph& g, DataType dt, const Shape& shape, std::vector<C>& buf,
                    const char* what) {
  Tensor in = Tensor::empty(dt, shape);
  for (int64_t i = 0; i < in.numel(); ++i) nn::store_as<C>(in, i, buf[i]);
  std::vector<Slot> outs;
  KILN_RETURN_IF_ERROR(ctx.run_subgraph(g, {Slot::of(in)}, outs));
  if (outs.size() != 1 || outs[0].kind != Slot::Kind::kTensor || outs[0].tensor.shape() != shape)
    return ctx.error(std::string(what) + " must give one tensor of shape " + shape_to_string(shape));
  const Tensor& o = outs[0].tensor;
  for (int64_t i = 0; i < o.numel(); ++i) buf[i] = nn::load_as<C>(o, i);
  return Status::Ok();
}

template <typename C>
Status flex_attention(KernelContext& ctx, const FlexAttrs& a, DataType cdt) {
  const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) return ctx.error("Q, K and V must be 4-D");
  const int64_t B = q.dim(0), Hq = q.dim(1), L = q.dim(2), E = q.dim(3);
  const int64_t Hkv = k.dim(1), S = k.dim(2), Ev = v.dim(3);
  if (k.dim(0) != B || v.dim(0) != B || k.dim(3) != E || v.dim(1) != Hkv || v.dim(2) != S)
    return ctx.error("Q, K and V shapes do not agree");
  if (Hkv == 0 || Hq % Hkv) return ctx.error("q_num_heads must be a multiple of kv_num_heads");
  const C scale = a.p.has_scale ? C(a.p.scale) : C(1) / std::sqrt(C(E));
  ReadAs<C> qv(q), kv(k), vv(v);
  const Shape sshape{B, Hq, L, S};
  std::vector<C> s(static_cast<size_t>(B * Hq * L * S));
  const int64_t group = Hq / Hkv;
  parallel_for(B * Hq, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t bh = t0; bh < t1; ++bh) {
      const int64_t b = bh / Hq, hk = (bh % Hq) / group;
      nn::gemm<C>(false, true, L, S, E, scale, qv.data() + bh * L * E, E, kv.data() + (b * Hkv + hk) * S * E, E, C(0),
                  s.data() + bh * L * S, S);
    }
  });
  if (a.score_mod) KILN_RETURN_IF_ERROR(run_modifier<C>(ctx, *a.score_mod, cdt, sshape, s, "score_mod"));
  parallel_for(B * Hq * L, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      C* row = s.data() + r * S;
      C mx = -std::numeric_limits<C>::infinity(), sum = 0;
      for (int64_t j = 0; j < S; ++j) mx = std::max(mx, row[j]);
      for (int64_t j = 0; j < S; ++j) sum += (row[j] = std::exp(row[j] - mx));
      for (int64_t j = 0; j < S; ++j) row[j] /= sum;
    }
  });
  if (a.prob_mod) KILN_RETURN_IF_ERROR(run_modifier<C>(ctx, *a.prob_mod, cdt, sshape, s, "prob_mod"));
  Tensor& y = ctx.output(0, q.dtype(), {B, Hq, L, Ev});
  WriteAs<C> yw(y);
  parallel_for(B * Hq, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t bh = t0; bh < t1; ++bh) {
      const int64_t b = bh / Hq, hk = (bh % Hq) / group;
      nn::gemm<C>(false, false, L, Ev, S, C(1), s.data() + bh * L * S, S, vv.data() + (b * Hkv + hk) * S * Ev, Ev, C(0),
                  yw.data() + bh * L * Ev, Ev);
    }
  });
  yw.commit();
  return Status::Ok();
}

Expected<std::shared_ptr<CompiledGraph>> optional_graph(const ir::Node& n, KernelInit& init, const char* name) {
  const ir::Attribute* at = n.attr(name);
  if (!at || at->kind != ir::Attribute::Kind::kGraph || !at->g) return std::shared_ptr<CompiledGraph>();
  if (!init.subgraphs) return unsupported(n.describe() + ": " + name + " subgraphs can only run inside a lowered plan");
  return init.subgraphs->compile(*at->g);
}

}  // namespace

void register_attention(KernelRegistry& r) {
  auto real012 = [](const ir::Node& n) {
    for (int i = 0; i < 3; ++i)
      if (auto why = nn::require_real(n, i); !why.empty()) return why;
    return std::string();
  };
  r.add({"Attention", "", 23, 1 << 30, "cpu.Attention.any", real012,
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           KILN_ASSIGN_OR_RETURN(const ops::AttentionParams a, ops::parse_attention(n));
           return make_kernel([a](KernelContext& ctx) {
             return ctx.input(0).dtype() == DataType::kFloat64 ? attention<double>(ctx, a) : attention<float>(ctx, a);
           });
         }});
  r.add({"LinearAttention", "", 27, 1 << 30, "cpu.LinearAttention.any", real012,
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           KILN_ASSIGN_OR_RETURN(const ops::LinearAttentionParams a, ops::parse_linear_attention(n));
           return make_kernel([a](KernelContext& ctx) { return linear_attention(ctx, a); });
         }});
  r.add({"FlexAttention", "ai.onnx.preview", 1, 1 << 30, "cpu.FlexAttention.any", real012,
         [](const ir::Node& n, KernelInit& init) -> Expected<KernelPtr> {
           FlexAttrs a;
           KILN_ASSIGN_OR_RETURN(a.p, ops::parse_flex_attention(n));
           KILN_ASSIGN_OR_RETURN(a.score_mod, optional_graph(n, init, "score_mod"));
           KILN_ASSIGN_OR_RETURN(a.prob_mod, optional_graph(n, init, "prob_mod"));
           return make_kernel([a](KernelContext& ctx) {
             DataType cdt = a.p.softmax_precision;
             if (!a.p.has_softmax_precision)
               cdt = ctx.input(0).dtype() == DataType::kFloat64 ? DataType::kFloat64 : DataType::kFloat32;
             return cdt == DataType::kFloat64 ? flex_attention<double>(ctx, a, cdt) : flex_attention<float>(ctx, a, cdt);
           });
         }});
}

}  // namespace kiln::cpu
