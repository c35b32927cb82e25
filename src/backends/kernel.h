// backends/kernel.h — what a kernel sees, and how backends register kernels as data.
//
// A kernel is created once per node at build/load time ("prepare": parse attributes, pack weights,
// pick a tactic) and then run many times, possibly from several ExecutionContexts at once: `run`
// must not modify the kernel's own state.
//
// Rules for kernels:
//  * outputs are always written through ctx.output()/ctx.output_slot(); never alias an input
//    tensor as an output (the memory planner reuses input memory once its last reader ran);
//  * tensors stored into sequences/optionals must be owned copies (ctx.owned_copy());
//  * user-caused problems (bad input shapes or values) return a Status naming the node;
//    kernels never log and never abort.
#pragma once

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
  Status error(const std::string& what) const { return invalid_argument(node().describe() + ": " + what); }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
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
};

class KernelRegistry {
 public:
  void add(KernelDef def);
  // The first kernel that accepts the node; `why` gets the reasons of those that did not.
  const KernelDef* find(const ir::Node& node, std::string* why = nullptr) const;
  const KernelDef* by_name(const std::string& name) const;
  const std::vector<KernelDef>& all() const { return defs_; }
 private:
  std::vector<KernelDef> defs_;
};

// Helpers for dtype constraints in `check`.
std::string require_dtypes(const ir::Node& n, int input, std::initializer_list<DataType> allowed);

}  // namespace kiln
