// ops/grid_math.h — GridSample's per-dimension sampling rule, one definition for the CPU kernel and the
// CUDA kernel (compiled by nvcc as C++17 too: no kiln header here).
//
// A normalized coordinate g in [-1, 1] maps to pixel space (align_corners or not); outside the valid
// range it is clamped (border) or reflected (reflection); then 1 (nearest), 2 (linear) or 4 (cubic)
// taps are read, each tap outside the image reading zero, the clamped pixel or the reflected pixel
// according to the padding mode — onnx's reference rules.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define KILN_GRID_HD __host__ __device__
#else
#define KILN_GRID_HD
#endif

namespace kiln::grid {

enum Mode : int { kNearest = 0, kLinear = 1, kCubic = 2 };
enum Pad : int { kZeros = 0, kBorder = 1, kReflection = 2 };

struct Rule {
  int mode = kLinear, pad = kZeros;
  bool align = false;
};

// One tap along one dimension: the pixel index to read (-1 = zero) and its weight.
struct Tap {
  int64_t index;
  double weight;
};

KILN_GRID_HD inline double reflect(double x, double lo, double hi) {
  const double rng = hi - lo;
  if (rng <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const auto n = static_cast<int64_t>(dx / rng);
    const double r = dx - static_cast<double>(n) * rng;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const auto n = static_cast<int64_t>(dx / rng);
    const double r = dx - static_cast<double>(n) * rng;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

KILN_GRID_HD inline void cubic_coeffs(double t, double c[4]) {
  const double A = -0.75, x = std::fabs(t);
  c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
  c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
  c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = ((A * (2 - x) - 5 * A) * (2 - x) + 8 * A) * (2 - x) - 4 * A;
}

KILN_GRID_HD inline int64_t clamp_index(int64_t i, int64_t size) { return i < 0 ? 0 : i > size - 1 ? size - 1 : i; }

KILN_GRID_HD inline int64_t tap_index(int64_t i, int64_t size, int pad, double lo, double hi) {
  switch (pad) {
    case kBorder: return clamp_index(i, size);
    case kReflection: return clamp_index(static_cast<int64_t>(reflect(static_cast<double>(i), lo, hi)), size);
    default: return i >= 0 && i < size ? i : -1;
  }
}

// The taps along one dimension of `size` pixels for normalized coordinate g; returns how many.
KILN_GRID_HD inline int dim_taps(const Rule& a, double g, int64_t size, Tap taps[4]) {
  const double s = static_cast<double>(size);
  double x = a.align ? (g + 1) / 2.0 * (s - 1) : ((g + 1) * s - 1) / 2.0;
  const double lo = a.align ? 0.0 : -0.5, hi = a.align ? s - 1 : s - 0.5;
  // A NaN coordinate is taken as just before the first pixel, and one past ±2^52 (±inf too) as ±2^52,
  // where a double has no fraction left: the pixel indexes below, and reflect()'s count, stay in int64.
  const double far = 4503599627370496.0;
  x = std::isnan(x) ? lo - 4 : x < -far ? -far : x > far ? far : x;
  if (a.mode == kNearest) x = std::rint(x);  // halves to even, as numpy's rint
  if (x < lo || x > hi) {
    if (a.pad == kBorder) x = x < 0 ? 0.0 : x > s - 1 ? s - 1 : x;
    else if (a.pad == kReflection) x = reflect(x, lo, hi);
  }
  if (a.mode == kNearest) {
    taps[0] = {tap_index(static_cast<int64_t>(x), size, a.pad, lo, hi), 1.0};
    return 1;
  }
  const double f = std::floor(x);
  const auto x0 = static_cast<int64_t>(f);
  const double t = x - f;
  if (a.mode == kLinear) {
    taps[0] = {tap_index(x0, size, a.pad, lo, hi), 1 - t};
    taps[1] = {tap_index(x0 + 1, size, a.pad, lo, hi), t};
    return 2;
  }
  double c[4];
  cubic_coeffs(t, c);
  for (int i = 0; i < 4; ++i) taps[i] = {tap_index(x0 - 1 + i, size, a.pad, lo, hi), c[i]};
  return 4;
}

// AffineGrid's base grid: coordinate i of n evenly spaced in [-1, 1].
KILN_GRID_HD inline double base_coord(int64_t i, int64_t n, bool align) {
  if (align) return n <= 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1);
  return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n);
}

}  // namespace kiln::grid
