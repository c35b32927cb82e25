// runtime/eager.h — run one node on the CPU outside any plan (constant folding, unit tests).
#pragma once

#include <vector>

#include "backends/kernel.h"

namespace kiln {

// Creates the node's CPU kernel and runs it once on `inputs` (one per node input; Kind::kNone for
// omitted ones). Subgraph attributes are compiled through `subgraphs` when given.
Expected<std::vector<Slot>> run_node_eager(const ir::Node& node, const std::vector<Slot>& inputs,
                                           SubgraphRunner* subgraphs = nullptr);

}  // namespace kiln
