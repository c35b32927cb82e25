// ops/fused.cpp — kiln's fused ops (domain "kiln"), created only by the optimizer's fusion passes
// (passes/fuse_*.cpp); their CPU kernels are in backends/cpu/fused*.cpp.
//
//   FusedConv(X, W[, B[, Z]])    Conv attributes + activation, activation_params: act(conv + B + Z), Z
//                                a residual of Y's shape (passes/fuse_activation.cpp); channels_last = 1
//                                (made by passes/channels_last.cpp for GPU engines): X [N,H,W,C],
//                                W [M,kh,kw,C/group], Y [N,OH,OW,M] (2-D only); → Y[, P] where P
//                                [N,1,1,M] is Y's mean over OH and OW (GlobalAveragePool of Y,
//                                passes/conv_pool.cpp, CPU engines)
//   FusedGemm(A, B[, C])         Gemm attributes + activation, activation_params
//   FusedMatMul(A, B[, bias])    act(MatMul(A, B) + bias), bias [N] along the last dim; without a bias,
//                                output_dtype = float32 makes a float16/bfloat16 product write float32
//                                (passes::products_write_float, CUDA half engines), and with it
//                                output_columns = c makes Y the product's first c columns (CUDA only)
//   SkipLayerNorm(A, B, gamma[, beta]) → Y[, A+B]   LayerNormalization(A + B) over the last dim, epsilon;
//                                simplified = 1: RMSNormalization(A + B) instead (no mean, no beta)
//   ChannelsLastPool(X) → Y      MaxPool, AveragePool, GlobalMaxPool or GlobalAveragePool (attribute
//                                `op`, with that op's attributes) on X [N,H,W,C] → Y [N,OH,OW,C]
//                                (passes/channels_last.cpp, GPU engines)
//   ChannelAffine(X, scale, shift) → Y    act(X · scale[c] + shift[c]) per channel c of X [N, C, ...],
//                                or of X [N, ..., C] with channels_last = 1; X float32, float16 or
//                                bfloat16, scale and shift [C] float32 (computed in float32); activation
//                                (passes/channels_last.cpp: an inference BatchNormalization and its
//                                activation on an NHWC half tensor, GPU engines)
//   ConvPool(X, W[, B[, y_scale, y_zero_point]]) → Y    a stem: act(Conv(X, W) + B) (kernel_shape, strides,
//                                pads, activation), then MaxPool (pool_kernel, pool_strides, pool_pads),
//                                then QuantizeLinear when y_scale is given; X [N,C,H,W] (x_channels_first
//                                = 1) or [N,H,W,C], W [M,kh,kw,C], Y [N,POH,POW,M] (passes/fuse_conv_pool.cpp,
//                                CUDA engines; no CPU kernel: made only where the CUDA kernel takes it)
//   QConv(X, x_scale, x_zero_point, W, w_scale, w_zero_point[, y_scale, y_zero_point[, B[, Z, z_scale]]])
//                                Conv attributes + activation: DequantizeLinear of X and of W
//                                (int8, per-tensor or per-output-channel scale, zero point 0), the
//                                convolution + B (float32, or int32 in x_scale·w_scale units)
//                                [+ z_scale·Z, an int8 residual of Y's shape with zero point 0], the
//                                activation, and QuantizeLinear with y_scale/y_zero_point when given
//                                (else a float32 output) (passes/fuse_qdq.cpp; the residual from
//                                fuse_qconv_residual, CUDA engines); channels_last = 1 as FusedConv's
//                                (passes/channels_last.cpp)
//   QMatMul(A, a_scale, a_zero_point, B, b_scale, b_zero_point[, y_scale, y_zero_point[, bias]])
//                                the same for MatMul with a 2-D B [K, N] (scale per column)
//   F8MatMul(A, B8[, bias])    FP8 (E4M3) product of A [..., K] (float) and a constant B8 [N, K]
//                                (float8e4m3fn, stored transposed, as cuBLASLt's FP8 kernels read it):
//                                A is quantized as E4M3(A · (1 / a_scale)) (saturating at ±448, nearest
//                                even),
//                                Y = act(a_scale · b_scale · (A8 · B8ᵀ) + bias), bias [N], activation
//                                as FusedMatMul's; Y has A's dtype (builder/calibrate.cpp, `--precision
//                                fp8` builds)
//   Attention(Q, K, V[, mask[, bool_mask]])   Q [B,S,H*D], K [B,T,H*D], V [B,T,H*Dv]; mask additive and
//                                bool_mask broadcast to [B,H,S,T]; num_heads, scale, mask_fill,
//                                mask_fill_where_true → [B,S,H*Dv]:
//                                softmax(where(bool_mask == mask_fill_where_true, mask_fill, scale * QK^T) + mask) V;
//                                sequence_first = 1: Q [S,B,H*D], K, V [T,B,...], Y [S,B,H*Dv];
//                                zero_nan_rows = 1: a row whose softmax is NaN (every key -inf) has
//                                probabilities 0 (torch's SDPA export: Where(IsNaN(P), 0, P));
//                                packed_qkv = 1: Q, K, V are one [B,S,3*H*D] tensor (inputs 0-2 alike;
//                                [S,B,3*H*D] when sequence_first), its column blocks 0, 1, 2 → Y [B,S,H*D];
//                                mask_batch_period = P > 0: the mask is [P, H|1, S|1, T|1] and batch
//                                entry b adds mask entry b % P (Swin's shifted windows), B a multiple of P;
//                                kv_num_heads = Hkv: K and V have Hkv heads (a divisor of H), query head
//                                h reads K/V head h / (H / Hkv) (grouped-query attention);
//                                heads_first = 1: Q [B,H,S,D], K [B,Hkv,T,D], V [B,Hkv,T,Dv] (after
//                                rotary embeddings), Y [B,S,H,Dv]; head counts from the tensors
//   Rotary(X, COS, SIN)         X·COS + rotate_half(X)·SIN with rotate_half(x) = [-x[D/2:], x[:D/2]]
//                                along the last dim D (even), COS and SIN broadcast to X's shape (the
//                                rotary embedding as Llama/Mistral/Qwen/GPT-NeoX export it, full-width
//                                cos/sin; passes/fuse_rotary.cpp) → X's shape and dtype
//
// activation (ir/epilogue.h, the one list): "" (none), Relu, LeakyRelu (alpha), Clip (min, max), Sigmoid, HardSigmoid (alpha, beta),
// HardSwish, Silu, Tanh, Gelu, GeluTanh.
#include <cmath>

#include "ops/nn.h"
#include "ops/op_table.h"
#include "ops/params_nn.h"

namespace kiln::ops {
namespace {

// Runs the ai.onnx op's shape function on this node's first `inputs` inputs.
template <const char* Op, int Inputs>
Status like(InferContext& c) {
  const OpDef* d = find_op("", Op);
  if (!d || !d->infer) return Status::Ok();
  InferContext sub{c.node, {}, {}, {}};
  for (int i = 0; i < Inputs && i < c.num_inputs(); ++i) {
    sub.in.push_back(c.in[i]);
    sub.in_value.push_back(c.in_value[i]);
  }
  sub.out.resize(1);
  sub.out[0].kind = ir::Type::Kind::kUnknown;
  KILN_RETURN_IF_ERROR(d->infer(sub));
  c.out[0] = sub.out[0];
  return Status::Ok();
}

constexpr char kConv[] = "Conv";

// [N, H, W, C] ↔ [N, C, H, W] of a symbolic 4-D shape.
ir::SymShape permuted(const ir::SymShape& s, bool to_first) {
  if (!s.known || s.rank() != 4) return s;
  const auto& d = s.dims;
  return to_first ? ir::SymShape({d[0], d[3], d[1], d[2]}) : ir::SymShape({d[0], d[2], d[3], d[1]});
}

// FusedConv: Conv's shape function; channels-last X and W are seen channels-first by it, and its
// output turned back.
Status infer_fused_conv(InferContext& c) {
  if (!parse_conv(c.node).channels_last) return like<kConv, 3>(c);
  for (int i = 0; i < 2; ++i)
    if (c.has(i) && c.shape(i).known && c.shape(i).rank() != 4) return c.error("channels_last convolutions are 2-D (4-D X and W)");
  std::vector<ir::Type> nchw;
  nchw.reserve(3);
  InferContext sub{c.node, {}, {}, {}};
  for (int i = 0; i < 3 && i < c.num_inputs(); ++i) {
    nchw.push_back(c.has(i) ? c.type(i) : ir::Type{});
    if (c.has(i) && i < 2) nchw.back().shape = permuted(c.shape(i), true);
  }
  for (int i = 0; i < static_cast<int>(nchw.size()); ++i) {
    sub.in.push_back(c.has(i) ? &nchw[i] : nullptr);
    sub.in_value.push_back(nullptr);  // W's value is channels-last: Conv's inference reads shapes only
  }
  sub.out.resize(1);
  sub.out[0].kind = ir::Type::Kind::kUnknown;
  Status st = like<kConv, 3>(sub);
  if (!st.ok()) return st;
  c.out[0] = sub.out[0];
  c.out[0].shape = permuted(sub.out[0].shape, false);
  // Output 1 (passes/conv_pool.cpp): Y's mean over H and W, [N, 1, 1, M].
  if (c.out.size() > 1) {
    c.out[1] = c.out[0];
    if (c.out[0].shape.known) {
      ir::SymShape pooled = c.out[0].shape;
      pooled.dims[1] = ir::Dim(1);
      pooled.dims[2] = ir::Dim(1);
      c.out[1].shape = pooled;
    }
  }
  return Status::Ok();
}
// ChannelsLastPool: the shape function of the op named by `op`, on the channels-first view.
Status infer_channels_last_pool(InferContext& c) {
  const ChannelsLastPoolParams p = parse_channels_last_pool(c.node);
  const OpDef* d = p.known ? find_op("", p.op) : nullptr;
  if (!d || !d->infer) return c.error("unknown pooling op '" + p.op + "'");
  if (!c.has(0)) return Status::Ok();
  if (c.shape(0).known && c.shape(0).rank() != 4) return c.error("channels-last pooling takes a 4-D input");
  ir::Type nchw = c.type(0);
  nchw.shape = permuted(c.shape(0), true);
  InferContext sub{c.node, {&nchw}, {nullptr}, {}};
  sub.out.resize(c.out.size());
  for (auto& o : sub.out) o.kind = ir::Type::Kind::kUnknown;
  KILN_RETURN_IF_ERROR(d->infer(sub));
  c.out[0] = sub.out[0];
  c.out[0].shape = permuted(sub.out[0].shape, false);
  return Status::Ok();
}

// ConvPool: [N, POH, POW, M] from X (channels-first or -last) and W [M, kh, kw, C]; int8 (y_zero_point's
// type) when quantized, else W's float type.
Status infer_conv_pool(InferContext& c) {
  const ConvPoolParams p = parse_conv_pool(c.node);
  if (!p.valid) return c.error("kernel_shape, strides, pads, pool_kernel, pool_strides and pool_pads must be given in full "
                               "(pool pads below the pool window)");
  if (!c.has(0) || !c.has(1)) return Status::Ok();
  c.out[0] = ir::Type::tensor(c.has(4) ? c.dtype(4) : c.has(3) ? DataType::kInt8 : c.dtype(1));
  const ir::SymShape& x = c.shape(0);
  const ir::SymShape& w = c.shape(1);
  if (!x.known || !w.known) return Status::Ok();
  if (x.rank() != 4 || w.rank() != 4) return c.error("X and W must be 4-D");
  std::vector<ir::Dim> dims = {x.dims[0], ir::Dim(), ir::Dim(), w.dims[0]};
  for (int i = 0; i < 2; ++i) {
    const ir::Dim& in = x.dims[p.x_channels_first ? 2 + i : 1 + i];
    if (!in.is_static()) continue;
    const int64_t pooled = p.pooled(i, in.value);
    if (pooled < 1) return c.error("the input is smaller than the convolution's or the pool's window");
    dims[1 + i] = ir::Dim(pooled);
  }
  c.out[0].shape = ir::SymShape(dims);
  return Status::Ok();
}

constexpr char kGemm[] = "Gemm";
constexpr char kMatMul[] = "MatMul";

// FusedMatMul: MatMul's shape function; output_dtype (passes::products_write_float) makes a half
// product's output float32.
Status infer_fused_matmul(InferContext& c) {
  KILN_RETURN_IF_ERROR((like<kMatMul, 2>(c)));
  const ir::Attribute* od = c.node.attr("output_dtype");
  if (!od && c.node.attr("output_columns")) return c.error("output_columns comes with output_dtype float32");
  if (!od || !c.has(0)) return Status::Ok();
  const DataType in = c.dtype(0), out = static_cast<DataType>(od->i);
  if (out != DataType::kFloat32 || (in != DataType::kUndefined && in != DataType::kFloat32 &&
                                    in != DataType::kFloat16 && in != DataType::kBFloat16))
    return c.error("output_dtype: float products may write float32, nothing else");
  if (c.has(2)) return c.error("output_dtype: a product with a bias writes its operands' dtype");
  c.out[0].dtype = out;
  // output_columns (CUDA only: passes::products_write_float): Y is the product's first columns.
  if (const ir::Attribute* oc = c.node.attr("output_columns")) {
    ir::SymShape& y = c.out[0].shape;
    if (oc->i <= 0 || (y.known && (y.rank() < 2 || (y.dims.back().is_static() && oc->i > y.dims.back().value))))
      return c.error("output_columns " + std::to_string(oc->i) + " is not a count of the product's columns");
    if (y.known) y.dims.back() = ir::Dim(oc->i);
  }
  return Status::Ok();
}

Status infer_skip_layer_norm(InferContext& c) {
  const int64_t simplified = c.node.attr_int("simplified", 0);
  if (simplified != 0 && simplified != 1) return c.error("simplified must be 0 or 1");
  if (simplified == 1 && c.has(3)) return c.error("a simplified (RMS) SkipLayerNorm takes no beta");
  if (!c.has(0) || !c.has(1)) return Status::Ok();
  ir::Type t = ir::Type::tensor(c.dtype(0), broadcast_sym(c.shape(0), c.shape(1)));
  for (auto& o : c.out) o = t;
  return Status::Ok();
}

// mask_batch_period: the additive mask is [period, ...] of rank 4, and the batch a multiple of the
// period (where the shapes say).
Status check_mask_period(InferContext& c, const FusedAttentionParams& p) {
  if (p.mask_batch_period < 0) return c.error("mask_batch_period must be >= 0");
  if (p.mask_batch_period == 0) return Status::Ok();
  if (!c.has(3)) return c.error("mask_batch_period is given without an additive mask");
  const ir::SymShape& m = c.shape(3);
  if (m.known && (m.rank() != 4 || (m.dims[0].is_static() && m.dims[0].value != p.mask_batch_period)))
    return c.error("a mask with batch period " + std::to_string(p.mask_batch_period) + " must be [" +
                   std::to_string(p.mask_batch_period) + ", H|1, S|1, T|1]");
  const ir::SymShape& q = c.shape(0);
  const int bd = p.sequence_first ? 1 : 0;
  if (q.known && q.rank() == 3 && q.dims[bd].is_static() && q.dims[bd].value % p.mask_batch_period != 0)
    return c.error("the batch (" + std::to_string(q.dims[bd].value) + ") is not a multiple of mask_batch_period (" +
                   std::to_string(p.mask_batch_period) + ")");
  return Status::Ok();
}

Status infer_attention(InferContext& c) {
  if (!c.has(0) || !c.has(2)) return Status::Ok();
  const FusedAttentionParams p = parse_fused_attention(c.node);
  KILN_RETURN_IF_ERROR(check_mask_period(c, p));
  c.out[0] = ir::Type::tensor(c.dtype(0));
  const ir::SymShape& q = c.shape(0);
  const ir::SymShape& v = c.shape(2);
  if (std::string why = fused_attention_attrs_error(p); !why.empty()) return c.error(why);
  if (p.heads_first) {
    // Q [B, H, S, D], V [B, Hkv, T, Dv] → Y [B, S, H, Dv]
    if (!q.known || !v.known) return Status::Ok();
    if (q.rank() != 4 || v.rank() != 4) return c.error("heads-first Q and V must be 4-D ([batch, heads, sequence, head_size])");
    if (p.num_heads > 0 && q.dims[1].is_static() && q.dims[1].value != p.num_heads) return c.error("Q's heads are not num_heads");
    c.out[0].shape = ir::SymShape({q.dims[0], q.dims[2], q.dims[1], v.dims[3]});
    return Status::Ok();
  }
  if (!q.known || !v.known) return Status::Ok();
  if (q.rank() != 3 || v.rank() != 3) return c.error("Q and V must be 3-D ([batch, sequence, heads * head_size], or sequence-first)");
  ir::Dim hv = v.dims[2];
  if (p.packed_qkv) {
    if (hv.is_static() && hv.value % 3 != 0) return c.error("a packed QKV's last dim is not 3 equal parts");
    hv = hv.is_static() ? ir::Dim(hv.value / 3) : ir::Dim();
  }
  // With fewer K/V heads (kv_num_heads), Y has V's head size times the query heads.
  if (p.kv_num_heads > 0 && p.kv_num_heads != p.num_heads)
    hv = hv.is_static() && hv.value % p.kv_num_heads == 0 ? ir::Dim(hv.value / p.kv_num_heads * p.num_heads) : ir::Dim();
  c.out[0].shape = ir::SymShape({q.dims[0], q.dims[1], hv});
  return Status::Ok();
}

// Rotary: Y has X's type; COS and SIN X's dtype.
Status infer_rotary(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  for (int i : {1, 2})
    if (c.has(i) && c.dtype(i) != DataType::kUndefined && c.dtype(0) != DataType::kUndefined && c.dtype(i) != c.dtype(0))
      return c.error("COS and SIN must have X's dtype");
  const ir::SymShape& x = c.shape(0);
  if (x.known && (x.rank() < 1 || (x.dims.back().is_static() && x.dims.back().value % 2)))
    return c.error("X's last dim must be even (rotate_half splits it in two)");
  c.out[0] = c.type(0);
  return Status::Ok();
}

// QConv / QMatMul (passes/fuse_qdq.cpp): the float op's shape function on X (input 0) and W (input 3);
// the output is float32 (or the output_dtype attribute's float type), or y_zero_point's type when
// y_scale is given.
// A channels-last QConv (passes/channels_last.cpp: X [N,H,W,C], W [M,kh,kw,C/group]) is seen
// channels-first by Conv's shape function and its output turned back.
template <const char* Op>
Status infer_quantized(InferContext& c) {
  if (!c.has(0) || !c.has(3)) return Status::Ok();
  const OpDef* d = find_op("", Op);
  const bool nhwc = parse_conv(c.node).channels_last;
  ir::Type x = c.type(0), w = c.type(3);
  if (nhwc) {
    if ((x.shape.known && x.shape.rank() != 4) || (w.shape.known && w.shape.rank() != 4))
      return c.error("channels_last convolutions are 2-D (4-D X and W)");
    x.shape = permuted(x.shape, true);
    w.shape = permuted(w.shape, true);
  }
  InferContext sub{c.node, {&x, &w}, {nhwc ? nullptr : c.in_value[0], nhwc ? nullptr : c.in_value[3]}, {}};
  sub.out.resize(1);
  sub.out[0].kind = ir::Type::Kind::kUnknown;
  KILN_RETURN_IF_ERROR(d->infer(sub));
  c.out[0] = sub.out[0];
  if (nhwc) c.out[0].shape = permuted(sub.out[0].shape, false);
  // A float output may be float16 (QMatMul's output_dtype, set by passes::products_write_half).
  const auto float_out = static_cast<DataType>(c.node.attr_int("output_dtype", static_cast<int64_t>(DataType::kFloat32)));
  c.out[0].dtype = c.has(6) && c.has(7) ? c.dtype(7) : float_out;
  return Status::Ok();
}

// F8MatMul: A [..., K] and B8 [N, K] → [..., N] in A's dtype.
Status infer_f8_matmul(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = ir::Type::tensor(c.dtype(0));
  if (c.has(1) && c.dtype(1) != DataType::kFloat8E4M3FN) return c.error("B must be float8e4m3fn");
  const DataType at = c.dtype(0);
  if (at != DataType::kUndefined && at != DataType::kFloat32 && at != DataType::kFloat16 && at != DataType::kBFloat16)
    return c.error("A must be float32, float16 or bfloat16");
  const ir::SymShape& a = c.shape(0);
  if (!c.has(1) || !a.known || !c.shape(1).known) return Status::Ok();
  const ir::SymShape& b = c.shape(1);
  if (a.rank() < 2 || b.rank() != 2) return c.error("A must have rank >= 2 and B8 rank 2 ([N, K])");
  if (a.dims.back().is_static() && b.dims[1].is_static() && a.dims.back().value != b.dims[1].value)
    return c.error("A's last dim differs from B8's K");
  std::vector<ir::Dim> dims = a.dims;
  dims.back() = b.dims[0];
  c.out[0].shape = ir::SymShape(dims);
  return Status::Ok();
}

Status infer_channel_affine(InferContext& c) {
  const ChannelAffineParams p = parse_channel_affine(c.node);
  if (!p.error.empty()) return c.error(p.error);
  if (!c.has(0)) return Status::Ok();
  const DataType dt = c.dtype(0);
  if (dt != DataType::kUndefined && dt != DataType::kFloat32 && dt != DataType::kFloat16 && dt != DataType::kBFloat16)
    return c.error("X must be float32, float16 or bfloat16");
  for (int i = 1; i < 3; ++i)
    if (c.has(i) && c.dtype(i) != DataType::kUndefined && c.dtype(i) != DataType::kFloat32)
      return c.error("scale and shift must be float32");
  const ir::SymShape& x = c.shape(0);
  if (x.known) {
    if (x.rank() < 2) return c.error("X must have rank >= 2");
    const ir::Dim& ch = p.channels_last ? x.dims.back() : x.dims[1];
    for (int i = 1; i < 3; ++i)
      if (c.has(i) && c.shape(i).known && c.shape(i).is_static() && ch.is_static() &&
          shape_numel(c.shape(i).to_static()) != ch.value)
        return c.error("scale and shift must have one value per channel (" + std::to_string(ch.value) + ")");
  }
  c.out[0] = c.type(0);
  return Status::Ok();
}

}  // namespace

void add_fused_ops(std::vector<OpDef>& t) {
  auto add = [&t](const char* name, InferFn infer, int min_in, int max_in, int min_out, int max_out) {
    OpDef d{name, "kiln", 1, infer};
    d.min_inputs = min_in, d.max_inputs = max_in, d.min_outputs = min_out, d.max_outputs = max_out;
    t.push_back(std::move(d));
  };
  add("FusedConv", infer_fused_conv, 2, 4, 1, 2);
  add("FusedGemm", like<kGemm, 3>, 2, 3, 1, 1);
  add("FusedMatMul", infer_fused_matmul, 2, 3, 1, 1);
  add("SkipLayerNorm", infer_skip_layer_norm, 3, 4, 1, 2);
  add("Attention", infer_attention, 3, 5, 1, 1);
  add("Rotary", infer_rotary, 3, 3, 1, 1);
  add("ChannelsLastPool", infer_channels_last_pool, 1, 1, 1, 1);
  add("ChannelAffine", infer_channel_affine, 3, 3, 1, 1);
  add("ConvPool", infer_conv_pool, 2, 5, 1, 1);
  add("QConv", infer_quantized<kConv>, 5, 11, 1, 1);
  add("QMatMul", infer_quantized<kMatMul>, 5, 9, 1, 1);
  add("F8MatMul", infer_f8_matmul, 2, 3, 1, 1);
}

Expected<F8MatMulParams> parse_f8_matmul(const ir::Node& n) {
  F8MatMulParams p;
  p.a_scale = n.attr_float("a_scale", 0);
  p.b_scale = n.attr_float("b_scale", 0);
  if (!(p.a_scale > 0) || !(p.b_scale > 0) || !std::isfinite(p.a_scale) || !std::isfinite(p.b_scale))
    return invalid_argument(n.describe() + ": a_scale and b_scale must be positive");
  std::string why;
  if (!read_activation(n, &p.act, &why)) return invalid_argument(n.describe() + ": " + why);
  return p;
}

}  // namespace kiln::ops
