// backends/cpu/cast_bitcast.cpp — BitCast (opset 26) on the CPU (Cast and CastLike: cast.cpp).
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

bool is_4bit(DataType t) {
  return t == DataType::kInt4 || t == DataType::kUInt4 || t == DataType::kFloat4E2M1;
}

// ---- BitCast: the same bytes read as another type of the same width. 4-bit types are held one per
// byte (low nibble); int4 is sign-extended.
Status bitcast(KernelContext& ctx, DataType to) {
  const Tensor& x = ctx.input(0);
  const DataType from = x.dtype();
  if (from == DataType::kString || to == DataType::kString) return ctx.error("BitCast does not take strings");
  const bool nib_from = is_4bit(from), nib_to = is_4bit(to);
  if (nib_from != nib_to || dtype_size(from) != dtype_size(to))
    return ctx.error(std::string("BitCast needs types of the same bit width, got ") + dtype_name(from) + " and " +
                     dtype_name(to));
  Tensor& y = ctx.output(0, to, x.shape());
  const int64_t n = x.numel();
  if (!nib_to) {
    if (n) std::memcpy(y.raw(), x.raw(), x.nbytes());
    return Status::Ok();
  }
  const uint8_t* src = x.data<uint8_t>();
  uint8_t* dst = y.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t nib = src[i] & 0x0f;
    dst[i] = to == DataType::kInt4 && (nib & 0x08) ? static_cast<uint8_t>(nib | 0xf0) : nib;
  }
  return Status::Ok();
}

}  // namespace

void register_cast_bitcast(KernelRegistry& r) {
  r.add({"BitCast", "", 26, 1 << 30, "cpu.BitCast.any", nullptr, [](const ir::Node& n, KernelInit&) {
           const DataType to = ops::parse_bit_cast(n).to;
           return make_kernel([to](KernelContext& ctx) { return bitcast(ctx, to); });
         }});
}

}  // namespace kiln::cpu
