#include "ops/params_misc.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "ir/epilogue.h"
#include "ops/grid_math.h"

namespace kiln::ops {

// ---- Elementwise

ActivationParams parse_activation(const ir::Node& n) {
  ActivationParams p;
  const std::string& op = n.op_type;
  if (op == "LeakyRelu" || op == "HardSigmoid") {
    // The epilogue's reading, so a fused and an unfused activation take the same parameters.
    std::string why;
    const Activation a = activation_of(n, nullptr, &why);
    p.alpha = a.a;
    p.beta = a.b;
  } else if (op == "Elu" || op == "Celu" || op == "ThresholdedRelu" || op == "Swish") {
    p.alpha = n.attr_float("alpha", 1.0f);
  } else if (op == "Selu") {
    p.alpha = n.attr_float("alpha", 1.67326319217681884765625f);
    p.beta = n.attr_float("gamma", 1.05070102214813232421875f);
  } else if (op == "Shrink") {
    p.alpha = n.attr_float("lambd", 0.5f);
    p.beta = n.attr_float("bias", 0.0f);
  }
  return p;
}

GeluParams parse_gelu(const ir::Node& n) {
  GeluParams p;
  p.approximate = n.attr_string("approximate", "none");
  p.tanh = p.approximate == "tanh";
  return p;
}

ClipParams parse_clip(const ir::Node& n) {
  ClipParams p;
  p.bounds_from_inputs = n.opset == 0 || n.opset >= 11;
  if (p.bounds_from_inputs) {
    p.min = -INFINITY;
    p.max = INFINITY;
  } else {
    p.min = n.attr_float("min", -FLT_MAX);
    p.max = n.attr_float("max", FLT_MAX);
  }
  return p;
}

IsInfParams parse_is_inf(const ir::Node& n) {
  IsInfParams p;
  p.detect_positive = n.attr_int("detect_positive", 1) != 0;
  p.detect_negative = n.attr_int("detect_negative", 1) != 0;
  return p;
}

CastParams parse_cast_unchecked(const ir::Node& n) {
  CastParams p;
  if (n.op_type != "CastLike") {
    p.has_to = n.attr("to") != nullptr;
    p.to = static_cast<DataType>(n.attr_int("to", 0));
  }
  p.saturate = n.attr_int("saturate", 1) != 0;
  p.round_mode = n.attr_string("round_mode", "up");
  p.round = p.round_mode == "nearest" ? CastParams::Round::kNearest
            : p.round_mode == "down"  ? CastParams::Round::kDown
                                      : CastParams::Round::kUp;
  return p;
}

Expected<CastParams> parse_cast(const ir::Node& n) {
  if (n.op_type != "CastLike") {
    const int64_t code = n.attr_int("to", 0);
    if (!dtype_is_valid(static_cast<int32_t>(code)))
      return invalid_model(n.describe() + ": 'to' = " + std::to_string(code) + " is not a known dtype");
  }
  return parse_cast_unchecked(n);
}

BinaryParams parse_binary(const ir::Node& n) {
  BinaryParams p;
  const bool legacy = n.opset != 0 && n.opset < 7;
  p.legacy_prelu = legacy && n.op_type == "PRelu";
  p.legacy_broadcast = legacy && n.attr_int("broadcast", 0) != 0;
  p.has_axis = n.attr("axis") != nullptr;
  p.axis = n.attr_int("axis", 0);
  return p;
}

bool legacy_broadcast_axis(const BinaryParams& p, int64_t rank_a, int64_t rank_b, int64_t* axis) {
  if (!p.has_axis) {  // B's dims are A's trailing ones (a B of higher rank broadcasts as numpy's would)
    *axis = std::max<int64_t>(rank_a - rank_b, 0);
    return true;
  }
  int64_t a = p.axis;  // INT64_MIN + rank_a does not overflow
  if (a < 0) a += rank_a;
  if (a < 0 || a > rank_a - rank_b) return false;
  *axis = a;
  return true;
}

ModParams parse_mod(const ir::Node& n) { return ModParams{n.attr_int("fmod", 0) != 0}; }

BitShiftParams parse_bit_shift(const ir::Node& n) {
  const std::string dir = n.attr_string("direction", "LEFT");
  BitShiftParams p;
  p.left = dir != "RIGHT";
  p.direction_known = dir == "LEFT" || dir == "RIGHT";
  return p;
}

// ---- Misc

UniqueParams parse_unique(const ir::Node& n) {
  UniqueParams p;
  p.has_axis = n.attr("axis") != nullptr;
  p.axis = n.attr_int("axis", 0);
  p.sorted = n.attr_int("sorted", 1) != 0;
  return p;
}

namespace {

// The `seed` attribute is a float; absent, every run is seeded anew.
template <typename P>
void parse_seed(const ir::Node& n, P& p) {
  p.has_seed = n.attr("seed") != nullptr;
  p.seed = n.attr_float("seed", 0);
}

}  // namespace

RandomParams parse_random(const ir::Node& n) {
  RandomParams p;
  p.mean = n.attr_float("mean", 0.f);
  p.scale = n.attr_float("scale", 1.f);
  p.low = n.attr_float("low", 0.f);
  p.high = n.attr_float("high", 1.f);
  p.has_dtype = n.attr("dtype") != nullptr;
  p.dtype = static_cast<DataType>(n.attr_int("dtype", static_cast<int64_t>(DataType::kFloat32)));
  p.shape = n.attr_ints("shape");
  parse_seed(n, p);
  return p;
}

BernoulliParams parse_bernoulli(const ir::Node& n) {
  BernoulliParams p;
  p.has_dtype = n.attr("dtype") != nullptr;
  p.dtype = static_cast<DataType>(n.attr_int("dtype", 0));
  parse_seed(n, p);
  return p;
}

MultinomialParams parse_multinomial(const ir::Node& n) {
  MultinomialParams p;
  p.sample_size = n.attr_int("sample_size", 1);
  p.dtype = static_cast<DataType>(n.attr_int("dtype", static_cast<int64_t>(DataType::kInt32)));
  parse_seed(n, p);
  return p;
}

DftParams parse_dft(const ir::Node& n) {
  DftParams p;
  p.axis_input = n.opset >= 20;
  p.axis = p.axis_input ? -2 : n.attr_int("axis", 1);
  p.inverse = n.attr_int("inverse", 0) != 0;
  p.onesided = n.attr_int("onesided", 0) != 0;
  return p;
}

StftParams parse_stft(const ir::Node& n) { return StftParams{n.attr_int("onesided", 1) != 0}; }

SignalWindowParams parse_signal_window(const ir::Node& n) {
  SignalWindowParams p;
  p.periodic = n.attr_int("periodic", 1) != 0;
  p.output_datatype = static_cast<DataType>(n.attr_int("output_datatype", 1));
  return p;
}

MelWeightMatrixParams parse_mel_weight_matrix(const ir::Node& n) {
  return MelWeightMatrixParams{static_cast<DataType>(n.attr_int("output_datatype", 1))};
}

Expected<StringNormalizerParams> parse_string_normalizer(const ir::Node& n) {
  StringNormalizerParams p;
  const std::string action = n.attr_string("case_change_action", "NONE");
  if (action == "NONE") p.case_change = StringNormalizerParams::CaseChange::kNone;
  else if (action == "LOWER") p.case_change = StringNormalizerParams::CaseChange::kLower;
  else if (action == "UPPER") p.case_change = StringNormalizerParams::CaseChange::kUpper;
  else return invalid_model(n.describe() + ": case_change_action must be NONE, LOWER or UPPER");
  p.case_sensitive = n.attr_int("is_case_sensitive", 0) != 0;
  if (const ir::Attribute* a = n.attr("stopwords")) p.stopwords = a->strings;
  return p;
}

StringSplitParams parse_string_split(const ir::Node& n) {
  StringSplitParams p;
  p.delimiter = n.attr_string("delimiter", "");
  p.maxsplit = n.attr_int("maxsplit", -1);
  return p;
}

RegexFullMatchParams parse_regex_full_match(const ir::Node& n) {
  return RegexFullMatchParams{n.attr_string("pattern", "")};
}

NonMaxSuppressionParams parse_non_max_suppression(const ir::Node& n) {
  return NonMaxSuppressionParams{n.attr_int("center_point_box", 0) != 0};
}

// ---- Newer ops

Expected<AttentionParams> parse_attention(const ir::Node& n) {
  AttentionParams p;
  p.q_num_heads = n.attr_int("q_num_heads", 0);
  p.kv_num_heads = n.attr_int("kv_num_heads", 0);
  p.has_scale = n.attr("scale") != nullptr;
  p.scale = n.attr_float("scale", 0);
  p.is_causal = n.attr_int("is_causal", 0) != 0;
  p.softcap = n.attr_float("softcap", 0);
  p.qk_matmul_output_mode = n.attr_int("qk_matmul_output_mode", 0);
  if (p.qk_matmul_output_mode < 0 || p.qk_matmul_output_mode > 3)
    return invalid_argument(n.describe() + ": qk_matmul_output_mode must be 0..3");
  return p;
}

Expected<FlexAttentionParams> parse_flex_attention(const ir::Node& n) {
  FlexAttentionParams p;
  p.has_scale = n.attr("scale") != nullptr;
  p.scale = n.attr_float("scale", 0);
  p.has_softmax_precision = n.attr("softmax_precision") != nullptr;
  if (p.has_softmax_precision) {
    p.softmax_precision = static_cast<DataType>(n.attr_int("softmax_precision", 1));
    const DataType t = p.softmax_precision;
    if (t != DataType::kFloat32 && t != DataType::kFloat64 && t != DataType::kFloat16 && t != DataType::kBFloat16)
      return invalid_argument(n.describe() + ": softmax_precision must be a float type");
  }
  return p;
}

Expected<LinearAttentionParams> parse_linear_attention(const ir::Node& n) {
  using Rule = LinearAttentionParams::UpdateRule;
  LinearAttentionParams p;
  p.q_num_heads = n.attr_int("q_num_heads", 0);
  p.kv_num_heads = n.attr_int("kv_num_heads", 0);
  p.scale = n.attr_float("scale", 0);
  const std::string rule = n.attr_string("update_rule", "gated_delta");
  if (rule == "linear") p.update_rule = Rule::kLinear;
  else if (rule == "gated") p.update_rule = Rule::kGated;
  else if (rule == "delta") p.update_rule = Rule::kDelta;
  else if (rule == "gated_delta") p.update_rule = Rule::kGatedDelta;
  else return invalid_argument(n.describe() + ": unknown update_rule '" + rule + "'");
  return p;
}

RotaryEmbeddingParams parse_rotary_embedding(const ir::Node& n) {
  RotaryEmbeddingParams p;
  p.num_heads = n.attr_int("num_heads", 0);
  p.rotary_embedding_dim = n.attr_int("rotary_embedding_dim", 0);
  p.interleaved = n.attr_int("interleaved", 0) != 0;
  return p;
}

Expected<CausalConvWithStateParams> parse_causal_conv_with_state(const ir::Node& n) {
  const std::string act = n.attr_string("activation", "none");
  if (act != "none" && act != "silu" && act != "swish")
    return invalid_argument(n.describe() + ": activation must be none, silu or swish");
  return CausalConvWithStateParams{act != "none"};
}

Expected<TensorScatterParams> parse_tensor_scatter(const ir::Node& n) {
  TensorScatterParams p;
  p.axis = n.attr_int("axis", -2);
  const std::string mode = n.attr_string("mode", "linear");
  if (mode != "linear" && mode != "circular")
    return invalid_argument(n.describe() + ": mode must be 'linear' or 'circular'");
  p.circular = mode == "circular";
  return p;
}

BitCastParams parse_bit_cast(const ir::Node& n) { return BitCastParams{static_cast<DataType>(n.attr_int("to", 0))}; }

Expected<GridSampleParams> parse_grid_sample(const ir::Node& n) {
  GridSampleParams p;
  // Opset 20 renamed bilinear/bicubic to linear/cubic; both spellings are read at every opset.
  const std::string mode = n.attr_string("mode", n.opset != 0 && n.opset < 20 ? "bilinear" : "linear");
  const std::string pad = n.attr_string("padding_mode", "zeros");
  p.align_corners = n.attr_int("align_corners", 0) != 0;
  if (mode == "bilinear" || mode == "linear") p.mode = grid::kLinear;
  else if (mode == "bicubic" || mode == "cubic") p.mode = grid::kCubic;
  else if (mode == "nearest") p.mode = grid::kNearest;
  else return invalid_argument(n.describe() + ": unknown mode '" + mode + "'");
  if (pad == "zeros") p.padding = grid::kZeros;
  else if (pad == "border") p.padding = grid::kBorder;
  else if (pad == "reflection") p.padding = grid::kReflection;
  else return invalid_argument(n.describe() + ": unknown padding_mode '" + pad + "'");
  return p;
}

AffineGridParams parse_affine_grid(const ir::Node& n) { return AffineGridParams{n.attr_int("align_corners", 0) != 0}; }

}  // namespace kiln::ops
