// ops/resize_infer.cpp — types and shapes of Resize and Upsample (their parameters and geometry:
// ops/resize.h).
#include <cmath>

#include "ops/op_table.h"
#include "ops/resize.h"
#include "util/checked.h"

namespace kiln::ops {
namespace {

bool const_floats(const Tensor* t, std::vector<double>& out) {
  if (!t) return false;
  out.clear();
  if (t->dtype() == DataType::kFloat32) out.assign(t->data<float>(), t->data<float>() + t->numel());
  else if (t->dtype() == DataType::kFloat64) out.assign(t->data<double>(), t->data<double>() + t->numel());
  else return false;
  return true;
}

ir::SymShape unknown_dims(int rank) { return ir::SymShape(std::vector<ir::Dim>(rank)); }

// Resize / Upsample: static where the input dims and the scales or sizes are constant.
Status infer_resize(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  const ir::SymShape& in = ctx.shape(0);
  if (!in.known) return Status::Ok();
  const Expected<ResizeParams> parsed = parse_resize(ctx.node);
  // An invalid attribute is the kernels' error, raised when they are made: the shape stays unknown.
  if (!parsed.ok()) return Status::Ok();
  const ResizeParams& p = *parsed;
  std::vector<int64_t> axes = p.axes;
  if (axes.empty())
    for (int i = 0; i < in.rank(); ++i) axes.push_back(i);
  for (int64_t& a : axes)
    if (!normalize_axis(a, in.rank())) return ctx.error("axes out of range");
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  bool have_scales = false, have_sizes = false;
  if (p.scales_input < 0) {  // Upsample-7: an attribute
    for (float f : p.scales_attr) scales.push_back(f);
    have_scales = true;
  } else if (p.sizes_input < 0) {  // opset 10, Upsample-9: (X, scales)
    have_scales = const_floats(ctx.value(p.scales_input), scales);
  } else {
    have_scales = const_floats(ctx.value(p.scales_input), scales) && !scales.empty();
    have_sizes = const_ints(ctx.value(p.sizes_input), sizes) && !sizes.empty();
  }
  ir::SymShape out = unknown_dims(in.rank());
  for (int i = 0; i < in.rank(); ++i) out.dims[i] = in.dims[i];
  if (have_sizes && sizes.size() == axes.size()) {
    if (p.aspect != ResizeParams::Aspect::kStretch) {
      // Needs the input dims of the resized axes.
      const bool not_larger = p.aspect == ResizeParams::Aspect::kNotLarger;
      double s = not_larger ? INFINITY : 0;
      for (size_t i = 0; i < axes.size(); ++i) {
        const ir::Dim& d = in.dims[axes[i]];
        if (!d.is_static() || d.value == 0) {
          for (int64_t a : axes) out.dims[a] = ir::Dim();
          ctx.out[0].shape = out;
          return Status::Ok();
        }
        const double r = static_cast<double>(sizes[i]) / d.value;
        s = not_larger ? std::min(s, r) : std::max(s, r);
      }
      for (int64_t a : axes) {
        int64_t v;
        out.dims[a] = count_from_double(s * static_cast<double>(in.dims[a].value) + 0.5, &v) && v >= 0 ? ir::Dim(v) : ir::Dim();
      }
    } else {
      for (size_t i = 0; i < axes.size(); ++i) out.dims[axes[i]] = ir::Dim(sizes[i]);
    }
  } else if (have_scales && scales.size() == axes.size()) {
    for (size_t i = 0; i < axes.size(); ++i) {
      const ir::Dim& d = in.dims[axes[i]];
      int64_t v;
      out.dims[axes[i]] = d.is_static() ? (count_from_double(scales[i] * static_cast<double>(d.value), &v) && v >= 0 ? ir::Dim(v) : ir::Dim())
                          : scales[i] == 1.0 ? d : ir::Dim();
    }
  } else {
    for (int64_t a : axes) out.dims[a] = ir::Dim();
  }
  ctx.out[0].shape = out;
  return Status::Ok();
}

}  // namespace

void add_resize_ops(std::vector<OpDef>& t) {
  t.push_back({"Resize", "", 10, infer_resize});
  t.push_back({"Upsample", "", 7, infer_resize});
}

}  // namespace kiln::ops
