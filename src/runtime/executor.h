// runtime/executor.h — walks a CompiledGraph's steps over a frame of value slots.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace kiln {

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

// Per-ExecutionContext resources: device states and arenas.
struct ContextResources {
  std::shared_ptr<void> state[2];            // per DeviceType (CPU: null)
  std::shared_ptr<Storage> arena[2];         // per DeviceType, sized from the plan
  std::unique_ptr<OpProfile> profile;        // set when OpProfile::enabled()
  void* state_for(Device d) const { return state[static_cast<int>(d.type)].get(); }
};

// The values of one execution of a graph. Subgraph frames point to their enclosing frame.
struct Frame {
  const CompiledGraph& graph;
  std::vector<Slot> slots;
  const Frame* parent = nullptr;
  ContextResources& res;

  Frame(const CompiledGraph& g, ContextResources& r, const Frame* p);
  // Binds captures by name from enclosing frames; fails naming a capture found nowhere.
  Status bind_captures();
  Status execute();
  const Slot* lookup(const std::string& name) const;
};

}  // namespace kiln
