// ops/reduce.cpp — types and shapes of the reduce op family.
#include "ops/op_table.h"

namespace kiln::ops {

void add_reduce_ops(std::vector<OpDef>& t) {
  (void)t;
}

}  // namespace kiln::ops
