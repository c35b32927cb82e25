// runtime/engine.cpp — the public API: build (import → optimize → lower), load, run.
#include <omp.h>

#include <fstream>
#include <sstream>

#include "backends/backend.h"
#include "onnx/importer.h"
#include "ops/op_table.h"
#include "passes/passes.h"
#include "runtime/engine_impl.h"
#include "runtime/executor.h"

namespace kiln {

const char* version() { return KILN_VERSION; }

static std::string cpu_isa() {
  std::string isa = "x86_64";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) isa += " avx2";
  if (__builtin_cpu_supports("fma")) isa += " fma";
  if (__builtin_cpu_supports("avx512f")) isa += " avx512f";
  if (__builtin_cpu_supports("avx512bw")) isa += " avx512bw";
  return isa;
}

std::string TensorInfo::type_string() const {
  const std::string t = std::string("tensor(") + dtype_onnx_name(dtype) + ")";
  if (kind == "sequence") return "seq(" + t + ")";
  if (kind == "optional") return "optional(" + t + ")";
  return t;
}

TensorInfo tensor_info(const ir::Value& v) {
  TensorInfo ti;
  ti.name = v.name;
  const ir::Type* t = &v.type;
  if (t->kind == ir::Type::Kind::kSequence) ti.kind = "sequence";
  if (t->kind == ir::Type::Kind::kOptional) ti.kind = "optional";
  if (t->kind == ir::Type::Kind::kMap) ti.kind = "map";
  while ((t->kind == ir::Type::Kind::kSequence || t->kind == ir::Type::Kind::kOptional) && t->elem) {
    if (t->kind == ir::Type::Kind::kSequence && ti.kind == "optional") ti.kind = "optional";
    t = t->elem.get();
  }
  ti.dtype = t->dtype;
  ti.rank_known = t->shape.known;
  for (const ir::Dim& d : t->shape.dims) {
    ti.shape.push_back(d.is_static() ? d.value : -1);
    ti.dim_names.push_back(d.symbol);
  }
  return ti;
}

void describe_engine(Engine::Impl& impl, const std::string& model_hash) {
  impl.inputs.clear();
  impl.outputs.clear();
  for (const ir::Value* v : impl.graph->inputs)
    if (!v->constant) impl.inputs.push_back(tensor_info(*v));
  // Inputs with a default (initializer) are optional; list them after the required ones.
  for (const ir::Value* v : impl.graph->inputs)
    if (v->constant) impl.inputs.push_back(tensor_info(*v));
  for (const ir::Value* v : impl.graph->outputs) impl.outputs.push_back(tensor_info(*v));
  impl.meta["kiln_version"] = KILN_VERSION;
  impl.meta["format_version"] = std::to_string(kEngineFormatVersion);
  impl.meta["device"] = impl.options.device == DeviceType::kCUDA ? "cuda" : "cpu";
  auto b = backend_for(impl.options.device);
  impl.meta["fingerprint"] = b.ok() ? (*b)->fingerprint() : "unavailable";
  impl.meta["model_hash"] = model_hash;
  impl.meta["cpu_isa"] = cpu_isa();
  impl.meta["opt_level"] = std::to_string(impl.options.opt_level);
}

static Expected<std::shared_ptr<Engine>> build_from_model(ir::Model model, const BuildOptions& options) {
  auto impl = std::make_unique<Engine::Impl>();
  impl->options = options;
  impl->graph = std::shared_ptr<ir::Graph>(std::move(model.graph));
  passes::PassOptions po;
  po.level = options.opt_level;
  po.verbose = options.verbose;
  KILN_RETURN_IF_ERROR(passes::optimize(*impl->graph, po));
  LowerOptions lo;
  lo.device = options.device;
  lo.verbose = options.verbose;
  KILN_ASSIGN_OR_RETURN(impl->plan, lower(impl->graph, lo));
  describe_engine(*impl, model.source_hash);
  return std::make_shared<Engine>(std::move(impl));
}

Expected<std::shared_ptr<Engine>> Engine::build(const std::string& onnx_path, const BuildOptions& options) {
  KILN_ASSIGN_OR_RETURN(ir::Model model, onnx::import_file(onnx_path));
  return build_from_model(std::move(model), options);
}

Expected<std::shared_ptr<Engine>> Engine::build_from_bytes(const std::string& bytes, const BuildOptions& options,
                                                           const std::string& base_dir) {
  onnx::ImportOptions io;
  io.base_dir = base_dir;
  KILN_ASSIGN_OR_RETURN(ir::Model model, onnx::import_bytes(bytes, io));
  return build_from_model(std::move(model), options);
}

static Expected<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return io_error("error reading '" + path + "'");
  return ss.str();
}

Expected<std::shared_ptr<Engine>> Engine::load_from_bytes(const std::string& bytes) {
  KILN_ASSIGN_OR_RETURN(auto impl, deserialize_engine(bytes));
  return std::make_shared<Engine>(std::move(impl));
}

Expected<std::shared_ptr<Engine>> Engine::load(const std::string& engine_path) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(engine_path));
  auto e = load_from_bytes(bytes);
  if (!e.ok()) return e.status().with_context(engine_path);
  return e;
}

Expected<std::shared_ptr<Engine>> Engine::open(const std::string& path, const BuildOptions& options) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open '" + path + "'");
  std::string head(16, '\0');
  f.read(head.data(), 16);
  head.resize(static_cast<size_t>(f.gcount()));
  if (looks_like_engine(head)) return load(path);
  return build(path, options);
}

Status Engine::save(const std::string& engine_path) const {
  KILN_ASSIGN_OR_RETURN(std::string bytes, serialize());
  std::ofstream f(engine_path, std::ios::binary | std::ios::trunc);
  if (!f) return io_error("cannot write '" + engine_path + "'");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) return io_error("error writing '" + engine_path + "'");
  return Status::Ok();
}

Expected<std::string> Engine::serialize() const { return serialize_engine(*impl_); }

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;
const std::vector<TensorInfo>& Engine::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Engine::outputs() const { return impl_->outputs; }
DeviceType Engine::device() const { return impl_->options.device; }
std::string Engine::placement_report() const { return describe_plan(*impl_->plan); }
std::map<std::string, std::string> Engine::metadata() const { return impl_->meta; }

// ---- ExecutionContext

struct ExecutionContext::Impl {
  std::shared_ptr<const Engine::Impl> engine;  // keeps the plan alive
  ContextResources res;
};

Expected<std::unique_ptr<ExecutionContext>> Engine::create_context() const {
  auto ci = std::make_unique<ExecutionContext::Impl>();
  // The context shares ownership of the plan through an aliasing pointer to this engine's impl.
  ci->engine = std::shared_ptr<const Engine::Impl>(std::shared_ptr<const Engine::Impl>(), impl_.get());
  const CompiledGraph& plan = *impl_->plan;
  if (OpProfile::enabled()) ci->res.profile = std::make_unique<OpProfile>();
  for (int d = 0; d < 2; ++d) {
    const bool used = plan.arena_bytes[d] > 0 || (d == 1 && impl_->options.device == DeviceType::kCUDA);
    if (!used) continue;
    KILN_ASSIGN_OR_RETURN(Backend* b, backend_for(static_cast<DeviceType>(d)));
    KILN_ASSIGN_OR_RETURN(ci->res.state[d], b->create_state());
    if (plan.arena_bytes[d] > 0) {
      KILN_ASSIGN_OR_RETURN(ci->res.arena[d], b->allocate(plan.arena_bytes[d]));
    }
  }
  return std::make_unique<ExecutionContext>(std::move(ci));
}

ExecutionContext::ExecutionContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExecutionContext::~ExecutionContext() = default;

static Status check_input(const ir::Value& decl, const Value& given) {
  const ir::Type& t = decl.type;
  const std::string who = "input '" + decl.name + "'";
  if (t.kind == ir::Type::Kind::kSequence && given.kind != Value::Kind::kSequence)
    return invalid_argument(who + " expects a sequence of tensors");
  if (t.kind == ir::Type::Kind::kTensor) {
    if (given.kind != Value::Kind::kTensor) return invalid_argument(who + " expects a tensor");
    const Tensor& x = given.tensor;
    if (!x.device().is_cpu()) return invalid_argument(who + ": inputs must be CPU tensors");
    if (t.dtype != DataType::kUndefined && x.dtype() != t.dtype)
      return invalid_argument(who + " expects dtype " + dtype_name(t.dtype) + ", got " + dtype_name(x.dtype()));
    if (t.shape.known) {
      if (x.rank() != t.shape.rank())
        return invalid_argument(who + " expects rank " + std::to_string(t.shape.rank()) + " (shape " +
                                t.shape.to_string() + "), got shape " + shape_to_string(x.shape()));
      for (int i = 0; i < x.rank(); ++i)
        if (t.shape.dims[i].is_static() && t.shape.dims[i].value != x.shape()[i])
          return invalid_argument(who + " expects shape " + t.shape.to_string() + ", got " + shape_to_string(x.shape()) +
                                  " (dimension " + std::to_string(i) + " differs)");
    }
  }
  return Status::Ok();
}

Expected<std::vector<Value>> ExecutionContext::run(const std::map<std::string, Value>& inputs) {
  const Engine::Impl& e = *impl_->engine;
  const CompiledGraph& plan = *e.plan;
  Frame frame(plan, impl_->res, nullptr);
  std::map<std::string, int> formal;
  for (size_t i = 0; i < e.graph->inputs.size(); ++i) formal[e.graph->inputs[i]->name] = static_cast<int>(i);
  for (const auto& [name, value] : inputs) {
    auto it = formal.find(name);
    if (it == formal.end()) {
      std::string names;
      for (const auto& ti : e.inputs) names += (names.empty() ? "" : ", ") + ti.name;
      return invalid_argument("unknown input '" + name + "'; the model's inputs are: " + names);
    }
    const ir::Value& decl = *e.graph->inputs[it->second];
    KILN_RETURN_IF_ERROR(check_input(decl, value));
    frame.slots[plan.inputs[it->second]] = value;
  }
  for (size_t i = 0; i < e.graph->inputs.size(); ++i) {
    const ir::Value& decl = *e.graph->inputs[i];
    Slot& s = frame.slots[plan.inputs[i]];
    if (inputs.count(decl.name)) continue;
    if (decl.constant) s = Slot::of(*decl.constant);
    else if (decl.type.kind != ir::Type::Kind::kOptional) return invalid_argument("missing input '" + decl.name + "'");
  }
  KILN_RETURN_IF_ERROR(frame.execute());
  for (int d = 0; d < 2; ++d)
    if (impl_->res.state[d]) {
      KILN_ASSIGN_OR_RETURN(Backend* b, backend_for(static_cast<DeviceType>(d)));
      KILN_RETURN_IF_ERROR(b->synchronize(impl_->res.state[d].get()));
    }
  std::vector<Value> out;
  for (int o : plan.outputs) {
    Slot s = frame.slots[o];
    // Never hand out memory the engine or a later run may touch: constants and inputs are copied.
    if (s.kind == Slot::Kind::kTensor && (plan.values[o].is_constant || !s.tensor.storage() ||
                                          s.tensor.storage()->release == nullptr))
      s.tensor = s.tensor.clone();
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kiln
