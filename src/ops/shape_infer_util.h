// ops/shape_infer_util.h — helpers shared by shape functions and attribute parsers in ops/.
#pragma once

#include <vector>

#include "ops/op_table.h"

namespace kiln::ops {

// Bounds of what shape inference believes; past them a dim or rank is left unknown or refused, so that
// a hostile model cannot make inference allocate or overflow (the runtime checks real sizes again).
constexpr int64_t kMaxInferredRank = 4096;
constexpr int64_t kMaxBlocksize = 1 << 15;  // DepthToSpace/SpaceToDepth: b*b stays far inside int64

// A host tensor's values as doubles (any numeric dtype, float16 and bfloat16 included); false for
// other dtypes. Defined in resize.cpp; also read by TreeEnsemble's tensor attributes (params_ml.cpp).
bool read_doubles(const Tensor& t, std::vector<double>& out);
// Input i's constant value as int64s (int32/int64 tensors); false when not a known constant.
bool const_ints(const InferContext& c, int i, std::vector<int64_t>* out);
// For a 1-D "shape" input of static length k whose values are unknown: rank k, every dim unknown.
ir::SymShape unknown_dims_for_shape_input(const InferContext& c, int i);
// Dim arithmetic that keeps symbols where it can (x*1 = x, x+0 = x); otherwise (or past int64) an unknown dim.
ir::Dim dim_mul(const ir::Dim& a, const ir::Dim& b);
ir::Dim dim_add(const ir::Dim& a, const ir::Dim& b);
ir::Dim dim_div(const ir::Dim& a, int64_t b);
ir::Dim dim_product(const ir::SymShape& s, int64_t b, int64_t e);  // dims [b, e)

// Shape functions fail cleanly instead of reading an omitted required input 0.
template <InferFn F>
Status needs_input0(InferContext& c) {
  if (!c.has(0)) return c.error("missing required input 0");
  return F(c);
}

// Output 0 has input 0's type and shape.
inline Status infer_same_as_input0(InferContext& c) {
  if (c.has(0)) c.out[0] = c.type(0);
  return Status::Ok();
}

void add_shape_index_ops(std::vector<OpDef>& t);

}  // namespace kiln::ops
