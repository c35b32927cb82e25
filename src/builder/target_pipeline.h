// builder/target_pipeline.h — the target stages: what a build runs after the optimizer's pipeline to
// fit the graph to its device and precision (half floats, channels-last chains, the 8-bit products'
// input and output types, TF32), declared as data: one ordered list of stages per device, each with
// its name, what it does, when it applies and what it runs. A build (builder/builder.cpp) runs the
// list for its device in one place, for a float build and for the 8-bit path's quantized graph alike;
// `kiln inspect` lists the stages; `--disable-pass NAME` turns off a stage (or one of its switches) by
// name. A new target stage is a row here, not a new hand-written sequence in the builder.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "kiln/kiln.h"

namespace kiln {

class KernelRegistry;
struct PrecisionRow;

// What a stage sees: the build's options (its precision is the graph's float precision: the rest of
// an 8-bit engine), the target's kernel rows, and what earlier stages did.
struct TargetContext {
  const BuildOptions& options;
  const KernelRegistry& target;
  bool quantized = false;  // the INT8 path's graph, after its Q/DQ fusion
  int channels_last_moved = -1;  // channels-last's conversions (-1: the stage did not run)

  bool enabled(const std::string& name) const;  // not in options.disabled_passes
  const PrecisionRow& precision() const;        // the row of the graph's float precision
  bool half_engine() const;                     // float16, bfloat16 or best: the graph goes half
};

struct TargetStage {
  std::string name;
  std::string what;  // one line: what it does (and on which device)
  // What --disable-pass NAME does to it: skips it; nothing (a stage that decides what the engine
  // computes: the half conversion, TF32); or what the stage itself does with it (documented in `what`).
  enum class Disable { kSkips, kNever, kStageDecides };
  Disable disable = Disable::kSkips;
  // Names of switches inside the stage that --disable-pass also accepts (name, what it turns off).
  std::vector<std::pair<std::string, std::string>> switches;
  std::function<bool(const ir::Graph&, const TargetContext&)> applies;
  std::function<Expected<int>(ir::Graph&, TargetContext&)> run;  // the number of rewrites
};

// The stages of `device`'s builds, in the order they run.
const std::vector<TargetStage>& target_pipeline(DeviceType device);

// Runs `device`'s stages that apply on `g` (each stage's rewrites logged at verbose level), then sorts
// the graph.
Status run_target_pipeline(ir::Graph& g, TargetContext& ctx);

// Every name --disable-pass takes beyond the optimizer's passes (stages and switches of every device),
// with what it does: `kiln inspect` lists them.
std::vector<std::pair<std::string, std::string>> target_stage_names();

}  // namespace kiln
