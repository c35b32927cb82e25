// backends/cuda/cuda_index.cpp — GatherElements, GatherND, ScatterElements, ScatterND (11+), Scatter
// (9-10), SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (12+) on the GPU. Shapes are checked
// and geometry computed at reshape; a run launches only.
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_ml.h"
#include "ops/params_shape.h"

namespace kiln::cuda {
namespace {

bool is_index_type(DataType t) { return t == DataType::kInt64 || t == DataType::kInt32; }

// Data any element type the kernels move (every numeric type and bool); indices int64/int32.
std::string check_indexed(const ir::Node& n, int data, int indices, int updates = -1) {
  for (int i : {data, indices, updates}) {
    if (i < 0) continue;
    if (!n.has_input(i)) return "input " + std::to_string(i) + " is required";
    if (!n.inputs[i]->type.is_tensor()) return "takes tensors only";
  }
  const DataType dt = n.inputs[data]->type.dtype;
  if (dt != DataType::kUndefined && elem_of(dt) < 0) return std::string(dtype_name(dt)) + " does not run on CUDA";
  const DataType it = n.inputs[indices]->type.dtype;
  if (it != DataType::kUndefined && !is_index_type(it)) return "indices must be int64 or int32";
  return "";
}

ScatterReduce reduce_of(ops::ScatterReduction r) {
  switch (r) {
    case ops::ScatterReduction::kNone: return ScatterReduce::kNone;
    case ops::ScatterReduction::kAdd: return ScatterReduce::kAdd;
    case ops::ScatterReduction::kMul: return ScatterReduce::kMul;
    case ops::ScatterReduction::kMax: return ScatterReduce::kMax;
    case ops::ScatterReduction::kMin: return ScatterReduce::kMin;
  }
  return ScatterReduce::kNone;
}

// ---- GatherElements / ScatterElements

Expected<ElementsIndex> elements_index(const ReshapeContext& rc, int64_t axis) {
  const Shape& x = rc.in[0].shape;
  const Shape& ind = rc.in[1].shape;
  const int64_t r = static_cast<int64_t>(x.size());
  if (r > kMaxRank) return rc.error("rank above 8 is not supported on CUDA");
  if (!normalize_axis(axis, r)) return rc.error("axis out of range");
  if (static_cast<int64_t>(ind.size()) != r) return rc.error("indices must have the rank of data");
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && ind[d] > x[d])
      return rc.error("indices shape " + shape_to_string(ind) + " exceeds data shape " + shape_to_string(x));
  ElementsIndex ix;
  ix.rank = static_cast<int>(r);
  ix.axis = static_cast<int>(axis);
  ix.axis_dim = x[axis];
  int64_t stride = 1;
  for (int64_t d = r - 1; d >= 0; --d) {
    ix.ind_dims[d] = ind[d];
    ix.data_strides[d] = stride;
    stride *= x[d];
  }
  return ix;
}

Expected<KernelPtr> create_gather_elements(const ir::Node& n) {
  const int64_t axis = ops::parse_gather(n).axis;
  auto reshape = [axis](ReshapeContext& rc) -> Status {
    KILN_ASSIGN_OR_RETURN(ElementsIndex ix, elements_index(rc, axis));
    rc.out[0] = {rc.in[0].dtype, rc.in[1].shape};
    rc.state = std::make_shared<ElementsIndex>(ix);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    return launched(ctx, launch_gather_elements(x.raw(), ind.raw(), ind.dtype() == DataType::kInt64, ctx.output(0).raw(),
                                                ind.numel(), shape_state<ElementsIndex>(ctx),
                                                static_cast<int>(dtype_size(x.dtype())), state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

Expected<KernelPtr> create_scatter_elements(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::ScatterParams p, ops::parse_scatter(n));
  const int64_t axis = p.axis;
  const ScatterReduce reduce = reduce_of(p.reduction);
  auto reshape = [axis](ReshapeContext& rc) -> Status {
    KILN_ASSIGN_OR_RETURN(ElementsIndex ix, elements_index(rc, axis));
    if (rc.in[2].shape != rc.in[1].shape) return rc.error("updates must have the shape of indices");
    if (rc.in[2].dtype != rc.in[0].dtype) return rc.error("updates must have the dtype of data");
    rc.out[0] = {rc.in[0].dtype, rc.in[0].shape};
    rc.state = std::make_shared<ElementsIndex>(ix);
    return Status::Ok();
  };
  auto run = [reduce](KernelContext& ctx) -> Status {
    const Tensor& ind = ctx.input(1);
    Tensor& y = ctx.output(0);
    KILN_RETURN_IF_ERROR(copy_device(ctx, ctx.input(0), y));
    return launched(ctx, launch_scatter_elements(y.raw(), ind.raw(), ind.dtype() == DataType::kInt64, ctx.input(2).raw(),
                                                 ind.numel(), shape_state<ElementsIndex>(ctx), elem_of(y.dtype()), reduce,
                                                 state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// ---- GatherND / ScatterND

Expected<NdIndex> nd_index(const ReshapeContext& rc, int64_t b) {
  const Shape& x = rc.in[0].shape;
  const Shape& ind = rc.in[1].shape;
  const int64_t xr = static_cast<int64_t>(x.size()), ir = static_cast<int64_t>(ind.size());
  if (ir < 1 || b < 0 || b >= ir || b >= xr) return rc.error("bad indices rank or batch_dims");
  for (int64_t d = 0; d < b; ++d)
    if (ind[d] != x[d]) return rc.error("batch dims of data and indices differ");
  const int64_t k = ind.back();
  if (k < 1 || b + k > xr) return rc.error("indices' last dim " + std::to_string(k) + " too large for data rank");
  if (k > kMaxRank) return rc.error("more than 8 index components are not supported on CUDA");
  NdIndex ix;
  ix.k = static_cast<int>(k);
  ix.block = 1;
  for (int64_t d = b + k; d < xr; ++d) ix.block *= x[d];
  int64_t batches = 1;
  for (int64_t d = 0; d < b; ++d) batches *= x[d];
  ix.batch_stride = 1;
  for (int64_t d = b; d < xr; ++d) ix.batch_stride *= x[d];
  int64_t tuples = 1;
  for (int64_t d = 0; d + 1 < ir; ++d) tuples *= ind[d];
  ix.tuples = tuples;
  ix.per_batch = batches ? tuples / batches : 0;
  int64_t stride = ix.block;
  for (int64_t j = k - 1; j >= 0; --j) {
    ix.dims[j] = x[b + j];
    ix.strides[j] = stride;
    stride *= x[b + j];
  }
  return ix;
}

Expected<KernelPtr> create_gather_nd(const ir::Node& n) {
  const int64_t batch_dims = ops::parse_gather_nd(n).batch_dims;
  auto reshape = [batch_dims](ReshapeContext& rc) -> Status {
    KILN_ASSIGN_OR_RETURN(NdIndex ix, nd_index(rc, batch_dims));
    const Shape& x = rc.in[0].shape;
    const Shape& ind = rc.in[1].shape;
    Shape out(ind.begin(), ind.end() - 1);
    out.insert(out.end(), x.begin() + batch_dims + ind.back(), x.end());
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::make_shared<NdIndex>(ix);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    return launched(ctx, launch_gather_nd(x.raw(), ind.raw(), ind.dtype() == DataType::kInt64, ctx.output(0).raw(),
                                          shape_state<NdIndex>(ctx), static_cast<int>(dtype_size(x.dtype())),
                                          state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

Expected<KernelPtr> create_scatter_nd(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::ScatterParams p, ops::parse_scatter(n));
  const ScatterReduce reduce = reduce_of(p.reduction);
  auto reshape = [](ReshapeContext& rc) -> Status {
    KILN_ASSIGN_OR_RETURN(NdIndex ix, nd_index(rc, 0));
    const Shape& x = rc.in[0].shape;
    if (const std::string why = ops::scatter_nd_updates_mismatch(rc.in[0].dtype, x, rc.in[1].shape, rc.in[2].dtype, rc.in[2].shape);
        !why.empty())
      return rc.error(why);
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::make_shared<NdIndex>(ix);
    return Status::Ok();
  };
  auto run = [reduce](KernelContext& ctx) -> Status {
    const Tensor& ind = ctx.input(1);
    Tensor& y = ctx.output(0);
    KILN_RETURN_IF_ERROR(copy_device(ctx, ctx.input(0), y));
    return launched(ctx, launch_scatter_nd(y.raw(), ind.raw(), ind.dtype() == DataType::kInt64, ctx.input(2).raw(),
                                           shape_state<NdIndex>(ctx), elem_of(y.dtype()), reduce, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// ---- losses

std::string check_loss(const ir::Node& n) {
  if (!n.has_input(0) || !n.has_input(1)) return "scores and labels are required";
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && !n.inputs[i]->type.is_tensor()) return "takes tensors only";
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt != DataType::kUndefined && !is_float_type(dt) && dt != DataType::kFloat64)
    return std::string(dtype_name(dt)) + " scores do not run on CUDA";
  const DataType lt = n.inputs[1]->type.dtype;
  if (lt != DataType::kUndefined && !is_index_type(lt)) return "labels must be int64 or int32";
  if (!ops::parse_loss(n).ok()) return "reduction must be none, sum or mean";  // parse_loss's only rejection
  return "";
}

struct LossPlan {
  LossArgs args;
};

Expected<KernelPtr> create_loss(const ir::Node& n, bool softmax) {
  using Reduction = ops::LossParams::Reduction;
  KILN_ASSIGN_OR_RETURN(const ops::LossParams lp, ops::parse_loss(n));
  LossArgs base;
  base.softmax = softmax;
  base.reduction = lp.reduction == Reduction::kNone ? 0 : lp.reduction == Reduction::kSum ? 1 : 2;
  base.has_ignore = lp.has_ignore_index;
  base.ignore_index = lp.ignore_index;
  auto reshape = [base](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() < 2) return rc.error("scores must have shape [N, C, d1, ...]");
    Shape lshape = x;
    lshape.erase(lshape.begin() + 1);
    if (rc.in[1].shape != lshape)
      return rc.error("labels must have shape " + shape_to_string(lshape) + ", got " + shape_to_string(rc.in[1].shape));
    const bool weighted = rc.in.size() > 2 && rc.in[2].present;
    if (weighted && (rc.in[2].shape.size() != 1 || rc.in[2].shape[0] != x[1] || rc.in[2].dtype != rc.in[0].dtype))
      return rc.error("weights must have shape [" + std::to_string(x[1]) + "] and the scores' dtype");
    auto p = std::make_shared<LossPlan>();
    p->args = base;
    p->args.elem = elem_of(rc.in[0].dtype);
    p->args.labels64 = rc.in[1].dtype == DataType::kInt64;
    p->args.n = x[0];
    p->args.c = x[1];
    p->args.d = 1;
    for (size_t i = 2; i < x.size(); ++i) p->args.d *= x[i];
    rc.out[0] = {rc.in[0].dtype, base.reduction == 0 ? lshape : Shape{}};
    if (rc.out.size() > 1) rc.out[1] = {rc.in[0].dtype, x};
    if (base.reduction != 0) rc.workspace_bytes = static_cast<size_t>(2 * p->args.n * p->args.d) * sizeof(double);
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [softmax](KernelContext& ctx) -> Status {
    LossArgs a = shape_state<LossPlan>(ctx).args;
    a.x = ctx.input(0).raw();
    a.labels = ctx.input(1).raw();
    a.weight = ctx.has_input(2) ? ctx.input(2).raw() : nullptr;
    a.y = ctx.output(0).raw();
    a.log_prob = softmax && ctx.has_output(1) ? ctx.output(1).raw() : nullptr;
    a.workspace = static_cast<double*>(ctx.workspace());
    return launched(ctx, launch_loss(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_index(KernelRegistry& r) {
  r.add(kernel_row("GatherElements", 11, [](const ir::Node& n) { return check_indexed(n, 0, 1); },
                   [](const ir::Node& n, KernelInit&) { return create_gather_elements(n); }));
  r.add(kernel_row("GatherND", 11, [](const ir::Node& n) { return check_indexed(n, 0, 1); },
                   [](const ir::Node& n, KernelInit&) { return create_gather_nd(n); }));
  auto scatter_check = [](const ir::Node& n) {
    std::string why = check_indexed(n, 0, 1, 2);
    if (why.empty() && n.inputs[0]->type.dtype == DataType::kBool) {
      // An unknown reduction counts as one here; the factory reports it.
      const Expected<ops::ScatterParams> p = ops::parse_scatter(n);
      if (!p.ok() || p->reduction != ops::ScatterReduction::kNone)
        why = "a reduction over bool data does not run on CUDA";
    }
    return why;
  };
  r.add(kernel_row("ScatterElements", 11, scatter_check,
                   [](const ir::Node& n, KernelInit&) { return create_scatter_elements(n); }));
  KernelDef scatter = kernel_row("Scatter", 9, scatter_check,
                                 [](const ir::Node& n, KernelInit&) { return create_scatter_elements(n); });
  scatter.until = 10;
  r.add(scatter);
  r.add(kernel_row("ScatterND", 11, scatter_check, [](const ir::Node& n, KernelInit&) { return create_scatter_nd(n); }));
  r.add(kernel_row("SoftmaxCrossEntropyLoss", 12, check_loss,
                   [](const ir::Node& n, KernelInit&) { return create_loss(n, true); }));
  r.add(kernel_row("NegativeLogLikelihoodLoss", 12, check_loss,
                   [](const ir::Node& n, KernelInit&) { return create_loss(n, false); }));
}

}  // namespace kiln::cuda
