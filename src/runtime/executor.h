// runtime/executor.h — walks a CompiledGraph's steps over a frame of value slots.
#pragma once

#include <memory>
#include <vector>

#include "plan/plan.h"

namespace kiln {

// Per-ExecutionContext resources: device states and arenas.
struct ContextResources {
  std::shared_ptr<void> state[2];            // per DeviceType (CPU: null)
  std::shared_ptr<Storage> arena[2];         // per DeviceType, sized from the plan
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
