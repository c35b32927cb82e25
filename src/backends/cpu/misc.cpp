// backends/cpu/misc.cpp — CPU kernels of the misc family; each group lives in its own misc_*.cpp.
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/misc_kernels.h"

namespace kiln::cpu {

void register_misc(KernelRegistry& r) {
  register_resize(r);
}

}  // namespace kiln::cpu
