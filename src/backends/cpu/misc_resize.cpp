// backends/cpu/misc_resize.cpp — Resize (opset 10..19+) and Upsample (7..9) on the CPU.
//
// Resize is separable: each resized axis gets a table of taps (input index, weight) per output
// index, then one pass per axis mixes rows of a double buffer. That is exactly the onnx reference's
// axis-by-axis formulation, so edge handling (edge padding, exclude_outside, tf_crop_and_resize
// extrapolation) matches it.
#include <algorithm>
#include <cmath>

#include "backends/cpu/misc_kernels.h"
#include "backends/cpu/numeric.h"
#include "util/checked.h"

namespace kiln::cpu {
namespace {

enum class Mode { kNearest, kLinear, kCubic };
enum class Ctm { kHalfPixel, kHalfPixelSymmetric, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfCropAndResize };
enum class Nearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };
enum class Aspect { kStretch, kNotLarger, kNotSmaller };

struct ResizeAttrs {
  Mode mode = Mode::kNearest;
  Ctm ctm = Ctm::kHalfPixel;
  Nearest nearest = Nearest::kRoundPreferFloor;
  Aspect aspect = Aspect::kStretch;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
  double extrapolation = 0;
  std::vector<int64_t> axes;
  // Where the inputs are: opset 10 / Upsample-9 have (X, scales); 11+ have (X, roi, scales, sizes).
  int roi_input = 1, scales_input = 2, sizes_input = 3;
  std::vector<float> scales_attr;  // Upsample-7
};

struct AxisTaps {
  std::vector<int64_t> first;  // output j uses taps [first[j], first[j+1])
  std::vector<int64_t> idx;
  std::vector<double> w;
  std::vector<char> extrapolate;
};

double cubic_w(double x, double a) {
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

double source_coord(const ResizeAttrs& at, double y, double scale, int64_t in, int64_t out_int, double roi0, double roi1) {
  const double out_f = scale * static_cast<double>(in);
  switch (at.ctm) {
    case Ctm::kAlignCorners: return out_f == 1 ? 0.0 : y * (in - 1) / (out_f - 1);
    case Ctm::kAsymmetric: return y / scale;
    case Ctm::kTfCropAndResize: {
      const double x = out_f == 1 ? (roi1 - roi0) * (in - 1) / 2 : y * (roi1 - roi0) * (in - 1) / (out_f - 1);
      return x + roi0 * (in - 1);
    }
    case Ctm::kPytorchHalfPixel: return out_f == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
    case Ctm::kHalfPixel: return (y + 0.5) / scale - 0.5;
    case Ctm::kHalfPixelSymmetric: {
      const double adjustment = static_cast<double>(out_int) / out_f;
      const double offset = in / 2.0 * (1 - adjustment);
      return offset + (y + 0.5) / scale - 0.5;
    }
  }
  return 0;
}

AxisTaps make_taps(const ResizeAttrs& at, int64_t in, int64_t out, double scale, double roi0, double roi1) {
  AxisTaps t;
  t.first.push_back(0);
  for (int64_t j = 0; j < out; ++j) {
    const double x = source_coord(at, static_cast<double>(j), scale, in, out, roi0, roi1);
    t.extrapolate.push_back(at.ctm == Ctm::kTfCropAndResize && (x < 0 || x > in - 1));
    const double fl = std::floor(x);
    const bool integral = x == fl;
    // The reference's convention: an integral coordinate has ratio 1 relative to x - 1.
    const int64_t base = integral ? static_cast<int64_t>(fl) - 1 : static_cast<int64_t>(fl);
    const double ratio = integral ? 1.0 : x - fl;
    auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    if (at.mode == Mode::kNearest) {
      bool up;
      switch (at.nearest) {
        case Nearest::kRoundPreferFloor: up = ratio > 0.5; break;
        case Nearest::kRoundPreferCeil: up = ratio >= 0.5; break;
        case Nearest::kFloor: up = integral; break;
        case Nearest::kCeil: up = true; break;
        case Nearest::kSimple: up = integral || scale < 1; break;
      }
      t.idx.push_back(clamp(up ? base + 1 : base));
      t.w.push_back(1);
    } else {
      const double support = at.mode == Mode::kLinear ? 1 : 2;
      const double s = at.antialias ? std::min(scale, 1.0) : 1.0;
      const int64_t start = static_cast<int64_t>(std::floor(-support / s) + 1);
      const int64_t n = 2 - 2 * start;
      std::vector<double> c(n);
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double arg = s * (static_cast<double>(start + i) - ratio);
        c[i] = at.mode == Mode::kLinear ? std::clamp(1 - std::fabs(arg), 0.0, 1.0) : cubic_w(arg, at.cubic_a);
        const int64_t src = base + start + i;
        if (at.exclude_outside && (src < 0 || src >= in)) c[i] = 0;
        sum += c[i];
      }
      if (sum == 0) sum = 1;
      const bool normalize = at.antialias || at.exclude_outside;
      for (int64_t i = 0; i < n; ++i) {
        if (c[i] == 0) continue;
        t.idx.push_back(clamp(base + start + i));
        t.w.push_back(normalize ? c[i] / sum : c[i]);
      }
    }
    t.first.push_back(static_cast<int64_t>(t.idx.size()));
  }
  return t;
}

// One separable pass: (outer, in, inner) → (outer, out, inner).
std::vector<double> resize_pass(const std::vector<double>& src, int64_t outer, int64_t in, int64_t inner,
                                const AxisTaps& t, int64_t out, double extrapolation) {
  std::vector<double> dst(static_cast<size_t>(outer * out * inner));
  parallel_for(outer * out, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t oj = b; oj < e; ++oj) {
      const int64_t o = oj / out, j = oj % out;
      double* d = dst.data() + oj * inner;
      if (t.extrapolate[j]) {
        std::fill(d, d + inner, extrapolation);
        continue;
      }
      std::fill(d, d + inner, 0.0);
      for (int64_t k = t.first[j]; k < t.first[j + 1]; ++k) {
        const double* s = src.data() + (o * in + t.idx[k]) * inner;
        const double w = t.w[k];
        for (int64_t i = 0; i < inner; ++i) d[i] += w * s[i];
      }
    }
  });
  return dst;
}

template <typename T>
T store_rounded(double v) {
  if constexpr (Num<T>::is_float) return from_double<T>(v);
  else return from_double<T>(std::nearbyint(v));
}

Status run_resize(KernelContext& ctx, const ResizeAttrs& at) {
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  const Shape& in = x.shape();
  std::vector<int64_t> axes = at.axes;
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  for (int64_t& a : axes)
    if (!ops_normalize_axis(a, r)) return ctx.error("axes out of range");
  const size_t na = axes.size();

  std::vector<double> scales(r, 1.0), roi(2 * r);
  for (int64_t i = 0; i < r; ++i) roi[r + i] = 1.0;
  Shape out = in;
  std::vector<double> given_scales, given_roi;
  std::vector<int64_t> sizes;
  if (!at.scales_attr.empty()) given_scales.assign(at.scales_attr.begin(), at.scales_attr.end());
  if (at.scales_input >= 0 && ctx.has_input(at.scales_input) && ctx.input(at.scales_input).numel() > 0)
    if (!read_reals(ctx.input(at.scales_input), given_scales)) return ctx.error("scales must be float");
  if (at.sizes_input >= 0 && ctx.has_input(at.sizes_input) && ctx.input(at.sizes_input).numel() > 0)
    if (!read_ints(ctx.input(at.sizes_input), sizes)) return ctx.error("sizes must be int64");
  if (at.roi_input >= 0 && ctx.has_input(at.roi_input) && ctx.input(at.roi_input).numel() > 0)
    if (!read_reals(ctx.input(at.roi_input), given_roi)) return ctx.error("roi must be float");
  if (given_scales.empty() == sizes.empty()) return ctx.error("exactly one of scales and sizes must be given");
  if (!given_roi.empty()) {
    if (given_roi.size() != 2 * na) return ctx.error("roi must have 2 * (number of axes) values");
    for (size_t i = 0; i < na; ++i) {
      roi[axes[i]] = given_roi[i];
      roi[r + axes[i]] = given_roi[na + i];
    }
  }
  if (!given_scales.empty()) {
    if (given_scales.size() != na) return ctx.error("scales must have one value per resized axis");
    for (size_t i = 0; i < na; ++i) {
      if (!(given_scales[i] > 0)) return ctx.error("scales must be positive");
      scales[axes[i]] = given_scales[i];
      if (!count_from_double(given_scales[i] * static_cast<double>(in[axes[i]]), &out[axes[i]]))
        return ctx.error("scales give an output size that is not a finite count");
    }
  } else {
    if (sizes.size() != na) return ctx.error("sizes must have one value per resized axis");
    for (size_t i = 0; i < na; ++i) {
      if (sizes[i] < 0) return ctx.error("sizes must be non-negative");
      scales[axes[i]] = in[axes[i]] ? static_cast<double>(sizes[i]) / in[axes[i]] : 1.0;
      out[axes[i]] = sizes[i];
    }
    if (at.aspect != Aspect::kStretch) {
      double s = at.aspect == Aspect::kNotLarger ? INFINITY : 0;
      for (int64_t a : axes) s = at.aspect == Aspect::kNotLarger ? std::min(s, scales[a]) : std::max(s, scales[a]);
      for (int64_t a : axes) {
        scales[a] = s;
        if (!count_from_double(s * static_cast<double>(in[a]) + 0.5, &out[a]))
          return ctx.error("sizes give an output size that is not a finite count");
      }
    }
  }
  Tensor& y = ctx.output(0, x.dtype(), out);
  if (y.numel() == 0) return Status::Ok();
  if (x.numel() == 0) return ctx.error("cannot resize an empty input to a non-empty output");

  std::vector<double> buf;
  if (!read_reals(x, buf)) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
  Shape cur = in;
  for (int64_t a = 0; a < r; ++a) {
    const bool default_roi = std::fabs(roi[a]) < 1e-9 && std::fabs(roi[r + a] - 1) < 1e-9;
    if (std::fabs(scales[a] - 1) < 1e-9 && out[a] == in[a] && (at.ctm != Ctm::kTfCropAndResize || default_roi)) continue;
    const AxisTaps t = make_taps(at, in[a], out[a], scales[a], roi[a], roi[r + a]);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= cur[d];
    for (int64_t d = a + 1; d < r; ++d) inner *= cur[d];
    buf = resize_pass(buf, outer, cur[a], inner, t, out[a], at.extrapolation);
    cur[a] = out[a];
  }
  const bool ok = visit_numeric_f16(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* yp = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i) yp[i] = store_rounded<T>(buf[i]);
  });
  return ok ? Status::Ok() : ctx.error("unsupported dtype");
}

Expected<KernelPtr> create_resize(const ir::Node& n, KernelInit&) {
  ResizeAttrs at;
  const std::string mode = n.attr_string("mode", "nearest");
  if (mode == "nearest") at.mode = Mode::kNearest;
  else if (mode == "linear" || mode == "bilinear") at.mode = Mode::kLinear;
  else if (mode == "cubic") at.mode = Mode::kCubic;
  else return invalid_model(n.describe() + ": unknown mode '" + mode + "'");
  if (n.op_type == "Upsample" || n.opset < 11) {
    at.ctm = Ctm::kAsymmetric;
    at.nearest = n.op_type == "Upsample" ? Nearest::kFloor : Nearest::kSimple;
    at.roi_input = -1;
    at.sizes_input = -1;
    at.scales_input = n.op_type == "Upsample" && n.opset < 9 ? -1 : 1;
    if (at.scales_input < 0) at.scales_attr = n.attr_floats("scales");
  } else {
    const std::string ctm = n.attr_string("coordinate_transformation_mode", "half_pixel");
    if (ctm == "half_pixel") at.ctm = Ctm::kHalfPixel;
    else if (ctm == "half_pixel_symmetric") at.ctm = Ctm::kHalfPixelSymmetric;
    else if (ctm == "pytorch_half_pixel") at.ctm = Ctm::kPytorchHalfPixel;
    else if (ctm == "align_corners") at.ctm = Ctm::kAlignCorners;
    else if (ctm == "asymmetric") at.ctm = Ctm::kAsymmetric;
    else if (ctm == "tf_crop_and_resize") at.ctm = Ctm::kTfCropAndResize;
    else if (ctm == "tf_half_pixel_for_nn" && n.opset < 13) at.ctm = Ctm::kHalfPixel;  // opset 11 only
    else return invalid_model(n.describe() + ": unknown coordinate_transformation_mode '" + ctm + "'");
    const std::string nm = n.attr_string("nearest_mode", "round_prefer_floor");
    if (nm == "round_prefer_floor") at.nearest = Nearest::kRoundPreferFloor;
    else if (nm == "round_prefer_ceil") at.nearest = Nearest::kRoundPreferCeil;
    else if (nm == "floor") at.nearest = Nearest::kFloor;
    else if (nm == "ceil") at.nearest = Nearest::kCeil;
    else return invalid_model(n.describe() + ": unknown nearest_mode '" + nm + "'");
    const std::string kp = n.attr_string("keep_aspect_ratio_policy", "stretch");
    if (kp == "not_larger") at.aspect = Aspect::kNotLarger;
    else if (kp == "not_smaller") at.aspect = Aspect::kNotSmaller;
    else if (kp != "stretch") return invalid_model(n.describe() + ": unknown keep_aspect_ratio_policy '" + kp + "'");
    at.cubic_a = n.attr_float("cubic_coeff_a", -0.75f);
    at.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
    at.antialias = n.attr_int("antialias", 0) != 0 && at.mode != Mode::kNearest;
    at.extrapolation = n.attr_float("extrapolation_value", 0.f);
    at.axes = n.attr_ints("axes");
  }
  return make_kernel([at](KernelContext& ctx) { return run_resize(ctx, at); });
}

}  // namespace

void register_resize(KernelRegistry& r) {
  using D = DataType;
  auto check = [](const ir::Node& n) {
    return require_dtypes(n, 0, {D::kFloat32, D::kFloat64, D::kFloat16, D::kBFloat16, D::kInt8, D::kUInt8, D::kInt16,
                                 D::kUInt16, D::kInt32, D::kUInt32, D::kInt64, D::kUInt64});
  };
  r.add({"Resize", "", 10, 1 << 30, "cpu.Resize.any", check, create_resize});
  r.add({"Upsample", "", 7, 9, "cpu.Upsample.any", check, create_resize});
}

}  // namespace kiln::cpu
