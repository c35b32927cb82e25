// tools/gpu_timer.h — GPU time of a context's runs by CUDA events, for `kiln bench`.
// No CUDA headers here: without the CUDA backend create() returns nullptr and bench reports host
// time only.
#pragma once

#include <memory>

namespace kiln_tools {

// One stream and a pair of events. A context given stream() (ExecutionContext::set_cuda_stream)
// queues its work there; start() and stop_ms() bracket one run on that stream, and stop_ms() returns
// the GPU time between the two events in milliseconds (it waits for the second one). One thread at
// a time.
class GpuTimer {
 public:
  static std::unique_ptr<GpuTimer> create();  // nullptr when no CUDA device can be used
  virtual ~GpuTimer() = default;
  virtual void* stream() = 0;  // a cudaStream_t
  virtual void start() = 0;
  virtual double stop_ms() = 0;  // < 0 when the events failed
};

}  // namespace kiln_tools
