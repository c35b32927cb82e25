// backends/cpu/resize.cpp — Resize (opset 10..19+) and Upsample (7..9) on the CPU.
//
// Resize is separable: each resized axis gets a table of taps (input index, weight) per output
// index (ops/resize_math.h, shared with the CUDA kernel), then one pass per axis mixes rows of a
// double buffer. That is exactly the onnx reference's axis-by-axis formulation, so edge handling
// (edge padding, exclude_outside, tf_crop_and_resize extrapolation) matches it.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/numeric.h"
#include "backends/staged_kernel.h"
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

// One separable pass: (outer, in, inner) → (outer, out, inner), from `src` into `dst`.
void resize_pass(const double* src, double* dst, int64_t outer, int64_t in, int64_t inner, const AxisTaps& t,
                 int64_t out, double extrapolation) {
  parallel_for(outer * out, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t oj = b; oj < e; ++oj) {
      const int64_t o = oj / out, j = oj % out;
      double* d = dst + oj * inner;
      if (t.extrapolate[j]) {
        std::fill(d, d + inner, extrapolation);
        continue;
      }
      std::fill(d, d + inner, 0.0);
      for (int64_t k = t.first[j]; k < t.first[j + 1]; ++k) {
        const double* s = src + (o * in + t.idx[k]) * inner;
        const double w = t.w[k];
        for (int64_t i = 0; i < inner; ++i) d[i] += w * s[i];
      }
    }
  });
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

// Resize per input-shape signature (its scales/sizes/roi are host inputs): the geometry, and the taps
// of the path that runs.
//  * rows: float32 with only the last two axes resized (or only the last; NCHW up/down-sampling), no
//    extrapolation: one output row at a time, the vertical taps blended into a row of doubles (one
//    per part of the rows, in the workspace), then the horizontal taps — the same sums in the same
//    order as the two generic passes, so the same bits, without converting the whole tensor to double
//    or materializing the intermediate tensor;
//  * generic: the input as doubles, then one pass per resized axis between two buffers (workspace).
struct ResizePlan {
  ops::ResizeGeometry geo;
  bool rows = false;
  // rows
  AxisTaps th, tw;
  std::vector<int32_t> idx;  // uniform horizontal taps (1, 2 or 4 per output x): tw.idx densely
  int taps = 0;              // 0: not uniform
  int64_t H = 0, W = 0, OH = 0, OW = 0, planes = 0, parts = 1;
  // generic: per axis (empty where not resized), and the double buffers' length
  std::vector<AxisTaps> axis_taps;
  int64_t buffer = 0;
};

// Fills the rows path of `p` when it applies.
bool plan_rows_f32(ResizePlan& p, DataType dt, const Shape& in, const resize::Coef& c) {
  const ops::ResizeGeometry& geo = p.geo;
  const int64_t r = static_cast<int64_t>(in.size());
  if (dt != DataType::kFloat32 || r < 2) return false;
  for (int64_t a = 0; a < r - 2; ++a)
    if (geo.resized[a]) return false;
  p.H = in[r - 2], p.W = in[r - 1], p.OH = geo.out[r - 2], p.OW = geo.out[r - 1];
  AxisTaps& th = p.th;
  AxisTaps& tw = p.tw;
  if (geo.resized[r - 2]) th = make_taps(c, geo.axes[r - 2]);
  else
    for (int64_t j = 0; j <= p.H; ++j) th.first.push_back(j), th.idx.push_back(j), th.w.push_back(1.0), th.extrapolate.push_back(0);
  if (geo.resized[r - 1]) tw = make_taps(c, geo.axes[r - 1]);
  else
    for (int64_t j = 0; j <= p.W; ++j) tw.first.push_back(j), tw.idx.push_back(j), tw.w.push_back(1.0), tw.extrapolate.push_back(0);
  for (const AxisTaps* t : {&th, &tw})
    for (char e : t->extrapolate)
      if (e) return false;  // tf_crop_and_resize outside the input: the generic path
  p.planes = p.H * p.W ? shape_numel(in) / (p.H * p.W) : 0;
  // Dense horizontal tables when every output x has the same number of taps (1, 2 or 4).
  const int64_t taps = p.OW ? tw.first[1] - tw.first[0] : 0;
  bool uniform = taps == 1 || taps == 2 || taps == 4;
  for (int64_t ox = 0; uniform && ox < p.OW; ++ox) uniform = tw.first[ox + 1] - tw.first[ox] == taps;
  if (uniform) {
    p.idx.assign(tw.idx.begin(), tw.idx.end());
    p.taps = static_cast<int>(taps);
  }
  p.parts = std::max<int64_t>(1, std::min<int64_t>(p.planes * p.OH, omp_get_max_threads()));
  return true;
}

void run_rows_f32(const ResizePlan& p, const Tensor& x, Tensor& y, double* rows) {
  const int64_t r = x.rank();
  const RowTaps t{&p.th, &p.tw, p.idx.data(), p.tw.w.data(), p.W, p.OW, !p.geo.resized[r - 1]};
  const ResizeRowFn fn = p.taps == 0 ? resize_row_fn<0>() : p.taps == 1 ? resize_row_fn<1>()
                                                            : p.taps == 2 ? resize_row_fn<2>() : resize_row_fn<4>();
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t n = p.planes * p.OH, H = p.H, W = p.W, OH = p.OH, OW = p.OW;
  // Parts of the output rows, each with its own row of doubles (never more parts than rows).
  parallel_for(p.parts, 1, [&](int64_t b, int64_t e) {
    for (int64_t part = b; part < e; ++part) {
      double* row = rows + part * W;
      for (int64_t pr = part * n / p.parts; pr < (part + 1) * n / p.parts; ++pr)
        fn(t, xp + (pr / OH) * H * W, pr % OH, row, yp + pr * OW);
    }
  });
}

template <typename T>
T store_rounded(double v) {
  if constexpr (Num<T>::is_float) return from_double<T>(v);
  else return from_double<T>(std::nearbyint(v));
}

Status resize_reshape(ReshapeContext& rc, const ops::ResizeParams& at) {
  const Shape& in = rc.in[0].shape;
  const DataType dt = rc.in[0].dtype;
  std::vector<const Tensor*> operands(rc.in.size(), nullptr);
  for (size_t i = 1; i < rc.in.size(); ++i) {
    if (!rc.in[i].present) continue;
    if (!rc.in[i].value) return unsupported("scales, sizes and roi are known only when running");
    operands[i] = rc.in[i].value;
  }
  auto plan = std::make_shared<ResizePlan>();
  ResizePlan& p = *plan;
  if (std::string why = ops::resize_geometry(at, in, operands, &p.geo); !why.empty()) return rc.error(why);
  // The output's size is checked before anything is sized by it (the taps have one entry per output
  // index of an axis).
  if (std::string why = check_tensor_size(dt, p.geo.out); !why.empty()) return rc.error(why);
  const int64_t n_out = shape_numel(p.geo.out);
  if (n_out > 0 && shape_numel(in) == 0) return rc.error("cannot resize an empty input to a non-empty output");
  if (!visit_numeric_f16(dt, [](auto) {}))
    return rc.error(std::string("unsupported dtype ") + dtype_name(dt));
  if (n_out > 0) {
    if (plan_rows_f32(p, dt, in, at.coef)) {
      p.rows = true;
      rc.workspace_bytes = static_cast<size_t>(p.parts * p.W) * sizeof(double);
    } else {
      p.th = p.tw = AxisTaps{};
      const int64_t r = static_cast<int64_t>(in.size());
      p.axis_taps.resize(in.size());
      Shape cur = in;
      p.buffer = shape_numel(in);
      for (int64_t a = 0; a < r; ++a) {
        if (!p.geo.resized[a]) continue;
        p.axis_taps[a] = make_taps(at.coef, p.geo.axes[a]);
        cur[a] = p.geo.out[a];
        if (std::string why = check_tensor_size(DataType::kFloat64, cur); !why.empty()) return rc.error(why);
        p.buffer = std::max(p.buffer, shape_numel(cur));
      }
      rc.workspace_bytes = 2 * static_cast<size_t>(p.buffer) * sizeof(double);
    }
  }
  rc.out[0] = {dt, p.geo.out};
  rc.state = std::move(plan);
  return Status::Ok();
}

Status run_resize(KernelContext& ctx, const ops::ResizeParams& at) {
  const ResizePlan& p = shape_state<ResizePlan>(ctx);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  if (y.numel() == 0) return Status::Ok();
  double* ws = static_cast<double*>(ctx.workspace());
  if (p.rows) {
    run_rows_f32(p, x, y, ws);
    return Status::Ok();
  }
  // The input as doubles, then each resized axis's pass into the other buffer.
  double* cur_buf = ws;
  double* next_buf = ws + p.buffer;
  visit_numeric_f16(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < x.numel(); ++i) cur_buf[i] = to_double(x.data<T>()[i]);
  });
  const int64_t r = x.rank();
  SmallDims<> cur(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) cur[d] = x.dim(static_cast<int>(d));
  for (int64_t a = 0; a < r; ++a) {
    if (!p.geo.resized[a]) continue;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= cur[d];
    for (int64_t d = a + 1; d < r; ++d) inner *= cur[d];
    resize_pass(cur_buf, next_buf, outer, cur[a], inner, p.axis_taps[a], p.geo.out[a], at.extrapolation);
    std::swap(cur_buf, next_buf);
    cur[a] = p.geo.out[a];
  }
  visit_numeric_f16(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* yp = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i) yp[i] = store_rounded<T>(cur_buf[i]);
  });
  return Status::Ok();
}

Expected<KernelPtr> create_resize(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::ResizeParams at, ops::parse_resize(n));
  return make_staged([at](ReshapeContext& rc) { return resize_reshape(rc, at); },
                     [at](KernelContext& ctx) { return run_resize(ctx, at); });
}

}  // namespace

void register_resize(KernelRegistry& r) {
  using D = DataType;
  auto check = [](const ir::Node& n) {
    return require_dtypes(n, 0, {D::kFloat32, D::kFloat64, D::kFloat16, D::kBFloat16, D::kInt8, D::kUInt8, D::kInt16,
                                 D::kUInt16, D::kInt32, D::kUInt32, D::kInt64, D::kUInt64});
  };
  // roi, scales and sizes (opset 10 and Upsample: scales at 1) size the output: host inputs.
  KernelDef resize{"Resize", "", 10, 1 << 30, "cpu.Resize.any", check, create_resize};
  resize.host_inputs = 0b1110;
  r.add(std::move(resize));
  KernelDef upsample{"Upsample", "", 7, 9, "cpu.Upsample.any", check, create_resize};
  upsample.host_inputs = 0b10;
  r.add(std::move(upsample));
}

}  // namespace kiln::cpu
