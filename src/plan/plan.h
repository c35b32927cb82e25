// plan/plan.h — a lowered graph: a flat list of steps over numbered values, with memory planned.
//
// The plan is data: the runtime walks `steps` in order and never re-derives a decision made here.
// Values live either at a fixed offset of a per-context arena on their device (static size, known
// lifetime) or, when their size is only known at run time, in memory allocated as they are produced.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ir/graph.h"
#include "kiln/kiln.h"

namespace kiln {

struct PlannedValue {
  std::string name;
  ir::Type type;
  Device device;           // where the value lives
  int64_t offset = -1;     // arena offset on `device`, or -1: allocated when produced
  size_t bytes = 0;        // planned size when offset >= 0
  bool is_constant = false;
  Slot constant;           // the constant, already on `device`
  int copy_of = -1;        // a device copy of value `copy_of` (its host original, for shape planning)
};

// One step of the plan, as data: which node (an index into CompiledGraph::nodes), which kernel row on
// which device, the tuner's tactics, and buffer ids. No pointers to live objects: the kernels a plan
// runs are instantiated from these rows (instantiate_kernels), the same way after lowering and after
// loading an engine file, and held beside the steps (CompiledGraph::kernels).
struct Step {
  enum class Kind { kKernel, kCopy };
  Kind kind = Kind::kKernel;
  int node = -1;                   // kKernel: index into CompiledGraph::nodes
  std::string kernel_name;         // registry name, or "copy.h2d" / "copy.d2h"
  DeviceType device = DeviceType::kCPU;  // the backend that runs it (a copy: the device side's)
  // Per shape profile: the tactic the tuner chose (ReshapeContext::tactic) and its measured time in
  // milliseconds (0: not measured — from a timing cache, or not tuned). Empty: the kernel's own choice.
  std::vector<std::string> tactics;
  std::vector<double> tactic_ms;
  const std::string& tactic(int profile) const {
    static const std::string kNone;
    return profile >= 0 && static_cast<size_t>(profile) < tactics.size() ? tactics[profile] : kNone;
  }
  std::vector<int> in, out;        // value indices (-1: omitted)
  std::vector<int> implicit_in;    // values read by the node's subgraphs (outer-scope captures)
  std::vector<int> release;        // values whose last reader is this step
  bool data_dependent = false;     // output sizes depend on input values: never planned ahead
  bool sync_after = false;         // kCopy to the host that a later host step reads: wait for it
  uint32_t host_inputs = 0;        // KernelDef::host_inputs of the kernel (inputs kept in host memory)
  bool host_input(size_t i) const { return i < 32 && ((host_inputs >> i) & 1u); }
  std::string why_host;            // why a node of a GPU build runs on the CPU (placement's reason)
};

struct CompiledGraph {
  std::shared_ptr<ir::Graph> graph;    // keeps nodes and constants alive
  std::vector<const ir::Node*> nodes;  // graph->nodes() in order: what Step::node indexes
  std::vector<PlannedValue> values;
  std::vector<Step> steps;
  std::vector<int> inputs, outputs;    // value indices
  std::vector<int> captures;           // values bound by name from the enclosing frame
  std::map<std::string, int> by_name;  // graph value name → index (host-side value)
  std::vector<int> first_def, last_use; // per value: the step that makes it / the last that reads it (-1: none)
  // The build-time plan of values whose shapes are static (frames run without a shape plan use it;
  // execution contexts plan every signature themselves, runtime/shape_plan.h).
  size_t arena_bytes[2] = {0, 0};      // per DeviceType
  bool use_arena = false;              // only the top-level graph plans an arena

  // Live objects made from the data above by instantiate_kernels (never stored in an engine file):
  // per step its kernel (null for copies), and per DeviceType its backend (null: no step there).
  std::vector<KernelPtr> kernels;
  Backend* backends[2] = {nullptr, nullptr};

  const ir::Node& node(const Step& s) const { return *nodes[static_cast<size_t>(s.node)]; }
  Backend& backend(const Step& s) const { return *backends[static_cast<int>(s.device)]; }
  Kernel& kernel(size_t step) const { return *kernels[step]; }
};

// Creates the kernel of every kernel step from its row (Step::kernel_name on Step::device) and the
// node it runs, and binds each device's backend. Lowering and engine loading both end here, so a plan
// read from a file runs exactly as the plan lowering made. A row that is missing, for another op, or
// that rejects its node is an error naming the node (kEngineMismatch for a missing row: the file was
// written by a kiln with other kernels).
Status instantiate_kernels(CompiledGraph& cg, SubgraphRunner* subgraphs);
// The kernel row step `s` names on `backend`, checked against the node it runs: kEngineMismatch when
// this kiln has no such row, InvalidModel when the row is another op's or does not accept the node.
Expected<const KernelDef*> step_kernel_row(Backend& backend, const Step& s, const ir::Node& n);

// Lifetimes as the steps imply them: per value the first step that makes it and the last that reads
// it (-1: none); per step the values whose life ends there (every value but constants, graph outputs
// and captures: after its last reader, or after the step that made it when nobody reads it). Lowering
// records them; loading an engine file checks the file's against them.
struct Lifetimes {
  std::vector<int> first_def, last_use;
  std::vector<std::vector<int>> release;
};
Lifetimes derive_lifetimes(const CompiledGraph& cg);

struct LowerOptions {
  DeviceType device = DeviceType::kCPU;
  bool verbose = false;
  bool plan_memory = true;
};

// Partitions nodes to backends (preferred device first, CPU fallback), creates kernels, inserts
// copies between devices, and plans memory. Every node without a kernel anywhere is reported in one
// error listing them all.
Expected<std::shared_ptr<CompiledGraph>> lower(std::shared_ptr<ir::Graph> graph, const LowerOptions& options);

// Where lower() would place each node of an optimized graph, and why a node stays on the CPU, without
// creating kernels or touching a device: CUDA placement is planned from the kernel rows alone, so it
// works on a machine without a GPU (and in CI). `device` empty: no kernel anywhere (`why` says why).
Expected<std::vector<PlacementEntry>> preview_placement(const ir::Graph& graph, DeviceType device);

// How many graphs lower() has lowered in this process (tests check that loading an engine lowers none).
uint64_t lowering_count();

// Lowers subgraph bodies (If/Loop/Scan) for the CPU when their kernels are created.
std::unique_ptr<SubgraphRunner> make_subgraph_compiler();

// A human-readable line per step: "[cuda] conv1 (Conv) → cuda.Conv.f32.cudnn".
// One line per step (device, node, op, kernel, tactics, why on the host); `annotate`, when given,
// adds text to step i's line (the engine adds output dtypes and shapes from a shape plan).
std::string describe_plan(const CompiledGraph& plan, const std::function<std::string(int)>& annotate = {});

}  // namespace kiln
