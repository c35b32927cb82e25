// backends/cuda_module.h — the seam between libkiln.so and the CUDA backend, libkiln_cuda.so.
//
// libkiln links no CUDA library: the CUDA backend (backends/cuda/, cudart, cuBLASLt, cuDNN) is a
// shared library of its own, opened with dlopen the first time CUDA is asked for (cuda_backend(),
// cuda_kernel_registry(), a CUDA engine, the bench timer), from the folder of libkiln.so. It links
// libkiln.so, so the op table, the kernel registry type, logging and the thread pool exist once.
// Its one entry point (kKilnCudaModuleEntry, C linkage) hands libkiln a CudaModule of function
// pointers; both libraries come from the same build, which the ABI number and the version check.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/backend.h"

namespace kiln {

// GPU time of runs queued on a stream of its own, by a pair of CUDA events (`kiln bench`). One
// thread at a time.
class EventTimer {
 public:
  virtual ~EventTimer() = default;
  virtual void* stream() = 0;     // a cudaStream_t
  virtual void start() = 0;       // records the first event
  virtual double stop_ms() = 0;   // records the second, waits for it; milliseconds, < 0 on failure
};

// Bumped whenever CudaModule or anything it passes by value changes.
inline constexpr uint32_t kCudaModuleAbi = 1;
inline constexpr const char* kKilnCudaModuleEntry = "kiln_cuda_module";
inline constexpr const char* kKilnCudaModuleFile = "libkiln_cuda.so";

struct CudaModule {
  uint32_t abi = kCudaModuleAbi;
  const char* version = nullptr;  // KILN_VERSION of the build that made the module
  // The CUDA kernel rows; registering touches no device, so placement plans without a GPU.
  const KernelRegistry* (*kernel_registry)() = nullptr;
  // The backend for device 0, probed once; fails naming why when no GPU or driver is usable.
  Expected<Backend*> (*backend)() = nullptr;
  // A timer on a new stream, or nullptr when no CUDA device can be used.
  std::unique_ptr<EventTimer> (*make_event_timer)() = nullptr;
};

// The module, loaded on the first call (thread-safe; decided once per process). Fails with the
// reason when kiln was built without CUDA or libkiln_cuda.so cannot be opened: the dlerror text
// (file missing, a CUDA library missing), or a module from another build.
Expected<const CudaModule*> cuda_module();

}  // namespace kiln

// What libkiln_cuda.so exports: its CudaModule when `abi` is the one it was built with, else null.
extern "C" const kiln::CudaModule* kiln_cuda_module(uint32_t abi);
