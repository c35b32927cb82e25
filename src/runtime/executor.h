// runtime/executor.h — walks a CompiledGraph's steps over a frame of value slots, and the per-shape
// plans that let an execution context run a seen input-shape signature without allocating.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/kiln.h"
#include "plan/plan.h"

namespace kiln {

struct Frame;

// How Frame::run_tactic times a tactic.
struct TacticTiming {
  int warmup = 1, iters = 1, samples = 0;
  // Time replays of a CUDA graph holding the `iters` runs (how an engine's GPU steps run): launch
  // overhead as replayed, and a tactic whose calls cannot be captured fails (it would stop the
  // engine's graphs). Ignored on devices without graphs.
  bool graph = false;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Called after each timed sample with its ms per run (may be empty): false ends the sampling, so
  // the tuner's policy (tune/tuning_policy.h) decides how many samples a candidate needs.
  std::function<bool(double ms)> more;
};

// Opt-in timing (environment KILN_PROFILE=1): wall time of each top-level step, summed per op type,
// printed to stderr as a table when the context goes away. Steps of subgraphs count under their
// If/Loop/Scan. Times are host wall times: on CUDA they measure launches, not the GPU's work.
struct OpProfile {
  struct Entry {
    int64_t calls = 0;
    double seconds = 0;
  };
  std::map<std::string, Entry> by_op;
  int64_t runs = 0;

  static bool enabled();  // KILN_PROFILE is set and not "0"
  void print() const;
  ~OpProfile() { print(); }
};

// Per-step trace of a context's runs (ExecutionContext::set_profiling).
struct StepTrace {
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  int64_t runs = 0;
  std::vector<ProfileEvent> events;
};

// Per-ExecutionContext resources: device states and arenas.
struct ContextResources {
  std::shared_ptr<void> state[2];            // per DeviceType (CPU: null)
  // Per DeviceType. Frames without a shape plan use it at the build-time offsets; shape plans grow
  // it to the largest signature seen (`generation` counts the reallocations).
  std::shared_ptr<Storage> arena[2];
  uint64_t generation = 0;
  std::unique_ptr<OpProfile> profile;        // set when OpProfile::enabled()
  std::unique_ptr<StepTrace> trace;          // set while profiling (ExecutionContext::set_profiling)
  // Stopping a run: ExecutionContext::terminate() (any thread) or the run's deadline. Checked before
  // every step at every depth (a Loop's body included), so a run with an enormous trip count ends.
  std::atomic<bool> terminate{false};
  const std::atomic<bool>* stop = nullptr;  // the caller's own request (ExecutionContext::set_stop_flag)
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // CUDA graphs (ExecutionContext::set_cuda_graphs; environment KILN_CUDA_GRAPHS=0 turns the default
  // off): a ready plan's runs of GPU steps are captured once and replayed. Never with profiling on.
  bool cuda_graphs = true;
  // Build-time tuning (tune/tuner.cpp): called in a tuning context before each planned kernel step
  // runs, its inputs bound and its outputs planned; it may run the step's kernel with other tactics
  // (Frame::run_tactic) before the step runs as planned.
  std::function<Status(Frame&, int)> before_step;
  void* state_for(Device d) const { return state[static_cast<int>(d.type)].get(); }
  Status check_stop() const;
};

// The plan of one input-shape signature of one context: every value's shape and arena offset, every
// step's workspace and reshape state, and the value slots themselves, which keep their arena views
// from run to run. Made the first time a context sees the signature:
//  * from the kernels' reshape() and the ops' shape functions, host only (`ready` at once), or,
//    when some shape can only be known by running (a Reshape whose target is computed),
//  * from the sizes the first run produced (`ready` after it).
// A kernel that produces a size other than planned still gets memory (correctness never depends on
// the plan); the plan learns the new size and is re-planned after that run.
struct ShapePlan {
  std::vector<int64_t> key;                 // the signature (see signature_key)
  int profile = 0;                          // the shape profile whose tactics its steps run
  bool ready = false;                       // offsets are final: runs allocate nothing
  bool dirty = false;                       // a run produced other sizes than planned: re-plan
  std::vector<char> known;                  // per value: dtype/shape below are known
  std::vector<char> dyn;                    // per value: made by (or from) a data-dependent step
  std::vector<Tensor> value;                // per value: host value of a shape value (see eval_shape_value)
  std::vector<DataType> dtype;
  std::vector<Shape> shape;
  std::vector<int64_t> offset;              // per value: arena offset on its device, -1: allocated when made
  std::vector<size_t> bytes;                // per value: bytes when known
  std::vector<char> reshaped;               // per step: reshape() ran (state, workspace valid)
  std::vector<char> volatile_step;          // per step: its input shapes vary within the signature
  std::vector<std::shared_ptr<void>> step_state;
  std::vector<size_t> ws_bytes;             // per step
  std::vector<int> share_in;                // per step: ReshapeContext::share_input (-1: none)
  std::vector<std::string> planned_tactic;  // per step: ReshapeContext::planned_tactic when make_shape_plan reshaped it
  std::vector<int64_t> ws_offset;           // per step: arena offset of its workspace, -1: none/allocated
  std::vector<std::shared_ptr<Storage>> ws_tmp;  // per step: workspace of a run before the plan was ready
  size_t arena_bytes[2] = {0, 0};
  uint64_t views_generation = ~uint64_t{0};  // arena generation the views in `slots` were made for
  std::vector<Slot> slots;                  // persistent slots (planned values hold arena views)
  std::vector<Slot*> at;                    // per value: where it lives this run
  // Outputs written in place (ExecutionContext::run_into with device buffers): per engine output
  // (CompiledGraph::outputs order) the GPU value its copy step reads when the step making that value
  // may write it straight into the caller's buffer, the copy then skipped; -1 where it may not
  // (finalize_shape_plan decides: see direct_output_value). `direct` marks those values per value:
  // the steps making them stay out of CUDA graphs, whose captured pointers could not follow the
  // caller's buffer from run to run.
  std::vector<int> direct_out;
  std::vector<char> direct;

  // CUDA graphs of this signature: maximal runs of steps [first, last] made of GPU steps whose
  // shapes, workspaces and memory are fixed by the plan (and host steps that need no GPU result),
  // recorded once and replayed with one launch. Found on the second run of a ready plan (every step
  // has been reshaped by then); captured on first use; dropped when the arena or the plan changes.
  struct GraphSegment {
    int first = 0, last = 0;
    std::shared_ptr<void> exec;             // the instantiated graph (null: not captured yet)
  };
  std::vector<GraphSegment> graphs;
  uint64_t graphs_generation = ~uint64_t{0};  // arena generation the graphs were captured for
  int clean_runs = 0;                       // runs since the plan became ready that needed no re-plan
  bool graphs_off = false;                  // a capture failed: this plan runs step by step

  // Records value v's dtype and shape (and so its bytes) as known.
  void learn(int v, DataType dt, const Shape& s) {
    known[v] = 1;
    dtype[v] = dt;
    shape[v] = s;
    bytes[v] = shape_nbytes(dt, s);  // SIZE_MAX when it overflows: refused before the arena is planned
  }
};

// The signature of a set of top-level inputs: kind, dtype and dims of each, written into `key`
// (its capacity is reused, so a seen signature costs no allocation).
void signature_key(const CompiledGraph& g, Slot* const* inputs, std::vector<int64_t>& key);

// Makes the plan for the signature of `inputs` (indexed like g.inputs): shapes from the kernels'
// reshape() and the ops' shape functions; offsets when every size is known.
std::unique_ptr<ShapePlan> make_shape_plan(const CompiledGraph& g, Slot* const* inputs, ContextResources& res,
                                           int profile = 0);

// What kernel step si's reshape() sees, filled into `rc` (its node set): the step's tactic for the
// plan's profile, input dtypes, shapes and the values a plan may depend on (constants, shape values,
// host inputs of a step re-planned every run), outputs sized, the device state. With a `frame`, for
// the inputs it holds now; without, for the shapes the plan knows (kUnsupported where one is not).
// The planner and the tuner (tune/tuner.cpp) both use it, so tactics() sees what reshape() sees.
Status fill_reshape_context(const CompiledGraph& g, const ShapePlan& plan, int si, const Frame* frame,
                            const ContextResources& res, ReshapeContext& rc);

// Computes offsets from the plan's known sizes and marks it ready.
void finalize_shape_plan(const CompiledGraph& g, ShapePlan& plan);

// The values of one execution of a graph. Subgraph frames point to their enclosing frame.
struct Frame {
  const CompiledGraph& graph;
  std::vector<Slot> slots;        // own slots (frames without a shape plan)
  Slot* const* at = nullptr;      // per value: where it lives (own slots, or the shape plan's)
  const Frame* parent = nullptr;
  ContextResources& res;
  ShapePlan* plan = nullptr;      // top-level frames of execution contexts

  Frame(const CompiledGraph& g, ContextResources& r, const Frame* p);
  // A frame over a shape plan: values live where plan.at says.
  Frame(const CompiledGraph& g, ContextResources& r, ShapePlan& plan);
  // Binds captures by name from enclosing frames; fails naming a capture found nowhere.
  Status bind_captures();
  Status execute();
  const Slot* lookup(const std::string& name) const;
  Slot& value(int v) { return *at[v]; }
  // Output memory for value v made on `backend`'s device: the slot's tensor when it already has this
  // dtype and shape (a planned arena view, a caller's buffer), else planned or fresh memory.
  Tensor& make_output(int v, Backend& backend, DataType dtype, const Shape& shape);
  // Build-time tuning: plans kernel step si with `tactic` for the inputs at hand (a workspace of its
  // own), runs it `how.warmup` times, then, with `sample_ms`, `how.samples` timed batches of
  // `how.iters` runs (host clock around device synchronization; ms per run appended; with
  // `how.graph`, replays of one captured graph of the `iters` runs), stopping early past
  // `how.deadline`. The step's outputs hold the tactic's result when it returns.
  Status run_tactic(int si, const std::string& tactic, const TacticTiming& how, std::vector<double>* sample_ms);
  // run_tactic's copies of inputs that a step's output overwrites in place (by value): each tactic
  // starts from the input as it was before the step first ran.
  std::unordered_map<int, Tensor> tuning_inputs;

 private:
  Status run_step(int si, OpProfile* profile);
  // Appends step si's event (profiling): names, shapes of its values as they are now, its time.
  void trace_step(int si, std::chrono::steady_clock::time_point start);
  // Drops the values whose last reader is `s` (planned values keep their arena views).
  void release_after(const Step& s);
  // Runs the steps of a graph segment: replays its graph, capturing it first if needed (a capture
  // that fails turns graphs off for the plan and runs the steps one by one).
  Status run_segment(ShapePlan::GraphSegment& seg);
  void find_graph_segments();
  std::vector<Slot*> own_at_;
};

// Makes sure the arena holds what `plan` needs and that its slots hold views of the current arena.
Status bind_shape_plan(const CompiledGraph& g, ShapePlan& plan, ContextResources& res);

}  // namespace kiln
