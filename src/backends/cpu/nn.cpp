// backends/cpu/nn.cpp — CPU kernels of the nn family.
#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

void register_nn(KernelRegistry& r) {
  (void)r;
}

}  // namespace kiln::cpu
