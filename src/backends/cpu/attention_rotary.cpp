// backends/cpu/newops_seq.cpp — sequence-model helpers on the CPU: RotaryEmbedding (opset 23) and
// CausalConvWithState (opset 27). Computed in float (double for float64).
#include <cmath>

#include "backends/cpu/nn_common.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

using nn::ReadAs;
using nn::WriteAs;

// ---- RotaryEmbedding. X is (B, H, S, Dh) or (B, S, H*Dh) with num_heads; cos/sin caches are
// (max_pos, rd/2) indexed by position_ids (B, S), or (B, S, rd/2) without position_ids.
template <typename C>
Status rotary(KernelContext& ctx, const ops::RotaryEmbeddingParams& a) {
  const Tensor &x = ctx.input(0), &cosc = ctx.input(1), &sinc = ctx.input(2);
  if (x.rank() != 3 && x.rank() != 4) return ctx.error("X must be 3-D or 4-D");
  const bool packed = x.rank() == 3;
  const int64_t B = x.dim(0), S = packed ? x.dim(1) : x.dim(2);
  int64_t H, Dh;
  if (packed) {
    if (a.num_heads <= 0) return ctx.error("num_heads is required for 3-D input");
    H = a.num_heads;
    if (x.dim(2) % H) return ctx.error("hidden size is not divisible by num_heads");
    Dh = x.dim(2) / H;
  } else {
    H = x.dim(1);
    Dh = x.dim(3);
  }
  const int64_t rd = a.rotary_embedding_dim > 0 ? a.rotary_embedding_dim : Dh;
  if (rd > Dh || rd % 2) return ctx.error("rotary_embedding_dim must be even and at most the head size");
  const int64_t half = rd / 2;
  if (cosc.shape() != sinc.shape() || cosc.rank() < 2 || cosc.dim(-1) != half)
    return ctx.error("cos_cache/sin_cache must agree and end in rotary_embedding_dim/2 = " + std::to_string(half));
  const bool has_pos = ctx.has_input(3);
  std::vector<int64_t> rows(static_cast<size_t>(B * S));  // cache row for each (b, s)
  if (has_pos) {
    const Tensor& p = ctx.input(3);
    if (cosc.rank() != 2) return ctx.error("with position_ids, the caches must be (max_position, rd/2)");
    if (p.numel() != B * S) return ctx.error("position_ids must be (batch, sequence)");
    for (int64_t i = 0; i < B * S; ++i) {
      rows[i] = nn::load_as<int64_t>(p, i);
      if (rows[i] < 0 || rows[i] >= cosc.dim(0)) return ctx.error("position id " + std::to_string(rows[i]) + " out of range");
    }
  } else if (cosc.rank() == 3 && cosc.dim(0) == B && cosc.dim(1) == S) {
    for (int64_t i = 0; i < B * S; ++i) rows[i] = i;
  } else if (cosc.rank() == 2 && cosc.dim(0) == S) {
    for (int64_t i = 0; i < B * S; ++i) rows[i] = i % S;
  } else {
    return ctx.error("without position_ids, the caches must be (batch, sequence, rd/2)");
  }
  ReadAs<C> xv(x), cv(cosc), sv(sinc);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  WriteAs<C> yw(y);
  parallel_for(B * S * H, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      // t enumerates (b, s, h); the vector's offset depends on the layout.
      const int64_t b = t / (S * H), s = (t / H) % S, h = t % H;
      const int64_t off = packed ? ((b * S + s) * H + h) * Dh : ((b * H + h) * S + s) * Dh;
      const C* xp = xv.data() + off;
      C* yp = yw.data() + off;
      const C* c = cv.data() + rows[b * S + s] * half;
      const C* sn = sv.data() + rows[b * S + s] * half;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i1 = a.interleaved ? 2 * i : i, i2 = a.interleaved ? 2 * i + 1 : i + half;
        const C x1 = xp[i1], x2 = xp[i2];
        yp[i1] = c[i] * x1 - sn[i] * x2;
        yp[i2] = sn[i] * x1 + c[i] * x2;
      }
      for (int64_t i = rd; i < Dh; ++i) yp[i] = xp[i];
    }
  });
  yw.commit();
  return Status::Ok();
}

// ---- CausalConvWithState: depthwise causal 1-D convolution over [past_state, input] (B, C, k-1+L),
// optional bias and SiLU; present_state is the last k-1 positions of the padded sequence.
template <typename C>
Status causal_conv(KernelContext& ctx, bool silu) {
  const Tensor &x = ctx.input(0), &w = ctx.input(1);
  if (x.rank() != 3) return ctx.error("input must be (batch, channels, length)");
  const int64_t B = x.dim(0), Ch = x.dim(1), L = x.dim(2);
  if (w.rank() != 3 || w.dim(0) != Ch || w.dim(1) != 1 || w.dim(2) < 1) return ctx.error("weight must be (channels, 1, k)");
  const int64_t K = w.dim(2), P = K - 1;
  if (ctx.has_input(2) && ctx.input(2).numel() != Ch) return ctx.error("bias must be (channels)");
  if (ctx.has_input(3) && ctx.input(3).shape() != Shape{B, Ch, P}) return ctx.error("past_state must be (batch, channels, k-1)");
  ReadAs<C> xv(x), wv(w);
  std::vector<C> bias(static_cast<size_t>(Ch), C(0));
  if (ctx.has_input(2))
    for (int64_t c = 0; c < Ch; ++c) bias[c] = nn::load_as<C>(ctx.input(2), c);
  std::vector<C> past(static_cast<size_t>(B * Ch * P), C(0));
  if (ctx.has_input(3) && !past.empty()) {
    ReadAs<C> pv(ctx.input(3));
    std::copy(pv.data(), pv.data() + past.size(), past.begin());
  }
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  WriteAs<C> yw(y);
  std::vector<C> present(static_cast<size_t>(B * Ch * P));
  const bool round16 = x.dtype() == DataType::kFloat16 || x.dtype() == DataType::kBFloat16;
  parallel_for(B * Ch, 1, [&](int64_t t0, int64_t t1) {
    std::vector<C> seq(static_cast<size_t>(P + L));
    for (int64_t bc = t0; bc < t1; ++bc) {
      const int64_t c = bc % Ch;
      std::copy(past.begin() + bc * P, past.begin() + (bc + 1) * P, seq.begin());
      std::copy(xv.data() + bc * L, xv.data() + (bc + 1) * L, seq.begin() + P);
      const C* wk = wv.data() + c * K;
      C* out = yw.data() + bc * L;
      for (int64_t t = 0; t < L; ++t) {
        C acc = bias[c];
        for (int64_t j = 0; j < K; ++j) acc += wk[j] * seq[t + j];
        if (silu) {
          // The reference rounds the convolution to the input type before the activation.
          if (round16) {
            acc = x.dtype() == DataType::kFloat16 ? f16_to_f32(f32_to_f16(static_cast<float>(acc)))
                                                  : bf16_to_f32(f32_to_bf16(static_cast<float>(acc)));
          }
          acc = acc / (C(1) + std::exp(-acc));
        }
        out[t] = acc;
      }
      std::copy(seq.begin() + L, seq.end(), present.begin() + bc * P);
    }
  });
  yw.commit();
  if (ctx.has_output(1)) {
    Tensor& ps = ctx.output(1, x.dtype(), {B, Ch, P});
    WriteAs<C> pw(ps);
    std::copy(present.begin(), present.end(), pw.data());
    pw.commit();
  }
  return Status::Ok();
}

}  // namespace

void register_newops_seq(KernelRegistry& r) {
  auto real0 = [](const ir::Node& n) { return nn::require_real(n, 0); };
  r.add({"RotaryEmbedding", "", 23, 1 << 30, "cpu.RotaryEmbedding.any", real0, [](const ir::Node& n, KernelInit&) {
           const ops::RotaryEmbeddingParams a = ops::parse_rotary_embedding(n);
           return make_kernel([a](KernelContext& ctx) {
             return ctx.input(0).dtype() == DataType::kFloat64 ? rotary<double>(ctx, a) : rotary<float>(ctx, a);
           });
         }});
  r.add({"CausalConvWithState", "", 27, 1 << 30, "cpu.CausalConvWithState.any", real0,
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           KILN_ASSIGN_OR_RETURN(const ops::CausalConvWithStateParams p, ops::parse_causal_conv_with_state(n));
           const bool silu = p.silu;
           return make_kernel([silu](KernelContext& ctx) {
             return ctx.input(0).dtype() == DataType::kFloat64 ? causal_conv<double>(ctx, silu)
                                                               : causal_conv<float>(ctx, silu);
           });
         }});
}

}  // namespace kiln::cpu
