// backends/cuda/cuda_shape_eye_like.cpp — EyeLike (9+) on the GPU (launcher in cuda_shape_eye_like.cu).
#include <cstring>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ir/float_types.h"
#include "ops/params_shape.h"

namespace kiln::cuda {
namespace {

// The bits of 1 in dtype t, or false for types EyeLike does not make on the GPU.
bool one_bits(DataType t, uint64_t* bits) {
  *bits = 0;
  auto put = [&](auto v) { std::memcpy(bits, &v, sizeof v); return true; };
  switch (t) {
    case DataType::kFloat32: return put(1.0f);
    case DataType::kFloat64: return put(1.0);
    case DataType::kFloat16: return put(f32_to_f16(1.0f));
    case DataType::kBFloat16: return put(f32_to_bf16(1.0f));
    case DataType::kInt8: case DataType::kUInt8: case DataType::kBool: return put(uint8_t{1});
    case DataType::kInt16: case DataType::kUInt16: return put(uint16_t{1});
    case DataType::kInt32: case DataType::kUInt32: return put(uint32_t{1});
    case DataType::kInt64: case DataType::kUInt64: return put(uint64_t{1});
    default: return false;
  }
}

Expected<KernelPtr> create_eye_like(const ir::Node& n) {
  const ops::EyeLikeParams ep = ops::parse_eye_like(n);
  const auto dtype_attr = static_cast<DataType>(ep.dtype);
  const int64_t k = ep.k;
  auto reshape = [dtype_attr](ReshapeContext& rc) -> Status {
    if (rc.in[0].shape.size() != 2) return rc.error("input must be 2-D");
    const DataType dt = dtype_attr != DataType::kUndefined ? dtype_attr : rc.in[0].dtype;
    uint64_t bits;
    if (!one_bits(dt, &bits)) return rc.error(std::string("EyeLike does not make ") + dtype_name(dt) + " on CUDA");
    rc.out[0] = {dt, rc.in[0].shape};
    return Status::Ok();
  };
  auto run = [k](KernelContext& ctx) -> Status {
    Tensor& y = ctx.output(0);
    uint64_t bits = 0;
    one_bits(y.dtype(), &bits);
    return launched(ctx, launch_eye(y.raw(), y.dim(0), y.dim(1), k, static_cast<int>(dtype_size(y.dtype())), bits,
                                    state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_shape_eye_like(KernelRegistry& r) {
  r.add(kernel_row("EyeLike", 9, [](const ir::Node& n) { return tensor_inputs(n, 1); },
                   [](const ir::Node& n, KernelInit&) { return create_eye_like(n); }));
}

}  // namespace kiln::cuda
