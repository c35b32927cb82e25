// backends/kernel.h — the kernel contract: what a kernel sees, and how backends register kernels as data.
//
// A kernel goes through four phases (docs/ARCHITECTURE.md, "The kernel contract"):
//   tactics()  — host only, per input-shape signature: the candidate implementations it offers for
//                those shapes (most offer none: one way to run); the builder's tuner times them and
//                the plan records the fastest per shape profile (Step::tactics);
//   prepare    — its factory (KernelDef::create): once per engine, parses the node's parameters,
//                packs/converts weights, creates library handles; the kernel object is immutable after;
//   reshape()  — host only, once per input-shape signature of a context: output shapes, workspace
//                bytes, and per-shape state (descriptors, geometry) that run() reads back;
//   run()      — pointers in, work launched: writes its planned outputs, uses its planned workspace,
//                allocates nothing, synchronizes nothing, decides nothing.
// A kernel that does not override reshape() is planned from its op's shape function (ops/); the
// first run of a new signature then records the sizes it really produced. Kernels of ops whose
// output size depends on input values (KernelDef::data_dependent) always allocate as they run.
//
// A kernel may run from several ExecutionContexts at once: `run` and `reshape` must not modify the
// kernel's own state (per-shape state goes into ReshapeContext::state).
//
// Rules for kernels:
//  * outputs are always written through ctx.output()/ctx.output_slot(); never alias an input
//    tensor as an output (the memory planner reuses input memory once its last reader ran; a kernel
//    that can work in place asks the planner through ReshapeContext::share_input instead);
//  * tensors stored into sequences/optionals must be owned copies (ctx.owned_copy());
//  * user-caused problems (bad input shapes or values) return a Status naming the node;
//    kernels never log and never abort.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/kiln.h"

namespace kiln {

// A runtime value (kiln::Value, public): a tensor, a sequence of tensors, or an empty optional.
using Slot = ::kiln::Value;

struct CompiledGraph;  // a lowered (sub)graph, owned by the runtime; opaque to kernels
class KernelContext;

// Services the runtime gives to kernels that hold subgraphs (If, Loop, Scan, SequenceMap).
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  // Build time: lower a subgraph attribute for this backend.
  virtual Expected<std::shared_ptr<CompiledGraph>> compile(const ir::Graph& body) = 0;
};

class KernelContext {
 public:
  virtual ~KernelContext() = default;
  virtual int num_inputs() const = 0;
  virtual int num_outputs() const = 0;
  // Input i is absent when the node omits it or an optional input holds nothing.
  virtual bool has_input(int i) const = 0;
  virtual const Slot& input_slot(int i) const = 0;
  const Tensor& input(int i) const { return input_slot(i).tensor; }
  virtual bool has_output(int i) const = 0;  // false when the node does not use output i
  // Allocates output i on the kernel's device (planned arena memory when the size matches).
  // The memory is NOT initialized: a kernel writes every element of its outputs.
  virtual Tensor& output(int i, DataType dtype, const Shape& shape) = 0;
  // Output i with the dtype and shape that reshape() gave it (no shape to build: allocation-free).
  virtual Tensor& output(int i) = 0;
  // The workspace reshape() asked for (ReshapeContext::workspace_bytes), on the kernel's device;
  // uninitialized, 256-byte aligned, valid until run() returns. Null when none was asked for.
  virtual void* workspace() = 0;
  // What reshape() stored in ReshapeContext::state for these input shapes (null if nothing).
  virtual const void* shape_state() const = 0;
  // For sequence/optional outputs.
  virtual Slot& output_slot(int i) = 0;
  // A copy of `t` with storage of its own, on the same device.
  virtual Tensor owned_copy(const Tensor& t) = 0;
  // Runs a compiled subgraph: `inputs` bind to the body's formal inputs in order; the body's
  // outputs come back in `outputs`. Outer-scope values resolve through this context.
  virtual Status run_subgraph(const CompiledGraph& body, std::vector<Slot> inputs, std::vector<Slot>& outputs) = 0;
  // Device-specific state for this context (CUDA: stream, library handles, workspace); null on CPU.
  virtual void* device_state() const = 0;
  // The node being run (for error messages).
  virtual const ir::Node& node() const = 0;
  // Why the run must stop now (ExecutionContext::terminate, the caller's stop flag, the run's deadline,
  // a build's time limit while folding constants), else Ok. The executor asks before every step; a
  // kernel whose work is bounded by an attribute or by input values rather than by its output's size
  // asks too, once per outer iteration (an atomic load and a clock read), and returns what it says.
  virtual Status check_stop() const { return Status::Ok(); }
  Status error(const std::string& what) const { return invalid_argument(node().describe() + ": " + what); }
};

// What reshape() sees and fills, for one input-shape signature.
struct ReshapeContext {
  struct In {
    bool present = false;
    DataType dtype = DataType::kUndefined;
    Shape shape;
    // Host value when known before running (constants, shape values, and host inputs of a step that is
    // planned as it runs), else null.
    const Tensor* value = nullptr;
  };
  const ir::Node& node;
  std::vector<In> in;
  std::vector<std::pair<DataType, Shape>> out;  // to fill: one per node output
  void* device_state = nullptr;                 // the context's device state (CUDA: stream, handles)
  size_t workspace_bytes = 0;                   // to fill: scratch memory run() needs
  std::shared_ptr<void> state;                  // to fill (optional): per-shape state for run()
  // The tactic to plan: one of the names tactics() offered for these shapes, chosen by the tuner or
  // recorded at build as the kernel's own choice; empty (or a name the kernel does not offer for these
  // shapes) means the kernel's own choice.
  std::string tactic;
  // To fill, by a kernel that offers tactics: the one reshape() planned (a name tactics() offers for
  // these shapes), whether asked for or its own choice. The build records an untuned step's own choice
  // from it (tune/tuner.h record_default_tactics), so a loaded engine plans that name and never decides
  // again; a kernel that leaves it empty keeps deciding when each shape is planned.
  std::string planned_tactic = {};
  // To fill (optional): the input whose memory output 0 may take when this step is that input's last
  // reader (the planner decides; the kernel must then work with Y and that input at one address, as
  // oneDNN's sum post-op does with the residual). -1: output 0 gets memory of its own.
  int share_input = -1;
  Status error(const std::string& what) const { return invalid_argument(node.describe() + ": " + what); }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Host only: the tactics reshape() accepts for these input shapes (ctx.in filled; nothing else read),
  // as short stable names ("algo1", "heur2", "im2col"). Fewer than two: nothing to tune. reshape()
  // names the one it planned in ReshapeContext::planned_tactic.
  virtual std::vector<std::string> tactics(const ReshapeContext& ctx) const;
  // True when the kernel implements reshape(); otherwise its op's shape function plans it.
  virtual bool has_reshape() const { return false; }
  // Host only (may call library planning functions, never launches work on the data).
  virtual Status reshape(ReshapeContext& ctx) const;
  virtual Status run(KernelContext& ctx) const = 0;
};
using KernelPtr = std::unique_ptr<Kernel>;

// A kernel that is one function object (capturing its parsed attributes).
class FnKernel final : public Kernel {
 public:
  explicit FnKernel(std::function<Status(KernelContext&)> fn) : fn_(std::move(fn)) {}
  Status run(KernelContext& ctx) const override { return fn_(ctx); }
 private:
  std::function<Status(KernelContext&)> fn_;
};
inline Expected<KernelPtr> make_kernel(std::function<Status(KernelContext&)> fn) {
  return KernelPtr(new FnKernel(std::move(fn)));
}

// Reshape results for contexts that run a kernel outside a plan (eager evaluation, tests, inner
// kernels of fused ops): prepare() calls the kernel's reshape() for the context's current inputs.
struct AdHocShapes {
  std::vector<std::pair<DataType, Shape>> out;
  std::shared_ptr<void> state;
  std::shared_ptr<Storage> workspace;
  int share_input = -1;  // what reshape() asked (ReshapeContext::share_input)
  // `alloc` makes workspace memory on the kernel's device.
  Status prepare(const Kernel& k, const KernelContext& ctx,
                 const std::function<Expected<std::shared_ptr<Storage>>(size_t)>& alloc, const std::string& tactic = {});
  void* workspace_ptr() const { return workspace ? workspace->data : nullptr; }
};

// What a kernel factory may use at creation time.
struct KernelInit {
  SubgraphRunner* subgraphs = nullptr;
  void* device_state = nullptr;  // backend-wide state (CUDA: a prepare stream and handles)
};

using KernelFactory = std::function<Expected<KernelPtr>(const ir::Node&, KernelInit&)>;

// One registry row: which nodes a kernel takes, and how to create it.
struct KernelDef {
  std::string op;
  std::string domain;   // "" = ai.onnx
  int since = 1;        // first opset version this kernel implements
  int until = 1 << 30;  // last opset version (inclusive)
  std::string name;     // unique, carries the variant: "cpu.Conv.f32.im2col"
  // Dtype/attribute constraints; null accepts every node. Returns why not, or "" when supported.
  std::function<std::string(const ir::Node&)> check;
  KernelFactory create;
  // Output sizes depend on input values (NonZero, Unique, control flow, sequences): never planned.
  bool data_dependent = false;
  // An 8-bit product row (kiln.QConv, kiln.QMatMul, kiln.F8MatMul) declares which float products it
  // runs once an 8-bit build quantizes them: their ops ("Conv"; "MatMul", "Gemm"), the 8-bit types it
  // computes them in (kInt8: int8/uint8 operands; kFloat8E4M3FN), and, where the device limits them,
  // which ones (`check`: a node of those ops with constant float32 weights, as the quantizer finds it;
  // "" when the row runs it quantized to `type`, else why not; null: every one). The 8-bit build
  // quantizes a product only when a row of the target takes it (builder/calibrate.cpp), so a device's
  // limits are written once, here. Empty `ops`: not an 8-bit product row.
  // `symmetric_input`: the row reads its 8-bit input with zero point 0 only (cuda.QConv pads with zeros,
  // which only zero point 0 makes exact); `int8_residual`: an Add of two of its products' outputs gets
  // its second input quantized too, so passes::fuse_qconv_residual can fold it in as an int8 residual.
  struct Quantizes {
    std::vector<std::string> ops;
    std::vector<DataType> types;
    std::function<std::string(const ir::Node& product, DataType type)> check;
    bool symmetric_input = false;
    bool int8_residual = false;
  };
  Quantizes quantizes = {};
  int priority = 0;               // among kernels that accept a node, the highest priority wins
  // Inputs the kernel reads on the host (bit i = input i): shape operands such as Reshape's shape or
  // Slice's starts. They stay in host memory whatever device runs the kernel; reshape() finds their
  // values in ReshapeContext::In::value whenever the plan knows them (constants and shape values), and
  // otherwise the step is re-planned on every run with the value in hand.
  uint32_t host_inputs = 0;
  // Inputs of which only the dtype and shape are read (Shape, Size): used where they live, never copied.
  uint32_t shape_inputs = 0;
  // Its float tensors may be float16/bfloat16 (math in float32 where it matters): reduced-precision
  // builds convert the nodes it takes (passes/precision.cpp).
  bool half_floats = false;
  // Why this machine cannot run the kernel (a CPU feature it needs), or "" when it can; null: any
  // machine with the backend. Unlike `check` it does not depend on the node: a pass does not produce
  // the op of a kernel that this machine cannot run (PassOptions::has_kernel asks it).
  std::function<std::string()> unavailable = {};
  bool host_input(int i) const { return i < 32 && ((host_inputs >> i) & 1u); }
  bool shape_input(int i) const { return i < 32 && ((shape_inputs >> i) & 1u); }
  // Why this kernel cannot run `node` (op, domain, opset range, `unavailable`, `check`), or "" when it can. Lowering
  // picks among the kernels that accept a node; an engine file's choice must be one of them.
  std::string rejects(const ir::Node& node) const;
};

class KernelRegistry {
 public:
  void add(KernelDef def);
  // The first kernel that accepts the node; `why` gets the reasons of those that did not.
  const KernelDef* find(const ir::Node& node, std::string* why = nullptr) const;
  const KernelDef* by_name(const std::string& name) const;
  const std::deque<KernelDef>& all() const { return defs_; }
 private:
  std::deque<KernelDef> defs_;  // rows keep their address as rows are added (plugins add them later)
};

// Helpers for dtype constraints in `check`.
std::string require_dtypes(const ir::Node& n, int input, std::initializer_list<DataType> allowed);

// The FP8 product rows' KernelDef::quantizes check (CPU and CUDA): a MatMul/Gemm whose constant
// weights have K and N positive and divisible by 16, as cuBLASLt's FP8 kernels need. The CPU's
// emulation takes the same products, so a CPU FP8 engine shows a CUDA one's accuracy.
std::string fp8_product_check(const ir::Node& product, DataType type);

}  // namespace kiln
