// plugins/plugin_kernel.cpp — a plugin op seen through kiln's own contracts: its op-table entry (typed
// attributes, counts, a shape function calling the plugin's infer) and its kernel row (create, tactics,
// reshape, run calling the plugin's kernel). Every value a plugin returns is checked here; a failing
// callback becomes an error naming the node, the plugin and the callback.
#include <array>
#include <cstring>
#include <memory>
#include <mutex>

#include "backends/kernel.h"
#include "ops/op_table.h"
#include "plugins/plugins.h"

namespace kiln::plugins {

namespace {

constexpr int kMaxArity = 64;  // what plugins/loader.cpp allows an op to declare

// A message buffer for one callback.
struct ErrorBuffer {
  char text[1024] = {0};
  KilnError err{text, sizeof(text)};
  ErrorBuffer() = default;
  ErrorBuffer(const ErrorBuffer&) = delete;
};

Status callback_failed(const PluginOp& op, const char* callback, int32_t code, const ErrorBuffer& e) {
  std::string m = op.label + ": " + callback + " failed";
  m += e.text[0] ? ": " + std::string(e.text, strnlen(e.text, sizeof(e.text))) : " (status " + std::to_string(code) + ", no message)";
  if (code == KILN_STATUS_INVALID_ARGUMENT) return invalid_argument(m);
  if (code == KILN_STATUS_UNSUPPORTED) return unsupported(m);
  return runtime_error(m);
}

// A build-time type as the plugin sees it (unknown parts: dtype UNDEFINED, rank -1, dim -1).
Status to_plugin_type(const ir::Type* t, KilnTensorType& out, const PluginOp& op, size_t i) {
  out.dtype = KILN_DTYPE_UNDEFINED;
  out.rank = -1;
  if (!t || !t->is_tensor()) return Status::Ok();
  const int32_t code = static_cast<int32_t>(t->dtype);
  if (t->dtype != DataType::kUndefined && !plugin_dtype_ok(code))
    return unsupported(op.label + ": input " + std::to_string(i) + " has dtype " + dtype_name(t->dtype) +
                       ", which the plugin ABI does not pass");
  out.dtype = code;
  if (!t->shape.known) return Status::Ok();
  if (t->shape.rank() > KILN_PLUGIN_MAX_RANK)
    return unsupported(op.label + ": input " + std::to_string(i) + " has rank " + std::to_string(t->shape.rank()) +
                       ", above the plugin ABI's " + std::to_string(KILN_PLUGIN_MAX_RANK));
  out.rank = t->shape.rank();
  for (int d = 0; d < out.rank; ++d) {
    out.dims[d].value = t->shape.dims[d].value;
    out.dims[d].symbol = t->shape.dims[d].symbol.empty() ? nullptr : t->shape.dims[d].symbol.c_str();
  }
  return Status::Ok();
}

// What the plugin's infer said of one output, checked.
Expected<ir::Type> from_plugin_type(const KilnTensorType& t, const PluginOp& op, size_t i) {
  const std::string who = op.label + ": infer gave output " + std::to_string(i);
  if (t.dtype != KILN_DTYPE_UNDEFINED && !plugin_dtype_ok(t.dtype)) return runtime_error(who + " the unknown dtype code " + std::to_string(t.dtype));
  ir::Type out = ir::Type::tensor(static_cast<DataType>(t.dtype));
  if (t.rank == -1) return out;
  if (t.rank < 0 || t.rank > KILN_PLUGIN_MAX_RANK) return runtime_error(who + " rank " + std::to_string(t.rank));
  std::vector<ir::Dim> dims(static_cast<size_t>(t.rank));
  for (int d = 0; d < t.rank; ++d) {
    if (t.dims[d].value < -1) return runtime_error(who + " dimension " + std::to_string(d) + " = " + std::to_string(t.dims[d].value));
    if (t.dims[d].value >= 0) dims[d] = ir::Dim(t.dims[d].value);
    else if (t.dims[d].symbol && *t.dims[d].symbol) dims[d] = ir::Dim(std::string(t.dims[d].symbol));
  }
  out.shape = ir::SymShape(std::move(dims));
  return out;
}

KilnTensor view_of(const Tensor& t) {
  KilnTensor v;
  v.dtype = static_cast<int32_t>(t.dtype());
  v.rank = static_cast<int32_t>(t.shape().size());
  v.dims = t.shape().data();
  v.data = t.raw();
  return v;
}

KilnTensor absent_tensor() {
  KilnTensor v;
  v.dtype = KILN_DTYPE_UNDEFINED;
  v.rank = -1;
  v.dims = nullptr;
  v.data = nullptr;
  return v;
}

const PluginOp* op_of(const ir::Node& n) { return find(n.domain, n.op_type); }

// The op table's shape function of every plugin op.
Status infer_plugin_node(ops::InferContext& ctx) {
  const PluginOp* op = op_of(ctx.node);
  if (!op) return ctx.error("no loaded plugin declares this op");
  const size_t n = ctx.in.size(), m = ctx.out.size();
  std::vector<KilnTensorType> in(n), out(m);
  std::vector<KilnTensor> values(n);
  std::vector<const KilnTensor*> value_ptrs(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    KILN_RETURN_IF_ERROR(to_plugin_type(ctx.in[i], in[i], *op, i).with_context(ctx.node.describe()));
    if (const Tensor* v = ctx.value(static_cast<int>(i)); v && plugin_dtype_ok(static_cast<int32_t>(v->dtype()))) {
      values[i] = view_of(*v);
      value_ptrs[i] = &values[i];
    }
  }
  for (KilnTensorType& t : out) {
    t.dtype = KILN_DTYPE_UNDEFINED;
    t.rank = -1;
  }
  KilnInferContext c;
  c.struct_size = sizeof(c);
  c.attrs = attributes_of(ctx.node);
  c.num_inputs = static_cast<int32_t>(n);
  c.inputs = in.data();
  c.input_values = value_ptrs.data();
  c.num_outputs = static_cast<int32_t>(m);
  c.outputs = out.data();
  ErrorBuffer e;
  int32_t rc;
  {
    std::lock_guard<std::mutex> one_at_a_time(*op->calls);
    rc = op->def.infer(op->def.op_data, &c, &e.err);
  }
  if (rc != KILN_STATUS_OK) return callback_failed(*op, "infer (its shape function)", rc, e).with_context(ctx.node.describe());
  for (size_t i = 0; i < m; ++i) {
    auto t = from_plugin_type(out[i], *op, i);
    if (!t.ok()) return t.status().with_context(ctx.node.describe());
    ctx.out[i] = std::move(*t);
  }
  return Status::Ok();
}

// A plugin's CPU kernel object behind kiln's Kernel interface.
class PluginKernel final : public Kernel {
 public:
  PluginKernel(const PluginOp& op, void* object) : op_(op), object_(object) {}
  ~PluginKernel() override {
    if (!op_.cpu.destroy) return;
    std::lock_guard<std::mutex> one_at_a_time(*op_.calls);
    op_.cpu.destroy(object_);
  }
  std::vector<std::string> tactics(const ReshapeContext&) const override { return op_.tactics; }
  bool has_reshape() const override { return true; }

  Status reshape(ReshapeContext& rc) const override {
    const size_t n = rc.in.size(), m = rc.out.size();
    if (n > kMaxArity || m > kMaxArity) return rc.error(op_.label + ": more than " + std::to_string(kMaxArity) + " inputs or outputs");
    std::array<KilnTensor, kMaxArity> in;
    for (size_t i = 0; i < n; ++i) {
      const ReshapeContext::In& x = rc.in[i];
      in[i] = absent_tensor();
      if (!x.present) continue;
      if (x.shape.size() > KILN_PLUGIN_MAX_RANK)
        return rc.error(op_.label + ": input " + std::to_string(i) + " has rank above " + std::to_string(KILN_PLUGIN_MAX_RANK));
      in[i].dtype = static_cast<int32_t>(x.dtype);
      in[i].rank = static_cast<int32_t>(x.shape.size());
      in[i].dims = x.shape.data();
      in[i].data = x.value ? x.value->raw() : nullptr;
    }
    std::vector<KilnTensorType> out(m);
    for (KilnTensorType& t : out) {
      t.dtype = KILN_DTYPE_UNDEFINED;
      t.rank = -1;
    }
    KilnReshapeContext c;
    c.struct_size = sizeof(c);
    c.num_inputs = static_cast<int32_t>(n);
    c.inputs = in.data();
    c.num_outputs = static_cast<int32_t>(m);
    c.outputs = out.data();
    c.workspace_bytes = 0;
    c.tactic = 0;
    for (size_t t = 0; t < op_.tactics.size(); ++t)
      if (op_.tactics[t] == rc.tactic) c.tactic = static_cast<int32_t>(t);
    ErrorBuffer e;
    const int32_t status = op_.cpu.reshape(object_, &c, &e.err);
    if (status != KILN_STATUS_OK) return callback_failed(op_, "reshape", status, e).with_context(rc.node.describe());
    for (size_t i = 0; i < m; ++i) {
      const bool used = i < rc.node.outputs.size() && rc.node.outputs[i];
      const KilnTensorType& t = out[i];
      if (!used && t.rank < 0) {
        rc.out[i] = {DataType::kFloat32, Shape{0}};
        continue;
      }
      if (!plugin_dtype_ok(t.dtype) || t.rank < 0 || t.rank > KILN_PLUGIN_MAX_RANK)
        return rc.error(op_.label + ": reshape gave output " + std::to_string(i) + " no valid dtype and rank (dtype " +
                        std::to_string(t.dtype) + ", rank " + std::to_string(t.rank) + ")");
      Shape shape(static_cast<size_t>(t.rank));
      for (int d = 0; d < t.rank; ++d) {
        if (t.dims[d].value < 0)
          return rc.error(op_.label + ": reshape left dimension " + std::to_string(d) + " of output " + std::to_string(i) + " unknown");
        shape[d] = t.dims[d].value;
      }
      if (std::string why = check_tensor_size(static_cast<DataType>(t.dtype), shape); !why.empty())
        return rc.error(op_.label + ": output " + std::to_string(i) + ": " + why);
      // The plan and the steps after this one were made from what infer said: reshape must agree.
      if (used) {
        const ir::Type& planned = rc.node.outputs[i]->type;
        const ir::Type got = ir::Type::tensor(static_cast<DataType>(t.dtype), ir::SymShape::of(shape));
        if (std::string what = ops::type_conflict(planned, got); !what.empty())
          return rc.error(op_.label + ": reshape gave output " + std::to_string(i) + " " + got.to_string() +
                          ", but infer gave " + planned.to_string() + " (" + what + " differs)");
      }
      rc.out[i] = {static_cast<DataType>(t.dtype), std::move(shape)};
    }
    rc.workspace_bytes = c.workspace_bytes;
    rc.state = std::make_shared<int32_t>(c.tactic);
    return Status::Ok();
  }

  Status run(KernelContext& ctx) const override {
    const int n = ctx.num_inputs(), m = ctx.num_outputs();
    if (n > kMaxArity || m > kMaxArity) return ctx.error(op_.label + ": more than " + std::to_string(kMaxArity) + " inputs or outputs");
    std::array<KilnTensor, kMaxArity> in;
    std::array<KilnMutableTensor, kMaxArity> out;
    for (int i = 0; i < n; ++i)
      in[i] = ctx.has_input(i) && ctx.input_slot(i).kind == Slot::Kind::kTensor ? view_of(ctx.input(i)) : absent_tensor();
    for (int i = 0; i < m; ++i) {
      out[i] = {KILN_DTYPE_UNDEFINED, -1, nullptr, nullptr};
      if (!ctx.has_output(i)) continue;
      Tensor& t = ctx.output(i);
      out[i] = {static_cast<int32_t>(t.dtype()), static_cast<int32_t>(t.shape().size()), t.shape().data(), t.raw()};
    }
    KilnRunContext c;
    c.struct_size = sizeof(c);
    c.num_inputs = n;
    c.inputs = in.data();
    c.num_outputs = m;
    c.outputs = out.data();
    c.workspace = ctx.workspace();
    c.tactic = ctx.shape_state() ? *static_cast<const int32_t*>(ctx.shape_state()) : 0;
    c.stream = nullptr;
    ErrorBuffer e;
    const int32_t status = op_.cpu.run(object_, &c, &e.err);
    if (status != KILN_STATUS_OK) return callback_failed(op_, "run", status, e).with_context(ctx.node().describe());
    return Status::Ok();
  }

 private:
  const PluginOp& op_;
  void* object_;
};

Expected<KernelPtr> create_kernel(const PluginOp& op, const ir::Node& n) {
  const size_t count = n.inputs.size();
  std::vector<KilnTensorType> types(count);
  std::vector<KilnTensor> values(count);
  std::vector<const KilnTensor*> constants(count, nullptr);
  for (size_t i = 0; i < count; ++i) {
    const ir::Value* v = n.inputs[i];
    KILN_RETURN_IF_ERROR(to_plugin_type(v ? &v->type : nullptr, types[i], op, i));
    if (v && v->constant && !v->is_input && plugin_dtype_ok(static_cast<int32_t>(v->constant->dtype()))) {
      values[i] = view_of(*v->constant);
      constants[i] = &values[i];
    }
  }
  KilnKernelInit init;
  init.struct_size = sizeof(init);
  init.attrs = attributes_of(n);
  init.num_inputs = static_cast<int32_t>(count);
  init.inputs = types.data();
  init.constants = constants.data();
  init.num_outputs = static_cast<int32_t>(n.outputs.size());
  init.stream = nullptr;
  void* object = nullptr;
  ErrorBuffer e;
  int32_t status;
  {
    std::lock_guard<std::mutex> one_at_a_time(*op.calls);
    status = op.cpu.create(op.def.op_data, &init, &object, &e.err);
  }
  if (status != KILN_STATUS_OK) return callback_failed(op, "create", status, e);
  return KernelPtr(new PluginKernel(op, object));
}

ir::Attribute::Kind attr_kind(int32_t k) {
  switch (k) {
    case KILN_ATTR_FLOAT: return ir::Attribute::Kind::kFloat;
    case KILN_ATTR_STRING: return ir::Attribute::Kind::kString;
    case KILN_ATTR_INTS: return ir::Attribute::Kind::kInts;
    case KILN_ATTR_FLOATS: return ir::Attribute::Kind::kFloats;
    case KILN_ATTR_TENSOR: return ir::Attribute::Kind::kTensor;
    default: return ir::Attribute::Kind::kInt;
  }
}

}  // namespace

void add_op_declaration(const PluginOp& op) {
  ops::OpDef d;
  d.name = op.op_type;
  d.domain = op.domain;
  d.since = op.def.since_version;
  d.infer = op.ort ? infer_ort_node : infer_plugin_node;
  d.how = "plugin";
  for (int32_t i = 0; i < op.def.num_attrs; ++i)
    d.attrs.push_back({op.def.attrs[i].name, attr_kind(op.def.attrs[i].kind), op.def.attrs[i].required != 0, nullptr});
  d.min_inputs = op.def.min_inputs;
  d.max_inputs = op.def.max_inputs;
  d.min_outputs = op.def.min_outputs;
  d.max_outputs = op.def.max_outputs;
  ops::add_extension_op(std::move(d));
}

KernelDef cpu_kernel_row(const PluginOp& op) {
  KernelDef k;
  k.op = op.op_type;
  k.domain = op.domain;
  k.since = op.def.since_version;
  k.name = "plugin.cpu." + (op.domain.empty() ? std::string("ai.onnx") : op.domain) + "." + op.op_type;
  // Built-in rows of an overridden op stay; the plugin's row wins placement by priority.
  k.priority = 1000;
  if (op.ort) return ort_kernel_row(op, std::move(k));
  const PluginOp* p = &op;
  k.check = [p](const ir::Node& n) -> std::string {
    const int64_t ins = static_cast<int64_t>(n.inputs.size()), outs = static_cast<int64_t>(n.outputs.size());
    if (ins < p->def.min_inputs || ins > p->def.max_inputs || outs < p->def.min_outputs || outs > p->def.max_outputs)
      return "the node's input/output counts are outside what " + p->label + " declares";
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const ir::Value* v = n.inputs[i];
      if (!v || !v->type.is_tensor() || v->type.dtype == DataType::kUndefined) continue;
      const int32_t code = static_cast<int32_t>(v->type.dtype);
      if (!plugin_dtype_ok(code)) return std::string("input ") + std::to_string(i) + " has dtype " + dtype_name(v->type.dtype) + ", which plugins are not passed";
      bool ok = p->def.num_dtypes == 0;
      for (int32_t d = 0; d < p->def.num_dtypes; ++d) ok |= p->def.dtypes[d] == code;
      if (!ok) return std::string("input ") + std::to_string(i) + " has dtype " + dtype_name(v->type.dtype) + ", which " + p->label + " does not take";
    }
    return "";
  };
  k.create = [p](const ir::Node& n, KernelInit&) { return create_kernel(*p, n); };
  return k;
}

}  // namespace kiln::plugins
