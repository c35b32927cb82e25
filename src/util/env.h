// util/env.h — process knobs read from the environment (how runs are launched, never what an engine
// computes; docs/ARCHITECTURE.md lists them): a variable is on when it holds exactly the value given.
#pragma once

#include <cstdlib>
#include <cstring>

namespace kiln {

inline bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

}  // namespace kiln
