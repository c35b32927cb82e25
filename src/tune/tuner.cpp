// tune/tuner.cpp — auto-tuning: the builder times each layer's candidate tactics on the device.
//
// Per shape profile, the plan runs once in a tuning context on synthetic inputs of the profile's opt
// shapes (floats uniform in [-1, 1], integers 0, which every index input accepts, except alternating
// ones and zeros for an integer or bool input that is only element data: an attention mask). Before a kernel
// step with two or more tactics for its shapes runs, the tuner runs each candidate on the step's real
// inputs: a candidate that fails or whose outputs differ from the kernel's own choice beyond the
// precision's tolerance is rejected; the others are timed (warm-up, then the median of timed batches,
// as many as the candidate's duration needs, within a per-layer time limit; a candidate clearly slower
// than the best is given up early: tune/tuning_policy.h), and the fastest is recorded in the step for
// that profile. Then the step runs as planned, so the layers after it see the same inputs as in a real
// run. Measurements go into the timing cache (the file's, or one for this build alone), keyed by the
// layer's signature; a layer found there with every candidate (an earlier build's, or an identical
// layer's earlier in this build, in this or another shape profile) is not timed again.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "ir/float_types.h"
#include "onnx/sha256.h"
#include "runtime/engine_impl.h"
#include "tune/tuner.h"
#include "runtime/executor.h"
#include "tune/timing_cache.h"
#include "tune/tuning_policy.h"
#include "util/file.h"
#include "util/log.h"

namespace kiln {

// Whether every use of v, and of the integers and bools computed from it, is element data
// (arithmetic, comparisons, casts, Where, layout changes and selections of its values, kiln's pointwise
// regions and attention masks; Shape and Size read none), never an index, a shape, an axis or a count.
// A float computed from it is element data wherever it goes, unless a Cast turns it back into integers
// or bools (then followed as they are). Values read inside If/Loop/Scan bodies are not followed: no.
// Such an input (an attention mask) is made of alternating ones and zeros for tuning instead of zeros:
// a mask of zeros hid every key (or, read the other way, none), and kiln's attention kernels skip a
// fully masked tile, so the layer was timed doing almost nothing (GPT-2's at 0.030 ms in isolation
// against 51 us per layer in the model, where cuDNN's fused attention takes 32 and was never chosen).
bool tuning_input_is_element_data(const ir::Graph& g, const ir::Value* v) {
  // (op, the input positions that carry element data; -1: all of them)
  static const std::map<std::string, int> kData = {
      {"Cast", 0},      {"CastLike", 0}, {"Identity", 0},  {"Unsqueeze", 0},      {"Squeeze", 0},    {"Reshape", 0},
      {"Expand", 0},    {"Flatten", 0},  {"Transpose", 0}, {"Clip", 0},           {"Concat", -1},    {"Not", -1},
      {"And", -1},      {"Or", -1},      {"Xor", -1},      {"Add", -1},           {"Sub", -1},       {"Mul", -1},
      {"Div", -1},      {"Neg", -1},     {"Abs", -1},      {"Min", -1},           {"Max", -1},       {"Sum", -1},
      {"Equal", -1},    {"Less", -1},    {"LessOrEqual", -1}, {"Greater", -1},    {"GreaterOrEqual", -1},
      {"Where", -1},    {"Sign", -1},    {"Gather", 0},    {"GatherElements", 0}, {"GatherND", 0},   {"Slice", 0},
      {"Split", 0},     {"Tile", 0},     {"Pad", 0}};
  const std::set<std::string> in_bodies = names_read_by_subgraphs(g);
  // (a value computed from v, whether it is a float)
  std::vector<std::pair<const ir::Value*, bool>> todo = {{v, false}};
  std::set<const ir::Value*> seen = {v};
  while (!todo.empty()) {
    const auto [x, is_float] = todo.back();
    todo.pop_back();
    if (in_bodies.count(x->name)) return false;
    for (const ir::Use& u : x->uses) {
      const ir::Node* n = u.node;
      const bool onnx = n->domain.empty() || n->domain == "ai.onnx";
      if (onnx && (n->op_type == "Shape" || n->op_type == "Size")) continue;  // they read no values
      if (is_float) {
        const bool cast = onnx && (n->op_type == "Cast" || n->op_type == "CastLike") && u.input_index == 0;
        for (const ir::Value* o : n->outputs) {
          const bool f = o && dtype_is_float(o->type.dtype);
          if (o && (f || cast) && seen.insert(o).second) todo.push_back({o, f});
        }
        continue;
      }
      bool data = false;
      if (n->domain == "kiln") {
        data = n->op_type == "Pointwise" || (n->op_type == "Attention" && u.input_index >= 3);
      } else if (onnx) {
        const auto it = kData.find(n->op_type);
        data = it != kData.end() && (it->second < 0 || it->second == u.input_index);
      }
      if (!data) return false;
      for (const ir::Value* o : n->outputs)
        if (o && seen.insert(o).second) todo.push_back({o, dtype_is_float(o->type.dtype)});
    }
  }
  return true;
}

namespace {

using Clock = std::chrono::steady_clock;
using tuning::LayerChoice;
using tuning::ms_text;

std::string shape_text(DataType dt, const Shape& s) { return std::string(dtype_name(dt)) + shape_to_string(s); }

// The layer's signature: kernel, input dtypes and shapes, and a hash of what else decides its work
// (op, opset, attributes; tensor attributes by dtype and shape).
std::string layer_key(const Step& s, const ReshapeContext& rc) {
  const ir::Node& n = rc.node;
  std::string key = s.kernel_name + " ";
  for (const ReshapeContext::In& in : rc.in) key += in.present ? shape_text(in.dtype, in.shape) : std::string("-");
  std::string what = n.domain + "/" + n.op_type + "/" + std::to_string(n.opset);
  for (const auto& [name, a] : n.attrs) {
    what += ";" + name + "=" + std::to_string(static_cast<int>(a.kind)) + ":" + std::to_string(a.i) + ":" + std::to_string(a.f) + ":" + a.s;
    for (int64_t v : a.ints) what += "," + std::to_string(v);
    for (float v : a.floats) what += "," + std::to_string(v);
    for (const std::string& v : a.strings) what += "," + v;
    if (a.t.defined()) what += "," + shape_text(a.t.dtype(), a.t.shape());
  }
  for (char& c : key)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return key + " #" + onnx::sha256_hex(what.data(), what.size()).substr(0, 16);
}

// "node 'x' (Conv) cpu.Conv... [float32[1,3,224,224], ...]": how the log names a tuned layer.
std::string describe_layer(const Step& s, const ReshapeContext& rc) {
  std::string shapes;
  for (const ReshapeContext::In& in : rc.in)
    if (in.present) shapes += (shapes.empty() ? "" : ", ") + shape_text(in.dtype, in.shape);
  return rc.node.describe() + " " + s.kernel_name + " [" + shapes + "]";
}

// Host copies of a step's outputs (tensors only).
Expected<std::vector<Tensor>> host_outputs(Frame& f, const Step& s) {
  std::vector<Tensor> r;
  for (int v : s.out) {
    if (v < 0 || f.value(v).kind != Slot::Kind::kTensor) {
      r.emplace_back();
      continue;
    }
    const Tensor& t = f.value(v).tensor;
    if (t.device().is_cpu()) {
      r.push_back(t.clone());
      continue;
    }
    Tensor h = Tensor::empty(t.dtype(), t.shape());
    Backend& b = f.graph.backend(s);
    KILN_RETURN_IF_ERROR(b.copy(t, h, f.res.state_for(b.device())));
    KILN_RETURN_IF_ERROR(b.synchronize(f.res.state_for(b.device())));
    r.push_back(std::move(h));
  }
  return r;
}

double element(const Tensor& t, size_t i) {
  switch (t.dtype()) {
    case DataType::kFloat32: return static_cast<const float*>(t.raw())[i];
    case DataType::kFloat64: return static_cast<const double*>(t.raw())[i];
    case DataType::kFloat16: return f16_to_f32(static_cast<const uint16_t*>(t.raw())[i]);
    case DataType::kBFloat16: return bf16_to_f32(static_cast<const uint16_t*>(t.raw())[i]);
    case DataType::kFloat8E4M3FN: return mini_to_f32(static_cast<const uint8_t*>(t.raw())[i], MiniFloat::kE4M3FN);
    case DataType::kInt8: return static_cast<const int8_t*>(t.raw())[i];
    case DataType::kUInt8: return static_cast<const uint8_t*>(t.raw())[i];
    default: return 0;
  }
}

// Synthetic inputs at the profile's opt shapes (declared dims elsewhere, dynamic dims 1). Without
// `values`, tensors of those shapes without memory (for planning shapes, which never reads the inputs'
// values: nothing is made up however large an input is).
Expected<std::vector<Slot>> tuning_inputs(const ir::Graph& g, const ShapeProfile* p, bool values = true) {
  std::vector<Slot> r(g.inputs.size());
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const ir::Value& v = *g.inputs[i];
    if (v.constant) {
      r[i] = Slot::of(*v.constant);
      continue;
    }
    if (!v.type.is_tensor() || !v.type.shape.known)
      return unsupported("input '" + v.name + "' is not a tensor of known rank");
    Shape shape;
    const auto it = p ? p->opt.find(v.name) : decltype(p->opt.end()){};
    if (p && it != p->opt.end()) shape = it->second;
    else
      for (const ir::Dim& d : v.type.shape.dims) shape.push_back(d.is_static() ? d.value : 1);
    if (!values) {
      if (v.type.dtype == DataType::kString) return unsupported("input '" + v.name + "' holds strings");
      r[i] = Slot::of(Tensor::borrow(v.type.dtype, shape, nullptr));
      continue;
    }
    Tensor t = Tensor::empty(v.type.dtype, shape);
    if (t.dtype() == DataType::kString) return unsupported("input '" + v.name + "' holds strings");
    std::memset(t.raw(), 0, t.nbytes());
    const DataType dt = t.dtype();
    if ((dt == DataType::kBool || dtype_is_integer(dt)) && t.numel() > 0 && tuning_input_is_element_data(g, &v)) {
      // Integers and bools that are element data (a mask): 1, 0, 1, 0, ... whichever way 1 is read,
      // every row keeps half its keys and no key tile is hidden whole.
      for (int64_t k = 0; k < t.numel(); k += 2) {
        switch (dt) {
          case DataType::kBool: t.data<bool>()[k] = true; break;
          case DataType::kInt8: t.data<int8_t>()[k] = 1; break;
          case DataType::kUInt8: t.data<uint8_t>()[k] = 1; break;
          case DataType::kInt16: t.data<int16_t>()[k] = 1; break;
          case DataType::kUInt16: t.data<uint16_t>()[k] = 1; break;
          case DataType::kInt32: t.data<int32_t>()[k] = 1; break;
          case DataType::kUInt32: t.data<uint32_t>()[k] = 1; break;
          case DataType::kInt64: t.data<int64_t>()[k] = 1; break;
          case DataType::kUInt64: t.data<uint64_t>()[k] = 1; break;
          default: break;  // (4- and 2-bit integers: zeros)
        }
      }
      log(LogLevel::kVerbose, "tuning inputs: '" + v.name + "' is element data only (a mask): alternating ones and zeros");
    }
    for (size_t k = 0, n = static_cast<size_t>(t.numel()); k < n; ++k) {
      const float x = u(rng);
      switch (t.dtype()) {
        case DataType::kFloat32: t.data<float>()[k] = x; break;
        case DataType::kFloat64: t.data<double>()[k] = x; break;
        case DataType::kFloat16: t.data<uint16_t>()[k] = f32_to_f16(x); break;
        case DataType::kBFloat16: t.data<uint16_t>()[k] = f32_to_bf16(x); break;
        default: break;  // integers and bools: 0
      }
    }
    r[i] = Slot::of(std::move(t));
  }
  return r;
}

// Profile `p`'s synthetic inputs (`values`: with values to run on, else shapes alone), the device
// states of the engine's devices, and the plan of the inputs' shapes (kUnsupported when the graph's
// inputs cannot be made up): where the tuner and the untuned record start.
struct ProfilePlan {
  std::vector<Slot> inputs;
  std::vector<Slot*> ptrs;
  ContextResources res;
  std::unique_ptr<ShapePlan> plan;
};

Expected<std::unique_ptr<ProfilePlan>> plan_profile(const Engine::Impl& impl, const ShapeProfile* prof, int p,
                                                    bool values) {
  auto r = std::make_unique<ProfilePlan>();
  KILN_ASSIGN_OR_RETURN(r->inputs, tuning_inputs(*impl.graph, prof, values));
  r->res.cuda_graphs = false;
  for (int d = 0; d < 2; ++d) {
    if (d == 1 && impl.options.device != DeviceType::kCUDA) continue;
    KILN_ASSIGN_OR_RETURN(Backend * b, backend_for(static_cast<DeviceType>(d)));
    KILN_ASSIGN_OR_RETURN(r->res.state[d], b->create_state());
  }
  for (Slot& s : r->inputs) r->ptrs.push_back(&s);
  r->plan = make_shape_plan(*impl.plan, r->ptrs.data(), r->res, p);
  return r;
}

struct Tuner {
  CompiledGraph& g;
  tuning::TuningSession& session;
  int profile = 0, profiles = 1;
  int done = 0, total = 0;
  std::function<void(int, int, const std::string&)> progress;

  // Records `tactic` (measured at `ms`) as step s's choice for the current profile.
  void choose(Step& s, const std::string& tactic, double ms) {
    s.tactics.resize(static_cast<size_t>(profiles));
    s.tactic_ms.resize(static_cast<size_t>(profiles), 0.0);
    s.tactics[profile] = tactic;
    s.tactic_ms[profile] = ms;
  }

  // A choice the session knew without running (the timing cache, or an identical layer timed earlier
  // in this build): taken, and its log line returned.
  std::string take_known(Step& s, const std::string& who, const LayerChoice& c) {
    const bool earlier = c.from == LayerChoice::From::kEarlierLayer;
    if (c.tactic.empty())  // none usable when measured: the kernel's own choice
      return "tune " + who + ": no candidate usable (" + (earlier ? "an identical layer earlier in this build" : "timing cache") +
             "); the kernel's own choice";
    choose(s, c.tactic, c.ms);
    return "tune " + who + ": " + c.tactic + " (" + ms_text(c.ms) + (earlier ? ", as an identical layer earlier in this build)" : ", from the timing cache)");
  }

  // Host only, from the plan's shapes: counts the layers to tune and takes those already measured.
  // True when every one was (and every shape was known): no tuning run is needed.
  bool plan_pass(const ShapePlan& p, const ContextResources& res) {
    bool all = true, any_cached = false;
    std::vector<std::string> lines;
    std::vector<LayerChoice> taken;
    for (size_t si = 0; si < g.steps.size(); ++si) {
      Step& s = g.steps[si];
      if (s.kind != Step::Kind::kKernel || !g.kernel(si).has_reshape() || p.volatile_step[si]) continue;
      ReshapeContext rc{g.node(s), {}, {}, nullptr, 0, nullptr, {}, {}, -1};
      if (!fill_reshape_context(g, p, static_cast<int>(si), nullptr, res, rc).ok()) {
        all = false;  // shapes found only by running: the run decides
        continue;
      }
      const std::vector<std::string> cands = g.kernel(si).tactics(rc);
      if (cands.size() < 2) continue;
      ++total;
      std::optional<LayerChoice> k = session.known(layer_key(s, rc), cands);
      if (!k) {
        all = false;
        continue;
      }
      lines.push_back(take_known(s, describe_layer(s, rc), *k));
      any_cached = any_cached || k->from == LayerChoice::From::kTimingCache;
      taken.push_back(std::move(*k));
    }
    if (all) {
      for (const std::string& line : lines) log(LogLevel::kVerbose, line);
      for (const LayerChoice& c : taken) session.count(c);
      done += static_cast<int>(lines.size());
      if (progress && !lines.empty()) progress(done, total, any_cached ? "from the timing cache" : "as layers timed earlier in this build");
    }
    return all;
  }

  Status before_step(Frame& f, int si) {
    Step& s = g.steps[si];
    if (s.kind != Step::Kind::kKernel || !g.kernel(si).has_reshape() || f.plan->volatile_step[si]) return Status::Ok();
    ReshapeContext rc{g.node(s), {}, {}, nullptr, 0, nullptr, {}, {}, -1};
    KILN_RETURN_IF_ERROR(fill_reshape_context(g, *f.plan, si, &f, f.res, rc));
    const std::vector<std::string> cands = g.kernel(si).tactics(rc);
    if (cands.size() < 2) return Status::Ok();
    ++done;
    if (progress) progress(done, std::max(done, total), g.node(s).describe());
    const std::string key = layer_key(s, rc);
    const std::string who = describe_layer(s, rc);
    if (std::optional<LayerChoice> k = session.known(key, cands)) {
      session.count(*k);
      log(LogLevel::kVerbose, take_known(s, who, *k));
      return Status::Ok();
    }
    std::vector<Tensor> want;
    double tol = 1e-3;
    tuning::LayerRunner runner;
    // The kernel's own choice is the reference a candidate must agree with. The layer's time limit
    // starts after it: its first run may build a library plan (cuDNN compiles a graph's kernel at
    // its first use, up to ~2 s on the H100), and that build is the kernel's cost, not the search's —
    // counted in the limit, it left ResNet-50's layer1.1 residual convolution on cuDNN's first
    // configuration (0.432 ms) with kiln's own kernel (0.326 ms on its twin layer) never tried
    // (tests/gpu/results/h100_int8_cnn_check_10_conv_pool_b256_tuning.txt).
    runner.reference = [&]() -> Status {
      KILN_RETURN_IF_ERROR(f.run_tactic(si, "", TacticTiming{}, nullptr));
      KILN_ASSIGN_OR_RETURN(want, host_outputs(f, s));
      bool half = false;
      for (const Tensor& t : want) half = half || (t.defined() && (t.dtype() == DataType::kFloat16 || t.dtype() == DataType::kBFloat16));
      tol = half ? 2e-2 : 1e-3;
      return Status::Ok();
    };
    runner.check = [&](const std::string& c) -> Expected<std::string> {
      Status st = f.run_tactic(si, c, TacticTiming{}, nullptr);
      if (!st.ok()) return "failed (" + st.message() + ")";
      KILN_ASSIGN_OR_RETURN(std::vector<Tensor> got, host_outputs(f, s));
      const std::string why = tactic_outputs_mismatch(want, got, tol);
      return why.empty() ? why : "rejected (" + why + ")";
    };
    // GPU steps are timed as the engine runs them, replayed from CUDA graphs.
    const bool graphs = s.device == DeviceType::kCUDA;
    runner.run = [&](const std::string& c, int runs, const std::function<bool(double)>& more) {
      TacticTiming how;
      how.warmup = 1;
      how.iters = runs;
      how.samples = tuning::kMaxSamples + 1;  // the policy's `more` ends the sampling before
      how.graph = graphs;
      how.more = more;
      std::vector<double> samples;
      return f.run_tactic(si, c, how, &samples);
    };
    KILN_ASSIGN_OR_RETURN(LayerChoice c, session.tune(key, cands, runner));
    if (c.tactic.empty()) {
      log(LogLevel::kVerbose, "tune " + who + ":" + c.report + " -> no candidate usable; the kernel's own choice");
      return Status::Ok();
    }
    choose(s, c.tactic, c.ms);
    // The first candidate is the kernel's own choice where it ranks them (cuDNN's and cuBLASLt's heuristics).
    log(LogLevel::kVerbose, "tune " + who + ":" + c.report + " -> " + c.tactic + (c.tactic == cands.front() ? " (= first)" : ""));
    return Status::Ok();
  }
};

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? std::string() : line.substr(colon + 2);
    }
  return "unknown cpu";
}

std::string device_key(const CompiledGraph& g) {
  std::string key = std::string("kiln ") + version();
  bool seen[2] = {false, false};
  for (const Step& s : g.steps) seen[static_cast<int>(s.device)] = true;
  for (int d = 0; d < 2; ++d) {
    if (!seen[d]) continue;
    auto b = backend_for(static_cast<DeviceType>(d));
    if (b.ok()) key += " | " + (*b)->fingerprint();
    // CPU timings depend on the processor, its features and the threads used.
    if (d == 0) key += " " + cpu_model_name() + " [" + host_cpu_isa() + "] threads " + std::to_string(omp_get_max_threads());
  }
  for (char& c : key)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return key;
}

}  // namespace

Status tune_engine(Engine::Impl& impl, const BuildOptions& options, const std::function<void(int, int, const std::string&)>& progress) {
  CompiledGraph& g = *impl.plan;
  const std::string dev = device_key(g);
  TimingCache cache;
  cache.device = dev;
  std::string cache_path = options.timing_cache;
  std::error_code ec;
  if (!cache_path.empty() && std::filesystem::is_directory(cache_path, ec))  // one file per device
    cache_path = (std::filesystem::path(cache_path) / (onnx::sha256_hex(dev.data(), dev.size()).substr(0, 16) + ".cache")).string();
  bool write_cache = !cache_path.empty();
  if (write_cache && cache_path != options.timing_cache) {
    if (Status st = check_writable_file(cache_path, "timing cache"); !st.ok()) {
      log(LogLevel::kWarning, st.message() + "; tuning without it");
      write_cache = false;
    }
  }
  if (write_cache) {
    std::ifstream probe(cache_path);
    if (probe) {
      auto read = TimingCache::read(cache_path);
      if (!read.ok()) {
        log(LogLevel::kWarning, read.status().message() + "; ignoring it (it is rewritten after this build)");
      } else if (read->device != dev) {
        log(LogLevel::kWarning, "timing cache '" + cache_path + "' was written for '" + read->device + "', not '" + dev +
                                    "'; ignoring it (and leaving it as it is)");
        write_cache = false;
      } else {
        cache = std::move(read).value();
      }
    }
  }
  const int nprof = std::max<int>(1, static_cast<int>(options.profiles.size()));
  const auto started = Clock::now();
  // Without a cache file to write (none given, or another device's), `cache` is this build's alone:
  // it still spares identical layers a second search.
  tuning::TuningSession session(cache, options.tune_layer_seconds, options.tune_budget_seconds);
  Tuner t{g, session, /*profile=*/0, nprof, /*done=*/0, /*total=*/0, progress};
  for (int p = 0; p < nprof; ++p) {
    const ShapeProfile* prof = options.profiles.empty() ? nullptr : &options.profiles[p];
    auto planned = plan_profile(impl, prof, p, /*values=*/true);
    if (!planned.ok()) {
      if (planned.status().code() != StatusCode::kUnsupported) return planned.status();
      log(LogLevel::kWarning, "not tuned: " + planned.status().message());
      return Status::Ok();
    }
    ContextResources& res = (*planned)->res;
    std::vector<Slot*>& ptrs = (*planned)->ptrs;
    std::unique_ptr<ShapePlan>& sp = (*planned)->plan;
    t.profile = p;
    // Every layer in the timing cache: nothing to run.
    if (t.plan_pass(*sp, res)) continue;
    Status st = bind_shape_plan(g, *sp, res);
    if (st.ok()) {
      for (size_t i = 0; i < g.inputs.size(); ++i) sp->at[g.inputs[i]] = ptrs[i];
      res.before_step = [&t](Frame& f, int si) { return t.before_step(f, si); };
      Frame frame(g, res, *sp);
      st = frame.execute();
      for (int d = 0; d < 2; ++d)
        if (res.state[d]) {
          auto b = backend_for(static_cast<DeviceType>(d));
          if (b.ok()) (void)(*b)->synchronize(res.state[d].get());
        }
      for (int v : g.inputs) sp->at[v] = &sp->slots[v];
    }
    // The synthetic inputs may be values the model cannot take (an index out of range, a shape it
    // computes from its inputs): the layers tuned so far keep their tactics, the rest their kernels'
    // own choices, and the build goes on.
    if (!st.ok())
      log(LogLevel::kWarning, "tuning run of shape profile " + std::to_string(p) + " stopped (" + st.message() +
                                  "); layers not reached keep their kernels' own choices");
  }
  const tuning::TuningStats& n = session.stats();
  char line[400];
  std::snprintf(line, sizeof line,
                "tuning: %d layers timed (%d candidates, %d abandoned early as slower, %d left untried by the layer time limit), "
                "%d reused from identical layers timed earlier in this build, %d from the timing cache, "
                "%d left to their kernels' own choices by the tuning budget; %.2f s",
                n.timed, n.candidates, n.abandoned, n.skipped, n.reused, n.cached, n.over_budget,
                std::chrono::duration<double>(Clock::now() - started).count());
  log(LogLevel::kVerbose, line);
  if (write_cache) {
    Status st = cache.write(cache_path);
    if (!st.ok()) log(LogLevel::kWarning, st.message());
  }
  return Status::Ok();
}

Status record_default_tactics(Engine::Impl& impl) {
  CompiledGraph& g = *impl.plan;
  const std::vector<ShapeProfile>& profiles = impl.options.profiles;
  const int nprof = std::max<int>(1, static_cast<int>(profiles.size()));
  int recorded = 0;
  for (int p = 0; p < nprof; ++p) {
    auto planned = plan_profile(impl, profiles.empty() ? nullptr : &profiles[p], p, /*values=*/false);
    if (!planned.ok()) {
      if (planned.status().code() != StatusCode::kUnsupported) return planned.status();
      log(LogLevel::kVerbose, "untuned tactics not recorded: " + planned.status().message());
      return Status::Ok();
    }
    const ContextResources& res = (*planned)->res;
    const std::unique_ptr<ShapePlan>& sp = (*planned)->plan;
    for (size_t si = 0; si < g.steps.size(); ++si) {
      Step& s = g.steps[si];
      if (s.kind != Step::Kind::kKernel || !g.kernel(si).has_reshape() || sp->volatile_step[si] || !s.tactic(p).empty())
        continue;
      // Shapes found only by running (after a data-dependent op) have no build-time choice to record;
      // the choice is what the shape plan's own reshape() planned (no tactic was asked of it).
      if (!sp->reshaped[si]) continue;
      ReshapeContext rc{g.node(s), {}, {}, nullptr, 0, nullptr, {}, {}, -1};
      if (!fill_reshape_context(g, *sp, static_cast<int>(si), nullptr, res, rc).ok()) continue;
      const std::vector<std::string> cands = g.kernel(si).tactics(rc);
      const std::string& planned = sp->planned_tactic[si];
      if (cands.size() < 2 || std::find(cands.begin(), cands.end(), planned) == cands.end()) continue;
      s.tactics.resize(static_cast<size_t>(nprof));
      s.tactic_ms.resize(static_cast<size_t>(nprof), 0.0);
      s.tactics[p] = planned;
      ++recorded;
    }
  }
  if (recorded) log(LogLevel::kVerbose, "untuned tactics: " + std::to_string(recorded) + " kernels' own choices recorded in the plan");
  return Status::Ok();
}

// The relative L2 within which two kernels' E4M3 outputs agree: one E4M3 step is up to 12.5% of a
// value, and kernels that add in another order (Hopper's FP8 tensor cores keep fewer bits than
// float32) round some values the other way; a wrong algorithm is off by ~1.
constexpr double kE4M3Tolerance = 3e-2;

// "" when `got` matches `want` (floats: relative L2 within `tol`, E4M3 within kE4M3Tolerance; int8
// and uint8 within one step in at most 1% of the elements; other types: bit for bit).
std::string tactic_outputs_mismatch(const std::vector<Tensor>& want, const std::vector<Tensor>& got, double tol) {
  for (size_t o = 0; o < want.size() && o < got.size(); ++o) {
    const Tensor& a = want[o];
    const Tensor& b = got[o];
    if (!a.defined() && !b.defined()) continue;
    if (a.defined() != b.defined() || a.dtype() != b.dtype() || a.shape() != b.shape()) return "output " + std::to_string(o) + " differs in shape";
    const DataType dt = a.dtype();
    const bool e4m3 = dt == DataType::kFloat8E4M3FN;
    if (dt == DataType::kFloat32 || dt == DataType::kFloat64 || dt == DataType::kFloat16 || dt == DataType::kBFloat16 || e4m3) {
      const double limit = e4m3 ? std::max(tol, kE4M3Tolerance) : tol;
      // At most about a million elements, evenly strided (a wrong algorithm differs everywhere).
      double num = 0, den = 0;
      const size_t n = static_cast<size_t>(a.numel()), step = std::max<size_t>(1, n >> 20);
      for (size_t i = 0; i < n; i += step) {
        const double x = element(a, i), y = element(b, i);
        if (std::isnan(x) != std::isnan(y)) return "output " + std::to_string(o) + " has NaNs where the reference has none";
        if (std::isnan(x)) continue;
        num += (x - y) * (x - y);
        den += x * x;
      }
      const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
      if (rel > limit) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "output %zu relative L2 %.2e > %.0e", o, rel, limit);
        return buf;
      }
    } else if (dt == DataType::kInt8 || dt == DataType::kUInt8) {
      // Quantized outputs: kernels that order the epilogue's float arithmetic differently round a
      // value near .5 the other way now and then; one step in at most 1% of the elements passes.
      const size_t n = static_cast<size_t>(a.numel());
      size_t off = 0;
      for (size_t i = 0; i < n; ++i) {
        const double d = std::fabs(element(a, i) - element(b, i));
        if (d > 1) return "output " + std::to_string(o) + " differs by more than one step";
        off += d != 0;
      }
      if (off * 100 > n) return "output " + std::to_string(o) + " differs by one step in more than 1% of the elements";
    } else if (a.nbytes() != b.nbytes() || std::memcmp(a.raw(), b.raw(), a.nbytes()) != 0) {
      return "output " + std::to_string(o) + " differs";
    }
  }
  return "";
}

}  // namespace kiln
