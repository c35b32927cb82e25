// ops/params_shape.h — the attributes of the shape and indexing ops, parsed once per node into typed
// structs. The shape functions (ops/shape.cpp, ops/shape_index.cpp) and the CPU and CUDA kernels read
// these instead of the node's attributes, so each default and opset rule is written once.
//
// Where an op's shape operands moved from attributes to inputs across opsets, the struct keeps both
// what the node carries (has_*_attr) and what its opset says (*_as_input): the CPU kernels and shape
// inference go by the first, the CUDA kernels by the second, as they did before these structs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::ops {

// ---------------------------------------------------------------- data movement (ops/shape.cpp)

// Reshape.
struct ReshapeParams {
  bool allowzero = false;       // a 0 in the target is a zero dim, not "copy the input's dim"
  bool has_shape_attr = false;  // opset < 5: the target is the 'shape' attribute, not input 1
  std::vector<int64_t> shape;   // that attribute
};
ReshapeParams parse_reshape(const ir::Node& n);

// Squeeze and Unsqueeze.
struct SqueezeParams {
  bool has_axes_attr = false;  // opset < 13: 'axes' is an attribute
  std::vector<int64_t> axes;   // that attribute, as written (may be negative); empty when absent
  bool axes_as_input = true;   // opset >= 13 (or unknown): axes come from input 1
};
SqueezeParams parse_squeeze(const ir::Node& n);

// Flatten.
struct FlattenParams {
  int64_t axis = 1;  // as written, may be negative
};
FlattenParams parse_flatten(const ir::Node& n);

// Transpose.
struct TransposeParams {
  std::vector<int64_t> perm;  // as written; empty: the dims reversed
};
TransposeParams parse_transpose(const ir::Node& n);

// Concat.
struct ConcatParams {
  int64_t axis = 0;  // as written, may be negative; absent: 1 before opset 4, else 0
};
ConcatParams parse_concat(const ir::Node& n);

// Split.
struct SplitParams {
  int64_t axis = 0;              // as written, may be negative
  bool has_split_attr = false;   // opset < 13: the sizes are the 'split' attribute
  std::vector<int64_t> split;    // that attribute; empty when absent
  bool split_as_input = true;    // opset >= 13 (or unknown): the sizes may come from input 1
  bool has_num_outputs = false;  // opset 18's 'num_outputs' is given
  int64_t num_outputs = 0;       // as written
};
SplitParams parse_split(const ir::Node& n);

// Slice.
struct SliceParams {
  bool has_starts_attr = false;             // opset < 10: starts, ends and axes are attributes
  bool has_axes_attr = false;
  std::vector<int64_t> starts, ends, axes;  // those attributes; empty when absent
  bool bounds_as_inputs = true;             // opset >= 10 (or unknown): they come from inputs 1-4
};
SliceParams parse_slice(const ir::Node& n);

// Pad. The modes are in this order because the CUDA kernels take them as an int.
enum class PadMode { kConstant, kReflect, kEdge, kWrap };
struct PadParams {
  PadMode mode = PadMode::kConstant;
  std::string mode_name = "constant";  // as written, for messages
  bool has_pads_attr = false;          // opset < 11: 'pads' (opset 1: 'paddings') and 'value' are attributes
  std::vector<int64_t> pads;           // that attribute: all begins, then all ends
  float value = 0;                     // the 'value' attribute, converted to the data's dtype by the kernels
};
// Fails on an unknown mode.
Expected<PadParams> parse_pad(const ir::Node& n);

// CenterCropPad.
struct CenterCropPadParams {
  std::vector<int64_t> axes;  // as written; empty: every axis
};
CenterCropPadParams parse_center_crop_pad(const ir::Node& n);

// DepthToSpace and SpaceToDepth.
struct DepthToSpaceParams {
  int64_t blocksize = 1;  // >= 1
  bool crd = false;       // DepthToSpace's mode "CRD"; else "DCR" (SpaceToDepth has no mode)
};
// Fails on a blocksize below 1. (Shape inference also refuses one past kMaxBlocksize.)
Expected<DepthToSpaceParams> parse_depth_to_space(const ir::Node& n);

// ---------------------------------------------------------------- value producers (ops/shape.cpp)

// Shape.
struct ShapeParams {
  int64_t start = 0;     // as written, may be negative
  bool has_end = false;  // absent: up to the rank
  int64_t end = 0;       // as written, may be negative
};
ShapeParams parse_shape(const ir::Node& n);

// Constant: the value, from whichever of its attributes the node has (looked for in this order).
struct ConstantParams {
  enum class Source { kTensor, kSparseTensor, kFloats, kInts, kStrings };
  Source source = Source::kTensor;
  DataType dtype = DataType::kUndefined;
  Shape shape;                       // [] for value_float / value_int / value_string, [k] for their lists
  Tensor tensor;                     // 'value' / 'sparse_value' (undefined: sparse, not densified by the importer)
  std::vector<float> floats;         // value_float (one) / value_floats
  std::vector<int64_t> ints;         // value_int (one) / value_ints
  std::vector<std::string> strings;  // value_string (one) / value_strings
};
// Fails when the node has none of the value attributes.
Expected<ConstantParams> parse_constant(const ir::Node& n);

// ConstantOfShape.
struct ConstantOfShapeParams {
  bool has_value = false;        // the 'value' attribute is there (absent: float32 zero)
  bool value_is_tensor = false;  // and is of kind TENSOR (the CUDA kernel takes no other)
  Tensor value;                  // its tensor; the kernels require exactly one element
};
ConstantOfShapeParams parse_constant_of_shape(const ir::Node& n);

// Trilu.
struct TriluParams {
  bool upper = true;
};
TriluParams parse_trilu(const ir::Node& n);

// EyeLike.
struct EyeLikeParams {
  int64_t dtype = 0;  // the output's DataType code as written; 0: the input's dtype
  int64_t k = 0;      // the diagonal's offset: > 0 above the main one
};
EyeLikeParams parse_eye_like(const ir::Node& n);

// ---------------------------------------------------------------- indexing (ops/shape_index.cpp)

// Gather and GatherElements.
struct GatherParams {
  int64_t axis = 0;  // as written, may be negative
};
GatherParams parse_gather(const ir::Node& n);

// GatherND.
struct GatherNDParams {
  int64_t batch_dims = 0;
};
GatherNDParams parse_gather_nd(const ir::Node& n);

// ScatterElements, Scatter and ScatterND. The reductions are in the CUDA kernels' order.
enum class ScatterReduction { kNone, kAdd, kMul, kMax, kMin };
struct ScatterParams {
  int64_t axis = 0;  // ScatterElements / Scatter; as written, may be negative
  ScatterReduction reduction = ScatterReduction::kNone;
};
// Fails on an unknown reduction.
Expected<ScatterParams> parse_scatter(const ir::Node& n);
// ScatterND's updates against data and indices: "" when updates is data's dtype and of shape
// indices.shape[:-1] + data.shape[indices.shape[-1]:], else why not. (indices' last dim must be at most
// data's rank, as the kernels check first; otherwise that is the reason given.)
std::string scatter_nd_updates_mismatch(DataType data_dtype, const Shape& data, const Shape& indices, DataType updates_dtype,
                                        const Shape& updates);

// OneHot.
struct OneHotParams {
  int64_t axis = -1;  // as written; counts in the output's rank
};
OneHotParams parse_one_hot(const ir::Node& n);

// Compress.
struct CompressParams {
  bool has_axis = false;  // absent: the input is read flattened
  int64_t axis = 0;       // as written, may be negative
};
CompressParams parse_compress(const ir::Node& n);

// ReverseSequence.
struct ReverseSequenceParams {
  int64_t batch_axis = 1, time_axis = 0;  // 0 and 1 in some order
};
// Fails unless batch_axis and time_axis are 0 and 1 in some order.
Expected<ReverseSequenceParams> parse_reverse_sequence(const ir::Node& n);

// Col2Im.
struct Col2ImParams {
  std::vector<int64_t> dilations, pads, strides;  // as written; empty: all 1, all 0, all 1
};
Col2ImParams parse_col2im(const ir::Node& n);

// ---------------------------------------------------------------- Einsum (ops/einsum.h)

struct EinsumTerm {
  std::vector<int> labels;  // letters as chars; -1 marks where "..." stood
  bool has_ellipsis = false;
};

struct EinsumSpec {
  std::vector<EinsumTerm> inputs;
  EinsumTerm output;
  bool explicit_output = false;
};

struct EinsumParams {
  std::string equation;  // as written
  EinsumSpec spec;       // parsed from it
};
// Fails when the equation does not parse.
Expected<EinsumParams> parse_einsum(const ir::Node& n);

}  // namespace kiln::ops
