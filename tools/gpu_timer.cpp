// tools/gpu_timer.cpp — CUDA events around runs on a stream of the tool's own (see gpu_timer.h).
#include "gpu_timer.h"

#if KILN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace kiln_tools {

#if KILN_WITH_CUDA
namespace {

class CudaEventTimer final : public GpuTimer {
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

std::unique_ptr<GpuTimer> GpuTimer::create() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();  // clear the sticky "no device" error for the rest of the process
    return nullptr;
  }
  auto t = std::make_unique<CudaEventTimer>();
  if (!t->init()) return nullptr;
  return t;
}
#else
std::unique_ptr<GpuTimer> GpuTimer::create() { return nullptr; }
#endif

}  // namespace kiln_tools
