// backends/cpu/einsum.cpp — Einsum on the CPU: a general contraction loop over the plan of
// ops/einsum.h (shared with the CUDA kernel).
#include <algorithm>

#include "ops/einsum.h"
#include "ops/params_shape.h"

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/numeric.h"

namespace kiln::cpu {
namespace {

template <typename T>
void contract(const std::vector<const T*>& in, T* y, const std::vector<int64_t>& out_sizes,
              const std::vector<std::vector<int64_t>>& out_strides, const std::vector<int64_t>& red_sizes,
              const std::vector<std::vector<int64_t>>& red_strides) {
  using A = typename Num<T>::acc;
  const size_t ni = in.size();
  const int64_t on = shape_numel(out_sizes), rn = shape_numel(red_sizes);
  parallel_for(on, std::max<int64_t>(1, 8192 / std::max<int64_t>(rn, 1)), [&](int64_t b, int64_t e) {
    std::vector<int64_t> base(ni), off(ni), ridx(red_sizes.size());
    for (int64_t o = b; o < e; ++o) {
      std::fill(base.begin(), base.end(), 0);
      int64_t rem = o;
      for (int d = static_cast<int>(out_sizes.size()) - 1; d >= 0; --d) {
        const int64_t i = rem % out_sizes[d];
        rem /= out_sizes[d];
        for (size_t k = 0; k < ni; ++k) base[k] += i * out_strides[k][d];
      }
      A acc = 0;
      off = base;
      std::fill(ridx.begin(), ridx.end(), 0);
      for (int64_t r = 0; r < rn; ++r) {
        A p = 1;
        for (size_t k = 0; k < ni; ++k) p *= Num<T>::load(in[k][off[k]]);
        acc += p;
        for (int d = static_cast<int>(red_sizes.size()) - 1; d >= 0; --d) {
          if (++ridx[d] < red_sizes[d]) {
            for (size_t k = 0; k < ni; ++k) off[k] += red_strides[k][d];
            break;
          }
          for (size_t k = 0; k < ni; ++k) off[k] -= red_strides[k][d] * (red_sizes[d] - 1);
          ridx[d] = 0;
        }
      }
      y[o] = Num<T>::store(acc);
    }
  });
}

Status run_einsum(KernelContext& ctx, const ops::EinsumSpec& spec) {
  const int n = ctx.num_inputs();
  std::vector<Shape> shapes;
  for (int k = 0; k < n; ++k) {
    if (ctx.input(k).dtype() != ctx.input(0).dtype()) return ctx.error("all inputs must have the same dtype");
    shapes.push_back(ctx.input(k).shape());
  }
  auto plan = ops::plan_einsum(spec, shapes);
  if (!plan.ok()) return ctx.error(plan.status().message());
  Tensor& y = ctx.output(0, ctx.input(0).dtype(), plan->out_shape);
  const bool ok = visit_numeric_f16(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<const T*> ptrs;
    for (int k = 0; k < n; ++k) ptrs.push_back(ctx.input(k).template data<T>());
    contract<T>(ptrs, y.data<T>(), plan->out_shape, plan->out_strides, plan->red_sizes, plan->red_strides);
  });
  return ok ? Status::Ok() : ctx.error("unsupported dtype");
}

Expected<KernelPtr> create_einsum(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::EinsumParams p, ops::parse_einsum(n));
  return make_kernel([spec = p.spec](KernelContext& ctx) { return run_einsum(ctx, spec); });
}

}  // namespace

void register_einsum(KernelRegistry& r) {
  r.add({"Einsum", "", 12, 1 << 30, "cpu.Einsum.any", nullptr, create_einsum});
}

}  // namespace kiln::cpu
