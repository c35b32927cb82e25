// runtime/calibrate.h — INT8 quantization of a float graph from calibration data (calibrate.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/kiln.h"

namespace kiln {

// What quantize_int8 did, for the build's report.
struct Int8Report {
  struct TensorRange {
    std::string name;
    double lo = 0, hi = 0;  // the range kept (after clipping)
    float scale = 1;
    int zero_point = 0;
  };
  int products = 0;          // Conv/MatMul/Gemm given 8-bit inputs
  int calibration_sets = 0;  // input sets run (0 when the ranges came from the cache)
  bool from_cache = false;
  std::vector<TensorRange> ranges;
};

// Puts QuantizeLinear/DequantizeLinear around the inputs of every quantizable product of `g` (an
// optimized float32 graph), with activation ranges from options.calibration (through `build_float`,
// which builds a float32 CPU engine of a graph) or options.calibration_cache. fuse-qdq then makes the
// integer kernels.
Expected<Int8Report> quantize_int8(ir::Graph& g, const BuildOptions& options, const std::string& model_hash,
                                   const std::function<Expected<std::shared_ptr<Engine>>(std::unique_ptr<ir::Graph>)>& build_float);

}  // namespace kiln
