// backends/cpu/shape_index_scatter.cpp — TensorScatter (opset 24) on the CPU (the other index-driven
// kernels: shape_index.cpp).
#include <cstring>

#include "backends/cpu/nn_common.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

// ---- TensorScatter: present = past with `update` written along `axis` at write_indices[batch]
// (modulo the cache length in circular mode).
Status tensor_scatter(KernelContext& ctx, int64_t axis_attr, bool circular) {
  const Tensor &past = ctx.input(0), &upd = ctx.input(1);
  const int64_t rank = past.rank();
  int64_t axis = axis_attr;
  if (axis < -rank || axis >= rank) return ctx.error("axis out of range");
  if (axis < 0) axis += rank;
  if (axis == 0) return ctx.error("axis must not be the batch axis");
  if (upd.dtype() != past.dtype() || upd.rank() != rank) return ctx.error("update must match past_cache in type and rank");
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t p = past.dim(static_cast<int>(d)), u = upd.dim(static_cast<int>(d));
    if (d == axis ? u > p : u != p)
      return ctx.error("update shape " + shape_to_string(upd.shape()) + " does not fit past_cache " +
                       shape_to_string(past.shape()));
  }
  const int64_t B = past.dim(0), max_len = past.dim(static_cast<int>(axis)), len = upd.dim(static_cast<int>(axis));
  int64_t prefix = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) prefix *= past.dim(static_cast<int>(d));
    if (d > axis) inner *= past.dim(static_cast<int>(d));
  }
  std::vector<int64_t> idx(static_cast<size_t>(B), 0);
  if (ctx.has_input(2)) {
    const Tensor& w = ctx.input(2);
    if (w.numel() != B) return ctx.error("write_indices must have batch_size elements");
    for (int64_t b = 0; b < B; ++b) idx[b] = nn::load_as<int64_t>(w, b);
  }
  const size_t es = dtype_size(past.dtype());
  if (past.dtype() == DataType::kString) return ctx.error("string caches are not supported");
  Tensor& out = ctx.output(0, past.dtype(), past.shape());
  if (past.nbytes()) std::memcpy(out.raw(), past.raw(), past.nbytes());
  const int64_t per_batch = prefix / std::max<int64_t>(B, 1);
  const size_t row = static_cast<size_t>(inner) * es;
  for (int64_t p = 0; p < prefix; ++p) {
    const int64_t b = p / std::max<int64_t>(per_batch, 1);
    for (int64_t s = 0; s < len; ++s) {
      int64_t dst = idx[b] + s;
      if (circular) dst = ((dst % max_len) + max_len) % max_len;
      if (dst < 0 || dst >= max_len)
        return ctx.error("write index " + std::to_string(dst) + " is outside the cache (length " +
                         std::to_string(max_len) + ")");
      std::memcpy(out.data<uint8_t>() + (p * max_len + dst) * row, upd.data<uint8_t>() + (p * len + s) * row, row);
    }
  }
  return Status::Ok();
}

}  // namespace

void register_shape_index_scatter(KernelRegistry& r) {
  r.add({"TensorScatter", "", 24, 1 << 30, "cpu.TensorScatter.any", nullptr,
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           KILN_ASSIGN_OR_RETURN(const ops::TensorScatterParams p, ops::parse_tensor_scatter(n));
           return make_kernel([p](KernelContext& ctx) { return tensor_scatter(ctx, p.axis, p.circular); });
         }});
}

}  // namespace kiln::cpu
