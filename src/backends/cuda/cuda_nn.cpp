// backends/cuda/cuda_nn.cpp — the table of NN kernels (float32, float16, bfloat16): pooling,
// global pooling (channels-first, and channels-last as kiln.ChannelsLastPool from
// passes/channels_last.cpp) and inference BatchNormalization (own kernels in cuda_nn.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_nn.h"

namespace kiln::cuda {
namespace {

// ---- MaxPool / AveragePool (1-D and 2-D, NCHW; 2-D NHWC for kiln.ChannelsLastPool)
std::string pool_check(const ir::Node& n) {
  const size_t k = ops::parse_pool(n).window.kernel.size();
  if (k != 1 && k != 2) return "only 1-D and 2-D pooling run on CUDA";
  if (n.has_output(1)) return "the Indices output is not supported on CUDA";
  return require_float(n);
}

Expected<KernelPtr> create_pool(const ir::Node& n, bool max, bool nhwc = false) {
  const ops::PoolParams pp = ops::parse_pool(n);
  const ops::WindowAttrs& w = pp.window;
  const std::vector<int64_t> kernel = w.kernel;
  const size_t sd = kernel.size();
  // Empty strides, dilations or pads take their defaults (as ops::window_geometry does).
  const std::vector<int64_t> strides = w.strides.empty() ? std::vector<int64_t>(sd, 1) : w.strides;
  const std::vector<int64_t> dilations = w.dilations.empty() ? std::vector<int64_t>(sd, 1) : w.dilations;
  const std::vector<int64_t> pads = w.pads.empty() ? std::vector<int64_t>(2 * sd, 0) : w.pads;
  if (strides.size() != sd || dilations.size() != sd || pads.size() != 2 * sd)
    return invalid_model(n.describe() + ": strides/dilations/pads do not match kernel_shape");
  const std::string auto_pad = w.auto_pad;
  const bool ceil_mode = w.ceil_mode;
  const bool include_pad = pp.count_include_pad;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("X is required");
    // Channels-last X [N,H,W,C] is read through its channels-first dims.
    Shape x = rc.in[0].shape;
    if (x.size() != sd + 2) return rc.error("input rank does not match kernel_shape");
    if (nhwc && sd != 2) return rc.error("channels-last pooling is 2-D");
    if (nhwc) x = {x[0], x[3], x[1], x[2]};
    // 1-D pooling runs as 2-D with a height of 1.
    const bool one_d = sd == 1;
    auto p = std::make_shared<PoolParams>();
    p->nc = x[0] * x[1];
    p->h = one_d ? 1 : x[2];
    p->w = x[one_d ? 2 : 3];
    p->max = max;
    p->count_include_pad = include_pad;
    p->c = nhwc ? x[1] : 0;
    Shape out = {x[0], x[1]};
    for (size_t i = 0; i < sd; ++i) {
      auto g = window_geometry(x[2 + i], kernel[i], strides[i], dilations[i], pads[i], pads[i + sd], auto_pad, ceil_mode);
      if (!g.ok()) return rc.error(g.status().message());
      out.push_back(g->out);
      const bool is_w = one_d || i == 1;
      (is_w ? p->ow : p->oh) = g->out;
      (is_w ? p->kw : p->kh) = kernel[i];
      (is_w ? p->sw : p->sh) = strides[i];
      (is_w ? p->dw : p->dh) = dilations[i];
      (is_w ? p->pad_left : p->pad_top) = g->pad_begin;
      (is_w ? p->pad_right : p->pad_bottom) = g->pad_end;
    }
    if (one_d) p->oh = 1;
    if (nhwc) out = {out[0], out[2], out[3], out[1]};
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const auto& p = *static_cast<const PoolParams*>(ctx.shape_state());
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_pool2d(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), p, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// ---- GlobalAveragePool / GlobalMaxPool (channels-first; channels-last [N,H,W,C] → [N,1,1,C])
Expected<KernelPtr> create_global_pool(bool max, bool nhwc = false) {
  if (nhwc) {
    auto reshape = [](ReshapeContext& rc) -> Status {
      if (rc.in.empty() || !rc.in[0].present) return rc.error("X is required");
      const Shape& x = rc.in[0].shape;
      if (x.size() != 4) return rc.error("channels-last global pooling takes a 4-D input");
      if (x[1] * x[2] == 0) return rc.error("global pooling over an empty spatial extent");
      rc.out[0] = {rc.in[0].dtype, Shape{x[0], 1, 1, x[3]}};
      rc.workspace_bytes = global_pool_workspace(x[0], x[1] * x[2], x[3]);
      return Status::Ok();
    };
    auto run = [max](KernelContext& ctx) -> Status {
      const Tensor& x = ctx.input(0);
      return launched(ctx, launch_global_pool_nhwc(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), ctx.workspace(), x.dim(0),
                                                   x.dim(1) * x.dim(2), x.dim(3), max, state_of(ctx).stream));
    };
    return make_staged(reshape, run);
  }
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("X is required");
    Shape out = rc.in[0].shape;
    if (out.size() < 2) return rc.error("input must have rank >= 2");
    int64_t spatial = 1;
    for (size_t k = 2; k < out.size(); ++k) {
      spatial *= out[k];
      out[k] = 1;
    }
    if (spatial == 0) return rc.error("global pooling over an empty spatial extent");
    rc.out[0] = {rc.in[0].dtype, out};
    return Status::Ok();
  };
  auto run = [max](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t planes = x.dim(0) * x.dim(1);
    if (planes == 0) return Status::Ok();
    return launched(ctx, launch_reduce_rows(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), planes, x.numel() / planes,
                                            max, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// ---- BatchNormalization (inference)
std::string batchnorm_check(const ir::Node& n) {
  const ops::BatchNormParams p = ops::parse_batch_norm(n);
  if (p.training_mode) return "training_mode is not supported on CUDA";
  if (!p.spatial) return "spatial=0 is not supported on CUDA";
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.has_output(i)) return "training outputs (running mean/var) are not supported on CUDA";
  if (n.inputs.size() != 5) return "needs 5 inputs";
  for (int i = 1; i < 5; ++i)
    if (n.has_input(i) && n.has_input(0) && n.inputs[i]->type.dtype != n.inputs[0]->type.dtype)
      return "scale, B, mean and var must have X's dtype on CUDA";
  return require_float(n);
}

Expected<KernelPtr> create_batchnorm(const ir::Node& n) {
  const float eps = ops::parse_batch_norm(n).epsilon;
  return make_kernel([eps](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2) return ctx.error("input must have rank >= 2");
    const int64_t c = x.dim(1);
    for (int i = 1; i < 5; ++i)
      if (ctx.input(i).numel() != c) return ctx.error("scale, B, mean and var must have C elements");
    const int64_t inner = c ? x.numel() / (x.dim(0) * c) : 0;
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    if (x.numel() == 0) return Status::Ok();
    return launched(ctx, launch_batchnorm(elem_of(x.dtype()), x.raw(), ctx.input(1).raw(), ctx.input(2).raw(),
                                          ctx.input(3).raw(), ctx.input(4).raw(), y.raw(), x.dim(0), c, inner, eps,
                                          state_of(ctx).stream));
  });
}

}  // namespace

void register_nn(KernelRegistry& r) {
  r.add(kernel_row("MaxPool", 1, pool_check,
            [](const ir::Node& n, KernelInit&) { return create_pool(n, true); }));
  r.add(kernel_row("AveragePool", 1, pool_check,
            [](const ir::Node& n, KernelInit&) { return create_pool(n, false); }));
  r.add(kernel_row("GlobalAveragePool", 1, require_float,
            [](const ir::Node&, KernelInit&) { return create_global_pool(false); }));
  r.add(kernel_row("GlobalMaxPool", 1, require_float,
            [](const ir::Node&, KernelInit&) { return create_global_pool(true); }));
  // kiln.ChannelsLastPool: the pooling op named by attribute `op` on NHWC tensors.
  r.add(kernel_row("ChannelsLastPool", 1,
                   [](const ir::Node& n) -> std::string {
                     const ops::ChannelsLastPoolParams p = ops::parse_channels_last_pool(n);
                     if (p.global) return require_float(n);
                     if (!p.known) return "unknown pooling op '" + p.op + "'";
                     if (p.pool.window.kernel.size() != 2) return "channels-last pooling is 2-D";
                     return pool_check(n);
                   },
                   [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
                     const ops::ChannelsLastPoolParams p = ops::parse_channels_last_pool(n);
                     if (p.global) return create_global_pool(p.max, true);
                     return create_pool(n, p.max, true);
                   },
                   "kiln"));
  r.add(kernel_row("BatchNormalization", 7, batchnorm_check,
            [](const ir::Node& n, KernelInit&) { return create_batchnorm(n); }));
}

}  // namespace kiln::cuda
