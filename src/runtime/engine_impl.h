// runtime/engine_impl.h — what an Engine holds (shared by the runtime and the engine-file code).
#pragma once

#include <map>
#include <memory>
#include <string>

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

// Fills inputs/outputs/meta from graph and plan.
void describe_engine(Engine::Impl& impl, const std::string& model_hash);
TensorInfo tensor_info(const ir::Value& v);

// The engine-file format (src/engine/).
constexpr uint32_t kEngineFormatVersion = 1;
Expected<std::string> serialize_engine(const Engine::Impl& impl);
// Parses and verifies an engine file, checks the device fingerprint, and rebuilds the plan using
// the kernel choices it records.
Expected<std::unique_ptr<Engine::Impl>> deserialize_engine(const std::string& bytes);
bool looks_like_engine(const std::string& head);

}  // namespace kiln
