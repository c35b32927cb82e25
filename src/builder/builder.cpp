// builder/builder.cpp — building an engine: import → the optimizer's pipeline → the target's precision
// and layout stages → [calibration and 8-bit quantization] → lower → tune → an EngineFile. The runtime
// (runtime/engine.cpp) turns that file into the Engine, as it does a saved one, and saves and runs it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "builder/build.h"
#include "builder/calibrate.h"
#include "builder/precision.h"
#include "builder/target_pipeline.h"
#include "ir/float_types.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "plugins/plugins.h"
#include "runtime/eager.h"
#include "runtime/engine_impl.h"
#include "runtime/executor.h"
#include "tune/tuner.h"
#include "util/atomic_file.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/guard.h"
#include "util/log.h"
#include "util/thread_count.h"

namespace kiln {

// A float16/bfloat16 tensor as float32 (others as they are), for comparing outputs.
static Tensor half_as_float(const Tensor& t) {
  if (t.dtype() != DataType::kFloat16 && t.dtype() != DataType::kBFloat16) return t;
  Tensor f = Tensor::empty(DataType::kFloat32, t.shape());
  const uint16_t* src = t.data<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    f.data<float>()[i] = t.dtype() == DataType::kFloat16 ? f16_to_f32(src[i]) : bf16_to_f32(src[i]);
  return f;
}


// The time limit of the build running on this thread (BuildOptions::timeout_s; max() when none). It
// belongs to the Engine::build call, not to the options the stages pass around, and the engines a build
// makes inside itself (calibration, the accuracy check) count against the same one.
static thread_local std::chrono::steady_clock::time_point t_build_deadline = std::chrono::steady_clock::time_point::max();

static Status check_build_time(const std::string& stage) {
  if (t_build_deadline == std::chrono::steady_clock::time_point::max() || std::chrono::steady_clock::now() <= t_build_deadline)
    return Status::Ok();
  return cancelled("build stopped before " + stage + ": it ran past its time limit (BuildOptions::timeout_s, kiln build --timeout)");
}

// Sets this thread's build time limit for one Engine::build call (an inner build keeps the outer one's).
struct BuildDeadlineScope {
  std::chrono::steady_clock::time_point saved = t_build_deadline;
  BuildDeadlineScope(const BuildOptions& o, std::chrono::steady_clock::time_point start) {
    if (o.timeout_s > 0)
      t_build_deadline = std::min(saved, start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                     std::chrono::duration<double>(o.timeout_s)));
  }
  ~BuildDeadlineScope() { t_build_deadline = saved; }
};

passes::PassOptions builder_pass_options(int opt_level, const KernelRegistry* target) {
  passes::PassOptions po;
  po.level = opt_level;
  // Folding stops at the build's time limit, before a node and inside its kernel's long loops; the node
  // then stays unfolded and the next stage ends the build.
  po.evaluate = [](const ir::Node& n, const std::vector<Value>& in) -> Expected<std::vector<Value>> {
    KILN_RETURN_IF_ERROR(check_build_time("folding " + n.describe()));
    return run_node_eager(n, in, nullptr, t_build_deadline);
  };
  if (target) {
    po.has_kernel = [target](const std::string& domain, const std::string& op) {
      for (const KernelDef& d : target->all())
        if (d.op == op && d.domain == domain && (!d.unavailable || d.unavailable().empty())) return true;
      return false;
    };
    po.kernel_refuses = [target](const ir::Node& n) -> std::string {
      std::string why;
      if (target->find(n, &why)) return "";
      return why.empty() ? "no kernel" : why;
    };
  }
  return po;
}

using BuildClock = std::chrono::steady_clock;

static void report(const BuildOptions& o, BuildClock::time_point start, const std::string& stage, int done = 0, int total = 0,
                   const std::string& detail = {}) {
  if (!o.progress) return;
  BuildProgress p;
  p.stage = stage;
  p.done = done;
  p.total = total;
  p.detail = detail;
  p.seconds = std::chrono::duration<double>(BuildClock::now() - start).count();
  o.progress(p);
}

// An input that every profile fixes to one shape (a single profile with min = max) gets those dims in
// the graph, so the optimizer folds what follows from them.
static void fix_profile_shapes(ir::Graph& g, const std::vector<ShapeProfile>& profiles) {
  if (profiles.size() != 1) return;
  const ShapeProfile& p = profiles[0];
  for (ir::Value* v : g.inputs) {
    const auto lo = p.min.find(v->name);
    if (lo == p.min.end() || lo->second != p.max.at(v->name) || !v->type.is_tensor()) continue;
    v->type.shape = ir::SymShape::of(lo->second);
  }
}

// The names --disable-pass takes beyond the optimizer's passes: the target stages and their switches.
const std::vector<std::pair<std::string, std::string>>& target_stages() {
  static const std::vector<std::pair<std::string, std::string>> names = target_stage_names();
  return names;
}

// Every name in o.disabled_passes must be a pass of the pipeline or a target stage.
static Status check_disabled_passes(const BuildOptions& o) {
  for (const std::string& name : o.disabled_passes) {
    bool known = false;
    for (const passes::Pass& p : passes::pipeline()) {
      if (p.name == name && p.min_level == 0)
        return invalid_argument("pass '" + name + "' cannot be disabled: it rewrites ops kiln has no kernels of "
                                "(ONNX Runtime's contrib ops) into ops it runs");
      known |= p.name == name;
    }
    for (const auto& [stage, what] : target_stages()) known |= stage == name;
    if (known) continue;
    std::string names;
    for (const passes::Pass& p : passes::pipeline()) names += (names.empty() ? "" : ", ") + std::string(p.name);
    for (const auto& [stage, what] : target_stages()) names += ", " + stage;
    return invalid_argument("unknown pass '" + name + "' to disable; the passes are: " + names);
  }
  return Status::Ok();
}

// The optimizer's options for a graph of float precision `o.precision` on `o.device`: the target's,
// without the passes the user disabled, and on CUDA 16-byte GEMM rows and float32 attention unfused.
static passes::PassOptions build_pass_options(const BuildOptions& o, const KernelRegistry& target) {
  passes::PassOptions po = builder_pass_options(o.opt_level, &target);
  po.verbose = o.verbose;
  po.disabled.insert(o.disabled_passes.begin(), o.disabled_passes.end());
  // Float32 attention on CUDA runs faster unfused (cuBLAS's FP32 GEMMs for Q·Kᵀ and P·V against the
  // fused kernel's CUDA-core loops; H100, BERT-base: batch 1 1.82 vs 2.23 ms, batch 64 44.5 vs 46.7
  // ms); float16/bfloat16 engines fuse it (tensor-core kernel: batch 64 9.2 vs 15.2 ms).
  if (o.device == DeviceType::kCUDA && precision_row(o.precision).half == DataType::kUndefined)
    po.disabled.insert("fuse-attention");
  // cuBLASLt's tensor-core kernels want 16-byte rows: 8 float16 columns (4 float32 ones).
  if (o.device == DeviceType::kCUDA) po.pad_matmul_columns = 8;
  return po;
}

// The target's stages (builder/target_pipeline.cpp) on a graph the optimizer has made: `options`'
// precision is the graph's float precision; `quantized` for the INT8 path's graph.
static Status run_target_stages(ir::Graph& graph, const BuildOptions& options, const KernelRegistry& target,
                                bool quantized) {
  TargetContext ctx{options, target};
  ctx.quantized = quantized;
  return run_target_pipeline(graph, ctx);
}

// A graph that uses a built-in op a plugin overrides is built at opt level 0, without target stages:
// every optimizer pass from level 1 up reads ops by their ONNX meaning, and would fold the op into a
// neighbour (a Relu into a product's epilogue; fuse-qdq's requantized Relu), turn it into another
// (spatial-mean), remove it where kiln's meaning makes it a no-op (remove-noops, transposes) or
// compute it at build time with kiln's own kernel (fold-constants), so the plugin's kernel would not
// run. At level 0 only the lowerings run. The warning is `level`: an 8-bit build's candidates repeat
// the graph its float32 preparation warned of (and with fuse-qdq off, its products stay float
// Q/DQ: the build's report counts 0 products in 8 bits).
static BuildOptions keep_overridden_ops(const ir::Graph& graph, const BuildOptions& options, LogLevel level) {
  const std::vector<std::string> overridden = plugins::overridden_ops_in(graph);
  if (overridden.empty()) return options;
  BuildOptions o = options;
  o.opt_level = 0;
  for (const auto& [stage, what] : target_stages()) o.disabled_passes.push_back(stage);
  std::string list;
  for (const std::string& op : overridden) list += (list.empty() ? "" : ", ") + op;
  log(level, "the graph uses " + list + ", overridden by a plugin: built without optimizer passes and target stages "
             "(opt level 0), so every such node runs the plugin's kernel");
  return o;
}

// -v: the optimizer's slowest passes (over 10 ms each; the re-sort and re-inference after a pass that
// changed the graph count as its own), so a slow build shows where its optimize stage went.
static void log_pass_seconds(const passes::OptimizeStats& stats) {
  std::vector<std::pair<double, std::string>> slow;
  double total = 0;
  for (const auto& [name, sec] : stats.seconds) {
    total += sec;
    if (sec >= 0.01) slow.emplace_back(sec, name);
  }
  std::sort(slow.rbegin(), slow.rend());
  char buf[64];
  std::snprintf(buf, sizeof(buf), "optimize: %d rounds, %.2f s", stats.rounds, total);
  std::string line = buf;
  for (size_t i = 0; i < slow.size() && i < 6; ++i) {
    std::snprintf(buf, sizeof(buf), " %.2f s", slow[i].first);
    line += (i ? ", " : "; ") + slow[i].second + buf;
  }
  log(LogLevel::kVerbose, line);
}

// What a prepared graph is: a float build's (or a placement plan's), or one of an 8-bit build's
// quantized candidates (INT8's with the target's quantized stages).
enum class Prepared { kFloat, kInt8Candidate, kFp8Candidate };

// Import-to-placement steps shared by a build, a placement plan and an 8-bit build's candidates:
// checks the options, fixes profile shapes, optimizes for the target's kernels, converts precision
// and layout. `target` is the kernel rows of the device the engine is for (the CUDA rows exist
// without a GPU). `given`'s precision is a float one: the graph's (an 8-bit build prepares its graph
// in float32, and its quantized candidates in the rest's precision).
static Status prepare_graph(ir::Graph& graph, const BuildOptions& given, const KernelRegistry& target,
                            Prepared what = Prepared::kFloat) {
  const BuildOptions options = keep_overridden_ops(graph, given, what == Prepared::kFloat ? LogLevel::kWarning : LogLevel::kVerbose);
  if (precision_row(options.precision).is_8bit()) return invalid_argument("an 8-bit graph is prepared by the 8-bit build path");
  KILN_RETURN_IF_ERROR(check_precision_device(options.precision, options.device));
  KILN_RETURN_IF_ERROR(validate_profiles(graph, options.profiles));
  fix_profile_shapes(graph, options.profiles);
  passes::OptimizeStats stats;
  KILN_RETURN_IF_ERROR(passes::optimize(graph, build_pass_options(options, target), &stats));
  for (const std::string& miss : stats.near_misses) log(LogLevel::kVerbose, "near miss: " + miss);
  log_pass_seconds(stats);
  return run_target_stages(graph, options, target, what == Prepared::kInt8Candidate);
}

static Expected<EngineFile> build_engine_file(ir::Model model, const BuildOptions& options, BuildClock::time_point start);

// A build's engine: its engine file, read back through the runtime's one EngineFile → Engine path
// (runtime/engine_impl.h engine_from_file), so an engine built here runs exactly as the same engine
// saved and loaded.
static Expected<std::shared_ptr<Engine>> build_from_model(ir::Model model, const BuildOptions& options,
                                                          BuildClock::time_point start) {
  KILN_ASSIGN_OR_RETURN(EngineFile file, build_engine_file(std::move(model), options, start));
  KILN_ASSIGN_OR_RETURN(auto engine, engine_from_file(std::move(file)));
  report(options, start, "done");
  return engine;
}

Expected<std::shared_ptr<Engine>> build_graph_as_is(std::unique_ptr<ir::Graph> g, DeviceType device) {
  ir::Model m;
  m.graph = std::move(g);
  BuildOptions f;
  f.opt_level = 0;
  f.tune = 0;
  f.device = device;
  return build_from_model(std::move(m), f, BuildClock::now());
}

// The build's product: the engine file (what read_engine_file returns for a saved one).
static Expected<EngineFile> build_engine_file(ir::Model model, const BuildOptions& given, BuildClock::time_point start) {
  KILN_ASSIGN_OR_RETURN(const BuildOptions options, resolve_precision(given));
  const PrecisionRow& precision = precision_row(options.precision);
  auto impl = std::make_unique<Engine::Impl>();
  impl->options = options;
  impl->options.progress = nullptr;
  impl->graph = std::shared_ptr<ir::Graph>(std::move(model.graph));
  // A verbose build logs every decision (the optimizer's rewrites, placement fallbacks, tuning).
  ScopedLogLevel level(options.verbose ? LogLevel::kVerbose : LogLevel::kWarning);
  if (precision.is_8bit() && options.opt_level < 1)
    return invalid_argument("an INT8 or FP8 build needs opt level 1 or more");
  KILN_ASSIGN_OR_RETURN(Backend * target, backend_for(options.device));
  KILN_RETURN_IF_ERROR(check_disabled_passes(options));
  // The caches are read and rewritten: a FIFO there would block for ever (refused before any work).
  // A folder of timing caches (one file per device) is fine; the tuner checks the file it picks in it.
  std::error_code ec;
  if (!options.timing_cache.empty() && !std::filesystem::is_directory(options.timing_cache, ec))
    KILN_RETURN_IF_ERROR(check_writable_file(options.timing_cache, "timing cache"));
  if (!options.calibration_cache.empty())
    KILN_RETURN_IF_ERROR(check_writable_file(options.calibration_cache, "calibration cache"));
  report(options, start, "optimize");
  if (precision.is_8bit()) {
    // Quantize the graph optimized without fusions (the QDQ fusion wants plain Conv/MatMul/Gemm),
    // then optimize it at the requested level: fuse-qdq first, the float fusions for the rest.
    // The products go to the precision's 8-bit type (FP8: kiln.F8MatMul and E4M3 convolutions), the
    // rest to options.rest_precision (resolve_precision: CUDA float16 unless named, as TensorRT's
    // --int8 --fp16; CPU float32); the graph is quantized in float32.
    const bool fp8 = precision.eight_bit == DataType::kFloat8E4M3FN;
    BuildOptions plain = options;
    plain.opt_level = 1;
    plain.precision = Precision::kFloat32;
    plain.rest_precision.reset();
    plain.half_outputs = false;
    // Calibration, the budget's candidates and the build's own check run the graph on the
    // calibration sets' shapes (a batch of 4 for an engine of batch 256): the graph keeps its
    // dynamic dims, and the profiles apply to the engine only (its plan and tuning).
    plain.profiles.clear();
    BuildOptions rest = options;  // how the quantized graph is optimized
    rest.precision = float_precision(options);
    rest.rest_precision.reset();
    rest.profiles.clear();
    // The budget's candidates keep float32 outputs (their error is measured on them); the engine's own
    // graph gets half outputs where asked.
    rest.half_outputs = false;
    BuildOptions rest_final = rest;
    rest_final.half_outputs = options.half_outputs;
    KILN_RETURN_IF_ERROR(prepare_graph(*impl->graph, plain, target->kernels()));
    auto float_graph = impl->graph->clone();
    // A graph as it is (opt level 0, untuned) on `device`: the float32 reference and calibration
    // engines run on the CPU, quantized candidates on the engine's device.
    auto build_float = [&](std::unique_ptr<ir::Graph> g) { return build_graph_as_is(std::move(g), DeviceType::kCPU); };
    auto build_as_is = [&](std::unique_ptr<ir::Graph> g) { return build_graph_as_is(std::move(g), options.device); };
    KILN_RETURN_IF_ERROR(check_build_time("calibration"));
    report(options, start, "calibrate");
    BuildOptions calib = options;
    if (calib.calibration.empty() && !calib.calibration_dir.empty()) {
      std::vector<std::string> names;
      for (const ir::Value* v : impl->graph->inputs)
        if (!v->constant) names.push_back(v->name);
      KILN_ASSIGN_OR_RETURN(calib.calibration, read_calibration_dir(calib.calibration_dir, names));
    }
    // The finished graph of a quantized candidate, one way for INT8 and FP8: prepared as a float build
    // of the rest's precision (fuse-qdq first among the fusions), the target's stages with INT8's
    // `quantized` (CUDA: residual Adds into the int8 convolutions, the rest in half, the convolution
    // chains channels-last; CPU: the chains NHWC).
    auto finish = [&](ir::Graph& g, const BuildOptions& how) -> Status {
      KILN_RETURN_IF_ERROR(validate_profiles(g, options.profiles));
      return prepare_graph(g, how, target->kernels(), fp8 ? Prepared::kFp8Candidate : Prepared::kInt8Candidate);
    };
    auto build_quantized = [&](std::unique_ptr<ir::Graph> g) -> Expected<std::shared_ptr<Engine>> {
      KILN_RETURN_IF_ERROR(finish(*g, rest));
      return build_as_is(std::move(g));
    };
    const std::string tag = precision.name;  // the report's metadata keys and log lines
    KILN_ASSIGN_OR_RETURN(Int8Report q, quantize_8bit(*impl->graph, calib, precision.eight_bit, target->kernels(),
                                                      model.source_hash, build_float, build_quantized));
    if (q.budget > 0) {
      // The per-product table: precision and sensitivity (the metric with only it in 8 bits).
      std::string table;
      for (const auto& l : q.layers) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), " %s %.4g\n", l.int8 ? precision.name : precision_name(rest.precision), l.sensitivity);
        table += l.node + " " + l.op + buf;
      }
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%s %.4g (budget %.4g)", q.metric.c_str(), q.error, q.budget);
      impl->meta[tag + ".layers"] = table;
      impl->meta[tag + ".error"] = buf;
    }
    KILN_RETURN_IF_ERROR(finish(*impl->graph, rest_final));
    int fused = 0;
    for (const ir::Node* n : impl->graph->nodes())
      fused += n->domain == "kiln" && (n->op_type == "QConv" || n->op_type == "QMatMul" || n->op_type == "F8MatMul");
    impl->meta[tag + ".products"] = std::to_string(fused) + " of " + std::to_string(q.layers.size());
    impl->meta[tag + ".calibration"] = q.from_cache ? "cache" : options.calibration_method + ", " + std::to_string(q.calibration_sets) + " input sets";
    log(LogLevel::kInfo, tag + ": " + impl->meta[tag + ".products"] + " products in 8 bits; ranges from " + impl->meta[tag + ".calibration"]);
    for (const auto& r : q.ranges) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%s:   %s range [%.6g, %.6g] scale %.6g zero point %d", tag.c_str(), r.name.c_str(), r.lo, r.hi, r.scale, r.zero_point);
      log(LogLevel::kVerbose, buf);
    }
    // The build checks itself as reduced-precision builds do: the float32 engine and this one on the
    // first calibration set, relative L2 per output (kept in the engine's metadata). Like the budget's
    // candidates, the engine checked is untuned; the tuner may then pick FP8 fast accumulation, each
    // layer within its tolerance of the untuned choice (tune/tuner.cpp), far below FP8's rounding.
    if (!calib.calibration.empty()) {
      KILN_ASSIGN_OR_RETURN(auto ref, build_float(std::move(float_graph)));
      KILN_ASSIGN_OR_RETURN(auto quant, build_as_is(impl->graph->clone()));
      std::map<std::string, Value> in;
      for (const auto& [k, t] : calib.calibration.front()) in[k] = Value::of(t);
      KILN_ASSIGN_OR_RETURN(auto rc, ref->create_context());
      KILN_ASSIGN_OR_RETURN(auto qc, quant->create_context());
      KILN_ASSIGN_OR_RETURN(auto want, rc->run(in));
      KILN_ASSIGN_OR_RETURN(auto got, qc->run(in));
      for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
        const Tensor& a = want[i].tensor;
        const Tensor& b = half_as_float(got[i].tensor);  // half outputs (half_outputs) compared as float32
        if (a.dtype() != DataType::kFloat32 || b.dtype() != DataType::kFloat32 || a.numel() != b.numel()) continue;
        double num = 0, den = 0;
        add_squared_error(b, a, &num, &den);
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.3e", den > 0 ? std::sqrt(num / den) : std::sqrt(num));
        impl->meta[tag + ".rel_l2." + ref->outputs()[i].name] = buf;
        log(LogLevel::kInfo, tag + ": output '" + ref->outputs()[i].name + "' relative L2 against float32 " + buf +
                                 " (first calibration set)");
      }
    }
  } else {
    KILN_RETURN_IF_ERROR(prepare_graph(*impl->graph, options, target->kernels()));
  }
  KILN_RETURN_IF_ERROR(check_build_time("lowering"));
  LowerOptions lo;
  lo.device = options.device;
  lo.verbose = options.verbose;
  report(options, start, "lower");
  KILN_ASSIGN_OR_RETURN(impl->plan, lower(impl->graph, lo));
  const bool tune = options.tunes();
  if (tune) {
    KILN_RETURN_IF_ERROR(check_build_time("tuning"));
    report(options, start, "tune");
    KILN_RETURN_IF_ERROR(tune_engine(*impl, options, [&](int done, int total, const std::string& layer) {
      report(options, start, "tune", done, total, layer);
    }));
  }
  // What the tuner did not choose, the kernels' own choices, is decided now and stored with the plan.
  KILN_RETURN_IF_ERROR(record_default_tactics(*impl));
  KILN_RETURN_IF_ERROR(check_build_time("finishing the engine"));
  describe_engine(*impl, model.source_hash);
  // What ONNX Runtime's get_modelmeta() reports, kept in the engine file with the other header fields.
  impl->meta["model.producer_name"] = model.producer_name;
  impl->meta["model.producer_version"] = model.producer_version;
  impl->meta["model.graph_name"] = impl->graph->name;
  impl->meta["model.domain"] = model.domain;
  impl->meta["model.description"] = model.doc;
  impl->meta["model.version"] = std::to_string(model.model_version);
  for (const auto& [k, val] : model.metadata) impl->meta["model.custom." + k] = val;
  return engine_file_of(*impl);
}

// A CUDA build's device made ready on a second thread while the model is imported: the CUDA backend's
// module, the context and the build state kernels are prepared with (a stream, cuBLASLt's and cuDNN's
// handles, the workspace). That is about half a second of every CUDA build, and as long as importing
// a detection model; nothing it makes depends on the model, and backend_for/build_state are safe to
// call from the build thread at the same time. Joined before the build goes on (or on an early
// return).
class DeviceWarmUp {
 public:
  explicit DeviceWarmUp(DeviceType device) {
    if (device != DeviceType::kCUDA) return;
    thread_ = std::thread([] {
      if (auto b = backend_for(DeviceType::kCUDA); b.ok()) (*b)->build_state();
    });
  }
  void wait() {
    if (thread_.joinable()) thread_.join();
  }
  ~DeviceWarmUp() { wait(); }

 private:
  std::thread thread_;
};

// The plugins the options name, loaded before the model is imported (their ops must be known then).
static Status load_plugins(const BuildOptions& o) {
  for (const std::string& lib : o.plugins) KILN_RETURN_IF_ERROR(load_plugin(lib, o.plugin_override).status());
  return Status::Ok();
}

Expected<std::shared_ptr<Engine>> Engine::build(const std::string& onnx_path, const BuildOptions& options) {
  KILN_RETURN_IF_ERROR(load_plugins(options));
  ThreadCountScope threads(options.threads);
  const auto start = BuildClock::now();
  BuildDeadlineScope deadline(options, start);
  report(options, start, "import");
  DeviceWarmUp warm(options.device);
  KILN_ASSIGN_OR_RETURN(ir::Model model, onnx::import_file(onnx_path));
  warm.wait();
  return guarded("building the engine", [&] { return build_from_model(std::move(model), options, start); });
}

Expected<std::vector<PlacementEntry>> Engine::plan_placement(const std::string& onnx_path, const BuildOptions& options) {
  KILN_RETURN_IF_ERROR(load_plugins(options));
  ThreadCountScope threads(options.threads);
  KILN_ASSIGN_OR_RETURN(ir::Model model, onnx::import_file(onnx_path));
  return guarded("planning placement", [&]() -> Expected<std::vector<PlacementEntry>> {
    ScopedLogLevel level(options.verbose ? LogLevel::kVerbose : LogLevel::kWarning);
    const KernelRegistry* target = options.device == DeviceType::kCUDA ? cuda_kernel_registry() : &cpu_backend().kernels();
    if (!target) return unsupported("this kiln was built without CUDA: it has no CUDA kernels to place");
    // An 8-bit plan needs calibration data to exist; its placement is its rest's float engine's, the
    // products it quantizes being placed as the GEMMs they replace.
    KILN_ASSIGN_OR_RETURN(BuildOptions po, resolve_precision(options));
    po.precision = float_precision(po);
    po.rest_precision.reset();
    KILN_RETURN_IF_ERROR(check_disabled_passes(po));
    KILN_RETURN_IF_ERROR(prepare_graph(*model.graph, po, *target));
    return preview_placement(*model.graph, options.device);
  });
}

Expected<std::shared_ptr<Engine>> Engine::build_from_bytes(const std::string& bytes, const BuildOptions& options,
                                                           const std::string& base_dir) {
  KILN_RETURN_IF_ERROR(load_plugins(options));
  onnx::ImportOptions io;
  io.base_dir = base_dir;
  ThreadCountScope threads(options.threads);
  const auto start = BuildClock::now();
  BuildDeadlineScope deadline(options, start);
  report(options, start, "import");
  DeviceWarmUp warm(options.device);
  KILN_ASSIGN_OR_RETURN(ir::Model model, onnx::import_bytes(bytes, io));
  warm.wait();
  return guarded("building the engine", [&] { return build_from_model(std::move(model), options, start); });
}

// ---- Loading an engine built for another machine (issue #45: rebuild instead of failing)

Expected<OnMismatch> parse_on_mismatch(const std::string& name) {
  if (name == "error") return OnMismatch::kError;
  if (name == "rebuild") return OnMismatch::kRebuild;
  if (name == "rebuild-and-save" || name == "rebuild_and_save") return OnMismatch::kRebuildAndSave;
  return invalid_argument("unknown on_mismatch '" + name + "' (expected error, rebuild or rebuild-and-save)");
}

// The checksum an engine file's trailer records (its identity: any change to the file changes it),
// as 16 hex digits; empty when it has none.
static std::string recorded_checksum(const Storage& file) {
  if (file.bytes < 24 || std::memcmp(static_cast<const char*>(file.data) + file.bytes - 24, "KILNSUM1", 8) != 0) return "";
  uint64_t sum = 0;
  std::memcpy(&sum, static_cast<const char*>(file.data) + file.bytes - 16, 8);
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(sum));
  return buf;
}

// Where an engine file for `device` rebuilt here is kept: named by this machine's fingerprint for it.
static Expected<std::string> rebuilt_name(const std::string& engine_path, DeviceType device) {
  KILN_ASSIGN_OR_RETURN(Backend * b, backend_for(device));
  const std::string fp = b->fingerprint();
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", static_cast<unsigned>(checksum64(fp.data(), fp.size()) >> 32));
  std::filesystem::path p(engine_path);
  const std::string stem = p.extension() == ".kiln" ? p.stem().string() : p.filename().string();
  return (p.parent_path() / (stem + "." + hex + ".kiln")).string();
}

Expected<std::string> Engine::rebuilt_path(const std::string& engine_path) {
  KILN_ASSIGN_OR_RETURN(auto file, map_engine_file(engine_path));
  KILN_ASSIGN_OR_RETURN(auto impl, deserialize_engine(file, true));
  return rebuilt_name(engine_path, impl->options.device);
}

// Lowers and tunes, on this machine, the graph of an engine read for a rebuild (plan null).
static Status rebuild_here(Engine::Impl& impl, const EngineLoadOptions& lo) {
  BuildOptions o;
  o.device = impl.options.device;
  o.opt_level = impl.options.opt_level;
  o.profiles = impl.options.profiles;
  KILN_ASSIGN_OR_RETURN(o.precision, parse_precision(impl.meta["precision"]));
  o.tune = lo.tune;
  o.timing_cache = lo.timing_cache;
  o.verbose = lo.verbose;
  impl.options = o;
  ScopedLogLevel level(o.verbose ? LogLevel::kVerbose : LogLevel::kWarning);
  LowerOptions low;
  low.device = o.device;
  low.verbose = o.verbose;
  KILN_ASSIGN_OR_RETURN(impl.plan, lower(impl.graph, low));
  if (o.tunes()) KILN_RETURN_IF_ERROR(tune_engine(impl, o, nullptr));
  KILN_RETURN_IF_ERROR(record_default_tactics(impl));
  // A fresh engine's header (this machine's fingerprint, kiln version, CPU features), the model's
  // metadata and the build's records (int8/fp8 reports) kept.
  std::map<std::string, std::string> kept = impl.meta;
  describe_engine(impl, kept["model_hash"]);
  for (const auto& [k, v] : kept)
    if (!impl.meta.count(k)) impl.meta[k] = v;
  impl.meta.erase("foreign");
  return Status::Ok();
}

// An engine file of another machine (`file`, named `who` in messages), read for a rebuild (`impl`, the
// file parsed once by the caller), rebuilt here; its metadata records what it was built for and the
// file's checksum. Empty `differs` when it matched after all.
static Expected<std::shared_ptr<Engine>> rebuild_foreign(const Storage& file, Expected<std::unique_ptr<Engine::Impl>> impl,
                                                         const std::string& who, const EngineLoadOptions& lo,
                                                         std::string* differs) {
  const std::string identity = recorded_checksum(file);
  if (!impl.ok()) return impl.status().with_context(who);
  if ((*impl)->plan) return std::make_shared<Engine>(std::move(impl).value());  // it matched after all
  *differs = (*impl)->meta["foreign"];
  const std::string built_for = (*impl)->meta["fingerprint"];
  Status st = guarded("rebuilding the engine", [&] { return rebuild_here(**impl, lo); });
  if (!st.ok()) return st.with_context(who + " (" + *differs + ")");
  (*impl)->meta["rebuilt_from"] = built_for;
  (*impl)->meta["rebuilt_from.checksum"] = identity;
  // Through the one EngineFile → Engine path, as a build's engine.
  EngineFile rebuilt = engine_file_of(**impl);
  impl->reset();
  return engine_from_file(std::move(rebuilt));
}

static std::string seconds_since(std::chrono::steady_clock::time_point start) {
  char took[32];
  std::snprintf(took, sizeof(took), "%.2f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return took;
}

Expected<std::shared_ptr<Engine>> Engine::load_from_bytes(const std::string& bytes, const EngineLoadOptions& lo) {
  auto strict = load_from_bytes(bytes);
  if (strict.ok() || strict.status().code() != StatusCode::kEngineMismatch || lo.on_mismatch == OnMismatch::kError)
    return strict;
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(auto file, cpu_backend().allocate(bytes.size()));
  std::memcpy(file->data, bytes.data(), bytes.size());
  std::string differs;
  auto impl = deserialize_engine(file, true);
  KILN_ASSIGN_OR_RETURN(auto engine, rebuild_foreign(*file, std::move(impl), "engine bytes", lo, &differs));
  if (!differs.empty())
    log(LogLevel::kWarning, "engine bytes: " + differs + ": rebuilt from its graph in " + seconds_since(start) +
                                (lo.on_mismatch == OnMismatch::kRebuildAndSave ? " (bytes have no folder: not kept)" : ""));
  return engine;
}

Expected<std::shared_ptr<Engine>> Engine::load(const std::string& engine_path, const EngineLoadOptions& lo) {
  auto strict = load(engine_path);
  if (strict.ok() || strict.status().code() != StatusCode::kEngineMismatch || lo.on_mismatch == OnMismatch::kError)
    return strict;
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(auto file, map_engine_file(engine_path));
  const std::string identity = recorded_checksum(*file);
  // The file is parsed once more here (for its graph, without its plan): what follows reads that.
  auto impl = deserialize_engine(file, true);
  if (!impl.ok()) return impl.status().with_context(engine_path);
  std::string saved;
  if (lo.on_mismatch == OnMismatch::kRebuildAndSave) {
    KILN_ASSIGN_OR_RETURN(saved, rebuilt_name(engine_path, (*impl)->options.device));
    // An engine rebuilt here before from this very file is the answer: its recorded source checksum
    // and model hash match, and the file is this user's and writable by no one else (the checksum is
    // no proof: anyone who may create files in the folder could plant one; that folder must be as
    // trusted as the original).
    struct stat st {};
    if (!identity.empty() && ::lstat(saved.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
        (st.st_mode & (S_IWGRP | S_IWOTH)) == 0) {
      auto prior = load(saved);
      if (prior.ok() && (*prior)->metadata()["rebuilt_from.checksum"] == identity &&
          (*prior)->metadata()["model_hash"] == (*impl)->meta["model_hash"]) {
        log(LogLevel::kInfo, "engine '" + engine_path + "': loaded '" + saved + "', rebuilt for this machine before");
        return prior;
      }
    }
  }
  std::string differs;
  KILN_ASSIGN_OR_RETURN(auto engine, rebuild_foreign(*file, std::move(impl), engine_path, lo, &differs));
  if (differs.empty()) return engine;
  std::string where;
  if (!saved.empty()) {
    // Not kept (a read-only folder, another user's file there): the rebuilt engine still serves.
    Status kept = engine->save(saved);
    where = kept.ok() ? "; saved as '" + saved + "'" : "; not kept (" + kept.message() + ")";
  }
  log(LogLevel::kWarning, "engine '" + engine_path + "': " + differs + ": rebuilt from its graph in " + seconds_since(start) +
                              where);
  return engine;
}

Expected<std::shared_ptr<Engine>> Engine::open(const std::string& path, const BuildOptions& options,
                                               const EngineLoadOptions& load_options) {
  KILN_RETURN_IF_ERROR(check_readable_file(path, "model"));  // a FIFO would block the open for ever
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open '" + path + "'");
  std::string head(16, '\0');
  f.read(head.data(), 16);
  head.resize(static_cast<size_t>(f.gcount()));
  if (looks_like_engine(head)) {
    KILN_RETURN_IF_ERROR(load_plugins(options));
    return load(path, load_options);
  }
  return build(path, options);
}

}  // namespace kiln
