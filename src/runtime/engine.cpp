// runtime/engine.cpp — the public API: build (import → optimize → lower), load, run.
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
#include <fstream>
#include <sstream>
#include <utility>

#include "backends/backend.h"
#include "onnx/importer.h"
#include "ops/op_table.h"
#include "passes/passes.h"
#include "runtime/calibrate.h"
#include "runtime/eager.h"
#include "runtime/engine_impl.h"
#include "runtime/executor.h"
#include "util/guard.h"
#include "util/env.h"
#include "util/log.h"

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

// The precision the rest of an FP8 engine runs in (everything but its kiln.F8MatMul products).
static Precision fp8_rest_precision(DeviceType device) {
  return device == DeviceType::kCUDA ? Precision::kFloat16 : Precision::kFloat32;
}

static const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFloat16: return "fp16";
    case Precision::kBFloat16: return "bf16";
    case Precision::kTF32: return "tf32";
    case Precision::kBest: return "best";
    case Precision::kFP8: return "fp8";
    case Precision::kFloat32: break;
  }
  return "fp32";
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
  impl.meta["cpu_isa"] = host_cpu_isa();
  impl.meta["opt_level"] = std::to_string(impl.options.opt_level);
  impl.meta["precision"] = precision_name(impl.options.precision);
}

passes::PassOptions builder_pass_options(int opt_level, const KernelRegistry* target) {
  passes::PassOptions po;
  po.level = opt_level;
  po.evaluate = [](const ir::Node& n, const std::vector<Value>& in) { return run_node_eager(n, in); };
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

static bool has_kiln_op(const ir::Graph& graph, const char* op) {
  for (const ir::Node* n : graph.nodes())
    if (n->domain == "kiln" && n->op_type == op) return true;
  return false;
}
static bool has_qconv(const ir::Graph& graph) { return has_kiln_op(graph, "QConv"); }
static bool has_qmatmul(const ir::Graph& graph) { return has_kiln_op(graph, "QMatMul"); }

// CPU engines run their 8-bit convolutions channels-last (oneDNN's int8 kernels are NHWC): chains of
// kiln.QConv and the per-tensor Q/DQ and elementwise ops between them move to NHWC, float32 pools
// inside a chain become kiln.ChannelsLastPool. Nothing changes in a graph without kiln.QConv.
static Status cpu_channels_last(ir::Graph& graph, const BuildOptions& options, const KernelRegistry& target) {
  const bool qconv = has_qconv(graph);
  // Float32 convolutions too, from opt level 2 (oneDNN's NHWC kernels instead of a reorder to its
  // blocked layout and back around every layer).
  const bool float_convs = options.opt_level >= 2 && !env_is("KILN_CPU_NHWC", "0");
  if ((!qconv && !float_convs) || options.opt_level < 1 || env_is("KILN_CHANNELS_LAST", "0")) return Status::Ok();
  bool pool = false;
  for (const KernelDef& d : target.all()) pool |= d.op == "ChannelsLastPool" && d.domain == "kiln";
  auto accepts = [pool, float_convs](const ir::Node& n) {
    if (n.domain == "kiln" && n.op_type == "QConv") return true;
    const bool conv = n.op_type == "Conv" || n.op_type == "FusedConv";
    if (conv)
      return float_convs && n.inputs[0]->type.dtype == DataType::kFloat32 && n.inputs[1]->type.dtype == DataType::kFloat32 &&
             (!n.has_input(2) || n.inputs[2]->type.dtype == DataType::kFloat32);
    return pool && n.inputs[0]->type.dtype == DataType::kFloat32;
  };
  KILN_ASSIGN_OR_RETURN(int converted, passes::convert_to_channels_last(graph, accepts));
  if (converted == 0) return Status::Ok();
  // A model's own layout Transposes (ConvNeXt's permutes around LayerNorm) now meet the pass's
  // Transposes back and forth: the pairs cancel.
  passes::PassOptions po = builder_pass_options(options.opt_level, &target);
  passes::PassContext ctx{po, {}, {}, {}, {}};
  for (int round = 0; round < 4; ++round) {
    KILN_ASSIGN_OR_RETURN(bool changed, passes::simplify_transposes(graph, ctx));
    KILN_RETURN_IF_ERROR(passes::eliminate_dead_code(graph, ctx).status());
    if (!changed) break;
  }
  if (!env_is("KILN_CONV_POOL", "0")) KILN_RETURN_IF_ERROR(passes::fold_pools_into_convs(graph).status());
  return graph.sort();
}

// Float16/bfloat16 engines (and the float rest of a CUDA INT8 engine built with --precision fp16/bf16):
// the nodes the target runs in half get half inputs and outputs. Then, on CUDA, convolution chains
// move channels-last: tensor-core float16 convolutions, and kiln.QConv (the int8 kernel is NHWC only)
// with the Q/DQ, elementwise ops and pools between them (KILN_CHANNELS_LAST=0 keeps channels-first
// float convolutions, to compare).
static Status lower_precision_and_layout(ir::Graph& graph, const BuildOptions& options, const KernelRegistry& target) {
  const bool half_engine = options.precision == Precision::kFloat16 || options.precision == Precision::kBFloat16 ||
                           options.precision == Precision::kBest;
  if (half_engine) {
    const DataType half = options.precision == Precision::kBFloat16 ? DataType::kBFloat16 : DataType::kFloat16;
    auto runs_in_half = [&target](const ir::Node& n) {
      const std::string domain = n.domain == "ai.onnx" ? "" : n.domain;
      for (const KernelDef& d : target.all())
        if (d.half_floats && d.op == n.op_type && d.domain == domain && (n.opset == 0 || (n.opset >= d.since && n.opset <= d.until)))
          return true;
      return false;
    };
    KILN_RETURN_IF_ERROR(passes::convert_precision(graph, half, runs_in_half).status());
  }
  if (options.device != DeviceType::kCUDA || options.opt_level < 1) return Status::Ok();
  bool half_fused_conv = false, half_pool = false;
  for (const KernelDef& d : target.all()) {
    half_fused_conv |= d.op == "FusedConv" && d.domain == "kiln" && d.half_floats;
    half_pool |= d.op == "ChannelsLastPool" && d.domain == "kiln" && d.half_floats;
  }
  const bool qconv = has_qconv(graph);
  const bool half_convs = half_engine && half_fused_conv && !env_is("KILN_CHANNELS_LAST", "0");
  auto target_takes = [&target](const ir::Node& n) { return target.find(n) != nullptr; };
  // INT8 products read int8 activations without a shift pass; in a half engine they also read half
  // activations and write half results directly (after the layout pass when there are int8
  // convolutions: it moves their Q/DQ).
  auto int8_products_io = [&]() {
    if (!qconv && !has_qmatmul(graph)) return;
    passes::signed_activations(graph, target_takes);
    if (!half_engine) return;
    passes::quantize_half_directly(graph, target_takes);
    if (options.precision != Precision::kBFloat16) passes::products_write_half(graph, DataType::kFloat16, target_takes);
  };
  if (!half_convs && !qconv) {
    int8_products_io();
    return Status::Ok();
  }
  auto accepts = [half_pool, half_convs](const ir::Node& n) {
    if (n.domain == "kiln" && n.op_type == "QConv") return true;
    const DataType dt = n.inputs[0]->type.dtype;
    const bool conv = n.op_type == "Conv" || n.op_type == "FusedConv";
    if (conv) return half_convs && (dt == DataType::kFloat16 || dt == DataType::kBFloat16);
    return half_pool;
  };
  KILN_RETURN_IF_ERROR(passes::convert_to_channels_last(graph, accepts).status());
  int8_products_io();
  // The stem (a few-channel convolution, its max pool and the quantization after it) in one kernel;
  // KILN_CONV_POOL_CUDA=0 keeps the separate steps, to compare.
  if (options.opt_level >= 2 && !env_is("KILN_CONV_POOL_CUDA", "0"))
    KILN_RETURN_IF_ERROR(passes::fuse_conv_max_pool(graph, target_takes).status());
  return Status::Ok();
}

// Import-to-placement steps shared by a build and a placement plan: checks the options, fixes profile
// shapes, optimizes for the target's kernels, converts precision and layout. `target` is the kernel
// rows of the device the engine is for (the CUDA rows exist without a GPU).
// Reduced-precision float engines are GPU engines.
static Status check_precision_device(Precision precision, DeviceType device) {
  if (precision == Precision::kFloat32 || device == DeviceType::kCUDA) return Status::Ok();
  return invalid_argument(std::string(precision_name(precision)) +
                          " engines are GPU engines: build with device cuda (CPU engines compute in float32)");
}

static Status prepare_graph(ir::Graph& graph, const BuildOptions& options, const KernelRegistry& target) {
  if (options.precision == Precision::kFP8) return invalid_argument("an FP8 graph is prepared by the 8-bit build path");
  KILN_RETURN_IF_ERROR(check_precision_device(options.precision, options.device));
  KILN_RETURN_IF_ERROR(validate_profiles(graph, options.profiles));
  fix_profile_shapes(graph, options.profiles);
  passes::PassOptions po = builder_pass_options(options.opt_level, &target);
  po.verbose = options.verbose;
  // Float32 attention on CUDA runs faster unfused (cuBLAS's FP32 GEMMs for Q·Kᵀ and P·V against the
  // fused kernel's CUDA-core loops; H100, BERT-base: batch 1 1.82 vs 2.23 ms, batch 64 44.5 vs 46.7
  // ms); float16/bfloat16 engines fuse it (tensor-core kernel: batch 64 9.2 vs 15.2 ms).
  if (options.device == DeviceType::kCUDA && (options.precision == Precision::kFloat32 || options.precision == Precision::kTF32))
    po.disabled.insert("fuse-attention");
  // cuBLASLt's tensor-core kernels want 16-byte rows: 8 float16 columns (4 float32 ones).
  if (options.device == DeviceType::kCUDA) po.pad_matmul_columns = 8;
  KILN_RETURN_IF_ERROR(passes::optimize(graph, po));
  // A QDQ model's residual Adds into the int8 convolutions before them, as the CUDA INT8 build does
  // (CUDA's kernel reads the residual; the CPU's does not).
  if (options.device == DeviceType::kCUDA && options.opt_level >= 2 && has_qconv(graph))
    KILN_RETURN_IF_ERROR(passes::fuse_qconv_residual(graph).status());
  KILN_RETURN_IF_ERROR(lower_precision_and_layout(graph, options, target));
  if (options.precision == Precision::kTF32 || options.precision == Precision::kBest) passes::allow_tf32(graph);
  if (options.device == DeviceType::kCPU) KILN_RETURN_IF_ERROR(cpu_channels_last(graph, options, target));
  return Status::Ok();
}

static Expected<std::shared_ptr<Engine>> build_from_model(ir::Model model, const BuildOptions& options,
                                                          BuildClock::time_point start);

Expected<std::shared_ptr<Engine>> build_graph_as_is(std::unique_ptr<ir::Graph> g, DeviceType device) {
  ir::Model m;
  m.graph = std::move(g);
  BuildOptions f;
  f.opt_level = 0;
  f.tune = 0;
  f.device = device;
  return build_from_model(std::move(m), f, BuildClock::now());
}

static Expected<std::shared_ptr<Engine>> build_from_model(ir::Model model, const BuildOptions& options,
                                                          BuildClock::time_point start) {
  auto impl = std::make_unique<Engine::Impl>();
  impl->options = options;
  impl->options.progress = nullptr;
  impl->graph = std::shared_ptr<ir::Graph>(std::move(model.graph));
  // A verbose build logs every decision (the optimizer's rewrites, placement fallbacks, tuning).
  ScopedLogLevel level(options.verbose ? LogLevel::kVerbose : LogLevel::kWarning);
  const bool fp8 = options.precision == Precision::kFP8;
  if (options.int8 && fp8) return invalid_argument("choose INT8 or FP8, not both");
  if ((options.int8 || fp8) && options.opt_level < 1)
    return invalid_argument("an INT8 or FP8 build needs opt level 1 or more");
  KILN_ASSIGN_OR_RETURN(Backend * target, backend_for(options.device));
  report(options, start, "optimize");
  if (options.int8 || fp8) {
    // Quantize the graph optimized without fusions (the QDQ fusion wants plain Conv/MatMul/Gemm),
    // then optimize it at the requested level: fuse-qdq first, the float fusions for the rest.
    // FP8 engines: the products become kiln.F8MatMul, and the rest of a CUDA engine is float16.
    // The float rest of an INT8 engine takes the requested precision (CUDA: --precision fp16 makes
    // it float16, as TensorRT's --int8 --fp16); the graph is quantized in float32.
    BuildOptions plain = options;
    plain.opt_level = 1;
    if (!fp8) KILN_RETURN_IF_ERROR(check_precision_device(options.precision, options.device));
    plain.precision = Precision::kFloat32;
    // Calibration, the budget's candidates and the build's own check run the graph on the
    // calibration sets' shapes (a batch of 4 for an engine of batch 256): the graph keeps its
    // dynamic dims, and the profiles apply to the engine only (its plan and tuning).
    plain.profiles.clear();
    BuildOptions rest = options;  // how the quantized graph is optimized
    rest.precision = fp8 ? fp8_rest_precision(options.device) : options.precision;
    rest.profiles.clear();
    KILN_RETURN_IF_ERROR(prepare_graph(*impl->graph, plain, target->kernels()));
    auto float_graph = impl->graph->clone();
    // A graph as it is (opt level 0, untuned) on `device`: the float32 reference and calibration
    // engines run on the CPU, quantized candidates on the engine's device.
    auto build_float = [&](std::unique_ptr<ir::Graph> g) { return build_graph_as_is(std::move(g), DeviceType::kCPU); };
    auto build_as_is = [&](std::unique_ptr<ir::Graph> g) { return build_graph_as_is(std::move(g), options.device); };
    report(options, start, "calibrate");
    BuildOptions calib = options;
    if (calib.calibration.empty() && !calib.calibration_dir.empty()) {
      std::vector<std::string> names;
      for (const ir::Value* v : impl->graph->inputs)
        if (!v->constant) names.push_back(v->name);
      KILN_ASSIGN_OR_RETURN(calib.calibration, read_calibration_dir(calib.calibration_dir, names));
    }
    // The finished graph of a quantized candidate: INT8 fuses Q/DQ and moves convolutions
    // channels-last; FP8 optimizes (and converts to float16 for CUDA) as prepare_graph does.
    auto finish = [&](ir::Graph& g) -> Status {
      KILN_RETURN_IF_ERROR(validate_profiles(g, options.profiles));
      if (fp8) return prepare_graph(g, rest, target->kernels());
      passes::OptimizeStats stats;
      KILN_RETURN_IF_ERROR(passes::optimize(g, builder_pass_options(options.opt_level, &target->kernels()), &stats));
      for (const std::string& miss : stats.near_misses) log(LogLevel::kVerbose, "near miss: " + miss);
      if (options.device != DeviceType::kCUDA) return cpu_channels_last(g, options, target->kernels());
      // CUDA: residual Adds into the int8 convolutions before them, the float rest in the requested
      // precision, the convolution chains channels-last.
      KILN_RETURN_IF_ERROR(passes::fuse_qconv_residual(g).status());
      KILN_RETURN_IF_ERROR(lower_precision_and_layout(g, rest, target->kernels()));
      if (rest.precision == Precision::kTF32 || rest.precision == Precision::kBest) passes::allow_tf32(g);
      return g.sort();
    };
    auto build_quantized = [&](std::unique_ptr<ir::Graph> g) -> Expected<std::shared_ptr<Engine>> {
      KILN_RETURN_IF_ERROR(finish(*g));
      return build_as_is(std::move(g));
    };
    const std::string tag = fp8 ? "fp8" : "int8";  // the report's metadata keys and log lines
    KILN_ASSIGN_OR_RETURN(Int8Report q, quantize_8bit(*impl->graph, calib, model.source_hash, build_float, build_quantized));
    if (q.budget > 0) {
      // The per-product table: precision and sensitivity (the metric with only it in 8 bits).
      std::string table;
      for (const auto& l : q.layers) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), " %s %.4g\n", l.int8 ? (fp8 ? "fp8" : "int8") : rest.precision == Precision::kFloat16 ? "fp16" : "fp32",
                      l.sensitivity);
        table += l.node + " " + l.op + buf;
      }
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%s %.4g (budget %.4g)", q.metric.c_str(), q.error, q.budget);
      impl->meta[tag + ".layers"] = table;
      impl->meta[tag + ".error"] = buf;
    }
    KILN_RETURN_IF_ERROR(finish(*impl->graph));
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
    // layer within its tolerance of the untuned choice (runtime/tuner.cpp), far below FP8's rounding.
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
        const Tensor& b = got[i].tensor;
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
  LowerOptions lo;
  lo.device = options.device;
  lo.verbose = options.verbose;
  report(options, start, "lower");
  KILN_ASSIGN_OR_RETURN(impl->plan, lower(impl->graph, lo));
  const bool tune = options.tune > 0 || (options.tune < 0 && options.device == DeviceType::kCUDA);
  if (tune) {
    report(options, start, "tune");
    KILN_RETURN_IF_ERROR(tune_engine(*impl, options, [&](int done, int total, const std::string& layer) {
      report(options, start, "tune", done, total, layer);
    }));
  }
  describe_engine(*impl, model.source_hash);
  // What ONNX Runtime's get_modelmeta() reports, kept in the engine file with the other header fields.
  impl->meta["model.producer_name"] = model.producer_name;
  impl->meta["model.producer_version"] = model.producer_version;
  impl->meta["model.graph_name"] = impl->graph->name;
  impl->meta["model.domain"] = model.domain;
  impl->meta["model.description"] = model.doc;
  impl->meta["model.version"] = std::to_string(model.model_version);
  for (const auto& [k, val] : model.metadata) impl->meta["model.custom." + k] = val;
  report(options, start, "done");
  return std::make_shared<Engine>(std::move(impl));
}

namespace {

// The OpenMP thread count of the calling thread for one run (ExecutionContext::set_num_threads) or one
// build (BuildOptions::threads), restored after it: a setting never leaks into other contexts or builds
// on the same thread.
class ThreadCountScope {
 public:
  explicit ThreadCountScope(int n) : saved_(n > 0 ? omp_get_max_threads() : 0) {
    if (n > 0 && n != saved_) omp_set_num_threads(n);
    else saved_ = 0;
  }
  ~ThreadCountScope() {
    if (saved_ > 0) omp_set_num_threads(saved_);
  }
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;

 private:
  int saved_;
};

}  // namespace

Expected<std::shared_ptr<Engine>> Engine::build(const std::string& onnx_path, const BuildOptions& options) {
  ThreadCountScope threads(options.threads);
  const auto start = BuildClock::now();
  report(options, start, "import");
  KILN_ASSIGN_OR_RETURN(ir::Model model, onnx::import_file(onnx_path));
  return guarded("building the engine", [&] { return build_from_model(std::move(model), options, start); });
}

Expected<std::vector<PlacementEntry>> Engine::plan_placement(const std::string& onnx_path, const BuildOptions& options) {
  ThreadCountScope threads(options.threads);
  KILN_ASSIGN_OR_RETURN(ir::Model model, onnx::import_file(onnx_path));
  return guarded("planning placement", [&]() -> Expected<std::vector<PlacementEntry>> {
    ScopedLogLevel level(options.verbose ? LogLevel::kVerbose : LogLevel::kWarning);
    const KernelRegistry* target = options.device == DeviceType::kCUDA ? cuda_kernel_registry() : &cpu_backend().kernels();
    if (!target) return unsupported("this kiln was built without CUDA: it has no CUDA kernels to place");
    // An FP8 plan needs calibration data to exist; its placement is the float16 engine's (CUDA) or the
    // float32 one's (CPU), the products it quantizes being placed as the GEMMs they replace.
    BuildOptions po = options;
    if (po.precision == Precision::kFP8) po.precision = fp8_rest_precision(po.device);
    KILN_RETURN_IF_ERROR(prepare_graph(*model.graph, po, *target));
    return preview_placement(*model.graph, options.device);
  });
}

Expected<std::shared_ptr<Engine>> Engine::build_from_bytes(const std::string& bytes, const BuildOptions& options,
                                                           const std::string& base_dir) {
  onnx::ImportOptions io;
  io.base_dir = base_dir;
  ThreadCountScope threads(options.threads);
  const auto start = BuildClock::now();
  report(options, start, "import");
  KILN_ASSIGN_OR_RETURN(ir::Model model, onnx::import_bytes(bytes, io));
  return guarded("building the engine", [&] { return build_from_model(std::move(model), options, start); });
}


Expected<std::string> serialize_engine(const Engine::Impl& impl) {
  EngineFile e;
  e.graph = impl.graph;
  e.plan = impl.plan;
  e.meta = impl.meta;
  e.profiles = impl.options.profiles;
  return write_engine_file(e);
}

Expected<std::unique_ptr<Engine::Impl>> deserialize_engine(std::shared_ptr<Storage> file) {
  KILN_ASSIGN_OR_RETURN(EngineFile e, read_engine_file(std::move(file)));
  auto impl = std::make_unique<Engine::Impl>();
  impl->graph = std::move(e.graph);
  impl->plan = std::move(e.plan);
  impl->options.device = e.meta["device"] == "cuda" ? DeviceType::kCUDA : DeviceType::kCPU;
  impl->options.opt_level = std::atoi(e.meta["opt_level"].c_str());
  impl->options.profiles = std::move(e.profiles);
  KILN_RETURN_IF_ERROR(validate_profiles(*impl->graph, impl->options.profiles).with_context("engine file"));
  describe_engine(*impl, e.meta["model_hash"]);
  impl->meta = std::move(e.meta);  // as written (describe_engine fills the meta of a fresh build)
  return impl;
}

Expected<std::shared_ptr<Engine>> Engine::load_from_bytes(const std::string& bytes) {
  KILN_ASSIGN_OR_RETURN(auto file, cpu_backend().allocate(bytes.size()));
  if (!bytes.empty()) std::memcpy(file->data, bytes.data(), bytes.size());
  KILN_ASSIGN_OR_RETURN(auto impl, deserialize_engine(std::move(file)));
  return std::make_shared<Engine>(std::move(impl));
}

// The file mapped copy-on-write (never written through, but a kernel bug cannot reach the file).
static Expected<std::shared_ptr<Storage>> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
  KILN_ASSIGN_OR_RETURN(auto file, map_file(engine_path));
  auto impl = deserialize_engine(std::move(file));
  if (!impl.ok()) return impl.status().with_context(engine_path);
  return std::make_shared<Engine>(std::move(impl).value());
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
  // Shape plans, most recently used first; at most kMaxPlans (the least recently used goes).
  static constexpr size_t kMaxPlans = 16;
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
void ExecutionContext::set_run_timeout(double seconds) { impl_->timeout_s = seconds > 0 ? seconds : 0; }


void ExecutionContext::set_num_threads(int n) { impl_->threads = n > 0 ? n : 0; }

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
    if (ci.plans.size() >= Impl::kMaxPlans) ci.plans.pop_back();
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
  return b->copy(src, dst, nullptr);  // no state: a synchronous copy
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
