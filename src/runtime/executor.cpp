#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "ops/op_table.h"
#include "plan/memory.h"
#include "runtime/eager.h"
#include "util/log.h"

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

bool same_shape(const Shape& a, const Shape& b) { return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin()); }

// Bytes of a value about to be made; throws (caught by the step guard, which names the node) when the
// shape is negative, overflows, or is over max_tensor_bytes.
size_t bytes_of(DataType dtype, const Shape& shape) {
  if (std::string why = check_tensor_size(dtype, shape); !why.empty()) throw std::length_error(why);
  return shape_nbytes(dtype, shape);
}

// The host value of a constant (or of the constant a device copy was made from), for shape planning.
const Tensor* host_constant(const CompiledGraph& g, int v) {
  if (v < 0) return nullptr;
  const PlannedValue& pv = g.values[v];
  if (!pv.is_constant) return nullptr;
  if (pv.device.is_cpu() && pv.constant.kind == Slot::Kind::kTensor) return &pv.constant.tensor;
  return host_constant(g, pv.copy_of);
}

}  // namespace

Status fill_reshape_context(const CompiledGraph& g, const ShapePlan& plan, int si, const Frame* frame,
                            const ContextResources& res, ReshapeContext& rc) {
  const Step& s = g.steps[si];
  rc.tactic = s.tactic(plan.profile);
  rc.in.assign(s.in.size(), {});
  for (size_t i = 0; i < s.in.size(); ++i) {
    const int v = s.in[i];
    if (v < 0) continue;
    ReshapeContext::In& in = rc.in[i];
    if (frame) {
      const Slot& slot = *frame->at[v];
      if (slot.kind != Slot::Kind::kTensor) continue;
      in.present = true;
      in.dtype = slot.tensor.dtype();
      in.shape = slot.tensor.shape();
      // Only constants, and the host inputs of a step re-planned on every run: a cached plan must not
      // depend on input values.
      in.value = host_constant(g, v);
      if (!in.value && s.host_input(i) && slot.tensor.device().is_cpu()) in.value = &slot.tensor;
    } else {
      if (!plan.known[v]) return unsupported("input shape unknown");
      in.present = true;
      in.dtype = plan.dtype[v];
      in.shape = plan.shape[v];
      in.value = plan.value[v].defined() ? &plan.value[v] : host_constant(g, v);
    }
  }
  rc.out.assign(s.out.size(), {});
  rc.device_state = res.state_for(g.backend(s).device());
  return Status::Ok();
}

namespace {

// Runs kernel step `si`'s reshape() and records the results in `plan`. With a `frame`, for the inputs
// it holds now; without, for the shapes (and shape values) the plan knows.
Status reshape_step(const CompiledGraph& g, ShapePlan& plan, int si, const Frame* frame, ContextResources& res) {
  const Step& s = g.steps[si];
  ReshapeContext rc{g.node(s), {}, {}, nullptr, 0, nullptr, {}, {}, -1};
  KILN_RETURN_IF_ERROR(fill_reshape_context(g, plan, si, frame, res, rc));
  KILN_RETURN_IF_ERROR(g.kernel(si).reshape(rc));
  for (size_t o = 0; o < s.out.size() && o < rc.out.size(); ++o)
    if (s.out[o] >= 0) plan.learn(s.out[o], rc.out[o].first, rc.out[o].second);
  plan.reshaped[si] = 1;
  plan.step_state[si] = std::move(rc.state);
  plan.ws_bytes[si] = rc.workspace_bytes;
  plan.share_in[si] = rc.share_input;
  // Planned before running (a run's re-plan allocates nothing for it): what the build records as the
  // kernel's own choice (tune/tuner.h record_default_tactics).
  if (!frame) plan.planned_tactic[si] = std::move(rc.planned_tactic);
  return Status::Ok();
}

// Output types of a kernel step from its op's shape function, on the plan's concrete input shapes.
void infer_step(const CompiledGraph& g, ShapePlan& plan, const Step& s) {
  const ops::OpDef* def = ops::find_op(g.node(s).domain, g.node(s).op_type);
  if (!def || !def->infer) return;
  std::vector<ir::Type> types(s.in.size());
  ops::InferContext ictx{g.node(s), {}, {}, {}};
  for (size_t i = 0; i < s.in.size(); ++i) {
    const int v = s.in[i];
    if (v < 0) {
      ictx.in.push_back(nullptr);
      ictx.in_value.push_back(nullptr);
      continue;
    }
    if (!plan.known[v]) return;
    types[i] = ir::Type::tensor(plan.dtype[v], ir::SymShape::of(plan.shape[v]));
    ictx.in.push_back(&types[i]);
    ictx.in_value.push_back(plan.value[v].defined() ? &plan.value[v] : host_constant(g, v));
  }
  ictx.out.resize(s.out.size());
  for (auto& t : ictx.out) t.kind = ir::Type::Kind::kUnknown;
  if (!def->infer(ictx).ok()) return;
  for (size_t o = 0; o < s.out.size() && o < ictx.out.size(); ++o) {
    const int v = s.out[o];
    const ir::Type& t = ictx.out[o];
    if (v < 0 || !t.is_tensor() || t.dtype == DataType::kUndefined || !t.shape.is_static()) continue;
    plan.learn(v, t.dtype, t.shape.to_static());
  }
}

// Shape values: small integer tensors that follow from the input shapes alone (Shape, Size, and
// what Gather/Concat/Unsqueeze/Slice/arithmetic make of them and of constants), computed on the
// host while planning, the way TensorRT treats shape tensors. They let the shape functions plan a
// Reshape whose target is computed, without a learning run. A pure function of the signature.
void eval_shape_value(const CompiledGraph& g, ShapePlan& plan, const Step& s) {
  constexpr int64_t kMaxElems = 64;
  const bool shape_op = g.node(s).domain.empty() && (g.node(s).op_type == "Shape" || g.node(s).op_type == "Size");
  for (int v : s.out) {
    if (v < 0) continue;
    if (!plan.known[v] ||
        (plan.dtype[v] != DataType::kInt64 && plan.dtype[v] != DataType::kInt32 && plan.dtype[v] != DataType::kBool) ||
        shape_numel(plan.shape[v]) > kMaxElems)
      return;
  }
  std::vector<Slot> in(s.in.size());
  for (size_t i = 0; i < s.in.size(); ++i) {
    const int v = s.in[i];
    if (v < 0) continue;
    if (plan.value[v].defined()) {
      in[i] = Slot::of(plan.value[v]);
    } else if (const Tensor* c = host_constant(g, v)) {
      in[i] = Slot::of(*c);
    } else if (shape_op && i == 0 && plan.known[v]) {
      in[i] = Slot::of(Tensor::borrow(plan.dtype[v], plan.shape[v], nullptr));  // only its shape is read
    } else {
      return;
    }
  }
  auto out = run_node_eager(g.node(s), in);
  if (!out.ok()) return;
  for (size_t o = 0; o < s.out.size() && o < out->size(); ++o) {
    const int v = s.out[o];
    const Slot& r = (*out)[o];
    if (v < 0 || r.kind != Slot::Kind::kTensor || r.tensor.dtype() != plan.dtype[v] ||
        !same_shape(r.tensor.shape(), plan.shape[v]))
      continue;
    plan.value[v] = r.tensor;
  }
}

class StepContext final : public KernelContext {
 public:
  StepContext(Frame& f, const Step& s, int si, AdHocShapes* adhoc)
      : f_(f), s_(s), b_(f.graph.backend(s)), si_(si), adhoc_(adhoc) {}
  int num_inputs() const override { return static_cast<int>(s_.in.size()); }
  int num_outputs() const override { return static_cast<int>(s_.out.size()); }
  bool has_input(int i) const override {
    return i < num_inputs() && s_.in[i] >= 0 && f_.at[s_.in[i]]->kind != Slot::Kind::kNone;
  }
  const Slot& input_slot(int i) const override {
    static const Slot kNone;
    return i < num_inputs() && s_.in[i] >= 0 ? *f_.at[s_.in[i]] : kNone;
  }
  bool has_output(int i) const override { return i < num_outputs() && s_.out[i] >= 0; }
  Tensor& output(int i, DataType dtype, const Shape& shape) override {
    if (!has_output(i)) {
      static thread_local Slot sink;
      sink = Slot::of(alloc_unplanned(dtype, shape));
      return sink.tensor;
    }
    return f_.make_output(s_.out[i], b_, dtype, shape);
  }
  Tensor& output(int i) override {
    if (adhoc_) return output(i, adhoc_->out[i].first, adhoc_->out[i].second);
    const int v = has_output(i) ? s_.out[i] : -1;
    if (v < 0 || !f_.plan->known[v]) throw std::runtime_error("output " + std::to_string(i) + " was not planned");
    return output(i, f_.plan->dtype[v], f_.plan->shape[v]);
  }
  void* workspace() override {
    if (adhoc_) return adhoc_->workspace_ptr();
    const ShapePlan& p = *f_.plan;
    if (p.ws_offset[si_] >= 0) {
      const auto& arena = f_.res.arena[static_cast<int>(b_.device().type)];
      return static_cast<char*>(arena->data) + p.ws_offset[si_];
    }
    return p.ws_tmp[si_] ? p.ws_tmp[si_]->data : nullptr;
  }
  const void* shape_state() const override { return adhoc_ ? adhoc_->state.get() : f_.plan->step_state[si_].get(); }
  Slot& output_slot(int i) override {
    static thread_local Slot sink;
    if (!has_output(i)) return sink = Slot();
    return *f_.at[s_.out[i]];
  }
  Tensor owned_copy(const Tensor& t) override {
    Tensor c = alloc_unplanned(t.dtype(), t.shape());
    Status st = b_.copy(t, c, f_.res.state_for(b_.device()));
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
  void* device_state() const override { return f_.res.state_for(b_.device()); }
  Status check_stop() const override { return f_.res.check_stop(); }
  const ir::Node& node() const override {
    static const ir::Node kCopyNode = [] { ir::Node n; n.name = "copy"; n.op_type = "Copy"; return n; }();
    return s_.node >= 0 ? f_.graph.node(s_) : kCopyNode;
  }

 private:
  Tensor alloc_unplanned(DataType dtype, const Shape& shape) {
    if (b_.device().is_cpu()) return Tensor::empty(dtype, shape);
    auto st = b_.allocate(bytes_of(dtype, shape));
    if (!st.ok()) throw std::runtime_error(st.status().message());
    return Tensor::with_storage(dtype, shape, *st);
  }

  Frame& f_;
  const Step& s_;
  Backend& b_;  // the backend that runs the step
  int si_;
  AdHocShapes* adhoc_;
};

}  // namespace

void signature_key(const CompiledGraph& g, Slot* const* inputs, std::vector<int64_t>& key) {
  key.clear();
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Slot& s = *inputs[i];
    key.push_back(static_cast<int64_t>(s.kind));
    if (s.kind != Slot::Kind::kTensor) {
      if (s.kind == Slot::Kind::kSequence) key.push_back(static_cast<int64_t>(s.sequence.size()));
      continue;
    }
    key.push_back(static_cast<int64_t>(s.tensor.dtype()));
    key.push_back(s.tensor.rank());
    for (int64_t d : s.tensor.shape()) key.push_back(d);
  }
}

std::unique_ptr<ShapePlan> make_shape_plan(const CompiledGraph& g, Slot* const* inputs, ContextResources& res,
                                           int profile) {
  auto p = std::make_unique<ShapePlan>();
  p->profile = profile;
  const size_t nv = g.values.size(), ns = g.steps.size();
  signature_key(g, inputs, p->key);
  p->known.assign(nv, 0);
  p->dtype.assign(nv, DataType::kUndefined);
  p->shape.assign(nv, Shape{});
  p->offset.assign(nv, -1);
  p->bytes.assign(nv, 0);
  p->reshaped.assign(ns, 0);
  p->step_state.assign(ns, nullptr);
  p->ws_bytes.assign(ns, 0);
  p->share_in.assign(ns, -1);
  p->planned_tactic.assign(ns, std::string());
  p->ws_offset.assign(ns, -1);
  p->ws_tmp.assign(ns, nullptr);
  p->dyn.assign(nv, 0);
  p->value.assign(nv, Tensor());
  p->volatile_step.assign(ns, 0);
  p->direct_out.assign(g.outputs.size(), -1);
  p->direct.assign(nv, 0);
  p->slots.resize(nv);
  p->at.resize(nv);
  for (size_t v = 0; v < nv; ++v) {
    p->at[v] = &p->slots[v];
    const PlannedValue& pv = g.values[v];
    if (!pv.is_constant) continue;
    p->slots[v] = pv.constant;
    if (pv.constant.kind == Slot::Kind::kTensor) p->learn(static_cast<int>(v), pv.constant.tensor.dtype(), pv.constant.tensor.shape());
  }
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Slot& s = *inputs[i];
    if (s.kind == Slot::Kind::kTensor) p->learn(g.inputs[i], s.tensor.dtype(), s.tensor.shape());
  }
  // Walk the steps host-side: kernels that plan themselves, then the ops' shape functions.
  bool complete = true;
  for (size_t si = 0; si < ns; ++si) {
    const Step& s = g.steps[si];
    if (s.kind == Step::Kind::kCopy) {
      const int a = s.in[0], b = s.out[0];
      if (p->dyn[a]) {
        p->dyn[b] = 1;
        continue;
      }
      if (p->known[a]) {
        p->learn(b, p->dtype[a], p->shape[a]);
        p->value[b] = p->value[a];
      }
    } else {
      bool dyn_in = false;
      for (int v : s.in) dyn_in = dyn_in || (v >= 0 && p->dyn[v]);
      for (int v : s.implicit_in) dyn_in = dyn_in || p->dyn[v];
      // A host input whose value the plan cannot know (not a constant, not a shape value): the step
      // is planned again on every run, with the value in hand.
      for (size_t i = 0; i < s.in.size(); ++i) {
        const int v = s.in[i];
        if (v >= 0 && s.host_input(i) && !p->value[v].defined() && !host_constant(g, v)) dyn_in = true;
      }
      if (s.data_dependent || dyn_in) {
        // Sizes depend on values: its outputs (and all they feed) are made as they run.
        for (int v : s.out)
          if (v >= 0) p->dyn[v] = 1;
        p->volatile_step[si] = 1;
        continue;
      }
      // An input too large to exist (over max_tensor_bytes, or its size overflows) is never made: the
      // step making it fails with a clear error when it runs. Its readers are not planned on it, so no
      // kernel's reshape() sees a shape whose strides overflow.
      bool too_large = false;
      for (int v : s.in) too_large = too_large || (v >= 0 && p->known[v] && p->bytes[v] > max_tensor_bytes());
      if (!too_large) {
        if (!g.kernel(si).has_reshape() || !reshape_step(g, *p, static_cast<int>(si), nullptr, res).ok())
          infer_step(g, *p, s);
        eval_shape_value(g, *p, s);
      }
    }
    for (int v : s.out)
      if (v >= 0 && !p->known[v] && g.values[v].type.kind != ir::Type::Kind::kSequence &&
          g.values[v].type.kind != ir::Type::Kind::kOptional) {
        if (complete && s.node >= 0 && log_enabled(LogLevel::kVerbose))
          log(LogLevel::kVerbose, "memory plan: the shapes of " + g.node(s).describe() +
                                      " are known only by running it; this signature is planned after its first run");
        complete = false;
      }
  }
  if (complete) finalize_shape_plan(g, *p);
  return p;
}

namespace {

// The smallest engine output written in place (see ShapePlan::direct_out): below it, a copy on the
// device costs about what taking the step out of its CUDA graph (one more launch) would.
constexpr size_t kMinDirectOutputBytes = size_t{4} << 20;

// For engine output `o` of a planned signature: the GPU value its copy step reads, when the kernel
// step making that value may write it into a caller's device buffer instead of its arena memory;
// -1 otherwise. Required: the copy is the value's only reader (nothing reads the caller's buffer
// during the run, and no step works in place on it); its maker is a GPU kernel step of fixed output
// sizes that does not work in place on an input (share_in: the planner may have put its output in
// the input's memory, which such a kernel may rely on); the value is a planned buffer of a size
// worth a skipped copy.
int direct_output_value(const CompiledGraph& g, const ShapePlan& p, int o) {
  const int sc = g.first_def[o];
  if (sc < 0) return -1;
  const Step& copy = g.steps[sc];
  if (copy.kind != Step::Kind::kCopy || copy.device != DeviceType::kCUDA || copy.in.empty() || copy.out.empty() ||
      copy.out[0] != o)
    return -1;
  const int u = copy.in[0];
  if (u < 0 || g.values[u].is_constant || g.values[u].device.type != DeviceType::kCUDA || p.dyn[u] || p.offset[u] < 0 ||
      p.bytes[u] < kMinDirectOutputBytes || g.last_use[u] != sc)
    return -1;
  const int ps = g.first_def[u];
  if (ps < 0) return -1;
  const Step& maker = g.steps[ps];
  if (maker.kind != Step::Kind::kKernel || maker.device != DeviceType::kCUDA || maker.data_dependent ||
      p.share_in[ps] >= 0 || p.volatile_step[ps])
    return -1;
  for (size_t si = 0; si < g.steps.size(); ++si) {
    if (static_cast<int>(si) == sc) continue;
    const Step& s = g.steps[si];
    if (std::count(s.in.begin(), s.in.end(), u) || std::count(s.implicit_in.begin(), s.implicit_in.end(), u)) return -1;
  }
  for (int v : g.inputs)
    if (v == u) return -1;
  for (int v : g.captures)
    if (v == u) return -1;
  return u;
}

}  // namespace

void finalize_shape_plan(const CompiledGraph& g, ShapePlan& p) {
  std::vector<char> excluded(g.values.size(), 0);
  for (int v : g.inputs) excluded[v] = 1;
  for (int v : g.outputs) excluded[v] = 1;
  for (int v : g.captures) excluded[v] = 1;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (p.dyn[v]) excluded[v] = 1;
  std::fill(p.offset.begin(), p.offset.end(), -1);
  std::fill(p.ws_offset.begin(), p.ws_offset.end(), -1);
  auto planned = [&](size_t v) {
    const PlannedValue& pv = g.values[v];
    if (excluded[v] || pv.is_constant || !p.known[v]) return false;
    if (g.first_def[v] < 0 || p.dtype[v] == DataType::kString || p.dtype[v] == DataType::kUndefined) return false;
    // Too large to exist (over max_tensor_bytes, or overflowing): left out, so the step that would
    // make it fails with a clear error instead of the arena's arithmetic wrapping around.
    return p.bytes[v] != 0 && p.bytes[v] <= max_tensor_bytes();
  };
  // In place: a step's output 0 takes the memory of the input its kernel named (share_in) when the
  // step is that input's last reader, reads it through no other operand, and both are planned
  // buffers of one size on one device. Such values form chains (one ResNet block's output is the
  // next block's residual); each chain is one buffer, live from its first value's definition to its
  // last value's last use.
  std::vector<int> head(g.values.size());
  for (size_t v = 0; v < head.size(); ++v) head[v] = static_cast<int>(v);
  for (size_t si = 0; si < g.steps.size(); ++si) {
    const Step& s = g.steps[si];
    const int k = p.share_in[si];
    if (k < 0 || p.volatile_step[si] || k >= static_cast<int>(s.in.size()) || s.out.empty()) continue;
    const int a = s.in[k], y = s.out[0];
    if (a < 0 || y < 0 || !planned(a) || !planned(y) || g.last_use[a] != static_cast<int>(si)) continue;
    if (g.values[a].device.type != g.values[y].device.type || p.bytes[a] != p.bytes[y]) continue;
    if (std::count(s.in.begin(), s.in.end(), a) != 1 || std::count(s.implicit_in.begin(), s.implicit_in.end(), a))
      continue;
    head[y] = head[a];
    if (log_enabled(LogLevel::kVerbose))
      log(LogLevel::kVerbose, "memory plan: " + g.node(s).describe() + " writes '" + g.values[y].name +
                                  "' in place of '" + g.values[a].name + "'");
  }
  for (int d = 0; d < 2; ++d) {
    std::vector<BufferRequest> reqs;
    std::vector<int> owner;  // value index (a chain's head), or -(step + 1) for a workspace
    std::vector<int> request_of(g.values.size(), -1);
    for (size_t v = 0; v < g.values.size(); ++v) {
      if (static_cast<int>(g.values[v].device.type) != d || !planned(v) || head[v] != static_cast<int>(v)) continue;
      request_of[v] = static_cast<int>(reqs.size());
      reqs.push_back({p.bytes[v], g.first_def[v], std::max(g.first_def[v], g.last_use[v])});
      owner.push_back(static_cast<int>(v));
    }
    for (size_t v = 0; v < g.values.size(); ++v)  // a chain's other values extend its buffer's life
      if (static_cast<int>(g.values[v].device.type) == d && head[v] != static_cast<int>(v)) {
        BufferRequest& r = reqs[request_of[head[v]]];
        r.end = std::max({r.end, g.first_def[v], g.last_use[v]});
      }
    for (size_t si = 0; si < g.steps.size(); ++si) {
      const Step& s = g.steps[si];
      if (!p.ws_bytes[si] || p.volatile_step[si] || static_cast<int>(s.device) != d) continue;
      reqs.push_back({p.ws_bytes[si], static_cast<int>(si), static_cast<int>(si)});
      owner.push_back(-static_cast<int>(si) - 1);
    }
    std::vector<size_t> offsets;
    p.arena_bytes[d] = plan_offsets(reqs, offsets);
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (owner[i] >= 0) p.offset[owner[i]] = static_cast<int64_t>(offsets[i]);
      else p.ws_offset[-owner[i] - 1] = static_cast<int64_t>(offsets[i]);
    }
    for (size_t v = 0; v < g.values.size(); ++v)
      if (head[v] != static_cast<int>(v) && static_cast<int>(g.values[v].device.type) == d)
        p.offset[v] = p.offset[head[v]];
  }
  std::fill(p.ws_tmp.begin(), p.ws_tmp.end(), nullptr);
  std::fill(p.direct.begin(), p.direct.end(), 0);
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int o = g.outputs[i];
    // An output listed twice is one value: only its first entry may take the caller's buffer.
    const bool repeated = std::find(g.outputs.begin(), g.outputs.begin() + static_cast<std::ptrdiff_t>(i), o) !=
                          g.outputs.begin() + static_cast<std::ptrdiff_t>(i);
    const int u = repeated ? -1 : direct_output_value(g, p, o);
    p.direct_out[i] = u;
    if (u >= 0) p.direct[u] = 1;
  }
  p.ready = true;
  p.dirty = false;
  p.views_generation = ~uint64_t{0};
}

Status bind_shape_plan(const CompiledGraph& g, ShapePlan& p, ContextResources& res) {
  if (!p.ready) return Status::Ok();
  for (int d = 0; d < 2; ++d) {
    const size_t have = res.arena[d] ? res.arena[d]->bytes : 0;
    if (p.arena_bytes[d] <= have) continue;
    KILN_ASSIGN_OR_RETURN(Backend * b, backend_for(static_cast<DeviceType>(d)));
    res.arena[d].reset();  // free the old arena first (views in other plans are remade on their next run)
    KILN_ASSIGN_OR_RETURN(res.arena[d], b->allocate(p.arena_bytes[d]));
    ++res.generation;
  }
  if (p.views_generation == res.generation) return Status::Ok();
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (p.offset[v] < 0) {
      if (!g.values[v].is_constant) p.slots[v] = Slot();
      continue;
    }
    const auto& arena = res.arena[static_cast<int>(g.values[v].device.type)];
    p.slots[v] = Slot::of(Tensor::view(arena, static_cast<size_t>(p.offset[v]), p.dtype[v], p.shape[v]));
  }
  p.views_generation = res.generation;
  return Status::Ok();
}

Frame::Frame(const CompiledGraph& g, ContextResources& r, const Frame* p) : graph(g), parent(p), res(r) {
  slots.resize(g.values.size());
  own_at_.resize(g.values.size());
  for (size_t i = 0; i < g.values.size(); ++i) {
    own_at_[i] = &slots[i];
    if (g.values[i].is_constant) slots[i] = g.values[i].constant;
  }
  at = own_at_.data();
}

Frame::Frame(const CompiledGraph& g, ContextResources& r, ShapePlan& p) : graph(g), at(p.at.data()), res(r), plan(&p) {}

const Slot* Frame::lookup(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent) {
    auto it = f->graph.by_name.find(name);
    // The nearest frame that defines the name owns it, even when it holds an empty optional.
    if (it != f->graph.by_name.end()) return f->at[it->second];
  }
  return nullptr;
}

Status Frame::bind_captures() {
  for (int c : graph.captures) {
    const std::string& name = graph.values[c].name;
    const Slot* s = parent ? parent->lookup(name) : nullptr;
    if (!s) return internal_error("subgraph '" + graph.graph->name + "': outer-scope value '" + name + "' is not available");
    *at[c] = *s;
  }
  return Status::Ok();
}

Tensor& Frame::make_output(int v, Backend& backend, DataType dtype, const Shape& shape) {
  Slot& slot = *at[v];
  // A planned view, a caller's output buffer, or a value made earlier in this frame: reuse it.
  if (slot.kind == Slot::Kind::kTensor && slot.tensor.dtype() == dtype && same_shape(slot.tensor.shape(), shape) &&
      slot.tensor.device() == backend.device() && (slot.tensor.raw() || slot.tensor.numel() == 0))
    return slot.tensor;
  const size_t bytes = bytes_of(dtype, shape);
  const Device dev = backend.device();
  const auto& arena = res.arena[static_cast<int>(dev.type)];
  Tensor t;
  if (plan) {
    // The plan learns what the kernel really made (and is re-planned after this run when it was ready).
    const bool fits = plan->ready && plan->offset[v] >= 0 && plan->views_generation == res.generation &&
                      bytes <= plan->bytes[v] && arena && dtype != DataType::kString;
    const bool as_planned = plan->known[v] && plan->dtype[v] == dtype && same_shape(plan->shape[v], shape);
    if (!as_planned) {
      // A size the plan did not foresee (or a first sight): learn it; a ready plan is re-planned.
      if (plan->ready && !plan->dyn[v]) plan->dirty = true;
      if (plan->ready && !plan->dyn[v] && log_enabled(LogLevel::kVerbose))
        log(LogLevel::kVerbose, "memory plan miss for '" + graph.values[v].name + "': made " + dtype_name(dtype) + " " +
                                    shape_to_string(shape) + ", planned " +
                                    (plan->known[v] ? shape_to_string(plan->shape[v]) : std::string("unknown")) +
                                    " (re-planned after this run)");
    }
    if (fits) t = Tensor::view(arena, static_cast<size_t>(plan->offset[v]), dtype, shape);
    plan->learn(v, dtype, shape);
  } else {
    const PlannedValue& pv = graph.values[v];
    if (pv.offset >= 0 && arena && dtype != DataType::kString && bytes <= pv.bytes)
      t = Tensor::view(arena, static_cast<size_t>(pv.offset), dtype, shape);
  }
  if (!t.defined()) {
    if (dev.is_cpu()) {
      t = Tensor::empty(dtype, shape);
    } else {
      auto st = backend.allocate(bytes);
      if (!st.ok()) throw std::runtime_error(st.status().message());
      t = Tensor::with_storage(dtype, shape, *st);
    }
  }
  slot = Slot::of(std::move(t));
  return slot.tensor;
}

Status ContextResources::check_stop() const {
  if (terminate.load(std::memory_order_relaxed)) return cancelled("run stopped: ExecutionContext::terminate() was called");
  if (stop && stop->load(std::memory_order_relaxed)) return cancelled("run stopped: terminate was requested");
  if (deadline != std::chrono::steady_clock::time_point::max() && std::chrono::steady_clock::now() > deadline)
    return cancelled("run stopped: it ran past its time limit");
  return Status::Ok();
}

Status Frame::run_step(int si, OpProfile* profile) {
  const Step& s = graph.steps[si];
  StepTrace* trace = parent ? nullptr : res.trace.get();
  const auto start = profile || trace ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  if (s.kind == Step::Kind::kCopy) {
    const Slot& src = *at[s.in[0]];
    if (src.kind == Slot::Kind::kTensor) {
      const Device to = graph.values[s.out[0]].device;
      Backend& backend = graph.backend(s);  // the device side's (copies run there)
      Backend& dst_backend = to.is_cpu() ? cpu_backend() : backend;
      Tensor* dst = nullptr;
      Slot& out_slot = *at[s.out[0]];
      // A caller's device buffer for an engine output (ExecutionContext::run_into): the copy to the
      // host becomes a copy on the device, into it.
      const bool device_out = to.is_cpu() && out_slot.kind == Slot::Kind::kTensor &&
                              out_slot.tensor.device() == backend.device() && !backend.device().is_cpu() &&
                              out_slot.tensor.dtype() == src.tensor.dtype() &&
                              same_shape(out_slot.tensor.shape(), src.tensor.shape()) && out_slot.tensor.raw();
      try {
        dst = device_out ? &out_slot.tensor : &make_output(s.out[0], dst_backend, src.tensor.dtype(), src.tensor.shape());
      } catch (const std::exception& e) {
        return runtime_error("copy of '" + graph.values[s.in[0]].name + "': " + e.what());
      }
      void* state = res.state_for(backend.device());
      // An output its maker wrote in place (ShapePlan::direct_out) is there already.
      if (!device_out || dst->raw() != src.tensor.raw()) {
        KILN_RETURN_IF_ERROR(backend.copy(src.tensor, *dst, state));
        // A host kernel reads it next: wait for the copy. (Host-to-device copies from pageable
        // memory return once the source was read, so the host may reuse it at once.)
        if (s.sync_after) KILN_RETURN_IF_ERROR(backend.synchronize(state));
      }
    } else if (src.kind == Slot::Kind::kNone) {
      *at[s.out[0]] = Slot();
    } else {
      return unsupported("sequences cannot move between devices yet ('" + graph.values[s.in[0]].name + "')");
    }
  } else {
    AdHocShapes adhoc;
    AdHocShapes* adhoc_ptr = nullptr;
    Status st;
    try {
      if (graph.kernel(si).has_reshape()) {
        if (!plan) {
          auto alloc = [this, &s](size_t bytes) { return graph.backend(s).allocate(bytes); };
          StepContext probe(*this, s, si, &adhoc);
          st = adhoc.prepare(graph.kernel(si), probe, alloc);
          adhoc_ptr = &adhoc;
        } else {
          // Not planned ahead (learning run, or inputs made by data-dependent steps): reshape for
          // the inputs at hand. A workspace outside the arena (none yet, or sized per run) is the
          // step's own.
          const bool again = !plan->reshaped[si] || plan->volatile_step[si];
          if (again) st = reshape_step(graph, *plan, si, this, res);
          if (st.ok() && plan->ws_bytes[si] && plan->ws_offset[si] < 0 && (again || !plan->ws_tmp[si])) {
            auto ws = graph.backend(s).allocate(plan->ws_bytes[si]);
            if (!ws.ok()) st = ws.status();
            else plan->ws_tmp[si] = *ws;
          }
        }
      }
      if (st.ok() && plan && res.before_step) st = res.before_step(*this, si);
      if (st.ok()) {
        StepContext ctx(*this, s, si, adhoc_ptr);
        st = graph.kernel(si).run(ctx);
      }
    } catch (const std::bad_alloc&) {
      st = runtime_error(graph.node(s).describe() + ": out of memory");
    } catch (const std::exception& e) {
      st = runtime_error(graph.node(s).describe() + ": " + e.what());
    }
    if (!st.ok()) return st;
  }
  if (profile) {
    const std::string op = s.node >= 0 ? (graph.node(s).domain.empty() ? graph.node(s).op_type : graph.node(s).domain + "." + graph.node(s).op_type)
                                  : s.kernel_name;
    OpProfile::Entry& e = profile->by_op[op];
    ++e.calls;
    e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (trace) {
    // A GPU step's time is its device time: wait for it before taking the end.
    if (s.device != DeviceType::kCPU) {
      Backend& b = graph.backend(s);
      KILN_RETURN_IF_ERROR(b.synchronize(res.state_for(b.device())));
    }
    trace_step(si, start);
  }
  release_after(s);
  return Status::Ok();
}

// The most operations a tuning graph records: a batch of runs of a kernel that launches many is
// split into replays of a smaller graph (see run_tactic).
constexpr size_t kMaxTimingGraphNodes = 256;

Status Frame::run_tactic(int si, const std::string& tactic, const TacticTiming& how, std::vector<double>* sample_ms) {
  const Step& s = graph.steps[si];
  if (s.kind != Step::Kind::kKernel) return invalid_argument("run_tactic: not a kernel step");
  Backend& backend = graph.backend(s);
  Kernel& kernel = graph.kernel(si);
  void* state = res.state_for(backend.device());
  try {
    AdHocShapes adhoc;
    auto alloc = [&backend](size_t b) { return backend.allocate(b); };
    StepContext probe(*this, s, si, &adhoc);
    KILN_RETURN_IF_ERROR(adhoc.prepare(kernel, probe, alloc, tactic));
    StepContext ctx(*this, s, si, &adhoc);
    // Output 0 in an input's memory (the plan's in-place chains, for a kernel that asked for them:
    // oneDNN's sum post-op adds the residual Y holds) would make every run read what the one before
    // wrote, so no tactic would match the first: that input starts each tactic as it was before the
    // step first ran, and a tactic that does not work in place gets an output of its own.
    Slot planned_out;
    bool own_out = false;
    Tensor* y = !s.out.empty() && s.out[0] >= 0 && !adhoc.out.empty() ? &ctx.output(0) : nullptr;
    if (y && y->nbytes() > 0) {
      for (int k = 0; k < ctx.num_inputs(); ++k) {
        if (!ctx.has_input(k) || ctx.input_slot(k).kind != Slot::Kind::kTensor || ctx.input(k).raw() != y->raw())
          continue;
        Tensor& in = at[s.in[k]]->tensor;
        auto saved = tuning_inputs.find(s.in[k]);
        if (saved == tuning_inputs.end()) saved = tuning_inputs.emplace(s.in[k], ctx.owned_copy(in)).first;
        else KILN_RETURN_IF_ERROR(backend.copy(saved->second, in, state));
        if (adhoc.share_input != k) {
          planned_out = *at[s.out[0]];
          *at[s.out[0]] = Slot::of(ctx.owned_copy(*y));
          own_out = true;
        }
        break;
      }
    }
    // However this returns: the tactic's result into the planned output (where the tuner reads it;
    // the input it overwrites is put back before the next tactic runs), and the planned view back
    // in its slot.
    struct PutBack {
      Frame& f;
      Backend& backend;
      void* state;
      int v;
      Slot& planned;
      bool on;
      ~PutBack() {
        if (!on) return;
        (void)backend.copy(f.at[v]->tensor, planned.tensor, state);
        (void)backend.synchronize(state);
        *f.at[v] = std::move(planned);
      }
    } put_back{*this, backend, state, own_out ? s.out[0] : -1, planned_out, own_out};
    for (int i = 0; i < how.warmup; ++i) KILN_RETURN_IF_ERROR(kernel.run(ctx));
    KILN_RETURN_IF_ERROR(backend.synchronize(state));
    if (!sample_ms) return Status::Ok();
    // A timed batch: replays of a graph of the `iters` runs, or the runs launched one by one.
    std::shared_ptr<void> exec_graph;
    int replays = 1, runs = how.iters;  // a sample: `replays` launches of a graph of `runs` runs
    if (how.graph && backend.device().type == DeviceType::kCUDA) {
      auto capture = [&](int n, size_t max_nodes, size_t* nodes) -> Status {
        Status st = backend.begin_capture(state);
        for (int i = 0; st.ok() && i < n; ++i) st = kernel.run(ctx);
        auto exec = backend.end_capture(state, max_nodes, nodes);  // always, so the stream leaves capture mode
        if (!st.ok()) return st;
        if (!exec.ok()) return runtime_error("its calls cannot be captured in a CUDA graph (" + exec.status().message() + ")");
        exec_graph = *exec;
        return Status::Ok();
      };
      // One run first, to count its operations: a kernel that launches many (a grouped convolution
      // cuDNN runs group by group) gets a graph of fewer runs, replayed more often, as instantiating
      // a graph of thousands of nodes costs seconds to minutes.
      size_t per_run = 0;
      KILN_RETURN_IF_ERROR(capture(1, 0, &per_run));
      runs = static_cast<int>(std::clamp<size_t>(kMaxTimingGraphNodes / std::max<size_t>(per_run, 1), 1, std::max(1, how.iters)));
      replays = (std::max(1, how.iters) + runs - 1) / runs;
      if (runs > 1) KILN_RETURN_IF_ERROR(capture(runs, 0, nullptr));
      if (runs < how.iters)
        log(LogLevel::kVerbose, graph.node(s).describe() + " tactic '" + tactic + "': " + std::to_string(per_run) +
                                  " graph operations a run; timed as " + std::to_string(replays) + " replays of " +
                                  std::to_string(runs) + " runs");
      KILN_RETURN_IF_ERROR(backend.launch_graph(exec_graph.get(), state));  // the first replay is not timed
      KILN_RETURN_IF_ERROR(backend.synchronize(state));
    }
    for (int k = 0; k < how.samples; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      if (exec_graph)
        for (int r = 0; r < replays; ++r) KILN_RETURN_IF_ERROR(backend.launch_graph(exec_graph.get(), state));
      else
        for (int i = 0; i < how.iters; ++i) KILN_RETURN_IF_ERROR(kernel.run(ctx));
      KILN_RETURN_IF_ERROR(backend.synchronize(state));
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      sample_ms->push_back(ms / std::max(1, exec_graph ? replays * runs : how.iters));
      if (how.more && !how.more(sample_ms->back())) break;
      if (std::chrono::steady_clock::now() > how.deadline) break;
    }
  } catch (const std::bad_alloc&) {
    return runtime_error(graph.node(s).describe() + ": out of memory");
  } catch (const std::exception& e) {
    return runtime_error(graph.node(s).describe() + ": " + e.what());
  }
  return Status::Ok();
}

void Frame::release_after(const Step& s) {
  for (int v : s.release) {
    // Planned values keep their arena views for the next run; the caller's inputs are not ours.
    if (plan && (plan->offset[v] >= 0 || plan->at[v] != &plan->slots[v])) continue;
    *at[v] = Slot();
  }
}

void Frame::find_graph_segments() {
  ShapePlan& p = *plan;
  p.graphs.clear();
  p.graphs_generation = res.generation;
  // 0: ends a segment; 1: a GPU step whose work is the same every run; 2: a host kernel step (it
  // cannot read a GPU result without a copy, which ends the segment, so it may run before the replay).
  auto kind = [&](int si) -> int {
    const Step& s = graph.steps[si];
    if (s.kind != Step::Kind::kKernel || s.data_dependent || !s.implicit_in.empty()) return 0;
    if (s.device == DeviceType::kCPU) return 2;
    if (s.device != DeviceType::kCUDA || p.volatile_step[si]) return 0;
    if (graph.kernel(si).has_reshape() && !p.reshaped[si]) return 0;
    if (p.ws_bytes[si] && p.ws_offset[si] < 0) return 0;
    for (int v : s.out)
      if (v >= 0 && (p.offset[v] < 0 || p.dyn[v] || p.direct[v] || p.at[v] != &p.slots[v])) return 0;
    return 1;
  };
  constexpr int kMinGpuSteps = 2;  // one launch replacing one launch gains nothing
  const int ns = static_cast<int>(graph.steps.size());
  for (int si = 0; si < ns;) {
    if (kind(si) != 1) {
      ++si;
      continue;
    }
    int last = si, gpu = 0;
    for (int k = si; k < ns; ++k) {
      const int c = kind(k);
      if (c == 0) break;
      if (c == 1) {
        last = k;
        ++gpu;
      }
    }
    if (gpu >= kMinGpuSteps) p.graphs.push_back({si, last, nullptr});
    si = last + 1;
  }
}

Status Frame::run_segment(ShapePlan::GraphSegment& seg) {
  const Step& first = graph.steps[seg.first];
  Backend& gpu = graph.backend(first);
  void* state = res.state_for(gpu.device());
  if (!seg.exec) {
    Status st = gpu.begin_capture(state);
    for (int si = seg.first; st.ok() && si <= seg.last; ++si) st = run_step(si, nullptr);
    auto graph_exec = gpu.end_capture(state);  // always, so the stream leaves capture mode
    if (st.ok() && graph_exec.ok()) {
      seg.exec = *graph_exec;
    } else {
      const Status& why = st.ok() ? graph_exec.status() : st;
      log(LogLevel::kInfo, "CUDA graph capture of steps " + std::to_string(seg.first) + ".." + std::to_string(seg.last) +
                               " failed (" + why.message() + "); this signature runs step by step");
      // Nothing captured ran: run the steps now (host steps again; they are pure functions of the plan).
      const int a = seg.first, b = seg.last;
      plan->graphs_off = true;
      plan->graphs.clear();  // `seg` is gone from here on
      for (int si = a; si <= b; ++si) KILN_RETURN_IF_ERROR(run_step(si, nullptr));
      return Status::Ok();
    }
    return gpu.launch_graph(seg.exec.get(), state);  // the capture ran every step's host part
  }
  // Replay: the host steps run (and release) as always; the GPU steps' values are released here.
  for (int si = seg.first; si <= seg.last; ++si) {
    const Step& s = graph.steps[si];
    if (s.device == DeviceType::kCPU) KILN_RETURN_IF_ERROR(run_step(si, nullptr));
    else release_after(s);
  }
  return gpu.launch_graph(seg.exec.get(), state);
}

namespace {

std::string type_shape(const Slot& v) {
  if (v.kind == Slot::Kind::kNone) return "";
  if (v.kind == Slot::Kind::kSequence) return "sequence";
  return std::string(dtype_name(v.tensor.dtype())) + shape_to_string(v.tensor.shape());
}

double micros(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

void Frame::trace_step(int si, std::chrono::steady_clock::time_point start) {
  const Step& s = graph.steps[si];
  StepTrace& t = *res.trace;
  ProfileEvent e;
  e.run = t.runs - 1;
  e.step = si;
  if (s.node >= 0) {
    e.name = graph.node(s).name;
    e.op = graph.node(s).domain.empty() ? graph.node(s).op_type : graph.node(s).domain + "." + graph.node(s).op_type;
  } else {
    e.name = "copy of " + graph.values[s.in[0]].name;
    e.op = "copy";
  }
  e.kernel = s.kernel_name;
  e.device = s.device == DeviceType::kCPU ? "cpu" : "cuda";
  e.tactic = s.tactic(plan ? plan->profile : 0);
  for (int v : s.in) e.inputs.push_back(v >= 0 && at[v] ? type_shape(*at[v]) : "");
  for (int v : s.out) {
    e.outputs.push_back(v >= 0 && at[v] ? type_shape(*at[v]) : "");
    if (v >= 0 && at[v] && at[v]->kind == Slot::Kind::kTensor) e.output_bytes += at[v]->tensor.nbytes();
  }
  const auto end = std::chrono::steady_clock::now();
  e.start_us = micros(start - t.origin);
  e.dur_us = micros(end - start);
  t.events.push_back(std::move(e));
}

Status Frame::execute() {
  OpProfile* profile = parent ? nullptr : res.profile.get();  // subgraph steps count under their node
  if (profile) ++profile->runs;
  StepTrace* trace = parent ? nullptr : res.trace.get();
  // Read the clock only while profiling: execute() is the hot path of every run.
  const auto run_start = trace ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  if (trace) ++trace->runs;
  const int ns = static_cast<int>(graph.steps.size());
  KILN_RETURN_IF_ERROR(res.check_stop());
  // CUDA graphs: a top-level frame over a plan that is ready and ran once as planned.
  const bool graphs = plan && !parent && !profile && !trace && res.cuda_graphs && res.state[1] && plan->ready && !plan->dirty &&
                      !plan->graphs_off && plan->clean_runs >= 1;
  if (graphs && plan->graphs_generation != res.generation) find_graph_segments();
  size_t next = 0;
  for (int si = 0; si < ns; ++si) {
    KILN_RETURN_IF_ERROR(res.check_stop());
    if (graphs && next < plan->graphs.size() && plan->graphs[next].first == si) {
      ShapePlan::GraphSegment& seg = plan->graphs[next++];
      const int last = seg.last;
      KILN_RETURN_IF_ERROR(run_segment(seg));
      si = last;
      continue;
    }
    KILN_RETURN_IF_ERROR(run_step(si, profile));
  }
  if (trace) {
    ProfileEvent e;
    e.run = trace->runs - 1;
    e.name = e.op = "run";
    e.start_us = micros(run_start - trace->origin);
    e.dur_us = micros(std::chrono::steady_clock::now() - run_start);
    trace->events.push_back(std::move(e));
  }
  return Status::Ok();
}

}  // namespace kiln
