// runtime/engine.cpp — the public API of a built engine: load, save, describe, run (building is
// builder/builder.cpp).
#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

#include "backends/backend.h"
#include "runtime/engine_impl.h"
#include "runtime/executor.h"
#include "util/atomic_file.h"
#include "util/env.h"
#include "util/log.h"
#include "util/thread_count.h"

namespace kiln {

const char* version() { return KILN_VERSION; }

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
  ti.has_default = v.is_input && v.constant.has_value();
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
  // Engines that use plugin ops are format 4 (they record the plugins), the rest stay 3. The records
  // are also listed in the metadata, for `kiln inspect` and Engine::metadata().
  const std::vector<plugins::OpRecord> records = plugins::records_for(*impl.graph);
  impl.meta["format_version"] = std::to_string(records.empty() ? kEngineFormatVersion : kEngineFormatWithPlugins);
  std::string listed;
  for (const plugins::OpRecord& r : records)
    listed += (listed.empty() ? "" : "; ") + (r.domain.empty() ? "" : r.domain + ".") + r.op_type + " from " + r.library +
              " (" + r.plugin + " " + r.version + ", declaration " + r.abi_hash + ")";
  if (!listed.empty()) impl.meta["plugins"] = listed;
  impl.meta["device"] = impl.options.device == DeviceType::kCUDA ? "cuda" : "cpu";
  auto b = backend_for(impl.options.device);
  impl.meta["fingerprint"] = b.ok() ? (*b)->fingerprint() : "unavailable";
  impl.meta["model_hash"] = model_hash;
  impl.meta["cpu_isa"] = host_cpu_isa();
  impl.meta["opt_level"] = std::to_string(impl.options.opt_level);
  impl.meta["precision"] = precision_name(impl.options.precision);
  if (impl.options.rest_precision) impl.meta["rest_precision"] = precision_name(*impl.options.rest_precision);
  if (impl.options.half_outputs) impl.meta["half_outputs"] = "1";
}

EngineFile engine_file_of(const Engine::Impl& impl) {
  EngineFile e;
  e.graph = impl.graph;
  e.plan = impl.plan;
  e.meta = impl.meta;
  e.profiles = impl.options.profiles;
  e.plugins = plugins::records_for(*impl.graph);
  return e;
}

// The bytes `impl` was read from, while they are what was written (the checksum still matches), else null.
static const Storage* intact_file(const Engine::Impl& impl) {
  return impl.file && engine_file_intact(*impl.file) ? impl.file.get() : nullptr;
}

Expected<std::string> serialize_engine(const Engine::Impl& impl) {
  if (const Storage* f = intact_file(impl)) return std::string(static_cast<const char*>(f->data), f->bytes);
  return write_engine_file(engine_file_of(impl));
}

Expected<std::unique_ptr<Engine::Impl>> deserialize_engine(std::shared_ptr<Storage> file, bool for_rebuild) {
  std::shared_ptr<const Storage> bytes = file;
  KILN_ASSIGN_OR_RETURN(EngineFile e, read_engine_file(std::move(file), for_rebuild));
  auto impl = std::make_unique<Engine::Impl>();
  impl->graph = std::move(e.graph);
  impl->plan = std::move(e.plan);
  impl->options.device = e.meta["device"] == "cuda" ? DeviceType::kCUDA : DeviceType::kCPU;
  impl->options.opt_level = std::atoi(e.meta["opt_level"].c_str());
  impl->options.profiles = std::move(e.profiles);
  KILN_RETURN_IF_ERROR(validate_profiles(*impl->graph, impl->options.profiles).with_context("engine file"));
  describe_engine(*impl, e.meta["model_hash"]);
  impl->meta = std::move(e.meta);  // as written (describe_engine fills the meta of a fresh build)
  if (!e.foreign.empty()) impl->meta["foreign"] = e.foreign;
  if (impl->plan) impl->file = std::move(bytes);  // an engine read for a rebuild is written anew once rebuilt
  return impl;
}

Expected<std::shared_ptr<Engine>> Engine::load_from_bytes(const std::string& bytes) {
  KILN_ASSIGN_OR_RETURN(auto file, cpu_backend().allocate(bytes.size()));
  if (!bytes.empty()) std::memcpy(file->data, bytes.data(), bytes.size());
  KILN_ASSIGN_OR_RETURN(auto impl, deserialize_engine(std::move(file)));
  return std::make_shared<Engine>(std::move(impl));
}

Expected<std::shared_ptr<Engine>> engine_from_file(EngineFile file) {
  // Written once into memory allocated as Engine::load_from_bytes allocates it (weights stay views at
  // the alignment a loaded file gives them, so kernels that read them in place run as they do on a
  // loaded engine), and kept: saving the engine writes these bytes.
  KILN_ASSIGN_OR_RETURN(auto storage, write_engine_storage(file));
  file = EngineFile{};  // the build's graph and plan go before the file's are read
  KILN_ASSIGN_OR_RETURN(auto impl, deserialize_engine(std::move(storage)));
  return std::make_shared<Engine>(std::move(impl));
}

// The file mapped copy-on-write (never written through, but a kernel bug cannot reach the file).
Expected<std::shared_ptr<Storage>> map_engine_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return not_found("cannot open '" + path + "'");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error("'" + path + "' is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return invalid_model("'" + path + "' is not a kiln engine file (" + std::to_string(size) + " bytes)");
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return io_error("cannot map '" + path + "'");
  auto storage = std::make_shared<Storage>();
  storage->data = p;
  storage->bytes = size;
  storage->release = [size](void* q) { ::munmap(q, size); };
  return storage;
}

Expected<std::shared_ptr<Engine>> Engine::load(const std::string& engine_path) {
  KILN_ASSIGN_OR_RETURN(auto file, map_engine_file(engine_path));
  auto impl = deserialize_engine(std::move(file));
  if (!impl.ok()) return impl.status().with_context(engine_path);
  return std::make_shared<Engine>(std::move(impl).value());
}

Status Engine::save(const std::string& engine_path) const {
  // Replaced whole, never rewritten in place: a session that mapped the old file (Engine::load)
  // keeps reading the old, unchanged inode instead of seeing its weights change or vanish.
  if (const Storage* f = intact_file(*impl_))
    return write_output_file(engine_path, std::string_view(static_cast<const char*>(f->data), f->bytes), "engine");
  KILN_ASSIGN_OR_RETURN(std::string bytes, serialize());
  return write_output_file(engine_path, bytes, "engine");
}

Expected<std::string> Engine::serialize() const { return serialize_engine(*impl_); }

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;
const std::vector<TensorInfo>& Engine::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Engine::outputs() const { return impl_->outputs; }
const std::vector<ShapeProfile>& Engine::profiles() const { return impl_->options.profiles; }
DeviceType Engine::device() const { return impl_->options.device; }
std::string Engine::placement_report() const {
  // The memory plan for the inputs' declared shapes, dynamic dims at 1 (contexts plan each
  // input-shape signature they see the same way).
  const CompiledGraph& plan = *impl_->plan;
  std::vector<Slot> probe(plan.inputs.size());
  std::vector<Slot*> ptrs;
  std::string shapes;
  size_t default_bytes = 0;  // initializers of inputs with a default (held on the host)
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const ir::Value& decl = *impl_->graph->inputs[i];
    ptrs.push_back(&probe[i]);
    if (decl.constant) {
      probe[i] = Slot::of(*decl.constant);
      default_bytes += decl.constant->nbytes();
      continue;
    }
    if (!decl.type.is_tensor() || !decl.type.shape.known) continue;
    Shape shape;
    for (const ir::Dim& d : decl.type.shape.dims) shape.push_back(d.is_static() ? d.value : 1);
    probe[i] = Slot::of(Tensor::borrow(decl.type.dtype, shape, nullptr));
    shapes += (shapes.empty() ? "" : ", ") + decl.name + "=" + shape_to_string(shape);
  }
  ContextResources res;  // the devices this engine uses, as a context would (CUDA only for CUDA engines)
  for (int d = 0; d < 2; ++d) {
    auto b = backend_for(static_cast<DeviceType>(d));
    if (b.ok() && (d == 0 || device() == DeviceType::kCUDA))
      res.state[d] = std::shared_ptr<void>(std::shared_ptr<void>(), (*b)->build_state());
  }
  auto sp = make_shape_plan(plan, ptrs.data(), res);
  // Each step's outputs as planned: "  -> float16[1,64,56,56]" (the precision a step computes in).
  std::string r = describe_plan(plan, [&](int si) {
    std::string out;
    for (int v : plan.steps[si].out) {
      if (v < 0 || !sp->known[v]) continue;
      out += (out.empty() ? "  => " : ", ") + std::string(dtype_name(sp->dtype[v])) + shape_to_string(sp->shape[v]);
    }
    return out;
  });
  // Weights held by the engine, per device.
  size_t weights[2] = {default_bytes, 0};
  for (const PlannedValue& pv : plan.values)
    if (pv.is_constant && pv.constant.kind == Slot::Kind::kTensor) weights[pv.device.is_cpu() ? 0 : 1] += pv.constant.tensor.nbytes();
  r += "weights: cpu " + std::to_string(weights[0]) + " bytes, cuda " + std::to_string(weights[1]) + " bytes\n";
  if (sp->ready)
    r += "arena: cpu " + std::to_string(sp->arena_bytes[0]) + " bytes, cuda " + std::to_string(sp->arena_bytes[1]) +
         " bytes (planned for " + (shapes.empty() ? std::string("the declared shapes") : shapes) + ")\n";
  else
    r += "arena: planned on the first run of each input-shape signature (some shapes are computed while running)\n";
  return r;
}
std::map<std::string, std::string> Engine::metadata() const { return impl_->meta; }

// ---- ExecutionContext

struct ExecutionContext::Impl {
  std::shared_ptr<const Engine::Impl> engine;  // keeps the plan (and its kernels) alive
  ContextResources res;
  // Shape plans, most recently used first; at most max_plans (the least recently used goes, and
  // the arena shrinks to what the others need: shrink_arena).
  size_t max_plans = ExecutionContext::kDefaultMaxShapePlans;
  std::vector<std::unique_ptr<ShapePlan>> plans;
  std::vector<int64_t> key;         // scratch: the signature of the current run
  std::vector<Slot*> bound;         // scratch: per graph input, the caller's value (or a default)
  std::vector<Slot> defaults;       // per graph input: its initializer (inputs with a default)
  std::vector<int> info_to_input;   // Engine::inputs() index → graph input index
  // Per graph input: "" when a CUDA tensor may be given for it (every reader is a device copy or
  // reads only its shape), else the step that reads its values on the host.
  std::vector<std::string> host_reader;
  Slot none;
  double timeout_s = 0;             // per run; 0: none
  int threads = 0;                  // CPU threads per run; 0: the calling thread's OpenMP setting
};

Expected<std::unique_ptr<ExecutionContext>> Engine::create_context() const {
  auto ci = std::make_unique<ExecutionContext::Impl>();
  ci->engine = impl_;
  const Engine::Impl& e = *impl_;
  if (OpProfile::enabled()) ci->res.profile = std::make_unique<OpProfile>();
  static const bool graphs_default = !env_is("KILN_CUDA_GRAPHS", "0");
  ci->res.cuda_graphs = graphs_default;
  for (int d = 0; d < 2; ++d) {
    const bool used = d == 0 || e.options.device == DeviceType::kCUDA;
    if (!used) continue;
    KILN_ASSIGN_OR_RETURN(Backend* b, backend_for(static_cast<DeviceType>(d)));
    KILN_ASSIGN_OR_RETURN(ci->res.state[d], b->create_state());
  }
  const auto& gin = e.graph->inputs;
  ci->host_reader.assign(gin.size(), e.options.device == DeviceType::kCUDA ? "" : "this is a CPU engine");
  for (size_t i = 0; e.options.device == DeviceType::kCUDA && i < gin.size(); ++i) {
    const int v = e.plan->inputs[i];
    for (const Step& s : e.plan->steps) {
      if (s.kind != Step::Kind::kKernel) continue;
      const KernelDef* def = e.plan->backend(s).kernels().by_name(s.kernel_name);
      const bool host_step = s.device == DeviceType::kCPU;
      for (size_t k = 0; k < s.in.size(); ++k)
        if (s.in[k] == v && ((host_step && !(def && def->shape_input(static_cast<int>(k)))) || s.host_input(k)) &&
            ci->host_reader[i].empty())
          ci->host_reader[i] = e.plan->node(s).describe() + " reads it on the host";
      if (!host_step) continue;
      for (int w : s.implicit_in)
        if (w == v && ci->host_reader[i].empty()) ci->host_reader[i] = e.plan->node(s).describe() + " reads it on the host";
    }
  }
  ci->defaults.resize(gin.size());
  ci->bound.resize(gin.size());
  for (size_t i = 0; i < gin.size(); ++i)
    if (gin[i]->constant) ci->defaults[i] = Slot::of(*gin[i]->constant);
  for (const TensorInfo& ti : e.inputs)
    for (size_t i = 0; i < gin.size(); ++i)
      if (gin[i]->name == ti.name) ci->info_to_input.push_back(static_cast<int>(i));
  return std::make_unique<ExecutionContext>(std::move(ci));
}

ExecutionContext::ExecutionContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExecutionContext::~ExecutionContext() = default;

int ExecutionContext::active_profile() const { return impl_->plans.empty() ? 0 : impl_->plans.front()->profile; }
size_t ExecutionContext::planned_signatures() const { return impl_->plans.size(); }
size_t ExecutionContext::max_shape_plans() const { return impl_->max_plans; }

// Reallocates each device's arena down to the largest need of the plans kept, when it holds more
// (the plans that needed it were dropped), and remakes the plans' views of it. An arena no plan
// needs is freed. Every view of the old arena is dropped before the smaller one is allocated, so
// its memory goes back first.
static Status shrink_arena(const CompiledGraph& g, std::vector<std::unique_ptr<ShapePlan>>& plans, ContextResources& res) {
  bool moved = false;
  for (int d = 0; d < 2; ++d) {
    if (!res.arena[d]) continue;
    size_t need = 0;
    for (const auto& p : plans)
      if (p->ready) need = std::max(need, p->arena_bytes[d]);
    if (res.arena[d]->bytes <= need) continue;
    for (const auto& p : plans) {
      if (!p->ready) continue;
      for (size_t v = 0; v < g.values.size(); ++v)
        if (p->offset[v] >= 0 && static_cast<int>(g.values[v].device.type) == d) p->slots[v] = Slot();
    }
    res.arena[d].reset();
    if (need > 0) {
      KILN_ASSIGN_OR_RETURN(Backend * b, backend_for(static_cast<DeviceType>(d)));
      KILN_ASSIGN_OR_RETURN(res.arena[d], b->allocate(need));
    }
    ++res.generation;
    moved = true;
  }
  if (moved)
    for (const auto& p : plans) {
      p->graphs.clear();  // captured over the old arena's addresses
      p->graphs_generation = ~uint64_t{0};
      KILN_RETURN_IF_ERROR(bind_shape_plan(g, *p, res));
    }
  return Status::Ok();
}

void ExecutionContext::set_max_shape_plans(size_t n) {
  Impl& ci = *impl_;
  ci.max_plans = n ? n : kDefaultMaxShapePlans;
  if (ci.plans.size() <= ci.max_plans) return;
  ci.plans.resize(ci.max_plans);
  // Best effort: a failed reallocation leaves no arena, and the next run allocates what it needs.
  if (!shrink_arena(*ci.engine->plan, ci.plans, ci.res).ok())
    for (auto& a : ci.res.arena) a.reset();
}
void ExecutionContext::set_cuda_graphs(bool enabled) { impl_->res.cuda_graphs = enabled; }

Status ExecutionContext::set_cuda_stream(void* stream) {
  const int cuda = static_cast<int>(DeviceType::kCUDA);
  if (impl_->engine->options.device != DeviceType::kCUDA || !impl_->res.state[cuda])
    return invalid_argument("set_cuda_stream: a CPU engine has no stream");
  KILN_ASSIGN_OR_RETURN(Backend * b, backend_for(DeviceType::kCUDA));
  return b->use_stream(impl_->res.state[cuda].get(), stream);
}
size_t ExecutionContext::cuda_graphs() const {
  size_t n = 0;
  for (const auto& p : impl_->plans)
    for (const auto& g : p->graphs) n += g.exec != nullptr;
  return n;
}
size_t ExecutionContext::arena_bytes(DeviceType device) const {
  const auto& a = impl_->res.arena[static_cast<int>(device)];
  return a ? a->bytes : 0;
}

// "input 'x'", built only when an error needs it (a run that checks fine allocates nothing).
struct Who {
  const std::string& name;
};
static std::string operator+(const Who& w, const std::string& rest) { return "input '" + w.name + "'" + rest; }
static std::string operator+(const Who& w, const char* rest) { return "input '" + w.name + "'" + rest; }

static Status check_input(const ir::Value& decl, const Value& given, const std::string& host_reader) {
  const ir::Type& t = decl.type;
  const Who who{decl.name};
  if (t.kind == ir::Type::Kind::kSequence && given.kind != Value::Kind::kSequence)
    return invalid_argument(who + " expects a sequence of tensors");
  if (t.kind == ir::Type::Kind::kTensor) {
    if (given.kind != Value::Kind::kTensor) return invalid_argument(who + " expects a tensor");
    const Tensor& x = given.tensor;
    if (!x.device().is_cpu() && (x.device().type != DeviceType::kCUDA || !host_reader.empty()))
      return invalid_argument(who + ": a " + (x.device().type == DeviceType::kCUDA ? "CUDA" : "device") +
                              " tensor cannot be given here (" + (host_reader.empty() ? "unknown device" : host_reader) +
                              "); pass a CPU tensor");
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

void ExecutionContext::set_profiling(bool on) {
  if (on) impl_->res.trace = std::make_unique<StepTrace>();
  else impl_->res.trace.reset();
}

std::vector<ProfileEvent> ExecutionContext::take_profile() {
  if (!impl_->res.trace) return {};
  return std::exchange(impl_->res.trace->events, {});
}

void ExecutionContext::terminate() { impl_->res.terminate.store(true, std::memory_order_relaxed); }
void ExecutionContext::set_stop_flag(const std::atomic<bool>* flag) { impl_->res.stop = flag; }
void ExecutionContext::set_run_timeout(double seconds) { impl_->timeout_s = seconds > 0 ? seconds : 0; }


void ExecutionContext::set_num_threads(int n) { impl_->threads = n > 0 ? n : 0; }

// Whether the caller's `out` can receive a GPU output in place (ShapePlan::direct_out): a tensor of
// the planned dtype and shape on the value's device, aligned as planned memory is (kernels plan for
// 256-byte-aligned buffers), and sharing no byte with an input (the output's maker may run before the
// last reader of that input).
static bool direct_output_fits(const Value& out, Device device, DataType dtype, const Shape& shape,
                               const std::vector<Value*>& inputs) {
  if (out.kind != Value::Kind::kTensor || !(out.tensor.device() == device) || out.tensor.dtype() != dtype ||
      out.tensor.shape() != shape)
    return false;
  const auto* begin = static_cast<const char*>(out.tensor.raw());
  if (!begin || reinterpret_cast<uintptr_t>(begin) % 256 != 0) return false;
  const char* end = begin + out.tensor.nbytes();
  for (const Value* in : inputs) {
    if (!in || in->kind != Value::Kind::kTensor || !(in->tensor.device() == device) || !in->tensor.raw()) continue;
    const auto* b = static_cast<const char*>(in->tensor.raw());
    if (b < end && begin < b + in->tensor.nbytes()) return false;
  }
  return true;
}

Status ExecutionContext::run_into(const std::vector<Value>& inputs, std::vector<Value>& outputs) {
  Impl& ci = *impl_;
  ThreadCountScope threads(ci.threads);
  ci.res.terminate.store(false, std::memory_order_relaxed);
  ci.res.deadline = ci.timeout_s > 0 ? std::chrono::steady_clock::now() +
                                           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               std::chrono::duration<double>(ci.timeout_s))
                                     : std::chrono::steady_clock::time_point::max();
  const Engine::Impl& e = *ci.engine;
  const CompiledGraph& plan = *e.plan;
  if (inputs.size() != ci.info_to_input.size())
    return invalid_argument("run_into: expected " + std::to_string(ci.info_to_input.size()) + " inputs (Engine::inputs() order), got " +
                            std::to_string(inputs.size()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int gi = ci.info_to_input[k];
    const ir::Value& decl = *e.graph->inputs[gi];
    const Value& given = inputs[k];
    if (given.kind == Value::Kind::kNone) {
      if (decl.constant) ci.bound[gi] = &ci.defaults[gi];
      else if (decl.type.kind == ir::Type::Kind::kOptional) ci.bound[gi] = &ci.none;
      else return invalid_argument("missing input '" + decl.name + "'");
      continue;
    }
    KILN_RETURN_IF_ERROR(check_input(decl, given, ci.host_reader[gi]));
    ci.bound[gi] = const_cast<Value*>(&given);  // read only: inputs are never written or released
  }

  // The shape plan of this signature (made and cached the first time it is seen).
  signature_key(plan, ci.bound.data(), ci.key);
  size_t found = ci.plans.size();
  for (size_t i = 0; i < ci.plans.size(); ++i)
    if (ci.plans[i]->key == ci.key) {
      found = i;
      break;
    }
  if (found == ci.plans.size()) {
    // A new signature: the shape profile that holds it (refused when none does).
    KILN_ASSIGN_OR_RETURN(const int profile, choose_profile(*e.graph, e.options.profiles, ci.bound.data()));
    const bool evict = ci.plans.size() >= ci.max_plans;
    if (evict) {
      ci.plans.resize(ci.max_plans - 1);
      // The arena the dropped plans needed goes back now, before the new plan grows it again.
      KILN_RETURN_IF_ERROR(shrink_arena(plan, ci.plans, ci.res));
    }
    ci.plans.insert(ci.plans.begin(), make_shape_plan(plan, ci.bound.data(), ci.res, profile));
  } else if (found != 0) {
    std::rotate(ci.plans.begin(), ci.plans.begin() + static_cast<std::ptrdiff_t>(found),
                ci.plans.begin() + static_cast<std::ptrdiff_t>(found) + 1);
  }
  ShapePlan& sp = *ci.plans.front();
  const uint64_t generation = ci.res.generation;
  KILN_RETURN_IF_ERROR(bind_shape_plan(plan, sp, ci.res));
  if (ci.res.generation != generation)
    // The arena moved: remake the other plans' views now (this run allocates anyway, being a new
    // signature's), so the old arena is freed and returning to a seen signature allocates nothing.
    for (size_t i = 1; i < ci.plans.size(); ++i) KILN_RETURN_IF_ERROR(bind_shape_plan(plan, *ci.plans[i], ci.res));

  outputs.resize(plan.outputs.size());
  for (size_t i = 0; i < plan.inputs.size(); ++i) sp.at[plan.inputs[i]] = ci.bound[i];
  for (size_t i = 0; i < plan.outputs.size(); ++i) {
    const int o = plan.outputs[i];
    if (plan.values[o].is_constant || sp.at[o] != &sp.slots[o]) continue;  // a constant, an input, or listed twice
    sp.at[o] = &outputs[i];
  }
  // Large GPU outputs into the caller's device buffers directly: the step that makes one writes it
  // there, and its copy (ShapePlan::direct_out) finds nothing to do.
  if (sp.ready && !sp.dirty)
    for (size_t i = 0; i < plan.outputs.size(); ++i) {
      const int u = sp.direct_out[i];
      if (u >= 0 && sp.at[plan.outputs[i]] == &outputs[i] && direct_output_fits(outputs[i], plan.values[u].device, sp.dtype[u],
                                                                                 sp.shape[u], ci.bound))
        sp.at[u] = &outputs[i];
    }
  Frame frame(plan, ci.res, sp);
  Status st = frame.execute();
  for (int d = 0; st.ok() && d < 2; ++d)
    if (ci.res.state[d]) {
      auto b = backend_for(static_cast<DeviceType>(d));
      st = b.ok() ? (*b)->synchronize(ci.res.state[d].get()) : b.status();
    }
  // Outputs that are not the caller's buffers (constants, inputs, outputs listed twice) are copied.
  for (size_t i = 0; st.ok() && i < plan.outputs.size(); ++i) {
    const int o = plan.outputs[i];
    if (sp.at[o] == &outputs[i]) continue;
    Value v = *sp.at[o];
    if (v.kind == Value::Kind::kTensor && v.tensor.device().is_cpu()) v.tensor = v.tensor.clone();
    outputs[i] = std::move(v);
  }
  for (int v : plan.inputs) sp.at[v] = &sp.slots[v];
  for (int v : plan.outputs) sp.at[v] = &sp.slots[v];
  for (int u : sp.direct_out)
    if (u >= 0) sp.at[u] = &sp.slots[u];
  if (!st.ok()) return st;
  if (!sp.ready || sp.dirty) {
    // New offsets: graphs captured over the old ones are void.
    sp.graphs.clear();
    sp.graphs_generation = ~uint64_t{0};
    sp.clean_runs = 0;
    finalize_shape_plan(plan, sp);
  } else {
    ++sp.clean_runs;
  }
  return Status::Ok();
}

Expected<Tensor> allocate_tensor(DataType dtype, const Shape& shape, Device device) {
  if (std::string why = check_tensor_size(dtype, shape); !why.empty()) return invalid_argument(why);
  if (device.is_cpu()) return Tensor::empty(dtype, shape);
  if (dtype == DataType::kString) return invalid_argument("string tensors live on the host only");
  KILN_ASSIGN_OR_RETURN(Backend * b, backend_for(device.type));
  KILN_ASSIGN_OR_RETURN(auto storage, b->allocate(shape_nbytes(dtype, shape)));
  return Tensor::with_storage(dtype, shape, std::move(storage));
}

Status transfer(const Tensor& src, Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.nbytes() != dst.nbytes())
    return invalid_argument("transfer: " + std::string(dtype_name(src.dtype())) + shape_to_string(src.shape()) + " into " +
                            dtype_name(dst.dtype()) + shape_to_string(dst.shape()) + " (dtype and size must match)");
  const Device d = !src.device().is_cpu() ? src.device() : dst.device();
  KILN_ASSIGN_OR_RETURN(Backend * b, backend_for(d.type));
  // No state: a synchronous copy. Into a caller's device tensor it also comes after the device's work
  // so far (the upload itself runs on a stream of its own, ordered after nothing: CudaBackend::copy).
  if (!dst.device().is_cpu()) KILN_RETURN_IF_ERROR(b->synchronize(nullptr));
  return b->copy(src, dst, nullptr);
}

Expected<std::vector<Value>> ExecutionContext::run(const std::map<std::string, Value>& inputs) {
  const Engine::Impl& e = *impl_->engine;
  std::vector<Value> ordered(e.inputs.size());
  for (const auto& [name, value] : inputs) {
    size_t k = 0;
    while (k < e.inputs.size() && e.inputs[k].name != name) ++k;
    if (k == e.inputs.size()) {
      std::string names;
      for (const auto& ti : e.inputs) names += (names.empty() ? "" : ", ") + ti.name;
      return invalid_argument("unknown input '" + name + "'; the model's inputs are: " + names);
    }
    ordered[k] = value;
  }
  std::vector<Value> out;
  KILN_RETURN_IF_ERROR(run_into(ordered, out));
  return out;
}

}  // namespace kiln
