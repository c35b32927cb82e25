// backends/cuda/cuda_conv_pool_op.cpp — kiln.ConvPool's kernel row: the checks placement reads, the
// weights packed once (cuda_conv_pool.cu's K layout), the geometry per input shape.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_nn.h"
#include "ops/shape_infer_util.h"

namespace kiln::cuda {
namespace {

enum CpIn { kX = 0, kW, kB, kYScale, kYZero };

constexpr int64_t kOutChannels = 64;  // the kernel's N

// The geometry-independent half of the kernel's arguments, from the node alone.
ConvPoolArgs static_args(const ir::Node& n, const ops::ConvPoolParams& p) {
  ConvPoolArgs a;
  const Shape& w = n.inputs[kW]->constant->shape();
  a.c = static_cast<int>(w[3]);
  a.kh = static_cast<int>(p.k[0]), a.kw = static_cast<int>(p.k[1]);
  a.sh = static_cast<int>(p.s[0]), a.sw = static_cast<int>(p.s[1]);
  a.ph = static_cast<int>(p.p[0]), a.pw = static_cast<int>(p.p[1]);
  a.pkh = static_cast<int>(p.pk[0]), a.pkw = static_cast<int>(p.pk[1]);
  a.psh = static_cast<int>(p.ps[0]), a.psw = static_cast<int>(p.ps[1]);
  a.pph = static_cast<int>(p.pp[0]), a.ppw = static_cast<int>(p.pp[1]);
  a.x_nchw = p.x_channels_first;
  a.int8_out = n.has_input(kYScale);
  conv_pool_pack_k(a.c, a.kh, a.kw, a.sw, &a.cs, &a.lp, &a.kp);
  return a;
}

std::string conv_pool_check(const ir::Node& n) {
  const ops::ConvPoolParams p = ops::parse_conv_pool(n);
  if (!p.valid) return "window attributes incomplete or out of range";
  const DataType x = n.has_input(kX) ? n.inputs[kX]->type.dtype : DataType::kUndefined;
  if (x != DataType::kFloat32 && x != DataType::kFloat16) return "X must be float32 or float16";
  const Tensor* w = const_at(n, kW);
  if (!w || w->dtype() != DataType::kFloat16 || w->shape().size() != 4) return "W must be a constant float16 [M, kh, kw, C]";
  if (w->shape()[0] != kOutChannels) return "runs 64 output channels only";
  if (w->shape()[3] < 1 || w->shape()[3] > 4) return "runs 1-4 input channels only";
  if (w->shape()[1] != p.k[0] || w->shape()[2] != p.k[1]) return "kernel_shape does not match W";
  if (n.has_input(kB)) {
    const Tensor* b = const_at(n, kB);
    if (!b || b->numel() != kOutChannels || (b->dtype() != DataType::kFloat16 && b->dtype() != DataType::kFloat32))
      return "B must be 64 float16 or float32 constants";
  }
  const std::string act = n.attr_string("activation", "");
  if (act != "" && act != "Relu") return "activation must be Relu or none";
  if (n.has_input(kYScale) != n.has_input(kYZero)) return "y_scale and y_zero_point come together";
  if (n.has_input(kYScale)) {
    if (!one_positive(const_at(n, kYScale), nullptr)) return "y_scale must be one positive float32 constant";
    const Tensor* z = const_at(n, kYZero);
    if (!z || z->dtype() != DataType::kInt8 || z->numel() != 1) return "y_zero_point must be one int8 constant";
  } else if (n.outputs.empty() || !n.outputs[0] ||
             (n.outputs[0]->type.dtype != DataType::kFloat16 && n.outputs[0]->type.dtype != DataType::kUndefined)) {
    return "an output that is not quantized must be float16";
  }
  if (conv_pool_smem(static_args(n, p)) == 0) return "the windows are beyond the kernel's shared memory";
  return "";
}

struct ConvPoolConsts {
  ops::ConvPoolParams p;  // the node's windows, parsed once
  ConvPoolArgs base;
  Tensor w, bias;  // device: packed float16 [64, kp]; float32 [64]
};

Expected<std::shared_ptr<const ConvPoolConsts>> prepare(const ir::Node& n) {
  if (std::string why = conv_pool_check(n); !why.empty()) return invalid_argument(n.describe() + ": " + why);
  auto c = std::make_shared<ConvPoolConsts>();
  c->p = ops::parse_conv_pool(n);
  c->base = static_args(n, c->p);
  ConvPoolArgs& a = c->base;
  a.relu = n.attr_string("activation", "") == "Relu";
  if (a.int8_out) {
    double s = 1;
    one_positive(const_at(n, kYScale), &s);
    a.y_scale = static_cast<float>(s);
    std::vector<double> z;
    ops::read_doubles(*const_at(n, kYZero), z);
    a.y_zero = static_cast<int>(z[0]);
  }
  // W [64, kh, kw, C] → row m: kernel row r's taps at r·lp + column·cs + channel, zeros elsewhere.
  const Tensor& w = *const_at(n, kW);
  Tensor packed = Tensor::empty(DataType::kFloat16, {kOutChannels, a.kp});
  uint16_t* dst = packed.data<uint16_t>();
  std::memset(dst, 0, static_cast<size_t>(packed.numel()) * 2);
  const uint16_t* src = static_cast<const uint16_t*>(w.raw());
  for (int64_t m = 0; m < kOutChannels; ++m)
    for (int r = 0; r < a.kh; ++r)
      for (int s = 0; s < a.kw; ++s)
        for (int ch = 0; ch < a.c; ++ch)
          dst[m * a.kp + r * a.lp + s * a.cs + ch] = src[((m * a.kh + r) * a.kw + s) * a.c + ch];
  Tensor bias = Tensor::empty(DataType::kFloat32, {kOutChannels});
  std::vector<double> b(kOutChannels, 0.0);
  if (const Tensor* bt = const_at(n, kB)) ops::read_doubles(*bt, b);
  for (int64_t m = 0; m < kOutChannels; ++m) bias.data<float>()[m] = static_cast<float>(b[m]);
  KILN_ASSIGN_OR_RETURN(c->w, upload(packed));
  KILN_ASSIGN_OR_RETURN(c->bias, upload(bias));
  return std::shared_ptr<const ConvPoolConsts>(std::move(c));
}

Status reshape_conv_pool(ReshapeContext& rc, const ConvPoolConsts& c) {
  if (rc.in.empty() || !rc.in[kX].present) return rc.error("X is required");
  const Shape& x = rc.in[kX].shape;
  ConvPoolArgs a = c.base;
  if (x.size() != 4 || x[a.x_nchw ? 1 : 3] != a.c)
    return rc.error("X must be " + std::string(a.x_nchw ? "[N, " + std::to_string(a.c) + ", H, W]" : "[N, H, W, " + std::to_string(a.c) + "]") +
                    ", got " + shape_to_string(x));
  if (rc.in[kX].dtype != DataType::kFloat32 && rc.in[kX].dtype != DataType::kFloat16) return rc.error("X must be float32 or float16");
  const int64_t h = x[a.x_nchw ? 2 : 1], wd = x[a.x_nchw ? 3 : 2];
  const ops::ConvPoolParams& p = c.p;
  const int64_t pool_h = p.pooled(0, h), pool_w = p.pooled(1, wd);
  if (pool_h < 1 || pool_w < 1)
    return rc.error("the input " + shape_to_string(x) + " is smaller than the convolution's or the pool's window");
  const int64_t conv_h = p.conv_out(0, h), conv_w = p.conv_out(1, wd);
  if (x[0] > INT32_MAX || h > INT32_MAX || wd > INT32_MAX) return rc.error("X is too large for this kernel");
  a.n = static_cast<int>(x[0]);
  a.h = static_cast<int>(h), a.w_in = static_cast<int>(wd);
  a.oh = static_cast<int>(conv_h), a.ow = static_cast<int>(conv_w);
  a.poh = static_cast<int>(pool_h), a.pow = static_cast<int>(pool_w);
  a.x_f32 = rc.in[kX].dtype == DataType::kFloat32;
  rc.out[0] = {a.int8_out ? DataType::kInt8 : DataType::kFloat16, {x[0], pool_h, pool_w, kOutChannels}};
  rc.state = std::make_shared<ConvPoolArgs>(a);
  return Status::Ok();
}

Status run_conv_pool(KernelContext& ctx, const ConvPoolConsts& c) {
  ConvPoolArgs a = shape_state<ConvPoolArgs>(ctx);
  a.x = ctx.input(kX).raw();
  a.w = static_cast<const uint16_t*>(c.w.raw());
  a.bias = static_cast<const float*>(c.bias.raw());
  a.y = ctx.output(0).raw();
  return launched(ctx, launch_conv_pool(a, state_of(ctx).stream));
}

}  // namespace

void register_conv_pool(KernelRegistry& r) {
  KernelDef d;
  d.op = "ConvPool";
  d.domain = "kiln";
  d.name = "cuda.kiln.ConvPool";
  d.check = conv_pool_check;
  d.create = [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const ConvPoolConsts> c, prepare(n));
    return make_staged([c](ReshapeContext& rc) { return reshape_conv_pool(rc, *c); },
                       [c](KernelContext& ctx) { return run_conv_pool(ctx, *c); });
  };
  r.add(d);
}

}  // namespace kiln::cuda
