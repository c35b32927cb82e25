// backends/cpu/cpu_backend.cpp — the CPU backend: host memory, copies, and the kernel table.
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "engine/engine_file.h"
#include "ir/host_memory.h"

namespace kiln {

// What kiln's CPU kernels may use here, not only what the CPU has: its own copies' features under
// KILN_CPU_ISA, and the ISA oneDNN dispatches to under ONEDNN_MAX_CPU_ISA (Winograd, int8 VNNI). Timing
// caches are keyed on it and tests read which kernels to expect from it, so a capped run is told the
// truth.
std::string host_cpu_isa() {
  std::string isa = "x86_64";
  if (cpu::has_avx2_fma()) isa += " avx2 fma";
  if (cpu::has_avx512()) isa += " avx512f avx512bw";
  const char* onednn = "sse41";
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx: onednn = "avx"; break;
    case dnnl::cpu_isa::avx2: onednn = "avx2"; break;
    case dnnl::cpu_isa::avx2_vnni: onednn = "avx2_vnni"; break;
    case dnnl::cpu_isa::avx512_core: onednn = "avx512_core"; break;
    case dnnl::cpu_isa::avx512_core_vnni: onednn = "avx512_core_vnni"; break;
    case dnnl::cpu_isa::avx512_core_bf16: onednn = "avx512_core_bf16"; break;
    case dnnl::cpu_isa::avx512_core_amx: onednn = "avx512_core_amx"; break;
    default: break;
  }
  return isa + " onednn:" + onednn;
}
namespace cpu {

class CpuBackend final : public Backend {
 public:
  CpuBackend() {
    register_unary(registry_);
    register_binary(registry_);
    register_cast(registry_);
    register_nn(registry_);
    register_shape(registry_);
    register_reduce(registry_);
    register_control(registry_);
    register_resize(registry_);
    register_einsum(registry_);
    register_unique(registry_);
    register_random(registry_);
    register_signal(registry_);
    register_string(registry_);
    register_detect(registry_);
    register_linalg(registry_);
    register_quant(registry_);
    register_rnn(registry_);
    register_loss(registry_);
    register_nn_norm_lp(registry_);
    register_roi(registry_);
    register_training(registry_);
    register_text(registry_);
    register_attention(registry_);
    register_attention_rotary(registry_);
    register_nn_conv_causal(registry_);
    register_grid(registry_);
    register_cast_bitcast(registry_);
    register_reduce_cumprod(registry_);
    register_shape_index_scatter(registry_);
    register_ml(registry_);
    register_fused(registry_);
    register_pointwise(registry_);
    register_contrib_quant(registry_);
  }
  std::string name() const override { return "cpu"; }
  Device device() const override { return {}; }
  const KernelRegistry& kernels() const override { return registry_; }
  Status add_kernel(KernelDef def) override {
    registry_.add(std::move(def));
    return Status::Ok();
  }

  Expected<std::shared_ptr<Storage>> allocate(size_t bytes) override {
    count_allocation();
    if (bytes > max_tensor_bytes())
      return runtime_error("allocating " + std::to_string(bytes) + " bytes of host memory: over the limit of " +
                           std::to_string(max_tensor_bytes()) + " (max_tensor_bytes)");
    std::string why;
    std::shared_ptr<Storage> st = allocate_host_storage(bytes, &why);
    if (!st) return runtime_error(why);
    return st;
  }
  Status copy(const Tensor& src, Tensor& dst, void*) override {
    if (src.nbytes() != dst.nbytes()) return internal_error("cpu copy: size mismatch");
    if (src.dtype() == DataType::kString) {
      for (int64_t i = 0; i < src.numel(); ++i) dst.data<std::string>()[i] = src.data<std::string>()[i];
    } else if (src.nbytes()) {
      std::memcpy(dst.raw(), src.raw(), src.nbytes());
    }
    return Status::Ok();
  }
  Expected<std::shared_ptr<void>> create_state() override { return std::shared_ptr<void>(); }
  Status synchronize(void*) override { return Status::Ok(); }
  // Kernels dispatch on the ISA at run time (oneDNN does too), so an engine is tied to the
  // architecture only; the ISA is still recorded in the engine's metadata (cpu_isa).
  std::string fingerprint() const override { return "cpu x86_64"; }

 private:
  KernelRegistry registry_;
};

}  // namespace cpu

// Graphs of queued work exist only where a device queues work (CUDA overrides these).
Status Backend::begin_capture(void*) { return unsupported(name() + ": no graphs of queued work"); }
Expected<std::shared_ptr<void>> Backend::end_capture(void*, size_t, size_t*) { return unsupported(name() + ": no graphs of queued work"); }
Status Backend::launch_graph(void*, void*) { return unsupported(name() + ": no graphs of queued work"); }
Status Backend::use_stream(void*, void*) { return unsupported(name() + ": no streams"); }
Status Backend::add_kernel(KernelDef def) { return unsupported(name() + ": takes no plugin kernels (" + def.name + ")"); }

Backend& cpu_backend() {
  static cpu::CpuBackend backend;
  return backend;
}

Expected<Backend*> backend_for(DeviceType type) {
  if (type == DeviceType::kCPU) return &cpu_backend();
  return cuda_backend();
}

}  // namespace kiln
