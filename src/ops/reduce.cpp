// ops/reduce.cpp — types and shapes of the reduce op family: Reduce*, ArgMax/ArgMin, TopK, CumSum.
#include <algorithm>

#include "ops/op_table.h"
#include "ops/params_nn.h"

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

Status infer_reduce(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  const ReduceParams p = parse_reduce(ctx.node);
  const bool keepdims = p.keepdims;
  if (!p.axes_input) return reduce_shape(ctx, p.axes, p.axes.empty(), keepdims);
  std::vector<int64_t> axes;
  const bool noop = p.noop_with_empty_axes;
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

Status infer_arg(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(DataType::kInt64);
  const ArgReduceParams p = parse_arg_reduce(ctx.node);
  return reduce_shape(ctx, {p.axis}, false, p.keepdims);
}

Status infer_topk(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  if (ctx.out.size() > 1) ctx.out[1] = ir::Type::tensor(DataType::kInt64);
  const ir::SymShape& in = ctx.shape(0);
  if (!in.known) return Status::Ok();
  const TopKParams p = parse_topk(ctx.node);
  int64_t axis = p.axis;
  if (!normalize_axis(axis, in.rank())) return ctx.error("axis out of range");
  ir::SymShape s = in;
  s.dims[axis] = ir::Dim();
  std::vector<int64_t> k;
  if (!p.k_input) s.dims[axis] = ir::Dim(p.k);
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
  t.push_back({"ReduceSum", "", 1, infer_reduce});
  for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
    t.push_back({op, "", 1, infer_reduce});
  t.push_back({"ArgMax", "", 1, infer_arg});
  t.push_back({"ArgMin", "", 1, infer_arg});
  t.push_back({"TopK", "", 1, infer_topk});
  t.push_back({"CumSum", "", 11, infer_same});
}

}  // namespace kiln::ops
