#include "backends/kernel.h"

#include "ops/params_nn.h"

namespace kiln {

Status Kernel::reshape(ReshapeContext&) const { return unsupported("kernel plans through its op's shape function"); }
std::vector<std::string> Kernel::tactics(const ReshapeContext&) const { return {}; }

Status AdHocShapes::prepare(const Kernel& k, const KernelContext& ctx,
                            const std::function<Expected<std::shared_ptr<Storage>>(size_t)>& alloc,
                            const std::string& tactic) {
  if (!k.has_reshape()) return Status::Ok();
  ReshapeContext rc{ctx.node(), {}, {}, nullptr, 0, nullptr, tactic, {}, -1};
  rc.in.resize(static_cast<size_t>(ctx.num_inputs()));
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i) || ctx.input_slot(i).kind != Slot::Kind::kTensor) continue;
    const Tensor& t = ctx.input(i);
    rc.in[i].present = true;
    rc.in[i].dtype = t.dtype();
    rc.in[i].shape = t.shape();
    rc.in[i].value = t.device().is_cpu() ? &t : nullptr;
  }
  rc.out.resize(static_cast<size_t>(ctx.num_outputs()));
  rc.device_state = ctx.device_state();
  KILN_RETURN_IF_ERROR(k.reshape(rc));
  out = std::move(rc.out);
  state = std::move(rc.state);
  share_input = rc.share_input;
  workspace.reset();
  if (rc.workspace_bytes) {
    KILN_ASSIGN_OR_RETURN(workspace, alloc(rc.workspace_bytes));
  }
  return Status::Ok();
}

void KernelRegistry::add(KernelDef def) { defs_.push_back(std::move(def)); }

namespace {
std::string node_domain(const ir::Node& node) { return node.domain == "ai.onnx" ? "" : node.domain; }
}  // namespace

std::string KernelDef::rejects(const ir::Node& node) const {
  if (op != node.op_type || domain != node_domain(node)) return "it is for op " + (domain.empty() ? "" : domain + ".") + op;
  if (node.opset && (node.opset < since || node.opset > until))
    return "opset " + std::to_string(node.opset) + " outside [" + std::to_string(since) + "," + std::to_string(until) + "]";
  if (unavailable)
    if (std::string why = unavailable(); !why.empty()) return why;
  return check ? check(node) : std::string();
}

const KernelDef* KernelRegistry::find(const ir::Node& node, std::string* why) const {
  const std::string domain = node_domain(node);
  const KernelDef* best = nullptr;
  for (const KernelDef& d : defs_) {
    if (d.op != node.op_type || d.domain != domain) continue;
    if (best && d.priority <= best->priority) continue;  // registration order breaks ties
    const std::string reason = d.rejects(node);
    if (!reason.empty()) {
      if (why) *why += d.name + ": " + reason + "; ";
      continue;
    }
    best = &d;
  }
  return best;
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

std::string fp8_product_check(const ir::Node& product, DataType) {
  if (!product.has_input(1) || !product.inputs[1]->is_constant() || product.inputs[1]->constant->shape().size() != 2)
    return "FP8 products need constant 2-D weights";
  const Shape& w = product.inputs[1]->constant->shape();
  const bool trans_b = product.op_type == "Gemm" && ops::parse_gemm(product).trans_b;  // W stored [N, K]
  const int64_t k = trans_b ? w[1] : w[0], n = trans_b ? w[0] : w[1];
  if (k <= 0 || n <= 0 || k % 16 != 0 || n % 16 != 0) return "FP8 products need K and N positive and divisible by 16";
  return "";
}

}  // namespace kiln
