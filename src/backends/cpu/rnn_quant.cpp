// backends/cpu/rnn_quant.cpp — registers the CPU kernels of the quantization, recurrent, loss,
// region-of-interest/vision and training families (quant.cpp, rnn.cpp, loss.cpp, roi.cpp,
// training.cpp, tfidf.cpp).
#include "backends/cpu/rq_common.h"

namespace kiln::cpu {

void register_rnn_quant(KernelRegistry& r) {
  rq::register_quant(r);
  rq::register_rnn(r);
  rq::register_loss(r);
  rq::register_roi(r);
  rq::register_training(r);
  rq::register_text(r);
}

}  // namespace kiln::cpu
