// backends/cpu/nn_conv_causal.cpp — CausalConvWithState (opset 27) on the CPU (Conv itself:
// nn_conv.cpp). Computed in float (double for float64).
#include <cmath>

#include "backends/cpu/nn_common.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

using nn::ReadAs;
using nn::WriteAs;

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

void register_nn_conv_causal(KernelRegistry& r) {
  auto real0 = [](const ir::Node& n) { return nn::require_real(n, 0); };
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
