// ops/elementwise.cpp — types and shapes of the elementwise op family.
#include "ops/op_table.h"

namespace kiln::ops {

void add_elementwise_ops(std::vector<OpDef>& t) {
  (void)t;
}

}  // namespace kiln::ops
