// backends/cpu/fused_common.h — activations applied as epilogues by kiln's fused kernels
// (fused.cpp, fused_attention.cpp). The names and parameters are those of ops/fused.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/elementwise_math.h"
#include "ir/epilogue.h"

namespace kiln::cpu::fused {

// The activation type and its parsing are declared once, in ir/epilogue.h.
using ::kiln::ActKind;
using ::kiln::Activation;

// Parses the node's "activation" / "activation_params"; false with *why for an unknown name.
inline bool parse_activation(const ir::Node& n, Activation* act, std::string* why) { return read_activation(n, act, why); }

// p[i] = act(p[i] + bias[i % n]) for i < count (bias may be null). One pass, vectorizable per kind.
template <ActKind K>
inline void epilogue_row(float* p, int64_t count, const float* bias, const Activation& act) {
  for (int64_t i = 0; i < count; ++i) {
    float x = p[i] + (bias ? bias[i] : 0.0f);
    if constexpr (K == ActKind::kRelu) x = x > 0 ? x : 0;
    else if constexpr (K == ActKind::kLeakyRelu) x = x >= 0 ? x : act.a * x;
    else if constexpr (K == ActKind::kClip) x = std::min(std::max(x, act.a), act.b);
    else if constexpr (K == ActKind::kSigmoid) x = math::sigmoid_f32(x);
    else if constexpr (K == ActKind::kHardSigmoid) x = std::max(0.0f, std::min(1.0f, act.a * x + act.b));
    else if constexpr (K == ActKind::kHardSwish) x = x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f));
    else if constexpr (K == ActKind::kSilu) x = x * math::sigmoid_f32(x);
    else if constexpr (K == ActKind::kTanh) x = math::tanh_f32(x);
    else if constexpr (K == ActKind::kGelu) x = 0.5f * x * (1.0f + math::erf_f32(x * 0.70710678118654752f));
    else if constexpr (K == ActKind::kGeluTanh)
      x = 0.5f * x * (1.0f + math::tanh_f32(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    p[i] = x;
  }
}

// Applies bias (per column, `cols` wide; may be null) and the activation to rows x cols floats.
inline void apply_epilogue(float* y, int64_t rows, int64_t cols, const float* bias, const Activation& act) {
  if (act.kind == ActKind::kNone && !bias) return;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* p = y + r * cols;
      switch (act.kind) {
        case ActKind::kNone: epilogue_row<ActKind::kNone>(p, cols, bias, act); break;
        case ActKind::kRelu: epilogue_row<ActKind::kRelu>(p, cols, bias, act); break;
        case ActKind::kLeakyRelu: epilogue_row<ActKind::kLeakyRelu>(p, cols, bias, act); break;
        case ActKind::kClip: epilogue_row<ActKind::kClip>(p, cols, bias, act); break;
        case ActKind::kSigmoid: epilogue_row<ActKind::kSigmoid>(p, cols, bias, act); break;
        case ActKind::kHardSigmoid: epilogue_row<ActKind::kHardSigmoid>(p, cols, bias, act); break;
        case ActKind::kHardSwish: epilogue_row<ActKind::kHardSwish>(p, cols, bias, act); break;
        case ActKind::kSilu: epilogue_row<ActKind::kSilu>(p, cols, bias, act); break;
        case ActKind::kTanh: epilogue_row<ActKind::kTanh>(p, cols, bias, act); break;
        case ActKind::kGelu: epilogue_row<ActKind::kGelu>(p, cols, bias, act); break;
        case ActKind::kGeluTanh: epilogue_row<ActKind::kGeluTanh>(p, cols, bias, act); break;
      }
    }
  });
}

}  // namespace kiln::cpu::fused
