// util/env.h — the measurement switches kernels read from the environment (KILN_CUDNN_FUSED=0,
// KILN_DW_DIRECT=1, ...): a variable is on when it holds exactly the value given.
#pragma once

#include <cstdlib>
#include <cstring>

namespace kiln {

inline bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

}  // namespace kiln
