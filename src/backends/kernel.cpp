#include "backends/kernel.h"

namespace kiln {

void KernelRegistry::add(KernelDef def) { defs_.push_back(std::move(def)); }

const KernelDef* KernelRegistry::find(const ir::Node& node, std::string* why) const {
  const std::string domain = node.domain == "ai.onnx" ? "" : node.domain;
  for (const KernelDef& d : defs_) {
    if (d.op != node.op_type || d.domain != domain) continue;
    if (node.opset && (node.opset < d.since || node.opset > d.until)) {
      if (why) *why += d.name + ": opset " + std::to_string(node.opset) + " outside [" + std::to_string(d.since) +
                       "," + std::to_string(d.until) + "]; ";
      continue;
    }
    if (d.check) {
      std::string reason = d.check(node);
      if (!reason.empty()) {
        if (why) *why += d.name + ": " + reason + "; ";
        continue;
      }
    }
    return &d;
  }
  return nullptr;
}

const KernelDef* KernelRegistry::by_name(const std::string& name) const {
  for (const KernelDef& d : defs_)
    if (d.name == name) return &d;
  return nullptr;
}

std::string require_dtypes(const ir::Node& n, int input, std::initializer_list<DataType> allowed) {
  if (!n.has_input(input)) return "";
  const ir::Type& t = n.inputs[input]->type;
  if (!t.is_tensor() || t.dtype == DataType::kUndefined) return "";
  for (DataType d : allowed)
    if (d == t.dtype) return "";
  return std::string("input ") + std::to_string(input) + " has dtype " + dtype_name(t.dtype) + " which it does not take";
}

}  // namespace kiln
