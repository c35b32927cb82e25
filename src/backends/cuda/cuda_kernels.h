// backends/cuda/cuda_kernels.h — plain launchers for kiln's own CUDA kernels (*.cu).
//
// Host code calls these with device pointers, sizes and a stream; no CUDA header is needed. Each
// launcher queues work on `stream` and returns the launch's error code (0 = cudaSuccess); it never
// synchronizes.
#pragma once

#include <cstdint>

// Compiled by nvcc as C++17: this header includes no kiln header (they need C++20) but
// the ops/*_math.h headers, which are written for both.
#include "ops/grid_math.h"
#include "ops/optimizer_math.h"
#include "ops/rnn_math.h"
#include "ops/resize_math.h"

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // NOLINT: same typedef as cuda_runtime_api.h

namespace kiln::cuda {

constexpr int kMaxRank = 8;

// Element types, by their ONNX numbers (the same as kiln::DataType's).
enum Elem : int {
  kElemF32 = 1, kElemU8 = 2, kElemI8 = 3, kElemU16 = 4, kElemI16 = 5, kElemI32 = 6, kElemI64 = 7, kElemBool = 9,
  kElemF16 = 10, kElemF64 = 11, kElemU32 = 12, kElemU64 = 13, kElemBF16 = 16,
};

enum class UnaryOp : int {
  kRelu, kSigmoid, kTanh, kExp, kLog, kSqrt, kAbs, kNeg, kErf, kLeakyRelu, kClip, kGelu, kGeluTanh,
  kHardSigmoid, kHardSwish, kReciprocal, kFloor, kCeil, kRound, kSin, kCos, kSoftplus, kSoftsign, kSilu, kElu,
  kSelu, kCelu, kMish, kThresholdedRelu, kSign, kIsNaN, kNot, kTan, kAtan, kAsin, kAcos, kSinh, kCosh,
  kAsinh, kAcosh, kAtanh, kShrink, kBitNot, kSwish,
};
// y = op(x) over n elements of a float type (f32, f16, bf16 in float; f64 in double; Not: bool;
// Abs/Neg/Sign: also i32/i64);
// IsNaN writes bool. `alpha`/`beta` are the op's parameters (LeakyRelu's alpha, Clip's min/max, ...).
int launch_unary(UnaryOp op, int elem, const void* x, void* y, int64_t n, float alpha, float beta, cudaStream_t stream);

// y[i] = E4M3(x[i] · inv_scale) for n values of a float type (f32, f16, bf16): nearest even, saturating
// at ±448 (kiln.F8MatMul's activation; eight values per thread when x and y are 16-byte aligned and n
// is a multiple of 8, else one).
int launch_quantize_e4m3(int elem, const void* x, uint8_t* y, int64_t n, float inv_scale, cudaStream_t stream);

// In place, the epilogue of a fused convolution or GEMM: y[i] = act(y[i] + bias[(i / inner) % channels] + z[i])
// (bias and the residual z nullable; act: apply `op` with alpha/beta as launch_unary does). Float
// types, computed in float; 8 values per thread for 2-byte types with the bias along the last dim.
int launch_bias_act(int elem, void* y, const void* bias, const void* z, int64_t n, int64_t channels, int64_t inner, bool act,
                    UnaryOp op, float alpha, float beta, cudaStream_t stream);

// y [rows, cols] float32 = the first cols columns of x [rows, pitch] (float16 or bfloat16, `elem`),
// widened: a padded half GEMM's output written as the model's float32 columns. x and y 16-byte
// aligned, pitch a multiple of 8 and >= cols (else cudaErrorInvalidValue).
int launch_widen_rows(int elem, const void* x, float* y, int64_t rows, int64_t cols, int64_t pitch, cudaStream_t stream);

// Concat as one launch for up to kConcatMaxParts inputs: part i copies `outer` rows of width[i] bytes
// from part[i] (rows contiguous) to dst + offset[i], rows `pitch` bytes apart. Each part moves pieces
// of 16, 8, 4, 2 or 1 bytes, the largest its pointers, width, offset and pitch allow.
constexpr int kConcatMaxParts = 32;
struct ConcatParts {
  const void* part[kConcatMaxParts];  // Concat reads them; launch_split writes them
  int64_t width[kConcatMaxParts];
  int64_t offset[kConcatMaxParts];
  int count = 0;
};
int launch_concat(const ConcatParts& parts, void* dst, int64_t outer, int64_t pitch, cudaStream_t stream);
// Split, the reverse: part i copies `outer` rows of width[i] bytes from src + offset[i] (rows `pitch`
// bytes apart) to parts.part[i] (rows contiguous).
int launch_split(const void* src, const ConcatParts& parts, int64_t outer, int64_t pitch, cudaStream_t stream);

// kiln.ChannelAffine: y[i] = act(x[i] · scale[c] + shift[c]), c = (i / inner) % channels (inner 1:
// channels last); x and y of a float type, scale and shift float32, computed in float. 8 values per
// thread for 2-byte types with channels last, channels % 8 == 0 and 16-byte aligned pointers.
int launch_channel_affine(int elem, const void* x, void* y, const float* scale, const float* shift, int64_t n, int64_t channels,
                          int64_t inner, bool act, UnaryOp op, float alpha, float beta, cudaStream_t stream);

// kiln.QMatMul (cuda_gemm.cpp), around cuBLASLt's int8 product. launch_int8_rows: A [m, k] (uint8 or
// int8) as int8 rows of kp (% 4 == 0) bytes for the product: uint8 values shifted by -128, columns
// from k on zero. launch_int8_epilogue: v = scale[j] · acc[i · ldacc + j] + offset[j], the activation
// (as launch_unary), then y [m, n] as float32 (out_type 0), float16 (3, rounded to nearest even) or
// saturate(rne(v / ys) + yz) as uint8 (1) or int8 (2), QuantizeLinear's rounding.
// kiln.QConv's 1x1 convolutions (cuda_qgemm.cu): channels-last int8 X [N, ih, iw, K] read at the
// pixels (n, oy·stride, ox·stride) of Y [N, oh, ow, M] (rows = N·oh·ow), times int8 W [M, K]; int32
// accumulation, then v = acc · scale[m] + bias[m] (+ zmul · Z[row, m], Z int8 of Y's shape), ReLU,
// and Y as int8 (round half to even, saturated) or float32. K % 16 == 0 and M % 4 == 0 (qgemm_fits);
// tile_n: 64 or 128 output channels per block.
struct QGemmArgs {
  const int8_t* x = nullptr;
  const int8_t* w = nullptr;
  const float* scale = nullptr;
  const float* bias = nullptr;
  const int8_t* z = nullptr;
  float zmul = 0.f;
  void* y = nullptr;
  int64_t rows = 0;
  int k = 0, m = 0, ih = 0, iw = 0, oh = 0, ow = 0, stride = 1;
  bool relu = false, int8_out = true;  // int8_out: an 8-bit output (int8, or E4M3 with fp8)
  bool fp8 = false;                    // x, w, z and an 8-bit y are E4M3 bytes (FP8 engines; sm_89+)
};
bool qgemm_fits(int64_t k, int64_t m);
// The streaming form (resident blocks walking pixel tiles, the next tile's reads in flight): K <= 256,
// M % 16 == 0, int8 out.
bool qgemm_stream_fits(int64_t k, int64_t m, bool int8_out);
int launch_qgemm(const QGemmArgs& a, int tile_n, bool streaming, cudaStream_t stream);

// kiln.ConvPool (cuda_conv_pool.cu): an image network's stem in one kernel — a convolution of C <= 4
// input channels into 64 (float16 tensor cores, float32 sums), + bias, ReLU, a max pool, and
// QuantizeLinear (int8 out: rne(half(v) / scale) + zero, saturated) or float16 out. X [N, C, H, W]
// (x_nchw: the model's own input, the Cast and Transpose to channels-last folded in) or [N, H, W, C],
// float32 or float16; W packed by conv_pool_pack_k: row m holds kernel row r's taps at
// [r·lp, r·lp + kw·cs) as (column, channel) with cs channels per column (the extra ones zero); Y
// [N, poh, pow, 64]. Pads and windows explicit (no dilation); every pool window must hold a
// convolution output (pool pads < pool kernel).
struct ConvPoolArgs {
  const void* x = nullptr;
  const uint16_t* w = nullptr;  // float16 [64, kp]
  const float* bias = nullptr;  // [64]
  void* y = nullptr;
  bool x_f32 = false, x_nchw = false, relu = false, int8_out = false;
  bool x_vec = false;  // set by launch_conv_pool: float32 channels-first rows in aligned 16-byte chunks
  float y_scale = 1.f;
  int y_zero = 0;
  int n = 0, c = 0, h = 0, w_in = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, oh = 0, ow = 0;
  int pkh = 1, pkw = 1, psh = 1, psw = 1, pph = 0, ppw = 0, poh = 0, pow = 0;
  int cs = 0, lp = 0, kp = 0;
};
// Channels per column in shared memory (cs: c, or c + 1 where a column's first element would fall
// on an odd float16 offset), a kernel row's K (lp, even) and the whole K (kp, a multiple of 16).
void conv_pool_pack_k(int c, int kh, int kw, int sw, int* cs, int* lp, int* kp);
// Shared memory one block needs (0 when the geometry is beyond the kernel: then it is not run).
size_t conv_pool_smem(const ConvPoolArgs& a);
int launch_conv_pool(const ConvPoolArgs& a, cudaStream_t stream);

int launch_int8_rows(const uint8_t* a, bool from_uint8, int8_t* out, int64_t m, int64_t k, int64_t kp, cudaStream_t stream);
int launch_int8_epilogue(const int32_t* acc, int64_t ldacc, const float* scale, const float* offset, void* y, int64_t m,
                         int64_t n, bool act, UnaryOp op, float alpha, float beta, int out_type, float ys, int32_t yz,
                         cudaStream_t stream);

enum class BinaryOp : int {
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kFirst, kMod, kFmod, kEqual, kLess, kLessEqual, kGreater, kGreaterEqual,
  kAnd, kOr, kXor, kBitAnd, kBitOr, kBitXor, kPRelu, kShiftLeft, kShiftRight,
};
// Comparisons (kEqual..kGreaterEqual) write bool; the others write the inputs' type.
inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::kEqual && op <= BinaryOp::kGreaterEqual; }

// Output dims and element strides of both inputs (0 along broadcast dims), innermost last.
struct BroadcastIndex {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
};
#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
// The offsets into a and b of flat output element i (on the host and in kernels).
KILN_HOST_DEVICE inline void broadcast_offsets(const BroadcastIndex& idx, int64_t i, int64_t& ia, int64_t& ib) {
  ia = ib = 0;
  for (int d = idx.rank - 1; d >= 0; --d) {
    const int64_t c = i % idx.dims[d];
    i /= idx.dims[d];
    ia += c * idx.a_strides[d];
    ib += c * idx.b_strides[d];
  }
}
// y[i] = op(a[ia], b[ib]) for every output element; kFirst copies a (b may be null): a broadcast copy.
// `elem` is the inputs' type: f32/f16/bf16 compute in float; f64, i8..i64, u8..u64 in their own type;
// kAnd/kOr/kXor take bool.
int launch_binary(BinaryOp op, int elem, const void* a, const void* b, void* y, int64_t n, const BroadcastIndex& index,
                  cudaStream_t stream);

// y[i] *= scale in place over n elements of a float type (float64 in double).
int launch_scale(int elem, void* y, int64_t n, double scale, cudaStream_t stream);

// Three-way broadcast (Where): dims of the output, element strides of each input (0 where broadcast).
struct Broadcast3Index {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};
};
// y[i] = cond[ic] ? x[ix] : z[iz], elements of `elem_bytes` (1, 2, 4 or 8) bytes.
int launch_where(const bool* cond, const void* x, const void* z, void* y, int64_t n, int elem_bytes,
                 const Broadcast3Index& index, cudaStream_t stream);

// y = x converted element by element (every pair of the types in Elem).
int launch_cast(const void* x, int from, void* y, int to, int64_t n, cudaStream_t stream);

// y[o, j, i] = data[o, indices[j], i] for data viewed as [outer, axis_dim, inner] (inner in elements of
// `elem_bytes`); negative indices count from the end; indices outside [-axis_dim, axis_dim) give zeros.
int launch_gather(const void* data, const void* indices, bool indices64, void* y, int64_t outer, int64_t axis_dim,
                  int64_t inner, int64_t n_indices, int elem_bytes, cudaStream_t stream);

// Fills n elements of `elem_bytes` bytes with the bit pattern `bits` (its low bytes).
int launch_fill(void* y, int64_t n, int elem_bytes, uint64_t bits, cudaStream_t stream);
// y[i] = start + i·delta (integer types use the int64 pair, float types the double pair).
int launch_range(void* y, int elem, int64_t n, int64_t istart, int64_t idelta, double start, double delta,
                 cudaStream_t stream);

// Reductions over any set of axes: output element o reads input offset base(o) + Σ over the reduced
// index r of offset(r). `out_*` describe the kept dims (output order) with their input strides,
// `red_*` the reduced dims with theirs.
struct ReduceIndex {
  int out_rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t out_strides[kMaxRank] = {};
  int red_rank = 0;
  int64_t red_dims[kMaxRank] = {};
  int64_t red_strides[kMaxRank] = {};
  int64_t red_count = 1;
};
enum class ReduceOp : int { kSum, kMean, kMax, kMin, kProd, kSumSquare, kL1, kL2, kLogSum, kLogSumExp };
// Float types (f32/f16/bf16 accumulate in float, f64 in double), i32 and i64 (Sum/Mean/Max/Min/Prod).
// An empty reduction gives the op's identity (Max: -inf, Min: +inf, LogSum(Exp): -inf).
int launch_reduce(ReduceOp op, int elem, const void* x, void* y, int64_t n_out, const ReduceIndex& index,
                  cudaStream_t stream);
// ArgMax/ArgMin along one reduced dim (index.red_rank == 1): the first (or, `last`, the last) extreme.
int launch_arg_reduce(bool max, bool last, int elem, const void* x, int64_t* y, int64_t n_out,
                      const ReduceIndex& index, cudaStream_t stream);

// Softmax (or log-softmax) of x viewed as [outer, axis, inner] along `axis`; float types, computed in
// float (float64 in double).
int launch_softmax(int elem, const void* x, void* y, int64_t outer, int64_t axis, int64_t inner, bool log,
                   cudaStream_t stream);

// Layer normalization of x viewed as [rows, n] (statistics in float):
//   s = x + skip (skip: null, or rows of n repeated over x's rows, see skip_rows) + bias ([n] or null),
//   y = (s - mean) · rsqrt(var + eps) · gamma + beta   (rms: y = s · rsqrt(mean(s²) + eps) · gamma + beta).
// `sum` (nullable) receives s; `mean`/`inv_std` (nullable, float) the per-row statistics. Float types.
struct LayerNormArgs {
  int elem = kElemF32;
  const void* x = nullptr;
  const void* skip = nullptr;
  int64_t skip_rows = 0;     // rows of skip (0: one per row of x); row r of x adds skip row r % skip_rows
  const void* bias = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  void* y = nullptr;
  void* sum = nullptr;
  float* mean = nullptr;
  float* inv_std = nullptr;
  int64_t rows = 0, n = 0;
  float epsilon = 1e-5f;
  bool rms = false;
};
int launch_layer_norm(const LayerNormArgs& a, cudaStream_t stream);

// kiln.Attention: y[b, s, h·Dv + e] = Σ_t softmax_t(x[b, h, s, t]) · v[b, t, h·Dv + e] with
// x = scale · Σ_d q[b, s, h·D + d] · k[b, t, h·D + d], then x = fill where cond == fill_where_true,
// then x += mask. mask (the inputs' type) and cond (bool) are read through element strides over
// [B, H, S, T] (0 along broadcast dims); either may be null. Float types; D, Dv ≤ kMaxAttentionHead.
constexpr int kMaxAttentionHead = 128;
// The implementations launch_attention offers for float16/bfloat16 (the Attention kernel's tactics):
// fa2/fa4/fa8 the register-resident mma.sync kernel with 2, 4 or 8 warps per block (head sizes 64,
// 128), wmma the WMMA kernel (head sizes multiples of 16), fp2/fp4/fp8 the register-resident kernel
// with its K and V tiles double-buffered by asynchronous copies (head sizes 32, 64, 128). Auto is fp4
// where it applies, else fa4 where that does.
enum AttentionVariant : int {
  kAttentionAuto = 0,
  kAttentionFa2,
  kAttentionFa4,
  kAttentionFa8,
  kAttentionWmma,
  kAttentionFp2,
  kAttentionFp4,
  kAttentionFp8,
  kAttentionVariants
};

struct AttentionArgs {
  int elem = kElemF32;
  int variant = kAttentionAuto;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* mask = nullptr;
  const bool* cond = nullptr;
  void* y = nullptr;
  int64_t b = 0, s = 0, t = 0, heads = 0;
  int64_t kv_group = 1;  // query heads per K/V head (grouped-query attention): head h reads K/V head h / kv_group
  int d = 0, dv = 0;
  float scale = 1.f, fill = 0.f;
  bool fill_where_true = false;
  bool zero_nan_rows = false;  // a row whose probabilities are NaN gives a zero context row
  bool packed_qkv = false;     // q, k, v point into one [B, S, 3*H*D] tensor (its column blocks)
  bool has_mask = false, has_cond = false;  // the additive and the bool mask are inputs (planned before their pointers)
  int64_t ms[4] = {}, cs[4] = {};
  // The additive mask's batch period (kiln.Attention's mask_batch_period): batch entry b reads mask
  // entry b % mask_period along ms[0]; 0 = entry b (ms[0] is then 0 or the batch stride).
  int64_t mask_period = 0;
  // Element strides of one sequence step (row), one head and one batch entry of Q, K, V and Y, as
  // ops::attention_geometry gives them (batch-first, sequence-first, packed or heads-first tensors;
  // Y's heads are Dv apart).
  int64_t q_row = 0, k_row = 0, v_row = 0, y_row = 0, q_batch = 0, k_batch = 0, v_batch = 0, y_batch = 0;
  int64_t q_head = 0, k_head = 0, v_head = 0;
};
int launch_attention(const AttentionArgs& a, cudaStream_t stream);

// Depthwise 2-D convolution, channels-last (cuda_depthwise.cu): X [N,H,W,C], W [C,kh,kw,1], Y
// [N,OH,OW,C] (OH, OW as the window gives them), y = act(conv + bias[c] + z) with bias (C values) and
// the residual z (Y's shape) nullable and `relu` the activation; float types, float math. The
// workspace holds the weights rearranged (depthwise_workspace_bytes).
struct DepthwiseArgs {
  int elem = kElemF32;
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;
  const void* z = nullptr;
  void* y = nullptr;
  int64_t n = 0, h = 0, w_ = 0, c = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0;
  bool relu = false;
};
size_t depthwise_workspace_bytes(int64_t c, int kh, int kw);
int launch_depthwise_nhwc(const DepthwiseArgs& a, void* workspace, cudaStream_t stream);
// Whether these shapes and dtype (no pointers needed) take the register-resident kernels, so that the
// variants above are worth timing.
bool attention_variants_apply(const AttentionArgs& a);
// Whether variant v (an AttentionVariant other than auto) runs these shapes and dtype.
bool attention_variant_applies(const AttentionArgs& a, int v);

// A strided copy: y[i] = x[base + Σ_k c_k · in_strides[k]] where c is i's index over out_dims. Covers
// Transpose (permuted strides), Slice (step-multiplied strides, a base offset; negative strides allowed)
// and Expand (stride 0 along broadcast dims).
struct StridedIndex {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
  int64_t base = 0;
};
using TransposeIndex = StridedIndex;
// Any element type of 1, 2, 4 or 8 bytes.
int launch_strided_copy(const void* x, void* y, int64_t n, int elem_bytes, const StridedIndex& index,
                        cudaStream_t stream);
inline int launch_transpose(const void* x, void* y, int64_t n, int elem_bytes, const TransposeIndex& index,
                            cudaStream_t stream) {
  return launch_strided_copy(x, y, n, elem_bytes, index, stream);
}

// 2-D pooling over NCHW. Pads are begin (top/left) and end (bottom/right).
struct PoolParams {
  int64_t nc = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  bool max = true;
  bool count_include_pad = false;
  int64_t c = 0;  // channels-last (X [N,H,W,C], Y [N,OH,OW,C]) with C = c channels; 0: NCHW
};
// Float types (f32/f16/bf16), computed in float.
int launch_pool2d(int elem, const void* x, void* y, const PoolParams& p, cudaStream_t stream);

// Global max/average pooling of channels-last X [N, HW, C] → Y [N, C] (float types, computed in
// float). Large HW is split over `global_pool_splits` blocks per channel tile, with partial results
// in `workspace` (global_pool_workspace bytes; null when that is 0).
int64_t global_pool_splits(int64_t n, int64_t hw, int64_t c);
inline size_t global_pool_workspace(int64_t n, int64_t hw, int64_t c) {
  const int64_t s = global_pool_splits(n, hw, c);
  return s > 1 ? static_cast<size_t>(s * n * c) * sizeof(float) : 0;
}
int launch_global_pool_nhwc(int elem, const void* x, void* y, void* workspace, int64_t n, int64_t hw, int64_t c, bool max,
                            cudaStream_t stream);

// Copies rows of `c` elements into rows of `cp` >= c elements, the extra ones zero (channel padding
// of channels-last tensors).
int launch_pad_rows(int elem_bytes, const void* x, void* y, int64_t rows, int64_t c, int64_t cp, cudaStream_t stream);

// y[r] = mean (or max) of x[r, 0..n) for each of `rows` rows (float types).
int launch_reduce_rows(int elem, const void* x, void* y, int64_t rows, int64_t n, bool max, cudaStream_t stream);

// Inference batch normalization of x viewed as [outer, c, inner]; every operand of type `elem` (float types).
int launch_batchnorm(int elem, const void* x, const void* scale, const void* bias, const void* mean, const void* var,
                     void* y, int64_t outer, int64_t c, int64_t inner, float epsilon, cudaStream_t stream);

// y = x zero-padded in its last two dims: x is [nc, h, w], y is [nc, oh, ow] with x at (top, left).
int launch_pad2d(int elem_bytes, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow,
                 int64_t top, int64_t left, cudaStream_t stream);

// Resize (every mode but antialias): output dims, input strides, and per axis its mapping
// (ops/resize_math.h); each output element sums its taps' products along the resized axes, in double.
struct ResizeIndex {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
  bool resized[kMaxRank] = {};
  resize::Axis axes[kMaxRank] = {};
};
int launch_resize(int elem, const void* x, void* y, int64_t n, const ResizeIndex& index, const resize::Coef& coef,
                  double extrapolation, cudaStream_t stream);

// Cast where either side is a small type (float8 variants, float4e2m1, float8e8m0, int4/uint4,
// int2/uint2, one per byte) — `from`/`to` are ONNX dtype numbers; the CPU kernel's rules bit for bit.
// e8m0_round: 0 up, 1 down, 2 nearest.
int launch_cast_ext(const void* x, int from, void* y, int to, int64_t n, bool saturate, int e8m0_round, cudaStream_t stream);

// CumSum (product=false) / CumProd along the middle dim of (outer, len, inner); numeric types but bool.
int launch_cumulative(int elem, bool product, const void* x, void* y, int64_t outer, int64_t len, int64_t inner,
                      bool exclusive, bool reverse, cudaStream_t stream);
// Trilu over n elements of (..., rows, cols), any element size: keeps j - i >= k (upper) or <= k.
int launch_trilu(const void* x, void* y, int elem_bytes, int64_t n, int64_t rows, int64_t cols, int64_t k, bool upper,
                 cudaStream_t stream);

// GatherElements / ScatterElements: for element e of indices (dims ind_dims, row-major), the data
// offset of e's position with dim `axis` replaced by its index (negative counts from the end).
struct ElementsIndex {
  int rank = 0, axis = 0;
  int64_t axis_dim = 0;
  int64_t ind_dims[kMaxRank] = {};
  int64_t data_strides[kMaxRank] = {};
};
// GatherND / ScatterND: `tuples` index tuples of k components over data dims [batch, k dims, block];
// tuple t reads/writes the block at (t / per_batch)·batch_stride + Σ_j idx[t, j]·strides[j].
struct NdIndex {
  int k = 0;
  int64_t tuples = 0, block = 1, per_batch = 1, batch_stride = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};
enum class ScatterReduce : int { kNone, kAdd, kMul, kMax, kMin };
// An index outside [-dim, dim) reads zeros (gathers) or is skipped (scatters); the CPU kernels refuse it.
int launch_gather_elements(const void* x, const void* ind, bool ind64, void* y, int64_t n, const ElementsIndex& index,
                           int elem_bytes, cudaStream_t stream);
int launch_gather_nd(const void* x, const void* ind, bool ind64, void* y, const NdIndex& index, int elem_bytes,
                     cudaStream_t stream);
// In place on y (a copy of data): reduction kNone writes in parallel (duplicate indices: one of the
// writes wins, as the spec leaves it); the others apply every write in index order, so duplicates
// combine as the CPU kernel combines them. `elem`: numeric types (bool with kNone only).
int launch_scatter_elements(void* y, const void* ind, bool ind64, const void* upd, int64_t n, const ElementsIndex& index,
                            int elem, ScatterReduce reduce, cudaStream_t stream);
int launch_scatter_nd(void* y, const void* ind, bool ind64, const void* upd, const NdIndex& index, int elem,
                      ScatterReduce reduce, cudaStream_t stream);

// SoftmaxCrossEntropyLoss (softmax) / NegativeLogLikelihoodLoss over x [N, C, D] (D the trailing dims
// flattened), labels [N, D]; computed in double. reduction 0 none (loss [N, D] of x's type), 1 sum,
// 2 mean (a scalar; the per-position losses and weights go through `workspace`, 2·N·D doubles). A label
// outside [0, C) (and not ignore_index) gives NaN; the CPU kernel refuses it. log_prob (nullable, x's
// type and shape) receives log_softmax(x) when softmax.
struct LossArgs {
  int elem = kElemF32;
  const void* x = nullptr;
  const void* labels = nullptr;
  bool labels64 = true;
  const void* weight = nullptr;
  void* y = nullptr;
  void* log_prob = nullptr;
  double* workspace = nullptr;
  int64_t n = 0, c = 0, d = 1;
  bool softmax = false, has_ignore = false;
  int64_t ignore_index = 0;
  int reduction = 2;
};
int launch_loss(const LossArgs& a, cudaStream_t stream);

// The ONNX Attention op (23+): per (batch, query head) scores = scale·Q·Kᵀ over the past and new
// keys, softcap, the additive mask (bool: false → -inf), is_causal and nonpad_kv_seqlen, a row softmax
// (a fully masked row gives NaN), Y = P·V. Q/K/V are 4-D [B, H, S, D] or packed 3-D [B, S, H·D].
// Float types (f32/f16/bf16 computed in float, f64 in double). `workspace` holds K and V gathered
// with the past ([B, Hkv, T, D] unless written straight into present_k/present_v) and the scores.
struct OnnxAttentionArgs {
  int elem = kElemF32;
  const void *q = nullptr, *k = nullptr, *v = nullptr, *past_k = nullptr, *past_v = nullptr, *mask = nullptr;
  bool mask_bool = false;
  const int64_t* nonpad = nullptr;  // [B] valid key lengths, or null
  void *y = nullptr, *present_k = nullptr, *present_v = nullptr, *qk_out = nullptr, *workspace = nullptr;
  int64_t b = 0, hq = 0, hkv = 0, sq = 0, skv = 0, past = 0, d = 0, dv = 0;
  bool q_packed = false, kv_packed = false;
  double scale = 1, softcap = 0;
  bool causal = false;
  int mode = -1;  // qk_matmul_output_mode written to qk_out (when not null)
  int64_t mask_len = 0, mask_strides[4] = {};
};
size_t onnx_attention_workspace(const OnnxAttentionArgs& a);
int launch_onnx_attention(const OnnxAttentionArgs& a, cudaStream_t stream);

// Pad (and Tile, CenterCropPad, which are pads): output element c reads input c - before per dim;
// outside the input, mode 0 constant (`value_bits`, the element's bytes), 1 reflect, 2 edge, 3 wrap.
// Negative `before` crops. Any element size (1, 2, 4, 8 bytes).
struct PadIndex {
  int rank = 0, mode = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
  int64_t before[kMaxRank] = {};
};
int launch_pad(const void* x, void* y, int64_t n, int elem_bytes, const PadIndex& index, uint64_t value_bits,
               cudaStream_t stream);

// Hardmax over x viewed as [outer, len, inner] along the middle dim: 1 at the first maximum, 0
// elsewhere (float types). IsInf: bool y = x is +inf (positive) or -inf (negative), float types.
int launch_hardmax(int elem, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, cudaStream_t stream);
int launch_isinf(int elem, const void* x, bool* y, int64_t n, bool positive, bool negative, cudaStream_t stream);

// QuantizeLinear / DequantizeLinear with the CPU kernel's rules (backends/cpu/quant.cpp): types by
// ONNX number (the small types one per byte); the scale of element i by map_kind 0 per tensor, 1 per
// axis ((i / inner) % len), 2 blocked (block, blocks along the axis). Quantize divides in div_type
// (0 float, 1 double, 2 float16, 3 bfloat16), rounds half to even and saturates integers; float8
// saturates or not (`saturate`). Dequantize computes int32 in double, the rest in float.
struct QuantArgs {
  const void* x = nullptr;
  int x_code = 0;
  const void* scale = nullptr;
  int scale_code = 0;
  const void* zp = nullptr;  // nullable
  int zp_code = 0;
  void* y = nullptr;
  int y_code = 0;
  int64_t n = 0;
  int map_kind = 0;
  int64_t len = 1, inner = 1, block = 1, blocks = 1;
  bool saturate = true;
  int div_type = 0;
};
int launch_quantize(const QuantArgs& a, cudaStream_t stream);
int launch_dequantize(const QuantArgs& a, cudaStream_t stream);

// A window laid over n spatial dims (pooling, ConvTranspose, the integer convolutions): input and
// output sizes, kernel, strides, dilations and pads per dim (ops::window_geometry's result).
struct WindowIndex {
  int n = 0;
  int64_t in[kMaxRank] = {}, out[kMaxRank] = {}, kernel[kMaxRank] = {}, strides[kMaxRank] = {}, dilations[kMaxRank] = {},
          pad_begin[kMaxRank] = {}, pad_end[kMaxRank] = {};
  // Elements of one spatial plane of the input, of the output, and taps of the kernel.
  KILN_HOST_DEVICE int64_t in_size() const { return product(in); }
  KILN_HOST_DEVICE int64_t out_size() const { return product(out); }
  KILN_HOST_DEVICE int64_t kernel_size() const { return product(kernel); }
  KILN_HOST_DEVICE int64_t product(const int64_t* dims) const {
    int64_t p = 1;
    for (int d = 0; d < n; ++d) p *= dims[d];
    return p;
  }
};

// Generic N-d pooling (the CPU kernel's window walk, backends/cpu/nn_pool.cpp): X [planes, in...] →
// Y [planes, out...] over `n` spatial dims; kind 0 max (indices: int64 flat input positions per
// plane-major order, column-major within a plane when column_major), 1 average, 2 Lp (p). Computed
// in double; float types, float64, and int8/uint8 for max.
struct PoolNdArgs {
  int elem = kElemF32, kind = 0;
  int64_t planes = 0;
  WindowIndex win;
  bool count_include_pad = false, column_major = false;
  double p = 2;
  const void* x = nullptr;
  void* y = nullptr;
  int64_t* indices = nullptr;
};
int launch_pool_nd(const PoolNdArgs& a, cudaStream_t stream);

// GridSample over X [N, C, in...] (r spatial dims, r <= 4) with grid [N, out..., r] (normalized
// coordinates, the last spatial dim first); per dimension the taps of ops/grid_math.h, sums in double.
// AffineGrid: grid [N, out..., r] = theta [N, r, r+1] · (base coords, 1). Float types and float64.
struct GridSampleArgs {
  int elem = kElemF32, r = 0;
  int64_t n = 0, c = 0;
  int64_t in[4] = {}, out[4] = {};
  grid::Rule rule;
  const void* x = nullptr;
  const void* grid = nullptr;
  void* y = nullptr;
};
int launch_grid_sample(const GridSampleArgs& a, cudaStream_t stream);
int launch_affine_grid(int elem, const void* theta, void* y, int64_t n, int r, const int64_t* sizes, bool align,
                       cudaStream_t stream);

// ConvTranspose, direct (gather form): Y[n, m, o...] = B[m] + Σ over the group's input channels c and
// window offsets k of X[n, c, i...] · W[c, m mod Mg, k...] where o = i·stride - pad_begin + k·dilation.
// Any number of spatial dims (<= 6); float types in float, float64 in double.
struct ConvTransposeArgs {
  int elem = kElemF32;
  int64_t batch = 0, c = 0, m = 0, group = 1;
  WindowIndex win;
  const void *x = nullptr, *w = nullptr, *bias = nullptr;
  void* y = nullptr;
};
int launch_conv_transpose(const ConvTransposeArgs& a, cudaStream_t stream);

// Clip of numeric x (integers in their own type, floats in float/double) to [lo, hi].
int launch_clip(int elem, const void* x, void* y, int64_t n, double lo, double hi, cudaStream_t stream);
// EyeLike: y [rows, cols] of `elem_bytes` bytes, one_bits on the k-th diagonal, zeros elsewhere.
int launch_eye(void* y, int64_t rows, int64_t cols, int64_t k, int elem_bytes, uint64_t one_bits, cudaStream_t stream);
// OneHot: y[o, d, i] = values[1] where index[o, i] (negative: + depth) == d, else values[0]; indices of
// numeric type `index_elem` (floats truncate), values of `elem_bytes` bytes.
int launch_one_hot(const void* indices, int index_elem, const void* values, void* y, int64_t outer, int64_t depth,
                   int64_t inner, int elem_bytes, cudaStream_t stream);
// LpNormalization along the middle dim of [outer, len, inner], p 1 or 2 (a zero norm gives 0); float
// types in float, float64 in double.
int launch_lp_norm(int elem, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, int p, cudaStream_t stream);
// BitCast between types of one width: a byte copy, except 4-bit types (one per byte) whose high nibble
// is the sign extension for int4 and zero for uint4.
int launch_bitcast_nibbles(const uint8_t* x, uint8_t* y, int64_t n, bool to_int4, cudaStream_t stream);

// RotaryEmbedding (23+): X (B, H, S, Dh) or packed (B, S, H·Dh); cos/sin caches rows of rd/2, row of
// (b, s) = position_ids[b, s] (int64, nullable), else b·S + s (cache_rows_per_batch = S) or s. A
// position outside the cache gives NaN (the CPU kernel refuses it). Float types in float, f64 in double.
struct RotaryArgs {
  int elem = kElemF32;
  const void *x = nullptr, *cos = nullptr, *sin = nullptr;
  const int64_t* positions = nullptr;
  void* y = nullptr;
  int64_t b = 0, s = 0, h = 0, dh = 0, rd = 0, cache_rows = 0;
  bool packed = false, interleaved = false, per_batch_rows = false;
};
int launch_rotary(const RotaryArgs& a, cudaStream_t stream);

// kiln.Rotary: y = x·cos + rotate_half(x)·sin per row of d (even) elements, rotate_half(x) = [-x[d/2:],
// x[:d/2]]; cos and sin read with strides along x's outer dims (0 where broadcast) and along the row
// (ops::rotary_geometry). Float types, float math.
struct RotaryHalfArgs {
  int elem = kElemF32;
  const void *x = nullptr, *cos = nullptr, *sin = nullptr;
  void* y = nullptr;
  int64_t rows = 0, d = 0;
  int outer_rank = 0;
  int64_t outer[kMaxRank] = {}, cos_outer[kMaxRank] = {}, sin_outer[kMaxRank] = {};
  int64_t cos_last = 0, sin_last = 0;
};
int launch_rotary_half(const RotaryHalfArgs& a, cudaStream_t stream);

// CausalConvWithState (27+): depthwise causal 1-D convolution of [past (B, C, k-1), x (B, C, L)] with
// w (C, 1, k), bias (C) and SiLU (rounded to the input type first, as the reference); present (nullable)
// gets the last k-1 positions.
struct CausalConvArgs {
  int elem = kElemF32;
  const void *x = nullptr, *w = nullptr, *bias = nullptr, *past = nullptr;
  void *y = nullptr, *present = nullptr;
  int64_t b = 0, c = 0, l = 0, k = 1;
  bool silu = false;
};
int launch_causal_conv(const CausalConvArgs& a, cudaStream_t stream);

// LinearAttention (27+): a recurrent state S [dk, dv] per (batch, kv head), updated token by token
// (rule 0 linear, 1 gated, 2 delta, 3 gated delta), in float in `workspace` (B·Hk·dk·dv floats); one
// thread per state column. q/k/v packed (B, T, H·d); decay (B, T, Hk or Hk·dk), beta (B, T, Hk or 1).
struct LinearAttentionArgs {
  int elem = kElemF32, rule = 3;
  const void *q = nullptr, *k = nullptr, *v = nullptr, *past = nullptr, *decay = nullptr, *beta = nullptr;
  void *y = nullptr, *present = nullptr;
  float* workspace = nullptr;
  int64_t b = 0, t = 0, hq = 0, hk = 0, dk = 0, dv = 0, decay_w = 0, beta_w = 0;
  float scale = 1;
};
int launch_linear_attention(const LinearAttentionArgs& a, cudaStream_t stream);

// InstanceNormalization / GroupNormalization of x [N, C, S] over groups of C/groups channels (statistics
// in double, one thread per (n, group)); scale/bias per channel (numel C) or per group.
int launch_group_norm(int elem, const void* x, const void* scale, const void* bias, bool per_channel, void* y, int64_t n,
                      int64_t c, int64_t s, int64_t groups, double eps, cudaStream_t stream);
// LRN across channels of x [N, C, S].
int launch_lrn(int elem, const void* x, void* y, int64_t n, int64_t c, int64_t s, int64_t size, double alpha, double beta,
               double bias, cudaStream_t stream);
// Hann (0), Hamming (1) or Blackman (2) window of n points (periodic: denominator n, else n - 1), any
// numeric output type.
int launch_window(int kind, int elem, void* y, int64_t n, bool periodic, cudaStream_t stream);
// Batched MatMul by direct dot products (float64 and the integer types; the float types go through
// cuBLASLt): y[b, m, n] = Σ_k a[b, m, k] · b[b, k, n] with per-batch element offsets from the
// broadcast batch index (a_strides/b_strides over out batch dims; 0 where broadcast).
struct MatMulIndex {
  int rank = 0;  // batch dims
  int64_t dims[kMaxRank] = {}, a_strides[kMaxRank] = {}, b_strides[kMaxRank] = {};
  int64_t m = 1, n = 1, k = 1;
};
int launch_matmul_direct(int elem, const void* a, const void* b, void* y, const MatMulIndex& index, cudaStream_t stream);

// MatMulInteger (int32 y) and QLinearMatMul (int8/uint8 y = saturate(rint(acc·(sa·sb/sy)) + zy)) over
// int8/uint8 A and B with scalar zero points and scales (nullable zero points are 0); acc = Σ_k
// (a - za)(b - zb) in int32. Scales are float or float16 (`scale_f16`).
struct QMatMulArgs {
  MatMulIndex index;
  const void *a = nullptr, *b = nullptr, *za = nullptr, *zb = nullptr;
  bool a_signed = true, b_signed = true;
  bool qlinear = false, scale_f16 = false, y_signed = true;
  const void *sa = nullptr, *sb = nullptr, *sy = nullptr, *zy = nullptr;
  void* y = nullptr;
};
int launch_qmatmul(const QMatMulArgs& a, cudaStream_t stream);

// TopK along the middle dim of [outer, n, inner]: the k first in the order (largest: greater first;
// else smaller first), ties by lower index, NaN largest — the CPU kernel's order; one thread per line.
int launch_topk(int elem, const void* x, void* values, int64_t* indices, int64_t outer, int64_t n, int64_t inner, int64_t k,
                bool largest, cudaStream_t stream);
// DFT along the middle dim of x [outer, len, inner, 1 or 2] (real or complex) into y [outer, m, inner, 2 or
// 1]: a direct transform of length `n` in double (inverse: scaled by 1/n; onesided inverse: the half
// spectrum's Hermitian extension, real output). Float types and float64.
struct DftArgs {
  int elem = kElemF32;
  const void* x = nullptr;
  void* y = nullptr;
  int64_t outer = 1, len = 0, inner = 1, n = 0, m = 0;
  bool complex_in = false, inverse = false, real_out = false;
};
int launch_dft(const DftArgs& a, cudaStream_t stream);
// Col2Im: x [N, C·prod(block), L] summed into y [N, C, image...] (s spatial dims <= 6).
struct Col2ImArgs {
  int elem = kElemF32, s = 0;
  int64_t nc = 0, kprod = 1, l = 1;
  int64_t img[6] = {}, blk[6] = {}, nblk[6] = {}, str[6] = {}, dil[6] = {}, pad[6] = {};
  const void* x = nullptr;
  void* y = nullptr;
};
int launch_col2im(const Col2ImArgs& a, cudaStream_t stream);

// The training optimizers (ai.onnx.preview.training): per element of one X with its gradient G and
// state(s), optimizer::step (ops/optimizer_math.h, the CPU kernel's own) in double; outputs nullable.
// Float types and float64.
struct OptimizerArgs {
  int elem = kElemF32;
  optimizer::Attrs attrs;
  const void *x = nullptr, *g = nullptr, *s1 = nullptr, *s2 = nullptr;
  void *xo = nullptr, *s1o = nullptr, *s2o = nullptr;
  int64_t n = 0;
  double r = 0, t = 0;
};
int launch_optimizer(const OptimizerArgs& a, cudaStream_t stream);
// DynamicQuantizeLinear (float32 x): scale = (max(0, max x) - min(0, min x)) / 255, zero point the
// rounded clamped -min/scale, y = saturate(rint(x/scale) + zp) as uint8; scale/zp written to device
// memory by one block, then read by the quantizing kernel.
int launch_dynamic_quantize(const float* x, uint8_t* y, float* scale, uint8_t* zp, int64_t n, cudaStream_t stream);
// TensorScatter: y (a copy of past, [prefix, max_len, inner] around the axis) gets update [prefix, len,
// inner] written at write_indices[b] (+ s, modulo max_len when circular; outside the cache: skipped —
// the CPU kernel refuses it); per_batch prefixes per batch entry.
int launch_tensor_scatter(void* y, const void* update, const int64_t* write_indices, int64_t prefix, int64_t per_batch,
                          int64_t max_len, int64_t len, int64_t inner, int elem_bytes, bool circular, cudaStream_t stream);

// Einsum by its contraction plan (ops/einsum.h): each output element sums over the reduced labels the
// product of up to 4 inputs; up to 8 output and 8 reduced labels. Float types (in float), float64,
// int32, int64.
constexpr int kMaxEinsumInputs = 4;
struct EinsumArgs {
  int elem = kElemF32, inputs = 0, out_rank = 0, red_rank = 0;
  const void* in[kMaxEinsumInputs] = {};
  void* y = nullptr;
  int64_t out_sizes[kMaxRank] = {}, red_sizes[kMaxRank] = {};
  int64_t out_strides[kMaxEinsumInputs][kMaxRank] = {}, red_strides[kMaxEinsumInputs][kMaxRank] = {};
};
int launch_einsum(const EinsumArgs& a, cudaStream_t stream);

// Det of `count` m×m matrices (LU with partial pivoting in double, in `workspace`: count·m·m doubles).
int launch_det(int elem, const void* x, void* y, double* workspace, int64_t count, int64_t m, cudaStream_t stream);
// DeformConv (2-D): y [N, OC, OH, OW] from x sampled bilinearly at the offset (and masked) window taps.
struct DeformConvArgs {
  int elem = kElemF32;
  int64_t n = 0, c = 0, h = 0, w = 0, oc = 0, kh = 1, kw = 1, oh = 0, ow = 0;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, group = 1, offset_group = 1;
  const void *x = nullptr, *weight = nullptr, *offset = nullptr, *bias = nullptr, *mask = nullptr;
  void* y = nullptr;
};
int launch_deform_conv(const DeformConvArgs& a, cudaStream_t stream);
// MaxUnpool: y (zeroed here) gets x[i] at flat index ind[i] of the inferred shape, placed in y's
// (possibly larger) shape; an index outside the inferred shape is skipped (the CPU kernel refuses it).
struct UnpoolIndex {
  int rank = 0;
  int64_t inferred[kMaxRank] = {}, out[kMaxRank] = {};
  bool same = true;
};
int launch_max_unpool(int elem_bytes, const void* x, const int64_t* ind, void* y, int64_t n, int64_t y_numel,
                      const UnpoolIndex& index, cudaStream_t stream);

// ConvInteger (int32 y) and QLinearConv (int8/uint8 y, the CPU kernel's requantization) as a direct
// gather over int8/uint8 X [N, C, in...] and W [M, C/group, k...] (up to 3 spatial dims); x's zero point
// and the scales of x and y are scalars, w's zero point and scale scalars or one per output channel;
// padded taps contribute nothing. Scales are float32.
struct QConvArgs {
  int64_t batch = 0, c = 0, m = 0, group = 1;
  WindowIndex win;
  const void *x = nullptr, *w = nullptr, *xz = nullptr, *wz = nullptr;
  bool x_signed = true, w_signed = true, wz_per_m = false;
  bool qlinear = false, y_signed = true, ws_per_m = false;
  const float *xs = nullptr, *ws = nullptr, *ys = nullptr;
  const void* yz = nullptr;
  const int32_t* bias = nullptr;
  void* y = nullptr;
};
int launch_qconv(const QConvArgs& a, cudaStream_t stream);

// RNN (cell 0), GRU (1) and LSTM (2): one block per (direction, batch entry) walks the sequence; its
// threads own hidden units, the previous state double-buffered in `workspace` (rnn_workspace bytes).
// Gates in double with the CPU kernel's formulas (ONNX gate orders, clip, peepholes, input_forget,
// linear_before_reset, sequence_lens, layout 0/1, the activations of ops/rnn_math.h). Y (zeroed past
// each entry's length), Y_h and Y_c nullable. Float types and float64.
struct RnnArgs {
  int elem = kElemF32, cell = 2, num_dir = 1, layout = 0;
  bool reverse_only = false, linear_before_reset = false, input_forget = false, has_clip = false;
  double clip = 0;
  rnn::Activation acts[6];
  int64_t seq = 0, batch = 0, input = 0, hidden = 0;
  const void *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *h0 = nullptr, *c0 = nullptr, *p = nullptr;
  const int32_t* lens = nullptr;
  void *y = nullptr, *yh = nullptr, *yc = nullptr;
  double* workspace = nullptr;
};
size_t rnn_workspace(const RnnArgs& a);
int launch_rnn(const RnnArgs& a, cudaStream_t stream);

}  // namespace kiln::cuda
