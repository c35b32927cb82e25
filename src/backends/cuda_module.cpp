// backends/cuda_module.cpp — opens libkiln_cuda.so on demand (see cuda_module.h).
#include "backends/cuda_module.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "util/log.h"

namespace kiln {

namespace {

#if KILN_WITH_CUDA
// The folder of the library this function is in (libkiln.so), with a trailing '/'; "" if unknown
// (then dlopen searches the usual places).
std::string own_folder() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&own_folder), &info) || !info.dli_fname) return "";
  char* real = realpath(info.dli_fname, nullptr);  // "bin/../lib/libkiln.so" as the loader found it
  const std::string self = real ? real : info.dli_fname;
  std::free(real);
  const size_t slash = self.rfind('/');
  return slash == std::string::npos ? "" : self.substr(0, slash + 1);
}

Expected<const CudaModule*> load_module() {
  const std::string path = own_folder() + kKilnCudaModuleFile;
  // RTLD_LOCAL: CUDA's libraries stay out of the process's global symbol scope. Never closed: the
  // backend it holds lives as long as the process.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return unsupported("the CUDA backend cannot be loaded (CPU works): " + std::string(why ? why : "dlopen failed of " + path));
  }
  using Entry = const CudaModule* (*)(uint32_t);
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kKilnCudaModuleEntry));
  if (!entry)
    return unsupported("the CUDA backend cannot be loaded (CPU works): " + path + " has no " + kKilnCudaModuleEntry);
  const CudaModule* m = entry(kCudaModuleAbi);
  if (!m || m->abi != kCudaModuleAbi || !m->version || std::strcmp(m->version, KILN_VERSION) != 0 ||
      !m->kernel_registry || !m->backend || !m->make_event_timer)
    return unsupported("the CUDA backend cannot be loaded (CPU works): " + path + " is from another kiln build (this is " +
                       KILN_VERSION + ", module ABI " + std::to_string(kCudaModuleAbi) + "); reinstall kiln");
  log(LogLevel::kVerbose, "CUDA backend loaded from " + path);
  return m;
}
#endif

}  // namespace

Expected<const CudaModule*> cuda_module() {
#if KILN_WITH_CUDA
  static const Expected<const CudaModule*> module = load_module();
  return module;
#else
  return unsupported("this kiln was built without CUDA (configure with -DKILN_CUDA=ON on a machine with nvcc)");
#endif
}

Expected<Backend*> cuda_backend() {
  KILN_ASSIGN_OR_RETURN(const CudaModule* m, cuda_module());
  return m->backend();
}

const KernelRegistry* cuda_kernel_registry() {
  auto m = cuda_module();
  return m.ok() ? (*m)->kernel_registry() : nullptr;
}

}  // namespace kiln
