// backends/cpu/misc.cpp — CPU kernels of the misc family; each group lives in its own misc_*.cpp.
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/misc_kernels.h"

namespace kiln::cpu {

void register_misc(KernelRegistry& r) {
  register_resize(r);
  register_einsum(r);
  register_unique(r);
  register_random(r);
  register_signal(r);
  register_string(r);
  register_detect(r);
}

}  // namespace kiln::cpu
