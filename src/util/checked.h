// util/checked.h — counts and sizes computed from values a model controls, without undefined behaviour.
#pragma once

#include <cmath>
#include <cstdint>

namespace kiln {

// A count computed in floating point (Range's length, a resized axis) as int64: false when it is NaN,
// infinite or past 2^53, where the conversion would be undefined or the count meaningless. Negative
// counts are returned as they are (callers clamp them to 0).
inline bool count_from_double(double x, int64_t* out) {
  if (!(std::fabs(x) <= 9007199254740992.0)) return false;  // NaN fails this too
  *out = static_cast<int64_t>(x);
  return true;
}

}  // namespace kiln
