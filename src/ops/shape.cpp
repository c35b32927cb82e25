// ops/shape.cpp — types and shapes of the shape op family.
#include "ops/op_table.h"

namespace kiln::ops {

void add_shape_ops(std::vector<OpDef>& t) {
  (void)t;
}

}  // namespace kiln::ops
