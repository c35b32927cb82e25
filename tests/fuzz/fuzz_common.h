// tests/fuzz/fuzz_common.h — what the fuzz targets share: small resource limits, and one run of an
// engine on zero-filled inputs when its inputs are static and small.
#pragma once

#include <cstdlib>

#include "kiln/kiln.h"

namespace kiln::fuzz {

inline void init_limits() {
  static const bool once = [] {
    set_max_tensor_bytes(size_t{64} << 20);  // a fuzz input never needs more; keeps runs inside the RSS limit
    setenv("OMP_NUM_THREADS", "1", 0);
    return true;
  }();
  (void)once;
}

// Runs the engine once on zeros, for at most 0.5 s; any error is fine, a crash or sanitizer report is not.
inline void run_once(const Engine& engine) {
  std::map<std::string, Value> feed;
  size_t bytes = 0;
  for (const TensorInfo& t : engine.inputs()) {
    if (t.kind != "tensor" || !t.rank_known || t.dtype == DataType::kString || t.dtype == DataType::kUndefined) return;
    Shape s;
    for (int64_t d : t.shape) s.push_back(d < 0 ? 1 : d);
    if (!check_tensor_size(t.dtype, s).empty()) return;
    bytes += shape_nbytes(t.dtype, s);
    if (bytes > (size_t{1} << 20)) return;
    feed[t.name] = Value::of(Tensor::empty(t.dtype, s));
  }
  auto ctx = engine.create_context();
  if (!ctx.ok()) return;
  // A model may loop for as long as it likes (a Loop of 2^62 trips is valid); the product's answer is
  // the run time limit, so the harness sets one far under libFuzzer's timeout.
  (*ctx)->set_run_timeout(0.5);
  (void)(*ctx)->run(feed);
}

}  // namespace kiln::fuzz
