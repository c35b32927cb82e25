// backends/cpu/detect.cpp — NonMaxSuppression on the CPU.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/cpu/cpu_kernels.h"
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

// Only a box with finite corners and positive height and width can suppress or be suppressed: for any
// other the IoU test below fails whatever the other box (a NaN compares false, an inverted or empty
// box has no positive intersection or area, an infinite area makes the IoU 0 or NaN).
bool takes_part(const Box& b) {
  return std::isfinite(b.y1) && std::isfinite(b.x1) && std::isfinite(b.y2) && std::isfinite(b.x2) && b.y2 > b.y1 &&
         b.x2 > b.x1;
}

// Whether box a (area aa) overlaps box b (area ab) by an IoU above thr: inter / (area_a + area_b -
// inter), 0 where the boxes do not intersect or either area is not positive.
bool iou_above(const Box& a, double aa, const Box& b, double ab, double thr) {
  if (aa <= 0 || ab <= 0) return false;
  const double ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1), iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (ih <= 0 || iw <= 0) return false;
  const double inter = ih * iw;
  return inter / (aa + ab - inter) > thr;
}

// The boxes one class has kept that take part, indexed by x: buckets of equal width over the class's
// candidates' x-range, as wide as a candidate is on average, each kept box in every bucket its [x1, x2]
// touches (one wider than kWide buckets in a list every candidate tries: at most kWide + 1 entries a
// box). A box can only overlap a kept box that shares a bucket with it
// (the bucket of the larger x1 lies in both ranges: the bucket index is monotone in x), and whether
// any kept box overlaps does not depend on the order they are tried, so this answers exactly what
// trying every kept box would. torchvision's batched NMS offsets each class's boxes apart: SSDLite's
// one NMS over ~27,000 candidates of 90 classes had tried every kept box of every class.
class KeptIndex {
 public:
  void reset(const std::vector<Box>& bx, const std::vector<int64_t>& cand) {
    boxes_.clear();
    areas_.clear();
    wide_.clear();
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, widths = 0;
    int64_t n = 0;
    for (int64_t i : cand)
      if (takes_part(bx[i])) lo = std::min(lo, bx[i].x1), hi = std::max(hi, bx[i].x2), widths += bx[i].x2 - bx[i].x1, ++n;
    // Buckets as wide as the candidates are on average: a typical box touches two.
    const double mean = n > 0 ? widths / static_cast<double>(n) : 0;
    const double count = mean > 0 ? std::min((hi - lo) / mean, static_cast<double>(std::min<int64_t>(n, 1 << 20))) : 1;
    nb_ = std::isfinite(count) && count >= 1 ? static_cast<int64_t>(count) : 1;
    x0_ = lo;
    width_ = (hi - lo) / static_cast<double>(nb_);
    if (!(width_ > 0) || !std::isfinite(width_)) nb_ = 1, width_ = 1;
    buckets_.assign(static_cast<size_t>(nb_), {});
  }
  // Whether a kept box overlaps b (taking part, area ab) by an IoU above thr.
  bool suppresses(const Box& b, double ab, double thr) const {
    auto above = [&](int32_t j) { return iou_above(b, ab, boxes_[j], areas_[j], thr); };
    for (int32_t j : wide_)
      if (above(j)) return true;
    const int64_t lo = bucket(b.x1), hi = bucket(b.x2);
    if (hi - lo > kWide) {  // a wide box: every kept box
      for (size_t j = 0; j < boxes_.size(); ++j)
        if (above(static_cast<int32_t>(j))) return true;
      return false;
    }
    for (int64_t t = lo; t <= hi; ++t)
      for (int32_t j : buckets_[t])
        if (above(j)) return true;
    return false;
  }
  void add(const Box& b, double a) {
    const auto j = static_cast<int32_t>(boxes_.size());
    boxes_.push_back(b);
    areas_.push_back(a);
    const int64_t lo = bucket(b.x1), hi = bucket(b.x2);
    if (hi - lo > kWide) {
      wide_.push_back(j);
      return;
    }
    for (int64_t t = lo; t <= hi; ++t) buckets_[t].push_back(j);
  }

 private:
  static constexpr int64_t kWide = 16;
  int64_t bucket(double x) const {  // clamped in double first: no conversion of an out-of-range value
    const double q = std::min(std::max((x - x0_) / width_, 0.0), static_cast<double>(nb_ - 1));
    return static_cast<int64_t>(q);
  }
  std::vector<Box> boxes_;
  std::vector<double> areas_;
  std::vector<int32_t> wide_;
  std::vector<std::vector<int32_t>> buckets_;
  int64_t nb_ = 1;
  double x0_ = 0, width_ = 1;
};

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
    KeptIndex kept;
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
        kept.reset(bx, cand);
        int64_t picked = 0;
        for (int64_t i : cand) {
          if (picked >= max_out) break;
          const bool part = takes_part(bx[i]);
          if (part && kept.suppresses(bx[i], areas[i], iou_thr)) continue;
          if (part) kept.add(bx[i], areas[i]);  // the others can never suppress a box
          ++picked;
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

}  // namespace

void register_detect(KernelRegistry& r) {
  r.add({"NonMaxSuppression", "", 10, 1 << 30, "cpu.NonMaxSuppression.f32", nullptr, create_nms});
}

}  // namespace kiln::cpu
