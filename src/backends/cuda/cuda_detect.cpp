// backends/cuda/cuda_detect.cpp — Det (11+), DeformConv (19+, 2-D), MaxUnpool (9+), ConvInteger and
// QLinearConv (10+) on the GPU;
// shapes checked as the CPU kernels check them (launchers in cuda_detect.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/nn.h"
#include "ops/params_ml.h"
#include "ops/params_nn.h"

namespace kiln::cuda {
namespace {

std::string check_real(const ir::Node& n, size_t required) {
  for (size_t i = 0; i < required; ++i)
    if (!n.has_input(static_cast<int>(i))) return "input " + std::to_string(i) + " is required";
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt != DataType::kUndefined && !is_float_type(dt) && dt != DataType::kFloat64)
    return std::string(dtype_name(dt)) + " does not run on CUDA";
  return "";
}

struct DetPlan {
  int64_t count = 0, m = 0;
};

Expected<KernelPtr> create_det() {
  auto reshape = [](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() < 2 || x[x.size() - 1] != x[x.size() - 2]) return rc.error("input must be [..., M, M]");
    auto p = std::make_shared<DetPlan>();
    p->m = x.back();
    const Shape os(x.begin(), x.end() - 2);
    p->count = shape_numel(os);
    rc.out[0] = {rc.in[0].dtype, os};
    rc.workspace_bytes = static_cast<size_t>(p->count * p->m * p->m) * sizeof(double);
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const auto& p = shape_state<DetPlan>(ctx);
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_det(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), static_cast<double*>(ctx.workspace()),
                                    p.count, p.m, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

Expected<KernelPtr> create_deform_conv(const ir::Node& n) {
  const ops::DeformConvParams dp = ops::parse_deform_conv(n);
  const std::vector<int64_t> dil = dp.dilations, pads = dp.pads, str = dp.strides, kernel = dp.kernel_shape;
  const int64_t group = dp.group, offset_group = dp.offset_group;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    const Shape &x = rc.in[0].shape, &wt = rc.in[1].shape, &off = rc.in[2].shape;
    if (x.size() != 4 || wt.size() != 4 || off.size() != 4) return rc.error("only 2-D DeformConv is supported (X, W, offset 4-D)");
    auto a = std::make_shared<DeformConvArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->n = x[0], a->c = x[1], a->h = x[2], a->w = x[3], a->oc = wt[0], a->kh = wt[2], a->kw = wt[3];
    a->group = group, a->offset_group = offset_group;
    if (group <= 0 || offset_group <= 0 || a->c % group || a->oc % group || a->c % offset_group || wt[1] != a->c / group)
      return rc.error("group / offset_group do not divide the channels, or W's dim 1 is not C / group");
    if (!kernel.empty() && (kernel.size() != 2 || kernel[0] != a->kh || kernel[1] != a->kw))
      return rc.error("kernel_shape differs from W's spatial dims");
    a->sh = str.empty() ? 1 : str[0], a->sw = str.size() > 1 ? str[1] : 1;
    a->dh = dil.empty() ? 1 : dil[0], a->dw = dil.size() > 1 ? dil[1] : 1;
    a->pt = pads.size() == 4 ? pads[0] : 0, a->pl = pads.size() == 4 ? pads[1] : 0;
    const int64_t pb = pads.size() == 4 ? pads[2] : 0, pr = pads.size() == 4 ? pads[3] : 0;
    if (a->sh <= 0 || a->sw <= 0 || a->dh <= 0 || a->dw <= 0) return rc.error("strides and dilations must be positive");
    a->oh = (a->h + a->pt + pb - (a->dh * (a->kh - 1) + 1)) / a->sh + 1;
    a->ow = (a->w + a->pl + pr - (a->dw * (a->kw - 1) + 1)) / a->sw + 1;
    if (a->oh < 0 || a->ow < 0) return rc.error("kernel larger than the padded input");
    const int64_t K = a->kh * a->kw;
    if (off != Shape{a->n, offset_group * 2 * K, a->oh, a->ow}) return rc.error("offset has the wrong shape");
    if (rc.in.size() > 3 && rc.in[3].present && shape_numel(rc.in[3].shape) != a->oc)
      return rc.error("B must have one value per output channel");
    if (rc.in.size() > 4 && rc.in[4].present && rc.in[4].shape != Shape{a->n, offset_group * K, a->oh, a->ow})
      return rc.error("mask has the wrong shape");
    for (size_t i = 1; i < rc.in.size(); ++i)
      if (rc.in[i].present && rc.in[i].dtype != rc.in[0].dtype) return rc.error("every input must have X's dtype on CUDA");
    rc.out[0] = {rc.in[0].dtype, Shape{a->n, a->oc, a->oh, a->ow}};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    DeformConvArgs a = shape_state<DeformConvArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.weight = ctx.input(1).raw();
    a.offset = ctx.input(2).raw();
    a.bias = ctx.has_input(3) ? ctx.input(3).raw() : nullptr;
    a.mask = ctx.has_input(4) ? ctx.input(4).raw() : nullptr;
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_deform_conv(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

Expected<KernelPtr> create_max_unpool(const ir::Node& n) {
  const ops::WindowAttrs w = ops::parse_pool(n).window;
  auto reshape = [w](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() < 3 || x.size() > static_cast<size_t>(kMaxRank)) return rc.error("X must have rank 3 to 8");
    if (rc.in[1].shape != x) return rc.error("I must have the shape of X");
    const size_t sd = x.size() - 2;
    if (w.kernel.size() != sd) return rc.error("kernel_shape must have one entry per spatial dim");
    Shape inferred = {x[0], x[1]};
    for (size_t d = 0; d < sd; ++d) {
      const int64_t s = w.strides.empty() ? 1 : w.strides[d];
      const int64_t pb = w.pads.empty() ? 0 : w.pads[d], pe = w.pads.empty() ? 0 : w.pads[sd + d];
      inferred.push_back((x[d + 2] - 1) * s + w.kernel[d] - pb - pe);
    }
    Shape ys = inferred;
    if (rc.in.size() > 2 && rc.in[2].present) {
      auto os = host_ints(rc.in[2].value);
      if (!os || os->size() != x.size()) return rc.error("output_shape must have the rank of X, known on the host");
      ys.assign(os->begin(), os->end());
      for (size_t d = 0; d < x.size(); ++d)
        if (ys[d] < inferred[d]) return rc.error("output_shape is smaller than the unpooled shape");
    }
    auto ix = std::make_shared<UnpoolIndex>();
    ix->rank = static_cast<int>(x.size());
    ix->same = ys == inferred;
    for (int d = 0; d < ix->rank; ++d) {
      ix->inferred[d] = inferred[d];
      ix->out[d] = ys[d];
    }
    rc.out[0] = {rc.in[0].dtype, ys};
    rc.state = std::move(ix);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    return launched(ctx, launch_max_unpool(static_cast<int>(dtype_size(x.dtype())), x.raw(), ctx.input(1).data<int64_t>(), y.raw(),
                                           x.numel(), y.numel(), shape_state<UnpoolIndex>(ctx), state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// ConvInteger (x, w, x_zero_point, w_zero_point) and QLinearConv (x, x_scale, x_zp, w, w_scale, w_zp,
// y_scale, y_zp, B): int8/uint8 operands; the scalar-or-per-channel rules are checked from the static
// shapes (what cannot be known before running stays on the CPU).
bool is_q8(DataType t) { return t == DataType::kInt8 || t == DataType::kUInt8; }
int64_t static_numel(const ir::Value* v) {
  if (!v || !v->type.is_tensor() || !v->type.shape.known || !v->type.shape.is_static()) return -1;
  return shape_numel(v->type.shape.to_static());
}

std::string check_qconv(const ir::Node& n, bool qlinear) {
  const int ix = 0, iw = qlinear ? 3 : 1;
  for (int i : {ix, iw})
    if (!n.has_input(i) || !is_q8(n.inputs[i]->type.dtype)) return "x and w must be int8 or uint8";
  const ir::Value* w = n.inputs[iw];
  if (!w->type.shape.known || w->type.shape.rank() < 3 || w->type.shape.rank() > 5) return "1-3 spatial dims with W's rank known";
  const std::vector<int> scalars = qlinear ? std::vector<int>{1, 2, 6, 7} : std::vector<int>{2};
  for (int i : scalars) {
    if (!n.has_input(i)) {
      if (qlinear) return "scales and zero points are required";
      continue;
    }
    if (static_numel(n.inputs[i]) != 1) return "x/y zero points and scales must be scalars";
  }
  for (int i : qlinear ? std::vector<int>{4, 5} : std::vector<int>{3}) {
    if (!n.has_input(i)) {
      if (qlinear) return "scales and zero points are required";
      continue;
    }
    if (static_numel(n.inputs[i]) < 1) return "w's zero point and scale must have a static shape";
  }
  if (qlinear) {
    for (int i : {1, 4, 6})
      if (n.inputs[i]->type.dtype != DataType::kFloat32) return "scales must be float32";
    if (!is_q8(n.inputs[7]->type.dtype)) return "y_zero_point must be int8 or uint8";
    if (n.has_input(8) && n.inputs[8]->type.dtype != DataType::kInt32) return "B must be int32";
  }
  return "";
}

Expected<KernelPtr> create_qconv(const ir::Node& n, bool qlinear) {
  const ops::ConvParams cp = ops::parse_conv(n);
  const ops::WindowAttrs w = cp.window;
  const int64_t group = cp.group;
  auto reshape = [w, group, qlinear](ReshapeContext& rc) -> Status {
    const int ix = 0, iw = qlinear ? 3 : 1;
    const Shape &xs = rc.in[ix].shape, &ws = rc.in[iw].shape;
    if (xs.size() != ws.size() || xs.size() < 3 || xs.size() > 5) return rc.error("X and W must have the same rank, 3 to 5");
    const int64_t C = xs[1], M = ws[0];
    if (group < 1 || C % group || M % group || ws[1] != C / group) return rc.error("channels do not match the group");
    const std::vector<int64_t> in(xs.begin() + 2, xs.end()), k(ws.begin() + 2, ws.end());
    auto g = ops::window_geometry(w, in, k);
    if (!g.ok()) return rc.error(g.status().message());
    auto a = std::make_shared<QConvArgs>();
    a->win = window_index(*g, in);
    a->batch = xs[0], a->c = C, a->m = M, a->group = group;
    Shape ys = {xs[0], M};
    ys.insert(ys.end(), g->out.begin(), g->out.end());
    a->x_signed = rc.in[ix].dtype == DataType::kInt8;
    a->w_signed = rc.in[iw].dtype == DataType::kInt8;
    const int iwz = qlinear ? 5 : 3;
    if (rc.in.size() > static_cast<size_t>(iwz) && rc.in[iwz].present) {
      const int64_t nz = shape_numel(rc.in[iwz].shape);
      if (nz != 1 && nz != M) return rc.error("w_zero_point must be a scalar or have M entries");
      a->wz_per_m = nz == M && M != 1;
    }
    a->qlinear = qlinear;
    if (qlinear) {
      const int64_t nws = shape_numel(rc.in[4].shape);
      if (nws != 1 && nws != M) return rc.error("w_scale must be a scalar or have M entries");
      a->ws_per_m = nws == M && M != 1;
      if (rc.in.size() > 8 && rc.in[8].present && shape_numel(rc.in[8].shape) != M) return rc.error("B must have M entries");
      a->y_signed = rc.in[7].dtype == DataType::kInt8;
    }
    rc.out[0] = {qlinear ? rc.in[7].dtype : DataType::kInt32, ys};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [qlinear](KernelContext& ctx) -> Status {
    QConvArgs a = shape_state<QConvArgs>(ctx);
    auto ptr = [&](int i) -> const void* { return ctx.has_input(i) ? ctx.input(i).raw() : nullptr; };
    if (qlinear) {
      a.x = ptr(0), a.xs = static_cast<const float*>(ptr(1)), a.xz = ptr(2), a.w = ptr(3), a.ws = static_cast<const float*>(ptr(4));
      a.wz = ptr(5), a.ys = static_cast<const float*>(ptr(6)), a.yz = ptr(7), a.bias = static_cast<const int32_t*>(ptr(8));
    } else {
      a.x = ptr(0), a.w = ptr(1), a.xz = ptr(2), a.wz = ptr(3);
    }
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_qconv(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_detect(KernelRegistry& r) {
  for (bool ql : {false, true}) {
    KernelDef q = kernel_row(ql ? "QLinearConv" : "ConvInteger", 10, [ql](const ir::Node& n) { return check_qconv(n, ql); },
                             [ql](const ir::Node& n, KernelInit&) { return create_qconv(n, ql); });
    q.half_floats = false;
    r.add(q);
  }
  r.add(kernel_row("Det", 11, [](const ir::Node& n) { return check_real(n, 1); }, [](const ir::Node&, KernelInit&) { return create_det(); }));
  r.add(kernel_row("DeformConv", 19, [](const ir::Node& n) { return check_real(n, 3); },
                   [](const ir::Node& n, KernelInit&) { return create_deform_conv(n); }));
  KernelDef unpool = kernel_row("MaxUnpool", 9, [](const ir::Node& n) -> std::string {
    if (std::string why = check_real(n, 2); !why.empty()) return why;
    return n.inputs[1]->type.dtype == DataType::kInt64 || n.inputs[1]->type.dtype == DataType::kUndefined ? "" : "I must be int64";
  }, [](const ir::Node& n, KernelInit&) { return create_max_unpool(n); });
  unpool.host_inputs = 0b100;  // output_shape
  r.add(unpool);
}

}  // namespace kiln::cuda
