// ops/params_nn.h — the attributes of the nn, normalization, softmax, pooling, GEMM, convolution,
// reduction and kiln fused op families, each parsed once (params_nn.cpp) into a typed struct that the
// op's shape function (ops/nn.cpp, reduce.cpp, fused.cpp) and every backend kernel read. Defaults and
// opset-dependent meanings are decided here, so consumers never read attributes or n.opset for them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"
#include "ops/nn.h"  // WindowAttrs, the sliding window shared by convolutions and pooling

namespace kiln::ops {

// ---------------------------------------------------------------- GEMM, convolution, pooling

// TF32 engines mark the float32 convolutions and GEMMs (Conv, Gemm, MatMul, their kiln.Fused forms)
// that may use TF32 tensor cores: passes::allow_tf32 writes the attribute, GPU kernels read it, CPU
// kernels ignore it.
inline constexpr const char* kTF32Attr = "kiln_tf32";
inline bool allows_tf32(const ir::Node& n) { return n.attr_int(kTF32Attr, 0) != 0; }

// Gemm (and kiln.FusedGemm's inner Gemm).
struct GemmParams {
  bool trans_a = false, trans_b = false;
  float alpha = 1, beta = 1;
};
GemmParams parse_gemm(const ir::Node& n);

// Conv, ConvInteger, QLinearConv, ConvTranspose, kiln.FusedConv and kiln.QConv.
struct ConvParams {
  WindowAttrs window;
  int64_t group = 1;
  // kiln.FusedConv / kiln.QConv (passes/channels_last.cpp): X [N,H,W,C], W [M,kh,kw,C/group], Y [N,OH,OW,M]
  bool channels_last = false;
};
ConvParams parse_conv(const ir::Node& n);

// MaxPool, AveragePool, LpPool, their Global* forms and MaxUnpool.
struct PoolParams {
  WindowAttrs window;
  bool count_include_pad = false;  // AveragePool
  bool column_major = false;       // MaxPool storage_order = 1: Indices count along columns
  double p = 2;                    // LpPool / GlobalLpPool (an int attribute in old opsets, a float later)
};
PoolParams parse_pool(const ir::Node& n);

// kiln.ChannelsLastPool: the pooling op named by `op` on [N,H,W,C] tensors, with that op's attributes.
struct ChannelsLastPoolParams {
  std::string op;       // as written
  bool known = false;   // op is MaxPool, AveragePool, GlobalMaxPool or GlobalAveragePool
  bool global = false;  // GlobalMaxPool / GlobalAveragePool
  bool max = false;     // MaxPool / GlobalMaxPool
  PoolParams pool;
};
ChannelsLastPoolParams parse_channels_last_pool(const ir::Node& n);

// kiln.ChannelAffine(X, scale, shift): Y = act(X * scale[c] + shift[c]) per channel c, the channel
// axis 1 ([N, C, ...]) or, with channels_last = 1, the last ([N, ..., C]); scale and shift float32
// whatever X's float type; activation as the fused ops' (ir/epilogue.h). An inference BatchNormalization folded to its affine form (passes/channels_last.cpp).
struct ChannelAffineParams {
  bool channels_last = false;
  Activation act;
  std::string error;  // an unknown activation
};
ChannelAffineParams parse_channel_affine(const ir::Node& n);
// "" when X (rank >= 2) and scale and shift ([C] each, C X's channel dim) fit, else what is wrong;
// both backends' reshape use it.
std::string channel_affine_shape_error(const Shape& x, const Shape& scale, const Shape& shift, bool channels_last);

// kiln.ConvPool (passes/fuse_conv_pool.cpp): a 2-D convolution (kernel_shape, strides, pads: explicit,
// no dilation), its activation, then a max pool (pool_kernel, pool_strides, pool_pads); X [N,C,H,W]
// when x_channels_first, else [N,H,W,C]; W [M,kh,kw,C]; Y [N,POH,POW,M].
struct ConvPoolParams {
  int64_t k[2] = {1, 1}, s[2] = {1, 1}, p[4] = {0, 0, 0, 0};
  int64_t pk[2] = {1, 1}, ps[2] = {1, 1}, pp[4] = {0, 0, 0, 0};
  bool x_channels_first = false;
  bool valid = false;  // every list has its length and every value its range
  // The convolution's and the pool's output extent along spatial dim i (0: height) of an input extent.
  int64_t conv_out(int i, int64_t in) const { return (in + p[i] + p[i + 2] - k[i]) / s[i] + 1; }
  int64_t pool_out(int i, int64_t conv) const { return (conv + pp[i] + pp[i + 2] - pk[i]) / ps[i] + 1; }
  // The pooled extent along dim i of an input extent, or 0 when a window is larger than its padded input.
  int64_t pooled(int i, int64_t in) const {
    if (in + p[i] + p[i + 2] < k[i]) return 0;
    const int64_t conv = conv_out(i, in);
    return conv + pp[i] + pp[i + 2] < pk[i] ? 0 : pool_out(i, conv);
  }
};
ConvPoolParams parse_conv_pool(const ir::Node& n);

// ---------------------------------------------------------------- normalization, softmax, dropout

struct BatchNormParams {
  float epsilon = 1e-5f;
  float momentum = 0.9f;
  bool training_mode = false;    // as written, whatever the opset (the attribute exists from opset 14)
  bool training = false;         // opset >= 14 with training_mode: batch statistics, running ones updated
  bool spatial = true;           // opset < 9: attribute `spatial`; 0 asks for per-activation statistics
  bool legacy_training = false;  // opset 1-6 with is_test = 0: the old training mode
};
BatchNormParams parse_batch_norm(const ir::Node& n);

struct InstanceNormParams {
  float epsilon = 1e-5f;
};
InstanceNormParams parse_instance_norm(const ir::Node& n);

struct GroupNormParams {
  float epsilon = 1e-5f;
  int64_t num_groups = 0;  // as written, 0 when absent (the kernels reject < 1 and non-divisors of C)
};
GroupNormParams parse_group_norm(const ir::Node& n);

// LayerNormalization and RMSNormalization.
struct LayerNormParams {
  int64_t axis = -1;  // first normalized dim, as written (may be negative)
  float epsilon = 1e-5f;
  int64_t stash_type = 1;               // as written, unchecked (1 = float32)
  DataType stash = DataType::kFloat32;  // stash_type when it names a valid dtype, else float32
};
LayerNormParams parse_layer_norm(const ir::Node& n);

// kiln.SkipLayerNorm (always over the last dim).
struct SkipLayerNormParams {
  float epsilon = 1e-5f;
  bool simplified = false;  // RMSNormalization(A + B): no mean subtracted, no beta ("simplified" attribute 1)
};
SkipLayerNormParams parse_skip_layer_norm(const ir::Node& n);

struct LrnParams {
  int64_t size = 1;  // channels in the window, as written (kernels reject < 1)
  float alpha = 1e-4f, beta = 0.75f, bias = 1.0f;
};
LrnParams parse_lrn(const ir::Node& n);

// MeanVarianceNormalization.
struct MvnParams {
  std::vector<int64_t> axes = {0, 2, 3};  // as written (may be negative)
};
MvnParams parse_mvn(const ir::Node& n);

// Softmax, LogSoftmax and Hardmax.
struct SoftmaxParams {
  int64_t axis = -1;  // as written (may be negative); default 1 when coerce_2d, else -1
  // opset < 13: the input is seen as 2-D [prod(dims[:axis]), prod(dims[axis:])] and rows normalized
  bool coerce_2d = false;
};
SoftmaxParams parse_softmax(const ir::Node& n);

struct DropoutParams {
  float ratio = 0.5f;  // the attribute; from opset 12 input 1 (when given) replaces it
  bool has_seed = false;
  int64_t seed = 0;
  bool ratio_inputs = true;      // opset >= 12 (or unversioned): ratio and training_mode are inputs 1 and 2
  bool bool_mask = true;         // opset >= 10 (or unversioned): the mask output is bool, else X's dtype
  bool legacy_training = false;  // opset 1-6 with is_test = 0: the old training mode
};
DropoutParams parse_dropout(const ir::Node& n);

// ---------------------------------------------------------------- reductions

// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum,
// ReduceLogSumExp and ReduceSumSquare.
struct ReduceParams {
  // opset >= 13 (ReduceSum) or 18 (the others): axes are input 1, else the `axes` attribute
  bool axes_input = false;
  std::vector<int64_t> axes;   // the attribute as written (may be negative), empty when absent
  bool has_axes_attr = false;  // the attribute is present (even when empty)
  bool keepdims = true;
  bool noop_with_empty_axes = false;  // as written, whatever the opset
};
ReduceParams parse_reduce(const ir::Node& n);

// ArgMax and ArgMin.
struct ArgReduceParams {
  int64_t axis = 0;  // as written (may be negative)
  bool keepdims = true;
  bool select_last_index = false;
};
ArgReduceParams parse_arg_reduce(const ir::Node& n);

struct TopKParams {
  int64_t axis = -1;  // as written (may be negative)
  bool largest = true;
  bool k_input = false;  // opset >= 10: K is input 1, else the `k` attribute
  int64_t k = -1;        // opset < 10: the attribute, -1 when absent
};
TopKParams parse_topk(const ir::Node& n);

// CumSum (ops/reduce.cpp) and CumProd (ops/reduce_cumprod.cpp): the same two attributes.
struct CumulativeParams {
  bool exclusive = false, reverse = false;
};
CumulativeParams parse_cumulative(const ir::Node& n);

// ---------------------------------------------------------------- kiln fused ops

// kiln.Attention (passes/fuse_attention.cpp); ops/fused.cpp describes its inputs.
struct FusedAttentionParams {
  int64_t num_heads = 0;  // as written, 0 when absent (the kernels' checks reject < 1)
  float scale = 1;        // multiplies QK^T
  float mask_fill = 0;    // the score where the bool mask selects
  bool mask_fill_where_true = false;  // fill where the bool mask is true (else where it is false)
  // Q [S, B, H*D], K and V [T, B, H*D], Y [S, B, H*Dv] (torch's nn.MultiheadAttention as exported:
  // sequence-first) instead of [B, S, H*D]
  bool sequence_first = false;
  // A row whose softmax is NaN (every key masked to -inf, or a NaN or +inf score) has probabilities
  // 0, so its context row is 0 (torch's SDPA export guards the softmax with Where(IsNaN(P), 0, P));
  // else the row is NaN, as Softmax gives it.
  bool zero_nan_rows = false;
  // Q, K and V are one tensor [B, S, 3*H*D] (given as inputs 0, 1 and 2 alike; the kernels read input
  // 0), their column blocks 0, 1 and 2 (timm's fused projection, or a projection Split or Sliced
  // in three: passes/fuse_attention.cpp); [S, B, 3*H*D] when sequence_first; T = S, Dv = D
  bool packed_qkv = false;
  // The additive mask repeats along the batch every `mask_batch_period` entries (0: it does not): its
  // first dim is the period and batch entry b reads mask entry b % period (Swin's shifted windows:
  // B = images·nW, window w of image n is entry n·nW + w, and the mask is [nW, H, S, T]).
  int64_t mask_batch_period = 0;
  // Grouped-query attention: K and V have kv_num_heads heads (0: num_heads), a divisor of num_heads;
  // query head h reads K/V head h / (num_heads / kv_num_heads) (Llama, Mistral, Qwen exports).
  int64_t kv_num_heads = 0;
  // Q [B, H, S, D], K [B, Hkv, T, D], V [B, Hkv, T, Dv]: 4-D, heads before the sequence (the tensors
  // an export has after rotary embeddings), and Y [B, S, H, Dv] (the rows of the 3-D form's Y). The
  // head counts are the tensors' (num_heads and kv_num_heads, when given, must match them). Not with
  // sequence_first or packed_qkv.
  bool heads_first = false;
};
FusedAttentionParams parse_fused_attention(const ir::Node& n);
// What is wrong with these attributes on their own (shape inference, both backends' kernel checks and
// ops::attention_geometry share it), "" when nothing: num_heads positive (0 allowed heads-first: the
// tensors carry it), kv_num_heads >= 0 and dividing num_heads where both are given, heads_first alone
// (not with sequence_first or packed_qkv), mask_batch_period >= 0.
std::string fused_attention_attrs_error(const FusedAttentionParams& p);

}  // namespace kiln::ops
