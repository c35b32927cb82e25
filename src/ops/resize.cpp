#include "ops/resize.h"

#include <algorithm>
#include <cmath>

#include "ir/float_types.h"
#include "ops/op_table.h"
#include "ops/shape_infer_util.h"
#include "util/checked.h"

namespace kiln::ops {

Expected<ResizeParams> parse_resize(const ir::Node& n) {
  ResizeParams p;
  resize::Coef& c = p.coef;
  const std::string mode = n.attr_string("mode", "nearest");
  if (mode == "nearest") c.mode = resize::kNearest;
  else if (mode == "linear" || mode == "bilinear") c.mode = resize::kLinear;
  else if (mode == "cubic") c.mode = resize::kCubic;
  else return invalid_model(n.describe() + ": unknown mode '" + mode + "'");
  if (n.op_type == "Upsample" || n.opset < 11) {
    c.ctm = resize::kAsymmetric;
    c.nearest = n.op_type == "Upsample" ? resize::kFloor : resize::kSimple;
    p.roi_input = -1;
    p.sizes_input = -1;
    p.scales_input = n.op_type == "Upsample" && n.opset < 9 ? -1 : 1;
    if (p.scales_input < 0) p.scales_attr = n.attr_floats("scales");
    return p;
  }
  const std::string ctm = n.attr_string("coordinate_transformation_mode", "half_pixel");
  if (ctm == "half_pixel") c.ctm = resize::kHalfPixel;
  else if (ctm == "half_pixel_symmetric") c.ctm = resize::kHalfPixelSymmetric;
  else if (ctm == "pytorch_half_pixel") c.ctm = resize::kPytorchHalfPixel;
  else if (ctm == "align_corners") c.ctm = resize::kAlignCorners;
  else if (ctm == "asymmetric") c.ctm = resize::kAsymmetric;
  else if (ctm == "tf_crop_and_resize") c.ctm = resize::kTfCropAndResize;
  else if (ctm == "tf_half_pixel_for_nn" && n.opset < 13) c.ctm = resize::kHalfPixel;  // opset 11 only
  else return invalid_model(n.describe() + ": unknown coordinate_transformation_mode '" + ctm + "'");
  const std::string nm = n.attr_string("nearest_mode", "round_prefer_floor");
  if (nm == "round_prefer_floor") c.nearest = resize::kRoundPreferFloor;
  else if (nm == "round_prefer_ceil") c.nearest = resize::kRoundPreferCeil;
  else if (nm == "floor") c.nearest = resize::kFloor;
  else if (nm == "ceil") c.nearest = resize::kCeil;
  else return invalid_model(n.describe() + ": unknown nearest_mode '" + nm + "'");
  const std::string kp = n.attr_string("keep_aspect_ratio_policy", "stretch");
  if (kp == "not_larger") p.aspect = ResizeParams::Aspect::kNotLarger;
  else if (kp == "not_smaller") p.aspect = ResizeParams::Aspect::kNotSmaller;
  else if (kp != "stretch") return invalid_model(n.describe() + ": unknown keep_aspect_ratio_policy '" + kp + "'");
  c.cubic_a = n.attr_float("cubic_coeff_a", -0.75f);
  c.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
  c.antialias = n.attr_int("antialias", 0) != 0 && c.mode != resize::kNearest;
  p.extrapolation = n.attr_float("extrapolation_value", 0.f);
  p.axes = n.attr_ints("axes");
  return p;
}

namespace {

// The geometry from the values given for scales, sizes and roi (empty when absent).
std::string geometry(const ResizeParams& p, const Shape& in, const std::vector<double>& given_scales_in,
                     const std::vector<int64_t>& sizes, const std::vector<double>& given_roi, ResizeGeometry* g) {
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes = p.axes;
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  for (int64_t& a : axes)
    if (!normalize_axis(a, r)) return "axes out of range";
  const size_t na = axes.size();
  std::vector<double> given_scales = given_scales_in;
  if (!p.scales_attr.empty()) given_scales.assign(p.scales_attr.begin(), p.scales_attr.end());
  std::vector<double> scales(r, 1.0), roi(2 * r);
  for (int64_t i = 0; i < r; ++i) roi[r + i] = 1.0;
  Shape out = in;
  if (given_scales.empty() == sizes.empty()) return "exactly one of scales and sizes must be given";
  if (!given_roi.empty()) {
    if (given_roi.size() != 2 * na) return "roi must have 2 * (number of axes) values";
    for (size_t i = 0; i < na; ++i) {
      roi[axes[i]] = given_roi[i];
      roi[r + axes[i]] = given_roi[na + i];
    }
  }
  if (!given_scales.empty()) {
    if (given_scales.size() != na) return "scales must have one value per resized axis";
    for (size_t i = 0; i < na; ++i) {
      if (!(given_scales[i] > 0)) return "scales must be positive";
      scales[axes[i]] = given_scales[i];
      if (!count_from_double(given_scales[i] * static_cast<double>(in[axes[i]]), &out[axes[i]]))
        return "scales give an output size that is not a finite count";
    }
  } else {
    if (sizes.size() != na) return "sizes must have one value per resized axis";
    for (size_t i = 0; i < na; ++i) {
      if (sizes[i] < 0) return "sizes must be non-negative";
      scales[axes[i]] = in[axes[i]] ? static_cast<double>(sizes[i]) / in[axes[i]] : 1.0;
      out[axes[i]] = sizes[i];
    }
    if (p.aspect != ResizeParams::Aspect::kStretch) {
      const bool not_larger = p.aspect == ResizeParams::Aspect::kNotLarger;
      double s = not_larger ? INFINITY : 0;
      for (int64_t a : axes) s = not_larger ? std::min(s, scales[a]) : std::max(s, scales[a]);
      for (int64_t a : axes) {
        scales[a] = s;
        if (!count_from_double(s * static_cast<double>(in[a]) + 0.5, &out[a]))
          return "sizes give an output size that is not a finite count";
      }
    }
  }
  g->out = out;
  g->axes.assign(r, resize::Axis{});
  g->resized.assign(r, 0);
  for (int64_t a = 0; a < r; ++a) {
    g->axes[a] = resize::Axis{in[a], out[a], scales[a], roi[a], roi[r + a]};
    const bool default_roi = std::fabs(roi[a]) < 1e-9 && std::fabs(roi[r + a] - 1) < 1e-9;
    g->resized[a] = !(std::fabs(scales[a] - 1) < 1e-9 && out[a] == in[a] &&
                      (p.coef.ctm != resize::kTfCropAndResize || default_roi));
  }
  return "";
}


bool read_int64s(const Tensor& t, std::vector<int64_t>& out) {
  if (t.dtype() == DataType::kInt64) out.assign(t.data<int64_t>(), t.data<int64_t>() + t.numel());
  else if (t.dtype() == DataType::kInt32) out.assign(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  else return false;
  return true;
}

}  // namespace

// A host tensor's values as doubles (any numeric type); false for other types.
bool read_doubles(const Tensor& t, std::vector<double>& out) {
  const int64_t n = t.numel();
  out.resize(static_cast<size_t>(n));
  auto copy = [&](auto* p) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(p[i]);
    return true;
  };
  switch (t.dtype()) {
    case DataType::kFloat32: return copy(t.data<float>());
    case DataType::kFloat64: return copy(t.data<double>());
    case DataType::kFloat16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(t.data<uint16_t>()[i]);
      return true;
    case DataType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(t.data<uint16_t>()[i]);
      return true;
    case DataType::kInt8: return copy(t.data<int8_t>());
    case DataType::kInt16: return copy(t.data<int16_t>());
    case DataType::kInt32: return copy(t.data<int32_t>());
    case DataType::kInt64: return copy(t.data<int64_t>());
    case DataType::kUInt8: return copy(t.data<uint8_t>());
    case DataType::kUInt16: return copy(t.data<uint16_t>());
    case DataType::kUInt32: return copy(t.data<uint32_t>());
    case DataType::kUInt64: return copy(t.data<uint64_t>());
    case DataType::kBool: return copy(t.data<bool>());
    case DataType::kFloat8E4M3FN:
      for (int64_t i = 0; i < n; ++i) out[i] = mini_to_f32(static_cast<const uint8_t*>(t.raw())[i], MiniFloat::kE4M3FN);
      return true;
    default: return false;
  }
}

std::string resize_geometry(const ResizeParams& p, const Shape& in, const std::vector<const Tensor*>& inputs,
                            ResizeGeometry* g) {
  auto given = [&](int i) -> const Tensor* {
    if (i < 0 || static_cast<size_t>(i) >= inputs.size() || !inputs[i] || inputs[i]->numel() == 0) return nullptr;
    return inputs[i];
  };
  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  if (const Tensor* t = given(p.scales_input); t && !read_doubles(*t, scales)) return "scales must be float";
  if (const Tensor* t = given(p.sizes_input); t && !read_int64s(*t, sizes)) return "sizes must be int64";
  if (const Tensor* t = given(p.roi_input); t && !read_doubles(*t, roi)) return "roi must be float";
  return geometry(p, in, scales, sizes, roi, g);
}

}  // namespace kiln::ops
