// ops/reduce.cpp — types and shapes of the reduce op family: Reduce*, ArgMax/ArgMin, TopK, CumSum.
#include <algorithm>

#include "ops/op_table.h"

namespace kiln::ops {
namespace {

// Output shape of a reduction over `axes` (all when `all`).
Status reduce_shape(InferContext& ctx, const std::vector<int64_t>& axes_in, bool all, bool keepdims) {
  const ir::SymShape& in = ctx.shape(0);
  if (!in.known) return Status::Ok();
  std::vector<bool> red(in.rank(), all);
  for (int64_t a : axes_in) {
    if (!normalize_axis(a, in.rank())) return ctx.error("axis " + std::to_string(a) + " out of range");
    red[a] = true;
  }
  std::vector<ir::Dim> dims;
  for (int i = 0; i < in.rank(); ++i) {
    if (!red[i]) dims.push_back(in.dims[i]);
    else if (keepdims) dims.push_back(ir::Dim(1));
  }
  ctx.out[0].shape = ir::SymShape(std::move(dims));
  return Status::Ok();
}

Status infer_reduce_impl(InferContext& ctx, int axes_input_since) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  const ir::Node& n = ctx.node;
  const bool keepdims = n.attr_int("keepdims", 1) != 0;
  std::vector<int64_t> axes;
  if (n.opset < axes_input_since) {
    axes = n.attr_ints("axes");
    return reduce_shape(ctx, axes, axes.empty(), keepdims);
  }
  const bool noop = n.attr_int("noop_with_empty_axes", 0) != 0;
  if (!ctx.has(1)) {
    if (noop) ctx.out[0].shape = ctx.shape(0);
    else return reduce_shape(ctx, {}, true, keepdims);
    return Status::Ok();
  }
  if (const_ints(ctx.value(1), axes)) {
    if (axes.empty() && noop) {
      ctx.out[0].shape = ctx.shape(0);
      return Status::Ok();
    }
    return reduce_shape(ctx, axes, axes.empty(), keepdims);
  }
  // Axes known only at run time: with keepdims the rank stays.
  if (keepdims && ctx.shape(0).known) {
    ctx.out[0].shape = ir::SymShape(std::vector<ir::Dim>(ctx.shape(0).rank()));
  }
  return Status::Ok();
}

Status infer_reduce13(InferContext& ctx) { return infer_reduce_impl(ctx, 13); }
Status infer_reduce18(InferContext& ctx) { return infer_reduce_impl(ctx, 18); }

Status infer_arg(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(DataType::kInt64);
  int64_t axis = ctx.node.attr_int("axis", 0);
  return reduce_shape(ctx, {axis}, false, ctx.node.attr_int("keepdims", 1) != 0);
}

Status infer_topk(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  if (ctx.out.size() > 1) ctx.out[1] = ir::Type::tensor(DataType::kInt64);
  const ir::SymShape& in = ctx.shape(0);
  if (!in.known) return Status::Ok();
  int64_t axis = ctx.node.attr_int("axis", -1);
  if (!normalize_axis(axis, in.rank())) return ctx.error("axis out of range");
  ir::SymShape s = in;
  s.dims[axis] = ir::Dim();
  std::vector<int64_t> k;
  if (ctx.node.opset < 10) s.dims[axis] = ir::Dim(ctx.node.attr_int("k", -1));
  else if (const_ints(ctx.value(1), k) && k.size() == 1) s.dims[axis] = ir::Dim(k[0]);
  ctx.out[0].shape = s;
  if (ctx.out.size() > 1) ctx.out[1].shape = s;
  return Status::Ok();
}

Status infer_same(InferContext& ctx) {
  if (ctx.has(0)) ctx.out[0] = ctx.type(0);
  return Status::Ok();
}

}  // namespace

void add_reduce_ops(std::vector<OpDef>& t) {
  t.push_back({"ReduceSum", "", 1, infer_reduce13});
  for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
    t.push_back({op, "", 1, infer_reduce18});
  t.push_back({"ArgMax", "", 1, infer_arg});
  t.push_back({"ArgMin", "", 1, infer_arg});
  t.push_back({"TopK", "", 1, infer_topk});
  t.push_back({"CumSum", "", 11, infer_same});
}

}  // namespace kiln::ops
