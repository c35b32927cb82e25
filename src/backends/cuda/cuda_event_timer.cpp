// backends/cuda/cuda_event_timer.cpp — CUDA events around runs on a stream of the timer's own
// (EventTimer in backends/cuda_module.h; `kiln bench` reports the GPU time with it).
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_entry.h"

namespace kiln::cuda {

namespace {

class CudaEventTimer final : public EventTimer {
 public:
  ~CudaEventTimer() override {
    if (begin_) cudaEventDestroy(begin_);
    if (end_) cudaEventDestroy(end_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  bool init() {
    return cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess &&
           cudaEventCreate(&begin_) == cudaSuccess && cudaEventCreate(&end_) == cudaSuccess;
  }
  void* stream() override { return stream_; }
  void start() override { cudaEventRecord(begin_, stream_); }
  double stop_ms() override {
    float ms = -1.f;
    if (cudaEventRecord(end_, stream_) != cudaSuccess || cudaEventSynchronize(end_) != cudaSuccess ||
        cudaEventElapsedTime(&ms, begin_, end_) != cudaSuccess)
      return -1.0;
    return ms;
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t begin_ = nullptr, end_ = nullptr;
};

}  // namespace

std::unique_ptr<EventTimer> make_event_timer() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();  // clear the sticky "no device" error for the rest of the process
    return nullptr;
  }
  auto t = std::make_unique<CudaEventTimer>();
  if (!t->init()) return nullptr;
  return t;
}

}  // namespace kiln::cuda
