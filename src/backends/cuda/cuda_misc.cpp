// backends/cuda/cuda_misc.cpp — CumSum (11+), CumProd (26+) and Trilu (14+) on the GPU. Their scalar
// operands (axis, k) are host inputs, read while planning.
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"

namespace kiln::cuda {
namespace {

std::string movable_numeric(const ir::Node& n, bool allow_bool) {
  if (!n.has_input(0)) return "input 0 is required";
  const ir::Value* v = n.inputs[0];
  if (!v->type.is_tensor()) return "takes tensors only";
  const DataType t = v->type.dtype;
  if (t != DataType::kUndefined && (elem_of(t) < 0 || (!allow_bool && t == DataType::kBool)))
    return std::string(dtype_name(t)) + " does not run on CUDA";
  return "";
}

// The one integer of host input i (0-d or 1 element).
Expected<int64_t> scalar_of(const ReshapeContext& rc, size_t i, const char* what) {
  if (i >= rc.in.size() || !rc.in[i].present) return rc.error(std::string(what) + " is missing");
  auto v = host_ints(rc.in[i].value);
  if (!v || v->size() != 1) return rc.error(std::string(what) + " must be one int64/int32 value known on the host");
  return (*v)[0];
}

struct LinePlan {
  int64_t outer = 1, len = 1, inner = 1;
};

Expected<KernelPtr> create_cumulative(const ir::Node& n, bool product) {
  const bool exclusive = n.attr_int("exclusive", 0) != 0, reverse = n.attr_int("reverse", 0) != 0;
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    KILN_ASSIGN_OR_RETURN(int64_t axis, scalar_of(rc, 1, "axis"));
    const Shape& x = rc.in[0].shape;
    if (!normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
    auto p = std::make_shared<LinePlan>();
    for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
      if (d < axis) p->outer *= x[d];
      else if (d == axis) p->len = x[d];
      else p->inner *= x[d];
    }
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [product, exclusive, reverse](KernelContext& ctx) -> Status {
    const auto& p = shape_state<LinePlan>(ctx);
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_cumulative(elem_of(x.dtype()), product, x.raw(), ctx.output(0).raw(), p.outer, p.len, p.inner,
                                           exclusive, reverse, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

struct TriluPlan {
  int64_t k = 0;
};

Expected<KernelPtr> create_trilu(const ir::Node& n) {
  const bool upper = n.attr_int("upper", 1) != 0;
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    const Shape& x = rc.in[0].shape;
    if (x.size() < 2) return rc.error("input must have rank >= 2");
    auto p = std::make_shared<TriluPlan>();
    if (rc.in.size() > 1 && rc.in[1].present) {
      KILN_ASSIGN_OR_RETURN(p->k, scalar_of(rc, 1, "k"));
    }
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [upper](KernelContext& ctx) -> Status {
    const auto& p = shape_state<TriluPlan>(ctx);
    const Tensor& x = ctx.input(0);
    const int r = x.rank();
    return launched(ctx, launch_trilu(x.raw(), ctx.output(0).raw(), static_cast<int>(dtype_size(x.dtype())), x.numel(),
                                      x.dim(r - 2), x.dim(r - 1), p.k, upper, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_misc(KernelRegistry& r) {
  KernelDef cumsum = kernel_row("CumSum", 11, [](const ir::Node& n) { return movable_numeric(n, false); },
                                [](const ir::Node& n, KernelInit&) { return create_cumulative(n, false); });
  cumsum.host_inputs = 0b10;
  r.add(cumsum);
  KernelDef cumprod = kernel_row("CumProd", 26, [](const ir::Node& n) { return movable_numeric(n, false); },
                                 [](const ir::Node& n, KernelInit&) { return create_cumulative(n, true); });
  cumprod.host_inputs = 0b10;
  r.add(cumprod);
  KernelDef trilu = kernel_row("Trilu", 14, [](const ir::Node& n) { return movable_numeric(n, true); },
                               [](const ir::Node& n, KernelInit&) { return create_trilu(n); });
  trilu.host_inputs = 0b10;
  r.add(trilu);
}

}  // namespace kiln::cuda
