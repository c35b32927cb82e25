// ops/nn.h — geometry shared by the nn family's shape functions and kernels: how convolution and
// pooling windows are laid out over the spatial dims (pads, strides, dilations, auto_pad, ceil_mode).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/epilogue.h"
#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::ops {

// Attributes of a sliding window (Conv, ConvTranspose, *Pool), parsed once from the node.
struct WindowAttrs {
  std::vector<int64_t> kernel;     // empty: taken from the weight shape (Conv) at run time
  std::vector<int64_t> strides;    // empty: all 1
  std::vector<int64_t> dilations;  // empty: all 1
  std::vector<int64_t> pads;       // empty: all 0; else [begin..., end...]
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
  // ConvTranspose only.
  std::vector<int64_t> output_padding, output_shape;
};
WindowAttrs parse_window_attrs(const ir::Node& node);

// The window laid over concrete spatial dims: every vector has one entry per spatial dim
// (pads: 2 per dim, begins first).
struct WindowGeometry {
  std::vector<int64_t> kernel, strides, dilations, pads, out;
};

// Conv / pooling: output dims = windows that fit (ceil_mode: partial ones whose start lies inside
// the input or the begin padding). `kernel` overrides attrs.kernel when that is empty.
Expected<WindowGeometry> window_geometry(const WindowAttrs& a, const std::vector<int64_t>& in_spatial,
                                         const std::vector<int64_t>& kernel);
// ConvTranspose: pads and output dims from output_shape / output_padding / auto_pad.
Expected<WindowGeometry> transpose_geometry(const WindowAttrs& a, const std::vector<int64_t>& in_spatial,
                                            const std::vector<int64_t>& kernel);

// kiln.Attention's masks: element strides of a tensor of shape `m` right-aligned to [B, H, S, T]
// (`full`), 0 along broadcast dims; false when it does not broadcast there. With a batch period
// (mask_batch_period > 0) m is [period, ...] of rank 4, B a multiple of the period, and strides[0] is
// the stride of mask entry b % period. (CPU and CUDA kernels.)
bool attention_mask_strides(const std::vector<int64_t>& m, const int64_t (&full)[4], int64_t (&strides)[4],
                            int64_t period = 0);

// kiln.Attention's Q, K, V and Y element strides: of one sequence step (row), of one head and of one
// batch entry. Batch-first [B, S, H*D] tensors have rows of H*D, heads of D and batches of S*H*D;
// sequence-first [S, B, H*D] ones (sequence_first = 1) rows of B*H*D and batches of H*D; a packed
// QKV [B, S, 3*H*D] (packed_qkv = 1) rows of 3*H*D (K's part starts H*D into the row, V's 2*H*D);
// heads-first [B, H, S, D] ones (heads_first = 1) rows of D, heads of S*D, batches of H*S*D. K and V
// have kv heads (grouped-query attention) where Q has H. Y is [B, S, H*Dv] (or [S, B, H*Dv]; [B,
// S, H, Dv] heads-first: the same strides).
struct AttentionStrides {
  int64_t q_row = 0, k_row = 0, v_row = 0, y_row = 0, q_batch = 0, k_batch = 0, v_batch = 0, y_batch = 0;
  int64_t q_head = 0, k_head = 0, v_head = 0;
};
struct FusedAttentionParams;
// A kiln.Attention's geometry for these Q, K, V shapes (CPU and CUDA kernels): batch B, query and
// key lengths S and T, H query heads and Hkv key/value heads of sizes D and Dv, and the strides.
struct AttentionGeometry {
  int64_t B = 0, S = 0, T = 0, H = 0, Hkv = 0, D = 0, Dv = 0;
  AttentionStrides st;
};
// "" and *g set when the shapes fit the attributes, else what is wrong (for the kernel's error).
std::string attention_geometry(const FusedAttentionParams& a, const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                               const std::vector<int64_t>& v, AttentionGeometry* g);

// kiln.Rotary(X, COS, SIN) = X·COS + rotate_half(X)·SIN, rotate_half(x) = [-x[D/2:], x[:D/2]] along
// the last dim D (even); COS and SIN broadcast to X without enlarging it (CPU and CUDA kernels). X as
// rows of D: `outer` its dims but the last, the element strides of COS and SIN along them (0 where
// broadcast) and along the last dim.
struct RotaryGeometry {
  int64_t rows = 0, d = 0;
  std::vector<int64_t> outer, cos_outer, sin_outer;
  int64_t cos_last = 0, sin_last = 0;
};
// "" and *g set when the shapes fit, else what is wrong.
std::string rotary_geometry(const std::vector<int64_t>& x, const std::vector<int64_t>& cos, const std::vector<int64_t>& sin,
                            RotaryGeometry* g);

// kiln.F8MatMul's attributes (ops/fused.cpp), parsed once for both backends' kernels: the two E4M3
// scales (positive, finite) and the fused activation.
struct F8MatMulParams {
  float a_scale = 1, b_scale = 1;
  Activation act;
};
Expected<F8MatMulParams> parse_f8_matmul(const ir::Node& n);

}  // namespace kiln::ops
