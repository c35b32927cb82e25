// backends/cpu/fused.cpp — kiln's fused ops on the CPU (float32): FusedConv, FusedGemm and FusedMatMul
// run the Conv/Gemm/MatMul kernel straight into their output and apply bias and activation as one
// epilogue pass over it; SkipLayerNorm adds and normalizes each row in one pass.
#include <memory>

#include "backends/backend.h"
#include "backends/cpu/fused_common.h"
#include "backends/staged_kernel.h"
#include "ops/op_table.h"

namespace kiln::cpu {
namespace fused {
namespace {

// Runs an inner kernel with the fused node's inputs and output 0.
class InnerContext final : public KernelContext {
 public:
  InnerContext(KernelContext& outer, const ir::Node& node, int inputs) : outer_(outer), node_(node), inputs_(inputs) {}
  int num_inputs() const override { return std::min(inputs_, outer_.num_inputs()); }
  int num_outputs() const override { return 1; }
  bool has_input(int i) const override { return i < num_inputs() && outer_.has_input(i); }
  const Slot& input_slot(int i) const override { return outer_.input_slot(i); }
  bool has_output(int i) const override { return i == 0; }
  Tensor& output(int i, DataType dtype, const Shape& shape) override {
    out0_ = &outer_.output(i, dtype, shape);
    return *out0_;
  }
  Tensor& output(int i) override {
    if (planned_) return *(out0_ = &outer_.output(i));
    return output(i, shapes.out[i].first, shapes.out[i].second);
  }
  void* workspace() override { return planned_ ? outer_.workspace() : shapes.workspace_ptr(); }
  const void* shape_state() const override { return planned_ ? planned_ : shapes.state.get(); }
  // The inner kernel was reshaped with the fused node's plan: its state, output and workspace are
  // the fused node's.
  void use_plan(const void* inner_state) { planned_ = inner_state; }
  Tensor* out0() const { return out0_; }
  Slot& output_slot(int i) override { return outer_.output_slot(i); }
  Tensor owned_copy(const Tensor& t) override { return outer_.owned_copy(t); }
  Status run_subgraph(const CompiledGraph& body, std::vector<Slot> in, std::vector<Slot>& out) override {
    return outer_.run_subgraph(body, std::move(in), out);
  }
  void* device_state() const override { return outer_.device_state(); }
  const ir::Node& node() const override { return node_; }
  AdHocShapes shapes;  // the inner kernel's reshape, made on each run (fused ops are not planned per shape yet)

 private:
  KernelContext& outer_;
  const ir::Node& node_;
  int inputs_;
  Tensor* out0_ = nullptr;
  const void* planned_ = nullptr;
};

std::string check_f32(const ir::Node& n) {
  std::string why;
  Activation act;
  if (!parse_activation(n, &act, &why)) return why;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && n.inputs[i]->type.dtype != DataType::kFloat32) return "float32 only";
  return "";
}

// A fused node's ai.onnx counterpart (its attributes without the activation).
std::shared_ptr<ir::Node> inner_node(const ir::Node& n, const std::string& op, int opset, int inputs) {
  auto inner = std::make_shared<ir::Node>();
  inner->name = n.name;
  inner->op_type = op;
  inner->opset = opset;
  inner->attrs = n.attrs;
  inner->attrs.erase("activation");
  inner->attrs.erase("activation_params");
  inner->inputs.assign(n.inputs.begin(), n.inputs.begin() + std::min<size_t>(n.inputs.size(), inputs));
  inner->outputs = {n.outputs[0]};
  return inner;
}

// FusedConv / FusedGemm: the inner kernel writes the output; the activation follows in place.
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
    auto reshape = [inner, kernel](ReshapeContext& rc) -> Status {
      ReshapeContext ir{*inner, {}, {}, rc.device_state, 0, nullptr};
      ir.in.assign(rc.in.begin(), rc.in.begin() + std::min(rc.in.size(), inner->inputs.size()));
      ir.out.resize(1);
      KILN_RETURN_IF_ERROR(kernel->reshape(ir));
      rc.out[0] = ir.out[0];
      rc.workspace_bytes = ir.workspace_bytes;
      rc.state = std::move(ir.state);
      return Status::Ok();
    };
    auto run = [inner, kernel, epilogue](KernelContext& ctx) -> Status {
      InnerContext ic(ctx, *inner, static_cast<int>(inner->inputs.size()));
      ic.use_plan(ctx.shape_state());
      KILN_RETURN_IF_ERROR(kernel->run(ic));
      if (!ic.out0()) return ctx.error("the inner kernel wrote no output");
      return epilogue(ctx, *ic.out0());
    };
    return KernelPtr(new StagedKernel(reshape, run));
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

Status skip_layer_norm(KernelContext& ctx, float eps) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const Tensor& gamma = ctx.input(2);
  Shape shape;
  if (!ops::broadcast_shapes(a.shape(), b.shape(), &shape) || shape.empty())
    return ctx.error("A " + shape_to_string(a.shape()) + " and B " + shape_to_string(b.shape()) + " do not broadcast");
  const int64_t cols = shape.back();
  if (cols == 0 || a.dim(-1) != cols || b.rank() == 0 || b.dim(-1) != cols)
    return ctx.error("A and B must both have the last dim " + std::to_string(cols));
  if (gamma.numel() != cols || (ctx.has_input(3) && ctx.input(3).numel() != cols))
    return ctx.error("gamma and beta must have " + std::to_string(cols) + " values");
  const int64_t rows = shape_numel(shape) / cols;
  const bool same = a.shape() == b.shape();
  const std::vector<int64_t> oa = same ? std::vector<int64_t>{} : row_offsets(a.shape(), shape, cols);
  const std::vector<int64_t> ob = same ? std::vector<int64_t>{} : row_offsets(b.shape(), shape, cols);
  Tensor& y = ctx.output(0, DataType::kFloat32, shape);
  float* sum_out = ctx.num_outputs() > 1 && ctx.has_output(1) ? ctx.output(1, DataType::kFloat32, shape).data<float>() : nullptr;
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const float* g = gamma.data<float>();
  const float* be = ctx.has_input(3) ? ctx.input(3).data<float>() : nullptr;
  float* py = y.data<float>();
  parallel_for(rows, std::max<int64_t>(1, 4096 / cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x0 = pa + (same ? r * cols : oa[r]);
      const float* x1 = pb + (same ? r * cols : ob[r]);
      float* out = py + r * cols;
      float* s = sum_out ? sum_out + r * cols : out;
      double mean = 0;
      for (int64_t c = 0; c < cols; ++c) {
        s[c] = x0[c] + x1[c];
        mean += s[c];
      }
      mean /= cols;
      double var = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = s[c] - mean;
        var += d * d;
      }
      var /= cols;
      const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
      const float m = static_cast<float>(mean);
      for (int64_t c = 0; c < cols; ++c) out[c] = (s[c] - m) * inv * g[c] + (be ? be[c] : 0.0f);
    }
  });
  return Status::Ok();
}

}  // namespace

void register_fused_attention(KernelRegistry& r);  // fused_attention.cpp

}  // namespace fused

void register_fused(KernelRegistry& r) {
  using fused::make_fused;
  r.add({"FusedConv", "kiln", 1, 1 << 30, "cpu.FusedConv.f32", fused::check_f32, [](const ir::Node& n, KernelInit& i) {
           return make_fused(n, i, "Conv", 11, 3, false);
         }});
  r.add({"FusedGemm", "kiln", 1, 1 << 30, "cpu.FusedGemm.f32", fused::check_f32, [](const ir::Node& n, KernelInit& i) {
           return make_fused(n, i, "Gemm", 13, 3, false);
         }});
  r.add({"FusedMatMul", "kiln", 1, 1 << 30, "cpu.FusedMatMul.f32", fused::check_f32,
         [](const ir::Node& n, KernelInit& i) { return make_fused(n, i, "MatMul", 13, 2, true); }});
  r.add({"SkipLayerNorm", "kiln", 1, 1 << 30, "cpu.SkipLayerNorm.f32", fused::check_f32,
         [](const ir::Node& n, KernelInit&) {
           const float eps = n.attr_float("epsilon", 1e-5f);
           return make_kernel([eps](KernelContext& ctx) { return fused::skip_layer_norm(ctx, eps); });
         }});
  fused::register_fused_attention(r);
}

}  // namespace kiln::cpu
