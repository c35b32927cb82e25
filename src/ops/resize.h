// ops/resize.h — Resize/Upsample's parameters, parsed once from the node, and its geometry (output
// shape and per-axis mapping) from the input shape and the scales/sizes/roi values. The CPU and CUDA
// kernels share both, and the taps of ops/resize_math.h.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"
#include "ops/resize_math.h"

namespace kiln::ops {

struct ResizeParams {
  resize::Coef coef;
  enum class Aspect { kStretch, kNotLarger, kNotSmaller } aspect = Aspect::kStretch;
  double extrapolation = 0;
  std::vector<int64_t> axes;
  // Where the inputs are: opset 10 / Upsample-9 have (X, scales); 11+ have (X, roi, scales, sizes).
  int roi_input = 1, scales_input = 2, sizes_input = 3;
  std::vector<float> scales_attr;  // Upsample-7
};

Expected<ResizeParams> parse_resize(const ir::Node& n);

struct ResizeGeometry {
  Shape out;
  std::vector<resize::Axis> axes;  // per input axis
  std::vector<char> resized;       // per input axis: it changes (a pass runs over it)
};

// The geometry for input shape `in` from the operand tensors as the node gives them, indexed like
// the node's inputs (a null or empty tensor: absent; host memory): roi and scales of any numeric
// type, sizes int64/int32. "" or what is wrong with them. Both backends' kernels call this, so they
// read the operands by one rule.
std::string resize_geometry(const ResizeParams& p, const Shape& in, const std::vector<const Tensor*>& inputs,
                            ResizeGeometry* g);

}  // namespace kiln::ops
