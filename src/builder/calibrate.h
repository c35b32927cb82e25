// builder/calibrate.h — INT8 and FP8 quantization of a float graph from calibration data (calibrate.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/kiln.h"

namespace kiln {

class KernelRegistry;

using BuildFn = std::function<Expected<std::shared_ptr<Engine>>(std::unique_ptr<ir::Graph>)>;

// What quantize_8bit did, for the build's report.
struct Int8Report {
  struct Layer {
    std::string node, op;
    bool int8 = true;  // in 8 bits (int8, or fp8 in FP8 builds)
    double sensitivity = -1;  // the metric with only this product in 8 bits (budget builds), else -1
  };
  struct TensorRange {
    std::string name;
    double lo = 0, hi = 0;  // the range kept (after clipping)
    float scale = 1;
    int zero_point = 0;
  };
  int products = 0;          // Conv/MatMul/Gemm given 8-bit inputs
  std::vector<Layer> layers;  // every quantizable product, graph order
  std::string metric;         // budget builds: "rel_l2" or "top1"
  double budget = 0, error = -1;  // the budget, and the measured metric of the chosen assignment
  int calibration_sets = 0;  // input sets run (0 when the ranges came from the cache)
  bool from_cache = false;
  std::vector<TensorRange> ranges;
};

// Puts QuantizeLinear/DequantizeLinear around the inputs of every product of `g` (an optimized
// float32 graph) that `type` can hold and a row of `target` takes (KernelDef::quantizes), with
// activation ranges from options.calibration (through `build_float`, which builds a float32 CPU
// engine of a graph as it is) or options.calibration_cache. fuse-qdq then makes the integer kernels.
// With options.accuracy_budget > 0 the most sensitive products stay in the rest's precision, as few
// as keep options.accuracy_metric within the budget against the float32 graph on the calibration
// sets (`build_quantized` builds a candidate as the final engine will be).
// `type`: kInt8 (INT8 engines), or kFloat8E4M3FN (FP8: MatMul/Gemm become kiln.F8MatMul instead,
// calibrate.cpp).
Expected<Int8Report> quantize_8bit(ir::Graph& g, const BuildOptions& options, DataType type, const KernelRegistry& target,
                                   const std::string& model_hash, const BuildFn& build_float, const BuildFn& build_quantized);

// Adds Σ(got − want)² to *num and Σ want² to *den (float32 tensors of one size): relative L2 is
// sqrt(num / den), pooled over as many tensors as are added.
void add_squared_error(const Tensor& got, const Tensor& want, double* num, double* den);

}  // namespace kiln
