// A graph run node by node with the CPU kernels (run_node_eager), for tests that compare a rewritten
// graph with the graph it came from.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/eager.h"

namespace kiln::test {

// The graph's outputs by name, from `feeds` (its inputs by name). A node that fails adds a test failure
// naming it, and the result is then empty.
inline std::map<std::string, Tensor> run_graph_on_cpu(const ir::Graph& g, const std::map<std::string, Tensor>& feeds) {
  std::map<const ir::Value*, Slot> env;
  for (const ir::Value* v : g.inputs) env[v] = Slot::of(feeds.at(v->name));
  for (const ir::Node* n : g.nodes()) {
    std::vector<Slot> ins;
    for (const ir::Value* v : n->inputs) {
      if (!v) ins.emplace_back();
      else if (v->is_constant()) ins.push_back(Slot::of(*v->constant));
      else ins.push_back(env.at(v));
    }
    auto r = run_node_eager(*n, ins);
    EXPECT_TRUE(r.ok()) << n->describe() << ": " << r.status().to_string();
    if (!r.ok()) return {};
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (n->outputs[i]) env[n->outputs[i]] = (*r)[i];
  }
  std::map<std::string, Tensor> out;
  for (const ir::Value* v : g.outputs) out[v->name] = v->is_constant() ? *v->constant : env.at(v).tensor;
  return out;
}

}  // namespace kiln::test
