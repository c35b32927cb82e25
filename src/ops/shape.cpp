// ops/shape.cpp — types and shapes of the shape op family (data movement): Reshape, Transpose,
// Concat, Split, Slice, Expand, Tile, Pad, Squeeze, Unsqueeze, Flatten, DepthToSpace, SpaceToDepth,
// CenterCropPad, Shape, Size, ConstantOfShape, Constant, Range, Trilu, EyeLike.
// Index-driven ops are in shape_index.cpp.
//
// Where an input that decides the output shape is a build-time constant, the shape is exact;
// symbolic input dims pass through wherever the op keeps them.
#include "ops/shape.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ops/op_table.h"
#include "ops/params_shape.h"
#include "ops/shape_infer_util.h"
#include "util/checked.h"

namespace kiln::ops {

// ---------------------------------------------------------------- concrete rules (also for kernels)

std::string reshape_dims(const Shape& in, const std::vector<int64_t>& spec, bool allowzero, Shape* out) {
  out->assign(spec.size(), 0);
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allowzero) {
      if (i >= in.size()) return "shape entry " + std::to_string(i) + " is 0 but the input has rank " + std::to_string(in.size());
      d = in[i];
    } else if (d == -1) {
      if (infer_at >= 0) return "shape has more than one -1";
      infer_at = static_cast<int>(i);
      continue;
    } else if (d < -1) {
      return "shape entry " + std::to_string(d) + " is invalid";
    }
    (*out)[i] = d;
    if (__builtin_mul_overflow(known, d, &known)) return "shape entries multiply past int64";
  }
  const int64_t total = shape_numel(in);
  if (infer_at >= 0) {
    if (known == 0) {
      if (total != 0) return "cannot infer -1 next to a zero dim";
      (*out)[infer_at] = 0;
    } else {
      if (total % known != 0) return "cannot reshape " + shape_to_string(in) + " to " + shape_to_string(spec);
      (*out)[infer_at] = total / known;
    }
  } else if (known != total) {
    return "cannot reshape " + shape_to_string(in) + " (" + std::to_string(total) + " elements) to " + shape_to_string(*out);
  }
  return "";
}

SliceDim slice_dim(int64_t dim, int64_t start, int64_t end, int64_t step) {
  SliceDim s;
  s.step = step;
  if (dim <= 0) return s;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  // Written so no step, start or end (INT64_MIN/MAX included) overflows: the distances are bounded by
  // dim once clamped, and a step longer than the dim is the same as one of dim + 1.
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    s.count = end > start ? (end - start - 1) / std::min(step, dim) + 1 : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    s.count = start > end ? (start - end - 1) / std::min(-std::max(step, -dim), dim) + 1 : 0;
  }
  if (s.count <= 1) s.step = 1;  // one element (or none): the step is never applied
  s.start = s.count > 0 ? start : 0;
  return s;
}

int64_t concat_default_axis(int opset) { return opset != 0 && opset < 4 ? 1 : 0; }

std::string equal_split_sizes(int64_t dim, const SplitParams& p, int64_t outputs, std::vector<int64_t>* sizes) {
  if (p.has_num_outputs) {
    if (p.num_outputs != outputs)
      return "num_outputs is " + std::to_string(p.num_outputs) + " but the node has " + std::to_string(outputs) +
             " outputs";
  }
  const int64_t parts = outputs;
  if (parts < 1) return "split needs at least one output";
  // ceil(dim / parts) without dim + parts - 1, which overflows for a dim near INT64_MAX.
  const int64_t chunk = dim / parts + (dim % parts != 0 ? 1 : 0);
  sizes->resize(parts);
  int64_t left = dim;
  for (int64_t i = 0; i < parts; ++i) {
    (*sizes)[i] = std::min(chunk, left);
    left -= (*sizes)[i];
  }
  return "";
}

namespace {

using ir::Dim;
using ir::SymShape;
using ir::Type;

// ---------------------------------------------------------------- Reshape

// Infers Reshape's -1 from the input's dims when the symbols cancel: the product of the input dims
// divided by the product of the known output dims.
Dim infer_minus_one(const SymShape& in, const std::vector<Dim>& out, int at) {
  int64_t num = 1, den = 1;
  std::vector<std::string> syms;
  for (const Dim& d : in.dims) {
    if (d.is_static()) {
      if (__builtin_mul_overflow(num, d.value, &num)) return Dim();
    } else if (!d.symbol.empty()) syms.push_back(d.symbol);
    else return Dim();
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(i) == at) continue;
    const Dim& d = out[i];
    if (d.is_static()) {
      if (__builtin_mul_overflow(den, d.value, &den)) return Dim();
      continue;
    }
    auto it = d.symbol.empty() ? syms.end() : std::find(syms.begin(), syms.end(), d.symbol);
    if (it == syms.end()) return Dim();
    syms.erase(it);
  }
  if (den == 0 || num % den != 0) return Dim();
  if (syms.empty()) return Dim(num / den);
  if (syms.size() == 1 && num == den) return Dim(syms[0]);
  return Dim();
}

Status infer_reshape(InferContext& c) {
  const ReshapeParams p = parse_reshape(c.node);
  const bool allowzero = p.allowzero;
  std::vector<int64_t> spec;
  const bool known = p.has_shape_attr ? (spec = p.shape, true) : const_ints(c, 1, &spec);
  if (!known) {
    c.out[0] = Type::tensor(c.dtype(0), unknown_dims_for_shape_input(c, 1));
    return Status::Ok();
  }
  const SymShape& in = c.shape(0);
  std::vector<Dim> out(spec.size());
  int at = -1;
  for (size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] == 0 && !allowzero) {
      if (in.known && static_cast<int>(i) >= in.rank()) return c.error("shape entry " + std::to_string(i) + " is 0 past the input rank");
      out[i] = in.known ? in.dims[i] : Dim();
    } else if (spec[i] == -1) {
      if (at >= 0) return c.error("shape has more than one -1");
      at = static_cast<int>(i);
    } else if (spec[i] < -1) {
      return c.error("invalid shape entry " + std::to_string(spec[i]));
    } else {
      out[i] = Dim(spec[i]);
    }
  }
  if (at >= 0 && in.known) out[at] = infer_minus_one(in, out, at);
  c.out[0] = Type::tensor(c.dtype(0), SymShape(std::move(out)));
  return Status::Ok();
}

// ---------------------------------------------------------------- Squeeze / Unsqueeze / Flatten

bool axes_of(InferContext& c, int input, std::vector<int64_t>* axes) {
  const SqueezeParams p = parse_squeeze(c.node);
  if (p.has_axes_attr) { *axes = p.axes; return true; }
  if (!c.has(input)) { axes->clear(); return true; }
  return const_ints(c, input, axes);
}

Status infer_squeeze(InferContext& c) {
  const SymShape& in = c.shape(0);
  std::vector<int64_t> axes;
  c.out[0] = Type::tensor(c.dtype(0));
  if (!in.known || !axes_of(c, 1, &axes)) return Status::Ok();
  std::vector<bool> drop(in.rank(), false);
  if (axes.empty()) {
    for (int d = 0; d < in.rank(); ++d) {
      if (!in.dims[d].is_static()) return Status::Ok();  // a symbolic dim might be 1: rank unknown
      drop[d] = in.dims[d].value == 1;
    }
  }
  for (int64_t a : axes) {
    if (!normalize_axis(a, in.rank())) return c.error("axis " + std::to_string(a) + " out of range");
    if (in.dims[a].is_static() && in.dims[a].value != 1) return c.error("cannot squeeze a dim of size " + std::to_string(in.dims[a].value));
    drop[a] = true;
  }
  std::vector<Dim> out;
  for (int d = 0; d < in.rank(); ++d)
    if (!drop[d]) out.push_back(in.dims[d]);
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

Status infer_unsqueeze(InferContext& c) {
  const SymShape& in = c.shape(0);
  std::vector<int64_t> axes;
  c.out[0] = Type::tensor(c.dtype(0));
  if (!in.known || !axes_of(c, 1, &axes)) return Status::Ok();
  const int64_t r = in.rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> ins(r, false);
  for (int64_t a : axes) {
    if (!normalize_axis(a, r) || ins[a]) return c.error("bad or repeated axis " + std::to_string(a));
    ins[a] = true;
  }
  std::vector<Dim> out;
  int k = 0;
  for (int64_t d = 0; d < r; ++d) out.push_back(ins[d] ? Dim(1) : in.dims[k++]);
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

Status infer_flatten(InferContext& c) {
  const SymShape& in = c.shape(0);
  c.out[0] = Type::tensor(c.dtype(0));
  if (!in.known) {
    c.out[0].shape = SymShape({Dim(), Dim()});
    return Status::Ok();
  }
  int64_t axis = parse_flatten(c.node).axis;
  if (axis < 0) axis += in.rank();
  if (axis < 0 || axis > in.rank()) return c.error("axis out of range");
  c.out[0].shape = SymShape({dim_product(in, 0, axis), dim_product(in, axis, in.rank())});
  return Status::Ok();
}

// ---------------------------------------------------------------- Transpose / Concat / Split

Status infer_transpose(InferContext& c) {
  const SymShape& in = c.shape(0);
  c.out[0] = Type::tensor(c.dtype(0));
  if (!in.known) return Status::Ok();
  std::vector<int64_t> perm = parse_transpose(c.node).perm;
  const int r = in.rank();
  if (perm.empty())
    for (int d = r - 1; d >= 0; --d) perm.push_back(d);
  if (static_cast<int>(perm.size()) != r) return c.error("perm length differs from input rank");
  std::vector<Dim> out(r);
  for (int d = 0; d < r; ++d) {
    int64_t p = perm[d];
    if (!normalize_axis(p, r)) return c.error("perm entry out of range");
    out[d] = in.dims[p];
  }
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

Status infer_concat(InferContext& c) {
  DataType dt = DataType::kUndefined;
  const SymShape* first = nullptr;
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (!c.has(i)) continue;
    if (dt == DataType::kUndefined) dt = c.dtype(i);
    if (!first && c.shape(i).known) first = &c.shape(i);
  }
  c.out[0] = Type::tensor(dt);
  if (!first) return Status::Ok();
  const int r = first->rank();
  int64_t axis = parse_concat(c.node).axis;
  if (!normalize_axis(axis, r)) return c.error("axis out of range");
  std::vector<Dim> out = first->dims;
  Dim sum(0);
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (!c.has(i)) continue;
    const SymShape& s = c.shape(i);
    if (!s.known) { sum = Dim(); continue; }
    if (s.rank() != r) return c.error("inputs differ in rank");
    for (int d = 0; d < r; ++d) {
      if (d == axis) continue;
      if (!out[d].is_static() && s.dims[d].is_static()) out[d] = s.dims[d];
      else if (out[d].is_static() && s.dims[d].is_static() && out[d].value != s.dims[d].value)
        return c.error("input dims differ outside the concat axis");
    }
    sum = dim_add(sum, s.dims[axis]);
  }
  out[axis] = sum;
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

Status infer_split(InferContext& c) {
  const SymShape& in = c.shape(0);
  for (auto& t : c.out) t = Type::tensor(c.dtype(0));
  if (!in.known) return Status::Ok();
  const SplitParams p = parse_split(c.node);
  int64_t axis = p.axis;
  if (!normalize_axis(axis, in.rank())) return c.error("axis out of range");
  std::vector<int64_t> sizes;
  bool have = false;
  if (p.has_split_attr) { sizes = p.split; have = true; }
  else if (c.has(1)) have = const_ints(c, 1, &sizes);
  const Dim& dim = in.dims[axis];
  const int n = static_cast<int>(c.out.size());
  if ((!have || sizes.empty()) && (!c.has(1) || have)) {
    if (dim.is_static()) {
      std::string err = equal_split_sizes(dim.value, p, n, &sizes);
      if (!err.empty()) return c.error(err);
      have = true;
    }
  }
  if (have && static_cast<int>(sizes.size()) != n) return c.error(std::to_string(sizes.size()) + " split sizes for " + std::to_string(n) + " outputs");
  for (int i = 0; i < n; ++i) {
    std::vector<Dim> out = in.dims;
    out[axis] = have ? Dim(sizes[i]) : Dim();
    c.out[i].shape = SymShape(std::move(out));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- Slice

Status infer_slice(InferContext& c) {
  const SymShape& in = c.shape(0);
  c.out[0] = Type::tensor(c.dtype(0));
  if (!in.known) return Status::Ok();
  const int r = in.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  bool ok = true;
  const SliceParams p = parse_slice(c.node);
  if (p.has_starts_attr) {
    starts = p.starts;
    ends = p.ends;
    axes = p.axes;
  } else {
    ok = const_ints(c, 1, &starts) && const_ints(c, 2, &ends);
    if (c.has(3)) ok = const_ints(c, 3, &axes) && ok;
    if (c.has(4)) ok = const_ints(c, 4, &steps) && ok;
  }
  std::vector<Dim> out = in.dims;
  if (!ok) {
    // Unknown bounds: the sliced axes (all, when the axes are unknown too) lose their sizes.
    if (c.has(3) && const_ints(c, 3, &axes)) {
      for (int64_t a : axes)
        if (normalize_axis(a, r)) out[a] = Dim();
    } else {
      for (Dim& d : out) d = Dim();
    }
    c.out[0].shape = SymShape(std::move(out));
    return Status::Ok();
  }
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return c.error("starts, ends, axes and steps differ in length");
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = axes[i];
    if (!normalize_axis(a, r)) return c.error("axis out of range");
    if (steps[i] == 0) return c.error("step 0");
    const Dim& d = in.dims[a];
    if (d.is_static()) {
      out[a] = Dim(slice_dim(d.value, starts[i], ends[i], steps[i]).count);
    } else {
      // Taking everything keeps the symbol.
      const bool whole = steps[i] == 1 && starts[i] == 0 && ends[i] >= std::numeric_limits<int32_t>::max();
      const bool whole_rev = steps[i] == -1 && starts[i] == -1 && ends[i] <= std::numeric_limits<int32_t>::min();
      out[a] = whole || whole_rev ? d : Dim();
    }
  }
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

// ---------------------------------------------------------------- Expand / Tile / Pad / CenterCropPad

Status infer_expand(InferContext& c) {
  c.out[0] = Type::tensor(c.dtype(0));
  std::vector<int64_t> spec;
  SymShape target;
  if (const_ints(c, 1, &spec)) target = SymShape::of(spec);
  else target = unknown_dims_for_shape_input(c, 1);
  if (!c.shape(0).known || !target.known) return Status::Ok();
  c.out[0].shape = broadcast_sym(c.shape(0), target);
  return Status::Ok();
}

Status infer_tile(InferContext& c) {
  const SymShape& in = c.shape(0);
  c.out[0] = Type::tensor(c.dtype(0));
  if (!in.known) return Status::Ok();
  std::vector<int64_t> reps;
  std::vector<Dim> out(in.rank());
  if (const_ints(c, 1, &reps)) {
    if (static_cast<int>(reps.size()) != in.rank()) return c.error("repeats must have one entry per input dim");
    for (int d = 0; d < in.rank(); ++d) out[d] = dim_mul(in.dims[d], Dim(reps[d]));
  }
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

Status infer_pad(InferContext& c) {
  const SymShape& in = c.shape(0);
  c.out[0] = Type::tensor(c.dtype(0));
  if (!in.known) return Status::Ok();
  const int r = in.rank();
  const Expected<PadParams> p = parse_pad(c.node);
  // An unknown mode is the kernels' error, raised when they are made: the shape is left unknown.
  if (!p.ok()) return Status::Ok();
  std::vector<int64_t> pads, axes;
  bool ok;
  if (p->has_pads_attr) { pads = p->pads; ok = true; }
  else ok = const_ints(c, 1, &pads) && (!c.has(3) || const_ints(c, 3, &axes));
  std::vector<Dim> out(r);
  if (ok) {
    if (axes.empty()) {
      axes.resize(r);
      std::iota(axes.begin(), axes.end(), 0);
    }
    if (pads.size() != 2 * axes.size()) return c.error("pads must have 2 entries per padded axis");
    out = in.dims;
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = axes[i];
      if (!normalize_axis(a, r)) return c.error("axis out of range");
      int64_t both;
      if (__builtin_add_overflow(pads[i], pads[i + axes.size()], &both)) return c.error("pads overflow int64");
      out[a] = dim_add(in.dims[a], Dim(both));
    }
  }
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

Status infer_center_crop_pad(InferContext& c) {
  const SymShape& in = c.shape(0);
  c.out[0] = Type::tensor(c.dtype(0));
  if (!in.known) return Status::Ok();
  const int r = in.rank();
  std::vector<int64_t> target, axes = parse_center_crop_pad(c.node).axes;
  if (axes.empty()) {
    axes.resize(r);
    std::iota(axes.begin(), axes.end(), 0);
  }
  std::vector<Dim> out = in.dims;
  const bool ok = const_ints(c, 1, &target);
  if (ok && target.size() != axes.size()) return c.error("shape must have one entry per axis");
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i];
    if (!normalize_axis(a, r)) return c.error("axis out of range");
    out[a] = ok ? Dim(target[i]) : Dim();
  }
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

// ---------------------------------------------------------------- DepthToSpace / SpaceToDepth

// The kernels refuse a blocksize below 1 (parse_depth_to_space); inference also refuses one whose square
// could overflow, with one message for both.
Expected<int64_t> blocksize_of(InferContext& c) {
  const Expected<DepthToSpaceParams> p = parse_depth_to_space(c.node);
  if (!p.ok() || p->blocksize > kMaxBlocksize)
    return c.error("blocksize must be in [1, " + std::to_string(kMaxBlocksize) + "]");
  return p->blocksize;
}

Status infer_depth_to_space(InferContext& c) {
  const SymShape& in = c.shape(0);
  const Expected<int64_t> bs = blocksize_of(c);
  c.out[0] = Type::tensor(c.dtype(0));
  if (!bs.ok()) return bs.status();
  const int64_t b = *bs;
  if (!in.known) return Status::Ok();
  if (in.rank() != 4) return c.error("input must be 4-D");
  c.out[0].shape = SymShape({in.dims[0], dim_div(in.dims[1], b * b), dim_mul(in.dims[2], Dim(b)), dim_mul(in.dims[3], Dim(b))});
  return Status::Ok();
}

Status infer_space_to_depth(InferContext& c) {
  const SymShape& in = c.shape(0);
  const Expected<int64_t> bs = blocksize_of(c);
  c.out[0] = Type::tensor(c.dtype(0));
  if (!bs.ok()) return bs.status();
  const int64_t b = *bs;
  if (!in.known) return Status::Ok();
  if (in.rank() != 4) return c.error("input must be 4-D");
  c.out[0].shape = SymShape({in.dims[0], dim_mul(in.dims[1], Dim(b * b)), dim_div(in.dims[2], b), dim_div(in.dims[3], b)});
  return Status::Ok();
}

// ---------------------------------------------------------------- Shape / Size / constants / Range

Status infer_shape(InferContext& c) {
  const SymShape& in = c.shape(0);
  c.out[0] = Type::tensor(DataType::kInt64, SymShape({Dim()}));
  if (!in.known) return Status::Ok();
  const int64_t r = in.rank();
  auto clamp = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  const ShapeParams p = parse_shape(c.node);
  const int64_t b = clamp(p.start);
  const int64_t e = p.has_end ? clamp(p.end) : r;
  c.out[0].shape = SymShape({Dim(std::max<int64_t>(0, e - b))});
  return Status::Ok();
}

Status infer_size(InferContext& c) {
  c.out[0] = Type::tensor(DataType::kInt64, SymShape(std::vector<Dim>{}));
  return Status::Ok();
}

Status infer_constant(InferContext& c) {
  KILN_ASSIGN_OR_RETURN(const ConstantParams p, parse_constant(c.node));
  c.out[0] = Type::tensor(p.dtype, SymShape::of(p.shape));
  return Status::Ok();
}

Status infer_constant_of_shape(InferContext& c) {
  const ConstantOfShapeParams p = parse_constant_of_shape(c.node);
  const DataType dt = p.has_value ? p.value.dtype() : DataType::kFloat32;
  std::vector<int64_t> spec;
  if (const_ints(c, 0, &spec)) {
    for (int64_t d : spec)
      if (d < 0) return c.error("negative dim in shape");
    c.out[0] = Type::tensor(dt, SymShape::of(spec));
  } else {
    c.out[0] = Type::tensor(dt, unknown_dims_for_shape_input(c, 0));
  }
  return Status::Ok();
}

// Reads a scalar constant of any numeric dtype as double.
bool const_scalar(const InferContext& c, int i, double* v) {
  const Tensor* t = c.value(i);
  if (!t || t->numel() != 1) return false;
  switch (t->dtype()) {
    case DataType::kFloat32: *v = t->data<float>()[0]; return true;
    case DataType::kFloat64: *v = t->data<double>()[0]; return true;
    case DataType::kInt16: *v = t->data<int16_t>()[0]; return true;
    case DataType::kInt32: *v = t->data<int32_t>()[0]; return true;
    case DataType::kInt64: *v = static_cast<double>(t->data<int64_t>()[0]); return true;
    default: return false;
  }
}

Status infer_range(InferContext& c) {
  c.out[0] = Type::tensor(c.dtype(0), SymShape({Dim()}));
  double s, l, d;
  if (const_scalar(c, 0, &s) && const_scalar(c, 1, &l) && const_scalar(c, 2, &d)) {
    if (d == 0) return c.error("delta is zero");
    int64_t n;
    if (!count_from_double(std::ceil((l - s) / d), &n)) return c.error("Range's length is NaN, infinite or past 2^53");
    c.out[0].shape.dims[0] = Dim(std::max<int64_t>(0, n));
  }
  return Status::Ok();
}

Status infer_same(InferContext& c) {
  c.out[0] = c.type(0);
  return Status::Ok();
}

Status infer_eye_like(InferContext& c) {
  const int64_t dt = parse_eye_like(c.node).dtype;
  c.out[0] = Type::tensor(dt ? static_cast<DataType>(dt) : c.dtype(0), c.shape(0));
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------- shared inference helpers

bool const_ints(const InferContext& c, int i, std::vector<int64_t>* out) {
  const Tensor* t = c.value(i);
  if (!t) return false;
  out->resize(static_cast<size_t>(t->numel()));
  if (t->dtype() == DataType::kInt64) std::copy_n(t->data<int64_t>(), t->numel(), out->begin());
  else if (t->dtype() == DataType::kInt32) std::copy_n(t->data<int32_t>(), t->numel(), out->begin());
  else return false;
  return true;
}

ir::SymShape unknown_dims_for_shape_input(const InferContext& c, int i) {
  if (!c.has(i)) return {};
  const ir::SymShape& s = c.shape(i);
  // A rank past kMaxInferredRank is left unknown (a hostile model declares a shape input of 2^40 entries).
  if (!s.known || s.rank() != 1 || !s.dims[0].is_static() || s.dims[0].value < 0 || s.dims[0].value > kMaxInferredRank) return {};
  return ir::SymShape(std::vector<ir::Dim>(static_cast<size_t>(s.dims[0].value)));
}

ir::Dim dim_mul(const ir::Dim& a, const ir::Dim& b) {
  int64_t r;
  if (a.is_static() && b.is_static()) return __builtin_mul_overflow(a.value, b.value, &r) ? ir::Dim() : ir::Dim(r);
  if ((a.is_static() && a.value == 0) || (b.is_static() && b.value == 0)) return ir::Dim(0);
  if (a.is_static() && a.value == 1) return b;
  if (b.is_static() && b.value == 1) return a;
  return ir::Dim();
}

ir::Dim dim_add(const ir::Dim& a, const ir::Dim& b) {
  int64_t r;
  if (a.is_static() && b.is_static()) return __builtin_add_overflow(a.value, b.value, &r) ? ir::Dim() : ir::Dim(r);
  if (a.is_static() && a.value == 0) return b;
  if (b.is_static() && b.value == 0) return a;
  return ir::Dim();
}

ir::Dim dim_div(const ir::Dim& a, int64_t b) {
  if (b == 1) return a;
  if (a.is_static() && b > 0 && a.value % b == 0) return ir::Dim(a.value / b);
  return ir::Dim();
}

ir::Dim dim_product(const ir::SymShape& s, int64_t b, int64_t e) {
  ir::Dim p(1);
  for (int64_t i = b; i < e; ++i) p = dim_mul(p, s.dims[i]);
  return p;
}

void add_shape_ops(std::vector<OpDef>& t) {
  t.push_back({"Reshape", "", 1, needs_input0<infer_reshape>});
  t.push_back({"Squeeze", "", 1, needs_input0<infer_squeeze>});
  t.push_back({"Unsqueeze", "", 1, needs_input0<infer_unsqueeze>});
  t.push_back({"Flatten", "", 1, needs_input0<infer_flatten>});
  t.push_back({"Transpose", "", 1, needs_input0<infer_transpose>});
  t.push_back({"Concat", "", 1, needs_input0<infer_concat>});
  t.push_back({"Split", "", 1, needs_input0<infer_split>});
  t.push_back({"Slice", "", 1, needs_input0<infer_slice>});
  t.push_back({"Expand", "", 8, needs_input0<infer_expand>});
  t.push_back({"Tile", "", 6, needs_input0<infer_tile>});
  t.push_back({"Pad", "", 2, needs_input0<infer_pad>});
  t.push_back({"CenterCropPad", "", 18, needs_input0<infer_center_crop_pad>});
  t.push_back({"DepthToSpace", "", 1, needs_input0<infer_depth_to_space>});
  t.push_back({"SpaceToDepth", "", 1, needs_input0<infer_space_to_depth>});
  t.push_back({"Shape", "", 1, needs_input0<infer_shape>});
  t.push_back({"Size", "", 1, needs_input0<infer_size>});
  t.push_back({"Constant", "", 1, infer_constant});
  t.push_back({"ConstantOfShape", "", 9, needs_input0<infer_constant_of_shape>});
  t.push_back({"Range", "", 11, needs_input0<infer_range>});
  t.push_back({"Trilu", "", 14, needs_input0<infer_same>});
  t.push_back({"EyeLike", "", 9, needs_input0<infer_eye_like>});
  add_shape_index_ops(t);
}

}  // namespace kiln::ops
