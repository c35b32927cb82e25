#include "onnx/functions.h"

namespace kiln::onnx {

namespace {

// Inlining larger than this is refused (it would only come from a hostile or runaway model).
constexpr size_t kMaxInlinedNodes = size_t{1} << 22;
constexpr size_t kMaxCallDepth = 64;

void collect_names(const ::onnx::GraphProto& g, std::set<std::string>& names) {
  for (const auto& v : g.input()) names.insert(v.name());
  for (const auto& v : g.output()) names.insert(v.name());
  for (const auto& v : g.value_info()) names.insert(v.name());
  for (const auto& t : g.initializer()) names.insert(t.name());
  for (const auto& s : g.sparse_initializer()) names.insert(s.values().name());
  for (const auto& n : g.node()) {
    names.insert(n.input().begin(), n.input().end());
    names.insert(n.output().begin(), n.output().end());
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_names(a.g(), names);
      for (const auto& sg : a.graphs()) collect_names(sg, names);
    }
  }
}

std::string describe(const ::onnx::NodeProto& n) {
  const std::string d = normalize_domain(n.domain());
  return "node '" + n.name() + "' (" + (d.empty() ? n.op_type() : d + "." + n.op_type()) + ")";
}

}  // namespace

Status FunctionInliner::init(const ::onnx::ModelProto& model, const std::string& source) {
  source_ = source;
  for (const auto& f : model.functions()) {
    Function fn;
    fn.proto = &f;
    const std::string domain = normalize_domain(f.domain());
    fn.display = domain.empty() ? f.name() : domain + "." + f.name();
    if (f.name().empty()) return invalid_model(source + ": a model-local function has no name");
    for (const auto& o : f.opset_import()) {
      if (o.version() < 1 || o.version() > 1'000'000)
        return invalid_model(source + ": function '" + fn.display + "' imports opset " + std::to_string(o.version()) +
                             " of domain '" + o.domain() + "'");
      fn.opsets[normalize_domain(o.domain())] = static_cast<int>(o.version());
    }
    auto key = std::make_tuple(domain, f.name(), f.overload());
    if (functions_.count(key)) return invalid_model(source + ": function '" + fn.display + "' is defined twice");
    functions_.emplace(std::move(key), std::move(fn));
  }
  if (!functions_.empty() && model.has_graph()) collect_names(model.graph(), used_names_);
  return Status::Ok();
}

std::vector<const OpsetMap*> FunctionInliner::function_opsets() const {
  std::vector<const OpsetMap*> r;
  for (const auto& [k, f] : functions_) r.push_back(&f.opsets);
  return r;
}

const FunctionInliner::Function* FunctionInliner::find(const ::onnx::NodeProto& n) const {
  if (functions_.empty()) return nullptr;
  auto it = functions_.find(std::make_tuple(normalize_domain(n.domain()), n.op_type(), n.overload()));
  return it == functions_.end() ? nullptr : &it->second;
}

std::string FunctionInliner::fresh(const std::string& base) {
  std::string name = base;
  for (int k = 1; used_names_.count(name); ++k) name = base + "_" + std::to_string(k);
  used_names_.insert(name);
  return name;
}

Status FunctionInliner::expand(const google::protobuf::RepeatedPtrField<::onnx::NodeProto>& nodes,
                               const std::string& where, std::vector<FlatNode>& out) {
  for (const auto& n : nodes) {
    for (const auto& a : n.attribute())
      if (!a.ref_attr_name().empty())
        return invalid_model(where + ": " + describe(n) + ": attribute '" + a.name() + "' refers to '" +
                             a.ref_attr_name() + "', but attribute references are only valid inside a function");
    if (const Function* fn = find(n)) {
      std::vector<const Function*> stack;
      KILN_RETURN_IF_ERROR(inline_call(n, *fn, stack, out));
    } else {
      out.push_back({&n, nullptr, nullptr});
    }
  }
  return Status::Ok();
}

Status FunctionInliner::inline_call(const ::onnx::NodeProto& call, const Function& fn,
                                    std::vector<const Function*>& stack, std::vector<FlatNode>& out) {
  const ::onnx::FunctionProto& fp = *fn.proto;
  const std::string where = source_ + ": " + describe(call) + " calling function '" + fn.display + "'";
  for (const Function* s : stack)
    if (s == &fn) return invalid_model(where + ": the function calls itself (recursion cannot be inlined)");
  if (stack.size() >= kMaxCallDepth) return invalid_model(where + ": function calls nest too deeply");
  if (call.input_size() > fp.input_size() || call.output_size() > fp.output_size())
    return invalid_model(where + ": called with " + std::to_string(call.input_size()) + " inputs and " +
                         std::to_string(call.output_size()) + " outputs; the function takes " +
                         std::to_string(fp.input_size()) + " and " + std::to_string(fp.output_size()));
  const std::string prefix = (call.name().empty() ? fp.name() : call.name()) + "#" + std::to_string(calls_++);

  // Bind formal names to the call's values; give names made inside the body fresh ones.
  std::map<std::string, std::string> rename;
  std::set<std::string> formal_inputs;
  for (int i = 0; i < fp.input_size(); ++i) {
    if (fp.input(i).empty()) continue;
    rename[fp.input(i)] = i < call.input_size() ? call.input(i) : std::string();
    formal_inputs.insert(fp.input(i));
  }
  std::set<std::string> produced;
  for (const auto& bn : fp.node())
    for (const auto& o : bn.output()) {
      if (o.empty()) continue;
      if (formal_inputs.count(o)) return invalid_model(where + ": body node redefines the function input '" + o + "'");
      if (!produced.insert(o).second) return invalid_model(where + ": '" + o + "' is produced twice in the body");
    }
  std::vector<std::pair<std::string, std::string>> passthrough;  // formal output that is a formal input
  for (int i = 0; i < fp.output_size(); ++i) {
    const std::string& formal = fp.output(i);
    const bool bound = i < call.output_size() && !call.output(i).empty();
    const std::string actual = bound ? call.output(i) : fresh(prefix + "/" + formal);
    if (formal_inputs.count(formal)) {
      passthrough.emplace_back(rename[formal], actual);
      continue;
    }
    if (!produced.count(formal)) return invalid_model(where + ": function output '" + formal + "' is never produced");
    rename[formal] = actual;
  }
  for (const std::string& o : produced)
    if (!rename.count(o)) rename[o] = fresh(prefix + "/" + o);

  // Attribute values: the call's, then the function's defaults.
  AttrMap attrs;
  for (const auto& a : call.attribute()) attrs[a.name()] = &a;
  for (const auto& a : fp.attribute_proto()) attrs.emplace(a.name(), &a);

  stack.push_back(&fn);
  for (int k = 0; k < fp.node_size(); ++k) {
    const auto& bn = fp.node(k);
    auto copy = std::make_shared<::onnx::NodeProto>(bn);
    copy->set_name(prefix + "/" + (bn.name().empty() ? bn.op_type() + "_" + std::to_string(k) : bn.name()));
    for (int i = 0; i < copy->input_size(); ++i) {
      const std::string& in = copy->input(i);
      if (in.empty()) continue;
      auto it = rename.find(in);
      if (it == rename.end())
        return invalid_model(where + ": body node '" + bn.name() + "' (" + bn.op_type() + ") uses '" + in +
                             "', which is neither a function input nor produced inside the function");
      copy->set_input(i, it->second);
    }
    for (int i = 0; i < copy->output_size(); ++i)
      if (!copy->output(i).empty()) copy->set_output(i, rename.at(copy->output(i)));
    KILN_RETURN_IF_ERROR(substitute_attrs(*copy, attrs, rename, where));
    if (++inlined_nodes_ > kMaxInlinedNodes) return invalid_model(where + ": function inlining grows too large");
    if (const Function* inner = find(*copy)) {
      KILN_RETURN_IF_ERROR(inline_call(*copy, *inner, stack, out));
    } else {
      out.push_back({copy.get(), copy, &fn.opsets});
    }
  }
  stack.pop_back();

  for (const auto& [from, to] : passthrough) {
    auto id = std::make_shared<::onnx::NodeProto>();
    id->set_op_type("Identity");
    id->set_name(prefix + "/" + to);
    id->add_input(from);
    id->add_output(to);
    out.push_back({id.get(), id, nullptr});
  }
  return Status::Ok();
}

Status FunctionInliner::substitute_attrs(::onnx::NodeProto& node, const AttrMap& attrs,
                                         const std::map<std::string, std::string>& rename, const std::string& where) {
  google::protobuf::RepeatedPtrField<::onnx::AttributeProto> result;
  for (const auto& a : node.attribute()) {
    if (a.ref_attr_name().empty()) {
      ::onnx::AttributeProto* c = result.Add();
      *c = a;
      // Subgraphs written in the body see the body's names and attributes.
      if (c->has_g()) KILN_RETURN_IF_ERROR(rewrite_subgraph(*c->mutable_g(), rename, attrs, where));
      for (auto& g : *c->mutable_graphs()) KILN_RETURN_IF_ERROR(rewrite_subgraph(g, rename, attrs, where));
      continue;
    }
    auto it = attrs.find(a.ref_attr_name());
    if (it == attrs.end()) continue;  // not given and no default: the attribute is absent
    ::onnx::AttributeProto* c = result.Add();
    *c = *it->second;  // a caller's value: already in the caller's names
    c->set_name(a.name());
    c->clear_ref_attr_name();
  }
  node.mutable_attribute()->Swap(&result);
  return Status::Ok();
}

Status FunctionInliner::rewrite_subgraph(::onnx::GraphProto& g, std::map<std::string, std::string> rename,
                                         const AttrMap& attrs, const std::string& where) {
  // Names the subgraph defines itself shadow the function's.
  for (const auto& v : g.input()) rename.erase(v.name());
  for (const auto& t : g.initializer()) rename.erase(t.name());
  for (const auto& s : g.sparse_initializer()) rename.erase(s.values().name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) rename.erase(o);
  for (auto& n : *g.mutable_node()) {
    for (int i = 0; i < n.input_size(); ++i) {
      auto it = rename.find(n.input(i));
      if (it != rename.end()) n.set_input(i, it->second);
    }
    KILN_RETURN_IF_ERROR(substitute_attrs(n, attrs, rename, where));
  }
  for (auto& o : *g.mutable_output()) {
    auto it = rename.find(o.name());
    if (it != rename.end()) o.set_name(it->second);
  }
  return Status::Ok();
}

}  // namespace kiln::onnx
