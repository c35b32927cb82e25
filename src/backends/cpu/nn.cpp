// backends/cpu/nn.cpp — CPU kernels of the nn family. The kernels live in nn_gemm.cpp,
// nn_conv.cpp, nn_pool.cpp, nn_norm.cpp and nn_softmax.cpp; this registers them all.
#include "backends/cpu/nn_common.h"

namespace kiln::cpu {

void register_nn(KernelRegistry& r) {
  nn::register_gemm(r);
  nn::register_conv(r);
  nn::register_qconv(r);
  nn::register_pool(r);
  nn::register_norm(r);
  nn::register_softmax(r);
}

}  // namespace kiln::cpu
