// backends/cpu/newops.cpp — CPU kernels for the newer ONNX operators (opset 20–27): BitCast, CumProd
// and TensorScatter here; Attention/LinearAttention in attention.cpp, RotaryEmbedding and
// CausalConvWithState in newops_seq.cpp, GridSample and AffineGrid in newops_grid.cpp.
#include <cstring>

#include "backends/cpu/nn_common.h"
#include "ops/params_misc.h"
#include "ops/params_nn.h"

namespace kiln::cpu {

void register_attention(KernelRegistry& r);  // attention.cpp
void register_newops_seq(KernelRegistry& r);  // newops_seq.cpp
void register_newops_grid(KernelRegistry& r);  // newops_grid.cpp

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

// ---- CumProd along one axis (axis given as a scalar input), optionally exclusive and/or reversed.
template <typename T, typename Acc>
void cumprod_lines(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool exclusive, bool reverse) {
  parallel_for(outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, len)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / inner, in = t % inner;
      const T* xp = x + o * len * inner + in;
      T* yp = y + o * len * inner + in;
      Acc acc = Acc(1);
      for (int64_t s = 0; s < len; ++s) {
        const int64_t k = reverse ? len - 1 - s : s;
        if (exclusive) {
          yp[k * inner] = static_cast<T>(acc);
          acc = static_cast<Acc>(acc * static_cast<Acc>(xp[k * inner]));
        } else {
          acc = static_cast<Acc>(acc * static_cast<Acc>(xp[k * inner]));
          yp[k * inner] = static_cast<T>(acc);
        }
      }
    }
  });
}

Status cumprod(KernelContext& ctx, bool exclusive, bool reverse) {
  const Tensor& x = ctx.input(0);
  const Tensor& ax = ctx.input(1);
  if (ax.numel() != 1) return ctx.error("axis must be a scalar (or one-element tensor)");
  int64_t axis = nn::load_as<int64_t>(ax, 0);
  const int64_t rank = x.rank();
  if (rank == 0 || axis < -rank || axis >= rank) return ctx.error("axis " + std::to_string(axis) + " out of range");
  if (axis < 0) axis += rank;
  int64_t outer = 1, len = x.dim(static_cast<int>(axis)), inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) outer *= x.dim(static_cast<int>(d));
    if (d > axis) inner *= x.dim(static_cast<int>(d));
  }
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  if (x.dtype() == DataType::kFloat16 || x.dtype() == DataType::kBFloat16) {
    nn::ReadAs<float> xv(x);
    nn::WriteAs<float> yw(y);
    cumprod_lines<float, float>(xv.data(), yw.data(), outer, len, inner, exclusive, reverse);
    yw.commit();
    return Status::Ok();
  }
  const bool ok = x.dtype() != DataType::kBool && visit_numeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cumprod_lines<T, T>(x.data<T>(), y.data<T>(), outer, len, inner, exclusive, reverse);
  });
  return ok ? Status::Ok() : ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
}

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

void register_newops(KernelRegistry& r) {
  register_attention(r);
  register_newops_seq(r);
  register_newops_grid(r);
  r.add({"BitCast", "", 26, 1 << 30, "cpu.BitCast.any", nullptr, [](const ir::Node& n, KernelInit&) {
           const DataType to = ops::parse_bit_cast(n).to;
           return make_kernel([to](KernelContext& ctx) { return bitcast(ctx, to); });
         }});
  r.add({"CumProd", "", 26, 1 << 30, "cpu.CumProd.any", nullptr, [](const ir::Node& n, KernelInit&) {
           const ops::CumulativeParams p = ops::parse_cumulative(n);
           return make_kernel([p](KernelContext& ctx) { return cumprod(ctx, p.exclusive, p.reverse); });
         }});
  r.add({"TensorScatter", "", 24, 1 << 30, "cpu.TensorScatter.any", nullptr,
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           KILN_ASSIGN_OR_RETURN(const ops::TensorScatterParams p, ops::parse_tensor_scatter(n));
           return make_kernel([p](KernelContext& ctx) { return tensor_scatter(ctx, p.axis, p.circular); });
         }});
}

}  // namespace kiln::cpu
