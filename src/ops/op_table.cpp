#include "ops/op_table.h"

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <set>

namespace kiln::ops {

const std::vector<OpDef>& op_table() {
  static const std::vector<OpDef> table = [] {
    std::vector<OpDef> t;
    add_elementwise_ops(t);
    add_nn_ops(t);
    add_shape_ops(t);
    add_reduce_ops(t);
    add_control_ops(t);
    add_resize_ops(t);
    add_einsum_ops(t);
    add_unique_ops(t);
    add_random_ops(t);
    add_signal_ops(t);
    add_string_ops(t);
    add_detect_ops(t);
    add_linalg_ops(t);
    add_quant_ops(t);
    add_rnn_ops(t);
    add_loss_ops(t);
    add_nn_norm_lp_ops(t);
    add_roi_ops(t);
    add_tfidf_ops(t);
    add_training_ops(t);
    add_attention_ops(t);
    add_nn_conv_causal_ops(t);
    add_shape_index_scatter_ops(t);
    add_reduce_cumprod_ops(t);
    add_cast_bitcast_ops(t);
    add_grid_ops(t);
    add_ml_ops(t);
    add_fused_ops(t);
    add_pointwise_ops(t);
    add_contrib_ops(t);
    return t;
  }();
  return table;
}

namespace {
struct ExtensionOps {
  std::mutex mu;
  std::deque<OpDef> defs;  // stable addresses
  std::map<std::pair<std::string, std::string>, const OpDef*> index;
  std::atomic<bool> any{false};
};
ExtensionOps& extension_ops() {
  static ExtensionOps e;
  return e;
}
}  // namespace

void add_extension_op(OpDef def) {
  ExtensionOps& e = extension_ops();
  std::lock_guard<std::mutex> lock(e.mu);
  if (def.domain == "ai.onnx") def.domain.clear();
  e.defs.push_back(std::move(def));
  e.index[{e.defs.back().domain, e.defs.back().name}] = &e.defs.back();
  e.any = true;
}

const OpDef* find_op(const std::string& domain, const std::string& name) {
  if (ExtensionOps& e = extension_ops(); e.any) {
    std::lock_guard<std::mutex> lock(e.mu);
    auto it = e.index.find({domain == "ai.onnx" ? "" : domain, name});
    if (it != e.index.end()) return it->second;
  }
  static const std::map<std::pair<std::string, std::string>, const OpDef*> index = [] {
    std::map<std::pair<std::string, std::string>, const OpDef*> m;
    for (const OpDef& d : op_table()) m.emplace(std::make_pair(d.domain, d.name), &d);
    return m;
  }();
  auto it = index.find({domain == "ai.onnx" ? "" : domain, name});
  return it == index.end() ? nullptr : it->second;
}

namespace {

struct Arity {
  const char* domain;
  const char* op;
  int since, min_in, max_in, first_optional_in, min_out, max_out, first_optional_out;
};

constexpr Arity kArity[] = {
#include "ops/arity_table.inc"
};

// The row for the newest version of the op at or below `opset` (the oldest one when the opset
// predates the op), or null for ops onnx does not define.
const Arity* find_arity(const std::string& domain, const std::string& op, int opset) {
  static const std::map<std::pair<std::string, std::string>, std::vector<const Arity*>> index = [] {
    std::map<std::pair<std::string, std::string>, std::vector<const Arity*>> m;
    for (const Arity& a : kArity) m[{a.domain, a.op}].push_back(&a);  // rows are sorted by version
    return m;
  }();
  auto it = index.find({domain == "ai.onnx" ? "" : domain, op});
  if (it == index.end()) return nullptr;
  const Arity* best = it->second.front();
  for (const Arity* a : it->second)
    if (a->since <= opset) best = a;
  return best;
}

std::string count_range(int lo, int hi, const char* what) {
  std::string w = std::string(what) + (hi == 1 && lo == 1 ? "" : "s");
  if (lo == hi) return std::to_string(lo) + " " + w;
  if (hi >= (1 << 30)) return "at least " + std::to_string(lo) + " " + w;
  return std::to_string(lo) + " to " + std::to_string(hi) + " " + w;
}

Status check_count(const ir::Node& node, size_t got, int lo, int hi, int first_optional, bool is_input) {
  const char* what = is_input ? "input" : "output";
  if (static_cast<int64_t>(got) < lo || static_cast<int64_t>(got) > hi)
    return invalid_model(node.describe() + ": takes " + count_range(lo, hi, what) + ", got " + std::to_string(got));
  const auto& list = is_input ? node.inputs : node.outputs;
  for (size_t i = 0; i < got && static_cast<int64_t>(i) < first_optional; ++i)
    if (!list[i]) return invalid_model(node.describe() + ": " + what + " " + std::to_string(i) + " is required but empty");
  return Status::Ok();
}

}  // namespace

Status check_arity(const ir::Node& node) {
  if (const Arity* a = find_arity(node.domain, node.op_type, node.opset)) {
    KILN_RETURN_IF_ERROR(check_count(node, node.inputs.size(), a->min_in, a->max_in, a->first_optional_in, true));
    return check_count(node, node.outputs.size(), a->min_out, a->max_out, a->first_optional_out, false);
  }
  const OpDef* def = find_op(node.domain, node.op_type);
  if (!def || def->min_inputs < 0) return Status::Ok();
  KILN_RETURN_IF_ERROR(check_count(node, node.inputs.size(), def->min_inputs, def->max_inputs, def->min_inputs, true));
  return check_count(node, node.outputs.size(), def->min_outputs, def->max_outputs, def->min_outputs, false);
}

// Keeps what is already known about `have` (e.g. from value_info) where inference knows less.
static void merge_type(ir::Type& have, const ir::Type& inferred) {
  if (inferred.kind == ir::Type::Kind::kUnknown) return;
  if (have.kind != inferred.kind || have.dtype == DataType::kUndefined) {
    if (inferred.kind != ir::Type::Kind::kTensor || inferred.dtype != DataType::kUndefined) {
      ir::SymShape keep = have.shape;
      have = inferred;
      if (!have.shape.known && keep.known) have.shape = keep;
    }
    return;
  }
  if (inferred.dtype != DataType::kUndefined) have.dtype = inferred.dtype;
  if (!inferred.shape.known) return;
  if (!have.shape.known || have.shape.rank() != inferred.shape.rank()) {
    have.shape = inferred.shape;
    return;
  }
  for (int i = 0; i < have.shape.rank(); ++i) {
    const ir::Dim& d = inferred.shape.dims[i];
    if (d.is_static() || (!have.shape.dims[i].is_static() && !d.symbol.empty())) have.shape.dims[i] = d;
  }
}

std::string rule_positive_ints(const ir::Attribute& a) {
  for (int64_t v : a.ints)
    if (v < 1) return "every value must be >= 1, got " + std::to_string(v);
  return "";
}
std::string rule_non_negative_ints(const ir::Attribute& a) {
  for (int64_t v : a.ints)
    if (v < 0) return "every value must be >= 0, got " + std::to_string(v);
  return "";
}
std::string rule_bool(const ir::Attribute& a) {
  return a.i == 0 || a.i == 1 ? "" : "must be 0 or 1, got " + std::to_string(a.i);
}
std::string rule_positive(const ir::Attribute& a) { return a.i >= 1 ? "" : "must be >= 1, got " + std::to_string(a.i); }
std::string rule_auto_pad(const ir::Attribute& a) {
  for (const char* v : {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"})
    if (a.s == v) return "";
  return "must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '" + a.s + "'";
}

void declare_attrs(std::vector<OpDef>& t, const std::string& name, std::vector<AttrSpec> attrs) {
  for (OpDef& d : t)
    if (d.name == name && d.domain.empty()) d.attrs = std::move(attrs);
}

static const char* kind_name(ir::Attribute::Kind k) {
  using K = ir::Attribute::Kind;
  switch (k) {
    case K::kFloat: return "a float";
    case K::kInt: return "an int";
    case K::kString: return "a string";
    case K::kTensor: return "a tensor";
    case K::kGraph: return "a graph";
    case K::kFloats: return "floats";
    case K::kInts: return "ints";
    case K::kStrings: return "strings";
    default: return "another kind";
  }
}

Status check_attributes(const ir::Node& node) {
  const OpDef* def = find_op(node.domain, node.op_type);
  if (!def) return Status::Ok();
  for (const AttrSpec& spec : def->attrs) {
    const ir::Attribute* a = node.attr(spec.name);
    if (!a) {
      if (spec.required) return invalid_model(node.describe() + ": attribute '" + spec.name + "' is required");
      continue;
    }
    if (a->kind != spec.kind)
      return invalid_model(node.describe() + ": attribute '" + spec.name + "' must be " + kind_name(spec.kind) +
                           ", got " + kind_name(a->kind));
    if (spec.rule) {
      const std::string why = spec.rule(*a);
      if (!why.empty()) return invalid_model(node.describe() + ": attribute '" + spec.name + "' " + why);
    }
  }
  return Status::Ok();
}

// Runs the op's shape function over the node's current input types and constants; `ctx.out` gets one
// type per output (kUnknown where it says nothing).
static Status run_shape_function(const OpDef& def, const ir::Node& node, InferContext& ctx) {
  for (const ir::Value* v : node.inputs) {
    ctx.in.push_back(v ? &v->type : nullptr);
    ctx.in_value.push_back(v && v->constant && !v->is_input ? &*v->constant : nullptr);
  }
  ctx.out.resize(node.outputs.size());
  for (auto& t : ctx.out) t.kind = ir::Type::Kind::kUnknown;
  return def.infer(ctx);
}

Status infer_node(ir::Node& node) {
  KILN_RETURN_IF_ERROR(check_attributes(node));
  const OpDef* def = find_op(node.domain, node.op_type);
  if (!def || !def->infer) return Status::Ok();
  InferContext ctx{node, {}, {}, {}};
  KILN_RETURN_IF_ERROR(run_shape_function(*def, node, ctx));
  for (size_t i = 0; i < node.outputs.size() && i < ctx.out.size(); ++i)
    if (node.outputs[i]) merge_type(node.outputs[i]->type, ctx.out[i]);
  return Status::Ok();
}

// "" when a stored type agrees with what inference gives (an unknown part agrees with anything), else
// the first difference.
std::string type_conflict(const ir::Type& stored, const ir::Type& inferred) {
  using K = ir::Type::Kind;
  if (stored.kind == K::kUnknown || inferred.kind == K::kUnknown) return "";
  if (stored.kind != inferred.kind) return "kind";
  if (stored.kind != K::kTensor) return "";
  if (stored.dtype != DataType::kUndefined && inferred.dtype != DataType::kUndefined && stored.dtype != inferred.dtype)
    return "dtype";
  if (!stored.shape.known || !inferred.shape.known) return "";
  if (stored.shape.rank() != inferred.shape.rank()) return "rank";
  for (int i = 0; i < stored.shape.rank(); ++i) {
    const ir::Dim& a = stored.shape.dims[i];
    const ir::Dim& b = inferred.shape.dims[i];
    if (a.is_static() && b.is_static() && a.value != b.value) return "dimension " + std::to_string(i);
  }
  return "";
}

Status check_stored_node(const ir::Node& node) {
  KILN_RETURN_IF_ERROR(check_attributes(node));
  const OpDef* def = find_op(node.domain, node.op_type);
  if (!def || !def->infer) return Status::Ok();
  InferContext ctx{node, {}, {}, {}};
  KILN_RETURN_IF_ERROR(run_shape_function(*def, node, ctx));
  for (size_t i = 0; i < node.outputs.size() && i < ctx.out.size(); ++i) {
    const ir::Value* o = node.outputs[i];
    if (!o) continue;
    const std::string what = type_conflict(o->type, ctx.out[i]);
    if (!what.empty())
      return invalid_model(node.describe() + ": output '" + o->name + "' is stored as " + o->type.to_string() +
                           ", its inputs and attributes give " + ctx.out[i].to_string() + " (" + what + " differs)");
  }
  return Status::Ok();
}

Status infer_graph(ir::Graph& graph) {
  for (ir::Node* n : graph.nodes()) {
    for (auto& [k, a] : n->attrs) {
      if (a.g) KILN_RETURN_IF_ERROR(infer_graph(*a.g));
      for (auto& g : a.graphs) KILN_RETURN_IF_ERROR(infer_graph(*g));
    }
    KILN_RETURN_IF_ERROR(infer_node(*n));
  }
  return Status::Ok();
}

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  const size_t r = std::max(a.size(), b.size());
  Shape o(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) o[i] = da;
    else if (da == 1) o[i] = db;
    else return false;
  }
  *out = std::move(o);
  return true;
}

ir::SymShape broadcast_sym(const ir::SymShape& a, const ir::SymShape& b) {
  if (!a.known || !b.known) return {};
  const int r = std::max(a.rank(), b.rank());
  std::vector<ir::Dim> o(r);
  for (int i = 0; i < r; ++i) {
    const ir::Dim da = i < r - a.rank() ? ir::Dim(1) : a.dims[i - (r - a.rank())];
    const ir::Dim db = i < r - b.rank() ? ir::Dim(1) : b.dims[i - (r - b.rank())];
    if (da.is_static() && da.value == 1) o[i] = db;
    else if (db.is_static() && db.value == 1) o[i] = da;
    else if (da.is_static()) o[i] = da;
    else if (db.is_static()) o[i] = db;
    else o[i] = da.symbol == db.symbol ? da : ir::Dim();
  }
  return ir::SymShape(std::move(o));
}

bool const_ints(const Tensor* t, std::vector<int64_t>& out) {
  if (!t) return false;
  out.clear();
  if (t->dtype() == DataType::kInt64) out.assign(t->data<int64_t>(), t->data<int64_t>() + t->numel());
  else if (t->dtype() == DataType::kInt32) out.assign(t->data<int32_t>(), t->data<int32_t>() + t->numel());
  else return false;
  return true;
}

bool is_nondeterministic(const ir::Node& n) {
  static const std::set<std::string> ops = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                            "RandomUniformLike", "Bernoulli", "Multinomial"};
  return n.domain.empty() && ops.count(n.op_type);
}

bool normalize_axis(int64_t& axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return false;
  if (axis < 0) axis += rank;
  return true;
}

}  // namespace kiln::ops
