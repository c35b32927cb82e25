// backends/cuda/cuda_entry.h — what libkiln_cuda.so hands libkiln through its entry point
// (kiln_cuda_module, backends/cuda_module.h). libkiln's cuda_backend() and cuda_kernel_registry()
// (backends/backend.h) reach these; code inside this library calls those as everywhere else.
#pragma once

#include <memory>

#include "backends/cuda_module.h"

namespace kiln::cuda {

// The kernel rows, registered once; touches no device, so placement can be planned without a GPU
// (cuda_backend.cpp).
const KernelRegistry* kernel_rows();
// The backend for device 0, probed once: fails naming why when no GPU or driver is usable
// (cuda_backend.cpp).
Expected<Backend*> probe_backend();
// `kiln bench`'s timer on a stream of its own; nullptr without a usable device
// (cuda_event_timer.cpp).
std::unique_ptr<EventTimer> make_event_timer();

}  // namespace kiln::cuda
