// plugins/ort_ops.cpp — ONNX Runtime custom-op libraries as kiln plugin ops: RegisterCustomOps called
// with kiln's OrtApiBase (plugins/ort_api.cpp), each OrtCustomOp it adds becoming an op of kiln's op
// table (domain, op type, input/output counts, variadic and optional ones as declared) with a CPU kernel
// row, so lowering, engine files (library name and hash) and engine loading treat it as any plugin op.
//
// Types and shapes: an output's element type is the one the op declares; an undeclared one (any type)
// follows the op's one input of undeclared type, as ONNX Runtime infers it. Shapes come from the op's
// InferOutputShapeFn when it has one; otherwise they are known only when the kernel runs: the kernel row
// is data-dependent (as NonZero's), and KernelContext_GetOutput allocates each output with the shape the
// op gives it then.
//
// Failures: a status the op returns (or a C++ exception escaping it) becomes an error naming the node,
// the library and the op; a call to an API function kiln does not provide names that function too.
#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "backends/kernel.h"
#include "ops/op_table.h"
#include "plugins/ort_api.h"
#include "plugins/plugins.h"
#include "util/log.h"

namespace kiln::plugins {

namespace ort {

constexpr int32_t kMaxArity = 64;  // as kiln plugins (plugins/loader.cpp)

// One OrtCustomOp of an op (ONNX Runtime allows several per domain and name: other types, opset ranges).
struct Variant {
  const CustomOp* op = nullptr;
  std::vector<int32_t> in_types, out_types;  // declared element types (0: any)
  std::vector<int32_t> in_chars, out_chars;  // kRequired / kOptional / kVariadic
  int in_min_arity = 1, out_min_arity = 1;
  bool in_homogeneous = true;
  int32_t min_inputs = 0, max_inputs = 0, min_outputs = 1, max_outputs = 1;
  int start = 1, end = INT_MAX;  // opset range
  bool v2 = false;               // CreateKernelV2 / KernelComputeV2
  bool infer_fn = false;         // InferOutputShapeFn
  std::string description;

  // Declared type of input/output i (a variadic last one covers the rest).
  static int32_t type_at(const std::vector<int32_t>& types, size_t i) {
    return types.empty() ? 0 : types[std::min(i, types.size() - 1)];
  }
  bool variadic_in() const { return !in_chars.empty() && in_chars.back() == kVariadic; }
};

struct OpVariants {
  std::string domain, op_type, library, label;
  std::vector<Variant> variants;
};

namespace {

std::string qualified(const std::string& domain, const std::string& op) { return (domain.empty() ? "" : domain + ".") + op; }

// Reads one OrtCustomOp's declaration, checking what a C ABI lets kiln check.
std::string read_variant(const CustomOp* op, Variant& v) {
  v.op = op;
  if (!op->GetInputTypeCount || !op->GetOutputTypeCount || !op->GetInputType || !op->GetOutputType)
    return "it lacks GetInputTypeCount, GetOutputTypeCount, GetInputType or GetOutputType";
  const size_t n_in = op->GetInputTypeCount(op), n_out = op->GetOutputTypeCount(op);
  if (n_in > static_cast<size_t>(kMaxArity) || n_out > static_cast<size_t>(kMaxArity) || n_out == 0)
    return "it declares " + std::to_string(n_in) + " inputs and " + std::to_string(n_out) + " outputs (kiln takes 0 to " +
           std::to_string(kMaxArity) + " inputs, 1 to " + std::to_string(kMaxArity) + " outputs)";
  const bool has_chars = op->version >= 8 && op->GetInputCharacteristic && op->GetOutputCharacteristic;
  const bool has_variadic = op->version >= 14;
  for (size_t i = 0; i < n_in; ++i) {
    v.in_types.push_back(op->GetInputType(op, i));
    v.in_chars.push_back(has_chars ? op->GetInputCharacteristic(op, i) : kRequired);
  }
  for (size_t i = 0; i < n_out; ++i) {
    v.out_types.push_back(op->GetOutputType(op, i));
    v.out_chars.push_back(has_chars ? op->GetOutputCharacteristic(op, i) : kRequired);
  }
  for (int32_t t : v.in_types)
    if (t != kElemUndefined && !elem_ok(t)) return "an input has element type " + std::to_string(t) + ", which kiln does not hold";
  for (int32_t t : v.out_types)
    if (t != kElemUndefined && !elem_ok(t)) return "an output has element type " + std::to_string(t) + ", which kiln does not hold";
  auto counts = [&](const std::vector<int32_t>& chars, bool input, int32_t* mn, int32_t* mx, int* arity) -> std::string {
    const int32_t n = static_cast<int32_t>(chars.size());
    int32_t last_required = -1;
    for (int32_t i = 0; i < n; ++i) {
      if (chars[i] == kVariadic && (i != n - 1 || !has_variadic))
        return std::string("only the last ") + (input ? "input" : "output") + " may be variadic";
      if (chars[i] != kOptional && chars[i] != kRequired && chars[i] != kVariadic)
        return "an unknown characteristic " + std::to_string(chars[i]);
      if (chars[i] == kRequired) last_required = i;
    }
    if (n > 0 && chars.back() == kVariadic) {
      int a = input ? (op->GetVariadicInputMinArity ? op->GetVariadicInputMinArity(op) : 1)
                    : (op->GetVariadicOutputMinArity ? op->GetVariadicOutputMinArity(op) : 1);
      if (a < 0 || a > kMaxArity) return "a variadic minimum arity of " + std::to_string(a);
      *arity = a;
      *mn = n - 1 + a;
      *mx = kMaxArity;
    } else {
      *mn = last_required + 1;
      *mx = n;
    }
    return "";
  };
  if (std::string why = counts(v.in_chars, true, &v.min_inputs, &v.max_inputs, &v.in_min_arity); !why.empty()) return why;
  if (std::string why = counts(v.out_chars, false, &v.min_outputs, &v.max_outputs, &v.out_min_arity); !why.empty()) return why;
  v.min_outputs = std::max(v.min_outputs, 1);
  if (v.variadic_in() && op->GetVariadicInputHomogeneity) v.in_homogeneous = op->GetVariadicInputHomogeneity(op) != 0;
  if (op->version >= 17) {
    if (op->GetStartVersion) v.start = op->GetStartVersion(op);
    if (op->GetEndVersion) v.end = op->GetEndVersion(op);
    v.infer_fn = op->InferOutputShapeFn != nullptr;
  }
  if (v.start < 1) v.start = 1;
  v.v2 = op->version >= 16 && op->CreateKernelV2 && op->KernelComputeV2;
  if (!v.v2 && (!op->CreateKernel || !op->KernelCompute)) return "it has neither CreateKernel/KernelCompute nor their V2";
  // What the declaration hash covers.
  auto list = [](const std::vector<int32_t>& types, const std::vector<int32_t>& chars) {
    std::string s;
    for (size_t i = 0; i < types.size(); ++i) s += " " + std::to_string(types[i]) + (chars[i] == kOptional ? "?" : chars[i] == kVariadic ? "*" : "");
    return s;
  };
  v.description = "inputs" + list(v.in_types, v.in_chars) + " (min " + std::to_string(v.min_inputs) + "); outputs" +
                  list(v.out_types, v.out_chars) + " (min " + std::to_string(v.min_outputs) + "); opsets " + std::to_string(v.start) +
                  "-" + (v.end == INT_MAX ? std::string("") : std::to_string(v.end)) + (v.infer_fn ? "; shape fn" : "");
  return "";
}

// Why the variant does not take a node with these input dtypes (kUndefined: not known), or "".
std::string variant_rejects(const Variant& v, const std::vector<DataType>& in, size_t n_out, int opset) {
  if (static_cast<int32_t>(in.size()) < v.min_inputs || static_cast<int32_t>(in.size()) > v.max_inputs ||
      static_cast<int32_t>(n_out) < v.min_outputs || static_cast<int32_t>(n_out) > v.max_outputs)
    return "input/output counts";
  if (opset > 0 && (opset < v.start || opset > v.end)) return "opset " + std::to_string(opset);
  DataType variadic_seen = DataType::kUndefined;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == DataType::kUndefined) continue;
    const int32_t want = Variant::type_at(v.in_types, i);
    if (want != kElemUndefined && want != static_cast<int32_t>(in[i]))
      return "input " + std::to_string(i) + " is " + dtype_name(in[i]) + ", it takes " + dtype_name(static_cast<DataType>(want));
    if (v.variadic_in() && v.in_homogeneous && i + 1 >= v.in_types.size()) {
      if (variadic_seen != DataType::kUndefined && variadic_seen != in[i]) return "its variadic inputs must share one type";
      variadic_seen = in[i];
    }
  }
  return "";
}

const Variant* pick(const OpVariants& ov, const std::vector<DataType>& in, size_t n_out, int opset, std::string* why) {
  for (const Variant& v : ov.variants) {
    std::string r = variant_rejects(v, in, n_out, opset);
    if (r.empty()) return &v;
    if (why) *why += (why->empty() ? "" : "; ") + r;
  }
  return nullptr;
}

std::vector<DataType> input_dtypes(const ir::Node& n) {
  std::vector<DataType> out;
  for (const ir::Value* v : n.inputs) out.push_back(v && v->type.is_tensor() ? v->type.dtype : DataType::kUndefined);
  return out;
}

// The element type of output i: declared, or that of the op's one input of undeclared type.
int32_t output_elem(const Variant& v, size_t i, const std::vector<DataType>& in) {
  const int32_t declared = Variant::type_at(v.out_types, i);
  if (declared != kElemUndefined) return declared;
  for (size_t k = 0; k < in.size(); ++k)
    if (Variant::type_at(v.in_types, k) == kElemUndefined && in[k] != DataType::kUndefined) return static_cast<int32_t>(in[k]);
  return kElemUndefined;
}

TensorInfo info_of_type(const ir::Type* t) {
  TensorInfo i;
  if (!t || !t->is_tensor()) return i;
  i.elem = static_cast<int32_t>(t->dtype);
  if (!t->shape.known) return i;
  i.has_shape = true;
  for (const ir::Dim& d : t->shape.dims) {
    i.dims.push_back(d.value);
    i.symbols.push_back(d.symbol);
  }
  return i;
}

// The error of a failed call into the library: its status (consumed), an unimplemented function it
// called, or what escaped it.
kiln::Status call_failed(const OpVariants& ov, const char* what, Status* st, const std::string& thrown = "") {
  const std::string missing = take_missing_call();
  std::string m = ov.label + ": " + what + " failed";
  if (!thrown.empty()) m += ": " + thrown;
  if (st) m += ": " + consume_status(st);
  if (!missing.empty()) m += " (it called the ONNX Runtime API function " + missing + ", which kiln's shim does not provide)";
  return (missing.empty() ? runtime_error(m) : unsupported(m));
}

KernelInfo kernel_info(const OpVariants& ov, const ir::Node& n) {
  KernelInfo info;
  info.node_name = n.name;
  info.domain = ov.domain;
  info.op_type = ov.op_type;
  info.since_version = n.opset > 0 ? n.opset : 1;
  info.attrs = n.attrs;
  for (const ir::Value* v : n.inputs) {
    info.input_names.push_back(v ? v->name : "");
    info.input_types.push_back(info_of_type(v ? &v->type : nullptr));
    std::shared_ptr<Value> c;
    if (v && v->is_constant() && elem_ok(static_cast<int32_t>(v->constant->dtype()))) {
      c = std::make_shared<Value>();
      c->owned = *v->constant;
    }
    info.constants.push_back(std::move(c));
  }
  for (const ir::Value* v : n.outputs) {
    info.output_names.push_back(v ? v->name : "");
    info.output_types.push_back(info_of_type(v ? &v->type : nullptr));
  }
  return info;
}

// An ORT kernel object behind kiln's Kernel interface.
class OrtKernel final : public Kernel {
 public:
  OrtKernel(const OpVariants& ov, const Variant& v, void* kernel, std::vector<int32_t> out_elems)
      : ov_(ov), v_(v), kernel_(kernel), out_elems_(std::move(out_elems)) {}
  ~OrtKernel() override {
    if (kernel_ && v_.op->KernelDestroy) {
      try {
        v_.op->KernelDestroy(kernel_);
      } catch (...) {
      }
    }
  }

  kiln::Status run(::kiln::KernelContext& ctx) const override {
    KernelContext c;
    c.ctx = &ctx;
    const int n = ctx.num_inputs(), m = ctx.num_outputs();
    c.inputs.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      if (ctx.has_input(i) && ctx.input_slot(i).kind == ::kiln::Slot::Kind::kTensor) c.inputs[i].in = &ctx.input(i);
    c.outputs.resize(static_cast<size_t>(m));
    c.made.assign(static_cast<size_t>(m), false);
    c.output_elem = out_elems_;
    c.output_elem.resize(static_cast<size_t>(m), kElemUndefined);
    for (int i = 0; i < m; ++i)
      if (ctx.has_output(i) && !elem_ok(c.output_elem[i]))
        return ctx.error(ov_.label + ": the element type of output " + std::to_string(i) + " is not known");
    take_missing_call();
    Status* st = nullptr;
    std::string thrown;
    try {
      if (v_.v2) st = v_.op->KernelComputeV2(kernel_, &c);
      else v_.op->KernelCompute(kernel_, &c);
    } catch (const std::exception& e) {
      thrown = std::string("an exception escaped it: ") + e.what();
    } catch (...) {
      thrown = "an exception escaped it";
    }
    if (st || !thrown.empty()) return call_failed(ov_, "KernelCompute", st, thrown).with_context(ctx.node().describe());
    if (std::string missing = take_missing_call(); !missing.empty())
      return unsupported(ov_.label + ": KernelCompute called the ONNX Runtime API function " + missing +
                         ", which kiln's shim does not provide")
          .with_context(ctx.node().describe());
    for (int i = 0; i < m; ++i)
      if (ctx.has_output(i) && !c.made[i])
        return ctx.error(ov_.label + ": KernelCompute did not make output " + std::to_string(i) + " (KernelContext_GetOutput)");
    return kiln::Status::Ok();
  }

 private:
  const OpVariants& ov_;
  const Variant& v_;
  void* kernel_;
  std::vector<int32_t> out_elems_;
};

Expected<KernelPtr> create_kernel(const OpVariants& ov, const ir::Node& n) {
  const std::vector<DataType> in = input_dtypes(n);
  std::string why;
  const Variant* v = pick(ov, in, n.outputs.size(), n.opset, &why);
  if (!v) return unsupported(n.describe() + ": " + ov.label + " has no kernel for it (" + why + ")");
  std::vector<int32_t> elems;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const ir::Value* o = n.outputs[i];
    int32_t e = o && o->type.is_tensor() ? static_cast<int32_t>(o->type.dtype) : kElemUndefined;
    if (e == kElemUndefined) e = output_elem(*v, i, in);
    elems.push_back(e);
  }
  const KernelInfo info = kernel_info(ov, n);
  take_missing_call();
  void* kernel = nullptr;
  Status* st = nullptr;
  std::string thrown;
  try {
    if (v->v2) st = v->op->CreateKernelV2(v->op, api_table(), &info, &kernel);
    else kernel = v->op->CreateKernel(v->op, api_table(), &info);
  } catch (const std::exception& e) {
    thrown = std::string("an exception escaped it: ") + e.what();
  } catch (...) {
    thrown = "an exception escaped it";
  }
  if (st || !thrown.empty()) return call_failed(ov, "CreateKernel", st, thrown).with_context(n.describe());
  auto k = std::make_unique<OrtKernel>(ov, *v, kernel, std::move(elems));
  if (std::string missing = take_missing_call(); !missing.empty())
    return unsupported(n.describe() + ": " + ov.label + ": CreateKernel called the ONNX Runtime API function " + missing +
                       ", which kiln's shim does not provide");
  return KernelPtr(std::move(k));
}

}  // namespace
}  // namespace ort

bool is_ort_library(void* handle) { return dlsym(handle, "RegisterCustomOps") != nullptr; }

Expected<std::vector<PluginOp>> register_ort_library(void* handle, const std::string& library) {
  using namespace ort;
  using RegisterFn = ort::Status* (*)(SessionOptions*, const ApiBase*);
  auto reg = reinterpret_cast<RegisterFn>(dlsym(handle, "RegisterCustomOps"));
  if (!reg) return invalid_argument("'" + library + "' exports no RegisterCustomOps");
  SessionOptions so;
  take_missing_call();
  ort::Status* st = nullptr;
  std::string thrown;
  try {
    st = reg(&so, api_base());
  } catch (const std::exception& e) {
    thrown = std::string(": an exception escaped it: ") + e.what();
  } catch (...) {
    thrown = ": an exception escaped it";
  }
  const std::string missing = take_missing_call();
  const std::string called = missing.empty() ? "" : " (it called the ONNX Runtime API function " + missing + ", which kiln's shim does not provide)";
  if (st || !thrown.empty())
    return runtime_error("ONNX Runtime custom-op library '" + library + "': RegisterCustomOps failed" + thrown +
                         (st ? ": " + consume_status(st) : "") + called);
  if (!missing.empty()) log(LogLevel::kWarning, "ONNX Runtime custom-op library '" + library + "': RegisterCustomOps" + called);

  std::map<std::pair<std::string, std::string>, std::shared_ptr<OpVariants>> by_name;
  std::vector<std::pair<std::string, std::string>> order;
  size_t other_devices = 0;
  for (const Domain& d : so.domains) {
    const std::string domain = d.name == "ai.onnx" ? "" : d.name;
    for (const CustomOp* op : d.ops) {
      if (!op || !op->GetName) return invalid_argument("ONNX Runtime custom-op library '" + library + "' added an op without GetName");
      const char* name = op->GetName(op);
      if (!name || !*name) return invalid_argument("ONNX Runtime custom-op library '" + library + "' added an op without a name");
      const char* ep = op->GetExecutionProviderType ? op->GetExecutionProviderType(op) : nullptr;
      if (ep && *ep && std::strcmp(ep, "CPUExecutionProvider") != 0) {
        ++other_devices;  // a CUDA (or other device) kernel: kiln runs these ops on the CPU
        continue;
      }
      Variant v;
      if (std::string why = read_variant(op, v); !why.empty())
        return invalid_argument("ONNX Runtime custom-op library '" + library + "', op " + qualified(domain, name) + ": " + why);
      auto key = std::make_pair(domain, std::string(name));
      auto& slot = by_name[key];
      if (!slot) {
        slot = std::make_shared<OpVariants>();
        slot->domain = domain;
        slot->op_type = name;
        slot->library = library;
        slot->label = "ONNX Runtime custom-op library '" + library + "', op " + qualified(domain, name);
        order.push_back(key);
      }
      slot->variants.push_back(std::move(v));
    }
  }
  if (other_devices)
    log(LogLevel::kInfo, "ONNX Runtime custom-op library '" + library + "': " + std::to_string(other_devices) +
                             " kernel(s) for other execution providers are not used (kiln runs its ops on the CPU)");
  std::vector<PluginOp> ops;
  for (const auto& key : order) {
    const std::shared_ptr<OpVariants>& ov = by_name[key];
    PluginOp op;
    op.domain = ov->domain;
    op.op_type = ov->op_type;
    std::memset(&op.def, 0, sizeof(op.def));
    std::memset(&op.cpu, 0, sizeof(op.cpu));
    op.def.since_version = INT_MAX;
    op.def.min_inputs = kMaxArity;
    op.def.min_outputs = kMaxArity;
    for (const Variant& v : ov->variants) {
      op.def.since_version = std::min(op.def.since_version, v.start);
      op.def.min_inputs = std::min(op.def.min_inputs, v.min_inputs);
      op.def.max_inputs = std::max(op.def.max_inputs, v.max_inputs);
      op.def.min_outputs = std::min(op.def.min_outputs, v.min_outputs);
      op.def.max_outputs = std::max(op.def.max_outputs, v.max_outputs);
    }
    op.ort = ov;
    ops.push_back(std::move(op));
  }
  return ops;
}

std::string describe_ort_op(const PluginOp& op) {
  using namespace ort;
  std::string d = "onnxruntime custom op " + qualified(op.domain, op.op_type);
  for (const Variant& v : op.ort->variants) d += "; variant " + v.description;
  return d;
}

Status infer_ort_node(ops::InferContext& ctx) {
  using namespace ort;
  const PluginOp* pop = find(ctx.node.domain, ctx.node.op_type);
  if (!pop || !pop->ort) return ctx.error("no loaded ONNX Runtime custom-op library declares this op");
  const OpVariants& ov = *pop->ort;
  std::vector<DataType> in;
  for (const ir::Type* t : ctx.in) in.push_back(t && t->is_tensor() ? t->dtype : DataType::kUndefined);
  std::string why;
  const Variant* v = pick(ov, in, ctx.out.size(), ctx.node.opset, &why);
  if (!v) return ctx.error(ov.label + " has no kernel for it (" + why + ")");
  for (size_t i = 0; i < ctx.out.size(); ++i) ctx.out[i] = ir::Type::tensor(static_cast<DataType>(output_elem(*v, i, in)));
  if (!v->infer_fn) return kiln::Status::Ok();
  ShapeInferContext sc;
  sc.attrs = &ctx.node.attrs;
  for (const ir::Type* t : ctx.in) sc.inputs.push_back(info_of_type(t));
  sc.outputs.resize(ctx.out.size());
  sc.set.assign(ctx.out.size(), false);
  take_missing_call();
  ort::Status* st = nullptr;
  std::string thrown;
  {
    std::lock_guard<std::mutex> one_at_a_time(*pop->calls);
    try {
      st = v->op->InferOutputShapeFn(v->op, &sc);
    } catch (const std::exception& e) {
      thrown = std::string("an exception escaped it: ") + e.what();
    } catch (...) {
      thrown = "an exception escaped it";
    }
  }
  if (st || !thrown.empty()) return call_failed(ov, "InferOutputShapeFn", st, thrown).with_context(ctx.node.describe());
  if (std::string missing = take_missing_call(); !missing.empty())
    return unsupported(ctx.node.describe() + ": " + ov.label + ": InferOutputShapeFn called the ONNX Runtime API function " + missing +
                       ", which kiln's shim does not provide");
  for (size_t i = 0; i < ctx.out.size(); ++i) {
    if (!sc.set[i]) continue;
    const TensorInfo& t = sc.outputs[i];
    if (t.elem != kElemUndefined) {
      if (!elem_ok(t.elem)) return ctx.error(ov.label + ": InferOutputShapeFn gave output " + std::to_string(i) + " an unknown element type");
      ctx.out[i].dtype = static_cast<DataType>(t.elem);
    }
    if (!t.has_shape) continue;
    std::vector<ir::Dim> dims;
    for (size_t d = 0; d < t.dims.size(); ++d) {
      if (t.dims[d] >= 0) dims.emplace_back(t.dims[d]);
      else if (d < t.symbols.size() && !t.symbols[d].empty()) dims.emplace_back(t.symbols[d]);
      else dims.emplace_back();
    }
    ctx.out[i].shape = ir::SymShape(std::move(dims));
  }
  return kiln::Status::Ok();
}

KernelDef ort_kernel_row(const PluginOp& op, KernelDef k) {
  using namespace ort;
  k.data_dependent = true;  // output shapes are known when the op runs (KernelContext_GetOutput)
  const OpVariants* ov = op.ort.get();
  k.check = [ov](const ir::Node& n) -> std::string {
    std::string why;
    return pick(*ov, input_dtypes(n), n.outputs.size(), n.opset, &why) ? "" : ov->label + " has no kernel for it (" + why + ")";
  };
  k.create = [ov](const ir::Node& n, KernelInit&) { return create_kernel(*ov, n); };
  return k;
}

}  // namespace kiln::plugins
