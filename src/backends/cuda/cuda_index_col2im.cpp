// backends/cuda/cuda_index_col2im.cpp — Col2Im (18) on the GPU; the image and block shapes are host
// inputs (launcher in cuda_index_col2im.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_shape.h"

namespace kiln::cuda {
namespace {

Expected<KernelPtr> create_col2im(const ir::Node& n) {
  const ops::Col2ImParams cp = ops::parse_col2im(n);
  const std::vector<int64_t> dil_a = cp.dilations, pads_a = cp.pads, str_a = cp.strides;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    auto img = host_ints(rc.in[1].value), blk = host_ints(rc.in[2].value);
    if (!img || !blk || img->size() != blk->size() || img->empty() || img->size() > 6)
      return rc.error("image_shape and block_shape must be int64 of equal length (at most 6) known on the host");
    const size_t s = img->size();
    const std::vector<int64_t> dil = dil_a.empty() ? std::vector<int64_t>(s, 1) : dil_a;
    const std::vector<int64_t> str = str_a.empty() ? std::vector<int64_t>(s, 1) : str_a;
    const std::vector<int64_t> pads = pads_a.empty() ? std::vector<int64_t>(2 * s, 0) : pads_a;
    if (dil.size() != s || str.size() != s || pads.size() != 2 * s) return rc.error("attribute lengths do not match image rank");
    const Shape& x = rc.in[0].shape;
    if (x.size() != 3) return rc.error("input must be [N, C*prod(block), L]");
    auto a = std::make_shared<Col2ImArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->s = static_cast<int>(s);
    a->kprod = 1;
    for (int64_t b : *blk) a->kprod *= b;
    if (a->kprod <= 0 || x[1] % a->kprod != 0) return rc.error("input dim 1 not divisible by prod(block_shape)");
    const int64_t C = x[1] / a->kprod;
    a->nc = x[0] * C;
    int64_t L = 1;
    for (size_t d = 0; d < s; ++d) {
      if (str[d] < 1 || dil[d] < 1) return rc.error("strides and dilations must be positive");
      a->img[d] = (*img)[d];
      a->blk[d] = (*blk)[d];
      a->str[d] = str[d];
      a->dil[d] = dil[d];
      a->pad[d] = pads[d];
      a->nblk[d] = ((*img)[d] + pads[d] + pads[d + s] - dil[d] * ((*blk)[d] - 1) - 1) / str[d] + 1;
      L *= a->nblk[d];
    }
    if (L != x[2]) return rc.error("input dim 2 is " + std::to_string(x[2]) + ", blocks give " + std::to_string(L));
    a->l = L;
    Shape out = {x[0], C};
    out.insert(out.end(), img->begin(), img->end());
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    Col2ImArgs a = shape_state<Col2ImArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_col2im(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_index_col2im(KernelRegistry& r) {
  KernelDef col2im = kernel_row("Col2Im", 18, [](const ir::Node& n) { return check_numeric0(n, false); },
                                [](const ir::Node& n, KernelInit&) { return create_col2im(n); });
  col2im.host_inputs = 0b110;
  r.add(col2im);
}

}  // namespace kiln::cuda
