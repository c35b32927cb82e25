// ops/reduce_cumprod.cpp — types and shapes of CumProd, the reduce family's cumulative product
// (CumSum and the other reductions: ops/reduce.cpp).
#include "ops/op_table.h"
#include "ops/shape_infer_util.h"

namespace kiln::ops {

void add_reduce_cumprod_ops(std::vector<OpDef>& t) {
  t.push_back({"CumProd", "", 26, infer_same_as_input0});
}

}  // namespace kiln::ops
