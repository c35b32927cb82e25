// passes/passes.h — graph rewrites, run by a pass manager to a fixed point.
//
// Every pass keeps the graph's meaning (outputs equal on every input, up to float rounding for
// fusions) and returns whether it changed the graph. Each rewrite is one log line (printed with
// `verbose`); a pattern that matched partly and did not fire is a "near miss" with its reason.
//
// Levels: 0 nothing; 1 folding and cleanup (constants, shapes, no-ops, CSE, transposes);
// 2 + fusions into fused kernels (domain "kiln", see ops/fused.cpp); 3 + aggressive rewrites.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/kiln.h"
#include "kiln/status.h"

namespace kiln::passes {

struct PassOptions {
  int level = 1;          // 0: nothing; 1: folding and cleanup; 2: + fusions; 3: + aggressive
  bool verbose = false;
  size_t fold_limit_bytes = 1 << 20;  // folded constants larger than this (and than their inputs) stay computed
  // Evaluates one node on constant inputs, for constant folding. The builder hands in the
  // runtime's CPU evaluator, so passes never include the runtime. Null: only Shape/Size of static
  // shapes fold.
  std::function<Expected<std::vector<Value>>(const ir::Node&, const std::vector<Value>&)> evaluate;
  // Whether the target device has a kernel for (domain, op). Fusions produce an op only where it
  // does (a fused op the device lacks would run on the CPU, behind two copies). Null: all do.
  std::function<bool(const std::string& domain, const std::string& op)> has_kernel;
  // Why the target's kernels of a node's op refuse that node ("" when one takes it); fusions ask it of
  // the node they would make (fuse-qdq: a CUDA int8 convolution takes zero point 0 only — a refused
  // one stays a float convolution between Q/DQ on the GPU instead of an 8-bit one on the CPU). A
  // channels-first QConv is asked as if channels-last (the layout pass moves it later). Null: all take it.
  std::function<std::string(const ir::Node&)> kernel_refuses;
  // pad-matmul-columns: products with a constant weight get zero columns up to a multiple of this
  // (the target's GEMM kernels want aligned rows: 8 on CUDA); 0 or 1: never.
  int pad_matmul_columns = 0;
  // Passes of the pipeline not to run, by name (as ONNX Runtime's disabled optimizers).
  std::set<std::string> disabled;
};

struct PassContext {
  const PassOptions& options;
  std::map<std::string, int> fired;  // pass name → rewrites
  std::vector<std::string> rewrites;      // one line per rewrite, in order
  std::vector<std::string> near_misses;   // "pass: what: why", each once
  std::set<std::string> seen_near_misses;
  void log(const std::string& pass, const std::string& what);
  void near_miss(const std::string& pass, const std::string& what);
  bool has_kernel(const std::string& domain, const std::string& op) const {
    return !options.has_kernel || options.has_kernel(domain, op);
  }
  std::string kernel_refuses(const ir::Node& n) const { return options.kernel_refuses ? options.kernel_refuses(n) : ""; }
};

// A pass of min_level 0 is a lowering (lower-contrib-ops): it runs once, before the rounds, at every
// level and is never disabled, since without it some nodes have no kernel anywhere.
struct Pass {
  std::string name;
  int min_level;
  std::function<Expected<bool>(ir::Graph&, PassContext&)> run;
};

// What optimize() did, for `kiln inspect` and tests.
struct OptimizeStats {
  std::map<std::string, int> fired;
  std::vector<std::string> rewrites;
  std::vector<std::string> near_misses;
  int rounds = 0;
  std::map<std::string, double> seconds;  // per pass, every round, with the re-sort and re-inference after it
};

// Reduced precision (passes/precision.cpp): float32 tensors become `half` (float16 or bfloat16) where
// `runs_in_half` says the node's kernel takes it; casts where the precision changes, model inputs
// and outputs keep their dtypes. Returns how many nodes run in half. Runs after optimize().
// half_outputs: graph outputs computed in half stay half (BuildOptions::half_outputs) instead of
// being cast back to float32 under their names.
Expected<int> convert_precision(ir::Graph& g, DataType half, const std::function<bool(const ir::Node&)>& runs_in_half,
                                bool half_outputs = false);

// TF32 engines (passes/precision.cpp): float32 convolutions and GEMMs (Conv, Gemm, MatMul and their
// kiln.Fused forms) get the attribute ops::kTF32Attr = 1, which GPU kernels read as leave to use TF32
// tensor cores (CPU kernels ignore it). Returns how many nodes it marked.
int allow_tf32(ir::Graph& g);

// A QuantizeLinear that reads a float16/bfloat16 value through Cast(to float32) (convert_precision
// leaves one where a half producer, a max pool say, feeds a float32 quantization) reads the half
// value itself where `accepts` takes the rewired node (the target's kernel): half widens to float32
// exactly, so the result is the same and the float32 copy is neither written nor read (ResNet-50 INT8
// on CUDA at batch 256: 51M values). The Cast goes when nothing else reads it. Returns how many.
int quantize_half_directly(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts);

// A float-output kiln.QMatMul read only by a Cast to float16 (convert_precision's, before the half
// nodes after it) writes float16 itself (attribute output_dtype) where `accepts` takes it: the
// epilogue rounds once, as the Cast did, and the float32 copy is neither written nor read (BERT-base
// INT8 at batch 64: 72 such casts). Returns how many.
int products_write_half(ir::Graph& g, DataType half, const std::function<bool(const ir::Node&)>& accepts);

// The other way: a half MatMul or bias-free kiln.FusedMatMul whose result only a Cast to float32 reads
// — directly, or through a Slice (pad-matmul-columns' column slice) — becomes a kiln.FusedMatMul that
// writes float32 itself (attribute output_dtype; cuBLASLt's float32 C/D with half A/B), the Slice then
// slicing float32: the Cast's pass is gone and the product rounds once, to float32. A Slice of the
// leading columns of the last axis is taken into the node too where `accepts` takes that (attribute
// output_columns: the CUDA kernel widens the half product into the float32 columns, rounding to the
// half type first, as the unfused graph did). A model's output
// after a half language-model head is the case (GPT-2 at batch 64: a [64, 128, 50257] Cast, 1 ms of
// 10.9 on an H200). Where `accepts` takes the new node; returns how many.
int products_write_float(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts);

// A uint8 activation (per-tensor zero point z) written by a QuantizeLinear or a kiln.QMatMul and read
// only as the A of kiln.QMatMul or by DequantizeLinear, all with that zero point, becomes int8 with
// zero point z − 128 (every value q − 128: the same real numbers, the same saturation range) where
// `accepts` takes every node involved. CUDA engines: cuBLASLt's int8 kernels take signed A, so a
// uint8 A was shifted by a pass of its own before each product (BERT-base INT8 at batch 64: 73
// passes, 1.17 ms). Returns how many values changed.
int signed_activations(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts);

// Channels-last convolution chains (passes/channels_last.cpp): 2-D convolutions that `accepts` takes
// become kiln.FusedConv with channels_last = 1 (NHWC X/Y, [M,kh,kw,C/g] W), elementwise ops between
// them follow, pooling of an NHWC value becomes kiln.ChannelsLastPool (when `accepts` takes the
// pool node), transposes only where a chain meets channels-first readers. Returns how many nodes
// changed layout. Runs after convert_precision() for GPU engines.
Expected<int> convert_to_channels_last(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts);
// Pads a 2-D convolution must have for convert_to_channels_last to move it: auto_pad NOTSET or VALID,
// explicit pads symmetric.
bool symmetric_pads(const ir::Node& n);

// CUDA engines, after convert_to_channels_last: a channels-last kiln.FusedConv of at most 4 input
// channels (ReLU or no activation, no residual), read only by a max kiln.ChannelsLastPool, itself
// read only by an int8 QuantizeLinear or by anything, becomes kiln.ConvPool where `accepts` takes it
// (fuse_conv_pool.cpp); a Transpose to channels-last (and a Cast to float16 before it) feeding only
// the convolution goes too, the node reading their input. Returns how many.
Expected<int> fuse_conv_max_pool(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts);

// CUDA engines, after the precision and layout stages: each region of two or more elementwise float
// ops (arithmetic, activations, Clip, float Casts) whose intermediate values nothing outside reads
// becomes one kiln.Pointwise (ops/pointwise.h) where `accepts` takes it (fuse_pointwise.cpp).
// Returns how many regions.
Expected<int> fuse_pointwise(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts);

// kiln.ChannelsLastPool(GlobalAveragePool) of a float32 channels-last kiln.FusedConv's output becomes
// that convolution's second output (conv_pool.cpp; CPU engines, after convert_to_channels_last).
// Returns how many pools were folded.
Expected<int> fold_pools_into_convs(ir::Graph& g);

// The named pipeline, in order; a pass runs when options.level >= min_level.
const std::vector<Pass>& pipeline();
// Runs the pipeline to a fixed point (bounded), then re-infers types and verifies the graph.
Status optimize(ir::Graph& graph, const PassOptions& options, std::map<std::string, int>* fired = nullptr);
// How many times optimize() has run in this process (tests: loading an engine runs no pass).
uint64_t optimize_count();
Status optimize(ir::Graph& graph, const PassOptions& options, OptimizeStats* stats);

// Individual passes (one file each).
Expected<bool> lower_contrib_ops(ir::Graph& g, PassContext& ctx);      // lower_contrib.cpp
// True when lower_contrib_ops rewrites node n (it has no kernel of its own then; `kiln info`).
bool is_lowered(const ir::Node& n);
Expected<bool> fold_constants(ir::Graph& g, PassContext& ctx);
Expected<bool> eliminate_dead_code(ir::Graph& g, PassContext& ctx);
Expected<bool> fold_shapes(ir::Graph& g, PassContext& ctx);            // fold_shapes.cpp
Expected<bool> remove_noops(ir::Graph& g, PassContext& ctx);           // remove_noops.cpp
Expected<bool> spatial_mean_to_pool(ir::Graph& g, PassContext& ctx);   // spatial_mean.cpp
Expected<bool> eliminate_common_subexpressions(ir::Graph& g, PassContext& ctx);  // cse.cpp
Expected<bool> simplify_transposes(ir::Graph& g, PassContext& ctx);    // transposes.cpp
Expected<bool> fold_conv_batchnorm(ir::Graph& g, PassContext& ctx);    // fuse_conv_bn.cpp
Expected<bool> fold_conv_affine(ir::Graph& g, PassContext& ctx);       // fuse_conv_affine.cpp
Expected<bool> fold_pad_into_conv(ir::Graph& g, PassContext& ctx);     // fuse_pad_conv.cpp
Expected<bool> trim_conv_taps(ir::Graph& g, PassContext& ctx);         // trim_conv_taps.cpp
Expected<bool> patchify_conv(ir::Graph& g, PassContext& ctx);          // patchify_conv.cpp
Expected<bool> pad_matmul_columns(ir::Graph& g, PassContext& ctx);     // pad_matmul_columns.cpp
Expected<bool> fuse_matmul_add(ir::Graph& g, PassContext& ctx);        // fuse_matmul_add.cpp
Expected<bool> fuse_qdq(ir::Graph& g, PassContext& ctx);               // fuse_qdq.cpp
// CUDA INT8 engines (runtime/engine.cpp): a float-output kiln.QConv whose only reader is an Add of a
// residual held in int8 (a symmetric DequantizeLinear's input, or a symmetric QuantizeLinear's output
// of it), then an optional Relu, then a symmetric int8 QuantizeLinear, becomes one kiln.QConv with the
// residual as input 9 and an int8 output; other readers of the float sum read its DequantizeLinear.
// The residual is thereby read in int8 (TensorRT does the same); returns the number fused.
Expected<int> fuse_qconv_residual(ir::Graph& g);
// A weights' DequantizeLinear that fuse_qdq will fold into an integer kernel (constant folding skips it).
bool keep_dequantize_for_fusion(const ir::Node& n, const PassContext& ctx);
Expected<bool> fuse_gelu(ir::Graph& g, PassContext& ctx);              // fuse_gelu.cpp
Expected<bool> fuse_layer_norm(ir::Graph& g, PassContext& ctx);        // fuse_layer_norm.cpp
Expected<bool> fuse_rms_norm(ir::Graph& g, PassContext& ctx);          // fuse_rms_norm.cpp
Expected<bool> fuse_skip_layer_norm(ir::Graph& g, PassContext& ctx);   // fuse_skip_layer_norm.cpp
Expected<bool> fuse_activation(ir::Graph& g, PassContext& ctx);        // fuse_activation.cpp
Expected<bool> fuse_conv_residual(ir::Graph& g, PassContext& ctx);     // fuse_activation.cpp
Expected<bool> fuse_rotary(ir::Graph& g, PassContext& ctx);            // fuse_rotary.cpp
Expected<bool> fuse_attention(ir::Graph& g, PassContext& ctx);         // fuse_attention.cpp
Expected<bool> batch_first_attention(ir::Graph& g, PassContext& ctx);  // batch_first_attention.cpp
// ONNX Attention (23) of 4-D Q, K, V without past, softcap or extra outputs → kiln.Attention (heads-first,
// masks and is_causal as its bool/additive masks; attention_op.cpp).
Expected<bool> attention_op_to_kiln(ir::Graph& g, PassContext& ctx);
// Heads-first kiln.Attention whose Q, K, V are Transposes [0,2,1,3] of [B, S, h, d] (through kiln.Rotary
// for Q and K) reads the rows in place, batch-first (fold_head_transposes.cpp).
Expected<bool> fold_head_transposes(ir::Graph& g, PassContext& ctx);

}  // namespace kiln::passes
