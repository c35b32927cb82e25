// ir/graph.h — kiln's graph IR: Graph owns Nodes and Values; Values know their producer and uses.
//
// The IR knows nothing about ONNX protobuf or devices. Op semantics live in ops/, rewrites in
// passes/. Subgraphs (If/Loop/Scan bodies) are Graphs held by a node attribute; a subgraph refers to
// values of enclosing graphs by name (`Graph::captures`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::ir {

class Graph;
class Node;

// One dimension: a known size, or a symbol (named like "batch", or anonymous when empty).
struct Dim {
  int64_t value = -1;
  std::string symbol;
  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT
  explicit Dim(std::string sym) : symbol(std::move(sym)) {}
  bool is_static() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  std::string to_string() const;
};

// A tensor shape whose rank may be unknown (`known == false`).
struct SymShape {
  bool known = false;
  std::vector<Dim> dims;
  SymShape() = default;
  explicit SymShape(std::vector<Dim> d) : known(true), dims(std::move(d)) {}
  static SymShape of(const Shape& s);
  int rank() const { return static_cast<int>(dims.size()); }
  bool is_static() const;
  Shape to_static() const;  // requires is_static()
  std::string to_string() const;
};

// The type of a value: a tensor, a sequence of tensors, an optional, or a map (kept, not executed).
struct Type {
  enum class Kind { kTensor, kSequence, kOptional, kMap, kUnknown };
  Kind kind = Kind::kTensor;
  DataType dtype = DataType::kUndefined;  // tensor element type (kTensor)
  SymShape shape;                         // kTensor
  std::shared_ptr<Type> elem;             // kSequence / kOptional element, kMap value
  DataType key_dtype = DataType::kUndefined;  // kMap

  static Type tensor(DataType dt, SymShape s = {}) { Type t; t.dtype = dt; t.shape = std::move(s); return t; }
  bool is_tensor() const { return kind == Kind::kTensor; }
  std::string to_string() const;
};

// A node attribute. Exactly the kind matching `type` is filled.
struct Attribute {
  enum class Kind { kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings, kTensors, kGraphs,
                    kTypeProto, kTypeProtos, kSparseTensor };
  Kind kind = Kind::kInt;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  std::vector<Type> types;  // kTypeProto (one) / kTypeProtos
  std::string to_string() const;
};

struct Use {
  Node* node;
  int input_index;
};

class Value {
 public:
  std::string name;
  Type type;
  Node* producer = nullptr;  // null for graph inputs, initializers and captures
  int producer_output = -1;
  std::vector<Use> uses;
  // Set for initializers and folded constants: read-only, shared by every context.
  std::optional<Tensor> constant;
  bool is_input = false;    // a graph input (may also have a constant default)
  bool is_output = false;   // a graph output
  bool is_capture = false;  // refers to a value of an enclosing graph with the same name

  bool is_constant() const { return constant.has_value() && !is_input; }
};

class Node {
 public:
  std::string name;
  std::string op_type;
  std::string domain;  // "" is ai.onnx
  int opset = 0;       // the opset version of `domain` this node was written for
  std::vector<Value*> inputs;   // nullptr for an omitted optional input
  std::vector<Value*> outputs;  // nullptr for an omitted optional output
  std::map<std::string, Attribute> attrs;
  // Maintained by Graph: per input, its position in inputs[i]->uses (O(1) use removal), and whether
  // the node was removed (it is freed when the graph next compacts its order).
  std::vector<size_t> use_index;
  bool removed = false;

  const Attribute* attr(const std::string& key) const;
  int64_t attr_int(const std::string& key, int64_t dflt) const;
  float attr_float(const std::string& key, float dflt) const;
  std::string attr_string(const std::string& key, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& key, std::vector<int64_t> dflt = {}) const;
  std::vector<float> attr_floats(const std::string& key, std::vector<float> dflt = {}) const;
  // True when an attribute holds a graph (If/Loop/Scan bodies, ...).
  bool has_subgraphs() const;
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i] != nullptr; }
  bool has_output(size_t i) const { return i < outputs.size() && outputs[i] != nullptr; }
  // "node 'conv1' (Conv)" — how errors name a node.
  std::string describe() const;
};

class Graph {
 public:
  std::string name;
  Graph* parent = nullptr;                   // enclosing graph of a subgraph
  std::map<std::string, int> opsets;         // domain → version (the model's opset_import)
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  std::vector<Value*> captures;              // values used from enclosing graphs, by name

  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Creation. Value names are unique within a graph; `new_value` makes a fresh name from `hint`.
  Value* add_value(const std::string& name, Type type = {});
  Value* new_value(const std::string& hint, Type type = {});
  Value* find_value(const std::string& name) const;
  Node* add_node(const std::string& op_type, const std::string& domain, std::vector<Value*> inputs,
                 std::vector<Value*> outputs, const std::string& name = {});
  // Removal (the node's outputs must have no uses left, unless they are graph outputs being rewired).
  void remove_node(Node* n);
  // Replace every use of `from` (and its graph-output role) with `to`.
  void replace_all_uses(Value* from, Value* to);
  void set_input(Node* n, int index, Value* v);
  // n's output `index` becomes v (v takes n as its producer; the value n wrote there before, if another,
  // is left without one): how a new node takes over an output the graph already names.
  void set_output(Node* n, int index, Value* v);
  // Drops values that are neither used, produced, inputs, outputs, nor captures.
  void remove_dead_values();

  // Nodes in a valid topological order (recomputed by `sort`; kept up to date by add_node).
  // Removed nodes leave the order (and are freed) here, in one pass, so removing k nodes costs O(n + k)
  // rather than O(n k).
  const std::vector<Node*>& nodes() const {
    if (removed_) compact();
    return order_;
  }
  // Re-sorts nodes topologically; fails naming a node on a cycle.
  Status sort();
  // Checks structural invariants: uses/producers agree, every input is produced or is an input,
  // constant or capture, no cycles, unique names. Returns the first problem found.
  Status verify() const;
  std::string to_string() const;
  size_t num_values() const { return values_.size(); }
  std::vector<Value*> values() const;
  // A deep copy (subgraphs included); `parent` of the copy is set by the caller.
  std::unique_ptr<Graph> clone() const;

 private:
  void compact() const;

  mutable std::vector<std::unique_ptr<Node>> node_store_;
  std::vector<std::unique_ptr<Value>> value_store_;
  std::map<std::string, Value*> values_;
  mutable std::vector<Node*> order_;
  mutable size_t removed_ = 0;  // nodes marked removed, not yet compacted away
  int fresh_ = 0;
};

// Names that subgraphs of g's nodes (at any depth) read from g or from graphs further out. Values
// read only this way have no `uses` in g, yet are live.
std::set<std::string> names_read_by_subgraphs(const Graph& g);

// The imported model: the main graph and its metadata.
struct Model {
  std::unique_ptr<Graph> graph;
  int64_t ir_version = 0;
  int64_t model_version = 0;
  std::string producer_name, producer_version, domain, doc;
  std::map<std::string, std::string> metadata;
  std::string source_path;   // the file it came from (empty for bytes)
  std::string source_hash;   // sha-256 hex of the file's bytes
};

}  // namespace kiln::ir
