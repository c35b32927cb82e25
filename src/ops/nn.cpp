// ops/nn.cpp — types and shapes of the nn op family.
#include "ops/op_table.h"

namespace kiln::ops {

void add_nn_ops(std::vector<OpDef>& t) {
  (void)t;
}

}  // namespace kiln::ops
