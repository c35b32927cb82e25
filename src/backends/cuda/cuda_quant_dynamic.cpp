// backends/cuda/cuda_quant_dynamic.cpp — DynamicQuantizeLinear (11+) on the GPU (launcher in
// cuda_quant_dynamic.cu; QuantizeLinear and DequantizeLinear: cuda_quant.cpp).
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"

namespace kiln::cuda {
namespace {

Expected<KernelPtr> create_dynamic_quantize() {
  auto reshape = [](ReshapeContext& rc) -> Status {
    rc.out[0] = {DataType::kUInt8, rc.in[0].shape};
    if (rc.out.size() > 1) rc.out[1] = {DataType::kFloat32, Shape{}};
    if (rc.out.size() > 2) rc.out[2] = {DataType::kUInt8, Shape{}};
    rc.workspace_bytes = 16;  // the scale and zero point, whether or not the node outputs them
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    auto* ws = static_cast<char*>(ctx.workspace());
    auto* scale = reinterpret_cast<float*>(ws);
    auto* zp = reinterpret_cast<uint8_t*>(ws + 8);
    cudaStream_t s = state_of(ctx).stream;
    KILN_RETURN_IF_ERROR(launched(ctx, launch_dynamic_quantize(x.data<float>(), ctx.output(0).data<uint8_t>(), scale, zp, x.numel(), s)));
    if (ctx.has_output(1))
      KILN_RETURN_IF_ERROR(launched(ctx, cudaMemcpyAsync(ctx.output(1).raw(), scale, 4, cudaMemcpyDeviceToDevice, s)));
    if (ctx.has_output(2))
      KILN_RETURN_IF_ERROR(launched(ctx, cudaMemcpyAsync(ctx.output(2).raw(), zp, 1, cudaMemcpyDeviceToDevice, s)));
    return Status::Ok();
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_quant_dynamic(KernelRegistry& r) {
  KernelDef dq = kernel_row("DynamicQuantizeLinear", 11, [](const ir::Node& n) {
    return require_input_types(n, 0, {DataType::kFloat32});
  }, [](const ir::Node&, KernelInit&) { return create_dynamic_quantize(); });
  dq.half_floats = false;
  r.add(dq);
}

}  // namespace kiln::cuda
