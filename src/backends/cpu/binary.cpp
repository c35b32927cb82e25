// backends/cpu/binary.cpp — CPU kernels of the binary family.
#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

void register_binary(KernelRegistry& r) {
  (void)r;
}

}  // namespace kiln::cpu
