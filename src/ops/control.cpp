// ops/control.cpp — types and shapes of the control op family.
#include "ops/op_table.h"

namespace kiln::ops {

void add_control_ops(std::vector<OpDef>& t) {
  (void)t;
}

}  // namespace kiln::ops
