#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln {

bool OpProfile::enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_PROFILE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void OpProfile::print() const {
  if (runs == 0) return;
  std::vector<std::pair<std::string, Entry>> rows(by_op.begin(), by_op.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& r : rows) total += r.second.seconds;
  const double per_run = 1e3 / static_cast<double>(runs);
  std::fprintf(stderr, "kiln profile: %lld runs, %.3f ms per run in kernels\n", static_cast<long long>(runs), total * per_run);
  std::fprintf(stderr, "  %-28s %10s %12s %7s\n", "op", "calls/run", "ms/run", "%");
  for (const auto& [op, e] : rows)
    std::fprintf(stderr, "  %-28s %10.1f %12.3f %7.1f\n", op.c_str(), static_cast<double>(e.calls) / runs,
                 e.seconds * per_run, total > 0 ? 100.0 * e.seconds / total : 0.0);
}
namespace {

class StepContext final : public KernelContext {
 public:
  StepContext(Frame& f, const Step& s) : f_(f), s_(s) {}
  int num_inputs() const override { return static_cast<int>(s_.in.size()); }
  int num_outputs() const override { return static_cast<int>(s_.out.size()); }
  bool has_input(int i) const override {
    return i < num_inputs() && s_.in[i] >= 0 && f_.slots[s_.in[i]].kind != Slot::Kind::kNone;
  }
  const Slot& input_slot(int i) const override {
    static const Slot kNone;
    return i < num_inputs() && s_.in[i] >= 0 ? f_.slots[s_.in[i]] : kNone;
  }
  bool has_output(int i) const override { return i < num_outputs() && s_.out[i] >= 0; }
  Tensor& output(int i, DataType dtype, const Shape& shape) override {
    static thread_local Slot sink;
    if (!has_output(i)) {
      sink = Slot::of(alloc(dtype, shape, nullptr));
      return sink.tensor;
    }
    const PlannedValue& pv = f_.graph.values[s_.out[i]];
    Slot& slot = f_.slots[s_.out[i]];
    slot = Slot::of(alloc(dtype, shape, &pv));
    return slot.tensor;
  }
  Slot& output_slot(int i) override {
    static thread_local Slot sink;
    if (!has_output(i)) return sink = Slot();
    return f_.slots[s_.out[i]];
  }
  Tensor owned_copy(const Tensor& t) override {
    Tensor c = alloc(t.dtype(), t.shape(), nullptr);
    Status st = s_.backend->copy(t, c, f_.res.state_for(s_.backend->device()));
    if (!st.ok()) throw std::runtime_error(st.message());
    return c;
  }
  Status run_subgraph(const CompiledGraph& body, std::vector<Slot> inputs, std::vector<Slot>& outputs) override {
    Frame sub(body, f_.res, &f_);
    for (size_t i = 0; i < body.inputs.size() && i < inputs.size(); ++i) sub.slots[body.inputs[i]] = std::move(inputs[i]);
    KILN_RETURN_IF_ERROR(sub.bind_captures());
    KILN_RETURN_IF_ERROR(sub.execute());
    outputs.clear();
    for (int o : body.outputs) outputs.push_back(sub.slots[o]);
    return Status::Ok();
  }
  void* device_state() const override { return f_.res.state_for(s_.backend->device()); }
  const ir::Node& node() const override {
    static const ir::Node kCopyNode = [] { ir::Node n; n.name = "copy"; n.op_type = "Copy"; return n; }();
    return s_.node ? *s_.node : kCopyNode;
  }

 private:
  Tensor alloc(DataType dtype, const Shape& shape, const PlannedValue* pv) {
    const Device dev = s_.backend->device();
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    const auto& arena = f_.res.arena[static_cast<int>(dev.type)];
    if (pv && pv->offset >= 0 && arena && dtype != DataType::kString && bytes <= pv->bytes)
      return Tensor::view(arena, static_cast<size_t>(pv->offset), dtype, shape);
    if (dev.is_cpu()) return Tensor::empty(dtype, shape);
    auto st = s_.backend->allocate(bytes);
    if (!st.ok()) throw std::runtime_error(st.status().message());
    return Tensor::with_storage(dtype, shape, *st);
  }

  Frame& f_;
  const Step& s_;
};

}  // namespace

Frame::Frame(const CompiledGraph& g, ContextResources& r, const Frame* p) : graph(g), parent(p), res(r) {
  slots.resize(g.values.size());
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].is_constant) slots[i] = g.values[i].constant;
}

const Slot* Frame::lookup(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent) {
    auto it = f->graph.by_name.find(name);
    // The nearest frame that defines the name owns it, even when it holds an empty optional.
    if (it != f->graph.by_name.end()) return &f->slots[it->second];
  }
  return nullptr;
}

Status Frame::bind_captures() {
  for (int c : graph.captures) {
    const std::string& name = graph.values[c].name;
    const Slot* s = parent ? parent->lookup(name) : nullptr;
    if (!s) return internal_error("subgraph '" + graph.graph->name + "': outer-scope value '" + name + "' is not available");
    slots[c] = *s;
  }
  return Status::Ok();
}

Status Frame::execute() {
  OpProfile* profile = parent ? nullptr : res.profile.get();  // subgraph steps count under their node
  if (profile) ++profile->runs;
  for (const Step& s : graph.steps) {
    const auto start = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    if (s.kind == Step::Kind::kCopy) {
      const Slot& src = slots[s.in[0]];
      if (src.kind == Slot::Kind::kTensor) {
        const Device dev = graph.values[s.out[0]].device;
        Tensor dst;
        const PlannedValue& pv = graph.values[s.out[0]];
        const auto& arena = res.arena[static_cast<int>(dev.type)];
        if (pv.offset >= 0 && arena && src.tensor.nbytes() <= pv.bytes) {
          dst = Tensor::view(arena, static_cast<size_t>(pv.offset), src.tensor.dtype(), src.tensor.shape());
        } else if (dev.is_cpu()) {
          dst = Tensor::empty(src.tensor.dtype(), src.tensor.shape());
        } else {
          KILN_ASSIGN_OR_RETURN(auto st, s.backend->allocate(src.tensor.nbytes()));
          dst = Tensor::with_storage(src.tensor.dtype(), src.tensor.shape(), st);
        }
        void* state = res.state_for(s.backend->device());
        KILN_RETURN_IF_ERROR(s.backend->copy(src.tensor, dst, state));
        // Host memory may be reused by the next step: finish the copy before going on.
        KILN_RETURN_IF_ERROR(s.backend->synchronize(state));
        slots[s.out[0]] = Slot::of(dst);
      } else if (src.kind == Slot::Kind::kNone) {
        slots[s.out[0]] = Slot();
      } else {
        return unsupported("sequences cannot move between devices yet ('" + graph.values[s.in[0]].name + "')");
      }
    } else {
      StepContext ctx(*this, s);
      Status st;
      try {
        st = s.kernel->run(ctx);
      } catch (const std::bad_alloc&) {
        st = runtime_error(s.node->describe() + ": out of memory");
      } catch (const std::exception& e) {
        st = runtime_error(s.node->describe() + ": " + e.what());
      }
      if (!st.ok()) return st;
    }
    if (profile) {
      const std::string op = s.node ? (s.node->domain.empty() ? s.node->op_type : s.node->domain + "." + s.node->op_type)
                                    : s.kernel_name;
      OpProfile::Entry& e = profile->by_op[op];
      ++e.calls;
      e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    for (int v : s.release) slots[v] = Slot();
  }
  return Status::Ok();
}

}  // namespace kiln
