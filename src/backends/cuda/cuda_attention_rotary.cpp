// backends/cuda/cuda_attention_rotary.cpp — RotaryEmbedding (23+) on the GPU: shapes checked as the CPU
// kernel checks them, at reshape (launcher in cuda_attention_rotary.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/nn.h"
#include "ops/params_misc.h"

namespace kiln::cuda {
namespace {

Expected<KernelPtr> create_rotary(const ir::Node& n) {
  const ops::RotaryEmbeddingParams rp = ops::parse_rotary_embedding(n);
  const int64_t num_heads = rp.num_heads, rotary_dim = rp.rotary_embedding_dim;
  const bool interleaved = rp.interleaved;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() != 3 && x.size() != 4) return rc.error("X must be 3-D or 4-D");
    auto a = std::make_shared<RotaryArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->packed = x.size() == 3;
    a->interleaved = interleaved;
    a->b = x[0];
    a->s = a->packed ? x[1] : x[2];
    if (a->packed) {
      if (num_heads <= 0) return rc.error("num_heads is required for 3-D input");
      if (x[2] % num_heads) return rc.error("hidden size is not divisible by num_heads");
      a->h = num_heads;
      a->dh = x[2] / num_heads;
    } else {
      a->h = x[1];
      a->dh = x[3];
    }
    a->rd = rotary_dim > 0 ? rotary_dim : a->dh;
    if (a->rd > a->dh || a->rd % 2) return rc.error("rotary_embedding_dim must be even and at most the head size");
    const Shape &cs = rc.in[1].shape, &ss = rc.in[2].shape;
    if (cs != ss || cs.size() < 2 || cs.back() != a->rd / 2)
      return rc.error("cos_cache/sin_cache must agree and end in rotary_embedding_dim/2");
    const bool has_pos = rc.in.size() > 3 && rc.in[3].present;
    if (has_pos) {
      if (cs.size() != 2) return rc.error("with position_ids, the caches must be (max_position, rd/2)");
      int64_t np = 1;
      for (int64_t d : rc.in[3].shape) np *= d;
      if (np != a->b * a->s) return rc.error("position_ids must be (batch, sequence)");
      a->cache_rows = cs[0];
    } else if (cs.size() == 3 && cs[0] == a->b && cs[1] == a->s) {
      a->per_batch_rows = true;
      a->cache_rows = a->b * a->s;
    } else if (cs.size() == 2 && cs[0] == a->s) {
      a->cache_rows = a->s;
    } else {
      return rc.error("without position_ids, the caches must be (batch, sequence, rd/2)");
    }
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    RotaryArgs a = shape_state<RotaryArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.cos = ctx.input(1).raw();
    a.sin = ctx.input(2).raw();
    a.positions = ctx.has_input(3) ? ctx.input(3).data<int64_t>() : nullptr;
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_rotary(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// kiln.Rotary(X, COS, SIN) (ops/fused.cpp): the geometry as the CPU kernel plans it.
Expected<KernelPtr> create_rotary_half() {
  auto reshape = [](ReshapeContext& rc) -> Status {
    for (int i = 0; i < 3; ++i)
      if (static_cast<size_t>(i) >= rc.in.size() || !rc.in[i].present) return rc.error("X, COS and SIN are required");
    const DataType dt = rc.in[0].dtype;
    if (!is_float_type(dt) || rc.in[1].dtype != dt || rc.in[2].dtype != dt) return rc.error("X, COS and SIN must have one float dtype");
    ops::RotaryGeometry g;
    if (std::string why = ops::rotary_geometry(rc.in[0].shape, rc.in[1].shape, rc.in[2].shape, &g); !why.empty())
      return rc.error(why);
    if (g.outer.size() > static_cast<size_t>(kMaxRank)) return rc.error("X has more than " + std::to_string(kMaxRank + 1) + " dims");
    auto a = std::make_shared<RotaryHalfArgs>();
    a->elem = elem_of(dt);
    a->rows = g.rows;
    a->d = g.d;
    a->outer_rank = static_cast<int>(g.outer.size());
    for (size_t k = 0; k < g.outer.size(); ++k) {
      a->outer[k] = g.outer[k];
      a->cos_outer[k] = g.cos_outer[k];
      a->sin_outer[k] = g.sin_outer[k];
    }
    a->cos_last = g.cos_last;
    a->sin_last = g.sin_last;
    rc.out[0] = {dt, rc.in[0].shape};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    RotaryHalfArgs a = shape_state<RotaryHalfArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.cos = ctx.input(1).raw();
    a.sin = ctx.input(2).raw();
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_rotary_half(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_attention_rotary(KernelRegistry& r) {
  r.add(kernel_row("RotaryEmbedding", 23, [](const ir::Node& n) { return check_same_float(n, 3, 0b1000); },
                   [](const ir::Node& n, KernelInit&) { return create_rotary(n); }));
  r.add(kernel_row("Rotary", 1,
                   [](const ir::Node& n) -> std::string {
                     if (std::string w = check_same_float(n, 3, 0); !w.empty()) return w;
                     const DataType dt = n.inputs[0]->type.dtype;
                     return dt == DataType::kUndefined || is_float_type(dt) ? "" : "float32, float16 and bfloat16 only";
                   },
                   [](const ir::Node&, KernelInit&) { return create_rotary_half(); }, "kiln"));
}

}  // namespace kiln::cuda
