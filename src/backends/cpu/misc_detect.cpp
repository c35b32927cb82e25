// backends/cpu/misc_detect.cpp — NonMaxSuppression and Det on the CPU.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/cpu/misc_kernels.h"
#include "backends/cpu/numeric.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

struct Box {
  double y1, x1, y2, x2;
};

Box corners(const double* b, bool center) {
  if (center) return {b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2};
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

double area(const Box& a) { return (a.y2 - a.y1) * (a.x2 - a.x1); }

// The boxes a class has kept so far, one array per coordinate, so that the overlap test against all
// of them is a loop the compiler vectorizes.
struct Kept {
  std::vector<double> y1, x1, y2, x2, area;
  std::vector<int64_t> index;
  void clear() {
    for (auto* v : {&y1, &x1, &y2, &x2, &area}) v->clear();
    index.clear();
  }
  void add(const Box& b, double a, int64_t i) {
    y1.push_back(b.y1), x1.push_back(b.x1), y2.push_back(b.y2), x2.push_back(b.x2), area.push_back(a);
    index.push_back(i);
  }
  size_t size() const { return index.size(); }
};

// Whether a kept box overlaps `b` (area `ab`) by an IoU above `thr`, the kept boxes tried in the order
// they were kept. Blocks of 8 first test which kept boxes intersect b at all (the same comparisons
// the IoU makes); only those get the IoU, computed as before: inter / (area_a + area_b - inter), 0
// where either area is not positive. Boxes of other classes (offset apart, as torchvision's batched
// NMS does) never intersect: SSDLite's 27,000 candidates against hundreds of kept boxes.
bool suppressed(const Kept& k, const Box& b, double ab, double thr) {
  constexpr size_t kBlock = 8;
  const size_t n = k.size();
  for (size_t j0 = 0; j0 < n; j0 += kBlock) {
    const size_t m = std::min(kBlock, n - j0);
    bool hit[kBlock];
    for (size_t t = 0; t < m; ++t) {
      const size_t j = j0 + t;
      const double ih = std::min(b.y2, k.y2[j]) - std::max(b.y1, k.y1[j]);
      const double iw = std::min(b.x2, k.x2[j]) - std::max(b.x1, k.x1[j]);
      hit[t] = ih > 0 && iw > 0;
    }
    for (size_t t = 0; t < m; ++t) {
      if (!hit[t]) continue;
      const size_t j = j0 + t;
      if (ab <= 0 || k.area[j] <= 0) continue;
      const double ih = std::min(b.y2, k.y2[j]) - std::max(b.y1, k.y1[j]);
      const double iw = std::min(b.x2, k.x2[j]) - std::max(b.x1, k.x1[j]);
      const double inter = ih * iw;
      if (inter / (ab + k.area[j] - inter) > thr) return true;
    }
  }
  return false;
}

Expected<KernelPtr> create_nms(const ir::Node& nd, KernelInit&) {
  const bool center = ops::parse_non_max_suppression(nd).center_point_box;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& boxes_t = ctx.input(0);
    const Tensor& scores_t = ctx.input(1);
    if (boxes_t.rank() != 3 || boxes_t.dim(2) != 4) return ctx.error("boxes must be [batch, boxes, 4]");
    if (scores_t.rank() != 3 || scores_t.dim(0) != boxes_t.dim(0) || scores_t.dim(2) != boxes_t.dim(1))
      return ctx.error("scores must be [batch, classes, boxes]");
    std::vector<double> boxes, scores, v;
    std::vector<int64_t> iv;
    if (!read_reals(boxes_t, boxes) || !read_reals(scores_t, scores)) return ctx.error("boxes and scores must be float");
    int64_t max_out = 0;
    if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
      if (!read_ints(ctx.input(2), iv) || iv.size() != 1) return ctx.error("max_output_boxes_per_class must be a scalar int64");
      max_out = iv[0];
    }
    double iou_thr = 0, score_thr = -INFINITY;
    if (ctx.has_input(3) && ctx.input(3).numel() > 0 && read_reals(ctx.input(3), v) && !v.empty()) iou_thr = v[0];
    if (ctx.has_input(4) && ctx.input(4).numel() > 0 && read_reals(ctx.input(4), v) && !v.empty()) score_thr = v[0];
    if (iou_thr < 0 || iou_thr > 1) return ctx.error("iou_threshold must be in [0, 1]");
    const int64_t batch = boxes_t.dim(0), n = boxes_t.dim(1), classes = scores_t.dim(1);
    std::vector<int64_t> out;
    Kept kept;
    for (int64_t b = 0; b < batch && max_out > 0; ++b) {
      std::vector<Box> bx(static_cast<size_t>(n));
      std::vector<double> areas(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        bx[i] = corners(&boxes[(b * n + i) * 4], center);
        areas[i] = area(bx[i]);
      }
      for (int64_t c = 0; c < classes; ++c) {
        const double* sc = &scores[(b * classes + c) * n];
        std::vector<int64_t> cand;
        for (int64_t i = 0; i < n; ++i)
          if (sc[i] > score_thr) cand.push_back(i);
        std::stable_sort(cand.begin(), cand.end(), [&](int64_t a, int64_t d) { return sc[a] > sc[d]; });
        kept.clear();
        for (int64_t i : cand) {
          if (static_cast<int64_t>(kept.size()) >= max_out) break;
          if (suppressed(kept, bx[i], areas[i], iou_thr)) continue;
          kept.add(bx[i], areas[i], i);
          out.insert(out.end(), {b, c, i});
        }
      }
    }
    const int64_t k = static_cast<int64_t>(out.size()) / 3;
    Tensor& y = ctx.output(0, DataType::kInt64, {k, 3});
    std::copy(out.begin(), out.end(), y.data<int64_t>());
    return Status::Ok();
  });
}

// Determinant by LU decomposition with partial pivoting, in double.
double det(std::vector<double> a, int64_t m) {
  double d = 1;
  for (int64_t c = 0; c < m; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < m; ++r)
      if (std::fabs(a[r * m + c]) > std::fabs(a[p * m + c])) p = r;
    if (a[p * m + c] == 0) return 0;
    if (p != c) {
      for (int64_t k = 0; k < m; ++k) std::swap(a[p * m + k], a[c * m + k]);
      d = -d;
    }
    d *= a[c * m + c];
    for (int64_t r = c + 1; r < m; ++r) {
      const double f = a[r * m + c] / a[c * m + c];
      for (int64_t k = c; k < m; ++k) a[r * m + k] -= f * a[c * m + k];
    }
  }
  return d;
}

Expected<KernelPtr> create_det(const ir::Node&, KernelInit&) {
  return make_kernel([](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2 || x.dim(-1) != x.dim(-2)) return ctx.error("input must be [..., M, M]");
    std::vector<double> xs;
    if (!read_reals(x, xs)) return ctx.error("unsupported dtype");
    const int64_t m = x.dim(-1);
    Shape os(x.shape().begin(), x.shape().end() - 2);
    Tensor& y = ctx.output(0, x.dtype(), os);
    const int64_t count = shape_numel(os);
    const bool ok = visit_numeric_f16(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t i = 0; i < count; ++i)
        y.data<T>()[i] = from_double<T>(det(std::vector<double>(xs.begin() + i * m * m, xs.begin() + (i + 1) * m * m), m));
    });
    return ok ? Status::Ok() : ctx.error("unsupported dtype");
  });
}

}  // namespace

void register_detect(KernelRegistry& r) {
  r.add({"NonMaxSuppression", "", 10, 1 << 30, "cpu.NonMaxSuppression.f32", nullptr, create_nms});
  using D = DataType;
  r.add({"Det", "", 11, 1 << 30, "cpu.Det.float",
         [](const ir::Node& n) { return require_dtypes(n, 0, {D::kFloat32, D::kFloat64, D::kFloat16, D::kBFloat16}); },
         create_det});
}

}  // namespace kiln::cpu
