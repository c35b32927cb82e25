// ops/op_table.h — every operator kiln knows, declared once: name, domain, opset range, how kiln runs
// it, and its type/shape function. The importer, verifier, `kiln info` and the support table
// derive from this table.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::ops {

// What a shape function sees. Input constants are given when known at build time.
struct InferContext {
  const ir::Node& node;
  std::vector<const ir::Type*> in;       // nullptr for an omitted input
  std::vector<const Tensor*> in_value;   // constant value of input i, or nullptr
  std::vector<ir::Type> out;             // to fill: one per node output

  int num_inputs() const { return static_cast<int>(in.size()); }
  bool has(int i) const { return i < num_inputs() && in[i] != nullptr; }
  const ir::Type& type(int i) const { return *in[i]; }
  const ir::SymShape& shape(int i) const { return in[i]->shape; }
  DataType dtype(int i) const { return in[i]->dtype; }
  const Tensor* value(int i) const { return i < num_inputs() ? in_value[i] : nullptr; }
  Status error(const std::string& what) const { return invalid_model(node.describe() + ": " + what); }
};

using InferFn = Status (*)(InferContext&);

// One attribute an op declares: name, kind, whether it must be present, and a validity rule.
// Declared once here; the importer's inference checks every node against it (a clear error naming
// the node, op and attribute), so shape functions and kernels parse values already known valid.
struct AttrSpec {
  std::string name;
  ir::Attribute::Kind kind = ir::Attribute::Kind::kInt;
  bool required = false;
  // "" when the value is valid, else what is wrong ("must be >= 1"). Null: any value of the kind.
  std::string (*rule)(const ir::Attribute&) = nullptr;
};

// Common rules.
std::string rule_positive_ints(const ir::Attribute& a);     // every element >= 1
std::string rule_non_negative_ints(const ir::Attribute& a); // every element >= 0
std::string rule_bool(const ir::Attribute& a);              // 0 or 1
std::string rule_positive(const ir::Attribute& a);          // an int >= 1
std::string rule_auto_pad(const ir::Attribute& a);          // NOTSET, SAME_UPPER, SAME_LOWER, VALID

struct OpDef {
  std::string name;
  std::string domain;  // "" = ai.onnx
  int since = 1;       // oldest opset version kiln accepts for this op
  InferFn infer = nullptr;  // null: output types are left unknown until run time
  // How kiln runs it: "native" (own kernels), "function" (expanded into its ONNX function body),
  // "lowered" (rewritten into other ops before optimization: passes/lower_contrib.cpp) or "plugin" (a
  // loaded plugin's kernels: add_extension_op).
  std::string how = "native";
  // Its attributes, where declared (ops without a list are not checked).
  std::vector<AttrSpec> attrs;
  // Input/output counts for ops onnx does not define (domain "kiln"); onnx's own ops take theirs
  // from arity_table.inc, per opset version. -1: not declared.
  int min_inputs = -1, max_inputs = -1, min_outputs = -1, max_outputs = -1;
};

const std::vector<OpDef>& op_table();
// The op's declaration: an extension op's first (see add_extension_op), else the built-in table's.
const OpDef* find_op(const std::string& domain, const std::string& name);
// Adds an op declared while the process runs (plugins/, which decides whether one may replace a
// built-in op of the same domain and name). The declaration lives as long as the process. Adding is
// serialized; lookups running at the same time as an add are not: add before building.
void add_extension_op(OpDef def);

// Checks the node's input and output counts against its op's declaration for the node's opset, and
// that inputs/outputs the op requires are not omitted (""). The importer and the engine reader call
// it once per node, so nothing later meets a node of the wrong arity.
Status check_arity(const ir::Node& node);
// Checks the node's attributes against its op's declaration (kind, required, rule).
Status check_attributes(const ir::Node& node);
// Declares the attributes of op `name` (ai.onnx) in table `t`.
void declare_attrs(std::vector<OpDef>& t, const std::string& name, std::vector<AttrSpec> attrs);

// Runs the op's shape function, filling the node's output types (unknown parts stay unknown).
// Checks the node's attributes first.
Status infer_node(ir::Node& node);
// Checks a node read from an engine file (untrusted) as import checks a node of a model: its attributes
// (check_attributes) and its op's shape function over the stored input types and constants, whose
// output types must agree with the stored ones (dtype, rank, static dims; unknown parts agree). Changes
// nothing; the error names the node.
Status check_stored_node(const ir::Node& node);
// "" when a type agrees with another (an unknown part agrees with anything), else the first difference
// ("dtype", "rank", "dimension 2").
std::string type_conflict(const ir::Type& stored, const ir::Type& inferred);
// Infers types through a whole graph in topological order (subgraph bodies included).
Status infer_graph(ir::Graph& graph);

// ---- Shared helpers (also used by kernels for concrete shapes)
// Multidirectional (numpy) broadcasting.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out);
ir::SymShape broadcast_sym(const ir::SymShape& a, const ir::SymShape& b);
// The values of an int64/int32 constant (false when absent or of another dtype).
bool const_ints(const Tensor* t, std::vector<int64_t>& out);
// Ops whose outputs differ from run to run (never folded or merged).
bool is_nondeterministic(const ir::Node& n);
// Normalizes a possibly negative axis against `rank`; false when out of range.
bool normalize_axis(int64_t& axis, int64_t rank);

// Per-family registration (one file per family in ops/).
void add_elementwise_ops(std::vector<OpDef>& t);
void add_nn_ops(std::vector<OpDef>& t);
void add_shape_ops(std::vector<OpDef>& t);
void add_reduce_ops(std::vector<OpDef>& t);
void add_control_ops(std::vector<OpDef>& t);
void add_resize_ops(std::vector<OpDef>& t);  // ops/resize_infer.cpp
void add_einsum_ops(std::vector<OpDef>& t);  // ops/einsum_infer.cpp
void add_unique_ops(std::vector<OpDef>& t);
void add_random_ops(std::vector<OpDef>& t);
void add_signal_ops(std::vector<OpDef>& t);
void add_string_ops(std::vector<OpDef>& t);
void add_detect_ops(std::vector<OpDef>& t);  // NonMaxSuppression
void add_linalg_ops(std::vector<OpDef>& t);  // Det
void add_quant_ops(std::vector<OpDef>& t);
void add_rnn_ops(std::vector<OpDef>& t);  // ops/rnn_infer.cpp
void add_loss_ops(std::vector<OpDef>& t);
void add_nn_norm_lp_ops(std::vector<OpDef>& t);  // LpNormalization
void add_roi_ops(std::vector<OpDef>& t);
void add_tfidf_ops(std::vector<OpDef>& t);
void add_training_ops(std::vector<OpDef>& t);  // domain ai.onnx.preview.training
void add_attention_ops(std::vector<OpDef>& t);
void add_nn_conv_causal_ops(std::vector<OpDef>& t);  // CausalConvWithState
void add_shape_index_scatter_ops(std::vector<OpDef>& t);  // TensorScatter
void add_reduce_cumprod_ops(std::vector<OpDef>& t);  // CumProd
void add_cast_bitcast_ops(std::vector<OpDef>& t);  // BitCast
void add_grid_ops(std::vector<OpDef>& t);
void add_ml_ops(std::vector<OpDef>& t);   // ops/ml.cpp: ai.onnx.ml ops
void add_fused_ops(std::vector<OpDef>& t);  // ops/fused.cpp: kiln's fused ops (domain "kiln")
void add_pointwise_ops(std::vector<OpDef>& t);  // ops/pointwise.cpp: kiln.Pointwise
void add_contrib_ops(std::vector<OpDef>& t);  // ops/contrib.cpp: ONNX Runtime's contrib ops (lowered)

}  // namespace kiln::ops
