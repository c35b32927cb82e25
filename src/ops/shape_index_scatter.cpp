// ops/shape_index_scatter.cpp — types and shapes of TensorScatter, the index-driven update of a
// cache along one axis (the other index-driven ops: ops/shape_index.cpp).
#include "ops/op_table.h"
#include "ops/shape_infer_util.h"

namespace kiln::ops {

void add_shape_index_scatter_ops(std::vector<OpDef>& t) {
  t.push_back({"TensorScatter", "", 24, infer_same_as_input0});
}

}  // namespace kiln::ops
