// passes/conv_pool.cpp — a channels-last convolution whose output feeds a global average pool (the
// squeeze-excitation blocks of EfficientNet, MobileNetV3, RegNet-Y, MnasNet-A) computes that pool
// itself, as its second output: the CPU kernel sums each channel in the same pass that applies the
// activation (SiLU, Sigmoid) to the convolution's output, instead of the pool reading the whole
// output again. EfficientNet-B0: 17 pools; on the host at 2 threads 5.2-5.4 ms against 5.4-5.7 ms without
// (bench/results/cpu_2026-11-27b.md).
// For CPU engines, after passes/channels_last.cpp (the pool is then kiln.ChannelsLastPool).
#include "passes/pattern.h"
#include "util/log.h"

namespace kiln::passes {

Expected<int> fold_pools_into_convs(ir::Graph& g) {
  int folded = 0;
  for (ir::Node* pool : g.nodes()) {
    if (pool->domain != "kiln" || pool->op_type != "ChannelsLastPool" || pool->attr_string("op", "") != "GlobalAveragePool" ||
        !pool->has_input(0) || pool->outputs.size() != 1 || !pool->outputs[0])
      continue;
    ir::Value* y = pool->inputs[0];
    ir::Node* conv = y->producer;
    if (!conv || conv->domain != "kiln" || conv->op_type != "FusedConv" || conv->attr_int("channels_last", 0) != 1 ||
        conv->outputs.size() != 1 || y->type.dtype != DataType::kFloat32 || y->is_output)
      continue;
    ir::Value* pooled = pool->outputs[0];
    if (pooled->type.dtype != DataType::kFloat32) continue;
    if (log_enabled(LogLevel::kVerbose))
      log(LogLevel::kVerbose, "[conv-pool] " + pool->describe() + " of " + conv->describe() + " is that convolution's second output");
    g.remove_node(pool);
    conv->outputs.push_back(pooled);
    pooled->producer = conv;
    pooled->producer_output = 1;
    ++folded;
  }
  // The convolution comes before every reader of the pool's output: the order stays topological.
  return folded;
}

}  // namespace kiln::passes
