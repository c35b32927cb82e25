// backends/cuda/cuda_cast_bitcast.cpp — BitCast (26+) on the GPU: a device copy, or the 4-bit case of
// cuda_cast_bitcast.cu.
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cuda {
namespace {

bool four_bit(DataType t) { return t == DataType::kInt4 || t == DataType::kUInt4; }

Expected<KernelPtr> create_bitcast(const ir::Node& n) {
  const DataType to = ops::parse_bit_cast(n).to;
  auto reshape = [to](ReshapeContext& rc) -> Status {
    const DataType from = rc.in[0].dtype;
    if (from == DataType::kString || to == DataType::kString) return rc.error("BitCast does not take strings");
    if (four_bit(from) != four_bit(to) || dtype_size(from) != dtype_size(to))
      return rc.error(std::string("BitCast needs types of the same bit width, got ") + dtype_name(from) + " and " +
                      dtype_name(to));
    rc.out[0] = {to, rc.in[0].shape};
    return Status::Ok();
  };
  auto run = [to](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (!four_bit(to)) return copy_device(ctx, x, y);
    return launched(ctx, launch_bitcast_nibbles(x.data<uint8_t>(), y.data<uint8_t>(), x.numel(), to == DataType::kInt4,
                                                 state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_cast_bitcast(KernelRegistry& r) {
  KernelDef bitcast = kernel_row("BitCast", 26, [](const ir::Node& n) { return tensor_inputs(n, 1); },
                                 [](const ir::Node& n, KernelInit&) { return create_bitcast(n); });
  bitcast.half_floats = false;  // the bits are the point
  r.add(bitcast);
}

}  // namespace kiln::cuda
