// passes/patchify_conv.cpp — a "patchify" convolution (kernel = stride, no padding, as vision
// transformers embed their patches) becomes a matrix product.
//
// Conv(X [N,C,H,W], W [M,C,kh,kw], B) with strides (kh, kw), pads 0, dilations 1, group 1, and H, W
// multiples of kh, kw reads every input pixel exactly once: its output is
//   Transpose(MatMul(Reshape(Transpose(Reshape(X, [N,C,OH,kh,OW,kw]), 0,2,4,1,3,5), [N,OH,OW,C*kh*kw]),
//             Wt [C*kh*kw, M]) + B, 0,3,1,2)
// with Wt the kernel flattened and transposed once here. The same sums in another order; the GEMM
// libraries run it at full speed, where convolution kernels for such shapes are slow (ViT-B/16's
// 16x16/16 embedding on 3 channels: 4 ms of a 31 ms float16 batch-64 run on an H200 in cuDNN).
#include "passes/pattern.h"

namespace kiln::passes {
Expected<bool> patchify_conv(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "patchify-conv");
  const std::vector<Rule> rules = {{"Conv", op("Conv", {any("x"), cst("w")}), 1}};
  // The new nodes take their opset-13 forms (Reshape's shape an input), whatever the model's opset.
  const int opset = std::max(13, g.opsets.count("") ? static_cast<int>(g.opsets.at("")) : 17);
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* conv = m.root();
    const Tensor& w = m.constant("w");
    if (w.dtype() != DataType::kFloat32 || w.rank() != 4) return "not a 2-D float32 kernel";
    if (conv->attr_string("auto_pad", "NOTSET") != "NOTSET") return "Conv uses auto_pad";
    if (conv->attr_int("group", 1) != 1) return "grouped";
    const int64_t M = w.dim(0), C = w.dim(1), kh = w.dim(2), kw = w.dim(3);
    if (kh * kw < 2) return "a 1x1 kernel";
    if (conv->attr_ints("strides", {1, 1}) != std::vector<int64_t>{kh, kw}) return "strides differ from the kernel";
    if (conv->attr_ints("dilations", {1, 1}) != std::vector<int64_t>{1, 1}) return "dilated";
    for (int64_t p : conv->attr_ints("pads", {0, 0, 0, 0}))
      if (p != 0) return "padded";
    const ir::SymShape& xs = m["x"]->type.shape;
    if (!xs.known || xs.rank() != 4 || !xs.dims[1].is_static() || !xs.dims[2].is_static() || !xs.dims[3].is_static())
      return "input size is not static";
    if (xs.dims[1].value != C) return "channels differ";
    const int64_t H = xs.dims[2].value, W = xs.dims[3].value;
    if (H % kh != 0 || W % kw != 0) return "the kernel does not tile the input";
    const ir::Value* b = conv->has_input(2) ? conv->inputs[2] : nullptr;
    if (b && (!b->is_constant() || b->type.dtype != DataType::kFloat32 || b->constant->rank() != 1 || b->constant->numel() != M))
      return "bias is not a constant [M]";
    if (!conv->outputs[0] || m["x"]->type.dtype != DataType::kFloat32) return "not float32";
    const int64_t OH = H / kh, OW = W / kw, K = C * kh * kw;
    // Wt [K, M]: Wt[(c*kh + i)*kw + j, m] = W[m, c, i, j].
    Tensor wt = Tensor::empty(DataType::kFloat32, {K, M});
    const float* src = w.data<float>();
    float* dst = wt.data<float>();
    for (int64_t mi = 0; mi < M; ++mi)
      for (int64_t k = 0; k < K; ++k) dst[k * M + mi] = src[mi * K + k];
    const std::string base = conv->name;
    ir::Value* x = m["x"];
    ir::Value* y = conv->outputs[0];
    const ir::Type f32 = ir::Type::tensor(DataType::kFloat32);
    auto value = [&](const std::string& hint) { return g.new_value(base + hint, f32); };
    ir::Value* r1 = value("_patches");
    ir::Value* t1 = value("_patches_t");
    ir::Value* r2 = value("_patch_rows");
    ir::Value* mm = value("_matmul");
    rw.remove(conv);
    g.add_node("Reshape", "", {x, rw.constant(base + "_patch_shape", int64_tensor({0, C, OH, kh, OW, kw}))}, {r1}, base + "_patchify_reshape")
        ->opset = opset;
    ir::Node* tr = g.add_node("Transpose", "", {r1}, {t1}, base + "_patchify_transpose");
    tr->opset = opset;
    tr->attrs["perm"] = ints_attribute({0, 2, 4, 1, 3, 5});
    g.add_node("Reshape", "", {t1, rw.constant(base + "_rows_shape", int64_tensor({0, OH, OW, K}))}, {r2}, base + "_patchify_rows")->opset = opset;
    g.add_node("MatMul", "", {r2, rw.constant(base + "_patch_weights", wt)}, {mm}, base + "_patchify_matmul")->opset = opset;
    ir::Value* pre = mm;
    if (b) {
      pre = value("_biased");
      g.add_node("Add", "", {mm, const_cast<ir::Value*>(b)}, {pre}, base + "_patchify_bias")->opset = opset;
    }
    ir::Node* back = g.add_node("Transpose", "", {pre}, {y}, base + "_patchify_nchw");
    back->opset = opset;
    back->attrs["perm"] = ints_attribute({0, 3, 1, 2});
    rw.log("ran " + conv->describe() + " (" + std::to_string(kh) + "x" + std::to_string(kw) + "/" + std::to_string(kh) + "x" +
           std::to_string(kw) + ", " + std::to_string(C) + " channels) as a matrix product over its " +
           std::to_string(OH * OW) + " patches");
    return "";
  });
}

}  // namespace kiln::passes
