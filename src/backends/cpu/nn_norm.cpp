// backends/cpu/nn_norm.cpp — BatchNormalization, InstanceNormalization, LayerNormalization,
// GroupNormalization, RMSNormalization, LRN and MeanVarianceNormalization on the CPU. Statistics
// accumulate in double (float32 Layer/RMS normalization as vector reductions: norm_rows.h).
#include <algorithm>
#include <cmath>

#include "backends/cpu/nn_common.h"
#include "backends/cpu/norm_rows.h"
#include "backends/staged_kernel.h"
#include "ops/op_table.h"
#include "ops/params_nn.h"

namespace kiln::cpu::nn {
namespace {

// Mean and (biased) variance of n values of p.
template <typename C>
void moments(const C* p, int64_t n, double& mean, double& var) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  mean = n ? s / n : 0;
  double q = 0;
  for (int64_t i = 0; i < n; ++i) q += (p[i] - mean) * (p[i] - mean);
  var = n ? q / n : 0;
}

// Why `s` does not broadcast (numpy rules) to `target` as it is, or "".
std::string broadcast_to_error(const Shape& s, const Shape& target) {
  Shape b;
  if (!ops::broadcast_shapes(target, s, &b) || b != target)
    return "shape " + shape_to_string(s) + " does not broadcast to " + shape_to_string(target);
  return "";
}

// `t` broadcast to `target` (broadcast_to_error said it does), flattened into `out`.
template <typename C>
void expand_into(const Tensor& t, const Shape& target, C* out) {
  const int64_t n = shape_numel(target);
  const Shape& s = t.shape();
  const size_t r = target.size(), off = r - s.size();
  SmallDims<> coord(r);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = 0;
    for (size_t d = off; d < r; ++d) j = j * s[d - off] + (s[d - off] == 1 ? 0 : coord[d]);
    out[i] = load_as<C>(t, j);
    for (size_t d = r; d-- > 0;) {
      if (++coord[d] < target[d]) break;
      coord[d] = 0;
    }
  }
}

// ---- BatchNormalization

struct BnAttrs {
  double eps = 1e-5, momentum = 0.9;
  bool training = false;
};

Status batch_norm_kernel(KernelContext& ctx, const BnAttrs& a) {
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) return ctx.error("X must have rank >= 2");
  for (int i = 1; i < 5; ++i)
    if (!ctx.has_input(i)) return ctx.error("scale, B, mean and var are required");
  const int64_t N = x.dim(0), C = x.dim(1), S = (N * C) != 0 ? x.numel() / (N * C) : 0;
  // 1, or S for opset-7 spatial=0 parameters (the scale's size says which); every parameter has the
  // scale's C * per entries (a scale of C * S beside a mean of C read past the mean: fuzz_import).
  const int64_t per = S > 1 && ctx.input(1).numel() == C * S ? S : 1;
  for (int i = 1; i < 5; ++i)
    if (ctx.input(i).numel() != C * per)
      return ctx.error("input " + std::to_string(i) + " must have C = " + std::to_string(C) + " entries" +
                       (per > 1 ? " per spatial position, as the scale has" : ""));
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  visit_real(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ReadAs<T> xv(x);
    WriteAs<T> out(y);
    std::vector<double> mean(C * per), var(C * per);
    for (int64_t i = 0; i < C * per; ++i) {
      mean[i] = load_as<double>(ctx.input(3), i);
      var[i] = load_as<double>(ctx.input(4), i);
    }
    if (a.training) {
      std::vector<double> bm(C), bv(C);
      parallel_for(C, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          double s = 0, q = 0;
          for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < S; ++i) s += xv[(n * C + c) * S + i];
          const double m = (N * S) != 0 ? s / (N * S) : 0;
          for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < S; ++i) {
              const double d = xv[(n * C + c) * S + i] - m;
              q += d * d;
            }
          bm[c] = m;
          bv[c] = (N * S) != 0 ? q / (N * S) : 0;
        }
      });
      for (int out_i = 1; out_i <= 2; ++out_i) {
        if (!ctx.has_output(out_i)) continue;
        const Tensor& ref = ctx.input(out_i + 2);
        Tensor& o = ctx.output(out_i, ref.dtype(), ref.shape());
        for (int64_t c = 0; c < C; ++c)
          store_as<double>(o, c, (out_i == 1 ? mean[c] : var[c]) * a.momentum + (out_i == 1 ? bm[c] : bv[c]) * (1 - a.momentum));
      }
      mean = bm;
      var = bv;
    } else {
      for (int out_i = 1; out_i < ctx.num_outputs(); ++out_i) {  // old opsets: pass the statistics through
        if (!ctx.has_output(out_i)) continue;
        const Tensor& ref = ctx.input(out_i % 2 == 1 ? 3 : 4);
        Tensor& o = ctx.output(out_i, ref.dtype(), ref.shape());
        std::memcpy(o.raw(), ref.raw(), ref.nbytes());
      }
    }
    std::vector<double> mul(C * per), add(C * per);  // y = x * mul + add
    for (int64_t i = 0; i < C * per; ++i) {
      mul[i] = load_as<double>(ctx.input(1), i) / std::sqrt(var[i] + a.eps);
      add[i] = load_as<double>(ctx.input(2), i) - mean[i] * mul[i];
    }
    parallel_for(N * C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t c = nc % C;
        for (int64_t i = 0; i < S; ++i) {
          const int64_t pi = c * per + (per == 1 ? 0 : i);
          out[nc * S + i] = static_cast<T>(xv[nc * S + i] * mul[pi] + add[pi]);
        }
      }
    });
    out.commit();
  });
  return Status::Ok();
}

// Inference with constant statistics: y = x * mul[c] + add[c], folded once at prepare (float32).
// Returns null when the node does not qualify (the general kernel takes it).
std::unique_ptr<Kernel> make_constant_batch_norm(const ir::Node& n, const BnAttrs& a) {
  if (a.training || n.outputs.size() != 1 || n.inputs.size() != 5) return nullptr;
  if (!n.inputs[0] || n.inputs[0]->type.dtype != DataType::kFloat32) return nullptr;
  const Tensor* p[4];
  for (int i = 0; i < 4; ++i) {
    const ir::Value* v = n.inputs[i + 1];
    if (!v || !v->is_constant() || v->constant->rank() != 1 || !is_real(v->constant->dtype())) return nullptr;
    p[i] = &*v->constant;
  }
  const int64_t C = p[0]->numel();
  for (const Tensor* t : p)
    if (t->numel() != C) return nullptr;
  auto mul = std::make_shared<std::vector<float>>(C), add = std::make_shared<std::vector<float>>(C);
  for (int64_t c = 0; c < C; ++c) {
    const double m = load_as<double>(*p[0], c) / std::sqrt(load_as<double>(*p[3], c) + a.eps);
    (*mul)[c] = static_cast<float>(m);
    (*add)[c] = static_cast<float>(load_as<double>(*p[1], c) - load_as<double>(*p[2], c) * m);
  }
  auto reshape = [C](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() < 2 || x[1] != C) return rc.error("X must be [N, " + std::to_string(C) + ", ...], got " + shape_to_string(x));
    if (rc.in[0].dtype != DataType::kFloat32) return rc.error("X must be float32");
    rc.out[0] = {DataType::kFloat32, x};
    return Status::Ok();
  };
  auto run = [C, mul, add](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const int64_t planes = x.dim(0) * C, S = planes ? x.numel() / planes : 0;
    const float* xp = x.data<float>();
    float* yp = y.data<float>();
    const float* mp = mul->data();
    const float* ap = add->data();
    parallel_for(planes, std::max<int64_t>(1, 4096 / std::max<int64_t>(S, 1)), [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const float m = mp[nc % C], d = ap[nc % C];
        const float* xi = xp + nc * S;
        float* yi = yp + nc * S;
        for (int64_t i = 0; i < S; ++i) yi[i] = xi[i] * m + d;
      }
    });
    return Status::Ok();
  };
  return std::make_unique<StagedKernel>(reshape, run);
}

// ---- Group-wise normalizations: InstanceNormalization (a group per channel) and GroupNormalization.

// Normalizes x [N, C, S...] over groups of C/G channels; scale/bias are per channel (numel C) or
// per group (numel G).
// Group (and instance: groups = C) normalization's reshape: checks, and X and Y as T in the workspace
// when their dtype is not T. `groups` < 0: C groups.
Status group_norm_reshape(ReshapeContext& rc, int64_t groups) {
  if (rc.in.size() < 3 || !rc.in[0].present || !rc.in[1].present || !rc.in[2].present)
    return rc.error("X, scale and bias are required");
  const Shape& x = rc.in[0].shape;
  const DataType dt = rc.in[0].dtype;
  if (x.size() < 2) return rc.error("X must have rank >= 2");
  const int64_t C = x[1];
  if (groups < 0) groups = C;
  if (groups < 1 || C % groups != 0) return rc.error("channels must be divisible by num_groups");
  for (int i = 1; i <= 2; ++i)
    if (shape_numel(rc.in[i].shape) != C && shape_numel(rc.in[i].shape) != groups)
      return rc.error("scale and bias must have C or num_groups entries");
  if (!real_copies_bytes(dt, shape_numel(x), &rc.workspace_bytes))
    return rc.error(std::string("unsupported dtype ") + dtype_name(dt));
  rc.out[0] = {dt, x};
  return Status::Ok();
}

Status group_norm(KernelContext& ctx, int64_t groups, double eps) {
  const Tensor& x = ctx.input(0);
  const int64_t N = x.dim(0), C = x.dim(1), S = (N * C) != 0 ? x.numel() / (N * C) : 0;
  if (groups < 0) groups = C;
  const Tensor& sc = ctx.input(1);
  const Tensor& bi = ctx.input(2);
  const int64_t cg = C / groups, len = cg * S;
  Tensor& y = ctx.output(0);
  visit_real(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Scratch ws(ctx.workspace());
    const RealCopies<T> copies(ws, x.dtype(), x.numel());
    ReadAs<T> xv(x, copies.x);
    WriteAs<T> out(y, copies.y);
    parallel_for(N * groups, 1, [&](int64_t b, int64_t e) {
      for (int64_t ng = b; ng < e; ++ng) {
        const T* p = xv.data() + ng * len;
        double mean, var;
        moments(p, len, mean, var);
        const double inv = 1.0 / std::sqrt(var + eps);
        const int64_t g = ng % groups;
        for (int64_t k = 0; k < cg; ++k) {
          const int64_t c = g * cg + k;
          const double s = load_as<double>(sc, sc.numel() == C ? c : g), bb = load_as<double>(bi, bi.numel() == C ? c : g);
          T* o = out.data() + ng * len + k * S;
          for (int64_t i = 0; i < S; ++i) o[i] = static_cast<T>((p[k * S + i] - mean) * inv * s + bb);
        }
      }
    });
    out.commit();
  });
  return Status::Ok();
}

// ---- LayerNormalization / RMSNormalization over the dims from `axis` on.

struct LastDimsAttrs {
  int64_t axis = -1;
  double eps = 1e-5;
  DataType stash = DataType::kFloat32;
  bool rms = false;
};

// Whether a tensor of shape `s` holds exactly `inner`'s elements in order: `s` is `inner`'s trailing dims and
// the dims before them are 1 (what broadcasting it to `inner` leaves as it is).
bool matches_inner(const Shape& s, const Shape& inner) {
  if (s.size() > inner.size()) return false;
  const size_t lead = inner.size() - s.size();
  for (size_t d = 0; d < lead; ++d)
    if (inner[d] != 1) return false;
  return std::equal(s.begin(), s.end(), inner.begin() + static_cast<std::ptrdiff_t>(lead));
}

// The float32 rows (norm_rows.h).
void last_dims_norm_f32(KernelContext& ctx, const LastDimsAttrs& a, int64_t outer, int64_t D, Tensor& y, Tensor* mean_t,
                        Tensor* inv_t) {
  NormRow r;
  r.D = D;
  r.gamma = ctx.input(1).data<float>();
  r.beta = !a.rms && ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr;
  r.eps = a.eps;
  r.rms = a.rms;
  const float* x = ctx.input(0).data<float>();
  float* out = y.data<float>();
  parallel_for(outer, std::max<int64_t>(1, 4096 / std::max<int64_t>(D, 1)), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      double mean = 0, inv = 0;
      norm_row(r, x + row * D, nullptr, nullptr, out + row * D, &mean, &inv);
      if (mean_t) store_as<double>(*mean_t, row, mean);
      if (inv_t) store_as<double>(*inv_t, row, inv);
    }
  });
}

// Layer/RMS normalization per shape: X as [outer, D] rows, the statistics' shape, which path runs.
struct LastDimsPlan {
  Shape inner, stat_shape;
  int64_t outer = 0, D = 0;
  bool f32_rows = false;
};

// The general path's workspace: Scale and B broadcast to the normalized dims (double), then X and Y
// as T when their dtype is not T.
template <typename T>
struct LastDimsScratch {
  double *scale = nullptr, *bias = nullptr;
  T *x = nullptr, *y = nullptr;
  LastDimsScratch(Scratch& ws, const LastDimsPlan& p, DataType dt, bool has_b) {
    scale = ws.take<double>(static_cast<size_t>(p.D));
    if (has_b) bias = ws.take<double>(static_cast<size_t>(p.D));
    const RealCopies<T> copies(ws, dt, p.outer * p.D);
    x = copies.x;
    y = copies.y;
  }
};

Status last_dims_reshape(ReshapeContext& rc, const LastDimsAttrs& a) {
  if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("X and Scale are required");
  const Shape& x = rc.in[0].shape;
  const DataType dt = rc.in[0].dtype;
  int64_t axis = a.axis;
  if (!ops::normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
  auto plan = std::make_shared<LastDimsPlan>();
  LastDimsPlan& p = *plan;
  p.inner.assign(x.begin() + axis, x.end());
  p.D = shape_numel(p.inner);
  p.outer = p.D ? shape_numel(x) / p.D : shape_numel(Shape(x.begin(), x.begin() + axis));
  const bool has_b = !a.rms && rc.in.size() > 2 && rc.in[2].present;
  auto matches = [&p](const ReshapeContext::In& in) {
    return in.dtype == DataType::kFloat32 && matches_inner(in.shape, p.inner);
  };
  // float32 with float32 Scale/B of exactly the normalized dims: the vectorized row; otherwise Scale
  // and B broadcast to them, in double.
  p.f32_rows = dt == DataType::kFloat32 && matches(rc.in[1]) && (!has_b || matches(rc.in[2]));
  if (!p.f32_rows) {
    if (std::string why = broadcast_to_error(rc.in[1].shape, p.inner); !why.empty()) return rc.error("Scale: " + why);
    if (has_b)
      if (std::string why = broadcast_to_error(rc.in[2].shape, p.inner); !why.empty()) return rc.error("B: " + why);
    if (!visit_real(dt, [&](auto tag) {
          using T = typename decltype(tag)::type;
          Scratch ws;
          LastDimsScratch<T>(ws, p, dt, has_b);
          rc.workspace_bytes = ws.bytes();
        }))
      return rc.error(std::string("unsupported dtype ") + dtype_name(dt));
  }
  p.stat_shape.assign(x.begin(), x.begin() + axis);
  p.stat_shape.resize(x.size(), 1);
  rc.out[0] = {dt, x};
  for (size_t o = 1; o < rc.out.size() && o < 3; ++o) rc.out[o] = {a.stash, p.stat_shape};
  rc.state = std::move(plan);
  return Status::Ok();
}

Status last_dims_norm(KernelContext& ctx, const LastDimsAttrs& a) {
  const LastDimsPlan& p = shape_state<LastDimsPlan>(ctx);
  const Tensor& x = ctx.input(0);
  const bool has_b = !a.rms && ctx.has_input(2);
  const int64_t outer = p.outer, D = p.D;
  Tensor& y = ctx.output(0);
  Tensor* mean_t = !a.rms && ctx.has_output(1) ? &ctx.output(1) : nullptr;
  Tensor* inv_t = !a.rms && ctx.has_output(2) ? &ctx.output(2) : nullptr;
  if (p.f32_rows) {
    last_dims_norm_f32(ctx, a, outer, D, y, mean_t, inv_t);
    return Status::Ok();
  }
  visit_real(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Scratch ws(ctx.workspace());
    const LastDimsScratch<T> scratch(ws, p, x.dtype(), has_b);
    const double* scale = scratch.scale;
    const double* bias = scratch.bias;
    expand_into(ctx.input(1), p.inner, scratch.scale);
    if (has_b) expand_into(ctx.input(2), p.inner, scratch.bias);
    ReadAs<T> xv(x, scratch.x);
    WriteAs<T> out(y, scratch.y);
    parallel_for(outer, 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* p = xv.data() + r * D;
        double mean = 0, var = 0;
        if (a.rms) {
          for (int64_t i = 0; i < D; ++i) var += static_cast<double>(p[i]) * p[i];
          var = D ? var / D : 0;
        } else {
          moments(p, D, mean, var);
        }
        const double inv = 1.0 / std::sqrt(var + a.eps);
        T* o = out.data() + r * D;
        for (int64_t i = 0; i < D; ++i)
          o[i] = static_cast<T>((p[i] - mean) * inv * scale[i] + (bias ? bias[i] : 0.0));
        if (mean_t) store_as<double>(*mean_t, r, mean);
        if (inv_t) store_as<double>(*inv_t, r, inv);
      }
    });
    out.commit();
  });
  return Status::Ok();
}

// ---- LRN across channels.

struct LrnAttrs {
  int64_t size = 1;
  double alpha = 1e-4, beta = 0.75, bias = 1.0;
};

Status lrn_reshape(ReshapeContext& rc, const LrnAttrs& a) {
  const Shape& x = rc.in[0].shape;
  if (x.size() < 2) return rc.error("X must have rank >= 2");
  if (a.size < 1) return rc.error("size must be positive");
  if (!real_copies_bytes(rc.in[0].dtype, shape_numel(x), &rc.workspace_bytes))
    return rc.error(std::string("unsupported dtype ") + dtype_name(rc.in[0].dtype));
  rc.out[0] = {rc.in[0].dtype, x};
  return Status::Ok();
}

Status lrn_kernel(KernelContext& ctx, const LrnAttrs& a) {
  const Tensor& x = ctx.input(0);
  const int64_t N = x.dim(0), C = x.dim(1), S = (N * C) != 0 ? x.numel() / (N * C) : 0;
  const int64_t before = (a.size - 1) / 2, after = a.size - 1 - before;
  Tensor& y = ctx.output(0);
  visit_real(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Scratch ws(ctx.workspace());
    const RealCopies<T> copies(ws, x.dtype(), x.numel());
    ReadAs<T> xv(x, copies.x);
    WriteAs<T> out(y, copies.y);
    parallel_for(N * C, 1, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t n = nc / C, c = nc % C;
        const int64_t c0 = std::max<int64_t>(0, c - before), c1 = std::min<int64_t>(C - 1, c + after);
        for (int64_t i = 0; i < S; ++i) {
          double sq = 0;
          for (int64_t k = c0; k <= c1; ++k) {
            const double v = xv[(n * C + k) * S + i];
            sq += v * v;
          }
          out[nc * S + i] = static_cast<T>(xv[nc * S + i] / std::pow(a.bias + a.alpha / a.size * sq, a.beta));
        }
      }
    });
    out.commit();
  });
  return Status::Ok();
}

// ---- MeanVarianceNormalization over `axes`.

Status mvn_kernel(KernelContext& ctx, const std::vector<int64_t>& axes_attr) {
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  std::vector<bool> reduced(static_cast<size_t>(r), false);
  for (int64_t ax : axes_attr) {
    if (!ops::normalize_axis(ax, r)) return ctx.error("axis " + std::to_string(ax) + " out of range");
    reduced[ax] = true;
  }
  // Each element's index among the kept (not reduced) coordinates.
  Shape kept_dims;
  for (int64_t d = 0; d < r; ++d) kept_dims.push_back(reduced[d] ? 1 : x.dim(static_cast<int>(d)));
  const int64_t groups = shape_numel(kept_dims), n = x.numel();
  std::vector<int64_t> group_of(static_cast<size_t>(n));
  std::vector<int64_t> coord(static_cast<size_t>(r), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t g = 0;
    for (int64_t d = 0; d < r; ++d) g = g * kept_dims[d] + (reduced[d] ? 0 : coord[d]);
    group_of[i] = g;
    for (int64_t d = r; d-- > 0;) {
      if (++coord[d] < x.dim(static_cast<int>(d))) break;
      coord[d] = 0;
    }
  }
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  visit_real(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ReadAs<T> xv(x);
    WriteAs<T> out(y);
    std::vector<double> sum(groups, 0), sq(groups, 0);
    std::vector<int64_t> cnt(groups, 0);
    for (int64_t i = 0; i < n; ++i) {
      sum[group_of[i]] += xv[i];
      ++cnt[group_of[i]];
    }
    for (int64_t g = 0; g < groups; ++g) sum[g] = cnt[g] ? sum[g] / cnt[g] : 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = xv[i] - sum[group_of[i]];
      sq[group_of[i]] += d * d;
    }
    for (int64_t g = 0; g < groups; ++g) sq[g] = std::sqrt(cnt[g] ? sq[g] / cnt[g] : 0) + 1e-9;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>((xv[i] - sum[group_of[i]]) / sq[group_of[i]]);
    out.commit();
  });
  return Status::Ok();
}

}  // namespace

void register_norm(KernelRegistry& r) {
  auto real = [](const ir::Node& n) { return require_real(n, 0); };
  // Before opset 7: `is_test` (default 0, training) and `spatial` (implied by the parameter
  // shapes here); only test mode is run.
  auto bn_check = [real](const ir::Node& n) -> std::string {
    if (ops::parse_batch_norm(n).legacy_training)
      return "training-mode BatchNormalization (is_test=0) of opset < 7 is not supported";
    return real(n);
  };
  r.add({"BatchNormalization", "", 1, 1 << 30, "cpu.BatchNormalization.any", bn_check, [](const ir::Node& n, KernelInit&) {
           const ops::BatchNormParams p = ops::parse_batch_norm(n);
           BnAttrs a;
           a.eps = p.epsilon;
           a.momentum = p.momentum;
           a.training = p.training;
           if (auto k = make_constant_batch_norm(n, a)) return Expected<KernelPtr>(std::move(k));
           return make_kernel([a](KernelContext& ctx) { return batch_norm_kernel(ctx, a); });
         }});
  r.add({"InstanceNormalization", "", 1, 1 << 30, "cpu.InstanceNormalization.any", real, [](const ir::Node& n, KernelInit&) {
           const double eps = ops::parse_instance_norm(n).epsilon;
           return make_staged([](ReshapeContext& rc) { return group_norm_reshape(rc, -1); },
                              [eps](KernelContext& ctx) { return group_norm(ctx, -1, eps); });
         }});
  r.add({"GroupNormalization", "", 18, 1 << 30, "cpu.GroupNormalization.any", real, [](const ir::Node& n, KernelInit&) {
           const ops::GroupNormParams p = ops::parse_group_norm(n);
           const double eps = p.epsilon;
           const int64_t groups = p.num_groups;
           return make_staged([groups](ReshapeContext& rc) { return group_norm_reshape(rc, groups); },
                              [eps, groups](KernelContext& ctx) { return group_norm(ctx, groups, eps); });
         }});
  for (bool rms : {false, true}) {
    r.add({rms ? "RMSNormalization" : "LayerNormalization", "", rms ? 23 : 17, 1 << 30,
           rms ? "cpu.RMSNormalization.any" : "cpu.LayerNormalization.any", real, [rms](const ir::Node& n, KernelInit&) {
             const ops::LayerNormParams p = ops::parse_layer_norm(n);
             LastDimsAttrs a;
             a.axis = p.axis;
             a.eps = p.epsilon;
             // The statistics outputs hold a float type only (shape inference takes any valid dtype).
             a.stash = is_real(p.stash) ? p.stash : DataType::kFloat32;
             a.rms = rms;
             return make_staged([a](ReshapeContext& rc) { return last_dims_reshape(rc, a); },
                                [a](KernelContext& ctx) { return last_dims_norm(ctx, a); });
           }});
  }
  r.add({"LRN", "", 1, 1 << 30, "cpu.LRN.any", real, [](const ir::Node& n, KernelInit&) {
           const ops::LrnParams p = ops::parse_lrn(n);
           LrnAttrs a;
           a.size = p.size;
           a.alpha = p.alpha;
           a.beta = p.beta;
           a.bias = p.bias;
           return make_staged([a](ReshapeContext& rc) { return lrn_reshape(rc, a); },
                              [a](KernelContext& ctx) { return lrn_kernel(ctx, a); });
         }});
  r.add({"MeanVarianceNormalization", "", 9, 1 << 30, "cpu.MeanVarianceNormalization.any", real,
         [](const ir::Node& n, KernelInit&) {
           const std::vector<int64_t> axes = ops::parse_mvn(n).axes;
           return make_kernel([axes](KernelContext& ctx) { return mvn_kernel(ctx, axes); });
         }});
}

}  // namespace kiln::cpu::nn
