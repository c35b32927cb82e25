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
  // The engine file this engine was read from (deserialize_engine; null for one assembled in memory):
  // save and serialize write these bytes while they are intact instead of serializing again.
  std::shared_ptr<const Storage> file;
};

// Fills inputs/outputs/meta from graph and plan.
void describe_engine(Engine::Impl& impl, const std::string& model_hash);
TensorInfo tensor_info(const ir::Value& v);

// The engine file (engine/engine_file.h) holds graph, plan, meta and profiles; these convert between
// it and an Engine. Loading checks the profiles against the graph and describes the engine's I/O.
EngineFile engine_file_of(const Engine::Impl& impl);
// The engine file's bytes: the file it was read from when that is intact, else written anew.
Expected<std::string> serialize_engine(const Engine::Impl& impl);
// The one EngineFile → Engine path for an engine made in this process (a build, a rebuild): `file` is
// written and read back as Engine::load reads a saved one, so a built engine is a loaded engine and
// the two cannot differ (builder/builder.cpp ends every build here). Saving it writes the bytes it
// was read from.
Expected<std::shared_ptr<Engine>> engine_from_file(EngineFile file);
// With `for_rebuild`, an engine of another machine of this device kind reads without its plan
// (plan null; meta "foreign" says what differs; engine/engine_file.h).
Expected<std::unique_ptr<Engine::Impl>> deserialize_engine(std::shared_ptr<Storage> file, bool for_rebuild = false);
// An engine file mapped copy-on-write (a regular file only).
Expected<std::shared_ptr<Storage>> map_engine_file(const std::string& path);

// Shape profiles (BuildOptions::profiles; at most kMaxProfiles, engine/engine_file.h).
// Every profile names graph inputs, with min <= opt <= max of the input's rank, agreeing with its
// static dims; kInvalidArgument naming the profile and input otherwise.
Status validate_profiles(const ir::Graph& g, const std::vector<ShapeProfile>& profiles);
// The first profile whose ranges hold the shapes of `inputs` (indexed like g.inputs; null: absent),
// or an error naming the first input outside every profile, its shape and the ranges. 0 when there
// are no profiles.
Expected<int> choose_profile(const ir::Graph& g, const std::vector<ShapeProfile>& profiles, Slot* const* inputs);

}  // namespace kiln
