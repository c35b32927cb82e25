// backends/cpu/reduce.cpp — CPU kernels of the reduce family.
#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

void register_reduce(KernelRegistry& r) {
  (void)r;
}

}  // namespace kiln::cpu
