// passes/pad_matmul_columns.cpp — a product with a constant weight whose column count the GPU's
// GEMM kernels cannot take at full speed gets zero columns up to a multiple of
// PassOptions::pad_matmul_columns, and a Slice back to the model's columns:
//
//   MatMul(A, B [K,N]) [+ bias [N]]  →  Slice(MatMul(A, B' [K,N']) [+ bias' [N']], [0, N) on the last axis)
//
// cuBLASLt picks tensor-core kernels by the byte alignment of every row: GPT-2's language-model head
// ([768, 50257] in float16, rows of 100514 bytes) ran as a Turing-era "align1" kernel, 5.07 ms of a
// 24.5 ms batch-64 run on an H200. The padded columns are zeros and the Slice drops them: the same
// numbers. Only products of at least kMinColumns columns are padded (smaller ones are cheap either way).
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

constexpr int64_t kMinColumns = 512;

// t [rows, n] (or [n] when rows is 0) with zero columns up to n_padded.
Tensor pad_columns(const Tensor& t, int64_t rows, int64_t n, int64_t n_padded) {
  Tensor out = Tensor::empty(DataType::kFloat32, rows ? Shape{rows, n_padded} : Shape{n_padded});
  float* dst = out.data<float>();
  const float* src = t.data<float>();
  for (int64_t r = 0; r < std::max<int64_t>(rows, 1); ++r)
    for (int64_t c = 0; c < n_padded; ++c) dst[r * n_padded + c] = c < n ? src[r * n + c] : 0.0f;
  return out;
}

}  // namespace

Expected<bool> pad_matmul_columns(ir::Graph& g, PassContext& ctx) {
  const int64_t multiple = ctx.options.pad_matmul_columns;
  if (multiple <= 1) return false;
  Rewriter rw(g, ctx, "pad-matmul-columns");
  // Quiet: most products are aligned already, and none of the others is a near miss worth listing.
  const std::vector<Rule> rules = {{"MatMul", op("MatMul", {any("a"), cst("b")}), kQuiet}};
  const int opset = std::max(13, g.opsets.count("") ? static_cast<int>(g.opsets.at("")) : 17);
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* mm = m.root();
    const Tensor& b = m.constant("b");
    if (b.dtype() != DataType::kFloat32 || b.rank() != 2) return "not a 2-D float32 weight";
    const int64_t K = b.dim(0), N = b.dim(1);
    if (N % multiple == 0) return "aligned already";
    if (N < kMinColumns) return "fewer than " + std::to_string(kMinColumns) + " columns";
    if (K % multiple != 0) return "K is not a multiple of " + std::to_string(multiple) + " either";
    const ir::SymShape& as = m["a"]->type.shape;
    if (!as.known || as.rank() < 2 || m["a"]->type.dtype != DataType::kFloat32) return "A is not float32 of rank >= 2";
    ir::Value* y = mm->outputs[0];
    if (!y) return "no output";
    const int64_t Np = (N + multiple - 1) / multiple * multiple;
    // A bias added right after (the product's only reader) is padded too, so fuse-matmul-add still
    // makes it the GEMM's epilogue; the Slice then follows the Add.
    ir::Node* add = nullptr;
    const ir::Value* bias = nullptr;
    if (y->uses.size() == 1 && !y->is_output) {
      ir::Node* r = y->uses[0].node;
      if (r->domain.empty() && r->op_type == "Add" && r->inputs.size() == 2 && r->outputs[0]) {
        const ir::Value* other = r->inputs[0] == y ? r->inputs[1] : r->inputs[0];
        if (other->is_constant() && other->type.dtype == DataType::kFloat32 && other->constant->rank() == 1 &&
            other->constant->numel() == N) {
          add = r;
          bias = other;
        }
      }
    }
    const std::string base = mm->name;
    const ir::Type f32 = ir::Type::tensor(DataType::kFloat32);
    ir::Value* wide = g.new_value(base + "_padded", f32);
    ir::Value* a = m["a"];
    ir::Value* out = add ? add->outputs[0] : y;
    if (add) rw.remove(add);
    rw.remove(mm);
    g.add_node("MatMul", "", {a, rw.constant(base + "_padded_weight", pad_columns(b, K, N, Np))}, {wide}, base + "_padded")->opset =
        opset;
    if (add) {
      ir::Value* biased = g.new_value(base + "_padded_biased", f32);
      g.add_node("Add", "", {wide, rw.constant(base + "_padded_bias", pad_columns(*bias->constant, 0, N, Np))}, {biased},
                 base + "_padded_bias_add")
          ->opset = opset;
      wide = biased;
    }
    g.add_node("Slice", "", {wide, rw.constant(base + "_cols_start", int64_tensor({0})), rw.constant(base + "_cols_end", int64_tensor({N})),
                             rw.constant(base + "_cols_axis", int64_tensor({-1}))},
               {out}, base + "_columns")
        ->opset = opset;
    rw.log("padded " + mm->describe() + "'s " + std::to_string(N) + " weight columns to " + std::to_string(Np) +
           (add ? " (and its bias)" : "") + " for aligned GEMM rows");
    return "";
  });
}

}  // namespace kiln::passes
