// backends/cpu/attention_rotary.cpp — RotaryEmbedding (opset 23) on the CPU (Attention and
// LinearAttention: attention.cpp). Computed in float (double for float64).
#include <cmath>

#include "backends/cpu/nn_common.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

using nn::ReadAs;
using nn::WriteAs;

// ---- RotaryEmbedding. X is (B, H, S, Dh) or (B, S, H*Dh) with num_heads; cos/sin caches are
// (max_pos, rd/2) indexed by position_ids (B, S), or (B, S, rd/2) without position_ids.
template <typename C>
Status rotary(KernelContext& ctx, const ops::RotaryEmbeddingParams& a) {
  const Tensor &x = ctx.input(0), &cosc = ctx.input(1), &sinc = ctx.input(2);
  if (x.rank() != 3 && x.rank() != 4) return ctx.error("X must be 3-D or 4-D");
  const bool packed = x.rank() == 3;
  const int64_t B = x.dim(0), S = packed ? x.dim(1) : x.dim(2);
  int64_t H, Dh;
  if (packed) {
    if (a.num_heads <= 0) return ctx.error("num_heads is required for 3-D input");
    H = a.num_heads;
    if (x.dim(2) % H) return ctx.error("hidden size is not divisible by num_heads");
    Dh = x.dim(2) / H;
  } else {
    H = x.dim(1);
    Dh = x.dim(3);
  }
  const int64_t rd = a.rotary_embedding_dim > 0 ? a.rotary_embedding_dim : Dh;
  if (rd > Dh || rd % 2) return ctx.error("rotary_embedding_dim must be even and at most the head size");
  const int64_t half = rd / 2;
  if (cosc.shape() != sinc.shape() || cosc.rank() < 2 || cosc.dim(-1) != half)
    return ctx.error("cos_cache/sin_cache must agree and end in rotary_embedding_dim/2 = " + std::to_string(half));
  const bool has_pos = ctx.has_input(3);
  std::vector<int64_t> rows(static_cast<size_t>(B * S));  // cache row for each (b, s)
  if (has_pos) {
    const Tensor& p = ctx.input(3);
    if (cosc.rank() != 2) return ctx.error("with position_ids, the caches must be (max_position, rd/2)");
    if (p.dtype() != DataType::kInt64) return ctx.error("position_ids must be int64, not " + std::string(dtype_name(p.dtype())));
    if (p.numel() != B * S) return ctx.error("position_ids must be (batch, sequence)");
    for (int64_t i = 0; i < B * S; ++i) {
      rows[i] = nn::load_as<int64_t>(p, i);
      if (rows[i] < 0 || rows[i] >= cosc.dim(0)) return ctx.error("position id " + std::to_string(rows[i]) + " out of range");
    }
  } else if (cosc.rank() == 3 && cosc.dim(0) == B && cosc.dim(1) == S) {
    for (int64_t i = 0; i < B * S; ++i) rows[i] = i;
  } else if (cosc.rank() == 2 && cosc.dim(0) == S) {
    for (int64_t i = 0; i < B * S; ++i) rows[i] = i % S;
  } else {
    return ctx.error("without position_ids, the caches must be (batch, sequence, rd/2)");
  }
  ReadAs<C> xv(x), cv(cosc), sv(sinc);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  WriteAs<C> yw(y);
  parallel_for(B * S * H, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      // t enumerates (b, s, h); the vector's offset depends on the layout.
      const int64_t b = t / (S * H), s = (t / H) % S, h = t % H;
      const int64_t off = packed ? ((b * S + s) * H + h) * Dh : ((b * H + h) * S + s) * Dh;
      const C* xp = xv.data() + off;
      C* yp = yw.data() + off;
      const C* c = cv.data() + rows[b * S + s] * half;
      const C* sn = sv.data() + rows[b * S + s] * half;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i1 = a.interleaved ? 2 * i : i, i2 = a.interleaved ? 2 * i + 1 : i + half;
        const C x1 = xp[i1], x2 = xp[i2];
        yp[i1] = c[i] * x1 - sn[i] * x2;
        yp[i2] = sn[i] * x1 + c[i] * x2;
      }
      for (int64_t i = rd; i < Dh; ++i) yp[i] = xp[i];
    }
  });
  yw.commit();
  return Status::Ok();
}

}  // namespace

void register_attention_rotary(KernelRegistry& r) {
  auto real0 = [](const ir::Node& n) { return nn::require_real(n, 0); };
  r.add({"RotaryEmbedding", "", 23, 1 << 30, "cpu.RotaryEmbedding.any", real0, [](const ir::Node& n, KernelInit&) {
           const ops::RotaryEmbeddingParams a = ops::parse_rotary_embedding(n);
           return make_kernel([a](KernelContext& ctx) {
             return ctx.input(0).dtype() == DataType::kFloat64 ? rotary<double>(ctx, a) : rotary<float>(ctx, a);
           });
         }});
}

}  // namespace kiln::cpu
