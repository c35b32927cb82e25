// backends/cuda/cuda_shape.cpp — the table of data-movement kernels: views that copy (Reshape,
// Flatten, Squeeze, Unsqueeze, Identity), Transpose and Concat. Float32 data only for now.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"

namespace kiln::cuda {
namespace {

// Only the data input/output must be float32 (shape/axes inputs are int64 constants).
std::string require_f32_data(const ir::Node& n) {
  for (const ir::Value* v : {n.has_input(0) ? n.inputs[0] : nullptr, n.has_output(0) ? n.outputs[0] : nullptr}) {
    if (!v) continue;
    if (!v->type.is_tensor()) return "takes tensors only";
    if (v->type.dtype != DataType::kUndefined && v->type.dtype != DataType::kFloat32)
      return std::string("data is ") + dtype_name(v->type.dtype) + ", only float32 runs on CUDA";
  }
  return "";
}

// Errors of a shape function, named after the node (used in reshape(), never in run()).
struct NodeErrors {
  const ir::Node& node;
  Status error(const std::string& what) const { return invalid_argument(node.describe() + ": " + what); }
};

// A kernel that copies input 0 into output 0 with the shape `shape_of` computes: reshape() computes
// it once per input shape, run() only copies.
using ShapeFn = std::function<Expected<Shape>(const NodeErrors&, const Shape&)>;
Expected<KernelPtr> copy_kernel(ShapeFn shape_of) {
  auto reshape = [shape_of = std::move(shape_of)](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    const Shape& in = rc.in[0].shape;
    KILN_ASSIGN_OR_RETURN(Shape out, shape_of(NodeErrors{rc.node}, in));
    if (shape_numel(out) != shape_numel(in))
      return rc.error("cannot reshape " + shape_to_string(in) + " to " + shape_to_string(out));
    rc.out[0] = {rc.in[0].dtype, out};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) { return copy_device(ctx, ctx.input(0), ctx.output(0)); });
}

KernelDef def(const char* op, int since, const char* name, std::function<std::string(const ir::Node&)> check,
              KernelFactory create) {
  KernelDef d;
  d.op = op;
  d.since = since;
  d.name = name;
  d.check = std::move(check);
  d.create = std::move(create);
  return d;
}

std::string const_input_check(const ir::Node& n, int i) {
  std::string r = require_constant(n, i);
  if (!r.empty()) return r;
  if (n.has_input(i) && !constant_ints(n, i)) return "input " + std::to_string(i) + " must be int64";
  return require_f32_data(n);
}

Expected<KernelPtr> create_reshape(const ir::Node& n, KernelInit&) {
  auto spec = constant_ints(n, 1);
  if (!spec) return unsupported(n.describe() + ": shape must be a constant int64 tensor to run on CUDA");
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  return copy_kernel([spec = *spec, allowzero](const NodeErrors& ctx, const Shape& in) -> Expected<Shape> {
    Shape out(spec.size());
    int infer = -1;
    int64_t known = 1;
    for (size_t k = 0; k < spec.size(); ++k) {
      int64_t d = spec[k];
      if (d == 0 && !allowzero) {
        if (k >= in.size()) return ctx.error("shape has 0 at " + std::to_string(k) + " beyond the input's rank");
        d = in[k];
      }
      if (d == -1) {
        if (infer >= 0) return ctx.error("shape has more than one -1");
        infer = static_cast<int>(k);
        continue;
      }
      if (d < 0) return ctx.error("shape has a negative dim");
      out[k] = d;
      known *= d;
    }
    if (infer >= 0) {
      const int64_t total = shape_numel(in);
      if (known == 0 || total % known != 0)
        return ctx.error("cannot infer -1 reshaping " + shape_to_string(in));
      out[infer] = total / known;
    }
    return out;
  });
}

Expected<KernelPtr> create_flatten(const ir::Node& n, KernelInit&) {
  const int64_t axis_attr = n.attr_int("axis", 1);
  return copy_kernel([axis_attr](const NodeErrors& ctx, const Shape& in) -> Expected<Shape> {
    int64_t axis = axis_attr;
    const int64_t r = static_cast<int64_t>(in.size());
    if (axis < 0) axis += r;
    if (axis < 0 || axis > r) return ctx.error("axis out of range");
    int64_t outer = 1;
    for (int64_t k = 0; k < axis; ++k) outer *= in[k];
    int64_t inner = 1;
    for (int64_t k = axis; k < r; ++k) inner *= in[k];
    return Shape{outer, inner};
  });
}

std::vector<int64_t> axes_of(const ir::Node& n) {
  if (n.opset >= 13) return constant_ints(n, 1).value_or(std::vector<int64_t>{});
  return n.attr_ints("axes");
}

Expected<KernelPtr> create_squeeze(const ir::Node& n, KernelInit&) {
  return copy_kernel([axes = axes_of(n)](const NodeErrors& ctx, const Shape& in) -> Expected<Shape> {
    const int64_t r = static_cast<int64_t>(in.size());
    std::vector<bool> drop(in.size(), false);
    if (axes.empty()) {
      for (int64_t k = 0; k < r; ++k) drop[k] = in[k] == 1;
    }
    for (int64_t a : axes) {
      if (!normalize_axis(a, r)) return ctx.error("axis out of range");
      if (in[a] != 1) return ctx.error("cannot squeeze a dim of size " + std::to_string(in[a]));
      drop[a] = true;
    }
    Shape out;
    for (int64_t k = 0; k < r; ++k)
      if (!drop[k]) out.push_back(in[k]);
    return out;
  });
}

Expected<KernelPtr> create_unsqueeze(const ir::Node& n, KernelInit&) {
  return copy_kernel([axes = axes_of(n)](const NodeErrors& ctx, const Shape& in) -> Expected<Shape> {
    const int64_t r = static_cast<int64_t>(in.size() + axes.size());
    std::vector<bool> inserted(r, false);
    for (int64_t a : axes) {
      if (!normalize_axis(a, r) || inserted[a]) return ctx.error("axes out of range or repeated");
      inserted[a] = true;
    }
    Shape out;
    size_t next = 0;
    for (int64_t k = 0; k < r; ++k) out.push_back(inserted[k] ? 1 : in[next++]);
    return out;
  });
}

Expected<KernelPtr> create_identity(const ir::Node&, KernelInit&) {
  return copy_kernel([](const NodeErrors&, const Shape& in) -> Expected<Shape> { return in; });
}

Expected<KernelPtr> create_transpose(const ir::Node& n, KernelInit&) {
  const std::vector<int64_t> perm_attr = n.attr_ints("perm");
  return make_kernel([perm_attr](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int r = x.rank();
    std::vector<int64_t> perm = perm_attr;
    if (perm.empty())
      for (int k = r - 1; k >= 0; --k) perm.push_back(k);
    if (static_cast<int>(perm.size()) != r) return ctx.error("perm has the wrong length");
    if (r > kMaxRank) return ctx.error("rank above 8 is not supported on CUDA");
    std::vector<int64_t> strides(r, 1);
    for (int k = r - 2; k >= 0; --k) strides[k] = strides[k + 1] * x.shape()[k + 1];
    TransposeIndex idx;
    idx.rank = r;
    Shape out(r);
    std::vector<bool> seen(r, false);
    for (int k = 0; k < r; ++k) {
      int64_t p = perm[k];
      if (!normalize_axis(p, r) || seen[p]) return ctx.error("perm is not a permutation");
      seen[p] = true;
      out[k] = x.shape()[p];
      idx.out_dims[k] = out[k];
      idx.in_strides[k] = strides[p];
    }
    Tensor& y = ctx.output(0, x.dtype(), out);
    return launched(ctx, launch_transpose(x.raw(), y.raw(), x.numel(), static_cast<int>(dtype_size(x.dtype())), idx,
                                          state_of(ctx).stream));
  });
}

Expected<KernelPtr> create_concat(const ir::Node& n, KernelInit&) {
  const int64_t axis_attr = n.attr_int("axis", 0);
  return make_kernel([axis_attr](KernelContext& ctx) -> Status {
    const int n_in = ctx.num_inputs();
    if (n_in < 1) return ctx.error("needs at least one input");
    const Shape& first = ctx.input(0).shape();
    int64_t axis = axis_attr;
    const int64_t r = static_cast<int64_t>(first.size());
    if (!normalize_axis(axis, r)) return ctx.error("axis out of range");
    Shape out = first;
    out[axis] = 0;
    for (int i = 0; i < n_in; ++i) {
      const Shape& s = ctx.input(i).shape();
      if (static_cast<int64_t>(s.size()) != r) return ctx.error("inputs differ in rank");
      for (int64_t k = 0; k < r; ++k)
        if (k != axis && s[k] != first[k])
          return ctx.error("input " + std::to_string(i) + " has shape " + shape_to_string(s) + ", not matching " +
                           shape_to_string(first) + " outside the axis");
      out[axis] += s[axis];
    }
    const DataType dt = ctx.input(0).dtype();
    Tensor& y = ctx.output(0, dt, out);
    int64_t outer = 1, inner = dtype_size(dt);
    for (int64_t k = 0; k < axis; ++k) outer *= out[k];
    for (int64_t k = axis + 1; k < r; ++k) inner *= out[k];
    // Each input is `outer` rows of (its axis size × inner) bytes, placed at a column offset of y's rows.
    const size_t dst_pitch = static_cast<size_t>(out[axis] * inner);
    size_t offset = 0;
    for (int i = 0; i < n_in; ++i) {
      const Tensor& x = ctx.input(i);
      const size_t width = static_cast<size_t>(x.shape()[axis] * inner);
      if (width && outer) {
        KILN_RETURN_IF_ERROR(launched(
            ctx, cudaMemcpy2DAsync(static_cast<char*>(y.raw()) + offset, dst_pitch, x.raw(), width, width,
                                   static_cast<size_t>(outer), cudaMemcpyDeviceToDevice, state_of(ctx).stream)));
      }
      offset += width;
    }
    return Status::Ok();
  });
}

std::string concat_check(const ir::Node& n) {
  for (const ir::Value* v : n.inputs) {
    if (!v) return "omitted inputs are not supported";
    if (v->type.dtype != DataType::kUndefined && v->type.dtype != DataType::kFloat32)
      return std::string("data is ") + dtype_name(v->type.dtype) + ", only float32 runs on CUDA";
  }
  return require_f32_data(n);
}

}  // namespace

void register_shape(KernelRegistry& r) {
  r.add(def("Reshape", 5, "cuda.Reshape.f32", [](const ir::Node& n) { return const_input_check(n, 1); },
            create_reshape));
  r.add(def("Flatten", 1, "cuda.Flatten.f32", require_f32_data, create_flatten));
  r.add(def("Squeeze", 1, "cuda.Squeeze.f32",
            [](const ir::Node& n) { return n.opset >= 13 ? const_input_check(n, 1) : require_f32_data(n); },
            create_squeeze));
  r.add(def("Unsqueeze", 1, "cuda.Unsqueeze.f32",
            [](const ir::Node& n) -> std::string {
              if (n.opset >= 13 && !n.has_input(1)) return "axes input is required";
              return n.opset >= 13 ? const_input_check(n, 1) : require_f32_data(n);
            },
            create_unsqueeze));
  r.add(def("Identity", 1, "cuda.Identity.f32", require_f32_data, create_identity));
  r.add(def("Transpose", 1, "cuda.Transpose.f32", require_f32_data, create_transpose));
  r.add(def("Concat", 4, "cuda.Concat.f32", concat_check, create_concat));
}

}  // namespace kiln::cuda
