// tools/gpu_timer.h — GPU time of a context's runs by CUDA events, for `kiln bench`: the CUDA
// backend's EventTimer (backends/cuda_module.h), so the tool itself links no CUDA library. Without
// the CUDA backend (not built, not loadable, no GPU) make_gpu_timer() returns nullptr and bench
// reports host time only.
#pragma once

#include <memory>

#include "backends/cuda_module.h"

namespace kiln_tools {

// One stream and a pair of events. A context given stream() (ExecutionContext::set_cuda_stream)
// queues its work there; start() and stop_ms() bracket one run on that stream, and stop_ms() returns
// the GPU time between the two events in milliseconds (it waits for the second one). One thread at
// a time.
using GpuTimer = kiln::EventTimer;

inline std::unique_ptr<GpuTimer> make_gpu_timer() {
  auto module = kiln::cuda_module();
  return module.ok() ? (*module)->make_event_timer() : nullptr;
}

}  // namespace kiln_tools
