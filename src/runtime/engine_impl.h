// runtime/engine_impl.h — what an Engine holds (shared by the runtime and the engine-file code).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "engine/engine_file.h"
#include "ir/graph.h"
#include "kiln/kiln.h"
#include "plan/plan.h"

namespace kiln {

struct Engine::Impl {
  std::shared_ptr<ir::Graph> graph;   // optimized graph the plan was lowered from
  std::shared_ptr<CompiledGraph> plan;
  BuildOptions options;
  std::vector<TensorInfo> inputs, outputs;
  std::map<std::string, std::string> meta;  // kiln_version, device, fingerprint, model_hash, ...
};

namespace passes { struct PassOptions; }
class Backend;
// The optimizer's options for building an engine for `target` (null: no device restriction): the
// CPU evaluator for constant folding, and fusions only into ops `target` has kernels for.
passes::PassOptions builder_pass_options(int opt_level, const KernelRegistry* target);

// Fills inputs/outputs/meta from graph and plan.
void describe_engine(Engine::Impl& impl, const std::string& model_hash);
TensorInfo tensor_info(const ir::Value& v);

// The engine file (engine/engine_file.h) holds graph, plan, meta and profiles; these convert between
// it and an Engine. Loading checks the profiles against the graph and describes the engine's I/O.
Expected<std::string> serialize_engine(const Engine::Impl& impl);
Expected<std::unique_ptr<Engine::Impl>> deserialize_engine(std::shared_ptr<Storage> file);

// Shape profiles (BuildOptions::profiles; at most kMaxProfiles, engine/engine_file.h).
// Every profile names graph inputs, with min <= opt <= max of the input's rank, agreeing with its
// static dims; kInvalidArgument naming the profile and input otherwise.
Status validate_profiles(const ir::Graph& g, const std::vector<ShapeProfile>& profiles);
// "" when a candidate tactic's outputs `got` match the kernel's own choice's `want` (float outputs:
// relative L2 within `tol`; E4M3 within 3e-2; int8/uint8 within one step in at most 1% of the
// elements; other types bit for bit), else why not (runtime/tuner.cpp).
std::string tactic_outputs_mismatch(const std::vector<Tensor>& want, const std::vector<Tensor>& got, double tol);
// An engine of `g` as it is (opt level 0, untuned) on `device`: what an INT8/FP8 build's calibration
// (the float32 reference, on the CPU) and its quantized candidates run.
Expected<std::shared_ptr<Engine>> build_graph_as_is(std::unique_ptr<ir::Graph> g, DeviceType device);
// Auto-tuning (runtime/tuner.cpp): per shape profile, times the candidate tactics of every step that
// offers several on the engine's device at the profile's opt shapes and records the fastest valid one
// in the plan. `progress` (may be null) hears each layer as it is tuned: done, total, layer.
Status tune_engine(Engine::Impl& impl, const BuildOptions& options,
                   const std::function<void(int, int, const std::string&)>& progress);
// The first profile whose ranges hold the shapes of `inputs` (indexed like g.inputs; null: absent),
// or an error naming the first input outside every profile, its shape and the ranges. 0 when there
// are no profiles.
Expected<int> choose_profile(const ir::Graph& g, const std::vector<ShapeProfile>& profiles, Slot* const* inputs);

}  // namespace kiln
