// backends/cpu/fused_common.h — activations applied as epilogues by kiln's fused kernels
// (fused.cpp, fused_attention.cpp). The names and parameters are those of ops/fused.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/elementwise_math.h"
#include "backends/cpu/sigmoid_simd.h"
#include "ir/epilogue.h"

namespace kiln::cpu::fused {

// The activation type and its parsing are declared once, in ir/epilogue.h.
using ::kiln::ActKind;
using ::kiln::Activation;

// Parses the node's "activation" / "activation_params"; false with *why for an unknown name.
inline bool parse_activation(const ir::Node& n, Activation* act, std::string* why) { return read_activation(n, act, why); }

// The node check of kiln's float32 fused ops (FusedConv, FusedGemm, FusedMatMul, SkipLayerNorm): a
// known activation attribute and float32 inputs.
inline std::string check_f32(const ir::Node& n) {
  std::string why;
  Activation act;
  if (!parse_activation(n, &act, &why)) return why;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && n.inputs[i]->type.dtype != DataType::kFloat32) return "float32 only";
  return "";
}

// x → act(x), one kind per instantiation (so the loops below vectorize: always inlined, as are the
// math functions it calls; see elementwise_math.h).
template <ActKind K>
[[gnu::always_inline]] inline float activate(float x, const Activation& act) {
  if constexpr (K == ActKind::kRelu) return x > 0 ? x : 0;
  else if constexpr (K == ActKind::kLeakyRelu) return x >= 0 ? x : act.a * x;
  else if constexpr (K == ActKind::kClip) return std::min(std::max(x, act.a), act.b);
  else if constexpr (K == ActKind::kSigmoid) return math::sigmoid_f32(x);
  else if constexpr (K == ActKind::kHardSigmoid) return std::max(0.0f, std::min(1.0f, act.a * x + act.b));
  else if constexpr (K == ActKind::kHardSwish) return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f));
  else if constexpr (K == ActKind::kSilu) return x * math::sigmoid_f32(x);
  else if constexpr (K == ActKind::kTanh) return math::tanh_f32(x);
  else if constexpr (K == ActKind::kGelu) return 0.5f * x * (1.0f + math::erf_f32(x * 0.70710678118654752f));
  else if constexpr (K == ActKind::kGeluTanh)
    return 0.5f * x * (1.0f + math::tanh_f32(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  else return x;
}

// Rows [r0, r1) of a rows x cols block: y = act(y + bias[col]) (bias may be null). Without a bias
// the rows are one contiguous run, processed as such: a convolution's rows are its output width
// (7 to 112 floats), too short to vectorize one at a time.
template <ActKind K>
[[gnu::always_inline]] inline void epilogue_rows_body(float* y, int64_t r0, int64_t r1, int64_t cols, const float* bias,
                                                       const Activation& act) {
  if (!bias) {
    float* p = y + r0 * cols;
    const int64_t n = (r1 - r0) * cols;
    for (int64_t i = 0; i < n; ++i) p[i] = activate<K>(p[i], act);
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    float* p = y + r * cols;
    for (int64_t i = 0; i < cols; ++i) p[i] = activate<K>(p[i] + bias[i], act);
  }
}

// The loops compiled three times: for AVX-512 and for AVX2+FMA (chosen at run time where the CPU has
// them) and for the baseline x86-64 the library is built for.
// Sigmoid and SiLU take the intrinsics of sigmoid_simd.h there.
template <ActKind K>
[[gnu::target("avx2,fma")]] void epilogue_rows_avx2(float* y, int64_t r0, int64_t r1, int64_t cols, const float* bias,
                                                     const Activation& act) {
  if constexpr (K == ActKind::kSilu || K == ActKind::kSigmoid) simd::sigmoid_rows_avx2(y, r0, r1, cols, bias, K == ActKind::kSilu);
  else epilogue_rows_body<K>(y, r0, r1, cols, bias, act);
}
template <ActKind K>
[[gnu::target(KILN_TARGET_AVX512)]] void epilogue_rows_avx512(float* y, int64_t r0, int64_t r1, int64_t cols, const float* bias,
                                               const Activation& act) {
  if constexpr (K == ActKind::kSilu || K == ActKind::kSigmoid) simd::sigmoid_rows_avx512(y, r0, r1, cols, bias, K == ActKind::kSilu);
  else epilogue_rows_body<K>(y, r0, r1, cols, bias, act);
}
template <ActKind K>
void epilogue_rows(float* y, int64_t r0, int64_t r1, int64_t cols, const float* bias, const Activation& act) {
  if (has_avx512()) epilogue_rows_avx512<K>(y, r0, r1, cols, bias, act);
  else if (has_avx2_fma()) epilogue_rows_avx2<K>(y, r0, r1, cols, bias, act);
  else epilogue_rows_body<K>(y, r0, r1, cols, bias, act);
}

// epilogue_rows for the activation `k`, chosen once (its instantiation per kind keeps the loops
// vectorized; the caller calls it per block of rows).
using EpilogueRowsFn = void (*)(float*, int64_t, int64_t, int64_t, const float*, const Activation&);
inline EpilogueRowsFn epilogue_rows_for(ActKind k) {
  switch (k) {
    case ActKind::kNone: return &epilogue_rows<ActKind::kNone>;
    case ActKind::kRelu: return &epilogue_rows<ActKind::kRelu>;
    case ActKind::kLeakyRelu: return &epilogue_rows<ActKind::kLeakyRelu>;
    case ActKind::kClip: return &epilogue_rows<ActKind::kClip>;
    case ActKind::kSigmoid: return &epilogue_rows<ActKind::kSigmoid>;
    case ActKind::kHardSigmoid: return &epilogue_rows<ActKind::kHardSigmoid>;
    case ActKind::kHardSwish: return &epilogue_rows<ActKind::kHardSwish>;
    case ActKind::kSilu: return &epilogue_rows<ActKind::kSilu>;
    case ActKind::kTanh: return &epilogue_rows<ActKind::kTanh>;
    case ActKind::kGelu: return &epilogue_rows<ActKind::kGelu>;
    case ActKind::kGeluTanh: return &epilogue_rows<ActKind::kGeluTanh>;
  }
  return &epilogue_rows<ActKind::kNone>;
}

// Applies bias (per column, `cols` wide; may be null) and the activation to rows x cols floats.
inline void apply_epilogue(float* y, int64_t rows, int64_t cols, const float* bias, const Activation& act) {
  if (act.kind == ActKind::kNone && !bias) return;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  const EpilogueRowsFn fn = epilogue_rows_for(act.kind);
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) { fn(y, r0, r1, cols, bias, act); });
}

}  // namespace kiln::cpu::fused
