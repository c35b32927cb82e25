// backends/backend.h — one device: its kernels, memory, copies and synchronisation.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/kernel.h"

namespace kiln {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual Device device() const = 0;
  virtual const KernelRegistry& kernels() const = 0;
  // Adds a kernel row while the process runs (a plugin's kernel: plugins/). Devices that take none
  // refuse. Not safe while another thread builds or loads an engine: add before.
  virtual Status add_kernel(KernelDef def);

  // Device memory; the Storage frees itself. Every call counts in allocation_count().
  virtual Expected<std::shared_ptr<Storage>> allocate(size_t bytes) = 0;
  // How many times allocate() was called in this process (tests check that runs allocate nothing).
  uint64_t allocation_count() const { return allocations_.load(std::memory_order_relaxed); }
  // Copies between this device and the host, or within this device. Sizes must match.
  // `state` is a context's device state (stream); may be null for synchronous copies.
  virtual Status copy(const Tensor& src, Tensor& dst, void* state) = 0;
  // Per-ExecutionContext state (CUDA: stream, cuBLASLt/cuDNN handles, workspace). May be null.
  virtual Expected<std::shared_ptr<void>> create_state() = 0;
  // Waits for all work queued on `state`.
  virtual Status synchronize(void* state) = 0;
  // Graphs of queued work (CUDA graphs): work queued on `state` between begin_capture and
  // end_capture is recorded, not run; launch_graph queues the recorded work again, as one launch.
  // end_capture must follow every begin_capture that succeeded. Devices without graphs refuse.
  // `nodes` (may be null) receives the number of operations recorded. With `max_nodes` > 0, a
  // recording of more is dropped instead of instantiated (CUDA's instantiation time grows faster than
  // the node count: 100 runs of a convolution that launches a kernel per group took minutes) and the
  // error says so; `nodes` is still set.
  virtual Status begin_capture(void* state);
  virtual Expected<std::shared_ptr<void>> end_capture(void* state, size_t max_nodes = 0, size_t* nodes = nullptr);
  virtual Status launch_graph(void* graph, void* state);
  // Queues `state`'s work on `stream` (a device stream of the caller's; null: the state's own) from
  // now on. Devices without streams refuse.
  virtual Status use_stream(void* state, void* stream);
  // What this engine is built for: "NVIDIA H100 80GB HBM3; sm_90; CUDA 13.0; cuDNN 9.14; cuBLAS 13.1" or
  // the CPU ISA. Stored in engine files and compared on load.
  virtual std::string fingerprint() const = 0;
  // State shared by kernel factories at build/load time.
  virtual void* build_state() { return nullptr; }

 protected:
  void count_allocation() { allocations_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> allocations_{0};
};

// The process-wide backends. CPU always exists; CUDA fails with a clear Status when kiln was built
// without CUDA, libkiln_cuda.so cannot be loaded (backends/cuda_module.h: loaded on the first of
// these calls) or no GPU is visible.
Backend& cpu_backend();
Expected<Backend*> cuda_backend();
// The CUDA backend's kernel rows, available with or without a GPU (null in a build without CUDA or
// when libkiln_cuda.so cannot be loaded): what placement would choose can be planned anywhere.
const KernelRegistry* cuda_kernel_registry();
Expected<Backend*> backend_for(DeviceType type);

}  // namespace kiln
