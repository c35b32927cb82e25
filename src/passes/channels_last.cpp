// passes/channels_last.cpp — GPU engines run 2-D convolutions channels-last (NHWC): tensor-core
// convolution kernels read and write NHWC, and a channels-first tensor costs cuDNN a transpose before
// and after every convolution. This pass moves whole chains to NHWC, with transposes only where a
// chain meets an op that needs channels-first. CPU engines do the same for their 8-bit convolutions
// (kiln.QConv: oneDNN's int8 kernels work in NHWC; per-layer reorders cost ResNet-50 a third of its
// INT8 time), with per-tensor QuantizeLinear/DequantizeLinear as elementwise ops of the chain.
//
// Decisions (issue: GPU speed):
//  * A convolution converts when `accepts` says the target runs it channels-last (the builder: a
//    CUDA engine in float16/bfloat16; float32 convolutions keep FP32 math, where NHWC does not pay)
//    and it is 2-D with a constant weight and symmetric explicit pads (auto_pad NOTSET or VALID).
//    It becomes kiln.FusedConv with channels_last = 1 (a plain Conv gets no activation); its weight
//    is transposed once, here, to [M, kh, kw, C/group]; a fused residual (input 3) goes NHWC too.
//  * Elementwise ops follow the layout of their inputs: an op converts when every 4-D input already
//    has an NHWC form and every other input is one element (a scalar or [1,1,1,1]) — broadcasting
//    of inputs permuted the same way is unchanged — or a constant of rank <= 4 (transposed here,
//    with leading ones: ConvNeXt's layer scale [C, 1, 1] becomes [1, 1, 1, C]). So
//    residual Adds and activations between convolutions stay NHWC; anything else (pooling,
//    reshapes, reductions) reads a channels-first copy made once per value.
//  * Pooling whose input is already NHWC (2-D MaxPool/AveragePool without Indices, the global pools)
//    becomes kiln.ChannelsLastPool (attribute `op`) where `accepts` takes it, so a max pool between
//    convolutions or the pooling of a squeeze-excitation block costs no transposes.
//  * Values keep their names and channels-first shapes where anything outside a chain (an op, a
//    graph output) reads them: the NHWC form is a new value, and a Transpose back to the original
//    value is added only when the original still has a reader.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "ir/epilogue.h"
#include "ir/float_types.h"
#include "passes/passes.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

const std::set<std::string>& layout_free_ops() {
  static const std::set<std::string> ops = {
      "Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish",
      "Tanh", "Clip", "Elu", "Selu", "Softplus", "Erf", "Abs", "Neg", "Exp", "Sqrt", "Identity", "Mish",
      "Cast", "QuantizeLinear", "DequantizeLinear"};  // per tensor only: a per-axis scale is not one element
  return ops;
}

ir::SymShape to_nhwc_shape(const ir::SymShape& s) {
  const auto& d = s.dims;
  return ir::SymShape({d[0], d[2], d[3], d[1]});
}

bool is_4d(const ir::Value* v) { return v && v->type.is_tensor() && v->type.shape.known && v->type.shape.rank() == 4; }

bool one_element(const ir::Value* v) {
  if (!v || !v->type.shape.known || !v->type.shape.is_static() || v->type.shape.rank() > 4) return false;
  return shape_numel(v->type.shape.to_static()) == 1;
}

// An NCHW tensor's bytes in NHWC order (any element type). A constant of lower rank broadcasts
// against NCHW from the right ([C, 1, 1] is [1, C, 1, 1]): it is taken as 4-D with leading ones.
Tensor nhwc_copy(const Tensor& t) {
  Shape s = t.shape();
  while (s.size() < 4) s.insert(s.begin(), 1);
  const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  Tensor out = Tensor::empty(t.dtype(), {n, h, w, c});
  const size_t e = dtype_size(t.dtype());
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          std::memcpy(dst + (((i * h + y) * w + x) * c + ci) * e, src + (((i * c + ci) * h + y) * w + x) * e, e);
  return out;
}

bool convertible_pool(const ir::Node& n) {
  if (!n.domain.empty() || n.outputs.size() != 1 || !n.has_output(0) || n.inputs.size() != 1) return false;
  if (!is_4d(n.inputs[0]) || !is_4d(n.outputs[0])) return false;
  if (n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool") return true;
  return (n.op_type == "MaxPool" || n.op_type == "AveragePool") && n.attr_ints("kernel_shape").size() == 2;
}

bool is_qconv(const ir::Node& n) { return n.domain == "kiln" && n.op_type == "QConv"; }

// A constant an elementwise op of a chain can take in NHWC form: 4-D, or of lower rank (broadcast
// from the right against NCHW, as a layer scale [C, 1, 1] is), on the CPU.
bool layout_constant(const ir::Value* v) {
  return v && v->is_constant() && v->constant->device().is_cpu() && v->type.shape.known && v->type.shape.rank() <= 4;
}

// A Transpose by `perm` of a 4-D tensor.
bool is_transpose(const ir::Node& n, const std::vector<int64_t>& perm) {
  return n.domain.empty() && n.op_type == "Transpose" && n.inputs.size() == 1 && n.outputs.size() == 1 &&
         n.has_output(0) && is_4d(n.inputs[0]) && n.attr_ints("perm") == perm;
}

// The input holding a convolution's weights: 1, or 3 for kiln.QConv (after X's scale and zero point).
int weight_input(const ir::Node& n) { return is_qconv(n) ? 3 : 1; }

bool convertible_conv(const ir::Node& n) {
  const bool conv = (n.domain.empty() && n.op_type == "Conv") || (n.domain == "kiln" && n.op_type == "FusedConv") || is_qconv(n);
  if (!conv || n.attr_int("channels_last", 0) != 0 || n.outputs.size() != 1 || !n.has_output(0)) return false;
  if (!is_qconv(n) && n.has_input(3) && !is_4d(n.inputs[3])) return false;
  if (is_qconv(n) && n.has_input(9) && !is_4d(n.inputs[9])) return false;
  const int wi = weight_input(n);
  if (!is_4d(n.inputs[0]) || !n.has_input(wi) || !n.inputs[wi]->is_constant() || n.inputs[wi]->constant->rank() != 4)
    return false;
  if (!n.inputs[wi]->constant->device().is_cpu() || !is_4d(n.outputs[0])) return false;
  return symmetric_pads(n);
}

// For an inference BatchNormalization whose X has an NHWC form (in `nhwc`) and whose parameters are
// constants of C values in X's dtype: y = x * a + b with a = scale / sqrt(var + epsilon) and
// b = B - mean * a (computed in double). Float32: adds Mul(X's NHWC form, a), turns `n` into Add(that,
// b) ([1, 1, 1, C] constants) and returns the Mul's output; float16/bfloat16: turns `n` into
// kiln.ChannelAffine(X's NHWC form, a, b) (channels_last = 1) and returns that form. The returned
// value becomes n's input 0; n's output still needs retargeting. Null, and nothing changed, for any
// other node.
ir::Value* batch_norm_nhwc(ir::Graph& g, ir::Node& n, const std::map<const ir::Value*, ir::Value*>& nhwc, int opset,
                           const std::function<bool(const ir::Node&)>& accepts) {
  if (!n.domain.empty() || n.op_type != "BatchNormalization" || n.inputs.size() != 5 || n.outputs.size() != 1 ||
      !n.has_output(0) || n.attr_int("training_mode", 0) != 0)
    return nullptr;
  ir::Value* x = n.inputs[0];
  const auto it = nhwc.find(x);
  const DataType dt = x->type.dtype;
  const bool half = dt == DataType::kFloat16 || dt == DataType::kBFloat16;
  if (it == nhwc.end() || x->is_constant() || !is_4d(x) || !is_4d(n.outputs[0]) || (dt != DataType::kFloat32 && !half))
    return nullptr;
  const ir::Dim& c_dim = x->type.shape.dims[1];
  if (!c_dim.is_static()) return nullptr;
  const int64_t C = c_dim.value;
  for (int i = 1; i < 5; ++i) {
    const ir::Value* p = n.inputs[i];
    if (!p || !p->is_constant() || !p->constant->device().is_cpu() || p->constant->dtype() != dt ||
        p->constant->numel() != C)
      return nullptr;
  }
  if (!accepts(n)) return nullptr;
  auto param = [&](int i, int64_t c) -> double {
    const Tensor& t = *n.inputs[i]->constant;
    if (dt == DataType::kFloat16) return f16_to_f32(t.data<uint16_t>()[c]);
    if (dt == DataType::kBFloat16) return bf16_to_f32(t.data<uint16_t>()[c]);
    return t.data<float>()[c];
  };
  const double eps = n.attr_float("epsilon", 1e-5f);
  std::vector<double> av(static_cast<size_t>(C)), bv(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double k = param(1, c) / std::sqrt(param(4, c) + eps);
    av[static_cast<size_t>(c)] = k;
    bv[static_cast<size_t>(c)] = param(2, c) - param(3, c) * k;
  }
  const std::string& name = n.outputs[0]->name;
  if (half) {
    // Half: one kiln.ChannelAffine — GPU engines, where a Mul and an Add would be two passes over the
    // tensor — with its scale and shift in float32 (no second rounding to half: shift = B - mean *
    // scale may be a small difference of large terms), and the activation after it joins it (below).
    auto values = [&](const std::vector<double>& v) {
      Tensor t = Tensor::empty(DataType::kFloat32, {C});
      for (int64_t c = 0; c < C; ++c) t.data<float>()[c] = static_cast<float>(v[static_cast<size_t>(c)]);
      return t;
    };
    for (int i = 4; i >= 1; --i) g.set_input(&n, i, nullptr);
    n.inputs.resize(3);
    g.set_input(&n, 1, new_constant(g, name + "_affine_scale", values(av)));
    g.set_input(&n, 2, new_constant(g, name + "_affine_shift", values(bv)));
    n.op_type = "ChannelAffine";
    n.domain = "kiln";
    n.opset = 1;
    n.attrs.clear();
    n.attrs["channels_last"].kind = ir::Attribute::Kind::kInt;
    n.attrs["channels_last"].i = 1;
    return it->second;
  }
  Tensor a = Tensor::empty(DataType::kFloat32, {1, 1, 1, C}), b = Tensor::empty(DataType::kFloat32, {1, 1, 1, C});
  for (int64_t c = 0; c < C; ++c) {
    a.data<float>()[c] = static_cast<float>(av[static_cast<size_t>(c)]);
    b.data<float>()[c] = static_cast<float>(bv[static_cast<size_t>(c)]);
  }
  ir::Value* a_value = new_constant(g, name + "_bn_scale_nhwc", std::move(a));
  ir::Value* b_value = new_constant(g, name + "_bn_shift_nhwc", std::move(b));
  ir::Value* scaled = g.new_value(name + "_bn_scaled_nhwc", ir::Type::tensor(DataType::kFloat32, it->second->type.shape));
  ir::Node* mul = g.add_node("Mul", "", {it->second, a_value}, {scaled}, n.name + "_scale");
  mul->opset = opset;
  for (int i = 4; i >= 1; --i) g.set_input(&n, i, nullptr);
  n.inputs.resize(2);
  g.set_input(&n, 1, b_value);
  n.op_type = "Add";
  n.attrs.clear();
  n.opset = opset;
  return scaled;
}


// The static dims of a value's shape, or empty when any is unknown.
std::vector<int64_t> static_dims(const ir::Value* v) {
  if (!v || !v->type.is_tensor() || !v->type.shape.known || !v->type.shape.is_static()) return {};
  return v->type.shape.to_static();
}

// A channel shuffle (ShuffleNet's): Reshape(x, [N, g, C/g, H, W]) -> Transpose([0, 2, 1, 3, 4]) ->
// Reshape([N, C, H, W]), each the only reader of the one before, static shapes: the Transpose, the
// last Reshape and the two shapes; null nodes for anything else.
struct ChannelShuffle {
  ir::Node* t = nullptr;
  ir::Node* r2 = nullptr;
  std::vector<int64_t> x, mid;  // [N, C, H, W] and [N, g, C/g, H, W]
};
ChannelShuffle channel_shuffle(const ir::Node& r1) {
  if (!r1.domain.empty() || r1.op_type != "Reshape" || r1.inputs.size() != 2 || r1.outputs.size() != 1 || !r1.has_output(0))
    return {};
  const std::vector<int64_t> x = static_dims(r1.inputs[0]), mid = static_dims(r1.outputs[0]);
  if (x.size() != 4 || mid.size() != 5) return {};
  for (int64_t d : mid)  // positive and small enough that g * (C / g) cannot overflow
    if (d <= 0 || d > (int64_t{1} << 31)) return {};
  if (mid[0] != x[0] || mid[1] * mid[2] != x[1] || mid[3] != x[2] || mid[4] != x[3]) return {};
  ir::Node* t = sole_reader(r1.outputs[0]);
  if (!t || !t->domain.empty() || t->op_type != "Transpose" || t->outputs.size() != 1 || !t->has_output(0) ||
      t->attr_ints("perm") != std::vector<int64_t>{0, 2, 1, 3, 4})
    return {};
  ir::Node* r2 = sole_reader(t->outputs[0]);
  if (!r2 || !r2->domain.empty() || r2->op_type != "Reshape" || r2->inputs.size() != 2 || r2->inputs[0] != t->outputs[0] ||
      r2->outputs.size() != 1 || !r2->has_output(0) || static_dims(r2->outputs[0]) != x)
    return {};
  return {t, r2, x, mid};
}

// A channels-first axis (negative counted from the end of 4) as the NHWC form's axis; -1 if none.
int64_t nhwc_axis(int64_t axis) {
  if (axis < 0) axis += 4;
  return axis < 0 || axis > 3 ? -1 : std::array<int64_t, 4>{0, 3, 1, 2}[axis];
}

// Slice (opset 10 on: starts, ends, axes, steps as inputs) whose bounds are constants: the axes it
// slices, channels-first, or empty when it is not such a Slice.
std::vector<int64_t> constant_slice_axes(const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "Slice" || n.inputs.size() < 3 || n.outputs.size() != 1 || !n.has_output(0))
    return {};
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (n.inputs[i] && (!n.inputs[i]->is_constant() || !n.inputs[i]->constant->device().is_cpu() || n.inputs[i]->constant->rank() != 1))
      return {};
  const Tensor& starts = *n.inputs[1]->constant;
  std::vector<int64_t> axes;
  if (n.has_input(3)) {
    const Tensor& a = *n.inputs[3]->constant;
    if (a.numel() != starts.numel()) return {};
    for (int64_t i = 0; i < a.numel(); ++i)
      axes.push_back(a.dtype() == DataType::kInt32 ? a.data<int32_t>()[i] : a.data<int64_t>()[i]);
  } else {
    for (int64_t i = 0; i < starts.numel(); ++i) axes.push_back(i);
  }
  if (axes.empty() || (starts.dtype() != DataType::kInt64 && starts.dtype() != DataType::kInt32)) return {};
  for (int64_t a : axes)
    if (nhwc_axis(a) < 0) return {};
  return axes;
}
}  // namespace

bool symmetric_pads(const ir::Node& n) {
  const std::string ap = n.attr_string("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "VALID") return false;
  const auto p = n.attr_ints("pads");
  return p.empty() || (p.size() == 4 && p[0] == p[2] && p[1] == p[3]);
}

Expected<int> convert_to_channels_last(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts) {
  const int opset = g.opsets.count("") ? g.opsets.at("") : 19;
  std::map<const ir::Value*, ir::Value*> nhwc;  // a channels-first value → its NHWC form
  std::vector<ir::Value*> moved;                // values whose producer now writes the NHWC form
  int converted = 0;
  auto transpose = [&](ir::Value* in, ir::Value* out, std::vector<int64_t> perm) {
    ir::Node* t = g.add_node("Transpose", "", {in}, {out}, out->name + "_transpose");
    t->opset = opset;
    ir::Attribute& a = t->attrs["perm"];
    a.kind = ir::Attribute::Kind::kInts;
    a.ints = std::move(perm);
  };
  // The NHWC form of a 4-D value: its converted producer's output, a transposed constant, or a
  // Transpose (made once per value).
  auto to_nhwc = [&](ir::Value* v) -> ir::Value* {
    if (auto it = nhwc.find(v); it != nhwc.end()) return it->second;
    if (v->is_constant() && v->constant->device().is_cpu()) {
      ir::Value* t = new_constant(g, v->name + "_nhwc", nhwc_copy(*v->constant));
      nhwc[v] = t;
      return t;
    }
    ir::Value* t = g.new_value(v->name + "_nhwc", ir::Type::tensor(v->type.dtype, to_nhwc_shape(v->type.shape)));
    transpose(v, t, {0, 2, 3, 1});
    nhwc[v] = t;
    return t;
  };
  // n now writes the NHWC form of its output 0; the original value is made from it at the end if
  // anything still reads it.
  auto retarget = [&](ir::Node* n, int output = 0) {
    ir::Value* v = n->outputs[output];
    ir::Value* t = g.new_value(v->name + "_nhwc", ir::Type::tensor(v->type.dtype, to_nhwc_shape(v->type.shape)));
    g.set_output(n, output, t);
    nhwc[v] = t;
    moved.push_back(v);
  };
  const std::vector<ir::Node*> nodes = g.nodes();  // a snapshot: transposes added below are not revisited
  std::vector<ir::Node*> affines;  // the kiln.ChannelAffine nodes made here
  for (ir::Node* n : nodes) {
    if (convertible_conv(*n) && accepts(*n)) {
      g.set_input(n, 0, to_nhwc(n->inputs[0]));
      const int wi = weight_input(*n);
      g.set_input(n, wi, to_nhwc(n->inputs[wi]));  // [M, C/g, kh, kw] → [M, kh, kw, C/g]
      if (!is_qconv(*n) && n->has_input(3)) g.set_input(n, 3, to_nhwc(n->inputs[3]));  // the residual
      if (is_qconv(*n) && n->has_input(9)) g.set_input(n, 9, to_nhwc(n->inputs[9]));    // its int8 residual
      if (n->domain.empty()) {
        n->op_type = "FusedConv";
        n->domain = "kiln";
        n->opset = 1;
      }
      n->attrs["channels_last"].kind = ir::Attribute::Kind::kInt;
      n->attrs["channels_last"].i = 1;
      retarget(n);
      ++converted;
      continue;
    }
    if (convertible_pool(*n) && nhwc.count(n->inputs[0]) && !n->inputs[0]->is_constant() && accepts(*n)) {
      g.set_input(n, 0, to_nhwc(n->inputs[0]));
      ir::Attribute& op = n->attrs["op"];
      op.kind = ir::Attribute::Kind::kString;
      op.s = n->op_type;
      n->attrs.erase("storage_order");  // only for MaxPool's Indices, which a converted pool has not
      n->op_type = "ChannelsLastPool";
      n->domain = "kiln";
      n->opset = 1;
      retarget(n);
      ++converted;
      continue;
    }
    // A model's own permutes between layouts (ConvNeXt's around its LayerNorm and MLP): the output
    // of Transpose(y, [0, 3, 1, 2]) is channels-first, and y is its NHWC form; Transpose(x,
    // [0, 2, 3, 1]) of a value with an NHWC form is that form. So a residual stream whose blocks
    // permute in and out keeps NHWC through them, with no transposes left.
    if (is_transpose(*n, {0, 3, 1, 2}) && !n->inputs[0]->is_constant() && !nhwc.count(n->outputs[0])) {
      nhwc[n->outputs[0]] = n->inputs[0];
      continue;
    }
    if (is_transpose(*n, {0, 2, 3, 1}) && nhwc.count(n->inputs[0]) && !n->inputs[0]->is_constant() &&
        !n->outputs[0]->is_output) {
      g.replace_all_uses(n->outputs[0], nhwc[n->inputs[0]]);
      continue;
    }
    // A 4-D Concat (DeepLabV3's ASPP branches) where most inputs have an NHWC form concatenates
    // those forms on the matching axis; the others get one (a Transpose each).
    if (n->domain.empty() && n->op_type == "Concat" && n->outputs.size() == 1 && is_4d(n->outputs[0])) {
      int with = 0, without = 0;
      for (ir::Value* v : n->inputs) (v && nhwc.count(v) && !v->is_constant() ? with : without) += 1;
      int64_t axis = n->attr_int("axis", 1);
      if (axis < 0) axis += 4;
      const bool all_4d = std::all_of(n->inputs.begin(), n->inputs.end(), is_4d);  // else: the op's own check
      if (with == 0 || without > with || axis < 0 || axis > 3 || !all_4d) continue;
      for (size_t i = 0; i < n->inputs.size(); ++i) g.set_input(n, static_cast<int>(i), to_nhwc(n->inputs[i]));
      n->attrs["axis"].kind = ir::Attribute::Kind::kInt;
      n->attrs["axis"].i = std::array<int64_t, 4>{0, 3, 1, 2}[axis];
      retarget(n);
      ++converted;
      continue;
    }
    // ShuffleNet's channel shuffle of a value with an NHWC form: the same three ops on that form,
    // Reshape to [N, H, W, g, C/g], Transpose([0, 1, 2, 4, 3]), Reshape to [N, H, W, C] (the
    // reshapes are views: one transpose of g x C/g per pixel), instead of a Transpose to
    // channels-first before it and one back after the Slices that split the result.
    if (nhwc.count(n->inputs.empty() ? nullptr : n->inputs[0]) && !n->inputs[0]->is_constant()) {
      if (const ChannelShuffle cs = channel_shuffle(*n); cs.t) {
        ir::Node* t = cs.t;
        ir::Node* r2 = cs.r2;
        const std::vector<int64_t>& x = cs.x;
        const std::vector<int64_t>& mid = cs.mid;
        const int64_t N = x[0], H = x[2], W = x[3], groups = mid[1], per = mid[2];
        g.set_input(n, 0, to_nhwc(n->inputs[0]));
        g.set_input(n, 1, new_constant(g, n->outputs[0]->name + "_shape_nhwc", int64_tensor({N, H, W, groups, per})));
        n->outputs[0]->type = ir::Type::tensor(n->outputs[0]->type.dtype, ir::SymShape::of({N, H, W, groups, per}));
        t->attrs["perm"].ints = {0, 1, 2, 4, 3};
        t->outputs[0]->type = ir::Type::tensor(t->outputs[0]->type.dtype, ir::SymShape::of({N, H, W, per, groups}));
        g.set_input(r2, 1, new_constant(g, r2->outputs[0]->name + "_shape_nhwc", int64_tensor({N, H, W, x[1]})));
        retarget(r2);
        ++converted;
        continue;
      }
    }
    // Slice with constant bounds, and Split, of a value with an NHWC form (ShuffleNet's channel
    // split after each shuffle): the same op on the matching axes of that form.
    if (n->domain.empty() && (n->op_type == "Slice" || n->op_type == "Split") && !n->inputs.empty() && n->inputs[0] &&
        nhwc.count(n->inputs[0]) && !n->inputs[0]->is_constant() && is_4d(n->inputs[0]) &&
        std::all_of(n->outputs.begin(), n->outputs.end(), [](const ir::Value* v) { return is_4d(v); })) {
      if (n->op_type == "Slice") {
        const std::vector<int64_t> axes = constant_slice_axes(*n);
        if (!axes.empty()) {
          const DataType it = n->inputs[1]->constant->dtype();
          Tensor a = Tensor::empty(it, {static_cast<int64_t>(axes.size())});
          for (size_t i = 0; i < axes.size(); ++i) {
            if (it == DataType::kInt32) a.data<int32_t>()[i] = static_cast<int32_t>(nhwc_axis(axes[i]));
            else a.data<int64_t>()[i] = nhwc_axis(axes[i]);
          }
          ir::Value* av = new_constant(g, n->outputs[0]->name + "_axes_nhwc", std::move(a));
          g.set_input(n, 0, to_nhwc(n->inputs[0]));
          if (n->inputs.size() < 4) n->inputs.resize(4, nullptr);
          g.set_input(n, 3, av);
          retarget(n);
          ++converted;
          continue;
        }
      } else if (const int64_t axis = nhwc_axis(n->attr_int("axis", 0)); axis >= 0 && !n->outputs.empty() &&
                 std::all_of(n->outputs.begin(), n->outputs.end(), [](const ir::Value* v) { return v != nullptr; })) {
        g.set_input(n, 0, to_nhwc(n->inputs[0]));
        n->attrs["axis"].kind = ir::Attribute::Kind::kInt;
        n->attrs["axis"].i = axis;
        for (size_t i = 0; i < n->outputs.size(); ++i) retarget(n, static_cast<int>(i));
        ++converted;
        continue;
      }
    }
    // Inference BatchNormalization of a value with an NHWC form (DenseNet's pre-activation BN after
    // each Concat): y = x * a + b per channel, a = scale / sqrt(var + epsilon), b = B - mean * a, as a
    // Mul and an Add by [1, 1, 1, C] constants on the NHWC form (the Relu after it follows), instead
    // of a Transpose to channels-first and one back (float32); a half one, one kiln.ChannelAffine.
    if (ir::Value* t = batch_norm_nhwc(g, *n, nhwc, opset, accepts)) {
      g.set_input(n, 0, t);
      if (n->op_type == "ChannelAffine") affines.push_back(n);
      retarget(n);
      ++converted;
      continue;
    }
    if (!n->domain.empty() || !layout_free_ops().count(n->op_type) || n->outputs.size() != 1 || !is_4d(n->outputs[0]))
      continue;
    bool all = true, any_moved = false;
    for (ir::Value* v : n->inputs) {
      if (!v) continue;
      const bool has_form = nhwc.count(v) && !v->is_constant();
      any_moved |= has_form;
      if (!has_form && !one_element(v) && !layout_constant(v)) all = false;
    }
    if (!all || !any_moved) continue;
    for (size_t i = 0; i < n->inputs.size(); ++i)
      if (n->inputs[i] && !one_element(n->inputs[i]) && (is_4d(n->inputs[i]) || layout_constant(n->inputs[i])))
        g.set_input(n, static_cast<int>(i), to_nhwc(n->inputs[i]));
    retarget(n);
    ++converted;
  }
  // Channels-first values still read outside the chains (or graph outputs) come back by a Transpose.
  for (ir::Value* v : moved)
    if (!v->uses.empty() || v->is_output) transpose(nhwc[v], v, {0, 3, 1, 2});
  // A ChannelAffine's only reader, an activation (DenseNet's ReLU after each pre-activation BN), joins
  // it: one pass over the tensor instead of two.
  for (ir::Node* ca : affines) {
    ir::Value* y = ca->outputs[0];
    if (y->is_output || y->uses.size() != 1) continue;
    ir::Node* r = y->uses[0].node;
    if (!r->domain.empty() || r->inputs.empty() || r->inputs[0] != y || r->outputs.size() != 1 || !r->has_output(0))
      continue;
    std::string why;
    const Activation act = activation_of(*r, [](const ir::Value* v) { return scalar_value(v); }, &why);
    if (act.kind == ActKind::kNone) continue;
    ir::Value* out = r->outputs[0];
    g.remove_node(r);
    g.set_output(ca, 0, out);
    write_activation(act, ca->attrs);
  }
  KILN_RETURN_IF_ERROR(g.sort());
  g.remove_dead_values();
  KILN_RETURN_IF_ERROR(g.verify());
  return converted;
}

}  // namespace kiln::passes
