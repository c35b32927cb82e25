// runtime/eager.h — run one node on the CPU outside any plan (constant folding, unit tests).
#pragma once

#include <chrono>
#include <vector>

#include "backends/kernel.h"

namespace kiln {

// Creates the node's CPU kernel and runs it once on `inputs` (one per node input; Kind::kNone for
// omitted ones). Subgraph attributes are compiled through `subgraphs` when given. Past `deadline` the
// kernel's check_stop() says stop (a build's time limit while folding constants).
Expected<std::vector<Slot>> run_node_eager(
    const ir::Node& node, const std::vector<Slot>& inputs, SubgraphRunner* subgraphs = nullptr,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

}  // namespace kiln
