// backends/cpu/cpu_kernels.h — shared helpers for CPU kernel families, and their registration hooks.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backends/kernel.h"
#include "ir/float_types.h"
#include "util/parallel.h"

namespace kiln::cpu {

// One registration function per kernel family file (backends/cpu/<family>.cpp).
void register_unary(KernelRegistry& r);
void register_binary(KernelRegistry& r);
void register_cast(KernelRegistry& r);
void register_nn(KernelRegistry& r);
void register_shape(KernelRegistry& r);
void register_reduce(KernelRegistry& r);
void register_control(KernelRegistry& r);
void register_resize(KernelRegistry& r);  // Resize, Upsample
void register_einsum(KernelRegistry& r);
void register_unique(KernelRegistry& r);
void register_random(KernelRegistry& r);  // RandomNormal/Uniform(+Like), Bernoulli, Multinomial
// random.cpp: the seed of one draw by an op without a `seed` attribute (kiln::set_random_seed).
uint64_t unseeded_random_seed();
void register_signal(KernelRegistry& r);  // DFT, STFT, windows, MelWeightMatrix
void register_string(KernelRegistry& r);  // StringNormalizer, StringConcat, StringSplit, RegexFullMatch
void register_detect(KernelRegistry& r);  // NonMaxSuppression
void register_linalg(KernelRegistry& r);  // Det
void register_quant(KernelRegistry& r);
void register_rnn(KernelRegistry& r);
void register_loss(KernelRegistry& r);
void register_nn_norm_lp(KernelRegistry& r);  // LpNormalization
void register_roi(KernelRegistry& r);
void register_training(KernelRegistry& r);
void register_text(KernelRegistry& r);  // TfIdfVectorizer: tfidf.cpp
void register_attention(KernelRegistry& r);
void register_attention_rotary(KernelRegistry& r);  // RotaryEmbedding
void register_nn_conv_causal(KernelRegistry& r);  // CausalConvWithState
void register_grid(KernelRegistry& r);
void register_cast_bitcast(KernelRegistry& r);  // BitCast
void register_reduce_cumprod(KernelRegistry& r);  // CumProd
void register_shape_index_scatter(KernelRegistry& r);  // TensorScatter
void register_ml(KernelRegistry& r);  // ai.onnx.ml ops: ml.cpp
void register_fused(KernelRegistry& r);   // kiln's fused ops (domain "kiln"): fused*.cpp
void register_pointwise(KernelRegistry& r);  // kiln.Pointwise: pointwise.cpp
void register_contrib_quant(KernelRegistry& r);  // com.microsoft MatMulNBits: contrib_quant.cpp

// The thread pool (util/parallel.h), under the names the kernels use.
using kiln::parallel_for;
using kiln::parallel_tasks;
using kiln::RangeFn;

// The most kiln's own copies may use, from KILN_CPU_ISA ("avx2" or "baseline"; unset: what the CPU
// runs), read once per process: the tests run every copy of the hot loops on one machine
// (scripts/test.sh runs the CPU kernels' tests again under KILN_CPU_ISA=avx2), and a user can keep
// kiln off AVX-512. oneDNN has its own switch (ONEDNN_MAX_CPU_ISA).
enum class IsaCap { kBaseline = 0, kAvx2 = 1, kAny = 2 };
inline IsaCap isa_cap() {
  static const IsaCap cap = [] {
    const char* v = std::getenv("KILN_CPU_ISA");
    if (!v) return IsaCap::kAny;
    const std::string s(v);
    return s == "baseline" ? IsaCap::kBaseline : s == "avx2" ? IsaCap::kAvx2 : IsaCap::kAny;
  }();
  return cap;
}

// Whether this CPU runs AVX2 and FMA: hot loops compiled twice (a [[gnu::target("avx2,fma")]] copy
// and the baseline x86-64 one) pick their copy with it, once per process.
inline bool has_avx2_fma() {
  static const bool yes =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && isa_cap() >= IsaCap::kAvx2;
  return yes;
}

// Whether this CPU runs AVX-512 (F, VL, BW, DQ) with FMA: the hot loops with an AVX2 copy have a third
// one, [[gnu::target(KILN_TARGET_AVX512)]], which they pick first. GCC is asked for 512-bit vectors
// (its generic tuning may prefer 256); clang takes no such option in a target attribute.
inline bool has_avx512() {
  static const bool yes = isa_cap() >= IsaCap::kAny && has_avx2_fma() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  return yes;
}
#if defined(__clang__)
#define KILN_TARGET_AVX512 "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"
#else
#define KILN_TARGET_AVX512 "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,prefer-vector-width=512"
#endif

// Whether oneDNN has Winograd convolution kernels on this CPU (oneDNN 2.6: AVX-512 only), asked once:
// the "onednn-winograd" tactic of 3x3 convolutions exists only where it does (nn_conv.cpp).
bool onednn_winograd_available();

// Storage types for the 2-byte floats (raw bits).
struct f16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };

template <typename T> struct Tag { using type = T; };

// Calls f(Tag<T>{}) with T the C++ type of `dt` for the common numeric types (float, double,
// int8..int64, uint8..uint64, bool). Returns false when `dt` is not one of them.
template <typename F>
bool visit_numeric(DataType dt, F&& f) {
  switch (dt) {
    case DataType::kFloat32: f(Tag<float>{}); return true;
    case DataType::kFloat64: f(Tag<double>{}); return true;
    case DataType::kInt8: f(Tag<int8_t>{}); return true;
    case DataType::kInt16: f(Tag<int16_t>{}); return true;
    case DataType::kInt32: f(Tag<int32_t>{}); return true;
    case DataType::kInt64: f(Tag<int64_t>{}); return true;
    case DataType::kUInt8: f(Tag<uint8_t>{}); return true;
    case DataType::kUInt16: f(Tag<uint16_t>{}); return true;
    case DataType::kUInt32: f(Tag<uint32_t>{}); return true;
    case DataType::kUInt64: f(Tag<uint64_t>{}); return true;
    case DataType::kBool: f(Tag<bool>{}); return true;
    default: return false;
  }
}

}  // namespace kiln::cpu
