// backends/cpu/control.cpp — CPU kernels of the control family.
#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

void register_control(KernelRegistry& r) {
  (void)r;
}

}  // namespace kiln::cpu
