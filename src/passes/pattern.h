// passes/pattern.h — a small pattern matcher for fusions, and the rewriter that applies them.
//
// A pattern reads like the expression it matches, from the result back to its inputs:
//
//   op("Add", {op("MatMul", {any("a"), cst("w")}).as("mm"), cst("bias")}).commute()
//
// matches Add(MatMul(a, w), bias) in either operand order of the Add, capturing the values a, w,
// bias and the node mm. A name used twice must bind the same value both times (that is how
// patterns like LayerNorm's `x - mean(x)` say "the same x"). `maybe(p)` is an op that may be
// absent (its first input pattern then matches the value itself). Interior nodes of a match must
// have no readers outside the match (checked by the rewriter), so a fusion never duplicates work.
//
// A pass is then: rules + a build function that gets a full match and either builds the
// replacement (returns "") or says why not (a near miss, logged with --verbose).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "passes/passes.h"

namespace kiln::passes {

struct Pat {
  enum class Kind { kAny, kConst, kOp };
  Kind kind = Kind::kAny;
  std::vector<std::string> ops;  // kOp: accepted op types
  std::string domain;            // kOp: "" = ai.onnx
  std::string name;              // capture name; "" captures nothing
  std::vector<Pat> in;           // kOp: patterns for inputs 0..n-1 (further inputs are not looked at)
  bool commutative = false;      // kOp with two input patterns: try both orders
  bool optional = false;         // kOp: may be absent
  bool last_first = false;       // kOp: match inputs from the last to the first (so a later input's
                                 // captures are known when an earlier one refers to them by name)
  bool any_output = false;       // kOp: the value may be any output of the node (else output 0 only);
                                 // the node is captured by name, the value is the one matched

  Pat as(std::string n) const { Pat p = *this; p.name = std::move(n); return p; }
  Pat commute() const { Pat p = *this; p.commutative = true; return p; }
  Pat in_domain(std::string d) const { Pat p = *this; p.domain = std::move(d); return p; }
  Pat inputs_last_first() const { Pat p = *this; p.last_first = true; return p; }
  Pat of_any_output() const { Pat p = *this; p.any_output = true; return p; }
};

// Any value; a constant (initializer or folded); an op ("A|B" accepts either).
Pat any(std::string name = {});
Pat cst(std::string name = {});
Pat op(const std::string& ops, std::vector<Pat> inputs = {});
Pat maybe(Pat p);

struct Match {
  std::map<std::string, ir::Value*> values;  // captures: values, and node patterns' output 0
  std::map<std::string, ir::Node*> nodes;    // captures of node patterns
  std::vector<ir::Node*> matched;            // every node of the match, root first
  int depth = 0;                             // nodes matched (for near misses)
  std::string why;                           // why matching stopped

  ir::Node* root() const { return matched.empty() ? nullptr : matched.front(); }
  ir::Value* operator[](const std::string& n) const;
  ir::Node* node(const std::string& n) const;
  bool has(const std::string& n) const { return values.count(n) > 0; }
  const Tensor& constant(const std::string& n) const { return *values.at(n)->constant; }
};

// Matches `p` against value `v` (a kOp pattern against v's producer).
bool match(const Pat& p, ir::Value* v, Match& m);

// ---- Reading constants
// The constant as a vector of doubles (any numeric dtype), or empty when not constant/numeric.
std::vector<double> constant_values(const ir::Value* v);
// An int64 tensor of `v`: 1-D, or a scalar (v has one element) when `scalar`.
Tensor int64_tensor(const std::vector<int64_t>& v, bool scalar = false);
// A new value of g holding `t` as its constant (named after `hint`).
ir::Value* new_constant(ir::Graph& g, const std::string& hint, Tensor t);
// An ints attribute holding `v`.
ir::Attribute ints_attribute(std::vector<int64_t> v);
// Sets n's int / float attribute `key` (replacing what it held).
void set_int(ir::Node* n, const char* key, int64_t v);
void set_float(ir::Node* n, const char* key, double v);
// d as an int64, saturated to [INT64_MIN, INT64_MAX] (NaN: 0): a cast of a double past int64's range is
// undefined behaviour, and constant_values of an int64 constant holds such values (2^63 - 1 rounds up).
inline int64_t saturating_int64(double d) {
  if (!(d == d)) return 0;
  if (d >= 9223372036854775807.0) return INT64_MAX;
  if (d <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(d);
}
// True when v is a constant whose every element equals x (within tol).
bool is_scalar_constant(const ir::Value* v, double x, double tol = 1e-6);
// The single value of a constant with one element (scalar or [1]), or nullopt.
std::optional<double> scalar_value(const ir::Value* v);
// A float32/float64 tensor of `dt` from doubles (nullopt for other dtypes).
std::optional<Tensor> real_tensor(DataType dt, const Shape& shape, const std::vector<double>& v);
// A constant's values per output channel of a Conv whose output has `rank` dims and M channels:
// a scalar, or a shape that right-aligned against [N, M, spatial...] is 1 everywhere but at M.
std::optional<std::vector<double>> per_channel(const ir::Value* c, int rank, int64_t M);
// The static dims of v's type, or nullopt.
std::optional<Shape> static_shape(const ir::Value* v);
// The single node reading v, when v is not a graph output and is read exactly once — or, with
// `any_times`, read only by that node (a packed QKV given to an attention as Q, K and V); else null.
ir::Node* sole_reader(const ir::Value* v, bool any_times = false);
// Dims a and b are known to be equal: equal static values, or the same symbol.
bool same_dim(const ir::Dim& a, const ir::Dim& b);
// The reduce axes of a ReduceMean/ReduceSum node (attribute before opset 18, input after).
std::optional<std::vector<int64_t>> reduce_axes(const ir::Node& n);
// The elements of a constant int32/int64 tensor; nullopt for other types.
std::optional<std::vector<int64_t>> integer_values(const Tensor& t);

// near_miss_depth for rules whose failures are never worth reporting.
constexpr int kQuiet = 99;

// One element of a shape vector: a known value (of == nullptr), or dim `value` of tensor `of`.
struct ShapeElem {
  const ir::Value* of = nullptr;
  int64_t value = 0;
};
// The elements of a 1-D int64 shape vector built by Shape/Gather/Slice/Unsqueeze/Squeeze/Concat/Cast
// from constants and tensors' dims (static dims become values); nullopt when computed otherwise.
std::optional<std::vector<ShapeElem>> shape_value(const ir::Value* v, int depth = 0);
// shape_value's elements, where 1-element parts of a Concat that are computed otherwise (an
// exporter's B*H: a Mul of a dim and a constant) are nullopt.
std::optional<std::vector<std::optional<ShapeElem>>> shape_value_partial(const ir::Value* v);

// x's last dim where it is certain: its type's, else (the shapes after a rotary embedding are often
// unknown) through ops that keep their first operand's shape (Add, Mul) back to a Transpose of a
// Reshape whose shape vector holds a constant there (Reshape(x, [B, S, H|-1, D]) as exports split
// heads). 0 when unknown.
int64_t proven_last_dim(const ir::Value* x);

// One rule of a pass: a pattern, a label, and how many nodes must have matched before a failure
// counts as a near miss.
struct Rule {
  std::string what;
  Pat pattern;
  int near_miss_depth = 2;
  bool exclusive = true;  // interior nodes must have no readers outside the match
};

class Rewriter {
 public:
  Rewriter(ir::Graph& g, PassContext& ctx, std::string pass) : g_(g), ctx_(ctx), pass_(std::move(pass)) {}

  // For every node (root = its output 0), tries the rules in order; on the first full match whose
  // interior is exclusive, calls build. build returns "" when it rewrote, else why not.
  using Build = std::function<std::string(Match&)>;
  bool run(const std::vector<Rule>& rules, const Build& build);

  // Replaces the match by one node that computes the root's output 0 (which keeps its name and
  // graph-output role); `extra_outputs` become outputs 1... Matched nodes left unread are removed.
  ir::Node* replace(Match& m, const std::string& op, const std::string& domain, int opset,
                    std::vector<ir::Value*> inputs, std::vector<ir::Value*> extra_outputs = {});
  // Makes node n's output 0 be computed by `in` instead (n must be a no-op). Keeps graph output
  // names: when n's output is a graph output, in's producer is made to write it directly.
  // Returns false (and changes nothing) when that is impossible.
  bool bypass(ir::Node* n, ir::Value* in);
  // A new constant value.
  ir::Value* constant(const std::string& hint, const Tensor& t);
  // Removes node n now (its outputs lose their producer: give them to a new node), marking it dead.
  void remove(ir::Node* n);
  // Removes nodes of `nodes` that are left without readers (repeatedly), marking them dead.
  void remove_unread(std::vector<ir::Node*> nodes);
  bool dead(ir::Node* n) const { return dead_.count(n) > 0; }
  void log(const std::string& what) { ctx_.log(pass_, what); }
  void near_miss(const std::string& what) { ctx_.near_miss(pass_, what); }
  // "" when the target device has a kernel for the op a rewrite would produce, else why not.
  std::string unsupported_on_target(const std::string& domain, const std::string& op) const {
    if (ctx_.has_kernel(domain, op)) return "";
    return "the target device has no kernel for " + (domain.empty() ? op : domain + "." + op);
  }
  ir::Graph& graph() { return g_; }

 private:
  ir::Graph& g_;
  PassContext& ctx_;
  std::string pass_;
  std::set<ir::Node*> dead_;
};

// Why the interior of a match has readers outside it ("" when it has none).
std::string check_exclusive(const Match& m);

}  // namespace kiln::passes
