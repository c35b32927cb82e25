// builder/build.h — what the build stages share (builder/builder.cpp, builder/inspect.cpp): the optimizer's
// options for a target, and an engine of a graph as it is.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "kiln/kiln.h"
#include "passes/passes.h"

namespace kiln {

class KernelRegistry;

// The optimizer's options for building an engine for `target` (null: no device restriction): the
// CPU evaluator for constant folding, and fusions only into ops `target` has kernels for.
passes::PassOptions builder_pass_options(int opt_level, const KernelRegistry* target);

// The names --disable-pass takes beyond the optimizer's passes (builder/target_pipeline.h's stages and
// switches of every device), with what each does.
const std::vector<std::pair<std::string, std::string>>& target_stages();

// An engine of `g` as it is (opt level 0, untuned) on `device`: what an INT8/FP8 build's calibration
// (the float32 reference, on the CPU) and its quantized candidates run.
Expected<std::shared_ptr<Engine>> build_graph_as_is(std::unique_ptr<ir::Graph> g, DeviceType device);

}  // namespace kiln
