// ops/misc.cpp — types and shapes of the misc op family.
#include "ops/op_table.h"

namespace kiln::ops {

void add_misc_ops(std::vector<OpDef>& t) {
  (void)t;
}

}  // namespace kiln::ops
