// tune/tuner.h — auto-tuning (tune/tuner.cpp): the builder times each layer's candidate tactics.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/engine_impl.h"

namespace kiln {

// Auto-tuning: per shape profile, times the candidate tactics of every step that
// offers several on the engine's device at the profile's opt shapes and records the fastest valid one
// in the plan. `progress` (may be null) hears each layer as it is tuned: done, total, layer.
Status tune_engine(Engine::Impl& impl, const BuildOptions& options,
                   const std::function<void(int, int, const std::string&)>& progress);
// The tactic each kernel step plans as its own choice, recorded in the plan for every shape profile
// where no tactic is recorded (an untuned build, a layer the tuner left to the kernel): decided here at
// the profile's opt shapes, from what reshape() planned (ReshapeContext::planned_tactic), so a loaded
// engine plans that name whatever machine, library or kiln loads it. Steps whose shapes are known only
// by running, and kernels that do not name what they planned, keep deciding as each shape is planned.
Status record_default_tactics(Engine::Impl& impl);
// Whether graph input v, and the integers and bools computed from it, are only ever element data
// (arithmetic, comparisons, casts, Where, layout changes of its values, kiln's pointwise regions,
// attention masks; floats computed from it anywhere), never an index, shape, axis or count: the tuner
// then makes an integer or bool input of alternating ones and zeros (an attention mask hiding half the
// keys of each row, whichever way it is read) instead of zeros (tune/tuner.cpp).
bool tuning_input_is_element_data(const ir::Graph& g, const ir::Value* v);
// "" when a candidate tactic's outputs `got` match the kernel's own choice's `want` (float outputs:
// relative L2 within `tol`; E4M3 within 3e-2; int8/uint8 within one step in at most 1% of the
// elements; other types bit for bit), else why not (tune/tuner.cpp).
std::string tactic_outputs_mismatch(const std::vector<Tensor>& want, const std::vector<Tensor>& got, double tol);

}  // namespace kiln
