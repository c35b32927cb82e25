// backends/cpu/pointwise.cpp — kiln.Pointwise on the CPU: the program interpreted over blocks of
// elements (each instruction a loop over the block, in float32), inputs read through broadcast strides.
// It is the reference the generated CUDA kernels are tested against, and runs a region a CUDA engine
// places on the host.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/staged_kernel.h"
#include "ir/float_types.h"
#include "ops/op_table.h"
#include "ops/pointwise.h"
#include "util/parallel.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kBlock = 256;

float load(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kFloat16: return f16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kBFloat16: return bf16_to_f32(t.data<uint16_t>()[i]);
    default: return t.data<float>()[i];
  }
}

Status pointwise_reshape(ReshapeContext& rc, DataType dtype) {
  Shape out;
  for (size_t i = 0; i < rc.in.size(); ++i) {
    if (!rc.in[i].present) return rc.error("input " + std::to_string(i) + " is required");
    if (!ops::pw_float(rc.in[i].dtype)) return rc.error("input " + std::to_string(i) + " must be float32, float16 or bfloat16");
    Shape b;
    if (!ops::broadcast_shapes(out, rc.in[i].shape, &b))
      return rc.error("input " + std::to_string(i) + "'s shape does not broadcast with the others'");
    out = b;
  }
  rc.out[0] = {dtype, out};
  return Status::Ok();
}

Status pointwise_run(KernelContext& ctx, const ops::PointwiseProgram& p) {
  Tensor& y = ctx.output(0);
  const int64_t n = y.numel();
  if (n == 0) return Status::Ok();
  const Shape& dims = y.shape();
  const int rank = static_cast<int>(dims.size());
  // Each input's element strides along Y's dims (0 where it broadcasts).
  std::vector<std::vector<int64_t>> strides(p.inputs, std::vector<int64_t>(rank, 0));
  for (int k = 0; k < p.inputs; ++k) {
    const Shape& s = ctx.input(k).shape();
    int64_t st = 1;
    for (int d = static_cast<int>(s.size()) - 1, o = rank - 1; d >= 0; --d, --o) {
      if (s[d] != 1) strides[k][o] = st;
      st *= s[d];
    }
  }
  const int regs = p.inputs + static_cast<int>(p.code.size());
  parallel_for((n + kBlock - 1) / kBlock, 16, [&](int64_t b0, int64_t b1) {
    std::vector<float> r(static_cast<size_t>(regs) * kBlock);
    std::vector<int64_t> idx(rank);
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t start = blk * kBlock, len = std::min(kBlock, n - start);
      // Y's multi-index of the block's first element, then stepped along.
      int64_t rem = start;
      for (int d = rank - 1; d >= 0; --d) {
        idx[d] = rem % dims[d];
        rem /= dims[d];
      }
      for (int64_t e = 0; e < len; ++e) {
        for (int k = 0; k < p.inputs; ++k) {
          int64_t off = 0;
          for (int d = 0; d < rank; ++d) off += idx[d] * strides[k][d];
          r[k * kBlock + e] = load(ctx.input(k), off);
        }
        for (int d = rank - 1; d >= 0; --d) {
          if (++idx[d] < dims[d]) break;
          idx[d] = 0;
        }
      }
      for (size_t c = 0; c < p.code.size(); ++c) {
        const ops::PwInstr& in = p.code[c];
        float* dst = r.data() + (p.inputs + static_cast<int64_t>(c)) * kBlock;
        if (in.op == ops::PwOp::kConst) {
          std::fill(dst, dst + len, p.constants[in.a]);
          continue;
        }
        const float* a = r.data() + static_cast<int64_t>(in.a) * kBlock;
        const float* b = r.data() + static_cast<int64_t>(in.b) * kBlock;
        for (int64_t e = 0; e < len; ++e) dst[e] = ops::pw_apply(in.op, a[e], b[e]);
      }
      const float* res = r.data() + static_cast<int64_t>(p.result()) * kBlock;
      switch (y.dtype()) {
        case DataType::kFloat16:
          for (int64_t e = 0; e < len; ++e) y.data<uint16_t>()[start + e] = f32_to_f16(res[e]);
          break;
        case DataType::kBFloat16:
          for (int64_t e = 0; e < len; ++e) y.data<uint16_t>()[start + e] = f32_to_bf16(res[e]);
          break;
        default: std::memcpy(y.data<float>() + start, res, static_cast<size_t>(len) * sizeof(float));
      }
    }
  });
  return Status::Ok();
}

}  // namespace

void register_pointwise(KernelRegistry& r) {
  r.add({"Pointwise", "kiln", 1, 1 << 30, "cpu.Pointwise",
              [](const ir::Node& n) -> std::string {
                auto p = ops::parse_pointwise(n);
                if (!p.ok()) return p.status().message();
                for (const ir::Value* v : n.inputs)
                  if (v && v->type.dtype != DataType::kUndefined && !ops::pw_float(v->type.dtype))
                    return "inputs must be float32, float16 or bfloat16";
                return "";
              },
              [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
                KILN_ASSIGN_OR_RETURN(const ops::PointwiseProgram p, ops::parse_pointwise(n));
                return make_staged([dt = p.dtype](ReshapeContext& rc) { return pointwise_reshape(rc, dt); },
                                   [p](KernelContext& ctx) { return pointwise_run(ctx, p); });
              }});
}

}  // namespace kiln::cpu
