// backends/cpu/fused.cpp — kiln's fused ops on the CPU (float32): FusedGemm and FusedMatMul run the
// Gemm/MatMul kernel straight into their output and apply bias and activation as one epilogue pass
// over it; SkipLayerNorm adds and normalizes each row in one pass. (FusedConv: nn_conv.cpp.)
#include <memory>

#include "backends/backend.h"
#include "backends/cpu/fused_common.h"
#include "backends/cpu/norm_rows.h"
#include "backends/inner_context.h"
#include "backends/staged_kernel.h"
#include "ops/op_table.h"
#include "ops/params_nn.h"

namespace kiln::cpu {
namespace fused {
namespace {

// FusedGemm: the inner kernel writes the output; the activation follows in place. (FusedConv is
// the convolution kernel's own: nn_conv.cpp, where oneDNN applies the epilogue as post-ops.)
// FusedMatMul: MatMul of inputs 0, 1; bias (input 2) and activation in one pass.
Expected<KernelPtr> make_fused(const ir::Node& n, KernelInit& init, const std::string& op, int opset, int inputs,
                               bool bias_input) {
  Activation act;
  std::string why;
  if (!parse_activation(n, &act, &why)) return invalid_model(n.describe() + ": " + why);
  auto inner = inner_node(n, op, opset, inputs);
  const KernelDef* def = cpu_backend().kernels().find(*inner, &why);
  if (!def) return unsupported(n.describe() + ": no " + op + " kernel (" + why + ")");
  KILN_ASSIGN_OR_RETURN(KernelPtr k, def->create(*inner, init));
  std::shared_ptr<Kernel> kernel(std::move(k));
  auto epilogue = [act, bias_input](KernelContext& ctx, Tensor& y) -> Status {
    if (y.dtype() != DataType::kFloat32) return ctx.error("float32 only");
    const int64_t cols = y.rank() ? y.dim(-1) : 1;
    const int64_t rows = cols ? y.numel() / cols : 0;
    const float* bias = nullptr;
    if (bias_input && ctx.has_input(2)) {
      const Tensor& b = ctx.input(2);
      if (b.numel() != cols || b.dtype() != DataType::kFloat32)
        return ctx.error("bias must have " + std::to_string(cols) + " float32 values");
      bias = b.data<float>();
    }
    apply_epilogue(y.data<float>(), rows, cols, bias, act);
    return Status::Ok();
  };
  if (kernel->has_reshape()) {
    // Planned: the inner kernel's reshape is the fused node's (same output, same workspace).
    auto reshape = [inner, kernel](ReshapeContext& rc) -> Status { return reshape_inner(*inner, *kernel, rc); };
    auto run = [inner, kernel, epilogue](KernelContext& ctx) -> Status {
      InnerContext ic(ctx, *inner, static_cast<int>(inner->inputs.size()));
      ic.use_plan(ctx.shape_state());
      KILN_RETURN_IF_ERROR(kernel->run(ic));
      if (!ic.out0()) return ctx.error("the inner kernel wrote no output");
      return epilogue(ctx, *ic.out0());
    };
    auto tactics = [inner, kernel](const ReshapeContext& rc) { return inner_tactics(*inner, *kernel, rc); };
    return KernelPtr(new StagedKernel(reshape, run, tactics));
  }
  return make_kernel([inner, kernel, epilogue](KernelContext& ctx) -> Status {
    InnerContext ic(ctx, *inner, static_cast<int>(inner->inputs.size()));
    KILN_RETURN_IF_ERROR(ic.shapes.prepare(*kernel, ic, [](size_t b) { return cpu_backend().allocate(b); }));
    KILN_RETURN_IF_ERROR(kernel->run(ic));
    if (!ic.out0()) return ctx.error("the inner kernel wrote no output");
    return epilogue(ctx, *ic.out0());
  });
}

// ---- SkipLayerNorm: s = A + B (numpy broadcasting over the rows; both have the full last dim),
// Y = (s - mean) / sqrt(var + eps) * gamma + beta over the last dim.

// The element offset of each row of `out` (rows of `cols`) in a tensor of shape `in` broadcast to it.
std::vector<int64_t> row_offsets(const Shape& in, const Shape& out, int64_t cols) {
  const int r = static_cast<int>(out.size());
  std::vector<int64_t> stride(r, 0);
  int64_t s = 1;
  for (int d = r - 1, k = static_cast<int>(in.size()) - 1; d >= 0; --d, --k) {
    const int64_t size = k >= 0 ? in[k] : 1;
    stride[d] = size == 1 ? 0 : s;
    s *= size;
  }
  const int64_t rows = cols ? shape_numel(out) / cols : 0;
  std::vector<int64_t> off(static_cast<size_t>(rows), 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row, o = 0;
    for (int d = r - 2; d >= 0; --d) {
      o += (rem % out[d]) * stride[d];
      rem /= out[d];
    }
    off[row] = o;
  }
  return off;
}

// SkipLayerNorm per shape: the rows, and (when A and B differ in shape) each row's offset in each.
struct SkipPlan {
  int64_t rows = 0, cols = 0;
  bool same = true;
  std::vector<int64_t> oa, ob;
};

Status skip_layer_norm_reshape(ReshapeContext& rc) {
  if (rc.in.size() < 3 || !rc.in[0].present || !rc.in[1].present || !rc.in[2].present)
    return rc.error("A, B and gamma are required");
  const Shape& a = rc.in[0].shape;
  const Shape& b = rc.in[1].shape;
  Shape shape;
  if (!ops::broadcast_shapes(a, b, &shape) || shape.empty())
    return rc.error("A " + shape_to_string(a) + " and B " + shape_to_string(b) + " do not broadcast");
  const int64_t cols = shape.back();
  if (cols == 0 || a.back() != cols || b.empty() || b.back() != cols)
    return rc.error("A and B must both have the last dim " + std::to_string(cols));
  const bool has_beta = rc.in.size() > 3 && rc.in[3].present;
  if (shape_numel(rc.in[2].shape) != cols || (has_beta && shape_numel(rc.in[3].shape) != cols))
    return rc.error("gamma and beta must have " + std::to_string(cols) + " values");
  auto plan = std::make_shared<SkipPlan>();
  plan->cols = cols;
  plan->rows = shape_numel(shape) / cols;
  plan->same = a == b;
  if (!plan->same) {
    plan->oa = row_offsets(a, shape, cols);
    plan->ob = row_offsets(b, shape, cols);
  }
  rc.state = std::move(plan);
  rc.out[0] = {DataType::kFloat32, shape};
  if (rc.out.size() > 1) rc.out[1] = {DataType::kFloat32, shape};
  return Status::Ok();
}

Status skip_layer_norm(KernelContext& ctx, float eps, bool rms) {
  const SkipPlan& p = shape_state<SkipPlan>(ctx);
  const int64_t cols = p.cols;
  const bool same = p.same;
  Tensor& y = ctx.output(0);
  float* sum_out = ctx.num_outputs() > 1 && ctx.has_output(1) ? ctx.output(1).data<float>() : nullptr;
  const float* pa = ctx.input(0).data<float>();
  const float* pb = ctx.input(1).data<float>();
  const float* g = ctx.input(2).data<float>();
  const float* be = ctx.has_input(3) ? ctx.input(3).data<float>() : nullptr;
  float* py = y.data<float>();
  NormRow nr;
  nr.D = cols;
  nr.gamma = g;
  nr.beta = rms ? nullptr : be;  // (a simplified node with a beta is refused at build)
  nr.eps = eps;
  nr.rms = rms;
  parallel_for(p.rows, std::max<int64_t>(1, 4096 / cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      norm_row(nr, pa + (same ? r * cols : p.oa[r]), pb + (same ? r * cols : p.ob[r]), sum_out ? sum_out + r * cols : nullptr,
               py + r * cols);
  });
  return Status::Ok();
}

// ---- ChannelAffine: Y = act(X * scale[c] + shift[c]), c the channel axis 1 or (channels_last) the last.
Status channel_affine_reshape(ReshapeContext& rc, bool channels_last) {
  if (rc.in.size() < 3 || !rc.in[0].present || !rc.in[1].present || !rc.in[2].present)
    return rc.error("X, scale and shift are required");
  const std::string why = ops::channel_affine_shape_error(rc.in[0].shape, rc.in[1].shape, rc.in[2].shape, channels_last);
  if (!why.empty()) return rc.error(why);
  rc.out[0] = {DataType::kFloat32, rc.in[0].shape};
  return Status::Ok();
}

Status channel_affine(KernelContext& ctx, bool channels_last, EpilogueRowsFn act_rows, const Activation& act) {
  const Tensor& x = ctx.input(0);
  const float* a = ctx.input(1).data<float>();
  const float* b = ctx.input(2).data<float>();
  Tensor& y = ctx.output(0);
  const int64_t c = channels_last ? x.dim(-1) : x.dim(1);
  const int64_t n = x.numel();
  if (n == 0) return Status::Ok();
  const float* px = x.data<float>();
  float* py = y.data<float>();
  if (channels_last) {  // rows of C: the scale here, the shift and the activation as a bias epilogue
    const int64_t rows = n / c;
    parallel_for(rows, std::max<int64_t>(1, 16384 / c), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t i = 0; i < c; ++i) py[r * c + i] = px[r * c + i] * a[i];
      act_rows(py, r0, r1, c, b, act);
    });
  } else {  // planes of `inner` values per (image, channel)
    const int64_t inner = n / (x.dim(0) * c), planes = n / inner;
    parallel_for(planes, std::max<int64_t>(1, 16384 / inner), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const float k = a[p % c], s = b[p % c];
        for (int64_t i = 0; i < inner; ++i) py[p * inner + i] = px[p * inner + i] * k + s;
        act_rows(py + p * inner, 0, 1, inner, nullptr, act);
      }
    });
  }
  return Status::Ok();
}

}  // namespace

void register_fused_attention(KernelRegistry& r);  // fused_attention.cpp

}  // namespace fused

void register_fused(KernelRegistry& r) {
  using fused::make_fused;
  r.add({"FusedGemm", "kiln", 1, 1 << 30, "cpu.FusedGemm.f32", fused::check_f32, [](const ir::Node& n, KernelInit& i) {
           return make_fused(n, i, "Gemm", 13, 3, false);
         }});
  r.add({"FusedMatMul", "kiln", 1, 1 << 30, "cpu.FusedMatMul.f32", fused::check_f32,
         [](const ir::Node& n, KernelInit& i) { return make_fused(n, i, "MatMul", 13, 2, true); }});
  r.add({"SkipLayerNorm", "kiln", 1, 1 << 30, "cpu.SkipLayerNorm.f32", fused::check_f32,
         [](const ir::Node& n, KernelInit&) {
           const ops::SkipLayerNormParams p = ops::parse_skip_layer_norm(n);
           return make_staged(fused::skip_layer_norm_reshape,
                              [p](KernelContext& ctx) { return fused::skip_layer_norm(ctx, p.epsilon, p.simplified); });
         }});
  r.add({"ChannelAffine", "kiln", 1, 1 << 30, "cpu.ChannelAffine.f32",
         [](const ir::Node& n) -> std::string {
           const ops::ChannelAffineParams p = ops::parse_channel_affine(n);
           return p.error.empty() ? fused::check_f32(n) : p.error;
         },
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           const ops::ChannelAffineParams p = ops::parse_channel_affine(n);
           const bool last = p.channels_last;
           const Activation act = p.act;
           const fused::EpilogueRowsFn rows = fused::epilogue_rows_for(act.kind);
           return make_staged([last](ReshapeContext& rc) { return fused::channel_affine_reshape(rc, last); },
                              [last, rows, act](KernelContext& ctx) { return fused::channel_affine(ctx, last, rows, act); });
         }});
  fused::register_fused_attention(r);
}

}  // namespace kiln::cpu
