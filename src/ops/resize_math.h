// ops/resize_math.h — Resize's coordinate mapping and interpolation taps, one definition for the CPU
// kernel and the CUDA kernel (compiled by nvcc as C++17 too: no kiln header here).
//
// Resize is separable: output index j of a resized axis reads a few input indices of that axis
// (its taps) with weights. for_each_tap() produces them the way onnx's reference does (edge
// indices clamped, exclude_outside, tf_crop_and_resize extrapolation, antialias).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define KILN_RESIZE_HD __host__ __device__
#else
#define KILN_RESIZE_HD
#endif

namespace kiln::resize {

enum Mode : int { kNearest = 0, kLinear = 1, kCubic = 2 };
enum Ctm : int { kHalfPixel, kHalfPixelSymmetric, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfCropAndResize };
enum NearestMode : int { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };

// How taps are made (the op's attributes).
struct Coef {
  int mode = kNearest, ctm = kHalfPixel, nearest = kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false, antialias = false;
};

// One resized axis: its input and output sizes, scale and region of interest.
struct Axis {
  int64_t in = 1, out = 1;
  double scale = 1, roi0 = 0, roi1 = 1;
};

KILN_RESIZE_HD inline double cubic_weight(double x, double a) {
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

// The input coordinate output index y maps to.
KILN_RESIZE_HD inline double source_coord(int ctm, double y, const Axis& ax) {
  const double in = static_cast<double>(ax.in), out_f = ax.scale * in;
  switch (ctm) {
    case kAlignCorners: return out_f == 1 ? 0.0 : y * (in - 1) / (out_f - 1);
    case kAsymmetric: return y / ax.scale;
    case kTfCropAndResize: {
      const double x = out_f == 1 ? (ax.roi1 - ax.roi0) * (in - 1) / 2 : y * (ax.roi1 - ax.roi0) * (in - 1) / (out_f - 1);
      return x + ax.roi0 * (in - 1);
    }
    case kPytorchHalfPixel: return out_f == 1 ? -0.5 : (y + 0.5) / ax.scale - 0.5;
    case kHalfPixelSymmetric: {
      const double adjustment = static_cast<double>(ax.out) / out_f;
      const double offset = in / 2.0 * (1 - adjustment);
      return offset + (y + 0.5) / ax.scale - 0.5;
    }
    default: return (y + 0.5) / ax.scale - 0.5;  // half_pixel
  }
}

// The number of taps an output index has at most (no antialias): 1 nearest, 2 linear, 4 cubic.
KILN_RESIZE_HD inline int max_taps(const Coef& c) { return c.mode == kNearest ? 1 : c.mode == kLinear ? 2 : 4; }

// Calls f(input index, weight) for each tap of output index j (zero weights skipped); returns
// whether j lies outside the input under tf_crop_and_resize (the output is then the extrapolation
// value, whatever the taps).
template <typename F>
KILN_RESIZE_HD bool for_each_tap(const Coef& c, const Axis& ax, int64_t j, F& f) {
  double x = source_coord(c.ctm, static_cast<double>(j), ax);
  const bool extrapolate = c.ctm == kTfCropAndResize && (x < 0 || x > static_cast<double>(ax.in - 1));
  // A hostile roi or scale can put x past int64's range, or make it NaN: held to ±2^52, where every
  // tap clamps to the input's edge as it would from farther out (NaN takes the low edge).
  if (!(x > -0x1p52)) x = -0x1p52;
  if (x > 0x1p52) x = 0x1p52;
  const double fl = std::floor(x);
  const bool integral = x == fl;
  // The reference's convention: an integral coordinate has ratio 1 relative to x - 1.
  const int64_t base = integral ? static_cast<int64_t>(fl) - 1 : static_cast<int64_t>(fl);
  const double ratio = integral ? 1.0 : x - fl;
  const auto clamp = [&](int64_t i) { return i < 0 ? int64_t{0} : i > ax.in - 1 ? ax.in - 1 : i; };
  if (c.mode == kNearest) {
    bool up = false;
    switch (c.nearest) {
      case kRoundPreferFloor: up = ratio > 0.5; break;
      case kRoundPreferCeil: up = ratio >= 0.5; break;
      case kFloor: up = integral; break;
      case kCeil: up = true; break;
      default: up = integral || ax.scale < 1; break;  // kSimple (opset 10)
    }
    f(clamp(up ? base + 1 : base), 1.0);
    return extrapolate;
  }
  const double support = c.mode == kLinear ? 1 : 2;
  const double s = c.antialias && ax.scale < 1 ? ax.scale : 1.0;
  const int64_t start = static_cast<int64_t>(std::floor(-support / s) + 1);
  const int64_t n = 2 - 2 * start;
  const auto weight = [&](int64_t i) {
    const double arg = s * (static_cast<double>(start + i) - ratio);
    double w = c.mode == kLinear ? 1 - std::fabs(arg) : cubic_weight(arg, c.cubic_a);
    if (c.mode == kLinear) w = w < 0 ? 0 : w > 1 ? 1 : w;
    const int64_t src = base + start + i;
    if (c.exclude_outside && (src < 0 || src >= ax.in)) w = 0;
    return w;
  };
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += weight(i);
  if (sum == 0) sum = 1;
  const bool normalize = c.antialias || c.exclude_outside;
  for (int64_t i = 0; i < n; ++i) {
    const double w = weight(i);
    if (w != 0) f(clamp(base + start + i), normalize ? w / sum : w);
  }
  return extrapolate;
}

}  // namespace kiln::resize
