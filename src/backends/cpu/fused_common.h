// backends/cpu/fused_common.h — activations applied as epilogues by kiln's fused kernels
// (fused.cpp, fused_attention.cpp). The names and parameters are those of ops/fused.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
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
  if (n.attr("output_columns")) return "output_columns is the CUDA product's (a padded half GEMM's columns)";
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && n.inputs[i]->type.dtype != DataType::kFloat32) return "float32 only";
  return "";
}

// x → act(x), one kind per instantiation (so the loops below vectorize: always inlined, as are the
// math functions it calls; see elementwise_math.h). NaN stays NaN, as in the ONNX reference: the
// comparisons are written so that NaN (false either way) takes the branch that returns it.
// x clamped to [0, 1], NaN kept (std::max(0.0f, std::min(1.0f, x)) makes it 1).
[[gnu::always_inline]] inline float clamp01(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }

template <ActKind K>
[[gnu::always_inline]] inline float activate(float x, const Activation& act) {
  if constexpr (K == ActKind::kRelu) return x < 0 ? 0 : x;
  else if constexpr (K == ActKind::kLeakyRelu) return x >= 0 ? x : act.a * x;
  else if constexpr (K == ActKind::kClip) return std::min(std::max(x, act.a), act.b);
  else if constexpr (K == ActKind::kSigmoid) return math::sigmoid_f32(x);
  else if constexpr (K == ActKind::kHardSigmoid) return clamp01(act.a * x + act.b);
  else if constexpr (K == ActKind::kHardSwish) return x * clamp01(x / 6.0f + 0.5f);
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

// kiln.FusedConv's pooled output (passes/conv_pool.cpp): on channels-last Y [N, pixels, C], Y = act(Y)
// and pooled[n * C + c] = the mean of image n's channel c after the activation, in the one pass over Y
// that applies the activation. Each image's pixels go in pool_chunks(pixels, C) contiguous chunks (as
// the activation alone is split): chunk k sums its pixels into partial[k * C ...], and the means add
// the chunks in order, so the result does not depend on the thread count. Sigmoid, SiLU and no
// activation with the AVX-512 intrinsics; other activations and CPUs through epilogue_rows.
inline int64_t pool_chunks(int64_t pixels, int64_t C) {
  // apply_epilogue's grain (16384 values a task), so the pass splits over threads as the activation's did.
  return std::clamp<int64_t>(pixels * C / 16384, 1, std::min<int64_t>(pixels, 64));
}
// NB blocks of 16 channels from column c0 (the last one `last_width` wide) of `pixels` rows of C:
// activation in place, sums in registers.
template <int NB>
[[gnu::target(KILN_TARGET_AVX512), gnu::always_inline]] inline void act_sum_blocks_avx512(float* y, int64_t pixels, int64_t C,
                                                                                          int64_t last_width, ActKind k,
                                                                                          float* sums) {
  __m512 acc[NB];
  __mmask16 mask[NB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
    acc[j] = _mm512_setzero_ps();
    mask[j] = j + 1 < NB || last_width >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << last_width) - 1);
  }
  for (int64_t p = 0; p < pixels; ++p) {
    float* q = y + p * C;
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      __m512 v = _mm512_maskz_loadu_ps(mask[j], q + 16 * j);
      if (k != ActKind::kNone) {
        v = simd::sigmoid_avx512(v, k == ActKind::kSilu);
        _mm512_mask_storeu_ps(q + 16 * j, mask[j], v);
      }
      acc[j] = _mm512_add_ps(acc[j], v);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) _mm512_mask_storeu_ps(sums + 16 * j, mask[j], acc[j]);
}
[[gnu::target(KILN_TARGET_AVX512)]] inline void act_sum_pixels_avx512(float* y, int64_t pixels, int64_t C, ActKind k,
                                                                      float* sums) {
  // Up to 8 blocks (128 channels) per sweep over the chunk's pixels (a chunk stays in L2 between sweeps).
  for (int64_t c0 = 0; c0 < C; c0 += 128) {
    const int64_t width = std::min<int64_t>(128, C - c0), nb = (width + 15) / 16, last = width - 16 * (nb - 1);
    float* yc = y + c0;
    float* sc = sums + c0;
    switch (nb) {
      case 1: act_sum_blocks_avx512<1>(yc, pixels, C, last, k, sc); break;
      case 2: act_sum_blocks_avx512<2>(yc, pixels, C, last, k, sc); break;
      case 3: act_sum_blocks_avx512<3>(yc, pixels, C, last, k, sc); break;
      case 4: act_sum_blocks_avx512<4>(yc, pixels, C, last, k, sc); break;
      case 5: act_sum_blocks_avx512<5>(yc, pixels, C, last, k, sc); break;
      case 6: act_sum_blocks_avx512<6>(yc, pixels, C, last, k, sc); break;
      case 7: act_sum_blocks_avx512<7>(yc, pixels, C, last, k, sc); break;
      default: act_sum_blocks_avx512<8>(yc, pixels, C, last, k, sc); break;
    }
  }
}
inline void apply_epilogue_and_pool(float* y, int64_t N, int64_t pixels, int64_t C, const Activation& act, float* pooled,
                                    float* partial) {
  if (pixels == 0) {  // the mean of an empty image (the pool kernels' NaN)
    std::fill(pooled, pooled + N * C, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const int64_t chunks = pool_chunks(pixels, C);
  const bool simd = has_avx512() && (act.kind == ActKind::kNone || act.kind == ActKind::kSilu || act.kind == ActKind::kSigmoid);
  const EpilogueRowsFn fn = epilogue_rows_for(act.kind);
  for (int64_t n = 0; n < N; ++n) {
    float* img = y + n * pixels * C;
    parallel_for(chunks, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t p0 = k * pixels / chunks, p1 = (k + 1) * pixels / chunks;
        float* sums = partial + k * C;
        if (simd) {
          act_sum_pixels_avx512(img + p0 * C, p1 - p0, C, act.kind, sums);
          continue;
        }
        if (act.kind != ActKind::kNone) fn(img, p0, p1, C, nullptr, act);
        std::fill(sums, sums + C, 0.0f);
        for (int64_t p = p0; p < p1; ++p)
          for (int64_t c = 0; c < C; ++c) sums[c] += img[p * C + c];
      }
    });
    const float inv = 1.0f / static_cast<float>(pixels);
    for (int64_t c = 0; c < C; ++c) {
      float s = partial[c];
      for (int64_t k = 1; k < chunks; ++k) s += partial[k * C + c];
      pooled[n * C + c] = s * inv;
    }
  }
}

// Applies bias (per column, `cols` wide; may be null) and the activation to rows x cols floats.
inline void apply_epilogue(float* y, int64_t rows, int64_t cols, const float* bias, const Activation& act) {
  if (act.kind == ActKind::kNone && !bias) return;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  const EpilogueRowsFn fn = epilogue_rows_for(act.kind);
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) { fn(y, r0, r1, cols, bias, act); });
}

}  // namespace kiln::cpu::fused
