// ops/params_shape.cpp — parsing of the shape and indexing ops' attributes (ops/params_shape.h).
#include "ops/params_shape.h"

#include "ops/einsum.h"
#include "ops/shape.h"

namespace kiln::ops {

// Nodes built without an opset (0) take the newest form of an op.
static bool newer_than(const ir::Node& n, int opset) { return n.opset >= opset || n.opset == 0; }

ReshapeParams parse_reshape(const ir::Node& n) {
  ReshapeParams p;
  p.allowzero = n.attr_int("allowzero", 0) != 0;
  p.has_shape_attr = n.attr("shape") != nullptr;
  p.shape = n.attr_ints("shape");
  return p;
}

SqueezeParams parse_squeeze(const ir::Node& n) {
  SqueezeParams p;
  p.has_axes_attr = n.attr("axes") != nullptr;
  p.axes = n.attr_ints("axes");
  p.axes_as_input = newer_than(n, 13);
  return p;
}

FlattenParams parse_flatten(const ir::Node& n) { return {n.attr_int("axis", 1)}; }

TransposeParams parse_transpose(const ir::Node& n) { return {n.attr_ints("perm")}; }

ConcatParams parse_concat(const ir::Node& n) { return {n.attr_int("axis", concat_default_axis(n.opset))}; }

SplitParams parse_split(const ir::Node& n) {
  SplitParams p;
  p.axis = n.attr_int("axis", 0);
  p.has_split_attr = n.attr("split") != nullptr;
  p.split = n.attr_ints("split");
  p.split_as_input = newer_than(n, 13);
  p.has_num_outputs = n.attr("num_outputs") != nullptr;
  p.num_outputs = n.attr_int("num_outputs", 0);
  return p;
}

SliceParams parse_slice(const ir::Node& n) {
  SliceParams p;
  p.has_starts_attr = n.attr("starts") != nullptr;
  p.has_axes_attr = n.attr("axes") != nullptr;
  p.starts = n.attr_ints("starts");
  p.ends = n.attr_ints("ends");
  p.axes = n.attr_ints("axes");
  p.bounds_as_inputs = newer_than(n, 10);
  return p;
}

Expected<PadParams> parse_pad(const ir::Node& n) {
  PadParams p;
  p.mode_name = n.attr_string("mode", "constant");
  if (p.mode_name == "constant") p.mode = PadMode::kConstant;
  else if (p.mode_name == "reflect") p.mode = PadMode::kReflect;
  else if (p.mode_name == "edge") p.mode = PadMode::kEdge;
  else if (p.mode_name == "wrap") p.mode = PadMode::kWrap;
  else return invalid_model(n.describe() + ": unknown pad mode '" + p.mode_name + "'");
  p.has_pads_attr = n.attr("pads") != nullptr || n.attr("paddings") != nullptr;
  p.pads = n.attr("pads") ? n.attr_ints("pads") : n.attr_ints("paddings");
  p.value = n.attr_float("value", 0.0f);
  return p;
}

CenterCropPadParams parse_center_crop_pad(const ir::Node& n) { return {n.attr_ints("axes")}; }

Expected<DepthToSpaceParams> parse_depth_to_space(const ir::Node& n) {
  DepthToSpaceParams p;
  p.blocksize = n.attr_int("blocksize", 0);
  p.crd = n.attr_string("mode", "DCR") == "CRD";
  if (p.blocksize <= 0) return invalid_model(n.describe() + ": blocksize must be positive");
  return p;
}

ShapeParams parse_shape(const ir::Node& n) {
  ShapeParams p;
  p.start = n.attr_int("start", 0);
  p.has_end = n.attr("end") != nullptr;
  p.end = n.attr_int("end", 0);
  return p;
}

Expected<ConstantParams> parse_constant(const ir::Node& n) {
  using S = ConstantParams::Source;
  ConstantParams p;
  auto from_tensor = [&](S source, const Tensor& t) {
    p.source = source;
    p.tensor = t;
    p.dtype = t.dtype();
    p.shape = t.shape();
    return p;
  };
  // Scalars get shape [], lists [k].
  auto shaped = [&](S source, DataType dt, bool list, size_t k) {
    p.source = source;
    p.dtype = dt;
    if (list) p.shape = {static_cast<int64_t>(k)};
    return p;
  };
  if (const ir::Attribute* a = n.attr("value")) return from_tensor(S::kTensor, a->t);
  if (const ir::Attribute* a = n.attr("sparse_value")) return from_tensor(S::kSparseTensor, a->t);
  if (const ir::Attribute* a = n.attr("value_float")) {
    p.floats = {a->f};
    return shaped(S::kFloats, DataType::kFloat32, false, 1);
  }
  if (const ir::Attribute* a = n.attr("value_floats")) {
    p.floats = a->floats;
    return shaped(S::kFloats, DataType::kFloat32, true, a->floats.size());
  }
  if (const ir::Attribute* a = n.attr("value_int")) {
    p.ints = {a->i};
    return shaped(S::kInts, DataType::kInt64, false, 1);
  }
  if (const ir::Attribute* a = n.attr("value_ints")) {
    p.ints = a->ints;
    return shaped(S::kInts, DataType::kInt64, true, a->ints.size());
  }
  if (const ir::Attribute* a = n.attr("value_string")) {
    p.strings = {a->s};
    return shaped(S::kStrings, DataType::kString, false, 1);
  }
  if (const ir::Attribute* a = n.attr("value_strings")) {
    p.strings = a->strings;
    return shaped(S::kStrings, DataType::kString, true, a->strings.size());
  }
  return invalid_model(n.describe() + ": Constant has no value attribute");
}

ConstantOfShapeParams parse_constant_of_shape(const ir::Node& n) {
  ConstantOfShapeParams p;
  if (const ir::Attribute* a = n.attr("value")) {
    p.has_value = true;
    p.value_is_tensor = a->kind == ir::Attribute::Kind::kTensor;
    p.value = a->t;
  }
  return p;
}

TriluParams parse_trilu(const ir::Node& n) { return {n.attr_int("upper", 1) != 0}; }

EyeLikeParams parse_eye_like(const ir::Node& n) { return {n.attr_int("dtype", 0), n.attr_int("k", 0)}; }

GatherParams parse_gather(const ir::Node& n) { return {n.attr_int("axis", 0)}; }

GatherNDParams parse_gather_nd(const ir::Node& n) { return {n.attr_int("batch_dims", 0)}; }

Expected<ScatterParams> parse_scatter(const ir::Node& n) {
  ScatterParams p;
  p.axis = n.attr_int("axis", 0);
  const std::string r = n.attr_string("reduction", "none");
  if (r == "none") p.reduction = ScatterReduction::kNone;
  else if (r == "add") p.reduction = ScatterReduction::kAdd;
  else if (r == "mul") p.reduction = ScatterReduction::kMul;
  else if (r == "max") p.reduction = ScatterReduction::kMax;
  else if (r == "min") p.reduction = ScatterReduction::kMin;
  else return invalid_model(n.describe() + ": unknown reduction '" + r + "'");
  return p;
}

std::string scatter_nd_updates_mismatch(DataType data_dtype, const Shape& data, const Shape& indices, DataType updates_dtype,
                                        const Shape& updates) {
  if (indices.empty() || indices.back() < 0 || indices.back() > static_cast<int64_t>(data.size()))
    return "indices of shape " + shape_to_string(indices) + " do not index data of rank " + std::to_string(data.size());
  Shape want(indices.begin(), indices.end() - 1);
  want.insert(want.end(), data.begin() + indices.back(), data.end());
  if (updates != want) return "updates shape " + shape_to_string(updates) + ", expected " + shape_to_string(want);
  if (updates_dtype != data_dtype) return "updates must have the dtype of data";
  return "";
}

OneHotParams parse_one_hot(const ir::Node& n) { return {n.attr_int("axis", -1)}; }

CompressParams parse_compress(const ir::Node& n) { return {n.attr("axis") != nullptr, n.attr_int("axis", 0)}; }

Expected<ReverseSequenceParams> parse_reverse_sequence(const ir::Node& n) {
  ReverseSequenceParams p;
  p.batch_axis = n.attr_int("batch_axis", 1);
  p.time_axis = n.attr_int("time_axis", 0);
  if (p.batch_axis == p.time_axis || p.batch_axis < 0 || p.batch_axis > 1 || p.time_axis < 0 || p.time_axis > 1)
    return invalid_model(n.describe() + ": batch_axis and time_axis must be 0 and 1 in some order");
  return p;
}

Col2ImParams parse_col2im(const ir::Node& n) {
  return {n.attr_ints("dilations"), n.attr_ints("pads"), n.attr_ints("strides")};
}

Expected<EinsumParams> parse_einsum(const ir::Node& n) {
  EinsumParams p;
  p.equation = n.attr_string("equation", "");
  if (!parse_einsum(p.equation, p.spec))
    return invalid_model(n.describe() + ": cannot parse equation '" + p.equation + "'");
  return p;
}

}  // namespace kiln::ops
