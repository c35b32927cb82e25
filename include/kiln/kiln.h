// kiln/kiln.h — the public C++ API: build an engine from an ONNX model, save/load it, run it.
//
//   kiln::BuildOptions options;
//   options.device = kiln::DeviceType::kCUDA;
//   auto engine = kiln::Engine::build("model.onnx", options);
//   if (!engine) { std::cerr << engine.status().to_string(); return 1; }
//   auto ctx = (*engine)->create_context();
//   auto outs = (*ctx)->run({{"input", kiln::Value::of(tensor)}});
//
// Thread safety: an Engine is immutable once built and may be shared by any number of threads.
// An ExecutionContext holds per-run memory (arena, stream) and must be used by one thread at a
// time; create one context per thread to run concurrently.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

const char* version();

// A runtime value: a tensor, a sequence of tensors, or nothing (an empty optional).
struct Value {
  enum class Kind { kNone, kTensor, kSequence };
  Kind kind = Kind::kNone;
  Tensor tensor;
  std::vector<Tensor> sequence;
  DataType seq_dtype = DataType::kUndefined;  // element type of an (empty) sequence

  static Value of(Tensor t) { Value s; s.kind = Kind::kTensor; s.tensor = std::move(t); return s; }
  static Value of_sequence(std::vector<Tensor> seq, DataType dt) {
    Value s; s.kind = Kind::kSequence; s.sequence = std::move(seq); s.seq_dtype = dt; return s;
  }
};

// A graph input or output as declared: dims are -1 where dynamic, with the symbol in dim_names.
struct TensorInfo {
  std::string name;
  std::string kind = "tensor";  // "tensor", "sequence", "optional", "map"
  DataType dtype = DataType::kUndefined;
  bool rank_known = true;
  std::vector<int64_t> shape;
  std::vector<std::string> dim_names;
  // An input backed by an initializer (a model before IR 4 lists its weights as inputs; ONNX Runtime
  // calls these overridable initializers): feeding it is optional, the initializer is its default.
  bool has_default = false;
  // "tensor(float)", "seq(tensor(int64))", ... as ONNX Runtime prints types.
  std::string type_string() const;
};

// The precision of an engine's float tensors. Reduced precisions are for GPU engines: float32 tensors
// are stored as float16/bfloat16 wherever the kernel takes them, GEMMs and convolutions run on tensor
// cores, and accumulation, normalization statistics and softmax stay float32; the model's inputs and
// outputs keep their dtypes.
// kFloat32: true FP32 (no TF32). kTF32: float32 tensors, with convolutions and GEMMs on TF32 tensor
// cores (10-bit mantissa products, FP32 accumulation). kFloat16/kBFloat16: half tensors wherever the
// GPU has a half kernel, FP32 accumulation and statistics. kBest: float16 where the GPU has a half
// kernel, TF32 for the float32 rest.
// The 8-bit precisions quantize the products with constant weights from calibration data
// (BuildOptions::calibration) and run the rest in BuildOptions::rest_precision (by default float16 on
// CUDA, float32 on the CPU):
// kInt8: every Conv (2-D), MatMul and Gemm the target's 8-bit kernels take, in int8 (BuildOptions
//   describes the method); CPU and CUDA engines.
// kFP8: the products with constant weights (MatMul, Gemm; on CUDA the convolutions too) in FP8 E4M3
//   (Hopper tensor cores) with per-tensor scales; on a CPU engine the FP8 products are emulated in
//   float32 (the accuracy of FP8, not its speed).
enum class Precision : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kTF32 = 3, kBest = 4, kFP8 = 5, kInt8 = 6 };

// The one name of each precision, as the CLI (--precision), Python (precision=), the C API and engine
// files (metadata "precision") spell it: "fp32", "fp16", "bf16", "tf32", "best", "fp8", "int8".
const char* precision_name(Precision p);
// The precision a name means; kInvalidArgument naming the names for any other string.
Expected<Precision> parse_precision(const std::string& name);

// A range of input shapes an engine accepts (TensorRT's optimization profile): per named input, the
// smallest, the typical and the largest dims. The builder tunes each profile at its `opt` shapes; a
// context runs a shape inside some profile's [min, max] (the first that holds it) with that profile's
// tactics, and refuses one outside every profile. Inputs a profile does not name keep their declared
// dims (dynamic dims tuned at 1).
struct ShapeProfile {
  std::map<std::string, std::vector<int64_t>> min, opt, max;
};

// What the builder reports while it works (BuildOptions::progress): `stage` is "import", "optimize",
// "lower", "tune" or "done"; for "tune", `done` of `total` layers are tuned and `detail` names the
// layer; `seconds` is the time since the build started.
struct BuildProgress {
  std::string stage;
  int done = 0, total = 0;
  std::string detail;
  double seconds = 0;
};

struct BuildOptions {
  DeviceType device = DeviceType::kCPU;
  Precision precision = Precision::kFloat32;
  // 0: none; 1: folding and cleanup; 2 (default, as ONNX Runtime's ORT_ENABLE_ALL): + fusions into kiln's fused
  // kernels; 3: + aggressive (as 2 for now)
  int opt_level = 2;
  bool verbose = false;       // log each planning decision (and each tuned layer's candidates) to stderr
  std::vector<ShapeProfile> profiles;  // empty: one profile, the declared shapes (dynamic dims 1 to any)
  // Auto-tuning: time each layer's candidate tactics on the device, keep the fastest that computes
  // the same result. -1: tune CUDA engines, not CPU ones; 0: never; 1: always.
  int tune = -1;
  // Whether a build with these options tunes (the rule above, in one place).
  bool tunes() const { return tune > 0 || (tune < 0 && device == DeviceType::kCUDA); }
  double tune_layer_seconds = 2.0;  // time limit per layer (candidates not reached are skipped)
  // The whole build's tuning time in seconds (0: unlimited): layers reached after it is spent keep
  // their kernels' own choices (the build's summary counts them; a later build with the timing cache
  // times them). 20 s bounds the cold build of the largest detection models measured (SSDlite-320:
  // 48 s of tuning unbudgeted); the zoo's models tune in 3-7 s and are not affected.
  double tune_budget_seconds = 20.0;
  // The whole build's time limit in seconds (0: none): past it the build stops with an error, checked
  // between stages and before (and inside the long loops of) every node constant folding evaluates.
  double timeout_s = 0;
  // A timing cache file: read before tuning (layers found in it are not timed again) and written
  // after, with this build's measurements added. A corrupt file, or one written for another device or
  // kiln version, is ignored with a warning (and a foreign one is not overwritten). An existing
  // directory holds one cache file per device and kiln version (named by a hash of them), so one
  // folder serves every GPU and CPU of a user: the `kiln` command's default for .onnx models.
  std::string timing_cache;
  std::function<void(const BuildProgress&)> progress;  // called from the building thread
  // CPU threads of the build (constant folding, weight packing, timing CPU tactics); 0: the calling
  // thread's OpenMP count. Give it the runs' thread count, so CPU tactics are timed as they will run.
  int threads = 0;
  // 8-bit builds (precision kInt8 or kFP8): the precision of what does not run in 8 bits. Unset: the
  // 8-bit precision's own (float16 on CUDA, float32 on the CPU). An INT8 engine takes any float
  // precision here (CUDA: fp32, tf32, fp16, bf16, best; CPU: fp32); an FP8 engine only its own.
  std::optional<Precision> rest_precision;
  // Reduced-precision engines (fp16, bf16, best, or 8-bit with a half rest): the model's float32
  // outputs that the engine computes in float16/bfloat16 are given in that type, not cast back to
  // float32 — half the bytes written and copied (what ONNX Runtime's float16 conversion does with
  // keep_io_types=False, and TensorRT with half output formats; torch's model.half() returns half
  // outputs too). Inputs keep their types. Refused for float32 engines.
  bool half_outputs = false;
  // INT8 (precision kInt8): every Conv (2-D), MatMul and Gemm with constant weights that the target's
  // 8-bit kernels take runs in 8 bits (CUDA engines: MatMul/Gemm on int8 tensor cores and convolutions
  // with 16+ input channels through cuDNN, their residual Adds fused), its activation as uint8 with a
  // scale and zero point (CUDA convolutions' inputs: int8, zero point 0) measured on `calibration`
  // (input sets by name, run through the float32 graph), its weights as int8 with one scale per output
  // channel. Method: "minmax" (the range seen), "entropy" (the clipping threshold of least KL
  // divergence) or "percentile" (of |x|, `calibration_percentile`). `calibration_cache`: ranges read
  // from it when it was written for this model and method (then no data is needed), else written to it.
  // Deprecated: `int8 = true` is the older spelling of an INT8 build, with `precision` naming the rest:
  // it means precision = kInt8 and rest_precision = `precision` (so int8 alone keeps the rest float32
  // on CUDA, as it always did). It cannot be combined with kFP8 or with rest_precision.
  bool int8 = false;
  std::vector<std::map<std::string, Tensor>> calibration;
  std::string calibration_dir;  // read_calibration_dir's folder, when `calibration` is empty
  std::string calibration_method = "minmax";
  double calibration_percentile = 99.99;
  std::string calibration_cache;
  // Mixed precision (INT8 and FP8 builds): with a budget > 0, products whose 8-bit error costs most stay
  // in the rest's precision — as few as keep the engine within the budget against float32 on the calibration sets,
  // by `accuracy_metric`: "rel_l2" (relative L2 of the outputs) or "top1" (the share of rows of the
  // first output whose argmax changes). The build reports each product's precision and sensitivity.
  double accuracy_budget = 0;
  std::string accuracy_metric = "rel_l2";
  // Passes this build skips, by name: any pass of the optimizer's pipeline (`kiln inspect` lists them)
  // or a target stage (channels-last, channels-last-float-convs, fold-pools-into-convs,
  // fuse-conv-max-pool, fuse-qconv-residual, signed-activations, quantize-half-directly,
  // products-write-half, products-write-float). An unknown name is an error. What a build computes depends only on these
  // options, never on the environment.
  std::vector<std::string> disabled_passes;
  // Plugin libraries (include/kiln/plugin.h) the build loads before importing the model, as
  // load_plugin(path, plugin_override) does: their ops then stay loaded in the process. The engine
  // records each plugin op it uses; loading it later needs the same plugins loaded first.
  std::vector<std::string> plugins;
  // Let these plugins replace ops built into kiln (otherwise such a plugin is refused).
  bool plugin_override = false;
};

// Calibration input sets from a folder: one subfolder per set holding <input name>.npy for every
// input, or (for a one-input model) one .npy file per set; in name order.
Expected<std::vector<std::map<std::string, Tensor>>> read_calibration_dir(const std::string& dir,
                                                                         const std::vector<std::string>& input_names);

class ExecutionContext;

// Where one node would run (Engine::plan_placement): its device ("cuda", "cpu"; empty when no kernel
// anywhere takes it), kernel row, and why it stays on the CPU in a GPU engine.
struct PlacementEntry {
  std::string node, op, device, kernel, why;
};

// One timed step of a profiled run (ExecutionContext::set_profiling). Times are host wall times from
// when profiling was turned on; on a GPU each step is waited for before its end is taken (and CUDA
// graphs are off while profiling), so a step's time is its device time plus one launch.
struct ProfileEvent {
  int64_t run = 0;        // runs counted from when profiling was turned on (0 first)
  int step = -1;          // the plan's step index; -1 for the event spanning a whole run
  std::string name;       // the node's name ("run" for the whole run)
  std::string op;         // "Conv", "com.microsoft.FusedMatMul", "copy" (between devices)
  std::string kernel;     // the kernel's registry name ("cpu.Conv.onednn", "copy.h2d")
  std::string device;     // "cpu" or "cuda"
  std::string tactic;     // the tuner's choice, "" for the kernel's own
  std::vector<std::string> inputs, outputs;  // "float32[1,3,224,224]" per tensor ("" when absent)
  size_t output_bytes = 0;
  double start_us = 0, dur_us = 0;
};
// The events as a Chrome trace (chrome://tracing, Perfetto): a JSON object with "traceEvents", one
// complete ("X") event per step with the op, kernel, device, tactic and shapes as args.
std::string profile_to_chrome_trace(const std::vector<ProfileEvent>& events, const std::string& process_name);

// What Engine::load does with an engine built for another machine of the same device kind: another
// GPU, driver or CUDA/cuDNN/cuBLASLt version (its fingerprint differs from this machine's).
enum class OnMismatch {
  kError,           // refuse it (kEngineMismatch naming both fingerprints)
  kRebuild,         // rebuild it here from the optimized graph it holds: lower and tune again
  kRebuildAndSave,  // the same, and keep the result beside the file (EngineLoadOptions)
};
// "error", "rebuild", "rebuild-and-save" (CLI --on-mismatch, Python on_mismatch); the error lists them.
Expected<OnMismatch> parse_on_mismatch(const std::string& name);

struct EngineLoadOptions {
  OnMismatch on_mismatch = OnMismatch::kError;
  // The rebuild's tuning, as BuildOptions' (-1: on CUDA); and its timing cache (a file or a folder).
  int tune = -1;
  std::string timing_cache;
  bool verbose = false;
};

class Engine {
 public:
  // Import, optimize and lower an ONNX model. `path` is an .onnx file; external data resolves
  // relative to its folder.
  static Expected<std::shared_ptr<Engine>> build(const std::string& onnx_path, const BuildOptions& options = {});
  // Same from bytes; external data (if any) resolves relative to `base_dir` (refused when empty).
  static Expected<std::shared_ptr<Engine>> build_from_bytes(const std::string& onnx_bytes, const BuildOptions& options = {},
                                                            const std::string& base_dir = {});
  // Where a build with `options` would run each node, and why a node would stay on the CPU: imports and
  // optimizes as build() does, then places every node from the kernel rows alone (no kernel is made,
  // no device touched), so a CUDA placement can be planned on a machine without a GPU.
  static Expected<std::vector<PlacementEntry>> plan_placement(const std::string& onnx_path, const BuildOptions& options = {});
  // Loads an engine file written by save(). Fails with kEngineMismatch when it was built for another
  // device or an incompatible format version, saying what differs.
  static Expected<std::shared_ptr<Engine>> load(const std::string& engine_path);
  // The same, with a policy for an engine built for another machine of this device kind. A rebuild
  // keeps the engine's graph, precision, opt level and shape profiles, lowers and tunes them here,
  // and logs one line saying what differed and how long it took; metadata "rebuilt_from" holds the
  // fingerprint it was built for. kRebuildAndSave writes the rebuilt engine beside the file
  // ("model.kiln" → "model.<8 hex digits of this machine's fingerprint hash>.kiln", atomically; the
  // original is never written) and, on later loads, reads that one while it derives from the same
  // original file. A file of another format version, or for a device this machine lacks, is refused
  // under every policy.
  static Expected<std::shared_ptr<Engine>> load(const std::string& engine_path, const EngineLoadOptions& options);
  // The file kRebuildAndSave writes for `engine_path` on this machine.
  static Expected<std::string> rebuilt_path(const std::string& engine_path);
  static Expected<std::shared_ptr<Engine>> load_from_bytes(const std::string& bytes);
  // The same with a policy (load()'s; kRebuildAndSave rebuilds and keeps nothing: bytes have no folder).
  static Expected<std::shared_ptr<Engine>> load_from_bytes(const std::string& bytes, const EngineLoadOptions& options);
  // Either: an .onnx (built with `options`) or an engine file (by its magic bytes, loaded with
  // `load_options`).
  static Expected<std::shared_ptr<Engine>> open(const std::string& path, const BuildOptions& options = {},
                                                const EngineLoadOptions& load_options = {});

  Status save(const std::string& engine_path) const;
  Expected<std::string> serialize() const;

  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  // The shape profiles it was built with (empty: the declared shapes).
  const std::vector<ShapeProfile>& profiles() const;
  DeviceType device() const;
  // One line per step: which kernel runs which node on which device (and why it fell back).
  std::string placement_report() const;
  // Header fields recorded in the engine: format, versions, device fingerprint, model hash.
  std::map<std::string, std::string> metadata() const;

  Expected<std::unique_ptr<ExecutionContext>> create_context() const;

  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  ~Engine();
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;  // shared with the contexts, which may outlive the Engine object
};

// Runs an engine. A context keeps its engine alive; it plans memory once per combination of input
// shapes it sees (a "signature") and caches that plan, so a run with a seen signature allocates no
// host or device memory (through run_into with reused output buffers) and synchronizes once.
class ExecutionContext {
 public:
  // Runs the engine. `inputs` are CPU tensors by input name (inputs with a default may be left out);
  // a CUDA engine also takes CUDA tensors (allocate_tensor, or Tensor::borrow of the caller's device
  // memory), read on the device with no host round trip, unless a host step of the engine reads that
  // input's values (then kInvalidArgument names the step). Returns every output in engine order, as
  // CPU tensors. Wrong names, dtypes or shapes give kInvalidArgument naming the input.
  Expected<std::vector<Value>> run(const std::map<std::string, Value>& inputs);

  // The allocation-free form. `inputs` follow Engine::inputs() order (a kNone Value leaves an input
  // with a default at its default); they are read in place and must stay alive and unchanged until
  // the call returns. `outputs` is resized to Engine::outputs(); an element that already holds a CPU
  // tensor of the output's dtype and shape is written in place (pass the previous run's outputs
  // back to reuse them), any other is replaced by a new tensor. A CUDA engine writes an element that
  // holds a CUDA tensor of the output's dtype and shape on the device (device-resident outputs;
  // IOBinding in ONNX Runtime's terms).
  Status run_into(const std::vector<Value>& inputs, std::vector<Value>& outputs);

  // Stops the run in progress on this context (callable from any thread): it returns kCancelled
  // before its next step. The flag clears when a run starts.
  void terminate();
  // A stop request the caller owns (ONNX Runtime's RunOptions terminate flag), or nullptr for none:
  // while installed, every run checks it before each step as it checks terminate(), and never clears
  // it, so a request made before run() is reached (while the caller prepares the inputs) is not lost.
  // The flag must outlive the runs that see it; install it around the call, from the running thread.
  void set_stop_flag(const std::atomic<bool>* flag);
  // CPU threads for this context's runs (ONNX Runtime's intra_op_num_threads): set for each run on
  // the calling thread and restored after it, so it never changes other contexts' runs; 0 (the
  // default) uses the calling thread's OpenMP setting (all cores, or OMP_NUM_THREADS). At most 1024
  // (more is clamped: the OpenMP runtime would end the process when the system refuses the threads).
  void set_num_threads(int n);
  // A time limit for each run (0: none): a run past it stops with kCancelled before its next step.
  void set_run_timeout(double seconds);
  // CUDA graphs (on by default; the environment KILN_CUDA_GRAPHS=0 makes the default off): from the
  // second run of an input-shape signature on, the GPU work between the input and output copies is
  // replayed from a captured graph with one launch instead of one launch per step. Steps whose work
  // depends on input values (data-dependent ops, host steps that read GPU results) end a graph, and
  // a capture that fails leaves that signature running step by step. No effect on CPU engines.
  void set_cuda_graphs(bool enabled);
  // The caller's CUDA stream (a cudaStream_t) for this context's GPU work: copies, kernels and graph
  // replays are queued on it instead of the context's own stream, so they order with the caller's
  // work on it (a run still waits for it before returning, its outputs being host tensors). Work
  // queued on the previous stream is waited for first; nullptr goes back to the context's own
  // stream. kInvalidArgument for a CPU engine.
  Status set_cuda_stream(void* stream);
  // Profiling: while on, every run records a ProfileEvent per top-level step and one per run
  // (subgraph steps count under their If/Loop/Scan node); GPU steps are waited for one by one and
  // CUDA graphs are not used. Turning it on clears earlier events.
  void set_profiling(bool on);
  // The events recorded since profiling was turned on or last taken, in order; clears them.
  std::vector<ProfileEvent> take_profile();
  // Captured graphs over the signatures this context has planned (tests and `kiln bench` report it).
  size_t cuda_graphs() const;
  // Input-shape signatures this context has planned (at most max_shape_plans()).
  size_t planned_signatures() const;
  // The shape plans' cache. A context keeps a plan per input-shape signature it ran (every value's
  // shape and arena offset, the kernels' state for those shapes, CUDA graphs), so a seen signature
  // runs without allocating. At most `n` are kept (0: kDefaultMaxShapePlans, 16): past that the least
  // recently used plan is dropped, with its kernel state and graphs, and the arena shrinks to what
  // the plans kept need, its memory given back, so a context under shape churn reaches a steady
  // state. A smaller `n` takes effect at once. ONNX Runtime's session option is
  // "kiln.max_shape_plans" (kiln.SessionOptions.add_session_config_entry).
  static constexpr size_t kDefaultMaxShapePlans = 16;
  void set_max_shape_plans(size_t n);
  size_t max_shape_plans() const;
  // The shape profile of the last run's input shapes (0 when the engine has none).
  int active_profile() const;
  // The arena bytes this context holds per device.
  size_t arena_bytes(DeviceType device) const;

  struct Impl;
  explicit ExecutionContext(std::unique_ptr<Impl> impl);
  ~ExecutionContext();

 private:
  std::unique_ptr<Impl> impl_;
};

// ---- Model inspection (what `kiln info` prints)
struct ModelSummary {
  std::string path, producer, graph_name;
  int64_t ir_version = 0;
  std::map<std::string, int> opsets;
  std::vector<TensorInfo> inputs, outputs;
  std::map<std::string, int> op_histogram;   // "Conv" → count (domain-qualified when not ai.onnx)
  int64_t num_parameters = 0;                 // elements in initializers
  int64_t parameter_bytes = 0;
  int num_nodes = 0;
  // Nodes kiln cannot run on the CPU: "node 'x' (Foo): reason".
  std::vector<std::string> unsupported;
};
Expected<ModelSummary> summarize_model(const std::string& onnx_path);

// ---- What this kiln can run (for the operator support table and tooling)
struct KernelInfo {
  std::string op, domain, name;    // domain "" = ai.onnx
  std::string device;              // "cpu" or "cuda"
  int since = 0, until = 0;        // opset range
  std::string how;                 // "native" or "function" (from the op table), "" if not declared there
  std::vector<DataType> dtypes;    // element types its first input accepts (probed through its checks)
};
std::vector<KernelInfo> list_kernels();
// An op kiln runs by rewriting it into other ops before it optimizes (ONNX Runtime's contrib ops,
// domain com.microsoft: the pass lower-contrib-ops), on every device that runs those ops.
struct LoweredOpInfo {
  std::string op, domain;  // domain "" = ai.onnx
  int since = 1;           // the oldest opset of its domain kiln accepts
};
std::vector<LoweredOpInfo> list_lowered_ops();
// ---- Optimizer report (what `kiln inspect` prints)
struct OptimizationReport {
  int opt_level = 0;
  int nodes_before = 0, nodes_after = 0;
  std::map<std::string, int> ops_before, ops_after;   // op histograms (domain-qualified when not ai.onnx)
  std::vector<std::pair<std::string, int>> passes;    // every pass that ran at this level, in pipeline order, with its rewrites
  std::vector<std::string> rewrites;                  // one line per rewrite
  std::vector<std::string> near_misses;               // patterns that matched partly, and why they did not fire
  // The stages a build runs after the pipeline for its device and precision (name, what it does); like
  // the passes, each is skipped by BuildOptions::disabled_passes.
  std::vector<std::pair<std::string, std::string>> target_stages;
};
// Imports the model and runs the optimizer at `opt_level` (no lowering, no kernels created).
Expected<OptimizationReport> inspect_model(const std::string& onnx_path, int opt_level);

// ---- Device memory for inputs and outputs that stay on the device (ExecutionContext::run_into)
// A tensor of `dtype` and `shape` on `device`, allocated through kiln's backend for it (freed with
// its last copy). Uninitialized. kUnsupported when the device is not usable here.
Expected<Tensor> allocate_tensor(DataType dtype, const Shape& shape, Device device);
// Copies `src` into `dst` (same dtype and size; host or device on either side) and waits for it.
Status transfer(const Tensor& src, Tensor& dst);

// ---- Plugins: custom ops in shared libraries written against include/kiln/plugin.h (docs/plugins.md)
struct PluginInfo {
  std::string library;            // the file name ("libkiln_example_plugin.so"), as engine files record it
  std::string path;               // what was opened
  std::string name, version;      // as the plugin names itself
  std::vector<std::string> ops;   // "domain.OpType" per op it declared
};
// Loads a plugin library into the process (once: loading it again returns the first load's info) and
// registers its ops with the importer, shape inference, the builder and the CPU backend. `library` is
// a path, or a bare file name looked up in the folders of KILN_PLUGIN_PATH (':'-separated) and then by
// the dynamic loader. Refused, with a message naming the library: a file that is not a kiln plugin (an
// ONNX Runtime custom-op library among them), one built for another plugin ABI version
// (kEngineMismatch), an invalid declaration, an op another plugin provides, and an op built into kiln
// unless `allow_override`. Libraries are never unloaded. Load plugins before building or loading
// engines on other threads.
Expected<PluginInfo> load_plugin(const std::string& library, bool allow_override = false);
std::vector<PluginInfo> loaded_plugins();

// ---- Logging
// The severity below which kiln's log messages are dropped, numbered as ONNX Runtime numbers them:
// 0 verbose, 1 info, 2 warning (the default; also KILN_LOG_LEVEL), 3 error, 4 fatal. Process-wide.
void set_logger_severity(int severity);

// ---- Timing caches (BuildOptions::timing_cache)
// Merges timing caches written on one device by one kiln version into `out` (for each layer and
// tactic the fastest time measured); refuses files that are corrupt or from different devices.
Status merge_timing_caches(const std::vector<std::string>& inputs, const std::string& out);
// A description of a timing cache: its device line and layer count (what `kiln cache info` prints).
Expected<std::string> describe_timing_cache(const std::string& path);

// Seeds the random ops that have no `seed` attribute (RandomNormal, RandomUniform and their *Like
// forms, Bernoulli, Multinomial, Dropout in training mode), process-wide, as ONNX Runtime's set_seed.
// By default each run of such an op draws from a fresh seed (std::random_device); after
// set_random_seed(n) each such draw takes the next seed of one sequence started from n, so the same
// runs made in the same order after set_random_seed(n) draw the same numbers (runs on several threads
// at once take the sequence's seeds in whichever order they reach them). Ops with a `seed` attribute
// always draw from it. Thread-safe.
void set_random_seed(uint64_t seed);

// Reads/writes .npy files (used by the CLI; exposed because it is handy).
Expected<Tensor> read_npy(const std::string& path);
Status write_npy(const std::string& path, const Tensor& t);
// Reads a file holding one serialized onnx TensorProto (onnx's test data: input_0.pb, output_0.pb);
// `name` (optional) receives the tensor's name. External data resolves inside the file's folder.
Expected<Tensor> read_tensor_proto(const std::string& path, std::string* name = nullptr);

}  // namespace kiln
