// backends/cuda/cuda_shape.cpp — the table of data-movement kernels, for every element type: views
// that copy (Reshape, Flatten, Squeeze, Unsqueeze, Identity), Transpose, Concat, Split, Expand, Slice,
// Gather, ConstantOfShape and Range. Shape operands (Reshape's shape, Slice's starts, ...) are host
// inputs (KernelDef::host_inputs): read on the host while planning, never uploaded.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cuda/cuda_util.h"
#include "ir/float_types.h"
#include "backends/staged_kernel.h"
#include "ops/params_shape.h"
#include "ops/shape.h"

namespace kiln::cuda {
namespace {

std::string require_movable(const ir::Node& n, int i) {
  if (!n.has_input(i)) return "";
  const ir::Value* v = n.inputs[i];
  if (!v->type.is_tensor()) return "takes tensors only";
  if (v->type.dtype != DataType::kUndefined && elem_of(v->type.dtype) < 0)
    return std::string("data is ") + dtype_name(v->type.dtype) + ", which does not run on CUDA";
  if (v->type.shape.known && v->type.shape.rank() > kMaxRank) return "rank above 8";
  return "";
}

int elem_bytes(const Tensor& t) { return static_cast<int>(dtype_size(t.dtype())); }

// A data-movement row (any element type) that reads `host_inputs` on the host.
KernelDef def(const char* op, int since, uint32_t host_inputs, std::function<std::string(const ir::Node&)> check,
              KernelFactory create) {
  KernelDef d = kernel_row(op, since, std::move(check), std::move(create));
  d.host_inputs = host_inputs;
  return d;
}

std::string data_check(const ir::Node& n) { return require_movable(n, 0); }

// The host value of input i as integers (error when the plan does not know it).
Expected<std::vector<int64_t>> ints_of(const ReshapeContext& rc, size_t i, const char* what) {
  if (i >= rc.in.size() || !rc.in[i].present) return rc.error(std::string(what) + " is missing");
  auto v = host_ints(rc.in[i].value);
  if (!v) return rc.error(std::string(what) + " must be an int64/int32 value known on the host");
  return *v;
}

// A kernel that copies input 0 into output 0 with the shape `shape_of` computes: reshape() computes
// it once per input shape, run() only copies.
using ShapeFn = std::function<Expected<Shape>(const ReshapeContext&, const Shape&)>;
Expected<KernelPtr> copy_kernel(ShapeFn shape_of) {
  auto reshape = [shape_of = std::move(shape_of)](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    const Shape& in = rc.in[0].shape;
    KILN_ASSIGN_OR_RETURN(Shape out, shape_of(rc, in));
    if (shape_numel(out) != shape_numel(in))
      return rc.error("cannot reshape " + shape_to_string(in) + " to " + shape_to_string(out));
    rc.out[0] = {rc.in[0].dtype, out};
    // Ask the planner for X's memory: where this step is X's last reader, Y is X (no copy). GPT-2's
    // Reshapes around each GEMM copied 50 MB apiece at batch 64 before this (#40).
    rc.share_input = 0;
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.raw() == x.raw()) return Status::Ok();
    return copy_device(ctx, x, y);
  });
}

Expected<KernelPtr> create_reshape(const ir::Node& n, KernelInit&) {
  const bool allowzero = ops::parse_reshape(n).allowzero;  // the 'shape' attribute predates this row (opset 5)
  return copy_kernel([allowzero](const ReshapeContext& rc, const Shape& in) -> Expected<Shape> {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> spec, ints_of(rc, 1, "shape"));
    Shape out;
    if (std::string why = ops::reshape_dims(in, spec, allowzero, &out); !why.empty()) return rc.error(why);
    return out;
  });
}

Expected<KernelPtr> create_flatten(const ir::Node& n, KernelInit&) {
  const ops::FlattenParams p = ops::parse_flatten(n);
  return copy_kernel([p](const ReshapeContext& rc, const Shape& in) -> Expected<Shape> {
    int64_t axis = p.axis;
    const int64_t r = static_cast<int64_t>(in.size());
    if (axis < 0) axis += r;
    if (axis < 0 || axis > r) return rc.error("axis out of range");
    int64_t outer = 1;
    for (int64_t k = 0; k < axis; ++k) outer *= in[k];
    int64_t inner = 1;
    for (int64_t k = axis; k < r; ++k) inner *= in[k];
    return Shape{outer, inner};
  });
}

// Squeeze/Unsqueeze axes: an attribute before opset 13, a host input from 13 on.
Expected<std::vector<int64_t>> axes_of(const ReshapeContext& rc, const ops::SqueezeParams& p) {
  if (!p.axes_as_input) return p.axes;
  if (rc.in.size() < 2 || !rc.in[1].present) return std::vector<int64_t>{};
  return ints_of(rc, 1, "axes");
}

Expected<KernelPtr> create_squeeze(const ir::Node& n, KernelInit&) {
  return copy_kernel([p = ops::parse_squeeze(n)](const ReshapeContext& rc, const Shape& in) -> Expected<Shape> {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_of(rc, p));
    const int64_t r = static_cast<int64_t>(in.size());
    std::vector<bool> drop(in.size(), false);
    if (axes.empty())
      for (int64_t k = 0; k < r; ++k) drop[k] = in[k] == 1;
    for (int64_t a : axes) {
      if (!normalize_axis(a, r)) return rc.error("axis out of range");
      if (in[a] != 1) return rc.error("cannot squeeze a dim of size " + std::to_string(in[a]));
      drop[a] = true;
    }
    Shape out;
    for (int64_t k = 0; k < r; ++k)
      if (!drop[k]) out.push_back(in[k]);
    return out;
  });
}

Expected<KernelPtr> create_unsqueeze(const ir::Node& n, KernelInit&) {
  return copy_kernel([p = ops::parse_squeeze(n)](const ReshapeContext& rc, const Shape& in) -> Expected<Shape> {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_of(rc, p));
    const int64_t r = static_cast<int64_t>(in.size() + axes.size());
    std::vector<bool> inserted(r, false);
    for (int64_t a : axes) {
      if (!normalize_axis(a, r) || inserted[a]) return rc.error("axes out of range or repeated");
      inserted[a] = true;
    }
    Shape out;
    size_t next = 0;
    for (int64_t k = 0; k < r; ++k) out.push_back(inserted[k] ? 1 : in[next++]);
    return out;
  });
}

Expected<KernelPtr> create_identity(const ir::Node&, KernelInit&) {
  return copy_kernel([](const ReshapeContext&, const Shape& in) -> Expected<Shape> { return in; });
}

// ---- strided copies: Transpose, Expand, Slice
struct StridedPlan {
  int64_t numel = 0;
  StridedIndex index;
};

Status strided_run(KernelContext& ctx) {
  const auto& p = shape_state<StridedPlan>(ctx);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  return launched(ctx, launch_strided_copy(x.raw(), y.raw(), p.numel, elem_bytes(x), p.index, state_of(ctx).stream));
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int k = static_cast<int>(s.size()) - 2; k >= 0; --k) st[k] = st[k + 1] * s[k + 1];
  return st;
}

Expected<KernelPtr> create_transpose(const ir::Node& n, KernelInit&) {
  const ops::TransposeParams tp = ops::parse_transpose(n);
  auto reshape = [tp](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    const Shape& x = rc.in[0].shape;
    const int r = static_cast<int>(x.size());
    std::vector<int64_t> perm = tp.perm;
    if (perm.empty())
      for (int k = r - 1; k >= 0; --k) perm.push_back(k);
    if (static_cast<int>(perm.size()) != r) return rc.error("perm has the wrong length");
    if (r > kMaxRank) return rc.error("rank above 8 is not supported on CUDA");
    const std::vector<int64_t> strides = contiguous_strides(x);
    auto p = std::make_shared<StridedPlan>();
    p->index.rank = r;
    Shape out(r);
    std::vector<bool> seen(r, false);
    for (int k = 0; k < r; ++k) {
      int64_t a = perm[k];
      if (!normalize_axis(a, r) || seen[a]) return rc.error("perm is not a permutation");
      seen[a] = true;
      out[k] = x[a];
      p->index.out_dims[k] = out[k];
      p->index.in_strides[k] = strides[a];
    }
    p->numel = shape_numel(out);
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  return make_staged(reshape, strided_run);
}

Expected<KernelPtr> create_expand(const ir::Node&, KernelInit&) {
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> target, ints_of(rc, 1, "shape"));
    const Shape& x = rc.in[0].shape;
    Shape out;
    if (!broadcast_shape(x, Shape(target.begin(), target.end()), out))
      return rc.error("cannot expand " + shape_to_string(x) + " to " + shape_to_string(Shape(target.begin(), target.end())));
    if (out.size() > static_cast<size_t>(kMaxRank)) return rc.error("rank above 8");
    auto p = std::make_shared<StridedPlan>();
    const int r = static_cast<int>(out.size());
    p->index.rank = r;
    int64_t stride = 1;
    for (int k = r - 1; k >= 0; --k) {
      const int xk = k - (r - static_cast<int>(x.size()));
      const int64_t dim = xk >= 0 ? x[xk] : 1;
      p->index.out_dims[k] = out[k];
      p->index.in_strides[k] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
    p->numel = shape_numel(out);
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  return make_staged(reshape, strided_run);
}

// Slice: starts/ends/axes/steps are attributes before opset 10 and host inputs from 10 on.
Expected<KernelPtr> create_slice(const ir::Node& n, KernelInit&) {
  const ops::SliceParams sp = ops::parse_slice(n);
  auto reshape = [sp](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    const Shape& x = rc.in[0].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    std::vector<int64_t> starts = sp.starts, ends = sp.ends, axes = sp.axes, steps;
    if (sp.bounds_as_inputs) {
      KILN_ASSIGN_OR_RETURN(starts, ints_of(rc, 1, "starts"));
      KILN_ASSIGN_OR_RETURN(ends, ints_of(rc, 2, "ends"));
      axes.clear();
      if (rc.in.size() > 3 && rc.in[3].present) {
        KILN_ASSIGN_OR_RETURN(axes, ints_of(rc, 3, "axes"));
      }
      if (rc.in.size() > 4 && rc.in[4].present) {
        KILN_ASSIGN_OR_RETURN(steps, ints_of(rc, 4, "steps"));
      }
    }
    if (axes.empty())
      for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
      return rc.error("starts, ends, axes and steps differ in length");
    std::vector<int64_t> begin(r, 0), step(r, 1);
    Shape out = x;
    std::vector<bool> seen(r, false);
    for (size_t i = 0; i < starts.size(); ++i) {
      int64_t a = axes[i];
      if (!normalize_axis(a, r) || seen[a]) return rc.error("axes out of range or repeated");
      seen[a] = true;
      if (steps[i] == 0) return rc.error("step 0");
      const ops::SliceDim sd = ops::slice_dim(x[a], starts[i], ends[i], steps[i]);
      begin[a] = sd.start;
      step[a] = sd.step;
      out[a] = sd.count;
    }
    if (r > kMaxRank) return rc.error("rank above 8");
    const std::vector<int64_t> strides = contiguous_strides(x);
    auto p = std::make_shared<StridedPlan>();
    p->index.rank = static_cast<int>(r);
    for (int64_t k = 0; k < r; ++k) {
      p->index.out_dims[k] = out[k];
      p->index.in_strides[k] = strides[k] * step[k];
      if (out[k] > 0) p->index.base += begin[k] * strides[k];
    }
    p->numel = shape_numel(out);
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  return make_staged(reshape, strided_run);
}

// ---- Concat and Split (one launch each: launch_concat / launch_split)
struct ConcatPlan {
  int64_t outer = 0;
  size_t dst_pitch = 0;
  std::vector<size_t> width;  // bytes per row, per input
};

Expected<KernelPtr> create_concat(const ir::Node& n, KernelInit&) {
  // The row starts at opset 4, where the axis is required (before, it defaulted to 1).
  const ops::ConcatParams cp = ops::parse_concat(n);
  auto reshape = [cp](ReshapeContext& rc) -> Status {
    if (rc.in.empty()) return rc.error("needs at least one input");
    for (const auto& in : rc.in)
      if (!in.present) return rc.error("omitted inputs are not supported");
    const Shape& first = rc.in[0].shape;
    const int64_t r = static_cast<int64_t>(first.size());
    int64_t axis = cp.axis;
    if (!normalize_axis(axis, r)) return rc.error("axis out of range");
    Shape out = first;
    out[axis] = 0;
    for (size_t i = 0; i < rc.in.size(); ++i) {
      const Shape& s = rc.in[i].shape;
      if (rc.in[i].dtype != rc.in[0].dtype) return rc.error("inputs differ in dtype");
      if (static_cast<int64_t>(s.size()) != r) return rc.error("inputs differ in rank");
      for (int64_t k = 0; k < r; ++k)
        if (k != axis && s[k] != first[k])
          return rc.error("input " + std::to_string(i) + " has shape " + shape_to_string(s) + ", not matching " +
                          shape_to_string(first) + " outside the axis");
      out[axis] += s[axis];
    }
    auto p = std::make_shared<ConcatPlan>();
    int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(rc.in[0].dtype));
    for (int64_t k = 0; k < axis; ++k) outer *= out[k];
    for (int64_t k = axis + 1; k < r; ++k) inner *= out[k];
    p->outer = outer;
    p->dst_pitch = static_cast<size_t>(out[axis] * inner);
    for (const auto& in : rc.in) p->width.push_back(static_cast<size_t>(in.shape[axis] * inner));
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  // One kernel for up to kConcatMaxParts inputs (launch_concat): DenseNet's channels-last concats
  // of up to 25 inputs are rows of 64 bytes per input, which cudaMemcpy2DAsync (one copy per input)
  // moved at a fraction of the bandwidth — 7 of 10.3 ms at batch 64 on the H200
  // (bench/results/gpu_kernel_profile_densenet121_fp16_b64_2026-11-29.log).
  auto run = [](KernelContext& ctx) -> Status {
    const auto& p = shape_state<ConcatPlan>(ctx);
    Tensor& y = ctx.output(0);
    if (p.outer == 0) return Status::Ok();
    ConcatParts parts;
    size_t offset = 0;
    for (size_t i = 0; i < p.width.size(); ++i) {
      const size_t w = p.width[i];
      if (w) {
        parts.part[parts.count] = ctx.input(static_cast<int>(i)).raw();
        parts.width[parts.count] = static_cast<int64_t>(w);
        parts.offset[parts.count] = static_cast<int64_t>(offset);
        ++parts.count;
      }
      offset += w;
      if (parts.count == kConcatMaxParts || (i + 1 == p.width.size() && parts.count > 0)) {
        KILN_RETURN_IF_ERROR(launched(ctx, launch_concat(parts, y.raw(), p.outer, static_cast<int64_t>(p.dst_pitch),
                                                         state_of(ctx).stream)));
        parts.count = 0;
      }
    }
    return Status::Ok();
  };
  return make_staged(reshape, run);
}

std::string concat_check(const ir::Node& n) {
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) return "omitted inputs are not supported";
    if (std::string r = require_movable(n, static_cast<int>(i)); !r.empty()) return r;
  }
  return "";
}

// Split: sizes from the `split` host input (opset 13+), the attribute (before 13), or equal parts.
Expected<KernelPtr> create_split(const ir::Node& n, KernelInit&) {
  const ops::SplitParams sp = ops::parse_split(n);
  auto reshape = [sp](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    const Shape& x = rc.in[0].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    int64_t axis = sp.axis;
    if (!normalize_axis(axis, r)) return rc.error("axis out of range");
    const int64_t parts = static_cast<int64_t>(rc.out.size());
    std::vector<int64_t> sizes = sp.split;
    if (sp.split_as_input && rc.in.size() > 1 && rc.in[1].present) {
      KILN_ASSIGN_OR_RETURN(sizes, ints_of(rc, 1, "split"));
    }
    if (sizes.empty()) {
      if (std::string why = ops::equal_split_sizes(x[axis], sp, parts, &sizes);
          !why.empty())
        return rc.error(why);
    }
    if (static_cast<int64_t>(sizes.size()) != parts) return rc.error("split has the wrong number of sizes");
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) return rc.error("negative split size");
      if (s > x[axis] - total) return rc.error("split sizes do not add up to the axis");
      total += s;
    }
    if (total != x[axis]) return rc.error("split sizes do not add up to the axis");
    auto p = std::make_shared<ConcatPlan>();
    int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(rc.in[0].dtype));
    for (int64_t k = 0; k < axis; ++k) outer *= x[k];
    for (int64_t k = axis + 1; k < r; ++k) inner *= x[k];
    p->outer = outer;
    p->dst_pitch = static_cast<size_t>(x[axis] * inner);  // here: the source's pitch
    for (int64_t i = 0; i < parts; ++i) {
      Shape o = x;
      o[axis] = sizes[i];
      rc.out[i] = {rc.in[0].dtype, o};
      p->width.push_back(static_cast<size_t>(sizes[i] * inner));
    }
    rc.state = std::move(p);
    return Status::Ok();
  };
  // One launch for up to kConcatMaxParts outputs (launch_split): GPT-2's QKV split of [64,128,2304]
  // by cudaMemcpy2DAsync per output ran at a third of the bandwidth (63 us per split on the H200).
  auto run = [](KernelContext& ctx) -> Status {
    const auto& p = shape_state<ConcatPlan>(ctx);
    const Tensor& x = ctx.input(0);
    // The empty outputs the node uses are made here (a zero split size, or no rows), the others as the
    // launch's parts below: an output never asked for stays unset, and the run's caller gets no tensor.
    for (size_t i = 0; i < p.width.size(); ++i)
      if ((p.outer == 0 || p.width[i] == 0) && ctx.has_output(static_cast<int>(i))) ctx.output(static_cast<int>(i));
    if (p.outer == 0) return Status::Ok();
    ConcatParts parts;
    size_t offset = 0;
    for (size_t i = 0; i < p.width.size(); ++i) {
      const size_t w = p.width[i];
      if (w && ctx.has_output(static_cast<int>(i))) {
        parts.part[parts.count] = ctx.output(static_cast<int>(i)).raw();
        parts.width[parts.count] = static_cast<int64_t>(w);
        parts.offset[parts.count] = static_cast<int64_t>(offset);
        ++parts.count;
      }
      offset += w;
      if (parts.count == kConcatMaxParts || (i + 1 == p.width.size() && parts.count > 0)) {
        KILN_RETURN_IF_ERROR(launched(ctx, launch_split(x.raw(), parts, p.outer, static_cast<int64_t>(p.dst_pitch),
                                                        state_of(ctx).stream)));
        parts.count = 0;
      }
    }
    return Status::Ok();
  };
  return make_staged(reshape, run);
}

// ---- Gather(data, indices) along `axis`
struct GatherPlan {
  int64_t outer = 0, axis_dim = 0, inner = 0, n_idx = 0;
};

Expected<KernelPtr> create_gather(const ir::Node& n, KernelInit&) {
  const ops::GatherParams gp = ops::parse_gather(n);
  auto reshape = [gp](ReshapeContext& rc) -> Status {
    if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("data and indices are required");
    if (rc.in[1].dtype != DataType::kInt64 && rc.in[1].dtype != DataType::kInt32) return rc.error("indices must be int32/int64");
    const Shape& x = rc.in[0].shape;
    const Shape& idx = rc.in[1].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    int64_t axis = gp.axis;
    if (!normalize_axis(axis, r)) return rc.error("axis out of range");
    auto p = std::make_shared<GatherPlan>();
    p->outer = 1;
    p->inner = 1;
    for (int64_t k = 0; k < axis; ++k) p->outer *= x[k];
    for (int64_t k = axis + 1; k < r; ++k) p->inner *= x[k];
    p->axis_dim = x[axis];
    p->n_idx = shape_numel(idx);
    Shape out(x.begin(), x.begin() + axis);
    out.insert(out.end(), idx.begin(), idx.end());
    out.insert(out.end(), x.begin() + axis + 1, x.end());
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const auto& p = shape_state<GatherPlan>(ctx);
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    Tensor& y = ctx.output(0);
    return launched(ctx, launch_gather(x.raw(), idx.raw(), idx.dtype() == DataType::kInt64, y.raw(), p.outer, p.axis_dim,
                                       p.inner, p.n_idx, elem_bytes(x), state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// ---- ConstantOfShape(shape) and Range(start, limit, delta), from host inputs
Expected<KernelPtr> create_constant_of_shape(const ir::Node& n, KernelInit&) {
  DataType dt = DataType::kFloat32;
  uint64_t bits = 0;
  const ops::ConstantOfShapeParams cp = ops::parse_constant_of_shape(n);
  if (const Tensor& v = cp.value; cp.value_is_tensor && v.defined()) {
    if (v.numel() != 1 || !v.device().is_cpu()) return invalid_model(n.describe() + ": value must hold one element");
    dt = v.dtype();
    std::memcpy(&bits, v.raw(), dtype_size(dt));
  }
  if (elem_of(dt) < 0) return unsupported(n.describe() + ": value dtype does not run on CUDA");
  auto reshape = [dt](ReshapeContext& rc) -> Status {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ints_of(rc, 0, "shape"));
    for (int64_t d : dims)
      if (d < 0) return rc.error("negative dim");
    rc.out[0] = {dt, Shape(dims.begin(), dims.end())};
    return Status::Ok();
  };
  auto run = [bits](KernelContext& ctx) -> Status {
    Tensor& y = ctx.output(0);
    return launched(ctx, launch_fill(y.raw(), y.numel(), elem_bytes(y), bits, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

double scalar_as_double(const Tensor& t) {
  switch (t.dtype()) {
    case DataType::kFloat32: return t.data<float>()[0];
    case DataType::kFloat64: return t.data<double>()[0];
    case DataType::kInt32: return t.data<int32_t>()[0];
    case DataType::kInt64: return static_cast<double>(t.data<int64_t>()[0]);
    case DataType::kInt16: return t.data<int16_t>()[0];
    case DataType::kFloat16: return f16_to_f32(t.data<uint16_t>()[0]);
    case DataType::kBFloat16: return bf16_to_f32(t.data<uint16_t>()[0]);
    default: return 0;
  }
}

struct RangePlan {
  int64_t n = 0, istart = 0, idelta = 0;
  double start = 0, delta = 0;
};

Expected<KernelPtr> create_range(const ir::Node&, KernelInit&) {
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in.size() != 3) return rc.error("needs start, limit and delta");
    for (const auto& in : rc.in)
      if (!in.present || !in.value || in.value->numel() != 1 || !in.value->device().is_cpu())
        return rc.error("start, limit and delta must be scalars known on the host");
    const DataType dt = rc.in[0].dtype;
    auto p = std::make_shared<RangePlan>();
    const bool integral = dt == DataType::kInt64 || dt == DataType::kInt32 || dt == DataType::kInt16;
    if (integral) {
      const int64_t s = static_cast<int64_t>(scalar_as_double(*rc.in[0].value));
      const int64_t l = static_cast<int64_t>(scalar_as_double(*rc.in[1].value));
      const int64_t d = static_cast<int64_t>(scalar_as_double(*rc.in[2].value));
      if (d == 0) return rc.error("delta is 0");
      p->istart = s;
      p->idelta = d;
      const int64_t span = l - s;
      p->n = std::max<int64_t>(0, d > 0 ? (span + d - 1) / d : (span + d + 1) / d);
    } else {
      const double s = scalar_as_double(*rc.in[0].value), l = scalar_as_double(*rc.in[1].value),
                   d = scalar_as_double(*rc.in[2].value);
      if (d == 0) return rc.error("delta is 0");
      p->start = s;
      p->delta = d;
      // The 16-bit floats count in float, as the CPU kernel does.
      const bool half = dt == DataType::kFloat16 || dt == DataType::kBFloat16;
      const double count = half ? std::ceil((static_cast<float>(l) - static_cast<float>(s)) / static_cast<float>(d))
                                : std::ceil((l - s) / d);
      p->n = std::max<int64_t>(0, static_cast<int64_t>(count));
    }
    if (elem_of(dt) < 0) return rc.error("dtype not supported on CUDA");
    rc.out[0] = {dt, Shape{p->n}};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const auto& p = shape_state<RangePlan>(ctx);
    Tensor& y = ctx.output(0);
    return launched(ctx, launch_range(y.raw(), elem_of(y.dtype()), p.n, p.istart, p.idelta, p.start, p.delta,
                                      state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_shape(KernelRegistry& r) {
  r.add(def("Reshape", 5, 0b10, data_check, create_reshape));
  r.add(def("Flatten", 1, 0, data_check, create_flatten));
  r.add(def("Squeeze", 1, 0b10, data_check, create_squeeze));
  r.add(def("Unsqueeze", 1, 0b10, data_check, create_unsqueeze));
  r.add(def("Identity", 1, 0, data_check, create_identity));
  r.add(def("Transpose", 1, 0, data_check, create_transpose));
  r.add(def("Concat", 4, 0, concat_check, create_concat));
  r.add(def("Split", 2, 0b10, data_check, create_split));
  r.add(def("Expand", 8, 0b10, data_check, create_expand));
  r.add(def("Slice", 1, 0b11110, data_check, create_slice));
  r.add(def("Gather", 1, 0,
            [](const ir::Node& n) -> std::string {
              if (std::string w = require_input_types(n, 1, {DataType::kInt64, DataType::kInt32}); !w.empty()) return w;
              return require_movable(n, 0);
            },
            create_gather));
  // ConstantOfShape and Range make float32 from their attribute and scalars: they stay float32 in
  // reduced-precision builds.
  KernelDef cos = def("ConstantOfShape", 9, 0b1, nullptr, create_constant_of_shape);
  cos.half_floats = false;
  r.add(std::move(cos));
  KernelDef range = def("Range", 11, 0b111,
            [](const ir::Node& n) {
              return require_input_types(n, 0, {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt64,
                                                DataType::kInt16, DataType::kFloat16, DataType::kBFloat16});
            },
            create_range);
  range.half_floats = false;
  r.add(std::move(range));
}

}  // namespace kiln::cuda
