// backends/cuda/cuda_pool_nd.cpp — the generic pooling rows (cuda.MaxPool.nd, cuda.AveragePool.nd,
// cuda.LpPool.nd): any number of spatial dims, MaxPool's Indices output, float64 and int8/uint8 max.
// The 1-D/2-D rows of cuda_nn.cpp win where they apply (priority); these take the rest.
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/nn.h"
#include "ops/params_nn.h"

namespace kiln::cuda {
namespace {

std::string check_pool_nd(const ir::Node& n, int kind) {
  if (!n.has_input(0) || !n.inputs[0]->type.is_tensor()) return "X is required";
  const DataType dt = n.inputs[0]->type.dtype;
  const bool ok = is_float_type(dt) || dt == DataType::kFloat64 || dt == DataType::kUndefined ||
                  (kind == 0 && (dt == DataType::kInt8 || dt == DataType::kUInt8));
  if (!ok) return std::string(dtype_name(dt)) + " does not run on CUDA";
  const size_t k = ops::parse_pool(n).window.kernel.size();
  if (k < 1 || k > static_cast<size_t>(kMaxRank)) return "kernel_shape must have 1 to 8 dims";
  return "";
}

Expected<KernelPtr> create_pool_nd(const ir::Node& n, int kind) {
  const ops::PoolParams pp = ops::parse_pool(n);
  const ops::WindowAttrs w = pp.window;
  const bool include_pad = pp.count_include_pad;
  const bool column_major = pp.column_major;
  const double p = pp.p;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("X is required");
    const Shape& x = rc.in[0].shape;
    if (x.size() < 3) return rc.error("X must have rank >= 3 ([N, C, spatial...])");
    const std::vector<int64_t> in(x.begin() + 2, x.end());
    if (in.size() > static_cast<size_t>(kMaxRank)) return rc.error("more than 8 spatial dims");
    auto g = ops::window_geometry(w, in, {});
    if (!g.ok()) return rc.error(g.status().message());
    auto a = std::make_shared<PoolNdArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->win = window_index(*g, in);
    a->kind = kind;
    a->planes = x[0] * x[1];
    a->count_include_pad = include_pad;
    a->column_major = column_major;
    a->p = p;
    Shape ys = {x[0], x[1]};
    ys.insert(ys.end(), g->out.begin(), g->out.end());
    rc.out[0] = {rc.in[0].dtype, ys};
    if (rc.out.size() > 1) rc.out[1] = {DataType::kInt64, ys};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    PoolNdArgs a = shape_state<PoolNdArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.y = ctx.output(0).raw();
    a.indices = ctx.has_output(1) ? ctx.output(1).data<int64_t>() : nullptr;
    return launched(ctx, launch_pool_nd(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_pool_nd(KernelRegistry& r) {
  const std::pair<const char*, int> ops[] = {{"MaxPool", 0}, {"AveragePool", 1}, {"LpPool", 2}};
  for (const auto& [op, kind] : ops) {
    KernelDef d = kernel_row(op, 1, [kind = kind](const ir::Node& n) { return check_pool_nd(n, kind); },
                             [kind = kind](const ir::Node& n, KernelInit&) { return create_pool_nd(n, kind); });
    d.name += ".nd";
    d.priority = -1;  // the 1-D/2-D kernels first
    r.add(d);
  }
}

}  // namespace kiln::cuda
