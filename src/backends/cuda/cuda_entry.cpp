// backends/cuda/cuda_entry.cpp — the one entry point of libkiln_cuda.so (backends/cuda_module.h).
#include "backends/cuda/cuda_entry.h"

// Both libraries come from one build: libkiln checks `abi` and `version` before using the rest.
extern "C" const kiln::CudaModule* kiln_cuda_module(uint32_t abi) {
  static const kiln::CudaModule module = [] {
    kiln::CudaModule m;
    m.version = KILN_VERSION;
    m.kernel_registry = &kiln::cuda::kernel_rows;
    m.backend = &kiln::cuda::probe_backend;
    m.make_event_timer = &kiln::cuda::make_event_timer;
    return m;
  }();
  return abi == kiln::kCudaModuleAbi ? &module : nullptr;
}
