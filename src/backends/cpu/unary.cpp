// backends/cpu/unary.cpp — CPU kernels of the unary family.
#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

void register_unary(KernelRegistry& r) {
  (void)r;
}

}  // namespace kiln::cpu
