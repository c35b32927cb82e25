// onnx/functions.h — inlining of model-local functions (ModelProto.functions) at the protobuf level.
//
// Internal to the importer. A call is a node whose (domain, op_type, overload) names a FunctionProto
// of the model. Its body is copied with fresh value names, formal inputs/outputs bound to the
// call's values, and attribute references (ref_attr_name) replaced by the call's attributes or the
// function's defaults. Calls inside bodies are inlined recursively; recursion is refused.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/status.h"
#include "onnx/onnx.pb.h"

namespace kiln::onnx {

using OpsetMap = std::map<std::string, int>;

// One node of a graph after inlining: the original node, or an owned rewritten copy.
struct FlatNode {
  const ::onnx::NodeProto* node = nullptr;
  std::shared_ptr<const ::onnx::NodeProto> owned;  // keeps `node` alive when it is a copy
  const OpsetMap* opsets = nullptr;                // a function's opset_import; null: the graph's
};

// "" for ai.onnx, whichever way it is spelled.
inline std::string normalize_domain(const std::string& d) { return d == "ai.onnx" ? std::string() : d; }

class FunctionInliner {
 public:
  // Indexes the model's functions and the value names already used in the model.
  // `source` prefixes error messages.
  Status init(const ::onnx::ModelProto& model, const std::string& source);
  // The opset imports of every function (normalized domains), for checks and merging.
  std::vector<const OpsetMap*> function_opsets() const;
  // Appends the nodes of a graph to `out`, inlining every call to a model-local function.
  // `where` names the graph in errors. Attributes with ref_attr_name are refused here (they are
  // only valid inside function bodies).
  Status expand(const google::protobuf::RepeatedPtrField<::onnx::NodeProto>& nodes, const std::string& where,
                std::vector<FlatNode>& out);

 private:
  struct Function {
    const ::onnx::FunctionProto* proto = nullptr;
    OpsetMap opsets;
    std::string display;  // "domain.name"
  };
  using AttrMap = std::map<std::string, const ::onnx::AttributeProto*>;

  const Function* find(const ::onnx::NodeProto& n) const;
  Status inline_call(const ::onnx::NodeProto& call, const Function& fn, std::vector<const Function*>& stack,
                     std::vector<FlatNode>& out);
  Status substitute_attrs(::onnx::NodeProto& node, const AttrMap& attrs, const std::map<std::string, std::string>& rename,
                          const std::string& where);
  Status rewrite_subgraph(::onnx::GraphProto& g, std::map<std::string, std::string> rename, const AttrMap& attrs,
                          const std::string& where);
  std::string fresh(const std::string& base);

  std::string source_;
  std::map<std::tuple<std::string, std::string, std::string>, Function> functions_;
  std::set<std::string> used_names_;
  size_t inlined_nodes_ = 0;
  size_t calls_ = 0;
};

}  // namespace kiln::onnx
