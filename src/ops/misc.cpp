// ops/misc.cpp — types and shapes of the misc op family: Resize/Upsample, Einsum, Unique, random
// ops, signal ops (DFT, STFT, windows, MelWeightMatrix), string ops, NonMaxSuppression, Det.
#include <cmath>

#include "ops/op_table.h"
#include "ops/params_misc.h"
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

Status infer_einsum(InferContext& ctx) {
  if (ctx.has(0)) ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  return Status::Ok();
}

Status infer_unique(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  if (!parse_unique(ctx.node).has_axis) ctx.out[0].shape = unknown_dims(1);
  else if (ctx.shape(0).known) ctx.out[0].shape = unknown_dims(ctx.shape(0).rank());
  for (size_t i = 1; i < ctx.out.size(); ++i) ctx.out[i] = ir::Type::tensor(DataType::kInt64, unknown_dims(1));
  return Status::Ok();
}

Status infer_random(InferContext& ctx) {
  const bool like = ctx.node.op_type.find("Like") != std::string::npos;
  const RandomParams p = parse_random(ctx.node);
  if (like) {
    if (!ctx.has(0)) return Status::Ok();
    ctx.out[0] = ir::Type::tensor(p.has_dtype ? p.dtype : ctx.dtype(0), ctx.shape(0));
  } else {
    ctx.out[0] = ir::Type::tensor(p.dtype, ir::SymShape::of(p.shape));
  }
  return Status::Ok();
}

Status infer_bernoulli(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  const BernoulliParams p = parse_bernoulli(ctx.node);
  ctx.out[0] = ir::Type::tensor(p.has_dtype ? p.dtype : ctx.dtype(0), ctx.shape(0));
  return Status::Ok();
}

Status infer_multinomial(InferContext& ctx) {
  const MultinomialParams p = parse_multinomial(ctx.node);
  ir::SymShape s = unknown_dims(2);
  if (ctx.has(0) && ctx.shape(0).known && ctx.shape(0).rank() == 2) s.dims[0] = ctx.shape(0).dims[0];
  s.dims[1] = ir::Dim(p.sample_size);
  ctx.out[0] = ir::Type::tensor(p.dtype, s);
  return Status::Ok();
}

Status infer_window(InferContext& ctx) {
  const DataType dt = parse_signal_window(ctx.node).output_datatype;
  std::vector<int64_t> n;
  ctx.out[0] = ir::Type::tensor(dt, const_ints(ctx.value(0), n) && n.size() == 1 ? ir::SymShape::of({n[0]}) : unknown_dims(1));
  return Status::Ok();
}

Status infer_mel(InferContext& ctx) {
  const DataType dt = parse_mel_weight_matrix(ctx.node).output_datatype;
  ir::SymShape s = unknown_dims(2);
  std::vector<int64_t> v;
  if (const_ints(ctx.value(1), v) && v.size() == 1) s.dims[0] = ir::Dim(v[0] / 2 + 1);
  if (const_ints(ctx.value(0), v) && v.size() == 1) s.dims[1] = ir::Dim(v[0]);
  ctx.out[0] = ir::Type::tensor(dt, s);
  return Status::Ok();
}

Status infer_dft(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  const ir::SymShape& in = ctx.shape(0);
  if (!in.known || in.rank() < 2) return Status::Ok();
  const DftParams p = parse_dft(ctx.node);
  const bool inverse = p.inverse, onesided = p.onesided;
  int64_t axis = p.axis;
  std::vector<int64_t> v;
  ir::SymShape out = in;
  out.dims.back() = ir::Dim(inverse && onesided ? 1 : 2);
  if (p.axis_input && ctx.has(2)) {
    if (!const_ints(ctx.value(2), v) || v.size() != 1) {
      for (int i = 0; i + 1 < out.rank(); ++i) out.dims[i] = ir::Dim();
      ctx.out[0].shape = out;
      return Status::Ok();
    }
    axis = v[0];
  }
  if (!normalize_axis(axis, in.rank())) return ctx.error("axis out of range");
  ir::Dim len = in.dims[axis];
  if (ctx.has(1)) len = const_ints(ctx.value(1), v) && v.size() == 1 ? ir::Dim(v[0]) : ir::Dim();
  else if (inverse && onesided) len = len.is_static() ? ir::Dim(2 * (len.value - 1)) : ir::Dim();
  if (!inverse && onesided) len = len.is_static() ? ir::Dim(len.value / 2 + 1) : ir::Dim();
  out.dims[axis] = len;
  ctx.out[0].shape = out;
  return Status::Ok();
}

Status infer_stft(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0), unknown_dims(4));
  const ir::SymShape& in = ctx.shape(0);
  if (in.known && in.rank() == 3) ctx.out[0].shape.dims[0] = in.dims[0];
  ctx.out[0].shape.dims[3] = ir::Dim(2);
  std::vector<int64_t> step, fl;
  int64_t flen = -1;
  if (ctx.has(2) && ctx.shape(2).known && ctx.shape(2).rank() == 1 && ctx.shape(2).dims[0].is_static()) flen = ctx.shape(2).dims[0].value;
  if (ctx.has(3) && const_ints(ctx.value(3), fl) && fl.size() == 1) flen = fl[0];
  if (flen > 0) {
    ctx.out[0].shape.dims[2] = ir::Dim(parse_stft(ctx.node).onesided ? flen / 2 + 1 : flen);
    if (in.known && in.rank() == 3 && in.dims[1].is_static() && const_ints(ctx.value(1), step) && step.size() == 1 && step[0] > 0)
      ctx.out[0].shape.dims[1] = ir::Dim((in.dims[1].value - flen) / step[0] + 1);
  }
  return Status::Ok();
}

Status infer_string_same_shape(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.node.op_type == "RegexFullMatch" ? DataType::kBool : DataType::kString, ctx.shape(0));
  return Status::Ok();
}

Status infer_string_normalizer(InferContext& ctx) {
  ctx.out[0] = ir::Type::tensor(DataType::kString);
  if (ctx.has(0) && ctx.shape(0).known) {
    ctx.out[0].shape = unknown_dims(ctx.shape(0).rank());
    if (ctx.shape(0).rank() == 2) ctx.out[0].shape.dims[0] = ir::Dim(1);
  }
  return Status::Ok();
}

Status infer_string_concat(InferContext& ctx) {
  if (!ctx.has(0) || !ctx.has(1)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(DataType::kString, broadcast_sym(ctx.shape(0), ctx.shape(1)));
  return Status::Ok();
}

Status infer_string_split(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  const ir::SymShape& in = ctx.shape(0);
  ctx.out[0] = ir::Type::tensor(DataType::kString);
  if (in.known) {
    ctx.out[0].shape = in;
    ctx.out[0].shape.dims.push_back(ir::Dim());
  }
  if (ctx.out.size() > 1) ctx.out[1] = ir::Type::tensor(DataType::kInt64, in);
  return Status::Ok();
}

Status infer_nms(InferContext& ctx) {
  ir::SymShape s = unknown_dims(2);
  s.dims[1] = ir::Dim(3);
  ctx.out[0] = ir::Type::tensor(DataType::kInt64, s);
  return Status::Ok();
}

Status infer_det(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  const ir::SymShape& in = ctx.shape(0);
  if (in.known && in.rank() >= 2)
    ctx.out[0].shape = ir::SymShape(std::vector<ir::Dim>(in.dims.begin(), in.dims.end() - 2));
  return Status::Ok();
}

}  // namespace

void add_misc_ops(std::vector<OpDef>& t) {
  t.push_back({"Resize", "", 10, infer_resize});
  t.push_back({"Upsample", "", 7, infer_resize});
  t.push_back({"Einsum", "", 12, infer_einsum});
  t.push_back({"Unique", "", 11, infer_unique});
  t.push_back({"RandomNormal", "", 1, infer_random});
  t.push_back({"RandomUniform", "", 1, infer_random});
  t.push_back({"RandomNormalLike", "", 1, infer_random});
  t.push_back({"RandomUniformLike", "", 1, infer_random});
  t.push_back({"Bernoulli", "", 15, infer_bernoulli});
  t.push_back({"Multinomial", "", 7, infer_multinomial});
  t.push_back({"DFT", "", 17, infer_dft});
  t.push_back({"STFT", "", 17, infer_stft});
  t.push_back({"HannWindow", "", 17, infer_window});
  t.push_back({"HammingWindow", "", 17, infer_window});
  t.push_back({"BlackmanWindow", "", 17, infer_window});
  t.push_back({"MelWeightMatrix", "", 17, infer_mel});
  t.push_back({"StringNormalizer", "", 10, infer_string_normalizer});
  t.push_back({"StringConcat", "", 20, infer_string_concat});
  t.push_back({"StringSplit", "", 20, infer_string_split});
  t.push_back({"RegexFullMatch", "", 20, infer_string_same_shape});
  t.push_back({"NonMaxSuppression", "", 10, infer_nms});
  t.push_back({"Det", "", 11, infer_det});
}

}  // namespace kiln::ops
