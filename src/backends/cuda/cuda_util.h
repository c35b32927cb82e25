// backends/cuda/cuda_util.h — host-side helpers shared by the CUDA kernel tables (no CUDA types).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernels.h"
#include "ir/epilogue.h"
#include "ops/nn.h"

namespace kiln::cuda {

// check(): "" when every present tensor input and output whose dtype is known is float32, float16 or bfloat16.
std::string require_float(const ir::Node& n);
// check(): "" when input/output `i` (absent, or of unknown dtype, passes) has one of `allowed` dtypes.
std::string require_input_types(const ir::Node& n, int i, const std::vector<DataType>& allowed);
std::string require_output_types(const ir::Node& n, int i, const std::vector<DataType>& allowed);
// check(): "" when inputs [0, required) are present and every present input is a tensor.
std::string tensor_inputs(const ir::Node& n, size_t required);
// check(): "" when input 0 is a tensor of a type the generic kernels take: float32, float16, bfloat16 or
// float64 when `real_only`, else any numeric type but bool.
std::string check_numeric0(const ir::Node& n, bool real_only);
// check(): inputs [0, required) present; every float input of input 0's type, a float type or float64
// (the inputs whose bit is set in `ints` must be int64 instead).
std::string check_same_float(const ir::Node& n, size_t required, uint32_t ints = 0);
// Element types the generic kernels take (cuda_kernels.h's Elem): the code, or -1.
int elem_of(DataType t);
// The launch_unary/launch_bias_act op of a fused activation (cuda_fused.cpp; kNone is not one).
UnaryOp unary_of(ActKind k);
// Float types every float kernel takes (computed in float32).
inline constexpr DataType kFloatTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16};
bool is_float_type(DataType t);
// The int64/int32 values of a host tensor (a host input's value), or nullopt.
std::optional<std::vector<int64_t>> host_ints(const Tensor* t);

// A kernel row named "cuda.<op>" ("cuda.<domain>.<op>" outside ai.onnx) whose float tensors may be
// float16/bfloat16; callers set host_inputs and the like on the result.
KernelDef kernel_row(const std::string& op, int since, std::function<std::string(const ir::Node&)> check,
                     KernelFactory create, const std::string& domain = "");

// A failed launch → RuntimeError naming the node.
Status launched(const KernelContext& ctx, int err);

// Numpy broadcasting of two shapes; false when they do not broadcast.
bool broadcast_shape(const Shape& a, const Shape& b, Shape& out);
// The index for reading `a` and `b` (each broadcast to `out`) in out's order; adjacent dims that
// broadcast the same way are merged. Fails (false) when rank exceeds kMaxRank after merging.
bool make_broadcast_index(const Shape& out, const Shape& a, const Shape& b, BroadcastIndex& index);

// Normalizes a possibly negative axis into [0, rank); false when out of range.
bool normalize_axis(int64_t& axis, int64_t rank);

// The window arrays a launcher takes, from ops::window_geometry's result over spatial dims `in`
// (at most kMaxRank of them).
WindowIndex window_index(const ops::WindowGeometry& g, const std::vector<int64_t>& in);

// Device copy of `src` into the already allocated `dst` on the context's stream.
Status copy_device(const KernelContext& ctx, const Tensor& src, Tensor& dst);

// A kernel's constant (prepared on the host at creation) copied into GPU memory of its own.
Expected<Tensor> upload(const Tensor& host);

// Input i's constant value, or null when absent or not a constant.
const Tensor* const_at(const ir::Node& n, int i);
// A constant whose every value is 0 (false for null).
bool all_zero(const Tensor* t);
// One positive, finite float32 value (then in *out when given).
bool one_positive(const Tensor* t, double* out);

// An 8-bit product's bias in float: an int32 bias counts in accumulator units (x_scale·w_scale[j]),
// as QLinearConv's and ONNX Runtime's QDQ models' do; a float one as it is. `b` null: 0.
double quantized_bias(const Tensor* b, const std::vector<double>& values, int64_t j, double acc_scale);

}  // namespace kiln::cuda

namespace kiln::cuda {

// One spatial dim of a windowed op (Conv, pooling): input size in, window k, stride s, dilation d,
// explicit pads (used when auto_pad is NOTSET). Fills the output size and the effective pads.
struct Window {
  int64_t out = 0, pad_begin = 0, pad_end = 0;
};
Expected<Window> window_geometry(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pad_begin, int64_t pad_end,
                                 const std::string& auto_pad, bool ceil_mode);

}  // namespace kiln::cuda
