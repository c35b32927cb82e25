// builder/target_pipeline.cpp — the target stages of each device, as rows (see target_pipeline.h).
#include "builder/target_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "backends/backend.h"
#include "builder/build.h"
#include "builder/precision.h"
#include "passes/passes.h"
#include "util/log.h"

namespace kiln {

bool TargetContext::enabled(const std::string& name) const {
  const auto& d = options.disabled_passes;
  return std::find(d.begin(), d.end(), name) == d.end();
}

const PrecisionRow& TargetContext::precision() const { return precision_row(float_precision(options)); }

bool TargetContext::half_engine() const { return precision().half != DataType::kUndefined; }

namespace {

using Applies = std::function<bool(const ir::Graph&, const TargetContext&)>;
using Run = std::function<Expected<int>(ir::Graph&, TargetContext&)>;

// One row of a device's list.
TargetStage stage(std::string name, std::string what, Applies applies, Run run,
                  TargetStage::Disable disable = TargetStage::Disable::kSkips) {
  TargetStage s;
  s.name = std::move(name);
  s.what = std::move(what);
  s.applies = std::move(applies);
  s.run = std::move(run);
  s.disable = disable;
  return s;
}

bool has_kiln_op(const ir::Graph& g, const char* op) {
  for (const ir::Node* n : g.nodes())
    if (n->domain == "kiln" && n->op_type == op) return true;
  return false;
}
bool has_qconv(const ir::Graph& g) { return has_kiln_op(g, "QConv"); }
bool has_8bit_products(const ir::Graph& g) { return has_qconv(g) || has_kiln_op(g, "QMatMul"); }

// Whether the target has a half-float row of kiln.<op>.
bool has_half_row(const KernelRegistry& target, const char* op) {
  for (const KernelDef& d : target.all())
    if (d.op == op && d.domain == "kiln" && d.half_floats) return true;
  return false;
}

std::function<bool(const ir::Node&)> target_takes(const KernelRegistry& target) {
  return [&target](const ir::Node& n) { return target.find(n) != nullptr; };
}

// A model's own layout Transposes (ConvNeXt's permutes around its LayerNorm) meet the channels-last
// stage's Transposes back and forth: the pairs cancel (the optimizer's transposes pass, a few rounds).
Status cancel_layout_transposes(ir::Graph& g, const TargetContext& c) {
  passes::PassOptions po = builder_pass_options(c.options.opt_level, &c.target);
  po.verbose = c.options.verbose;
  po.disabled.insert(c.options.disabled_passes.begin(), c.options.disabled_passes.end());
  passes::PassContext pc{po, {}, {}, {}, {}};
  for (int round = 0; round < 4; ++round) {
    KILN_ASSIGN_OR_RETURN(bool changed, passes::simplify_transposes(g, pc));
    KILN_RETURN_IF_ERROR(passes::eliminate_dead_code(g, pc).status());
    if (!changed) break;
  }
  return Status::Ok();
}

// ---- CUDA

// Whether CUDA's convolution chains move channels-last: the int8 convolutions always (the int8 kernel
// is NHWC only), float16/bfloat16 ones where the target has a half kiln.FusedConv and "channels-last"
// is not disabled.
bool cuda_half_convs(const TargetContext& c) {
  return c.half_engine() && has_half_row(c.target, "FusedConv") && c.enabled("channels-last");
}

TargetStage fuse_qconv_residual_stage() {
  return stage(
      "fuse-qconv-residual",
      "CUDA: a residual Add into the int8 convolution before it (opt level 2; the INT8 path at 1 too)",
      [](const ir::Graph& g, const TargetContext& c) {
        return (c.quantized || c.options.opt_level >= 2) && has_qconv(g);
      },
      [](ir::Graph& g, TargetContext&) { return passes::fuse_qconv_residual(g); });
}

TargetStage convert_precision_stage() {
  return stage(
      "convert-precision", "half engines: the nodes the target runs in float16/bfloat16 get half inputs and outputs",
      [](const ir::Graph&, const TargetContext& c) { return c.half_engine(); },
      [](ir::Graph& g, TargetContext& c) {
        const DataType half = c.precision().half;
        const KernelRegistry& target = c.target;
        auto runs_in_half = [&target](const ir::Node& n) {
          const std::string domain = n.domain == "ai.onnx" ? "" : n.domain;
          for (const KernelDef& d : target.all())
            if (d.half_floats && d.op == n.op_type && d.domain == domain &&
                (n.opset == 0 || (n.opset >= d.since && n.opset <= d.until)))
              return true;
          return false;
        };
        return passes::convert_precision(g, half, runs_in_half, c.options.half_outputs);
      },
      TargetStage::Disable::kNever);
}

TargetStage cuda_channels_last_stage() {
  // (--disable-pass channels-last keeps the half convolutions channels-first; the int8 chains still move)
  return stage(
      "channels-last",
      "CUDA: convolution chains in NHWC — float16/bfloat16 tensor-core convolutions (disabling this keeps "
      "them channels-first) and kiln.QConv with the Q/DQ, elementwise ops and pools between them (always: "
      "the int8 kernel is NHWC only)",
      [](const ir::Graph& g, const TargetContext& c) {
        return c.options.opt_level >= 1 && (cuda_half_convs(c) || has_qconv(g));
      },
      [](ir::Graph& g, TargetContext& c) -> Expected<int> {
        const bool half_pool = has_half_row(c.target, "ChannelsLastPool");
        const bool half_affine = has_half_row(c.target, "ChannelAffine");
        const bool half_convs = cuda_half_convs(c);
        auto accepts = [half_pool, half_affine, half_convs](const ir::Node& n) {
          if (n.domain == "kiln" && n.op_type == "QConv") return true;
          const DataType dt = n.inputs[0]->type.dtype;
          const bool half = dt == DataType::kFloat16 || dt == DataType::kBFloat16;
          const bool conv = n.op_type == "Conv" || n.op_type == "FusedConv";
          if (conv) return half_convs && half;
          // A half BatchNormalization on an NHWC value becomes kiln.ChannelAffine (DenseNet's
          // pre-activation BN after each Concat), instead of a Transpose each way around it.
          if (n.op_type == "BatchNormalization") return half ? half_affine : half_pool;
          return half_pool;
        };
        KILN_ASSIGN_OR_RETURN(int moved, passes::convert_to_channels_last(g, accepts));
        c.channels_last_moved = moved;
        if (moved > 0) KILN_RETURN_IF_ERROR(cancel_layout_transposes(g, c));
        return moved;
      },
      TargetStage::Disable::kStageDecides);
}

// The 8-bit products' activations: read int8 without a shift pass; in half engines read half
// activations and write half results directly (after the layout stage: it moves their Q/DQ).
bool cuda_8bit_io(const ir::Graph& g, const TargetContext& c) {
  return c.options.opt_level >= 1 && has_8bit_products(g);
}

TargetStage signed_activations_stage() {
  return stage("signed-activations", "CUDA: uint8 activations read only by int8 products written as int8", cuda_8bit_io,
               [](ir::Graph& g, TargetContext& c) -> Expected<int> {
                 return passes::signed_activations(g, target_takes(c.target));
               });
}

TargetStage quantize_half_directly_stage() {
  return stage(
      "quantize-half-directly", "CUDA half engines: int8 products read float16 activations directly",
      [](const ir::Graph& g, const TargetContext& c) { return cuda_8bit_io(g, c) && c.half_engine(); },
      [](ir::Graph& g, TargetContext& c) -> Expected<int> {
        return passes::quantize_half_directly(g, target_takes(c.target));
      });
}

TargetStage products_write_half_stage() {
  return stage(
      "products-write-half", "CUDA float16 engines: int8 products write float16 instead of a Cast",
      [](const ir::Graph& g, const TargetContext& c) {
        return cuda_8bit_io(g, c) && c.precision().half == DataType::kFloat16;
      },
      [](ir::Graph& g, TargetContext& c) -> Expected<int> {
        return passes::products_write_half(g, DataType::kFloat16, target_takes(c.target));
      });
}

TargetStage products_write_float_stage() {
  return stage(
      "products-write-float",
      "CUDA half engines: a half product read only by a Cast to float32 (through a column Slice or not) writes float32 itself",
      [](const ir::Graph&, const TargetContext& c) { return c.options.opt_level >= 1 && c.half_engine(); },
      [](ir::Graph& g, TargetContext& c) -> Expected<int> {
        return passes::products_write_float(g, target_takes(c.target));
      });
}

TargetStage fuse_conv_max_pool_stage() {
  return stage(
      "fuse-conv-max-pool",
      "CUDA, opt level 2: a few-channel stem convolution and its max pool in one kernel (after channels-last)",
      [](const ir::Graph&, const TargetContext& c) { return c.options.opt_level >= 2 && c.channels_last_moved >= 0; },
      [](ir::Graph& g, TargetContext& c) { return passes::fuse_conv_max_pool(g, target_takes(c.target)); });
}

TargetStage fuse_pointwise_stage() {
  return stage(
      "fuse-pointwise",
      "CUDA, opt level 2: each region of elementwise float ops between other kernels as one generated kernel (kiln.Pointwise, compiled with NVRTC)",
      [](const ir::Graph&, const TargetContext& c) { return c.options.opt_level >= 2; },
      [](ir::Graph& g, TargetContext& c) { return passes::fuse_pointwise(g, target_takes(c.target)); });
}

TargetStage allow_tf32_stage() {
  return stage(
      "allow-tf32", "TF32 and best engines: float32 products may round their inputs to TF32",
      [](const ir::Graph&, const TargetContext& c) {
        return c.precision().tf32;
      },
      [](ir::Graph& g, TargetContext&) -> Expected<int> { return passes::allow_tf32(g); },
      TargetStage::Disable::kNever);
}

// ---- CPU

// CPU engines run their 8-bit convolutions channels-last (oneDNN's int8 kernels are NHWC): chains of
// kiln.QConv and the per-tensor Q/DQ and elementwise ops between them move to NHWC, float32 pools
// inside a chain become kiln.ChannelsLastPool; from opt level 2 float32 convolutions too (oneDNN's
// NHWC kernels instead of a reorder to its blocked layout and back around every layer).
bool cpu_float_convs(const TargetContext& c) {
  return c.options.opt_level >= 2 && c.enabled("channels-last-float-convs");
}

TargetStage cpu_channels_last_stage() {
  TargetStage s;
  s.name = "channels-last";
  s.what = "CPU: int8 convolution chains (and, opt level 2, float32 ones) in NHWC";
  s.switches = {{"channels-last-float-convs", "CPU, opt level 2: float32 convolutions join the channels-last chains"}};
  s.applies = [](const ir::Graph& g, const TargetContext& c) {
    return c.options.opt_level >= 1 && (has_qconv(g) || cpu_float_convs(c));
  };
  s.run = [](ir::Graph& g, TargetContext& c) -> Expected<int> {
    bool pool = false;
    for (const KernelDef& d : c.target.all()) pool |= d.op == "ChannelsLastPool" && d.domain == "kiln";
    const bool float_convs = cpu_float_convs(c);
    auto accepts = [pool, float_convs](const ir::Node& n) {
      if (n.domain == "kiln" && n.op_type == "QConv") return true;
      const bool conv = n.op_type == "Conv" || n.op_type == "FusedConv";
      if (conv)
        return float_convs && n.inputs[0]->type.dtype == DataType::kFloat32 &&
               n.inputs[1]->type.dtype == DataType::kFloat32 &&
               (!n.has_input(2) || n.inputs[2]->type.dtype == DataType::kFloat32);
      return pool && n.inputs[0]->type.dtype == DataType::kFloat32;
    };
    KILN_ASSIGN_OR_RETURN(int moved, passes::convert_to_channels_last(g, accepts));
    c.channels_last_moved = moved;
    if (moved > 0) KILN_RETURN_IF_ERROR(cancel_layout_transposes(g, c));
    return moved;
  };
  return s;
}

TargetStage fold_pools_into_convs_stage() {
  return stage(
      "fold-pools-into-convs", "CPU: a pool after a channels-last convolution computed by it",
      [](const ir::Graph&, const TargetContext& c) { return c.channels_last_moved > 0; },
      [](ir::Graph& g, TargetContext&) { return passes::fold_pools_into_convs(g); });
}

}  // namespace

const std::vector<TargetStage>& target_pipeline(DeviceType device) {
  // CUDA: the residual fusion needs the int8 convolutions as the optimizer left them; the half
  // conversion comes before the layout (which moves half convolutions); the 8-bit products' I/O after
  // the layout (it moves their Q/DQ); the stem fusion on the channels-last graph; TF32 last.
  static const std::vector<TargetStage> cuda = {
      fuse_qconv_residual_stage(),    convert_precision_stage(),
      cuda_channels_last_stage(),     signed_activations_stage(),
      quantize_half_directly_stage(), products_write_half_stage(),
      products_write_float_stage(),   fuse_conv_max_pool_stage(),
      fuse_pointwise_stage(),         allow_tf32_stage(),
  };
  // CPU engines compute in float32 (builder.cpp refuses other precisions there).
  static const std::vector<TargetStage> cpu = {cpu_channels_last_stage(), fold_pools_into_convs_stage()};
  return device == DeviceType::kCUDA ? cuda : cpu;
}

Status run_target_pipeline(ir::Graph& g, TargetContext& ctx) {
  for (const TargetStage& s : target_pipeline(ctx.options.device)) {
    if (s.disable == TargetStage::Disable::kSkips && !ctx.enabled(s.name)) continue;
    if (!s.applies(g, ctx)) continue;
    const auto start = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(int n, s.run(g, ctx));
    char took[32];
    std::snprintf(took, sizeof(took), " (%.2f s)", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    log(LogLevel::kVerbose, "target stage " + s.name + ": " + std::to_string(n) + " rewrite" + (n == 1 ? "" : "s") + took);
  }
  return g.sort();
}

std::vector<std::pair<std::string, std::string>> target_stage_names() {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&out](const std::string& name, const std::string& what) {
    for (auto& [n, w] : out)
      if (n == name) {
        w += "; " + what;
        return;
      }
    out.emplace_back(name, what);
  };
  for (DeviceType d : {DeviceType::kCPU, DeviceType::kCUDA})
    for (const TargetStage& s : target_pipeline(d)) {
      if (s.disable != TargetStage::Disable::kNever) add(s.name, s.what);
      for (const auto& [name, what] : s.switches) add(name, what);
    }
  return out;
}

}  // namespace kiln
