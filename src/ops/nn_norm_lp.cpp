// ops/nn_norm_lp.cpp — types and shapes of LpNormalization, of the nn family's normalizations (the
// others: ops/nn.cpp).
#include "ops/op_table.h"
#include "ops/shape_infer_util.h"

namespace kiln::ops {

void add_nn_norm_lp_ops(std::vector<OpDef>& t) {
  t.push_back({"LpNormalization", "", 1, infer_same_as_input0});
}

}  // namespace kiln::ops
