// ops/params_nn.cpp — parsing of the attributes declared in ops/params_nn.h: the only place the nn,
// normalization, softmax, pooling, GEMM, convolution, reduction and kiln fused ops read them.
#include "ops/params_nn.h"

namespace kiln::ops {

GemmParams parse_gemm(const ir::Node& n) {
  GemmParams p;
  p.trans_a = n.attr_int("transA", 0) != 0;
  p.trans_b = n.attr_int("transB", 0) != 0;
  p.alpha = n.attr_float("alpha", 1.f);
  p.beta = n.attr_float("beta", 1.f);
  return p;
}

ConvParams parse_conv(const ir::Node& n) {
  ConvParams p;
  p.window = parse_window_attrs(n);
  p.group = n.attr_int("group", 1);
  p.channels_last = n.attr_int("channels_last", 0) != 0;
  return p;
}

PoolParams parse_pool(const ir::Node& n) {
  PoolParams p;
  p.window = parse_window_attrs(n);
  p.count_include_pad = n.attr_int("count_include_pad", 0) != 0;
  p.column_major = n.attr_int("storage_order", 0) != 0;
  if (const ir::Attribute* a = n.attr("p"))
    p.p = a->kind == ir::Attribute::Kind::kFloat ? a->f : static_cast<double>(a->i);
  return p;
}

ChannelsLastPoolParams parse_channels_last_pool(const ir::Node& n) {
  ChannelsLastPoolParams p;
  p.op = n.attr_string("op", "");
  p.known = p.op == "MaxPool" || p.op == "AveragePool" || p.op == "GlobalMaxPool" || p.op == "GlobalAveragePool";
  p.global = p.known && p.op.rfind("Global", 0) == 0;
  p.max = p.known && p.op.find("Max") != std::string::npos;
  p.pool = parse_pool(n);
  return p;
}

ChannelAffineParams parse_channel_affine(const ir::Node& n) {
  ChannelAffineParams p;
  p.channels_last = n.attr_int("channels_last", 0) != 0;
  if (!read_activation(n, &p.act, &p.error)) p.act = Activation{};
  return p;
}

std::string channel_affine_shape_error(const Shape& x, const Shape& scale, const Shape& shift, bool channels_last) {
  if (x.size() < 2) return "X must have rank >= 2, got " + shape_to_string(x);
  const int64_t c = channels_last ? x.back() : x[1];
  if (shape_numel(scale) != c || shape_numel(shift) != c)
    return "scale and shift must have one value per channel (" + std::to_string(c) + "), got " + shape_to_string(scale) +
           " and " + shape_to_string(shift);
  return "";
}

ConvPoolParams parse_conv_pool(const ir::Node& n) {
  ConvPoolParams p;
  const std::vector<int64_t> k = n.attr_ints("kernel_shape"), s = n.attr_ints("strides"), pads = n.attr_ints("pads");
  const std::vector<int64_t> pk = n.attr_ints("pool_kernel"), ps = n.attr_ints("pool_strides"), pp = n.attr_ints("pool_pads");
  p.x_channels_first = n.attr_int("x_channels_first", 0) != 0;
  if (k.size() != 2 || s.size() != 2 || pads.size() != 4 || pk.size() != 2 || ps.size() != 2 || pp.size() != 4) return p;
  bool ok = true;
  for (int i = 0; i < 2; ++i) {
    p.k[i] = k[i], p.s[i] = s[i], p.pk[i] = pk[i], p.ps[i] = ps[i];
    ok = ok && k[i] >= 1 && s[i] >= 1 && pk[i] >= 1 && ps[i] >= 1;
  }
  for (int i = 0; i < 4; ++i) {
    p.p[i] = pads[i], p.pp[i] = pp[i];
    // A pool window must always hold a convolution output: pads below the window.
    ok = ok && pads[i] >= 0 && pp[i] >= 0 && pp[i] < pk[i % 2];
  }
  p.valid = ok;
  return p;
}

BatchNormParams parse_batch_norm(const ir::Node& n) {
  BatchNormParams p;
  p.epsilon = n.attr_float("epsilon", 1e-5f);
  p.momentum = n.attr_float("momentum", 0.9f);
  p.training_mode = n.attr_int("training_mode", 0) != 0;
  p.training = n.opset >= 14 && p.training_mode;
  p.spatial = n.opset >= 9 || n.attr_int("spatial", 1) != 0;
  p.legacy_training = n.opset != 0 && n.opset < 7 && n.attr_int("is_test", 0) == 0;
  return p;
}

InstanceNormParams parse_instance_norm(const ir::Node& n) {
  InstanceNormParams p;
  p.epsilon = n.attr_float("epsilon", 1e-5f);
  return p;
}

GroupNormParams parse_group_norm(const ir::Node& n) {
  GroupNormParams p;
  p.epsilon = n.attr_float("epsilon", 1e-5f);
  p.num_groups = n.attr_int("num_groups", 0);
  return p;
}

LayerNormParams parse_layer_norm(const ir::Node& n) {
  LayerNormParams p;
  p.axis = n.attr_int("axis", -1);
  p.epsilon = n.attr_float("epsilon", 1e-5f);
  p.stash_type = n.attr_int("stash_type", 1);
  if (dtype_is_valid(static_cast<int32_t>(p.stash_type))) p.stash = static_cast<DataType>(p.stash_type);
  return p;
}

SkipLayerNormParams parse_skip_layer_norm(const ir::Node& n) {
  SkipLayerNormParams p;
  p.epsilon = n.attr_float("epsilon", 1e-5f);
  p.simplified = n.attr_int("simplified", 0) != 0;
  return p;
}

LrnParams parse_lrn(const ir::Node& n) {
  LrnParams p;
  p.size = n.attr_int("size", 1);
  p.alpha = n.attr_float("alpha", 1e-4f);
  p.beta = n.attr_float("beta", 0.75f);
  p.bias = n.attr_float("bias", 1.0f);
  return p;
}

MvnParams parse_mvn(const ir::Node& n) {
  MvnParams p;
  p.axes = n.attr_ints("axes", {0, 2, 3});
  return p;
}

SoftmaxParams parse_softmax(const ir::Node& n) {
  SoftmaxParams p;
  p.coerce_2d = n.opset != 0 && n.opset < 13;
  p.axis = n.attr_int("axis", p.coerce_2d ? 1 : -1);
  return p;
}

DropoutParams parse_dropout(const ir::Node& n) {
  DropoutParams p;
  p.ratio = n.attr_float("ratio", 0.5f);
  p.has_seed = n.attr("seed") != nullptr;
  p.seed = n.attr_int("seed", 0);
  // opset 0 (a node made in code) is read as the newest version.
  p.ratio_inputs = n.opset == 0 || n.opset >= 12;
  p.bool_mask = n.opset == 0 || n.opset >= 10;
  p.legacy_training = n.opset != 0 && n.opset < 7 && n.attr_int("is_test", 0) == 0;
  return p;
}

ReduceParams parse_reduce(const ir::Node& n) {
  ReduceParams p;
  p.axes_input = n.opset >= (n.op_type == "ReduceSum" ? 13 : 18);
  if (const ir::Attribute* a = n.attr("axes")) {
    p.axes = a->ints;
    p.has_axes_attr = true;
  }
  p.keepdims = n.attr_int("keepdims", 1) != 0;
  p.noop_with_empty_axes = n.attr_int("noop_with_empty_axes", 0) != 0;
  return p;
}

ArgReduceParams parse_arg_reduce(const ir::Node& n) {
  ArgReduceParams p;
  p.axis = n.attr_int("axis", 0);
  p.keepdims = n.attr_int("keepdims", 1) != 0;
  p.select_last_index = n.attr_int("select_last_index", 0) != 0;
  return p;
}

TopKParams parse_topk(const ir::Node& n) {
  TopKParams p;
  p.axis = n.attr_int("axis", -1);
  p.largest = n.attr_int("largest", 1) != 0;
  p.k_input = n.opset >= 10;
  p.k = n.attr_int("k", -1);
  return p;
}

CumulativeParams parse_cumulative(const ir::Node& n) {
  CumulativeParams p;
  p.exclusive = n.attr_int("exclusive", 0) != 0;
  p.reverse = n.attr_int("reverse", 0) != 0;
  return p;
}

FusedAttentionParams parse_fused_attention(const ir::Node& n) {
  FusedAttentionParams p;
  p.num_heads = n.attr_int("num_heads", 0);
  p.scale = n.attr_float("scale", 1.0f);
  p.mask_fill = n.attr_float("mask_fill", 0.0f);
  p.mask_fill_where_true = n.attr_int("mask_fill_where_true", 0) != 0;
  p.sequence_first = n.attr_int("sequence_first", 0) != 0;
  p.zero_nan_rows = n.attr_int("zero_nan_rows", 0) != 0;
  p.packed_qkv = n.attr_int("packed_qkv", 0) != 0;
  p.mask_batch_period = n.attr_int("mask_batch_period", 0);
  p.kv_num_heads = n.attr_int("kv_num_heads", 0);
  p.heads_first = n.attr_int("heads_first", 0) != 0;
  return p;
}

std::string fused_attention_attrs_error(const FusedAttentionParams& p) {
  if (p.num_heads < 0 || (p.num_heads == 0 && !p.heads_first)) return "num_heads must be positive";
  if (p.kv_num_heads < 0) return "kv_num_heads must be >= 0";
  if (p.kv_num_heads > 0 && p.num_heads > 0 && p.num_heads % p.kv_num_heads != 0) return "kv_num_heads must divide num_heads";
  if (p.heads_first && (p.sequence_first || p.packed_qkv)) return "heads_first does not go with sequence_first or packed_qkv";
  if (p.mask_batch_period < 0) return "mask_batch_period must be >= 0";
  return "";
}

}  // namespace kiln::ops
