// backends/cpu/roi.cpp — region and image ops on the CPU: RoiAlign, MaxRoiPool and DeformConv (2-D)
// (Col2Im lives with the shape family). All compute in double and store in the input's dtype.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "backends/cpu/numeric_f64.h"
#include "ops/op_table.h"
#include "ops/params_ml.h"
#include "util/checked.h"

namespace kiln::cpu {
namespace {

// ---------------------------------------------------------------- RoiAlign

// The most samples one RoiAlign bin may average (1024 x 1024), and one roi's sample table may hold
// (2^22 samples, 256 MiB; one per thread): far past any detector's grid (a few per pixel of a feature
// map, some thousands per roi), and small enough that a hostile sampling_ratio, spatial_scale or roi fails at once instead of running for minutes.
constexpr int64_t kRoiAlignMaxSamplesPerBin = int64_t{1} << 20;
constexpr size_t kRoiAlignMaxSamplesPerRoi = size_t{1} << 22;

// One bilinear sample: four positions and weights (all zero outside the map).
struct Sample {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

Sample bilinear_sample(double y, double x, int64_t H, int64_t W) {
  Sample s;
  // Written so NaN coordinates are outside too (no sample) rather than cast to an integer.
  if (!(y >= -1.0 && y <= static_cast<double>(H) && x >= -1.0 && x <= static_cast<double>(W))) return s;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1, x1;
  if (y0 >= H - 1) { y1 = y0 = H - 1; y = static_cast<double>(y0); } else { y1 = y0 + 1; }
  if (x0 >= W - 1) { x1 = x0 = W - 1; x = static_cast<double>(x0); } else { x1 = x0 + 1; }
  const double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0), hy = 1 - ly, hx = 1 - lx;
  s.pos[0] = y0 * W + x0; s.pos[1] = y0 * W + x1; s.pos[2] = y1 * W + x0; s.pos[3] = y1 * W + x1;
  s.w[0] = hy * hx; s.w[1] = hy * lx; s.w[2] = ly * hx; s.w[3] = ly * lx;
  return s;
}

Status roi_align_kernel(KernelContext& ctx, const ops::RoiAlignParams& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  const Tensor& idx = ctx.input(2);
  if (x.rank() != 4) return ctx.error("X must be [N, C, H, W]");
  if (rois.rank() != 2 || rois.dim(1) != 4) return ctx.error("rois must be [num_rois, 4]");
  const int64_t R = rois.dim(0), N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (idx.rank() != 1 || idx.dim(0) != R) return ctx.error("batch_indices must be [num_rois]");
  const int64_t PH = a.output_height, PW = a.output_width;
  // batch_indices as integers: through a double, INT64_MAX became 2^63, whose conversion back is
  // undefined (fuzz_model); a float index that is NaN or past int64 is out of range.
  const auto batch_index = [&idx](int64_t r) -> int64_t {
    if (idx.dtype() == DataType::kInt64) return idx.data<int64_t>()[r];
    const double v = load_f64(idx, r);
    return std::isnan(v) || std::fabs(v) > 9.2e18 ? -1 : static_cast<int64_t>(v);
  };
  for (int64_t r = 0; r < R; ++r) {
    const int64_t n = batch_index(r);
    if (n < 0 || n >= N) return ctx.error("batch index " + std::to_string(n) + " out of range");
  }
  // Each roi's box and sampling grid, checked before any sample is made: the grid comes from
  // sampling_ratio or from spatial_scale x the box's size (ceil(extent / bins) per bin), so a hostile
  // attribute or roi would make an unbounded amount of work. onnxruntime defines nothing for these
  // (it casts the grid to an integer); kiln refuses them with an error naming the roi.
  struct Box {
    double x1, y1, bh, bw;
    int64_t gh, gw;
  };
  std::vector<Box> boxes(static_cast<size_t>(R));
  int64_t bins = 0;  // PH * PW too may overflow: Y is empty when C is 0, whatever they are
  if (__builtin_mul_overflow(PH, PW, &bins)) return ctx.error("output_height x output_width overflows");
  const size_t table_limit = std::min<size_t>(kRoiAlignMaxSamplesPerRoi, max_tensor_bytes() / sizeof(Sample));
  for (int64_t r = 0; r < R; ++r) {
    const double off = a.half_pixel ? 0.5 : 0.0;
    const double x1 = load_f64(rois, r * 4) * a.spatial_scale - off, y1 = load_f64(rois, r * 4 + 1) * a.spatial_scale - off;
    const double x2 = load_f64(rois, r * 4 + 2) * a.spatial_scale - off, y2 = load_f64(rois, r * 4 + 3) * a.spatial_scale - off;
    if (!std::isfinite(x1) || !std::isfinite(y1) || !std::isfinite(x2) || !std::isfinite(y2) ||
        !std::isfinite(x2 - x1) || !std::isfinite(y2 - y1))
      return ctx.error("roi " + std::to_string(r) + " is not finite once scaled by spatial_scale");
    double rw = x2 - x1, rh = y2 - y1;
    if (!a.half_pixel) { rw = std::max(rw, 1.0); rh = std::max(rh, 1.0); }
    const double bh = rh / static_cast<double>(PH), bw = rw / static_cast<double>(PW);
    // Adaptive grid: ceil(extent / bins), saturated past 2^50 (the limit below refuses it anyway); an
    // empty or inverted box samples nothing.
    auto grid = [&](double extent, int64_t n_bins) -> int64_t {
      if (a.sampling_ratio > 0) return a.sampling_ratio;
      const double g = std::ceil(extent / static_cast<double>(n_bins));
      return !(g > 0) ? 0 : g > 1e15 ? int64_t{1} << 50 : static_cast<int64_t>(g);
    };
    const int64_t gh = grid(rh, PH), gw = grid(rw, PW);
    int64_t per_bin = 0, total = 0;
    if (gh < 0 || gw < 0 || __builtin_mul_overflow(gh, gw, &per_bin) || per_bin > kRoiAlignMaxSamplesPerBin)
      return ctx.error("roi " + std::to_string(r) + ": sampling grid of " + std::to_string(gh) + "x" +
                       std::to_string(gw) + " per bin is over the limit of " + std::to_string(kRoiAlignMaxSamplesPerBin) +
                       " samples (sampling_ratio, or spatial_scale x the roi's size, too large)");
    if (__builtin_mul_overflow(per_bin, bins, &total) || static_cast<uint64_t>(total) > table_limit)
      return ctx.error("roi " + std::to_string(r) + ": sampling grid of " + std::to_string(gh) + "x" +
                       std::to_string(gw) + " per bin over " + std::to_string(PH) + "x" + std::to_string(PW) +
                       " bins is over " + std::to_string(table_limit) + " samples (the limit, or max_tensor_bytes)");
    boxes[r] = Box{x1, y1, bh, bw, gh, gw};
  }
  Tensor& y = ctx.output(0, x.dtype(), {R, C, PH, PW});
  const std::vector<double> xv = to_f64(x);
  parallel_for(R, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = batch_index(r);
      const Box& b = boxes[r];
      const double x1 = b.x1, y1 = b.y1, bh = b.bh, bw = b.bw;
      const int64_t gh = b.gh, gw = b.gw;
      const double count = std::max(static_cast<double>(gh) * static_cast<double>(gw), 1.0);
      const int64_t total = gh * gw * PH * PW;  // checked above
      std::vector<Sample> samples;
      samples.reserve(static_cast<size_t>(total));
      for (int64_t ph = 0; ph < PH; ++ph)
        for (int64_t pw = 0; pw < PW; ++pw)
          for (int64_t iy = 0; iy < gh; ++iy)
            for (int64_t ix = 0; ix < gw; ++ix)
              samples.push_back(bilinear_sample(y1 + ph * bh + (iy + 0.5) * bh / gh, x1 + pw * bw + (ix + 0.5) * bw / gw, H, W));
      for (int64_t c = 0; c < C; ++c) {
        const double* plane = &xv[(n * C + c) * H * W];
        size_t si = 0;
        for (int64_t ph = 0; ph < PH; ++ph)
          for (int64_t pw = 0; pw < PW; ++pw) {
            double acc = 0;
            bool first = true;
            for (int64_t k = 0; k < gh * gw; ++k, ++si) {
              const Sample& s = samples[si];
              if (!a.max_mode) {
                for (int q = 0; q < 4; ++q) acc += s.w[q] * plane[s.pos[q]];
              } else {
                double v = s.w[0] * plane[s.pos[0]];
                for (int q = 1; q < 4; ++q) v = std::max(v, s.w[q] * plane[s.pos[q]]);
                acc = first ? v : std::max(acc, v);
                first = false;
              }
            }
            store_float(y, ((r * C + c) * PH + ph) * PW + pw, a.max_mode ? acc : acc / count);
          }
      }
    }
  });
  return Status::Ok();
}

// ---------------------------------------------------------------- MaxRoiPool

Status max_roi_pool_kernel(KernelContext& ctx, int64_t PH, int64_t PW, double scale) {
  const Tensor& x = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  if (x.rank() != 4) return ctx.error("X must be [N, C, H, W]");
  if (rois.rank() != 2 || rois.dim(1) != 5) return ctx.error("rois must be [num_rois, 5]");
  const int64_t R = rois.dim(0), N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  Tensor& y = ctx.output(0, x.dtype(), {R, C, PH, PW});
  for (int64_t r = 0; r < R; ++r) {
    // The roi's batch index and corners are floats: NaN, inf or past 2^53 is an error, not a cast.
    int64_t v[5];
    for (int k = 0; k < 5; ++k)
      if (!count_from_double(k ? std::round(load_f64(rois, r * 5 + k) * scale) : load_f64(rois, r * 5), &v[k]))
        return ctx.error("roi " + std::to_string(r) + " has a value that is not a finite number in range");
    const int64_t n = v[0];
    if (n < 0 || n >= N) return ctx.error("batch index " + std::to_string(n) + " out of range");
    const int64_t sw = v[1], sh = v[2], ew = v[3], eh = v[4];
    const double bh = static_cast<double>(std::max<int64_t>(eh - sh + 1, 1)) / static_cast<double>(PH);
    const double bw = static_cast<double>(std::max<int64_t>(ew - sw + 1, 1)) / static_cast<double>(PW);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t ph = 0; ph < PH; ++ph)
        for (int64_t pw = 0; pw < PW; ++pw) {
          const int64_t h0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(ph * bh)) + sh, 0, H);
          const int64_t h1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil((ph + 1) * bh)) + sh, 0, H);
          const int64_t w0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(pw * bw)) + sw, 0, W);
          const int64_t w1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil((pw + 1) * bw)) + sw, 0, W);
          double m = h1 <= h0 || w1 <= w0 ? 0.0 : -std::numeric_limits<double>::infinity();
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) m = std::max(m, load_f64(x, ((n * C + c) * H + h) * W + w));
          store_float(y, ((r * C + c) * PH + ph) * PW + pw, m);
        }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- DeformConv (2-D)

// Bilinear value of a plane at (h, w); zero outside.
double deform_sample(const double* p, int64_t H, int64_t W, double h, double w) {
  if (!(h > -1 && h < static_cast<double>(H) && w > -1 && w < static_cast<double>(W))) return 0;  // NaN too
  const int64_t h0 = static_cast<int64_t>(std::floor(h)), w0 = static_cast<int64_t>(std::floor(w));
  const double lh = h - static_cast<double>(h0), lw = w - static_cast<double>(w0);
  auto at = [&](int64_t y, int64_t x) { return y >= 0 && y < H && x >= 0 && x < W ? p[y * W + x] : 0.0; };
  return (1 - lh) * (1 - lw) * at(h0, w0) + (1 - lh) * lw * at(h0, w0 + 1) + lh * (1 - lw) * at(h0 + 1, w0) +
         lh * lw * at(h0 + 1, w0 + 1);
}

Status deform_conv_kernel(KernelContext& ctx, const ops::DeformConvParams& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& wt = ctx.input(1);
  const Tensor& offset = ctx.input(2);
  if (x.rank() != 4 || wt.rank() != 4 || offset.rank() != 4) return ctx.error("only 2-D DeformConv is supported (X, W, offset 4-D)");
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), OC = wt.dim(0), KH = wt.dim(2), KW = wt.dim(3);
  const int64_t G = a.group, OG = a.offset_group;
  if (G <= 0 || OG <= 0 || C % G || OC % G || C % OG || wt.dim(1) != C / G)
    return ctx.error("group / offset_group do not divide the channels, or W's dim 1 is not C / group");
  if (!a.kernel_shape.empty() && (a.kernel_shape.size() != 2 || a.kernel_shape[0] != KH || a.kernel_shape[1] != KW))
    return ctx.error("kernel_shape differs from W's spatial dims");
  const int64_t sh = a.strides.empty() ? 1 : a.strides[0], sw = a.strides.size() > 1 ? a.strides[1] : 1;
  const int64_t dh = a.dilations.empty() ? 1 : a.dilations[0], dw = a.dilations.size() > 1 ? a.dilations[1] : 1;
  const int64_t pt = a.pads.size() == 4 ? a.pads[0] : 0, pl = a.pads.size() == 4 ? a.pads[1] : 0;
  const int64_t pb = a.pads.size() == 4 ? a.pads[2] : 0, pr = a.pads.size() == 4 ? a.pads[3] : 0;
  if (sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0) return ctx.error("strides and dilations must be positive");
  const int64_t OH = (H + pt + pb - (dh * (KH - 1) + 1)) / sh + 1, OW = (W + pl + pr - (dw * (KW - 1) + 1)) / sw + 1;
  if (OH < 0 || OW < 0) return ctx.error("kernel larger than the padded input");
  if (offset.shape() != Shape{N, OG * 2 * KH * KW, OH, OW})
    return ctx.error("offset must have shape " + shape_to_string({N, OG * 2 * KH * KW, OH, OW}));
  const bool has_b = ctx.has_input(3), has_mask = ctx.has_input(4);
  if (has_b && ctx.input(3).numel() != OC) return ctx.error("B must have one value per output channel");
  if (has_mask && ctx.input(4).shape() != Shape{N, OG * KH * KW, OH, OW})
    return ctx.error("mask must have shape " + shape_to_string({N, OG * KH * KW, OH, OW}));
  const std::vector<double> xv = to_f64(x), wv = to_f64(wt), ov = to_f64(offset);
  const std::vector<double> bv = has_b ? to_f64(ctx.input(3)) : std::vector<double>{};
  const std::vector<double> mv = has_mask ? to_f64(ctx.input(4)) : std::vector<double>{};
  Tensor& y = ctx.output(0, x.dtype(), {N, OC, OH, OW});
  const int64_t cpg = C / G, ocpg = OC / G, cpog = C / OG, K = KH * KW;
  parallel_for(N * OH * OW, 16, [&](int64_t b, int64_t e) {
    std::vector<double> col(static_cast<size_t>(C * K));  // sampled input for one output position
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / (OH * OW), oh = (t / OW) % OH, ow = t % OW;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t og = c / cpog;
        for (int64_t i = 0; i < KH; ++i)
          for (int64_t j = 0; j < KW; ++j) {
            const int64_t kk = i * KW + j;
            const double offh = ov[((((n * OG + og) * K + kk) * 2) * OH + oh) * OW + ow];
            const double offw = ov[((((n * OG + og) * K + kk) * 2 + 1) * OH + oh) * OW + ow];
            const double m = has_mask ? mv[(((n * OG + og) * K + kk) * OH + oh) * OW + ow] : 1.0;
            const double hh = static_cast<double>(oh * sh - pt + i * dh) + offh;
            const double ww = static_cast<double>(ow * sw - pl + j * dw) + offw;
            col[c * K + kk] = m * deform_sample(&xv[(n * C + c) * H * W], H, W, hh, ww);
          }
      }
      for (int64_t oc = 0; oc < OC; ++oc) {
        const int64_t g = oc / ocpg;
        double acc = has_b ? bv[oc] : 0.0;
        for (int64_t ci = 0; ci < cpg; ++ci)
          for (int64_t kk = 0; kk < K; ++kk) acc += wv[(oc * cpg + ci) * K + kk] * col[(g * cpg + ci) * K + kk];
        store_float(y, ((n * OC + oc) * OH + oh) * OW + ow, acc);
      }
    }
  });
  return Status::Ok();
}

}  // namespace

void register_roi(KernelRegistry& r) {
  auto real = [](const ir::Node& n) { return require_float(n, 0); };
  r.add({"RoiAlign", "", 10, 1 << 30, "cpu.RoiAlign.any", real, [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           KILN_ASSIGN_OR_RETURN(const ops::RoiAlignParams a, ops::parse_roi_align(n));
           return make_kernel([a](KernelContext& ctx) { return roi_align_kernel(ctx, a); });
         }});
  r.add({"MaxRoiPool", "", 1, 1 << 30, "cpu.MaxRoiPool.any", real, [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           KILN_ASSIGN_OR_RETURN(const ops::MaxRoiPoolParams a, ops::parse_max_roi_pool(n));
           const int64_t ph = a.pooled_shape[0], pw = a.pooled_shape[1];
           const double scale = a.spatial_scale;
           return make_kernel([ph, pw, scale](KernelContext& ctx) { return max_roi_pool_kernel(ctx, ph, pw, scale); });
         }});
  r.add({"DeformConv", "", 19, 1 << 30, "cpu.DeformConv.2d", real, [](const ir::Node& n, KernelInit&) {
           const ops::DeformConvParams a = ops::parse_deform_conv(n);
           return make_kernel([a](KernelContext& ctx) { return deform_conv_kernel(ctx, a); });
         }});
}

}  // namespace kiln::cpu
