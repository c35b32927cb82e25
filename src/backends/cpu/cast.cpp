// backends/cpu/cast.cpp — CPU kernels of the cast family.
#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

void register_cast(KernelRegistry& r) {
  (void)r;
}

}  // namespace kiln::cpu
