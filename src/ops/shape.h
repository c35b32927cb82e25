// ops/shape.h — concrete shape rules of the shape family, shared by shape inference (ops/shape.cpp)
// and the kernels that apply them at run time, so both always agree.
#pragma once

#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::ops {

// Reshape's target: 0 copies the input dim (unless allowzero), one -1 is inferred.
// Returns "" on success, else why the spec does not fit `in`.
std::string reshape_dims(const Shape& in, const std::vector<int64_t>& spec, bool allowzero, Shape* out);

// One sliced axis after ONNX's clamping rules (negative indices count from the end; step != 0).
struct SliceDim {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};
SliceDim slice_dim(int64_t dim, int64_t start, int64_t end, int64_t step);

// Concat's axis when the attribute is absent: 1 before opset 4 (where it was optional), else 0.
int64_t concat_default_axis(int opset);

struct SplitParams;

// Split sizes when no explicit 'split' is given: `parts` chunks of ceil(dim / parts), the last one
// smaller. The parts are opset 18's `num_outputs` when given, else the node's `outputs`. Like onnx's
// reference, chunks past the end are empty: 5 into 4 parts is 2, 2, 1, 0 (onnx's own expanded
// AffineGrid tests split a dim of 2 in 3). A given `num_outputs` must equal `outputs`, checked before
// anything is sized by it, so a hostile 2^30 allocates nothing. Returns "" on success.
std::string equal_split_sizes(int64_t dim, const SplitParams& p, int64_t outputs, std::vector<int64_t>* sizes);

}  // namespace kiln::ops
