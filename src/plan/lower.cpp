// plan/lower.cpp — graph → CompiledGraph: placement with fallback, kernels, copies, memory plan.
#include <algorithm>
#include <atomic>
#include <iostream>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "ops/op_table.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "util/log.h"

namespace kiln {
namespace {

// Names the node's subgraphs read from enclosing graphs, including what subgraphs nested in them
// read from two or more levels up (an importer need not list those in the middle graph's captures).
// Names the graph holding the node does not define are skipped by the caller.
void collect_captures(const ir::Node& n, std::set<std::string>& names);
void collect_graph_captures(const ir::Graph& g, std::set<std::string>& names) {
  for (const ir::Value* v : g.captures) names.insert(v->name);
  std::set<std::string> nested;
  for (const ir::Node* inner : g.nodes()) collect_captures(*inner, nested);
  for (const std::string& name : nested) {
    const ir::Value* v = g.find_value(name);
    if (!v || v->is_capture) names.insert(name);  // not defined by `g` itself: it comes from further out
  }
}
void collect_captures(const ir::Node& n, std::set<std::string>& names) {
  for (const auto& [k, a] : n.attrs) {
    if (a.g) collect_graph_captures(*a.g, names);
    for (const auto& g : a.graphs) collect_graph_captures(*g, names);
  }
}

class CpuSubgraphCompiler final : public SubgraphRunner {
 public:
  Expected<std::shared_ptr<CompiledGraph>> compile(const ir::Graph& body) override {
    // The body is owned by its node's attribute, which outlives the compiled plan of the node.
    std::shared_ptr<ir::Graph> alias(std::shared_ptr<ir::Graph>(), const_cast<ir::Graph*>(&body));
    LowerOptions o;
    o.device = DeviceType::kCPU;
    o.plan_memory = false;
    return lower(alias, o);
  }
};

struct Lowering {
  const LowerOptions& opt;
  std::shared_ptr<CompiledGraph> cg = std::make_shared<CompiledGraph>();
  std::map<const ir::Value*, int> index;
  std::map<std::pair<int, int>, int> copies;  // (value, device type) → copy's value index

  int add_value(const std::string& name, const ir::Type& type, Device dev) {
    PlannedValue pv;
    pv.name = name;
    pv.type = type;
    pv.device = dev;
    cg->values.push_back(std::move(pv));
    return static_cast<int>(cg->values.size()) - 1;
  }

  // The index of `v` as seen on `dev`, inserting a copy (or uploading a constant) when needed.
  Expected<int> on_device(int v, Backend* target) {
    const Device dev = target->device();
    if (cg->values[v].device == dev) return v;
    auto key = std::make_pair(v, static_cast<int>(dev.type));
    if (auto it = copies.find(key); it != copies.end()) return it->second;
    // add_value grows `values`: take references only after it (a reference taken before would dangle).
    const std::string copy_name = cg->values[v].name + (dev.is_cpu() ? "@cpu" : "@cuda");
    const ir::Type copy_type = cg->values[v].type;
    const int c = add_value(copy_name, copy_type, dev);
    cg->values[c].copy_of = v;
    const PlannedValue& src = cg->values[v];
    PlannedValue& dst = cg->values[c];
    if (src.is_constant && src.constant.kind == Slot::Kind::kTensor) {
      // Weights are uploaded once at build time and shared by every context.
      const Tensor& t = src.constant.tensor;
      KILN_ASSIGN_OR_RETURN(auto storage, target->allocate(t.nbytes()));
      Tensor d = Tensor::with_storage(t.dtype(), t.shape(), storage);
      KILN_RETURN_IF_ERROR(target->copy(t, d, nullptr));
      dst.is_constant = true;
      dst.constant = Slot::of(d);
    } else {
      Step s;
      s.kind = Step::Kind::kCopy;
      Backend* from = dev.is_cpu() ? nullptr : target;
      if (!from) {
        // Copy to host: the source device's backend does it.
        KILN_ASSIGN_OR_RETURN(Backend* b, backend_for(src.device.type));
        from = b;
      }
      s.device = from->device().type;
      s.kernel_name = dev.is_cpu() ? "copy.d2h" : "copy.h2d";
      s.in = {v};
      s.out = {c};
      cg->steps.push_back(std::move(s));
    }
    copies[key] = c;
    return c;
  }

  // Host-side metadata as placement proceeds: constants, captures and the outputs of host steps (a
  // Shape's output, what is computed from it). Graph inputs are not: they are the caller's data, fed on
  // the device as well as from host memory, and an integer input is data like any other.
  std::set<const ir::Value*> on_host;

  // Small integer computations on host-resident shapes (Shape → Gather → Concat → a Reshape target)
  // stay on the host, as TensorRT keeps shape tensors: every input whose values are read is an integer
  // or bool tensor of host metadata (a constant or a host step's output; never a graph input, never a
  // float tensor), and every output is an integer or bool tensor of rank <= 1 or at most 64 elements.
  bool host_shape_math(const ir::Node& n, const KernelDef& cpu_def) const {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const ir::Value* v = n.inputs[i];
      if (!v || cpu_def.shape_input(static_cast<int>(i))) continue;
      if (!on_host.count(v)) return false;
      const DataType dt = v->type.dtype;
      if (dt != DataType::kInt64 && dt != DataType::kInt32 && dt != DataType::kBool) return false;
    }
    for (const ir::Value* v : n.outputs) {
      if (!v) continue;
      const ir::Type& t = v->type;
      if (!t.is_tensor() || !t.shape.known) return false;
      if (t.dtype != DataType::kInt64 && t.dtype != DataType::kInt32 && t.dtype != DataType::kBool) return false;
      const bool small = t.shape.rank() <= 1 || (t.shape.is_static() && shape_numel(t.shape.to_static()) <= 64);
      if (!small) return false;
    }
    return true;
  }

  // For ops kiln does not know at all (no declaration, no kernel): which they are, and how a plugin
  // would provide them. Empty when every op is known.
  static std::string unknown_ops_hint(const ir::Graph& graph) {
    std::set<std::string> unknown;
    for (const ir::Node* n : graph.nodes())
      if (!ops::find_op(n->domain, n->op_type) && !cpu_backend().kernels().find(*n))
        unknown.insert((n->domain.empty() ? "" : n->domain + ".") + n->op_type);
    if (unknown.empty()) return "";
    std::string list;
    for (const std::string& op : unknown) list += (list.empty() ? "" : ", ") + op;
    return "\nkiln has no op " + list + ". If a plugin library implements " + (unknown.size() > 1 ? "them" : "it") +
           ", load it: kiln --plugin lib.so, BuildOptions::plugins, or in Python "
           "SessionOptions().register_custom_ops_library(path) (docs/plugins.md)";
  }

  // The target's kernel rows (CUDA engines); null for CPU engines.
  const KernelRegistry* target_kernels = nullptr;

  // Where one node runs: a kernel row of the target or of the CPU, and why it stays on the host.
  struct Placed {
    const KernelDef* def = nullptr;  // null: no kernel anywhere (`why` says so)
    bool on_target = false;
    std::string why;
  };

  Placed choose(const ir::Node& n) const {
    Placed p;
    std::string cpu_why;
    const KernelDef* cpu_def = cpu_backend().kernels().find(n, &cpu_why);
    // A plugin's kernel (CPU only for now) runs its op even where the target has a kernel of that
    // name: a plugin that overrides a built-in op replaces it on every device.
    const bool plugin = cpu_def && cpu_def->name.rfind("plugin.", 0) == 0;
    if (target_kernels && !plugin && !n.has_subgraphs() && !(cpu_def && host_shape_math(n, *cpu_def))) {
      std::string cuda_why;
      if ((p.def = target_kernels->find(n, &cuda_why))) {
        p.on_target = true;
        return p;
      }
      p.why = "no CUDA kernel (" + (cuda_why.empty() ? std::string("op not implemented") : cuda_why) + ")";
    }
    p.def = cpu_def;
    if (!p.def) {
      p.why = cpu_why.empty() ? "no kernel for this op" : cpu_why;
      return p;
    }
    if (p.why.empty() && plugin) p.why = "a plugin's kernel (plugins run on the CPU)";
    if (p.why.empty())
      p.why = n.has_subgraphs() ? "control flow: its subgraphs run on the CPU" : "integer shape computation on host values";
    if (!target_kernels) p.why.clear();
    return p;
  }

  // Places every node in order (a host step's outputs are host values for the nodes after it).
  std::vector<Placed> place(const ir::Graph& graph) {
    for (const ir::Value* v : graph.values())
      if (v->constant && !v->is_input) on_host.insert(v);
    for (const ir::Value* v : graph.captures) on_host.insert(v);
    std::vector<Placed> placed;
    for (const ir::Node* n : graph.nodes()) {
      Placed p = choose(*n);
      if (p.def && !p.on_target)
        for (const ir::Value* v : n->outputs)
          if (v) on_host.insert(v);
      placed.push_back(std::move(p));
    }
    return placed;
  }

  Expected<std::shared_ptr<CompiledGraph>> run(std::shared_ptr<ir::Graph> graph) {
    cg->graph = graph;
    cg->nodes.assign(graph->nodes().begin(), graph->nodes().end());
    KILN_ASSIGN_OR_RETURN(Backend* preferred, backend_for(opt.device));
    const Device host{};
    for (ir::Value* v : graph->values()) {
      const int i = add_value(v->name, v->type, host);
      index[v] = i;
      cg->by_name[v->name] = i;
      if (v->constant && !v->is_input) {
        cg->values[i].is_constant = true;
        cg->values[i].constant = Slot::of(*v->constant);
      }
    }
    for (ir::Value* v : graph->inputs) cg->inputs.push_back(index.at(v));
    for (ir::Value* v : graph->captures) cg->captures.push_back(index.at(v));
    if (opt.device == DeviceType::kCUDA) target_kernels = &preferred->kernels();

    // Placement first, so every unsupported node is reported at once.
    const std::vector<Placed> placed = place(*graph);
    std::vector<std::string> missing;
    size_t at = 0;
    for (const ir::Node* n : graph->nodes()) {
      const Placed& p = placed[at++];
      if (!p.def) missing.push_back(n->describe() + ": " + p.why);
      else if (opt.verbose && !p.why.empty()) log(LogLevel::kVerbose, n->describe() + " falls back to CPU: " + p.why);
    }
    if (!missing.empty()) {
      std::string msg = std::to_string(missing.size()) + " node(s) cannot run:";
      for (const auto& m : missing) msg += "\n  " + m;
      return unsupported(msg + unknown_ops_hint(*graph));
    }

    size_t k = 0;
    for (const ir::Node* n : graph->nodes()) {
      const Placed& p = placed[k++];
      const KernelDef* def = p.def;
      Backend* backend = p.on_target ? preferred : &cpu_backend();
      Step s;
      s.why_host = p.why;
      s.node = static_cast<int>(k - 1);
      s.device = backend->device().type;
      s.kernel_name = def->name;
      s.data_dependent = def->data_dependent || n->has_subgraphs();
      s.host_inputs = def->host_inputs;
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        ir::Value* v = n->inputs[i];
        if (!v) { s.in.push_back(-1); continue; }
        const int at = index.at(v);
        // Shape-only inputs are read where they live; host inputs come to (or stay in) host memory.
        if (def->shape_input(static_cast<int>(i))) {
          s.in.push_back(at);
          continue;
        }
        KILN_ASSIGN_OR_RETURN(int idx, on_device(at, def->host_input(static_cast<int>(i)) ? &cpu_backend() : backend));
        s.in.push_back(idx);
      }
      for (ir::Value* v : n->outputs) {
        if (!v) { s.out.push_back(-1); continue; }
        const int idx = index.at(v);
        cg->values[idx].device = backend->device();
        s.out.push_back(idx);
      }
      std::set<std::string> captured;
      collect_captures(*n, captured);
      for (const std::string& name : captured) {
        auto it = cg->by_name.find(name);
        if (it == cg->by_name.end()) continue;
        // Bodies run on the CPU and find captures by name: point the name at a host copy.
        KILN_ASSIGN_OR_RETURN(int idx, on_device(it->second, backend));
        s.implicit_in.push_back(idx);
        it->second = idx;
      }
      cg->steps.push_back(std::move(s));
    }
    // Outputs come back to the host.
    for (ir::Value* v : graph->outputs) {
      KILN_ASSIGN_OR_RETURN(int idx, on_device(index.at(v), &cpu_backend()));
      cg->outputs.push_back(idx);
    }
    plan_lifetimes();
    if (opt.plan_memory) plan_arena();
    // The plan is complete as data; its kernels come from it as an engine file's do.
    CpuSubgraphCompiler subgraphs;
    KILN_RETURN_IF_ERROR(instantiate_kernels(*cg, &subgraphs));
    return cg;
  }

  std::vector<int> last_use, first_def;

  void plan_lifetimes() {
    const int ns = static_cast<int>(cg->steps.size());
    Lifetimes life = derive_lifetimes(*cg);
    last_use = std::move(life.last_use);
    first_def = std::move(life.first_def);
    // A copy to the host must finish before a host kernel reads it; copies that only feed the graph's
    // outputs are waited for once, at the end of the run.
    for (int s = 0; s < ns; ++s) {
      Step& st = cg->steps[s];
      if (st.kind != Step::Kind::kCopy || !cg->values[st.out[0]].device.is_cpu()) continue;
      st.sync_after = last_use[st.out[0]] > s;
    }
    cg->first_def = first_def;
    cg->last_use = last_use;
    for (int s = 0; s < ns; ++s) cg->steps[s].release = std::move(life.release[s]);
  }

  void plan_arena() {
    cg->use_arena = true;
    std::set<int> outputs(cg->outputs.begin(), cg->outputs.end());
    for (int d = 0; d < 2; ++d) {
      std::vector<int> vs;
      std::vector<BufferRequest> reqs;
      for (int v = 0; v < static_cast<int>(cg->values.size()); ++v) {
        PlannedValue& pv = cg->values[v];
        if (static_cast<int>(pv.device.type) != d || pv.is_constant || outputs.count(v) || first_def[v] < 0) continue;
        if (!pv.type.is_tensor() || !pv.type.shape.is_static() || pv.type.dtype == DataType::kString ||
            pv.type.dtype == DataType::kUndefined)
          continue;
        const size_t bytes = shape_nbytes(pv.type.dtype, pv.type.shape.to_static());
        // Empty, or too large to exist: not planned (a run that makes it fails with a clear error).
        if (bytes == 0 || bytes > max_tensor_bytes()) continue;
        vs.push_back(v);
        reqs.push_back({bytes, first_def[v], std::max(first_def[v], last_use[v])});
      }
      std::vector<size_t> offsets;
      cg->arena_bytes[d] = plan_offsets(reqs, offsets);
      for (size_t i = 0; i < vs.size(); ++i) {
        cg->values[vs[i]].offset = static_cast<int64_t>(offsets[i]);
        cg->values[vs[i]].bytes = (reqs[i].bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
      }
    }
  }
};

std::atomic<uint64_t> g_lowerings{0};

}  // namespace

uint64_t lowering_count() { return g_lowerings.load(); }

std::unique_ptr<SubgraphRunner> make_subgraph_compiler() { return std::make_unique<CpuSubgraphCompiler>(); }

Expected<const KernelDef*> step_kernel_row(Backend& backend, const Step& s, const ir::Node& n) {
  const KernelDef* def = backend.kernels().by_name(s.kernel_name);
  if (!def)
    return Status{StatusCode::kEngineMismatch, n.describe() + ": the plan names kernel '" + s.kernel_name +
                                                   "', which this kiln does not have; rebuild the engine"};
  if (def->op != n.op_type) return invalid_model(n.describe() + ": kernel '" + s.kernel_name + "' is for another op");
  // A row this machine cannot run (a CPU feature it lacks: oneDNN's VNNI int8 kernels) gives way to the
  // row placement would choose here for the same node, when the step recorded no tactic of its own: an
  // INT8 engine built on a VNNI machine runs on the exact int8 rows of one without.
  const bool untuned = std::all_of(s.tactics.begin(), s.tactics.end(), [](const std::string& t) { return t.empty(); });
  if (def->unavailable && untuned)
    if (const std::string why = def->unavailable(); !why.empty()) {
      const KernelDef* here = backend.kernels().find(n);
      if (here && here->op == def->op && here->domain == def->domain) {
        log(LogLevel::kInfo, n.describe() + ": kernel '" + s.kernel_name + "' cannot run here (" + why + "); running '" +
                                 here->name + "', which computes the same op");
        return here;
      }
    }
  // The test placement applies (domain, opset range, dtypes and attributes), so a plan cannot bind a
  // node to a kernel that would misread it.
  if (const std::string why = def->rejects(n); !why.empty())
    return invalid_model(n.describe() + ": kernel '" + s.kernel_name + "' cannot run this node: " + why);
  return def;
}

// A kernel's factory sizes what it prepares from the node (attributes, weights): an allocation that
// fails there is this node's error, never an abort of the caller.
static Expected<KernelPtr> create_kernel(const KernelDef& def, const ir::Node& n, KernelInit& init) {
  try {
    return def.create(n, init);
  } catch (const std::bad_alloc&) {
    return runtime_error(n.describe() + ": out of memory preparing its kernel");
  } catch (const std::exception& e) {
    return runtime_error(n.describe() + ": " + e.what());
  }
}

Status instantiate_kernels(CompiledGraph& cg, SubgraphRunner* subgraphs) {
  cg.kernels.clear();
  cg.kernels.resize(cg.steps.size());
  for (size_t si = 0; si < cg.steps.size(); ++si) {
    const Step& s = cg.steps[si];
    Backend*& backend = cg.backends[static_cast<int>(s.device)];
    if (!backend) {
      KILN_ASSIGN_OR_RETURN(backend, backend_for(s.device));
    }
    if (s.kind != Step::Kind::kKernel) continue;
    if (s.node < 0 || static_cast<size_t>(s.node) >= cg.nodes.size())
      return invalid_model("step " + std::to_string(si) + " names no node of its graph");
    const ir::Node& n = cg.node(s);
    KILN_ASSIGN_OR_RETURN(const KernelDef* def, step_kernel_row(*backend, s, n));
    KernelInit init;
    init.subgraphs = subgraphs;
    init.device_state = backend->build_state();
    auto kernel = create_kernel(*def, n, init);
    if (!kernel.ok()) return kernel.status().with_context(n.describe());
    cg.kernels[si] = std::move(kernel).value();
  }
  return Status::Ok();
}

Expected<std::shared_ptr<CompiledGraph>> lower(std::shared_ptr<ir::Graph> graph, const LowerOptions& options) {
  g_lowerings.fetch_add(1);
  Lowering l{options};
  return l.run(std::move(graph));
}

Expected<std::vector<PlacementEntry>> preview_placement(const ir::Graph& graph, DeviceType device) {
  LowerOptions o;
  o.device = device;
  Lowering l{o};
  if (device == DeviceType::kCUDA) {
    l.target_kernels = cuda_kernel_registry();
    if (!l.target_kernels) return unsupported("this kiln was built without CUDA: it has no CUDA kernels to place");
  }
  const auto placed = l.place(graph);
  std::vector<PlacementEntry> out;
  size_t at = 0;
  for (const ir::Node* n : graph.nodes()) {
    const auto& p = placed[at++];
    PlacementEntry e;
    e.node = n->name;
    e.op = n->op_type;
    e.device = p.def ? (p.on_target ? "cuda" : "cpu") : "";
    e.kernel = p.def ? p.def->name : "";
    e.why = p.why;
    out.push_back(std::move(e));
  }
  return out;
}

std::string describe_plan(const CompiledGraph& plan, const std::function<std::string(int)>& annotate) {
  std::ostringstream os;
  std::map<std::string, int> per_device;
  int copies = 0, host_shape = 0;
  for (size_t si = 0; si < plan.steps.size(); ++si) {
    const Step& s = plan.steps[si];
    const char* device = s.device == DeviceType::kCUDA ? "cuda" : "cpu";
    os << "[" << device << "] ";
    if (s.kind == Step::Kind::kCopy) {
      ++copies;
      os << s.kernel_name << " " << plan.values[s.in[0]].name << (annotate ? annotate(static_cast<int>(si)) : "") << "\n";
    } else {
      ++per_device[device];
      const ir::Node& n = plan.node(s);
      os << n.name << " (" << n.op_type << ") -> " << s.kernel_name;
      bool any = false;
      for (const std::string& t : s.tactics) any = any || !t.empty();
      if (any) {
        os << "  {tactic";
        for (size_t p = 0; p < s.tactics.size(); ++p) {
          if (s.tactics.size() > 1) os << (p ? "; " : " ") << "profile " << p << ":";
          os << " " << (s.tactics[p].empty() ? "(own)" : s.tactics[p]);
          if (p < s.tactic_ms.size() && s.tactic_ms[p] > 0) {
            char buf[32];
            std::snprintf(buf, sizeof buf, " %.4f ms", s.tactic_ms[p]);
            os << buf;
          } else if (!s.tactics[p].empty()) {
            os << " (untuned)";  // the kernel's own choice, recorded at build (tune/tuner.h record_default_tactics)
          }
        }
        os << "}";
      }
      if (annotate) os << annotate(static_cast<int>(si));
      if (!s.why_host.empty()) {
        os << "  [" << s.why_host << "]";
        if (s.why_host.rfind("integer shape computation", 0) == 0) ++host_shape;
      }
      os << "\n";
    }
  }
  os << "steps:";
  for (const auto& [dev, count] : per_device) os << " " << count << " on " << dev << ";";
  os << " " << copies << " copies";
  if (host_shape) os << "; " << host_shape << " of the cpu steps are integer shape computations on host values";
  os << "\n";
  return os.str();
}

Lifetimes derive_lifetimes(const CompiledGraph& cg) {
  const int nv = static_cast<int>(cg.values.size());
  const int ns = static_cast<int>(cg.steps.size());
  Lifetimes r;
  r.last_use.assign(nv, -1);
  r.first_def.assign(nv, -1);
  r.release.resize(ns);
  for (int s = 0; s < ns; ++s) {
    const Step& st = cg.steps[s];
    for (int v : st.in) if (v >= 0 && v < nv) r.last_use[v] = s;
    for (int v : st.implicit_in) if (v >= 0 && v < nv) r.last_use[v] = s;
    for (int v : st.out) if (v >= 0 && v < nv && r.first_def[v] < 0) r.first_def[v] = s;
  }
  std::vector<char> keep(nv, 0);
  for (int v : cg.outputs) if (v >= 0 && v < nv) keep[v] = 1;
  for (int v : cg.captures) if (v >= 0 && v < nv) keep[v] = 1;
  for (int v = 0; v < nv; ++v) {
    if (cg.values[v].is_constant || keep[v]) continue;
    // Values nobody reads die right after they are made.
    const int s = r.last_use[v] >= 0 ? r.last_use[v] : r.first_def[v];
    if (s >= 0) r.release[s].push_back(v);
  }
  return r;
}

}  // namespace kiln
