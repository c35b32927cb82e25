// passes/passes.h — graph rewrites, run by a pass manager to a fixed point.
//
// Every pass keeps the graph's meaning (outputs equal on every input) and returns whether it changed
// the graph. With `verbose`, each rewrite logs one line to stderr.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::passes {

struct PassOptions {
  int level = 1;          // 0: nothing; 1: folding and cleanup
  bool verbose = false;
  size_t fold_limit_bytes = 1 << 20;  // folded constants larger than this (and than their inputs) stay computed
};

struct PassContext {
  const PassOptions& options;
  std::map<std::string, int> fired;  // pass name → rewrites
  void log(const std::string& pass, const std::string& what);
};

struct Pass {
  std::string name;
  int min_level;
  std::function<Expected<bool>(ir::Graph&, PassContext&)> run;
};

const std::vector<Pass>& pipeline();
// Runs the pipeline to a fixed point (bounded), then re-infers types and verifies the graph.
Status optimize(ir::Graph& graph, const PassOptions& options, std::map<std::string, int>* fired = nullptr);

// Individual passes (one file each).
Expected<bool> fold_constants(ir::Graph& g, PassContext& ctx);
Expected<bool> eliminate_dead_code(ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
