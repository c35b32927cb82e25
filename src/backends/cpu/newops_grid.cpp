// backends/cpu/newops_grid.cpp — GridSample (opset 16, N-D from 20) and AffineGrid (opset 20) on
// the CPU. Computed in float (double for float64).
//
// GridSample follows the reference's per-dimension rules: grid holds normalized coordinates in
// (x, y, z) order (the last spatial dim first); each is mapped to pixel space, then clamped
// (border) or reflected (reflection) when outside the valid range, then interpolated with 1
// (nearest), 2 (linear) or 4 (cubic) taps per dimension; taps outside the image read zero, the
// clamped pixel, or the reflected pixel according to padding_mode.
#include <cmath>

#include "backends/cpu/nn_common.h"

namespace kiln::cpu {
namespace {

using nn::ReadAs;
using nn::WriteAs;

enum class GsMode { kNearest, kLinear, kCubic };
enum class GsPad { kZeros, kBorder, kReflection };

struct GsAttrs {
  GsMode mode = GsMode::kLinear;
  GsPad pad = GsPad::kZeros;
  bool align = false;
};

double reflect(double x, double lo, double hi) {
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

void cubic_coeffs(double t, double c[4]) {
  const double A = -0.75, x = std::fabs(t);
  c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
  c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
  c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = ((A * (2 - x) - 5 * A) * (2 - x) + 8 * A) * (2 - x) - 4 * A;
}

// One tap along one dimension: the pixel index to read (-1 = zero) and its weight.
struct Tap {
  int64_t index;
  double weight;
};

int64_t tap_index(int64_t i, int64_t size, GsPad pad, double lo, double hi) {
  switch (pad) {
    case GsPad::kZeros: return i >= 0 && i < size ? i : -1;
    case GsPad::kBorder: return std::clamp<int64_t>(i, 0, size - 1);
    case GsPad::kReflection: {
      const auto r = static_cast<int64_t>(reflect(static_cast<double>(i), lo, hi));
      return std::clamp<int64_t>(r, 0, size - 1);
    }
  }
  return -1;
}

// The taps along one dimension for normalized coordinate g.
int dim_taps(const GsAttrs& a, double g, int64_t size, Tap taps[4]) {
  double x = a.align ? (g + 1) / 2.0 * static_cast<double>(size - 1) : ((g + 1) * static_cast<double>(size) - 1) / 2.0;
  const double lo = a.align ? 0.0 : -0.5, hi = a.align ? static_cast<double>(size - 1) : static_cast<double>(size) - 0.5;
  if (a.mode == GsMode::kNearest) x = std::nearbyint(x);
  if (x < lo || x > hi) {
    if (a.pad == GsPad::kBorder) x = std::clamp(x, 0.0, static_cast<double>(size - 1));
    else if (a.pad == GsPad::kReflection) x = reflect(x, lo, hi);
  }
  if (a.mode == GsMode::kNearest) {
    taps[0] = {tap_index(static_cast<int64_t>(x), size, a.pad, lo, hi), 1.0};
    return 1;
  }
  const double f = std::floor(x);
  const auto x0 = static_cast<int64_t>(f);
  const double t = x - f;
  if (a.mode == GsMode::kLinear) {
    taps[0] = {tap_index(x0, size, a.pad, lo, hi), 1 - t};
    taps[1] = {tap_index(x0 + 1, size, a.pad, lo, hi), t};
    return 2;
  }
  double c[4];
  cubic_coeffs(t, c);
  for (int i = 0; i < 4; ++i) taps[i] = {tap_index(x0 - 1 + i, size, a.pad, lo, hi), c[i]};
  return 4;
}

template <typename C>
Status grid_sample(KernelContext& ctx, const GsAttrs& a) {
  const Tensor &x = ctx.input(0), &grid = ctx.input(1);
  const int r = x.rank() - 2;
  if (r < 1) return ctx.error("X must be (N, C, D1, ..., Dr)");
  if (grid.rank() != r + 2 || grid.dim(0) != x.dim(0) || grid.dim(-1) != r)
    return ctx.error("grid must be (N, D1_out, ..., Dr_out, " + std::to_string(r) + ")");
  const int64_t N = x.dim(0), Ch = x.dim(1);
  Shape yshape{N, Ch};
  int64_t out_sp = 1, in_sp = 1;
  for (int i = 0; i < r; ++i) {
    yshape.push_back(grid.dim(1 + i));
    out_sp *= grid.dim(1 + i);
    in_sp *= x.dim(2 + i);
  }
  Tensor& y = ctx.output(0, x.dtype(), yshape);
  if (y.numel() == 0) return Status::Ok();
  if (in_sp == 0) return ctx.error("X has an empty spatial dimension");
  ReadAs<C> xv(x), gv(grid);
  WriteAs<C> yw(y);
  std::vector<int64_t> stride(static_cast<size_t>(r));
  for (int i = r - 1, s = 1; i >= 0; --i) {
    stride[i] = s;
    s *= static_cast<int>(x.dim(2 + i));
  }
  parallel_for(N * out_sp, 16, [&](int64_t t0, int64_t t1) {
    std::vector<Tap> taps(static_cast<size_t>(r * 4));
    std::vector<int> ntaps(static_cast<size_t>(r));
    std::vector<int> odo(static_cast<size_t>(r));
    std::vector<double> acc(static_cast<size_t>(Ch));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / out_sp, p = t % out_sp;
      const C* g = gv.data() + t * r;
      for (int i = 0; i < r; ++i)
        ntaps[i] = dim_taps(a, static_cast<double>(g[r - 1 - i]), x.dim(2 + i), taps.data() + i * 4);
      std::fill(acc.begin(), acc.end(), 0.0);
      std::fill(odo.begin(), odo.end(), 0);
      const C* xn = xv.data() + n * Ch * in_sp;
      while (true) {  // every combination of one tap per dimension
        double w = 1;
        int64_t off = 0;
        for (int i = 0; i < r; ++i) {
          const Tap& tp = taps[i * 4 + odo[i]];
          w *= tp.weight;
          if (tp.index < 0) off = -1;
          if (off >= 0) off += tp.index * stride[i];
        }
        if (off >= 0 && w != 0)
          for (int64_t c = 0; c < Ch; ++c) acc[c] += w * static_cast<double>(xn[c * in_sp + off]);
        int i = r - 1;
        while (i >= 0 && ++odo[i] == ntaps[i]) odo[i--] = 0;
        if (i < 0) break;
      }
      for (int64_t c = 0; c < Ch; ++c) yw.data()[(n * Ch + c) * out_sp + p] = static_cast<C>(acc[c]);
    }
  });
  yw.commit();
  return Status::Ok();
}

// ---- AffineGrid: grid[n, (d,) h, w] = theta[n] @ (x, y, (z,) 1) over an evenly spaced base grid.
double base_coord(int64_t i, int64_t n, bool align) {
  if (align) return n <= 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1);
  return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n);
}

template <typename C>
Status affine_grid(KernelContext& ctx, bool align) {
  const Tensor &theta = ctx.input(0), &size = ctx.input(1);
  const int64_t ns = size.numel();
  if (ns != 4 && ns != 5) return ctx.error("size must be (N, C, H, W) or (N, C, D, H, W)");
  const int r = static_cast<int>(ns) - 2;
  std::vector<int64_t> sz;
  for (int64_t i = 0; i < ns; ++i) sz.push_back(nn::load_as<int64_t>(size, i));
  const int64_t N = sz[0];
  if (theta.shape() != Shape{N, r, r + 1}) return ctx.error("theta must be (N, " + std::to_string(r) + ", " + std::to_string(r + 1) + ")");
  for (int64_t v : sz)
    if (v < 0) return ctx.error("size must not be negative");
  Shape yshape{N};
  int64_t sp = 1;
  for (int i = 0; i < r; ++i) {
    yshape.push_back(sz[2 + i]);
    sp *= sz[2 + i];
  }
  yshape.push_back(r);
  ReadAs<C> tv(theta);
  Tensor& y = ctx.output(0, theta.dtype(), yshape);
  WriteAs<C> yw(y);
  parallel_for(N * sp, 256, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / sp;
      int64_t rem = t % sp;
      double pos[4];  // (x, y, z) order: the last spatial dim first, then 1
      for (int i = r - 1; i >= 0; --i) {
        const int64_t d = sz[2 + i];
        pos[r - 1 - i] = base_coord(rem % d, d, align);
        rem /= d;
      }
      pos[r] = 1.0;
      const C* th = tv.data() + n * r * (r + 1);
      for (int o = 0; o < r; ++o) {
        double v = 0;
        for (int k = 0; k <= r; ++k) v += static_cast<double>(th[o * (r + 1) + k]) * pos[k];
        yw.data()[t * r + o] = static_cast<C>(v);
      }
    }
  });
  yw.commit();
  return Status::Ok();
}

}  // namespace

void register_newops_grid(KernelRegistry& r) {
  auto real0 = [](const ir::Node& n) { return nn::require_real(n, 0); };
  r.add({"GridSample", "", 16, 1 << 30, "cpu.GridSample.any", real0, [](const ir::Node& n, KernelInit&) {
           GsAttrs a;
           const std::string mode = n.attr_string("mode", n.opset != 0 && n.opset < 20 ? "bilinear" : "linear");
           const std::string pad = n.attr_string("padding_mode", "zeros");
           a.align = n.attr_int("align_corners", 0) != 0;
           if (mode == "bilinear" || mode == "linear") a.mode = GsMode::kLinear;
           else if (mode == "bicubic" || mode == "cubic") a.mode = GsMode::kCubic;
           else if (mode == "nearest") a.mode = GsMode::kNearest;
           else return Expected<KernelPtr>(invalid_argument(n.describe() + ": unknown mode '" + mode + "'"));
           if (pad == "zeros") a.pad = GsPad::kZeros;
           else if (pad == "border") a.pad = GsPad::kBorder;
           else if (pad == "reflection") a.pad = GsPad::kReflection;
           else return Expected<KernelPtr>(invalid_argument(n.describe() + ": unknown padding_mode '" + pad + "'"));
           return make_kernel([a](KernelContext& ctx) {
             return ctx.input(0).dtype() == DataType::kFloat64 ? grid_sample<double>(ctx, a) : grid_sample<float>(ctx, a);
           });
         }});
  r.add({"AffineGrid", "", 20, 1 << 30, "cpu.AffineGrid.any", real0, [](const ir::Node& n, KernelInit&) {
           const bool align = n.attr_int("align_corners", 0) != 0;
           return make_kernel([align](KernelContext& ctx) {
             return ctx.input(0).dtype() == DataType::kFloat64 ? affine_grid<double>(ctx, align) : affine_grid<float>(ctx, align);
           });
         }});
}

}  // namespace kiln::cpu
