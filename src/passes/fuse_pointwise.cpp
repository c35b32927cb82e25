// passes/fuse_pointwise.cpp — regions of elementwise float ops become one kiln.Pointwise each (CUDA
// engines, after the precision and layout stages: the region's types are the engine's). A region is
// grown from its last node (the root) toward its inputs: a producer joins when it is an elementwise op
// the program can express and every reader of its output is already in the region, so only the root's
// output leaves it and no path leaves and re-enters. Inputs may broadcast (numpy rules); scalar
// constants become literals of the program. Regions of one op are left alone (nothing to save).
//
// Each op becomes the same float32 math the CUDA elementwise kernels do, and where the graph held an
// intermediate in float16 or bfloat16 the program rounds it there (ops/pointwise.h), so the region
// computes what its ops did, in one read of each input and one write.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "ir/epilogue.h"
#include "ops/params_misc.h"
#include "ops/pointwise.h"
#include "passes/passes.h"
#include "passes/pattern.h"
#include "util/log.h"

namespace kiln::passes {
namespace {

using ops::PwOp;

const std::map<std::string, PwOp>& binary_ops() {
  static const std::map<std::string, PwOp> m = {{"Add", PwOp::kAdd}, {"Sub", PwOp::kSub}, {"Mul", PwOp::kMul},
                                                {"Div", PwOp::kDiv}, {"Pow", PwOp::kPow}, {"Max", PwOp::kMax},
                                                {"Min", PwOp::kMin}};
  return m;
}

const std::map<std::string, PwOp>& unary_ops() {
  static const std::map<std::string, PwOp> m = {
      {"Relu", PwOp::kRelu},       {"Sigmoid", PwOp::kSigmoid}, {"Tanh", PwOp::kTanh},   {"Exp", PwOp::kExp},
      {"Log", PwOp::kLog},         {"Sqrt", PwOp::kSqrt},       {"Abs", PwOp::kAbs},     {"Neg", PwOp::kNeg},
      {"Erf", PwOp::kErf},         {"Reciprocal", PwOp::kReciprocal}, {"Floor", PwOp::kFloor},
      {"Ceil", PwOp::kCeil},       {"Softplus", PwOp::kSoftplus}, {"HardSwish", PwOp::kHardSwish},
      {"Sin", PwOp::kSin},         {"Cos", PwOp::kCos}};
  return m;
}

bool float_value(const ir::Value* v) { return v && v->type.is_tensor() && ops::pw_float(v->type.dtype); }

// Whether the program can express node n (inputs and output float tensors of known rank).
bool expressible(const ir::Node& n) {
  if (!n.domain.empty() || n.outputs.size() != 1 || !n.outputs[0] || n.has_subgraphs()) return false;
  const ir::Value* y = n.outputs[0];
  if (!float_value(y) || !y->type.shape.known) return false;
  for (const ir::Value* v : n.inputs)
    if (v && (!float_value(v) || !v->type.shape.known)) return false;
  const std::string& op = n.op_type;
  // Pow of a half base and a float32 exponent rounds the exponent to the base's type first (kiln's
  // kernels do): not expressed.
  if (op == "Pow") return n.inputs.size() == 2 && n.has_input(0) && n.has_input(1) && n.inputs[0]->type.dtype == n.inputs[1]->type.dtype;
  if (binary_ops().count(op)) return n.inputs.size() == 2 && n.has_input(0) && n.has_input(1);
  if (unary_ops().count(op) || op == "Identity") return n.inputs.size() == 1 && n.has_input(0);
  // (HardSigmoid is not: kiln's kernel computes alpha·x + beta as one fused multiply-add.)
  if (op == "LeakyRelu" || op == "Elu" || op == "Cast") return n.has_input(0) && n.inputs.size() == 1;
  if (op == "Gelu") {
    const std::string a = n.attr_string("approximate", "none");
    return n.has_input(0) && (a == "none" || a == "tanh");
  }
  if (op == "Clip") {
    if (!n.has_input(0)) return false;
    for (size_t i = 1; i < n.inputs.size(); ++i)  // min and max: scalars (they broadcast)
      if (n.has_input(i) && (!n.inputs[i]->type.shape.known || n.inputs[i]->type.shape.rank() != 0)) return false;
    return true;
  }
  return false;
}

// A float constant of one element: a literal of the program.
std::optional<float> literal(const ir::Value* v) {
  if (!v->is_constant() || v->constant->numel() != 1) return std::nullopt;
  const std::optional<double> d = scalar_value(v);
  if (!d) return std::nullopt;
  return static_cast<float>(*d);
}

// Builds the program of a region: visit() from the root over the members, then finish() (false when
// the root computes nothing new).
struct ProgramWriter {
  ops::PointwiseProgram p;
  std::vector<ir::Value*> leaves;         // the node's inputs
  std::map<const ir::Value*, int> reg;    // value → register
  std::vector<ops::PwInstr> code;         // registers counted after the leaves (fixed up at the end)
  std::set<const ir::Node*> members;

  // Register of value v: a member's result, a literal, or a leaf input (numbered later: -1 - leaf).
  int operand(ir::Value* v) {
    if (auto it = reg.find(v); it != reg.end()) return it->second;
    if (std::optional<float> c = literal(v)) return constant(*c);
    leaves.push_back(v);
    return reg[v] = -static_cast<int>(leaves.size());
  }
  int constant(float c) {
    p.constants.push_back(c);
    return emit(PwOp::kConst, static_cast<int>(p.constants.size()) - 1, 0);
  }
  // Instruction registers are numbered from 0 here; leaves are negative (-1 - index).
  int emit(PwOp op, int a, int b) {
    code.push_back({op, a, b});
    return static_cast<int>(code.size()) - 1;
  }

  // Post-order from the root, so the root's instruction is the last.
  void visit(ir::Node* n, const ir::Node* root) {
    if (reg.count(n->outputs[0])) return;
    for (ir::Value* v : n->inputs)
      if (v && v->producer && members.count(v->producer)) visit(v->producer, root);
    const std::string& op = n->op_type;
    auto in = [&](int i) { return operand(n->inputs[i]); };
    int r;
    if (auto b = binary_ops().find(op); b != binary_ops().end()) {
      const int x = in(0), y = in(1);
      r = emit(b->second, x, y);
    } else if (auto u = unary_ops().find(op); u != unary_ops().end()) {
      r = emit(u->second, in(0), 0);
    } else if (op == "LeakyRelu") {
      const int x = in(0);
      r = emit(PwOp::kLeakyRelu, x, constant(n->attr_float("alpha", 0.01f)));
    } else if (op == "Elu") {
      const int x = in(0);
      r = emit(PwOp::kElu, x, constant(n->attr_float("alpha", 1.f)));
    } else if (op == "Gelu") {
      r = emit(n->attr_string("approximate", "none") == "tanh" ? PwOp::kGeluTanh : PwOp::kGelu, in(0), 0);
    } else if (op == "Clip") {
      // As kiln's kernels clamp: below the lower bound it, then above the upper; an absent bound is
      // the float range's end (parse_clip's for opset < 11), so infinities are clamped too.
      const ops::ClipParams cp = ops::parse_clip(*n);
      const float lowest = std::numeric_limits<float>::lowest(), highest = std::numeric_limits<float>::max();
      const int x = in(0);
      const int lo = cp.bounds_from_inputs ? (n->has_input(1) ? in(1) : constant(lowest)) : constant(cp.min);
      r = emit(PwOp::kClampLo, x, lo);
      const int hi = cp.bounds_from_inputs ? (n->inputs.size() > 2 && n->has_input(2) ? in(2) : constant(highest)) : constant(cp.max);
      r = emit(PwOp::kClampHi, r, hi);
    } else {  // Cast between float types, Identity: the value as it is (rounded below when it goes half)
      r = in(0);
    }
    // Held in a half type by the graph: rounded there (the root's store rounds it once anyway).
    const DataType dt = n->outputs[0]->type.dtype;
    const bool same = (op == "Cast" || op == "Identity") && n->inputs[0]->type.dtype == dt;
    if (n != root && dt != DataType::kFloat32 && !same)
      r = emit(dt == DataType::kFloat16 ? PwOp::kRoundHalf : PwOp::kRoundBFloat16, r, 0);
    reg[n->outputs[0]] = r;
  }

  // Final numbering: leaves 0..L-1, instruction k → L + k. False when the root computes nothing new.
  bool finish(const ir::Node* root, DataType dtype) {
    const int result = reg.at(root->outputs[0]);
    if (code.empty() || result != static_cast<int>(code.size()) - 1) return false;
    // Literals are one element (all dims 1): they may only have widened Y's rank, which the leaves
    // must still give.
    int rank = 0;
    for (const ir::Value* v : leaves) rank = std::max(rank, v->type.shape.rank());
    if (rank != root->outputs[0]->type.shape.rank()) return false;
    const int L = static_cast<int>(leaves.size());
    auto map = [L](int r) { return r < 0 ? -1 - r : L + r; };
    p.inputs = L;
    p.dtype = dtype;
    for (ops::PwInstr in : code) {
      if (in.op != PwOp::kConst) {
        in.a = map(in.a);
        if (ops::pw_binary(in.op)) in.b = map(in.b);
      }
      p.code.push_back(in);
    }
    return L >= 1 && L <= ops::kPointwiseMaxInputs && static_cast<int>(p.code.size()) <= ops::kPointwiseMaxCode;
  }
};

// A kiln.FusedMatMul or FusedGemm whose activation no library epilogue computes (the CUDA kernel
// applies it in a pass of its own over the product: SiLU, sigmoid, tanh, HardSwish, LeakyRelu, erf
// GELU) and whose result is read by one elementwise op only gives the activation back to the graph,
// where it joins that op's region: SwiGLU's SiLU(gate)·up is then one pass over the gate and up
// products instead of an activation pass and a Mul. ReLU and tanh GELU stay (cuBLASLt's epilogues).
// What was detached is recorded: an activation whose nodes no region took goes back (reattach).
struct Detached {
  ir::Node* product;
  std::map<std::string, ir::Attribute> attrs;  // the product's activation attributes
  ir::Value* y;                                // its output before
  std::vector<ir::Node*> added;                // the activation's nodes
};

std::vector<Detached> detach_activations(ir::Graph& g, const std::set<std::string>& read_inside) {
  std::vector<Detached> detached;
  const std::vector<ir::Node*> nodes = g.nodes();  // (a copy: nodes are added below)
  for (ir::Node* n : nodes) {
    if (n->removed || n->domain != "kiln" || (n->op_type != "FusedMatMul" && n->op_type != "FusedGemm") || n->outputs.size() != 1)
      continue;
    Activation act;
    std::string why;
    if (!n->attr("activation") || !read_activation(*n, &act, &why)) continue;
    const ActKind k = act.kind;
    if (k != ActKind::kSilu && k != ActKind::kSigmoid && k != ActKind::kTanh && k != ActKind::kHardSwish &&
        k != ActKind::kLeakyRelu && k != ActKind::kGelu)
      continue;
    ir::Value* y = n->outputs[0];
    if (!y || y->is_output || read_inside.count(y->name) || y->uses.size() != 1 || !float_value(y) || !y->type.shape.known ||
        !expressible(*y->uses[0].node))
      continue;
    Detached d{n, {}, y, {}};
    for (const char* key : {"activation", "activation_params"})
      if (auto it = n->attrs.find(key); it != n->attrs.end()) {
        d.attrs.insert(*it);
        n->attrs.erase(it);
      }
    ir::Value* pre = g.new_value(y->name + "_before_activation", y->type);
    g.set_output(n, 0, pre);
    auto add = [&](const char* op, std::vector<ir::Value*> in, ir::Value* out, int64_t opset) {
      ir::Node* a = g.add_node(op, "", std::move(in), {out}, n->name + "_" + op);
      a->opset = opset;
      d.added.push_back(a);
      return a;
    };
    switch (k) {
      case ActKind::kSilu: {
        ir::Value* sig = g.new_value(y->name + "_sigmoid", y->type);
        add("Sigmoid", {pre}, sig, 13);
        add("Mul", {pre, sig}, y, 14);
        break;
      }
      case ActKind::kSigmoid: add("Sigmoid", {pre}, y, 13); break;
      case ActKind::kTanh: add("Tanh", {pre}, y, 13); break;
      case ActKind::kHardSwish: add("HardSwish", {pre}, y, 14); break;
      case ActKind::kLeakyRelu: {
        set_float(add("LeakyRelu", {pre}, y, 16), "alpha", act.a);
        break;
      }
      default: add("Gelu", {pre}, y, 20); break;  // kGelu (erf)
    }
    detached.push_back(std::move(d));
  }
  return detached;
}

// An activation whose nodes all survived the regions (the reader's region was refused or too large)
// goes back into its product: one pass there beats a Sigmoid and a Mul. (One a region took in part
// stays as the graph now computes it.) Returns how many went back.
int reattach(ir::Graph& g, const std::vector<Detached>& detached) {
  int back = 0;
  for (const Detached& d : detached) {
    bool whole = !d.product->removed;
    for (const ir::Node* a : d.added) whole &= !a->removed;
    if (!whole) continue;
    for (auto it = d.added.rbegin(); it != d.added.rend(); ++it) g.remove_node(*it);
    g.set_output(d.product, 0, d.y);
    for (const auto& [key, attr] : d.attrs) d.product->attrs[key] = attr;
    ++back;
  }
  return back;
}

}  // namespace

Expected<int> fuse_pointwise(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts) {
  const std::set<std::string> read_inside = ir::names_read_by_subgraphs(g);
  const std::vector<Detached> detached = detach_activations(g, read_inside);
  if (!detached.empty()) KILN_RETURN_IF_ERROR(g.sort());
  const std::vector<ir::Node*> nodes = g.nodes();
  std::map<const ir::Node*, int> region;  // node → region index
  std::vector<std::vector<ir::Node*>> regions;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    ir::Node* root = *it;
    if (root->removed || region.count(root) || !expressible(*root)) continue;
    const int id = static_cast<int>(regions.size());
    regions.push_back({root});
    region[root] = id;
    // Grow to a fixed point: a producer joins once every reader of its output is a member.
    for (bool grew = true; grew && regions[id].size() < 64;) {
      grew = false;
      for (size_t m = 0; m < regions[id].size(); ++m)
        for (ir::Value* v : regions[id][m]->inputs) {
          ir::Node* p = v ? v->producer : nullptr;
          if (!p || region.count(p) || !expressible(*p) || v->is_output || read_inside.count(v->name)) continue;
          bool all_inside = true;
          for (const ir::Use& u : v->uses) {
            auto r = region.find(u.node);
            all_inside &= r != region.end() && r->second == id;
          }
          if (!all_inside) continue;
          region[p] = id;
          regions[id].push_back(p);
          grew = true;
        }
    }
  }
  int fused = 0;
  bool tried = false;
  for (std::vector<ir::Node*>& members : regions) {
    if (members.size() < 2) continue;
    ir::Node* root = members.front();
    ProgramWriter w;
    w.members.insert(members.begin(), members.end());
    w.visit(root, root);
    ir::Value* out = root->outputs[0];
    if (!w.finish(root, out->type.dtype)) continue;
    ir::Value* trial = g.new_value(out->name + "_pointwise", out->type);
    ir::Node* n = g.add_node("Pointwise", "kiln", w.leaves, {trial}, root->name + "_pointwise");
    n->opset = 1;
    ops::set_pointwise_attrs(*n, w.p);
    if (!accepts(*n)) {
      g.remove_node(n);
      tried = true;
      continue;
    }
    if (log_enabled(LogLevel::kVerbose))
      log(LogLevel::kVerbose, "[pointwise] " + std::to_string(members.size()) + " ops ending at " + root->describe() + " → " +
                                  n->describe() + " (" + std::to_string(w.p.code.size()) + " instructions)");
    for (ir::Node* m : members) g.remove_node(m);
    g.set_output(n, 0, out);
    ++fused;
  }
  const int back = reattach(g, detached);
  if (fused || tried || back) g.remove_dead_values();
  if (fused || back) KILN_RETURN_IF_ERROR(g.sort());
  return fused;
}

}  // namespace kiln::passes
