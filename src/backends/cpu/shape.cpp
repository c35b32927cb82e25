// backends/cpu/shape.cpp — CPU kernels of the shape family.
#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

void register_shape(KernelRegistry& r) {
  (void)r;
}

}  // namespace kiln::cpu
