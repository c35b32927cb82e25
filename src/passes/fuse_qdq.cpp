// passes/fuse_qdq.cpp — explicitly quantized products become integer kernels.
//
// A QDQ model (ONNX Runtime's quantize_static, TensorRT-style explicit quantization, or kiln's own
// calibration, builder/calibrate.cpp) writes an 8-bit product as float ops between
// DequantizeLinear and QuantizeLinear:
//
//   Q?(act?(Conv|MatMul|Gemm(DequantizeLinear(x_q, xs, xz), DequantizeLinear(W_q, ws, 0) [, bias])))
//
// This pass replaces that chain by one kiln.QConv / kiln.QMatMul (ops/fused.cpp) that reads x_q and
// W_q and accumulates in int32; with the QuantizeLinear it writes 8-bit output, without it float32.
// It fires only where the target has the kernel and that kernel takes the node it would make
// (PassOptions::kernel_refuses: CUDA's int8 convolution wants symmetric int8 activations), for
// weights that are constant int8 with zero points 0 (per tensor or per output channel), activations
// uint8/int8 with one scale and zero point, and 2-D convolutions. fuse_qconv_residual (CUDA INT8
// builds) then folds a residual Add into the convolution before it. The weights' DequantizeLinear is kept from constant folding for it
// (fold_constants.cpp asks keep_dequantize_for_fusion). ONNX's own QLinearConv / QLinearMatMul
// (ONNX Runtime's QOperator format) take the same kernels when their weights qualify.
#include "ir/epilogue.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

bool is_8bit(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8 || t == DataType::kFloat8E4M3FN; }

// The symmetric 8-bit types: int8, and E4M3 (an FP8 engine's convolutions: weights with a scale per
// output channel, activations and residuals with zero point 0). The target's kernel decides which it runs.
bool symmetric_type(DataType t) { return t == DataType::kInt8 || t == DataType::kFloat8E4M3FN; }

// An 8-bit output of type `y` for a product that reads x of type `x`: integers stay integers and E4M3
// stays E4M3 (no kernel converts between them).
bool same_family(DataType x, DataType y) { return (x == DataType::kFloat8E4M3FN) == (y == DataType::kFloat8E4M3FN); }

// A QuantizeLinear whose kernel-side rounding the products' epilogues reproduce: E4M3 results
// saturate (saturate = 0 makes an out-of-range value NaN, which no fused epilogue does).
bool saturating(const ir::Node* q) { return q->attr_int("saturate", 1) != 0; }

const ir::Value* input_or_null(const ir::Node* n, size_t i) { return n && n->has_input(i) ? n->inputs[i] : nullptr; }

// "" when the DequantizeLinear/QuantizeLinear node `n` has one float32 scale and (optionally) one zero
// point of the quantized type `q`.
std::string per_tensor(const ir::Node* n, DataType q, const char* what) {
  const ir::Value* s = input_or_null(n, 1);
  if (!s || !s->is_constant() || s->type.dtype != DataType::kFloat32 || s->constant->numel() != 1)
    return std::string(what) + "'s scale is not one float32 constant";
  if (!(s->constant->data<float>()[0] > 0)) return std::string(what) + "'s scale is not positive";
  const ir::Value* z = input_or_null(n, 2);
  if (z && (!z->is_constant() || z->constant->numel() != 1 || z->type.dtype != q))
    return std::string(what) + "'s zero point is not one constant of its type";
  return "";
}

// The activation node's kind (ai.onnx ops the kernels take as post-ops), or nullopt.
std::optional<Activation> activation_node(const ir::Node* n) {
  if (!n || !n->domain.empty()) return std::nullopt;
  std::string why;
  const Activation a = activation_of(*n, [](const ir::Value* v) { return scalar_value(v); }, &why);
  if (a.kind == ActKind::kNone) return std::nullopt;
  return a;
}

bool is_quantize(const ir::Node* n) { return n && n->domain.empty() && n->op_type == "QuantizeLinear"; }

// A Conv's window attributes, which kiln.QConv keeps.
void copy_conv_attrs(const ir::Node& conv, std::map<std::string, ir::Attribute>& to) {
  for (const char* k : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
    if (const ir::Attribute* at = conv.attr(k)) to[k] = *at;
}

// Why the target's kernels refuse `probe` as the fused op `op` ("" when one takes it). A convolution
// is asked as the channels-last pass will leave it.
std::string refused_as(ir::Node probe, const std::string& op, bool conv, const PassContext& ctx) {
  probe.op_type = op;
  probe.domain = "kiln";
  probe.opset = 1;
  probe.use_index.clear();
  if (conv) {
    probe.attrs["channels_last"].kind = ir::Attribute::Kind::kInt;
    probe.attrs["channels_last"].i = 1;
  }
  return ctx.kernel_refuses(probe);
}

// Why the target would refuse the kiln.QConv that fuse-qdq makes of Conv `conv` whose weights are
// the DequantizeLinear `dqw` (its bias, activation and output not yet known: asked without them), or "".
std::string qconv_refused(const ir::Node& conv, const ir::Node& dqw, const PassContext& ctx) {
  const ir::Node* dqx = conv.inputs[0] ? conv.inputs[0]->producer : nullptr;
  if (!dqx || dqx->op_type != "DequantizeLinear" || !dqx->domain.empty()) return "x is not dequantized";
  ir::Node probe;
  auto in = [](const ir::Node* n, size_t i) { return const_cast<ir::Value*>(input_or_null(n, i)); };  // read only
  // No bias: it may be a DequantizeLinear not folded yet (ONNX Runtime's int32 bias); fuse-qdq checks it.
  probe.inputs = {in(dqx, 0), in(dqx, 1), in(dqx, 2), in(&dqw, 0), in(&dqw, 1), in(&dqw, 2)};
  copy_conv_attrs(conv, probe.attrs);
  return refused_as(std::move(probe), "QConv", true, ctx);
}

}  // namespace

bool keep_dequantize_for_fusion(const ir::Node& n, const PassContext& ctx) {
  if (ctx.options.level < 1 || ctx.options.disabled.count("fuse-qdq") || n.op_type != "DequantizeLinear" ||
      !n.domain.empty() || !n.has_input(0) || !symmetric_type(n.inputs[0]->type.dtype) || !n.outputs[0])
    return false;
  for (const ir::Use& u : n.outputs[0]->uses) {
    const ir::Node* r = u.node;
    if (!r->domain.empty() || u.input_index != 1) continue;
    // A convolution the target's int8 kernel would refuse keeps float weights, folded once.
    if (r->op_type == "Conv" && ctx.has_kernel("kiln", "QConv") && qconv_refused(*r, n, ctx).empty()) return true;
    // Int8 products only: no kiln.QMatMul kernel reads E4M3 (FP8 engines' GEMMs are kiln.F8MatMul).
    if ((r->op_type == "MatMul" || r->op_type == "Gemm") && n.inputs[0]->type.dtype == DataType::kInt8 &&
        ctx.has_kernel("kiln", "QMatMul"))
      return true;
  }
  return false;
}

namespace {

bool const_scalar(const ir::Value* v) { return v && v->is_constant() && v->constant->numel() == 1; }

// "" when ONNX's QLinearConv / QLinearMatMul node `n` (ONNX Runtime's QOperator format) can run as
// kiln.QConv / kiln.QMatMul: their inputs are the same, in the same order; the weights must be
// constant int8 with zero points 0 and float32 scales per tensor or per output channel.
std::string qlinear_fits(const ir::Node& n, bool conv) {
  for (int i = 0; i < 8; ++i)
    if (!n.has_input(i)) return "input " + std::to_string(i) + " is absent";
  if (!is_8bit(n.inputs[0]->type.dtype)) return "x is not 8-bit";
  const ir::Value* w = n.inputs[3];
  if (!w->is_constant() || w->constant->dtype() != DataType::kInt8) return "W is not a constant int8";
  const Shape& ws = w->constant->shape();
  if (ws.size() != (conv ? 4u : 2u)) return conv ? "not a 2-D convolution" : "B is not 2-D";
  const int64_t channels = conv ? ws[0] : ws[1];
  for (int i : {1, 4, 6})
    if (!n.inputs[i]->is_constant() || n.inputs[i]->type.dtype != DataType::kFloat32) return "a scale is not a float32 constant";
  if (!const_scalar(n.inputs[1]) || !const_scalar(n.inputs[6])) return "x or y has more than one scale";
  if (n.inputs[4]->constant->numel() != 1 && n.inputs[4]->constant->numel() != channels) return "W's scales are not per output channel";
  for (double v : constant_values(n.inputs[4]))
    if (!(v > 0)) return "W's scale is not positive";
  if (!const_scalar(n.inputs[2]) || !const_scalar(n.inputs[7]) || !is_8bit(n.inputs[7]->type.dtype)) return "zero points are not constant scalars";
  if (!n.inputs[5]->is_constant()) return "W's zero point is not constant";
  for (double z : constant_values(n.inputs[5]))
    if (z != 0) return "W's zero point is not 0";
  if (conv && n.has_input(8) && (!n.inputs[8]->is_constant() || n.inputs[8]->constant->numel() != channels))
    return "the bias is not a constant of one value per output channel";
  return "";
}

// The product p takes QuantizeLinear q's scale and zero point `yz` (inputs 6, 7) and writes q's
// output; q and the nodes `between` them go.
void take_quantization(ir::Graph& g, ir::Node* p, ir::Node* q, ir::Value* yz, std::initializer_list<ir::Node*> between) {
  if (p->inputs.size() < 8) p->inputs.resize(8, nullptr);
  g.set_input(p, 6, q->inputs[1]);
  g.set_input(p, 7, yz);
  ir::Value* y2 = q->outputs[0];
  g.remove_node(q);
  for (ir::Node* n : between) g.remove_node(n);
  g.set_output(p, 0, y2);
}

// ONNX Runtime's QDQ form quantizes a product's output, then its ReLU's output again:
//   kiln.QConv/QMatMul (8-bit y1) → DequantizeLinear → Relu → QuantizeLinear (y2)
// becomes the product with the ReLU and y2's scale and zero point (one rounding instead of two: the
// result is within one step of the unfused graph's, and equal when the two scales agree; TensorRT
// requantizes the same way). Each of the three must be the only reader of the value before it.
bool requantized_relu(ir::Graph& g, PassContext& ctx) {
  bool changed = false;
  for (ir::Node* p : g.nodes()) {
    if (p->removed || p->domain != "kiln" || (p->op_type != "QConv" && p->op_type != "QMatMul") || !p->has_input(6) ||
        !p->has_output(0) || p->has_input(9))
      continue;
    Activation act;
    std::string why;
    if (!read_activation(*p, &act, &why) || (act.kind != ActKind::kNone && act.kind != ActKind::kRelu)) continue;
    ir::Node* dq = sole_reader(p->outputs[0]);
    if (!dq || !dq->domain.empty() || dq->op_type != "DequantizeLinear" || dq->inputs[0] != p->outputs[0]) continue;
    const DataType yt = p->outputs[0]->type.dtype;
    if (!per_tensor(dq, yt, "y").empty()) continue;
    ir::Node* relu = sole_reader(dq->outputs[0]);
    if (!relu || !relu->domain.empty() || relu->op_type != "Relu" || !relu->has_output(0)) continue;
    ir::Node* q = sole_reader(relu->outputs[0]);
    if (!is_quantize(q) || !q->has_input(2) || !q->has_output(0)) continue;
    const DataType qt = q->inputs[2]->type.dtype;
    if (!is_8bit(qt) || !same_family(yt, qt) || !saturating(q) || !per_tensor(q, qt, "y").empty() ||
        q->attr_int("output_dtype", 0) != 0)
      continue;
    ir::Node probe = *p;
    probe.use_index.clear();
    probe.inputs[6] = q->inputs[1];
    probe.inputs[7] = q->inputs[2];
    write_activation(Activation{ActKind::kRelu}, probe.attrs);
    if (!refused_as(std::move(probe), p->op_type, p->op_type == "QConv", ctx).empty()) continue;
    write_activation(Activation{ActKind::kRelu}, p->attrs);
    take_quantization(g, p, q, q->inputs[2], {relu, dq});
    ctx.log("fuse-qdq", "requantized " + p->describe() + " with its ReLU into " + p->outputs[0]->name);
    changed = true;
  }
  if (changed) g.remove_dead_values();
  return changed;
}

// A float-output product whose only reader is a per-tensor QuantizeLinear writes the 8-bit value
// itself (y_scale, y_zero_point): the QuantizeLinear was kept apart by a node that later passes folded
// into the product (a transformer's FFN: MatMul → bias Add → GELU → QuantizeLinear, the Add and the
// GELU now in the int8 product's epilogue), without writing and re-reading the float tensor. QMatMul's
// epilogue does the same arithmetic (the activation, then rne(y / ys) + yz, saturated); QConv's kernels
// fold 1/ys into the scale and bias, within one step of it on .5 ties (as fuse-qdq's own QConvs).
bool quantized_output(ir::Graph& g, PassContext& ctx) {
  bool changed = false;
  for (ir::Node* p : g.nodes()) {
    if (p->removed || p->domain != "kiln" || (p->op_type != "QConv" && p->op_type != "QMatMul") || p->has_input(6) ||
        !p->has_output(0) || p->has_input(9) || p->attr("output_dtype") || p->outputs[0]->type.dtype != DataType::kFloat32)
      continue;
    ir::Node* q = sole_reader(p->outputs[0]);
    if (!is_quantize(q) || q->inputs[0] != p->outputs[0] || !q->has_output(0) || q->attr_int("output_dtype", 0) != 0) continue;
    const DataType qt = q->has_input(2) ? q->inputs[2]->type.dtype : DataType::kUInt8;
    if (!is_8bit(qt) || !same_family(p->inputs[0]->type.dtype, qt) || !saturating(q) || !per_tensor(q, qt, "y").empty())
      continue;
    ir::Value* yz = q->has_input(2) ? q->inputs[2] : nullptr;
    if (!yz) {
      Tensor z = Tensor::empty(DataType::kUInt8, {});
      z.data<uint8_t>()[0] = 0;
      yz = new_constant(g, q->name + "_zero_point", z);
    }
    ir::Node probe = *p;
    probe.use_index.clear();
    probe.inputs.resize(std::max<size_t>(probe.inputs.size(), 8), nullptr);
    probe.inputs[6] = q->inputs[1];
    probe.inputs[7] = yz;
    if (!refused_as(std::move(probe), p->op_type, p->op_type == "QConv", ctx).empty()) continue;
    take_quantization(g, p, q, yz, {});
    ctx.log("fuse-qdq", "quantized " + p->describe() + "'s output into " + p->outputs[0]->name);
    changed = true;
  }
  if (changed) g.remove_dead_values();
  return changed;
}

}  // namespace

Expected<bool> fuse_qdq(ir::Graph& g, PassContext& ctx) {
  bool changed = false;
  for (ir::Node* n : g.nodes()) {
    if (!n->domain.empty() || (n->op_type != "QLinearConv" && n->op_type != "QLinearMatMul")) continue;
    const bool conv = n->op_type == "QLinearConv";
    const std::string op = conv ? "QConv" : "QMatMul";
    if (!ctx.has_kernel("kiln", op)) continue;
    std::string why = qlinear_fits(*n, conv);
    if (why.empty())
      if (std::string r = refused_as(*n, op, conv, ctx); !r.empty()) why = "the target's kernel refuses it (" + r + ")";
    if (!why.empty()) {
      ctx.near_miss("fuse-qdq", n->describe() + ": " + why);
      continue;
    }
    ctx.log("fuse-qdq", "ran " + n->describe() + " as kiln." + op);
    n->op_type = op;
    n->domain = "kiln";
    n->opset = 1;
    changed = true;
  }
  Rewriter rw(g, ctx, "fuse-qdq");
  const Pat dqx = op("DequantizeLinear", {any("xq"), cst("xs")}).as("dqx");
  const Pat dqw = op("DequantizeLinear", {cst("wq"), cst("ws")}).as("dqw");
  const Pat prod = op("Conv|MatMul|Gemm", {dqx, dqw}).as("prod");
  const Pat act = op("Relu|LeakyRelu|Clip|Sigmoid|HardSigmoid|HardSwish|Tanh", {prod}).as("act");
  std::vector<Rule> rules = {
      {"DQ+product+act?+Q", op("QuantizeLinear", {maybe(act), cst("ys")}).as("q")},
      {"DQ+product+act", act},
      {"DQ+product", prod},
  };
  for (Rule& r : rules) r.exclusive = false;  // x's DequantizeLinear may have other readers
  changed |= rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* p = m.node("prod");
    ir::Node* a = m.has("act") ? m.node("act") : nullptr;
    ir::Node* q = m.has("q") ? m.node("q") : nullptr;
    // A product or activation whose only reader is a QuantizeLinear (or activation) is fused when that
    // reader is the root, so the 8-bit output is not lost to an earlier float-output match.
    ir::Node* after = sole_reader((a ? a : p)->outputs[0]);
    if (!q && (is_quantize(after) || (!a && activation_node(after)))) return "fused with its reader";
    if (a && (!activation_node(a) || sole_reader(p->outputs[0]) != a)) return "activation not fusable";
    if (q && sole_reader((a ? a : p)->outputs[0]) != q) return "the product's output has other readers";
    const bool conv = p->op_type == "Conv";
    const std::string fused_op = conv ? "QConv" : "QMatMul";
    if (std::string why = rw.unsupported_on_target("kiln", fused_op); !why.empty()) return why;
    const ir::Node* nx = m.node("dqx");
    const ir::Node* nw = m.node("dqw");
    const DataType xt = m["xq"]->type.dtype;
    if (!is_8bit(xt)) return "x is not 8-bit";
    if (std::string why = per_tensor(nx, xt, "x"); !why.empty()) return why;
    if (nx->attr_int("block_size", 0) != 0 || nw->attr_int("block_size", 0) != 0) return "blocked quantization";
    if (nx->outputs[0]->type.dtype != DataType::kFloat32 || nw->outputs[0]->type.dtype != DataType::kFloat32)
      return "dequantized to a type other than float32";
    const Tensor& wq = m.constant("wq");
    if (!symmetric_type(wq.dtype())) return "W is not int8 or float8e4m3fn";
    if (!same_family(xt, wq.dtype())) return "x and W are not both float8 or both integers";
    if (const ir::Value* wz = input_or_null(nw, 2)) {
      if (!wz->is_constant()) return "W's zero point is not constant";
      for (double z : constant_values(wz))
        if (z != 0) return "W's zero point is not 0";
    }
    const Tensor& ws = m.constant("ws");
    if (ws.dtype() != DataType::kFloat32) return "W's scale is not float32";
    for (double s : constant_values(m["ws"]))
      if (!(s > 0)) return "W's scale is not positive";
    const Shape& wsh = wq.shape();
    const int wrank = static_cast<int>(wsh.size());
    int64_t axis = nw->attr_int("axis", 1);
    if (axis < 0) axis += wrank;
    // Per-channel scales must run along the output channels: W's axis 0 for Conv and a transposed
    // Gemm, axis 1 for MatMul and Gemm.
    std::vector<ir::Value*> ins(9, nullptr);
    ins[0] = m["xq"];
    ins[1] = m["xs"];
    ins[2] = input_or_null(nx, 2) ? nx->inputs[2] : nullptr;
    Tensor w = wq;
    std::map<std::string, ir::Attribute> attrs;
    if (conv) {
      if (wrank != 4) return "not a 2-D convolution";
      if (ws.numel() != 1 && (axis != 0 || ws.numel() != wsh[0])) return "W's scales are not per output channel";
      if (p->has_input(2) && !p->inputs[2]->is_constant()) return "the bias is not constant";
      if (p->has_input(2) && p->inputs[2]->type.dtype != DataType::kFloat32) return "the bias is not float32";
      copy_conv_attrs(*p, attrs);
      if (p->has_input(2)) ins[8] = p->inputs[2];
    } else {
      if (wrank != 2) return "W is not 2-D";
      if (wq.dtype() != DataType::kInt8) return "W is not int8 (E4M3 products are kiln.F8MatMul)";
      const bool gemm = p->op_type == "Gemm";
      const bool trans_b = gemm && p->attr_int("transB", 0) != 0;
      if (gemm) {
        if (p->attr_int("transA", 0) != 0 || p->attr_float("alpha", 1.0f) != 1.0f) return "Gemm with transA or alpha";
        if (p->has_input(2) && p->attr_float("beta", 1.0f) != 1.0f) return "Gemm with beta != 1";
        const ir::Value* a_in = p->inputs[0];
        if (!a_in->type.shape.known || a_in->type.shape.rank() != 2) return "Gemm's A is not 2-D";
      }
      const int64_t n_axis = trans_b ? 0 : 1;
      if (ws.numel() != 1 && (axis != n_axis || ws.numel() != wsh[n_axis])) return "W's scales are not per output column";
      const int64_t N = wsh[n_axis];
      if (gemm && p->has_input(2)) {
        const ir::Value* c = p->inputs[2];
        if (!c->is_constant() || c->type.dtype != DataType::kFloat32 || c->constant->numel() != N) return "Gemm's C is not a float32 row";
        ins[8] = rw.constant(c->name + "_row", c->constant->reshaped({N}));
      }
      if (trans_b) {
        Tensor t = Tensor::empty(DataType::kInt8, {wsh[1], wsh[0]});
        const int8_t* src = wq.data<int8_t>();
        int8_t* dst = t.data<int8_t>();
        for (int64_t r = 0; r < wsh[0]; ++r)
          for (int64_t c = 0; c < wsh[1]; ++c) dst[c * wsh[0] + r] = src[r * wsh[1] + c];
        w = std::move(t);
      }
    }
    ins[3] = w.raw() == wq.raw() ? m["wq"] : rw.constant(m["wq"]->name + "_kn", w);
    ins[4] = ws.shape().size() <= 1 ? m["ws"] : rw.constant(m["ws"]->name + "_flat", ws.reshaped({ws.numel()}));
    if (q) {
      if (q->attr_int("output_dtype", 0) != 0 && !q->has_input(2)) return "QuantizeLinear's output type set by attribute";
      const DataType yt = q->has_input(2) ? q->inputs[2]->type.dtype : DataType::kUInt8;
      if (!is_8bit(yt)) return "y is not 8-bit";
      if (!same_family(xt, yt)) return "x and y are not both float8 or both integers";
      if (!saturating(q)) return "QuantizeLinear with saturate = 0";
      if (std::string why = per_tensor(q, yt, "y"); !why.empty()) return why;
      ins[6] = m["ys"];
      if (q->has_input(2)) {
        ins[7] = q->inputs[2];
      } else {
        Tensor z = Tensor::empty(DataType::kUInt8, {});
        z.data<uint8_t>()[0] = 0;
        ins[7] = rw.constant(q->name + "_zero_point", z);
      }
    }
    if (a) write_activation(*activation_node(a), attrs);
    while (!ins.empty() && ins.back() == nullptr) ins.pop_back();
    {
      ir::Node probe;
      probe.inputs = ins;
      probe.attrs = attrs;
      if (std::string why = refused_as(std::move(probe), fused_op, conv, ctx); !why.empty())
        return "the target's kernel refuses it (" + why + ")";
    }
    const std::string what = p->describe() + (a ? " + " + a->describe() : "") + (q ? " + " + q->describe() : "");
    ir::Node* n = rw.replace(m, fused_op, "kiln", 1, ins);
    n->attrs = std::move(attrs);
    rw.log("fused " + what + " into kiln." + fused_op + (q ? " (8-bit output)" : " (float output)"));
    return "";
  });
  const bool requantized = requantized_relu(g, ctx);
  const bool quantized = quantized_output(g, ctx);
  return requantized || quantized || changed;
}

namespace {

// A QuantizeLinear/DequantizeLinear with one positive float32 scale and a constant zero point 0 of a
// symmetric 8-bit type.
bool symmetric_8bit(const ir::Node* n) {
  if (!n || !n->domain.empty() || !n->has_input(1) || !n->has_input(2)) return false;
  const ir::Value* z = n->inputs[2];
  if (!symmetric_type(z->type.dtype) || !per_tensor(n, z->type.dtype, "").empty()) return false;
  return constant_values(z) == std::vector<double>{0.0};
}

// Both shapes known and equal, every dim a number or a named symbol (a dynamic batch is "batch" on
// both sides; an unnamed unknown dim proves nothing).
bool same_known_shape(const ir::Value* a, const ir::Value* b) {
  if (!a->type.shape.known || !b->type.shape.known || a->type.shape.dims != b->type.shape.dims) return false;
  for (const ir::Dim& d : a->type.shape.dims)
    if (!d.is_static() && d.symbol.empty()) return false;
  return true;
}

// The reader of v that is a symmetric QuantizeLinear of it to `type`, or null.
ir::Node* quantize_of(const ir::Value* v, DataType type) {
  for (const ir::Use& u : v->uses)
    if (u.input_index == 0 && u.node->op_type == "QuantizeLinear" && symmetric_8bit(u.node) && saturating(u.node) &&
        u.node->inputs[2]->type.dtype == type)
      return u.node;
  return nullptr;
}

}  // namespace

Expected<int> fuse_qconv_residual(ir::Graph& g) {
  int fused = 0;
  const std::vector<ir::Node*> nodes = g.nodes();
  for (ir::Node* add : nodes) {
    if (add->removed || !add->domain.empty() || add->op_type != "Add" || add->inputs.size() != 2 || !add->has_input(0) ||
        !add->has_input(1) || !add->has_output(0))
      continue;
    for (int side = 0; side < 2; ++side) {
      ir::Value* a = add->inputs[side];
      ir::Value* r = add->inputs[1 - side];
      ir::Node* conv = a->producer;
      // ONNX Runtime's QDQ form: the convolution quantizes its own output, which a DequantizeLinear
      // reads for the Add; that rounding goes (one rounding instead of two, as requantized_relu).
      ir::Node* conv_dq = nullptr;
      if (conv && conv->op_type == "DequantizeLinear" && symmetric_8bit(conv) && conv->inputs[0]->producer &&
          sole_reader(conv->inputs[0]) == conv) {
        ir::Node* p = conv->inputs[0]->producer;
        if (p->domain == "kiln" && p->op_type == "QConv" && p->has_input(6) && symmetric_type(p->outputs[0]->type.dtype)) {
          conv_dq = conv;
          conv = p;
        }
      }
      if (!conv || conv->domain != "kiln" || conv->op_type != "QConv" || (conv->has_input(6) && !conv_dq) ||
          conv->has_input(9) || sole_reader(a) != add || !conv->attr_string("activation", "").empty() || a == r ||
          !same_known_shape(a, r))
        continue;
      // The residual in the convolution's 8-bit type (int8, or E4M3 in an FP8 engine): r =
      // DequantizeLinear(z), or r's own QuantizeLinear z.
      const DataType qt = conv->has_input(3) ? conv->inputs[3]->type.dtype : DataType::kUndefined;  // W's (constant) type
      if (!symmetric_type(qt)) continue;
      ir::Value* z = nullptr;
      ir::Value* zs = nullptr;
      if (r->producer && r->producer->op_type == "DequantizeLinear" && symmetric_8bit(r->producer)) {
        z = r->producer->inputs[0];
        zs = r->producer->inputs[1];
      } else if (ir::Node* qr = quantize_of(r, qt)) {
        z = qr->outputs[0];
        zs = qr->inputs[1];
      }
      if (!z || z->type.dtype != qt) continue;
      // After the Add: an optional Relu, then the int8 QuantizeLinear that the fused output becomes.
      ir::Value* v = add->outputs[0];
      ir::Node* relu = nullptr;
      if (ir::Node* rd = sole_reader(v); rd && rd->domain.empty() && rd->op_type == "Relu" && rd->has_output(0)) {
        relu = rd;
        v = rd->outputs[0];
      }
      ir::Node* q = quantize_of(v, qt);
      // ONNX Runtime's QDQ form of Add → Relu: Add → Q → DQ → Relu → Q; the inner pair goes.
      std::vector<ir::Node*> requantized;
      if (q && !relu && v->uses.size() == 1) {
        ir::Node* dq2 = sole_reader(q->outputs[0]);
        ir::Node* r2 = dq2 && dq2->op_type == "DequantizeLinear" && symmetric_8bit(dq2) ? sole_reader(dq2->outputs[0]) : nullptr;
        ir::Node* q3 = r2 && r2->domain.empty() && r2->op_type == "Relu" && r2->has_output(0) ? quantize_of(r2->outputs[0], qt) : nullptr;
        if (q3 && sole_reader(r2->outputs[0]) == q3) {
          requantized = {q, dq2};
          relu = r2;
          v = r2->outputs[0];
          q = q3;
        }
      }
      // Without an int8 QuantizeLinear after it (ResNet's last block, read by the pooling in float) the
      // float sum itself comes out of the convolution; either way the residual is read in int8.
      if (q && (v->is_output || q->outputs[0]->is_output)) continue;
      std::vector<ir::Value*> ins = conv->inputs;
      ins.resize(11, nullptr);
      // The output's scale and zero point: the QuantizeLinear's, none for a float output (ONNX
      // Runtime's form had the convolution's own here).
      ins[6] = q ? q->inputs[1] : nullptr;
      ins[7] = q ? q->inputs[2] : nullptr;
      ins[9] = z;
      ins[10] = zs;
      auto attrs = conv->attrs;
      if (relu) write_activation(Activation{ActKind::kRelu}, attrs);
      const std::string name = conv->name + "_residual";
      ir::Value* out = v;
      if (q) {
        out = g.new_value(q->outputs[0]->name + "_residual", q->outputs[0]->type);
        g.replace_all_uses(q->outputs[0], out);
        g.remove_node(q);
      }
      if (relu) g.remove_node(relu);
      for (ir::Node* n2 : requantized) g.remove_node(n2);
      g.remove_node(add);
      if (conv_dq) g.remove_node(conv_dq);
      g.remove_node(conv);
      ir::Node* n = g.add_node("QConv", "kiln", ins, {out}, name);
      n->opset = 1;
      n->attrs = std::move(attrs);
      // Whatever else read the float sum reads it dequantized from the int8 output.
      if (q && !v->uses.empty()) {
        ir::Value* vf = g.new_value(v->name + "_dq", v->type);
        ir::Node* dq = g.add_node("DequantizeLinear", "", {out, ins[6], ins[7]}, {vf}, v->name + "_DequantizeLinear");
        dq->opset = 21;
        g.replace_all_uses(v, vf);
      }
      // The residual's DequantizeLinear, when the Add was its only reader.
      if (ir::Node* dq = r->producer; dq && dq->op_type == "DequantizeLinear" && r->uses.empty() && !r->is_output) g.remove_node(dq);
      ++fused;
      break;
    }
  }
  if (fused) {
    g.remove_dead_values();
    KILN_RETURN_IF_ERROR(g.sort());
  }
  return fused;
}

}  // namespace kiln::passes
