// ops/params_misc.h — the attributes of the elementwise, activation, cast, random, signal, string,
// detection, grid and newer (opset 20+) ops declared in ops/elementwise.cpp, unique.cpp, random.cpp,
// signal.cpp, string.cpp, detect.cpp, attention.cpp, nn_conv_causal.cpp, shape_index_scatter.cpp,
// reduce_cumprod.cpp, cast_bitcast.cpp and grid.cpp, parsed once from the node: the shape functions
// and the CPU and CUDA kernels read these structs, so each default (opset-dependent ones included) and
// each validity check is written once, in ops/params_misc.cpp. Resize/Upsample's are ResizeParams
// (ops/resize.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::ops {

// ---- Elementwise (ops/elementwise.cpp)

// The activations with float parameters; ONNX's defaults per op:
//   LeakyRelu alpha 0.01; HardSigmoid alpha 0.2, beta 0.5; Elu, Celu, ThresholdedRelu, Swish alpha 1;
//   Selu alpha 1.6733, beta = its gamma 1.0507; Shrink alpha = its lambd 0.5, beta = its bias 0.
// Other ops: both 0.
struct ActivationParams {
  float alpha = 0, beta = 0;
};
ActivationParams parse_activation(const ir::Node& n);

struct GeluParams {
  std::string approximate = "none";  // as written; the CPU runs anything but "tanh" as erf, CUDA rejects it
  bool tanh = false;
};
GeluParams parse_gelu(const ir::Node& n);

struct ClipParams {
  bool bounds_from_inputs = true;  // opset >= 11 (or unversioned): min and max are inputs 1 and 2
  // Opset < 11: the attributes (absent: ∓FLT_MAX); else ∓infinity (what an absent input means).
  float min = 0, max = 0;
};
ClipParams parse_clip(const ir::Node& n);

struct IsInfParams {
  bool detect_positive = true, detect_negative = true;
};
IsInfParams parse_is_inf(const ir::Node& n);

// Cast and CastLike (CastLike's target is its input 1's dtype; `to` is not read for it).
struct CastParams {
  bool has_to = false;                    // Cast: the 'to' attribute is given
  DataType to = DataType::kUndefined;     // Cast: a valid dtype (parse_cast rejects others; unchecked: as written)
  bool saturate = true;                   // float8 targets: out-of-range values saturate
  std::string round_mode = "up";          // as written (float8e8m0 targets)
  enum class Round { kUp, kDown, kNearest } round = Round::kUp;  // an unknown round_mode: kUp
};
Expected<CastParams> parse_cast(const ir::Node& n);
// Without the check of 'to' (a missing one reads as has_to = false, to = kUndefined), for the CPU kernel's
// check, which names a missing 'to' in its own words and leaves an invalid code to its factory's error.
CastParams parse_cast_unchecked(const ir::Node& n);

// The broadcasting binary ops (Add, Sub, Mul, Div, Pow, PRelu, comparisons, logic): their opset < 7
// forms, where B broadcasts only with broadcast=1 and aligns with A at `axis`.
struct BinaryParams {
  bool legacy_broadcast = false;  // opset < 7 with broadcast=1
  bool has_axis = false;          // legacy_broadcast: axis given; else B aligns with A's trailing dims
  int64_t axis = 0;               // as written, may be negative
  bool legacy_prelu = false;      // PRelu of opset < 7: a 1-D slope of more than one value is per channel
};
BinaryParams parse_binary(const ir::Node& n);
// Opset < 7 broadcasting: the axis of A (rank `rank_a`) where B's `rank_b` dims start. False when B
// does not fit inside A from there (an axis out of range: onnx's checker refuses it too), so no caller
// sizes anything by a hostile axis. Meaningful only when p.legacy_broadcast.
bool legacy_broadcast_axis(const BinaryParams& p, int64_t rank_a, int64_t rank_b, int64_t* axis);

struct ModParams {
  bool fmod = false;
};
ModParams parse_mod(const ir::Node& n);

struct BitShiftParams {
  bool left = true;              // direction "LEFT" (the CPU takes any direction but "RIGHT" as LEFT)
  bool direction_known = true;   // direction is "LEFT" or "RIGHT" (CUDA rejects anything else)
};
BitShiftParams parse_bit_shift(const ir::Node& n);

// ---- Unique, random, signal, string and detection ops (ops/unique.cpp, random.cpp, signal.cpp, string.cpp, detect.cpp)

struct UniqueParams {
  bool has_axis = false;  // absent: the flattened input
  int64_t axis = 0;       // as written, may be negative
  bool sorted = true;
};
UniqueParams parse_unique(const ir::Node& n);

// Einsum's EinsumParams are in ops/params_shape.h, with its equation parser.

// Random draws are reproducible with a seed: every run of the node draws the same numbers.
// RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike.
struct RandomParams {
  float mean = 0, scale = 1;  // RandomNormal*
  float low = 0, high = 1;    // RandomUniform*
  bool has_dtype = false;     // *Like without dtype: the input's dtype
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;  // non-Like only
  bool has_seed = false;
  float seed = 0;
};
RandomParams parse_random(const ir::Node& n);

struct BernoulliParams {
  bool has_dtype = false;  // absent: the input's dtype
  DataType dtype = DataType::kUndefined;
  bool has_seed = false;
  float seed = 0;
};
BernoulliParams parse_bernoulli(const ir::Node& n);

struct MultinomialParams {
  int64_t sample_size = 1;
  DataType dtype = DataType::kInt32;  // as written; the kernels take int32 and int64 only
  bool has_seed = false;
  float seed = 0;
};
MultinomialParams parse_multinomial(const ir::Node& n);

struct DftParams {
  bool axis_input = false;  // opset >= 20: the axis is input 2 (absent: -2), not the attribute
  int64_t axis = 1;         // opset < 20: the attribute, as written; else -2
  bool inverse = false, onesided = false;
};
DftParams parse_dft(const ir::Node& n);

struct StftParams {
  bool onesided = true;
};
StftParams parse_stft(const ir::Node& n);

// HannWindow, HammingWindow, BlackmanWindow.
struct SignalWindowParams {
  bool periodic = true;
  DataType output_datatype = DataType::kFloat32;  // as written
};
SignalWindowParams parse_signal_window(const ir::Node& n);

struct MelWeightMatrixParams {
  DataType output_datatype = DataType::kFloat32;  // as written
};
MelWeightMatrixParams parse_mel_weight_matrix(const ir::Node& n);

struct StringNormalizerParams {
  enum class CaseChange { kNone, kLower, kUpper } case_change = CaseChange::kNone;
  bool case_sensitive = false;
  std::vector<std::string> stopwords;  // as written (compared lower-cased unless case_sensitive)
};
Expected<StringNormalizerParams> parse_string_normalizer(const ir::Node& n);

struct StringSplitParams {
  std::string delimiter;  // empty: runs of whitespace
  int64_t maxsplit = -1;  // -1: no limit
};
StringSplitParams parse_string_split(const ir::Node& n);

struct RegexFullMatchParams {
  std::string pattern;  // compiled by the kernel
};
RegexFullMatchParams parse_regex_full_match(const ir::Node& n);

struct NonMaxSuppressionParams {
  bool center_point_box = false;  // boxes are [x_center, y_center, width, height], else [y1, x1, y2, x2]
};
NonMaxSuppressionParams parse_non_max_suppression(const ir::Node& n);

// ---- Newer ops (ops/attention.cpp, nn_conv_causal.cpp, shape_index_scatter.cpp, cast_bitcast.cpp, grid.cpp)

struct AttentionParams {
  int64_t q_num_heads = 0, kv_num_heads = 0;  // 0: not given (4-D inputs carry the head counts)
  bool has_scale = false;                     // absent: 1 / sqrt(head size)
  float scale = 0;
  bool is_causal = false;
  float softcap = 0;                  // 0: none
  int64_t qk_matmul_output_mode = 0;  // 0..3
};
Expected<AttentionParams> parse_attention(const ir::Node& n);

struct FlexAttentionParams {
  bool has_scale = false;  // absent: 1 / sqrt(head size)
  float scale = 0;
  bool has_softmax_precision = false;  // absent: the type the inputs compute in
  DataType softmax_precision = DataType::kFloat32;  // a float type
};
Expected<FlexAttentionParams> parse_flex_attention(const ir::Node& n);

struct LinearAttentionParams {
  int64_t q_num_heads = 0, kv_num_heads = 0;
  float scale = 0;  // 0: 1 / sqrt(key head size)
  enum class UpdateRule { kLinear, kGated, kDelta, kGatedDelta } update_rule = UpdateRule::kGatedDelta;
};
Expected<LinearAttentionParams> parse_linear_attention(const ir::Node& n);

struct RotaryEmbeddingParams {
  int64_t num_heads = 0;             // 0: X is 4-D
  int64_t rotary_embedding_dim = 0;  // 0: the whole head
  bool interleaved = false;
};
RotaryEmbeddingParams parse_rotary_embedding(const ir::Node& n);

struct CausalConvWithStateParams {
  bool silu = false;  // activation "silu" or "swish"; "none" otherwise
};
Expected<CausalConvWithStateParams> parse_causal_conv_with_state(const ir::Node& n);

struct TensorScatterParams {
  int64_t axis = -2;  // as written, may be negative
  bool circular = false;
};
Expected<TensorScatterParams> parse_tensor_scatter(const ir::Node& n);

struct BitCastParams {
  DataType to = DataType::kUndefined;  // as written
};
BitCastParams parse_bit_cast(const ir::Node& n);

struct GridSampleParams {
  int mode = 1;     // a grid::Mode (ops/grid_math.h): "bilinear"/"linear", "bicubic"/"cubic", "nearest"
  int padding = 0;  // a grid::Pad: "zeros", "border", "reflection"
  bool align_corners = false;
};
Expected<GridSampleParams> parse_grid_sample(const ir::Node& n);

struct AffineGridParams {
  bool align_corners = false;
};
AffineGridParams parse_affine_grid(const ir::Node& n);

}  // namespace kiln::ops
