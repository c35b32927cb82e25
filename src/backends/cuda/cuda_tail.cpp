// backends/cuda/cuda_tail.cpp — TopK (1+), DFT (17, 20), Col2Im (18) and Einsum (12+) on the GPU; their scalar
// operands (K, dft_length, axis, image and block shapes) are host inputs.
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/einsum.h"
#include "ops/params_misc.h"
#include "ops/params_nn.h"
#include "ops/params_shape.h"

namespace kiln::cuda {
namespace {

std::string check_numeric0(const ir::Node& n, bool real_only) {
  if (!n.has_input(0) || !n.inputs[0]->type.is_tensor()) return "input 0 is required";
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt == DataType::kUndefined) return "";
  if (real_only ? !(is_float_type(dt) || dt == DataType::kFloat64) : (elem_of(dt) < 0 || dt == DataType::kBool))
    return std::string(dtype_name(dt)) + " does not run on CUDA";
  return "";
}

struct TopkPlan {
  int64_t outer = 1, n = 1, inner = 1, k = 0;
};

Expected<KernelPtr> create_topk(const ir::Node& nd) {
  const ops::TopKParams tp = ops::parse_topk(nd);
  const int64_t axis_attr = tp.axis;
  const bool largest = tp.largest;
  // A node without an opset (0: made in code) takes K from input 1 here, as the newest opsets do;
  // the shape function and the CPU kernel read the attribute for it.
  const bool k_input = tp.k_input || nd.opset == 0;
  const int64_t k_attr = tp.k;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    int64_t axis = axis_attr;
    if (!normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
    int64_t k = k_attr;
    if (k_input) {
      auto kv = rc.in.size() > 1 ? host_ints(rc.in[1].value) : std::nullopt;
      if (!kv || kv->size() != 1) return rc.error("K must be a 1-element int64 tensor known on the host");
      k = (*kv)[0];
    }
    auto p = std::make_shared<TopkPlan>();
    for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
      if (d < axis) p->outer *= x[d];
      else if (d == axis) p->n = x[d];
      else p->inner *= x[d];
    }
    if (k < 0 || k > p->n) return rc.error("K " + std::to_string(k) + " out of range for an axis of " + std::to_string(p->n));
    p->k = k;
    Shape out = x;
    out[axis] = k;
    rc.out[0] = {rc.in[0].dtype, out};
    if (rc.out.size() > 1) rc.out[1] = {DataType::kInt64, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [largest](KernelContext& ctx) -> Status {
    const auto& p = shape_state<TopkPlan>(ctx);
    const Tensor& x = ctx.input(0);
    // The indices are needed for the selection even when the node drops them: the workspace holds them.
    int64_t* idx = ctx.has_output(1) ? ctx.output(1).data<int64_t>() : static_cast<int64_t*>(ctx.workspace());
    return launched(ctx, launch_topk(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), idx, p.outer, p.n, p.inner, p.k, largest,
                                     state_of(ctx).stream));
  };
  auto reshape_ws = [reshape](ReshapeContext& rc) -> Status {
    KILN_RETURN_IF_ERROR(reshape(rc));
    // Reserved whether or not the node uses its Indices output (the plan knows only at run time).
    rc.workspace_bytes = static_cast<size_t>(shape_numel(rc.out[0].second)) * sizeof(int64_t);
    return Status::Ok();
  };
  return make_staged(reshape_ws, run);
}

Expected<KernelPtr> create_dft(const ir::Node& nd) {
  const ops::DftParams p = ops::parse_dft(nd);
  const bool axis_input = p.axis_input;
  const int64_t axis_attr = p.axis;
  const bool inverse = p.inverse, onesided = p.onesided;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    if (r < 2 || (x.back() != 1 && x.back() != 2)) return rc.error("input's last dim must be 1 (real) or 2 (complex)");
    int64_t axis = axis_attr;
    if (axis_input && rc.in.size() > 2 && rc.in[2].present) {
      auto v = host_ints(rc.in[2].value);
      if (!v || v->size() != 1) return rc.error("axis must be a scalar int known on the host");
      axis = (*v)[0];
    }
    if (!normalize_axis(axis, r) || axis == r - 1) return rc.error("axis out of range");
    auto a = std::make_shared<DftArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->len = x[axis];
    a->n = inverse && onesided ? 2 * (a->len - 1) : a->len;
    if (rc.in.size() > 1 && rc.in[1].present && rc.in[1].value && rc.in[1].value->numel() > 0) {
      auto v = host_ints(rc.in[1].value);
      if (!v || v->size() != 1) return rc.error("dft_length must be a scalar int");
      a->n = (*v)[0];
    }
    if (a->n <= 0) return rc.error("dft_length must be positive");
    a->complex_in = x.back() == 2;
    a->inverse = inverse;
    a->real_out = inverse && onesided;
    for (int64_t d = 0; d < axis; ++d) a->outer *= x[d];
    for (int64_t d = axis + 1; d < r - 1; ++d) a->inner *= x[d];
    a->m = inverse ? a->n : (onesided ? a->n / 2 + 1 : a->n);
    Shape os = x;
    os[axis] = a->m;
    os.back() = a->real_out ? 1 : 2;
    rc.out[0] = {rc.in[0].dtype, os};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    DftArgs a = shape_state<DftArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_dft(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

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

Expected<KernelPtr> create_einsum(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::EinsumParams p, ops::parse_einsum(n));
  const ops::EinsumSpec spec = p.spec;
  auto reshape = [spec](ReshapeContext& rc) -> Status {
    std::vector<Shape> shapes;
    for (const auto& in : rc.in) {
      if (!in.present || in.dtype != rc.in[0].dtype) return rc.error("all inputs must be present and share one dtype");
      shapes.push_back(in.shape);
    }
    if (shapes.size() > static_cast<size_t>(kMaxEinsumInputs)) return rc.error("more than 4 inputs do not run on CUDA");
    auto plan = ops::plan_einsum(spec, shapes);
    if (!plan.ok()) return rc.error(plan.status().message());
    if (plan->out_shape.size() > static_cast<size_t>(kMaxRank) || plan->red_sizes.size() > static_cast<size_t>(kMaxRank))
      return rc.error("more than 8 output or contracted labels do not run on CUDA");
    auto a = std::make_shared<EinsumArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->inputs = static_cast<int>(shapes.size());
    a->out_rank = static_cast<int>(plan->out_shape.size());
    a->red_rank = static_cast<int>(plan->red_sizes.size());
    for (int d = 0; d < a->out_rank; ++d) a->out_sizes[d] = plan->out_shape[d];
    for (int d = 0; d < a->red_rank; ++d) a->red_sizes[d] = plan->red_sizes[d];
    for (int k = 0; k < a->inputs; ++k) {
      for (int d = 0; d < a->out_rank; ++d) a->out_strides[k][d] = plan->out_strides[k][d];
      for (int d = 0; d < a->red_rank; ++d) a->red_strides[k][d] = plan->red_strides[k][d];
    }
    rc.out[0] = {rc.in[0].dtype, plan->out_shape};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    EinsumArgs a = shape_state<EinsumArgs>(ctx);
    for (int k = 0; k < a.inputs; ++k) a.in[k] = ctx.input(k).raw();
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_einsum(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_tail(KernelRegistry& r) {
  r.add(kernel_row("Einsum", 12, [](const ir::Node& n) -> std::string {
    for (const ir::Value* v : n.inputs) {
      if (!v || !v->type.is_tensor()) return "every input is required";
      const DataType t = v->type.dtype;
      if (t != DataType::kUndefined && !is_float_type(t) && t != DataType::kFloat64 && t != DataType::kInt32 &&
          t != DataType::kInt64)
        return std::string(dtype_name(t)) + " does not run on CUDA";
    }
    return n.inputs.size() > static_cast<size_t>(kMaxEinsumInputs) ? "more than 4 inputs" : "";
  }, [](const ir::Node& n, KernelInit&) { return create_einsum(n); }));
  KernelDef topk = kernel_row("TopK", 1, [](const ir::Node& n) { return check_numeric0(n, false); },
                              [](const ir::Node& n, KernelInit&) { return create_topk(n); });
  topk.host_inputs = 0b10;
  r.add(topk);
  KernelDef dft = kernel_row("DFT", 17, [](const ir::Node& n) { return check_numeric0(n, true); },
                             [](const ir::Node& n, KernelInit&) { return create_dft(n); });
  dft.host_inputs = 0b110;
  r.add(dft);
  KernelDef col2im = kernel_row("Col2Im", 18, [](const ir::Node& n) { return check_numeric0(n, false); },
                                [](const ir::Node& n, KernelInit&) { return create_col2im(n); });
  col2im.host_inputs = 0b110;
  r.add(col2im);
}

}  // namespace kiln::cuda
