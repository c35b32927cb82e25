#include "ir/graph.h"

#include <algorithm>
#include <set>
#include <unordered_set>
#include <sstream>

namespace kiln::ir {

std::string Dim::to_string() const {
  if (is_static()) return std::to_string(value);
  return symbol.empty() ? "?" : symbol;
}

SymShape SymShape::of(const Shape& s) {
  std::vector<Dim> d(s.begin(), s.end());
  return SymShape(std::move(d));
}

bool SymShape::is_static() const {
  if (!known) return false;
  for (const auto& d : dims) if (!d.is_static()) return false;
  return true;
}

Shape SymShape::to_static() const {
  Shape s;
  for (const auto& d : dims) s.push_back(d.value);
  return s;
}

std::string SymShape::to_string() const {
  if (!known) return "[*]";
  std::string r = "[";
  for (size_t i = 0; i < dims.size(); ++i) r += (i ? "," : "") + dims[i].to_string();
  return r + "]";
}

std::string Type::to_string() const {
  switch (kind) {
    case Kind::kTensor: return std::string(dtype_name(dtype)) + shape.to_string();
    case Kind::kSequence: return "seq(" + (elem ? elem->to_string() : "?") + ")";
    case Kind::kOptional: return "optional(" + (elem ? elem->to_string() : "?") + ")";
    case Kind::kMap: return "map(" + std::string(dtype_name(key_dtype)) + "," + (elem ? elem->to_string() : "?") + ")";
    case Kind::kUnknown: return "?";
  }
  return "?";
}

std::string Attribute::to_string() const {
  std::ostringstream os;
  auto list = [&](const auto& v) {
    os << "[";
    for (size_t k = 0; k < v.size(); ++k) os << (k ? "," : "") << v[k];
    os << "]";
  };
  switch (kind) {
    case Kind::kFloat: os << f; break;
    case Kind::kInt: os << i; break;
    case Kind::kString: os << '"' << s << '"'; break;
    case Kind::kTensor: os << "tensor<" << dtype_name(t.dtype()) << shape_to_string(t.shape()) << ">"; break;
    case Kind::kSparseTensor: os << "sparse_tensor"; break;
    case Kind::kGraph: os << "graph(" << (g ? g->name : "") << ")"; break;
    case Kind::kFloats: list(floats); break;
    case Kind::kInts: list(ints); break;
    case Kind::kStrings: list(strings); break;
    case Kind::kTensors: os << "tensors[" << tensors.size() << "]"; break;
    case Kind::kGraphs: os << "graphs[" << graphs.size() << "]"; break;
    case Kind::kTypeProto: os << (types.empty() ? "type" : types[0].to_string()); break;
    case Kind::kTypeProtos: os << "types[" << types.size() << "]"; break;
  }
  return os.str();
}

const Attribute* Node::attr(const std::string& key) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? nullptr : &it->second;
}
int64_t Node::attr_int(const std::string& key, int64_t dflt) const {
  const Attribute* a = attr(key);
  return a ? a->i : dflt;
}
float Node::attr_float(const std::string& key, float dflt) const {
  const Attribute* a = attr(key);
  return a ? a->f : dflt;
}
std::string Node::attr_string(const std::string& key, const std::string& dflt) const {
  const Attribute* a = attr(key);
  return a ? a->s : dflt;
}
std::vector<int64_t> Node::attr_ints(const std::string& key, std::vector<int64_t> dflt) const {
  const Attribute* a = attr(key);
  return a ? a->ints : dflt;
}
std::vector<float> Node::attr_floats(const std::string& key, std::vector<float> dflt) const {
  const Attribute* a = attr(key);
  return a ? a->floats : dflt;
}
bool Node::has_subgraphs() const {
  for (const auto& [k, a] : attrs)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

std::string Node::describe() const {
  std::string d = domain.empty() ? op_type : domain + "." + op_type;
  return "node '" + name + "' (" + d + ")";
}

Value* Graph::add_value(const std::string& name, Type type) {
  auto v = std::make_unique<Value>();
  v->name = name;
  v->type = std::move(type);
  Value* raw = v.get();
  value_store_.push_back(std::move(v));
  values_[name] = raw;
  return raw;
}

Value* Graph::new_value(const std::string& hint, Type type) {
  std::string name;
  do {
    name = hint + "__" + std::to_string(fresh_++);
  } while (values_.count(name));
  return add_value(name, std::move(type));
}

Value* Graph::find_value(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : it->second;
}

Node* Graph::add_node(const std::string& op_type, const std::string& domain, std::vector<Value*> ins,
                      std::vector<Value*> outs, const std::string& name) {
  auto n = std::make_unique<Node>();
  n->op_type = op_type;
  n->domain = domain;
  n->name = name.empty() ? op_type + "_" + std::to_string(node_store_.size()) : name;
  auto it = opsets.find(domain == "ai.onnx" ? "" : domain);
  n->opset = it == opsets.end() ? 0 : it->second;
  n->inputs = std::move(ins);
  n->outputs = std::move(outs);
  Node* raw = n.get();
  raw->use_index.assign(raw->inputs.size(), 0);
  for (size_t i = 0; i < raw->inputs.size(); ++i)
    if (raw->inputs[i]) {
      raw->use_index[i] = raw->inputs[i]->uses.size();
      raw->inputs[i]->uses.push_back({raw, static_cast<int>(i)});
    }
  for (size_t i = 0; i < raw->outputs.size(); ++i)
    if (raw->outputs[i]) {
      raw->outputs[i]->producer = raw;
      raw->outputs[i]->producer_output = static_cast<int>(i);
    }
  node_store_.push_back(std::move(n));
  order_.push_back(raw);
  return raw;
}

// Records where use (n, index) sits in its value's use list.
static void note_use_position(const Use& u, size_t pos) {
  if (u.node->use_index.size() <= static_cast<size_t>(u.input_index)) u.node->use_index.resize(u.input_index + 1, 0);
  u.node->use_index[u.input_index] = pos;
}

// O(1): the last use moves into the removed one's place. (Falls back to a search when the index is
// stale, e.g. after a pass edited `inputs` directly.)
static void drop_use(Value* v, Node* n, int index) {
  auto& u = v->uses;
  size_t p = static_cast<size_t>(index) < n->use_index.size() ? n->use_index[index] : u.size();
  if (p >= u.size() || u[p].node != n || u[p].input_index != index) {
    p = 0;
    while (p < u.size() && (u[p].node != n || u[p].input_index != index)) ++p;
    if (p == u.size()) return;
  }
  if (p + 1 != u.size()) {
    u[p] = u.back();
    note_use_position(u[p], p);
  }
  u.pop_back();
}

void Graph::set_input(Node* n, int index, Value* v) {
  if (n->inputs[index]) drop_use(n->inputs[index], n, index);
  n->inputs[index] = v;
  if (v) {
    note_use_position({n, index}, v->uses.size());
    v->uses.push_back({n, index});
  }
}

void Graph::set_output(Node* n, int index, Value* v) {
  Value* old = n->outputs[index];
  if (old && old != v && old->producer == n) {
    old->producer = nullptr;
    old->producer_output = -1;
  }
  n->outputs[index] = v;
  v->producer = n;
  v->producer_output = index;
}

void Graph::remove_node(Node* n) {
  if (n->removed) return;
  for (size_t i = 0; i < n->inputs.size(); ++i)
    if (n->inputs[i]) drop_use(n->inputs[i], n, static_cast<int>(i));
  for (Value* o : n->outputs)
    if (o && o->producer == n) o->producer = nullptr;
  n->removed = true;
  ++removed_;
}

void Graph::compact() const {
  order_.erase(std::remove_if(order_.begin(), order_.end(), [](const Node* n) { return n->removed; }), order_.end());
  node_store_.erase(std::remove_if(node_store_.begin(), node_store_.end(),
                                   [](const std::unique_ptr<Node>& p) { return p->removed; }),
                    node_store_.end());
  removed_ = 0;
}

void Graph::replace_all_uses(Value* from, Value* to) {
  auto uses = from->uses;
  for (const Use& u : uses) set_input(u.node, u.input_index, to);
  for (auto& o : outputs)
    if (o == from) {
      o = to;
      to->is_output = true;
    }
  if (std::find(outputs.begin(), outputs.end(), from) == outputs.end()) from->is_output = false;
}

static void graph_reads(const Graph& g, std::set<std::string>& names);
static void node_reads(const Node& n, std::set<std::string>& names) {
  for (const auto& [k, a] : n.attrs) {
    if (a.g) graph_reads(*a.g, names);
    for (const auto& sub : a.graphs) graph_reads(*sub, names);
  }
}
// What `g` reads from outside itself: its captures, and what its nested subgraphs read that `g`
// does not define.
static void graph_reads(const Graph& g, std::set<std::string>& names) {
  for (const Value* v : g.captures) names.insert(v->name);
  std::set<std::string> nested;
  for (const Node* n : g.nodes()) node_reads(*n, nested);
  for (const std::string& name : nested) {
    const Value* v = g.find_value(name);
    if (!v || v->is_capture) names.insert(name);
  }
}

std::set<std::string> names_read_by_subgraphs(const Graph& g) {
  std::set<std::string> names;
  for (const Node* n : g.nodes()) node_reads(*n, names);
  return names;
}

void Graph::remove_dead_values() {
  const std::set<std::string> read_inside = names_read_by_subgraphs(*this);
  std::set<Value*> keep(inputs.begin(), inputs.end());
  keep.insert(outputs.begin(), outputs.end());
  keep.insert(captures.begin(), captures.end());
  std::vector<std::unique_ptr<Value>> kept;
  for (auto& v : value_store_) {
    if (keep.count(v.get()) || v->producer || !v->uses.empty() || read_inside.count(v->name)) {
      kept.push_back(std::move(v));
    } else {
      values_.erase(v->name);
    }
  }
  value_store_ = std::move(kept);
}

std::vector<Value*> Graph::values() const {
  std::vector<Value*> r;
  for (auto& v : value_store_) r.push_back(v.get());
  return r;
}

Status Graph::sort() {
  compact();
  // Kahn's algorithm, stable with respect to the current order.
  std::map<Node*, int> pending;
  std::map<Node*, size_t> position;
  for (size_t i = 0; i < order_.size(); ++i) position[order_[i]] = i;
  // A node's subgraphs read values of this graph by name (no `uses` entry): their producers come first too.
  std::map<Node*, std::vector<Node*>> readers_by_name;
  for (Node* n : order_) {
    int k = 0;
    for (Value* v : n->inputs)
      if (v && v->producer && position.count(v->producer)) ++k;
    if (n->has_subgraphs()) {
      std::set<std::string> read;
      node_reads(*n, read);
      for (const std::string& name : read) {
        const Value* v = find_value(name);
        if (v && v->producer && v->producer != n && position.count(v->producer)) {
          readers_by_name[v->producer].push_back(n);
          ++k;
        }
      }
    }
    pending[n] = k;
  }
  std::set<std::pair<size_t, Node*>> ready;
  for (Node* n : order_)
    if (pending[n] == 0) ready.insert({position[n], n});
  std::vector<Node*> sorted;
  while (!ready.empty()) {
    Node* n = ready.begin()->second;
    ready.erase(ready.begin());
    sorted.push_back(n);
    for (Value* o : n->outputs) {
      if (!o) continue;
      for (const Use& u : o->uses)
        if (position.count(u.node) && --pending[u.node] == 0) ready.insert({position[u.node], u.node});
    }
    if (auto it = readers_by_name.find(n); it != readers_by_name.end())
      for (Node* r : it->second)
        if (--pending[r] == 0) ready.insert({position[r], r});
  }
  if (sorted.size() != order_.size()) {
    const std::set<Node*> done(sorted.begin(), sorted.end());
    for (Node* n : order_) {
      if (pending[n] == 0) continue;
      std::string read_later;  // names its subgraphs read that are made after it (or by it)
      if (n->has_subgraphs()) {
        std::set<std::string> read;
        node_reads(*n, read);
        for (const std::string& r : read)
          if (const Value* v = find_value(r); v && v->producer && !done.count(v->producer))
            read_later += (read_later.empty() ? "" : ", ") + ("'" + r + "'");
      }
      return invalid_model("graph '" + name + "' has a cycle through " + n->describe() +
                           (read_later.empty() ? "" : " (its subgraphs read " + read_later + ", which depend on it)"));
    }
  }
  order_ = std::move(sorted);
  return Status::Ok();
}

Status Graph::verify() const {
  // Linear in nodes + uses: every (node, input) slot must appear in its value's use list, and every
  // listed use must be such a slot (so the counts agree).
  std::unordered_set<const Node*> seen;
  size_t slots = 0;
  for (const Node* n : nodes()) {
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Value* v = n->inputs[i];
      if (!v) continue;
      if (v->producer && !seen.count(v->producer))
        return invalid_model(n->describe() + ": input '" + v->name + "' is used before it is produced");
      if (!v->producer && !v->is_input && !v->constant && !v->is_capture)
        return invalid_model(n->describe() + ": input '" + v->name +
                             "' is not produced by any node, nor a graph input or initializer");
      const size_t p = i < n->use_index.size() ? n->use_index[i] : v->uses.size();
      if (p >= v->uses.size() || v->uses[p].node != n || v->uses[p].input_index != static_cast<int>(i))
        return internal_error(n->describe() + ": use list of '" + v->name + "' is stale");
      ++slots;
    }
    for (const Value* o : n->outputs)
      if (o && o->producer != n) return internal_error(n->describe() + ": producer of '" + o->name + "' is stale");
    seen.insert(n);
  }
  size_t listed = 0;
  for (const auto& v : value_store_) listed += v->uses.size();
  if (listed != slots) return internal_error("graph '" + name + "': use lists hold " + std::to_string(listed) +
                                             " uses for " + std::to_string(slots) + " node inputs");
  for (const Value* o : outputs) {
    if (!o) return invalid_model("graph '" + name + "': an output is missing");
    if (!o->producer && !o->is_input && !o->constant && !o->is_capture)
      return invalid_model("graph '" + name + "': output '" + o->name + "' is never produced");
  }
  return Status::Ok();
}

std::string Graph::to_string() const {
  std::ostringstream os;
  os << "graph " << name << " (";
  for (size_t i = 0; i < inputs.size(); ++i) os << (i ? ", " : "") << inputs[i]->name << ": " << inputs[i]->type.to_string();
  os << ") {\n";
  for (const Node* n : nodes()) {
    os << "  ";
    for (size_t i = 0; i < n->outputs.size(); ++i)
      os << (i ? ", " : "") << (n->outputs[i] ? n->outputs[i]->name + ": " + n->outputs[i]->type.to_string() : "_");
    os << " = " << (n->domain.empty() ? "" : n->domain + ".") << n->op_type;
    if (!n->attrs.empty()) {
      os << "<";
      bool first = true;
      for (const auto& [k, a] : n->attrs) {
        os << (first ? "" : ", ") << k << "=" << a.to_string();
        first = false;
      }
      os << ">";
    }
    os << "(";
    for (size_t i = 0; i < n->inputs.size(); ++i) os << (i ? ", " : "") << (n->inputs[i] ? n->inputs[i]->name : "_");
    os << ")  # " << n->name << "\n";
  }
  os << "  return ";
  for (size_t i = 0; i < outputs.size(); ++i) os << (i ? ", " : "") << outputs[i]->name;
  os << "\n}\n";
  return os.str();
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>();
  g->name = name;
  g->opsets = opsets;
  g->fresh_ = fresh_;
  std::map<const Value*, Value*> vmap;
  for (const auto& v : value_store_) {
    Value* c = g->add_value(v->name, v->type);
    c->constant = v->constant;
    c->is_input = v->is_input;
    c->is_output = v->is_output;
    c->is_capture = v->is_capture;
    vmap[v.get()] = c;
  }
  for (const Node* n : nodes()) {
    std::vector<Value*> ins, outs;
    for (Value* v : n->inputs) ins.push_back(v ? vmap.at(v) : nullptr);
    for (Value* v : n->outputs) outs.push_back(v ? vmap.at(v) : nullptr);
    Node* c = g->add_node(n->op_type, n->domain, ins, outs, n->name);
    c->opset = n->opset;
    c->attrs = n->attrs;
    for (auto& [k, a] : c->attrs) {
      if (a.g) {
        a.g = std::shared_ptr<Graph>(a.g->clone());
        a.g->parent = g.get();
      }
      for (auto& sg : a.graphs) {
        sg = std::shared_ptr<Graph>(sg->clone());
        sg->parent = g.get();
      }
    }
  }
  for (Value* v : inputs) g->inputs.push_back(vmap.at(v));
  for (Value* v : outputs) g->outputs.push_back(vmap.at(v));
  for (Value* v : captures) g->captures.push_back(vmap.at(v));
  return g;
}

}  // namespace kiln::ir
