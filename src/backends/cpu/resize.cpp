// backends/cpu/resize.cpp — Resize (opset 10..19+) and Upsample (7..9) on the CPU.
//
// Resize is separable: each resized axis gets a table of taps (input index, weight) per output
// index (ops/resize_math.h, shared with the CUDA kernel), then one pass per axis mixes rows of a
// double buffer. That is exactly the onnx reference's axis-by-axis formulation, so edge handling
// (edge padding, exclude_outside, tf_crop_and_resize extrapolation) matches it.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/numeric.h"
#include "ops/resize.h"

namespace kiln::cpu {
namespace {

struct AxisTaps {
  std::vector<int64_t> first;  // output j uses taps [first[j], first[j+1])
  std::vector<int64_t> idx;
  std::vector<double> w;
  std::vector<char> extrapolate;
};

AxisTaps make_taps(const resize::Coef& c, const resize::Axis& ax) {
  AxisTaps t;
  t.first.push_back(0);
  auto add = [&t](int64_t i, double w) {
    t.idx.push_back(i);
    t.w.push_back(w);
  };
  for (int64_t j = 0; j < ax.out; ++j) {
    t.extrapolate.push_back(resize::for_each_tap(c, ax, j, add));
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

// One output row of resize_rows_f32: the vertical taps blended into `row` (doubles, W wide), then
// each output x the sum of its horizontal taps over `row`, starting from 0.0 (the generic pass's
// order). kTaps > 0: every output x has that many taps, laid out densely (idx/w at x * kTaps + t,
// the common linear/cubic/nearest case, which vectorizes); 0: the tables of AxisTaps as they are.
struct RowTaps {
  const AxisTaps* th;
  const AxisTaps* tw;
  const int32_t* idx;  // kTaps > 0: OW * kTaps indices into the row
  const double* w;     // and their weights
  int64_t W, OW;
  bool keep_w;
};
template <int kTaps>
[[gnu::always_inline]] inline void resize_row(const RowTaps& t, const float* plane, int64_t oy, double* __restrict row,
                                              float* __restrict dst) {
  for (int64_t i = 0; i < t.W; ++i) row[i] = 0.0;
  for (int64_t k = t.th->first[oy]; k < t.th->first[oy + 1]; ++k) {
    const float* __restrict src = plane + t.th->idx[k] * t.W;
    const double w = t.th->w[k];
    for (int64_t i = 0; i < t.W; ++i) row[i] += w * static_cast<double>(src[i]);
  }
  if (t.keep_w) {
    for (int64_t i = 0; i < t.W; ++i) dst[i] = static_cast<float>(row[i]);
    return;
  }
  if constexpr (kTaps > 0) {
    for (int64_t ox = 0; ox < t.OW; ++ox) {
      double d = 0.0;
      for (int k = 0; k < kTaps; ++k) d += t.w[ox * kTaps + k] * row[t.idx[ox * kTaps + k]];
      dst[ox] = static_cast<float>(d);
    }
  } else {
    const AxisTaps& tw = *t.tw;
    for (int64_t ox = 0; ox < t.OW; ++ox) {
      double d = 0.0;
      for (int64_t k = tw.first[ox]; k < tw.first[ox + 1]; ++k) d += tw.w[k] * row[tw.idx[k]];
      dst[ox] = static_cast<float>(d);
    }
  }
}
// The AVX2 copies take no FMA: a fused multiply-add would round differently from the generic path.
template <int kTaps>
[[gnu::target("avx2")]] void resize_row_avx2(const RowTaps& t, const float* plane, int64_t oy, double* row, float* dst) {
  resize_row<kTaps>(t, plane, oy, row, dst);
}
template <int kTaps>
void resize_row_base(const RowTaps& t, const float* plane, int64_t oy, double* row, float* dst) {
  resize_row<kTaps>(t, plane, oy, row, dst);
}
using ResizeRowFn = void (*)(const RowTaps&, const float*, int64_t, double*, float*);
template <int kTaps>
ResizeRowFn resize_row_fn() {
  return has_avx2_fma() ? &resize_row_avx2<kTaps> : &resize_row_base<kTaps>;
}

// float32 with only the last two axes resized (or only the last; NCHW up/down-sampling): one output
// row at a time, the vertical taps blended into a row of doubles, then the horizontal taps — the same
// sums in the same order as the two generic passes, so the same bits, without converting the whole
// tensor to double or materializing the intermediate tensor.
bool resize_rows_f32(const Tensor& x, Tensor& y, const Shape& in, const ops::ResizeGeometry& geo, const resize::Coef& c) {
  const int64_t r = static_cast<int64_t>(in.size());
  if (x.dtype() != DataType::kFloat32 || r < 2) return false;
  for (int64_t a = 0; a < r - 2; ++a)
    if (geo.resized[a]) return false;
  const int64_t H = in[r - 2], W = in[r - 1], OH = geo.out[r - 2], OW = geo.out[r - 1];
  AxisTaps th, tw;
  if (geo.resized[r - 2]) th = make_taps(c, geo.axes[r - 2]);
  else
    for (int64_t j = 0; j <= H; ++j) th.first.push_back(j), th.idx.push_back(j), th.w.push_back(1.0), th.extrapolate.push_back(0);
  if (geo.resized[r - 1]) tw = make_taps(c, geo.axes[r - 1]);
  else
    for (int64_t j = 0; j <= W; ++j) tw.first.push_back(j), tw.idx.push_back(j), tw.w.push_back(1.0), tw.extrapolate.push_back(0);
  for (const AxisTaps* t : {&th, &tw})
    for (char e : t->extrapolate)
      if (e) return false;  // tf_crop_and_resize outside the input: the generic path
  const int64_t planes = H * W ? x.numel() / (H * W) : 0;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  // Dense horizontal tables when every output x has the same number of taps (1, 2 or 4).
  const int64_t taps = OW ? tw.first[1] - tw.first[0] : 0;
  bool uniform = taps == 1 || taps == 2 || taps == 4;
  for (int64_t ox = 0; uniform && ox < OW; ++ox) uniform = tw.first[ox + 1] - tw.first[ox] == taps;
  std::vector<int32_t> idx;
  if (uniform) idx.assign(tw.idx.begin(), tw.idx.end());
  const RowTaps t{&th, &tw, idx.data(), tw.w.data(), W, OW, !geo.resized[r - 1]};
  const ResizeRowFn fn = !uniform ? resize_row_fn<0>() : taps == 1 ? resize_row_fn<1>()
                                                        : taps == 2 ? resize_row_fn<2>() : resize_row_fn<4>();
  parallel_for(planes * OH, std::max<int64_t>(1, 16384 / std::max<int64_t>(OW, 1)), [&](int64_t b, int64_t e) {
    std::vector<double> row(static_cast<size_t>(W));
    for (int64_t pr = b; pr < e; ++pr) fn(t, xp + (pr / OH) * H * W, pr % OH, row.data(), yp + pr * OW);
  });
  return true;
}

template <typename T>
T store_rounded(double v) {
  if constexpr (Num<T>::is_float) return from_double<T>(v);
  else return from_double<T>(std::nearbyint(v));
}

Status run_resize(KernelContext& ctx, const ops::ResizeParams& at) {
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  const Shape& in = x.shape();
  std::vector<const Tensor*> operands;
  for (int i = 0; i < ctx.num_inputs(); ++i) operands.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
  ops::ResizeGeometry geo;
  if (std::string why = ops::resize_geometry(at, in, operands, &geo); !why.empty()) return ctx.error(why);
  Tensor& y = ctx.output(0, x.dtype(), geo.out);
  if (y.numel() == 0) return Status::Ok();
  if (x.numel() == 0) return ctx.error("cannot resize an empty input to a non-empty output");
  if (resize_rows_f32(x, y, in, geo, at.coef)) return Status::Ok();

  std::vector<double> buf;
  if (!read_reals(x, buf)) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
  Shape cur = in;
  for (int64_t a = 0; a < r; ++a) {
    if (!geo.resized[a]) continue;
    const AxisTaps t = make_taps(at.coef, geo.axes[a]);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= cur[d];
    for (int64_t d = a + 1; d < r; ++d) inner *= cur[d];
    buf = resize_pass(buf, outer, cur[a], inner, t, geo.out[a], at.extrapolation);
    cur[a] = geo.out[a];
  }
  const bool ok = visit_numeric_f16(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* yp = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i) yp[i] = store_rounded<T>(buf[i]);
  });
  return ok ? Status::Ok() : ctx.error("unsupported dtype");
}

Expected<KernelPtr> create_resize(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::ResizeParams at, ops::parse_resize(n));
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
