// backends/cpu/misc.cpp — CPU kernels of the misc family.
#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

void register_misc(KernelRegistry& r) {
  (void)r;
}

}  // namespace kiln::cpu
