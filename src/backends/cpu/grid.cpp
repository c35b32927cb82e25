// backends/cpu/grid.cpp — GridSample (opset 16, N-D from 20) and AffineGrid (opset 20) on
// the CPU. Computed in float (double for float64).
//
// GridSample: grid holds normalized coordinates in (x, y, z) order (the last spatial dim first);
// each dimension's taps come from ops/grid_math.h (shared with the CUDA kernel).
#include <cmath>

#include "backends/cpu/nn_common.h"
#include "ops/grid_math.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

using nn::ReadAs;
using nn::WriteAs;

using GsAttrs = grid::Rule;
using grid::Tap;
using grid::dim_taps;

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
using grid::base_coord;

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
  for (int i = 0; i < r; ++i) yshape.push_back(sz[2 + i]);
  yshape.push_back(r);
  // The sizes are data: their product may pass int64 (or the tensor limit) before a dim of 0 would make it empty.
  const std::string too_large = check_tensor_size(theta.dtype(), yshape);
  if (!too_large.empty()) return ctx.error(too_large);
  if (shape_numel(yshape) == 0) { ctx.output(0, theta.dtype(), yshape); return Status::Ok(); }  // the product below may overflow before its 0
  int64_t sp = 1;
  for (int i = 0; i < r; ++i) sp *= sz[2 + i];
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

void register_grid(KernelRegistry& r) {
  auto real0 = [](const ir::Node& n) { return nn::require_real(n, 0); };
  r.add({"GridSample", "", 16, 1 << 30, "cpu.GridSample.any", real0,
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           KILN_ASSIGN_OR_RETURN(const ops::GridSampleParams p, ops::parse_grid_sample(n));
           GsAttrs a;
           a.mode = p.mode;
           a.pad = p.padding;
           a.align = p.align_corners;
           return make_kernel([a](KernelContext& ctx) {
             return ctx.input(0).dtype() == DataType::kFloat64 ? grid_sample<double>(ctx, a) : grid_sample<float>(ctx, a);
           });
         }});
  r.add({"AffineGrid", "", 20, 1 << 30, "cpu.AffineGrid.any", real0, [](const ir::Node& n, KernelInit&) {
           const bool align = ops::parse_affine_grid(n).align_corners;
           return make_kernel([align](KernelContext& ctx) {
             return ctx.input(0).dtype() == DataType::kFloat64 ? affine_grid<double>(ctx, align) : affine_grid<float>(ctx, align);
           });
         }});
}

}  // namespace kiln::cpu
