// backends/cpu/nn_qconv.cpp — kiln.QConv and kiln.QMatMul on the CPU: 8-bit convolutions and matrix
// products through oneDNN's int8 primitives (s32 accumulation; VNNI where the CPU has it).
//
// Both ops are what passes/fuse_qdq.cpp makes of DequantizeLinear → Conv/MatMul/Gemm [→ activation]
// [→ QuantizeLinear] (ops/fused.cpp gives their inputs). The real value the float graph computes is
//   y = act(xs·ws[m] · Σ (x − xz)·w + b[m])       (w's zero point is 0: symmetric weights)
// and, with y_scale, the output is saturate(round(y / ys) + yz) in y_zero_point's type. oneDNN gets:
// output scales xs·ws[m] (per output channel), the bias in accumulator units (oneDNN 2.x adds it
// before the output scale), the activation as an eltwise post-op in real units, then ×1/ys as a
// linear post-op (folded into the output scale for activations that commute with a positive scale),
// and x's and y's zero points as run-time zero points. Everything is decided at reshape; the weights
// are reordered once into the primitive's layout.
//
// Where oneDNN's int8 kernels would be wrong (no VNNI: see needs_vnni) the same ops run on the exact
// kernels ("cpu.QConv.i8.exact", "cpu.QMatMul.i8.exact"): integer sums computed exactly through float
// GEMMs on blocks of K, then oneDNN's epilogue. So every machine runs the same INT8 graph, and the
// tests of the passes that make these ops test the same thing on every CPU.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/conv_shapes.h"
#include "backends/cpu/fused_common.h"
#include "backends/cpu/nn_common.h"
#include "backends/staged_kernel.h"
#include "ir/epilogue.h"
#include "ir/float_types.h"
#include "ops/params_nn.h"

namespace kiln::cpu::nn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// Inputs of both ops.
enum QIn { kX = 0, kXScale, kXZero, kW, kWScale, kWZero, kYScale, kYZero, kBias };

memory::data_type dnnl_type(DataType t) {
  switch (t) {
    case DataType::kUInt8: return memory::data_type::u8;
    case DataType::kInt8: return memory::data_type::s8;
    case DataType::kFloat32: return memory::data_type::f32;
    default: return memory::data_type::undef;
  }
}

// The constants a quantized product needs, read and checked at reshape.
struct QuantConsts {
  float xs = 1, ys = 1;
  int32_t xz = 0, yz = 0;
  std::vector<float> ws;    // per output channel (expanded from a scalar)
  std::vector<float> bias;  // real units, per output channel; empty: none
  DataType out = DataType::kFloat32;
};

const Tensor* const_input(const ReshapeContext& rc, int i) {
  return static_cast<int>(rc.in.size()) > i && rc.in[i].present ? rc.in[i].value : nullptr;
}
bool present(const ReshapeContext& rc, int i) { return static_cast<int>(rc.in.size()) > i && rc.in[i].present; }

Status read_consts(const ReshapeContext& rc, int64_t channels, QuantConsts& q) {
  const DataType xt = rc.in[kX].dtype, wt = rc.in[kW].dtype;
  if (xt != DataType::kUInt8 && xt != DataType::kInt8) return rc.error("X must be uint8 or int8");
  if (wt != DataType::kInt8) return rc.error("W must be int8 (symmetric weights)");
  for (int i : {kXScale, kXZero, kW, kWScale, kWZero, kYScale, kYZero, kBias})
    if (present(rc, i) && !const_input(rc, i)) return rc.error("input " + std::to_string(i) + " must be a constant");
  const Tensor* xs = const_input(rc, kXScale);
  const Tensor* ws = const_input(rc, kWScale);
  if (!xs || xs->numel() != 1 || !ws) return rc.error("x_scale (one value) and w_scale are required");
  q.xs = load_as<float>(*xs, 0);
  if (const Tensor* xz = const_input(rc, kXZero)) {
    if (xz->numel() != 1 || xz->dtype() != xt) return rc.error("x_zero_point must be one value of X's type");
    q.xz = load_as<int32_t>(*xz, 0);
  }
  if (ws->numel() != 1 && ws->numel() != channels)
    return rc.error("w_scale must have 1 or " + std::to_string(channels) + " values");
  q.ws.resize(static_cast<size_t>(channels));
  for (int64_t m = 0; m < channels; ++m) q.ws[m] = load_as<float>(*ws, ws->numel() == 1 ? 0 : m);
  if (const Tensor* wz = const_input(rc, kWZero))
    for (int64_t i = 0; i < wz->numel(); ++i)
      if (load_as<int32_t>(*wz, i) != 0) return rc.error("w_zero_point must be 0 (symmetric weights)");
  if (const Tensor* ys = const_input(rc, kYScale)) {
    const Tensor* yz = const_input(rc, kYZero);
    if (ys->numel() != 1 || !yz || yz->numel() != 1) return rc.error("y_scale and y_zero_point must be one value each");
    if (yz->dtype() != DataType::kUInt8 && yz->dtype() != DataType::kInt8) return rc.error("y_zero_point must be uint8 or int8");
    q.ys = load_as<float>(*ys, 0);
    q.yz = load_as<int32_t>(*yz, 0);
    q.out = yz->dtype();
    if (!(q.ys > 0) || !std::isfinite(q.ys)) return rc.error("y_scale must be positive and finite");
  }
  if (!(q.xs > 0) || !std::isfinite(q.xs)) return rc.error("x_scale must be positive and finite");
  if (const Tensor* b = const_input(rc, kBias)) {
    if (b->numel() != channels) return rc.error("B must have " + std::to_string(channels) + " values");
    if (b->dtype() != DataType::kFloat32 && b->dtype() != DataType::kInt32) return rc.error("B must be float32 or int32");
    q.bias.resize(static_cast<size_t>(channels));
    // An int32 bias is in accumulator units (xs·ws[m]), as QLinearConv's and ONNX Runtime's QDQ models'.
    for (int64_t m = 0; m < channels; ++m)
      q.bias[m] = b->dtype() == DataType::kInt32 ? static_cast<float>(load_as<double>(*b, m) * q.xs * q.ws[m])
                                                 : load_as<float>(*b, m);
  }
  return Status::Ok();
}

// Adds the activation as oneDNN post-ops (real units); false when it has no oneDNN form.
bool add_activation(const Activation& a, dnnl::post_ops& po) {
  using A = dnnl::algorithm;
  switch (a.kind) {
    case ActKind::kNone: return true;
    case ActKind::kRelu: po.append_eltwise(1.0f, A::eltwise_relu, 0.0f, 0.0f); return true;
    case ActKind::kLeakyRelu: po.append_eltwise(1.0f, A::eltwise_relu, a.a, 0.0f); return true;
    case ActKind::kClip: po.append_eltwise(1.0f, A::eltwise_clip, a.a, a.b); return true;
    case ActKind::kSigmoid: po.append_eltwise(1.0f, A::eltwise_logistic, 0.0f, 0.0f); return true;
    case ActKind::kHardSigmoid:
      po.append_eltwise(1.0f, A::eltwise_linear, a.a, a.b);
      po.append_eltwise(1.0f, A::eltwise_clip, 0.0f, 1.0f);
      return true;
    case ActKind::kHardSwish: po.append_eltwise(1.0f, A::eltwise_hardswish, 0.0f, 0.0f); return true;
    case ActKind::kSilu: po.append_eltwise(1.0f, A::eltwise_swish, 1.0f, 0.0f); return true;
    case ActKind::kTanh: po.append_eltwise(1.0f, A::eltwise_tanh, 0.0f, 0.0f); return true;
    case ActKind::kGelu: po.append_eltwise(1.0f, A::eltwise_gelu_erf, 0.0f, 0.0f); return true;
    case ActKind::kGeluTanh: po.append_eltwise(1.0f, A::eltwise_gelu_tanh, 0.0f, 0.0f); return true;
  }
  return false;
}

// Activations f with f(s·x) = s·f(x) for s > 0: the output's 1/ys folds into the output scale.
bool commutes_with_scale(ActKind k) { return k == ActKind::kNone || k == ActKind::kRelu || k == ActKind::kLeakyRelu; }

// The primitive attributes both ops share: scales, zero points, post-ops. `mask` selects the output
// channel dimension of the primitive's destination.
dnnl::primitive_attr make_attr(const QuantConsts& q, const Activation& act, int mask, std::vector<float>* bias_acc) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const bool quant_out = q.out != DataType::kFloat32;
  const bool fold = quant_out && commutes_with_scale(act.kind);
  std::vector<float> scales(q.ws.size());
  for (size_t m = 0; m < q.ws.size(); ++m) scales[m] = q.xs * q.ws[m] / (fold ? q.ys : 1.0f);
  attr.set_output_scales(q.ws.size() == 1 ? 0 : mask, scales);
  if (q.xz != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  if (quant_out && q.yz != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::post_ops po;
  add_activation(act, po);
  if (quant_out && !fold) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f / q.ys, 0.0f);
  attr.set_post_ops(po);
  // oneDNN 2.x adds the bias to the accumulator, before the output scale.
  if (!q.bias.empty()) {
    bias_acc->resize(q.bias.size());
    for (size_t m = 0; m < q.bias.size(); ++m) (*bias_acc)[m] = q.bias[m] / (q.xs * q.ws[m]);
  }
  return attr;
}

// One quantized primitive with everything a run needs, made at reshape (as DnnlConv in nn_conv.cpp):
// the run points the memory objects at its buffers and executes through oneDNN's C API.
struct DnnlQuant {
  dnnl::primitive prim;
  dnnl::reorder src_in, dst_out;
  bool reorder_src = false, reorder_dst = false;
  size_t src_off = 0, dst_off = 0, scratch_off = 0, workspace = 0;
  int32_t zp[2] = {0, 0};  // x's and y's zero points (run-time arguments)
  std::vector<float> bias;
  dnnl::stream strm;
  dnnl::memory src_user, dst_user, src, dst, scratch, weights, bias_mem, zp_src, zp_dst;
  std::vector<dnnl_exec_arg_t> args, src_args, dst_args;
};

// Finishes a DnnlQuant from the primitive's descriptors: reorders, workspace offsets, weights, args.
void finish(DnnlQuant& d, const memory::desc& src_user_md, const memory::desc& dst_user_md, const memory::desc& src_md,
            const memory::desc& dst_md, const memory::desc& w_user_md, const memory::desc& w_md,
            const memory::desc& scratch_md, const void* weights, const QuantConsts& q) {
  d.reorder_src = src_md != src_user_md;
  d.reorder_dst = dst_md != dst_user_md;
  if (d.reorder_src) d.src_in = dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_cpu(), src_user_md, dnnl_cpu(), src_md));
  if (d.reorder_dst) d.dst_out = dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_cpu(), dst_md, dnnl_cpu(), dst_user_md));
  size_t off = 0;
  if (d.reorder_src) { d.src_off = off; off += align64(src_md.get_size()); }
  if (d.reorder_dst) { d.dst_off = off; off += align64(dst_md.get_size()); }
  d.scratch_off = off;
  off += align64(scratch_md.get_size());
  d.workspace = off;
  d.strm = dnnl::stream(dnnl_cpu());
  d.weights = memory(w_md, dnnl_cpu());
  memory w_src(w_user_md, dnnl_cpu(), const_cast<void*>(weights));
  dnnl::reorder(w_src, d.weights).execute(d.strm, w_src, d.weights);
  d.strm.wait();
  d.src_user = memory(src_user_md, dnnl_cpu(), DNNL_MEMORY_NONE);
  d.dst_user = memory(dst_user_md, dnnl_cpu(), DNNL_MEMORY_NONE);
  d.src = d.reorder_src ? memory(src_md, dnnl_cpu(), DNNL_MEMORY_NONE) : d.src_user;
  d.dst = d.reorder_dst ? memory(dst_md, dnnl_cpu(), DNNL_MEMORY_NONE) : d.dst_user;
  d.scratch = memory(scratch_md, dnnl_cpu(), DNNL_MEMORY_NONE);
  d.args = {{DNNL_ARG_SRC, d.src.get()}, {DNNL_ARG_WEIGHTS, d.weights.get()}, {DNNL_ARG_DST, d.dst.get()},
            {DNNL_ARG_SCRATCHPAD, d.scratch.get()}};
  if (!d.bias.empty()) {
    d.bias_mem = memory(memory::desc({static_cast<int64_t>(d.bias.size())}, memory::data_type::f32, tag::x), dnnl_cpu(),
                        d.bias.data());
    d.args.push_back({DNNL_ARG_BIAS, d.bias_mem.get()});
  }
  const memory::desc zp_md({1}, memory::data_type::s32, tag::x);
  d.zp[0] = q.xz;
  d.zp[1] = q.yz;
  if (q.xz != 0) {
    d.zp_src = memory(zp_md, dnnl_cpu(), &d.zp[0]);
    d.args.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, d.zp_src.get()});
  }
  if (q.out != DataType::kFloat32 && q.yz != 0) {
    d.zp_dst = memory(zp_md, dnnl_cpu(), &d.zp[1]);
    d.args.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, d.zp_dst.get()});
  }
  d.src_args = {{DNNL_ARG_FROM, d.src_user.get()}, {DNNL_ARG_TO, d.src.get()}};
  d.dst_args = {{DNNL_ARG_FROM, d.dst.get()}, {DNNL_ARG_TO, d.dst_user.get()}};
}

// Runs d on `src` and `dst` with its reorder buffers and scratchpad in `ws`; false when oneDNN fails.
bool run_dnnl(const DnnlQuant& d, const void* src, void* dst, char* ws) {
  auto ok = [](dnnl_status_t st) { return st == dnnl_success; };
  bool good = ok(dnnl_memory_set_data_handle(d.src_user.get(), const_cast<void*>(src))) &&
              ok(dnnl_memory_set_data_handle(d.dst_user.get(), dst)) &&
              (!d.reorder_src || ok(dnnl_memory_set_data_handle(d.src.get(), ws + d.src_off))) &&
              (!d.reorder_dst || ok(dnnl_memory_set_data_handle(d.dst.get(), ws + d.dst_off))) &&
              ok(dnnl_memory_set_data_handle(d.scratch.get(), ws + d.scratch_off));
  auto exec = [&](const dnnl::primitive& p, const std::vector<dnnl_exec_arg_t>& args) {
    return ok(dnnl_primitive_execute(p.get(), d.strm.get(), static_cast<int>(args.size()), args.data()));
  };
  return good && (!d.reorder_src || exec(d.src_in, d.src_args)) && exec(d.prim, d.args) &&
         (!d.reorder_dst || exec(d.dst_out, d.dst_args)) && ok(dnnl_stream_wait(d.strm.get()));
}

Status run_quant(const DnnlQuant& d, KernelContext& ctx) {
  return run_dnnl(d, ctx.input(kX).raw(), ctx.output(0).raw(), static_cast<char*>(ctx.workspace()))
             ? Status::Ok()
             : ctx.error("the oneDNN int8 primitive failed");
}

// ---- The exact kernels. (x − xz) lies in [−255, 255] and w in [−128, 127], so one product is at most
// 32,640 in magnitude and a sum of kExactBlock = 512 of them at most 16,711,680 < 2^24: float32 holds
// every partial sum of a block exactly, in whatever order sgemm adds. Each K block is one float GEMM
// whose result converts to int32 without rounding, the blocks add in int32 (oneDNN's s32 accumulator),
// and the epilogue is oneDNN's: (acc + bias) · scale, the activation, × 1/ys, + yz, nearest even,
// saturated. A convolution's blocks are chunks of its input channels, each one oneDNN float32
// convolution over (x − xz) (its window's sums stay exact too), so it runs at oneDNN's float speed;
// grouped ones whose group alone sums more than a block take im2col and the GEMM blocks.
constexpr int64_t kExactBlock = 512;

struct ExactQuant {
  QuantConsts q;
  Activation act;
  std::vector<float> w;         // weights as float: QMatMul [K, N]; QConv [M, C/group · kh · kw] (im2col order)
  std::vector<float> scale;     // per channel: xs · ws[m] (÷ ys when that folds into it)
  std::vector<float> bias_acc;  // per channel, in accumulator units (zeros when there is no bias)
  float post = 1;               // × after the activation: 1/ys when it does not fold
  // QMatMul: A [rows, K] in chunks of `chunk` rows. QConv: one image and group at a time.
  int64_t rows = 0, K = 0, cols = 0, chunk = 0;
  bool conv = false, nhwc = false, pointwise = false;
  ConvShapes s;
  // QConv through oneDNN: input channels [chunk_c0[i], chunk_c0[i + 1]) are convolution chunks[i]
  // (one chunk, all channels, for a grouped convolution); empty: im2col and exact_gemm.
  std::vector<std::unique_ptr<DnnlQuant>> chunks;
  std::vector<int64_t> chunk_c0;
  size_t off_dnnl = 0;
  size_t off_x = 0, off_col = 0, off_tmp = 0, off_acc = 0, workspace = 0;
};

// Fills the per-channel epilogue constants (oneDNN's make_attr, as numbers).
void exact_epilogue(ExactQuant& e) {
  const QuantConsts& q = e.q;
  const bool quant_out = q.out != DataType::kFloat32;
  const bool fold = quant_out && commutes_with_scale(e.act.kind);
  const size_t m = q.ws.size();
  e.scale.resize(m);
  e.bias_acc.assign(m, 0.0f);
  for (size_t c = 0; c < m; ++c) {
    e.scale[c] = q.xs * q.ws[c] / (fold ? q.ys : 1.0f);
    if (!q.bias.empty()) e.bias_acc[c] = q.bias[c] / (q.xs * q.ws[c]);
  }
  e.post = quant_out && !fold ? 1.0f / q.ys : 1.0f;
}

// acc[M, N] = A[M, K] · B[K, N] exactly, for integer-valued A and B within the bounds above.
void exact_gemm(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* tmp, int32_t* acc) {
  if (K == 0) std::fill(acc, acc + M * N, 0);
  for (int64_t k0 = 0; k0 < K; k0 += kExactBlock) {
    const int64_t kb = std::min(kExactBlock, K - k0);
    gemm<float>(false, false, M, N, kb, 1.0f, A + k0, K, B + k0 * N, N, 0.0f, tmp, N);
    const bool first = k0 == 0;
    parallel_for(M * N, 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) acc[i] = (first ? 0 : acc[i]) + static_cast<int32_t>(tmp[i]);
    });
  }
}

// out[r·rs + c·cs] from acc (rows × cols); the channel of (r, c) is r when per_row, else c (`scale` and
// `bias` start at the block's first channel). tmp (rows × cols floats) holds the real values on the way.
template <typename Y, typename Acc>
void exact_store(const ExactQuant& e, const Acc* acc, float* tmp, int64_t rows, int64_t cols, bool per_row,
                 const float* scale, const float* bias, Y* out, int64_t rs, int64_t cs) {
  constexpr bool quant = !std::is_same_v<Y, float>;
  const float lo = quant ? static_cast<float>(std::numeric_limits<Y>::min()) : 0.0f;
  const float hi = quant ? static_cast<float>(std::numeric_limits<Y>::max()) : 0.0f;
  const float zero = static_cast<float>(e.q.yz);
  const fused::EpilogueRowsFn activation = fused::epilogue_rows_for(e.act.kind);
  // One pass over each block of rows while it is in cache: real values, the activation, the output.
  parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t ch = per_row ? r : c;
        tmp[r * cols + c] = (static_cast<float>(acc[r * cols + c]) + bias[ch]) * scale[ch];
      }
    if (e.act.kind != ActKind::kNone) activation(tmp, r0, r1, cols, nullptr, e.act);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float v = tmp[r * cols + c];
        if constexpr (quant) {
          const float t = std::nearbyint(v * e.post + zero);
          out[r * rs + c * cs] = static_cast<Y>(t > hi ? hi : t >= lo ? t : lo);  // NaN: lo
        } else {
          out[r * rs + c * cs] = v;
        }
      }
  });
}

template <typename F>
void with_output_type(DataType t, F&& f) {
  if (t == DataType::kUInt8) f(uint8_t{});
  else if (t == DataType::kInt8) f(int8_t{});
  else f(float{});
}

// dst[i · stride] = x[begin + i] − xz as float, for `n` values of X's type (uint8 or int8): the stride
// changes the layout on the way, so no run needs a buffer of its own.
void exact_input(const Tensor& x, int64_t begin, int64_t n, int32_t xz, float* dst, int64_t stride = 1) {
  const float z = static_cast<float>(xz);
  if (x.dtype() == DataType::kUInt8) {
    const uint8_t* p = x.data<uint8_t>() + begin;
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = static_cast<float>(p[i]) - z;
  } else {
    const int8_t* p = x.data<int8_t>() + begin;
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = static_cast<float>(p[i]) - z;
  }
}

// The workspace's buffer at byte offset `off`.
template <typename T>
T* buffer(KernelContext& ctx, size_t off) {
  return reinterpret_cast<T*>(static_cast<char*>(ctx.workspace()) + off);
}

Status exact_matmul_run(const ExactQuant& e, KernelContext& ctx) {
  float* a = buffer<float>(ctx, e.off_x);
  float* tmp = buffer<float>(ctx, e.off_tmp);
  int32_t* acc = buffer<int32_t>(ctx, e.off_acc);
  const Tensor& x = ctx.input(kX);
  Tensor& y = ctx.output(0);
  for (int64_t r0 = 0; r0 < e.rows; r0 += e.chunk) {
    const int64_t rn = std::min(e.chunk, e.rows - r0);
    parallel_for(rn, std::max<int64_t>(1, 8192 / std::max<int64_t>(e.K, 1)), [&](int64_t b, int64_t en) {
      exact_input(x, (r0 + b) * e.K, (en - b) * e.K, e.q.xz, a + b * e.K);
    });
    exact_gemm(rn, e.cols, e.K, a, e.w.data(), tmp, acc);
    with_output_type(e.q.out, [&](auto tag) {
      using Y = decltype(tag);
      exact_store<Y, int32_t>(e, acc, tmp, rn, e.cols, false, e.scale.data(), e.bias_acc.data(), y.data<Y>() + r0 * e.cols,
                     e.cols, 1);
    });
  }
  return Status::Ok();
}

// QConv through oneDNN's float32 convolutions: the input as float (x − xz) channels-last, one buffer
// per chunk of channels; each chunk's convolution into tmp ([N·OH·OW, M]), exact; several chunks add
// in int32; then the epilogue, channel = column.
Status exact_conv_dnnl_run(const ExactQuant& e, KernelContext& ctx) {
  const ConvShapes& s = e.s;
  float* xf = buffer<float>(ctx, e.off_x);
  float* tmp = buffer<float>(ctx, e.off_tmp);
  int32_t* acc = buffer<int32_t>(ctx, e.off_acc);
  const Tensor& x = ctx.input(kX);
  Tensor& y = ctx.output(0);
  const int64_t ihw = s.in[0] * s.in[1], ohw = s.g.out[0] * s.g.out[1], pixels = s.N * ihw;
  const size_t chunks = e.chunks.size();
  // xf: chunk i at chunk_c0[i] · pixels, [N·H·W, its channels].
  auto chunk_of = [&](int64_t c) {
    size_t i = 0;
    while (i + 1 < chunks && e.chunk_c0[i + 1] <= c) ++i;
    return i;
  };
  if (e.nhwc && chunks == 1) {  // the buffer is X's layout
    parallel_for(pixels, std::max<int64_t>(1, 8192 / std::max<int64_t>(s.C, 1)), [&](int64_t p0, int64_t p1) {
      exact_input(x, p0 * s.C, (p1 - p0) * s.C, e.q.xz, xf + p0 * s.C);
    });
  } else if (e.nhwc) {
    parallel_for(pixels, std::max<int64_t>(1, 4096 / std::max<int64_t>(s.C, 1)), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (size_t i = 0; i < chunks; ++i) {
          const int64_t c0 = e.chunk_c0[i], cc = e.chunk_c0[i + 1] - c0;
          exact_input(x, p * s.C + c0, cc, e.q.xz, xf + c0 * pixels + p * cc);
        }
    });
  } else {
    parallel_for(s.N * s.C, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / s.C, c = r % s.C;
        const size_t i = chunk_of(c);
        const int64_t c0 = e.chunk_c0[i], cc = e.chunk_c0[i + 1] - c0;
        exact_input(x, r * ihw, ihw, e.q.xz, xf + c0 * pixels + n * ihw * cc + (c - c0), cc);
      }
    });
  }
  const int64_t outs = s.N * ohw * s.M;
  for (size_t i = 0; i < chunks; ++i) {
    if (!run_dnnl(*e.chunks[i], xf + e.chunk_c0[i] * pixels, tmp, buffer<char>(ctx, e.off_dnnl)))
      return ctx.error("the oneDNN float32 convolution failed");
    if (chunks == 1) break;
    parallel_for(outs, 1 << 15, [&](int64_t b, int64_t en) {
      for (int64_t j = b; j < en; ++j) acc[j] = (i == 0 ? 0 : acc[j]) + static_cast<int32_t>(tmp[j]);
    });
  }
  with_output_type(e.q.out, [&](auto tag) {
    using Y = decltype(tag);
    Y* out = y.data<Y>();
    auto store = [&](const auto* a) {
      if (e.nhwc) {
        exact_store<Y>(e, a, tmp, s.N * ohw, s.M, false, e.scale.data(), e.bias_acc.data(), out, s.M, 1);
        return;
      }
      for (int64_t n = 0; n < s.N; ++n)
        exact_store<Y>(e, a + n * ohw * s.M, tmp + n * ohw * s.M, ohw, s.M, false, e.scale.data(), e.bias_acc.data(),
                       out + n * s.M * ohw, 1, ohw);
    };
    if (chunks == 1) store(static_cast<const float*>(tmp));
    else store(static_cast<const int32_t*>(acc));
  });
  return Status::Ok();
}

Status exact_conv_run(const ExactQuant& e, KernelContext& ctx) {
  if (!e.chunks.empty()) return exact_conv_dnnl_run(e, ctx);
  const ConvShapes& s = e.s;
  float* xf = buffer<float>(ctx, e.off_x);
  float* col = buffer<float>(ctx, e.off_col);
  float* tmp = buffer<float>(ctx, e.off_tmp);
  int32_t* acc = buffer<int32_t>(ctx, e.off_acc);
  const Tensor& x = ctx.input(kX);
  Tensor& y = ctx.output(0);
  const int64_t ihw = s.in[0] * s.in[1], ohw = s.g.out[0] * s.g.out[1];
  const int64_t Cg = s.C / s.group, Mg = s.M / s.group, Kc = e.K;
  std::vector<float> pixel;  // one NHWC pixel's channels
  for (int64_t n = 0; n < s.N; ++n) {
    // The image as float planes [C, H·W] of x − xz (zero padding is then 0, as xz's padding is for oneDNN).
    if (!e.nhwc) {
      parallel_for(s.C, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) exact_input(x, (n * s.C + c) * ihw, ihw, e.q.xz, xf + c * ihw);
      });
    } else {
      parallel_for(ihw, std::max<int64_t>(1, 4096 / std::max<int64_t>(s.C, 1)), [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) exact_input(x, (n * ihw + p) * s.C, s.C, e.q.xz, xf + p, ihw);
      });
    }
    for (int64_t g = 0; g < s.group; ++g) {
      const float* xg = xf + g * Cg * ihw;
      const float* cols = xg;
      if (!e.pointwise) {
        im2col_f32(xg, Cg, s.in, s.g, col);
        cols = col;
      }
      exact_gemm(Mg, ohw, Kc, e.w.data() + g * Mg * Kc, cols, tmp, acc);
      const int64_t m0 = g * Mg;
      with_output_type(e.q.out, [&](auto tag) {
        using Y = decltype(tag);
        Y* out = y.data<Y>();
        if (e.nhwc)
          exact_store<Y, int32_t>(e, acc, tmp, Mg, ohw, true, e.scale.data() + m0, e.bias_acc.data() + m0,
                         out + n * ohw * s.M + m0, 1, s.M);
        else
          exact_store<Y, int32_t>(e, acc, tmp, Mg, ohw, true, e.scale.data() + m0, e.bias_acc.data() + m0,
                         out + (n * s.M + m0) * ohw, ohw, 1);
      });
    }
  }
  return Status::Ok();
}

// A new exact kernel's state with its constants and epilogue (exact_epilogue).
std::shared_ptr<ExactQuant> new_exact(QuantConsts q, const Activation& act) {
  auto e = std::make_shared<ExactQuant>();
  e->q = std::move(q);
  e->act = act;
  exact_epilogue(*e);
  return e;
}

// The exact kernels' state for a convolution of shapes `s` with weights `w`.
// One oneDNN float32 convolution of `s` (its C the chunk's channels), channels-last in and out, with
// weights `wf` [M, kh, kw, C / group]. Throws dnnl::error where oneDNN has none.
std::unique_ptr<DnnlQuant> float_conv(const ConvShapes& s, const std::vector<float>& wf) {
  using CF = dnnl::convolution_forward;
  const auto f32 = memory::data_type::f32;
  const DnnlConvDims g = dnnl_conv_dims(s, true);
  const memory::desc src_user(g.src, f32, tag::nhwc), dst_user(g.dst, f32, tag::nhwc);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto make = [&](tag t) {
    const CF::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, memory::desc(g.src, f32, t),
                        memory::desc(g.weights, f32, tag::any), memory::desc(g.dst, f32, t), g.strides, g.dil, g.pad_l,
                        g.pad_r);
    return CF::primitive_desc(desc, attr, dnnl_cpu());
  };
  // Channels-last as it is where oneDNN has a kernel for it, else its own layout behind reorders.
  CF::primitive_desc pd = make(tag::nhwc);
  if (std::string(pd.impl_info_str()).find("ref") != std::string::npos) pd = make(tag::any);
  auto d = std::make_unique<DnnlQuant>();
  d->prim = CF(pd);
  finish(*d, src_user, dst_user, pd.src_desc(), pd.dst_desc(), memory::desc(g.weights, f32, g.weights_tag),
         pd.weights_desc(), pd.scratchpad_desc(), wf.data(), QuantConsts{});
  return d;
}

// The oneDNN chunks of e's convolution: input channels in balanced chunks whose window sums hold at most
// kExactBlock products (a grouped convolution: one chunk, when a group's do). False where that cannot be.
bool exact_conv_chunks(ExactQuant& e, const Tensor& w) {
  const ConvShapes& s = e.s;
  const int64_t ksz = s.g.kernel[0] * s.g.kernel[1], Cg = s.C / s.group;
  const int64_t per = std::max<int64_t>(1, kExactBlock / ksz);  // input channels a chunk may sum
  if (s.group > 1 && Cg > per) return false;
  const int64_t n = s.group > 1 ? 1 : (s.C + per - 1) / per, each = (s.C + n - 1) / n;
  const int8_t* wp = w.data<int8_t>();
  size_t scratch = 0;
  try {
    for (int64_t c0 = 0; c0 < s.C; c0 += each) {
      ConvShapes sc = s;
      sc.C = std::min(each, s.C - c0);
      const int64_t cg = sc.C / s.group;  // the chunk's channels per group
      std::vector<float> wf(static_cast<size_t>(s.M * ksz * cg));
      for (int64_t m = 0; m < s.M; ++m)
        for (int64_t k = 0; k < ksz; ++k)
          for (int64_t c = 0; c < cg; ++c)  // NCHW weights [M, Cg, kh, kw]; channels-last [M, kh, kw, Cg]
            wf[(m * ksz + k) * cg + c] = wp[e.nhwc ? (m * ksz + k) * Cg + c0 + c : (m * Cg + c0 + c) * ksz + k];
      e.chunks.push_back(float_conv(sc, wf));
      e.chunk_c0.push_back(c0);
      scratch = std::max(scratch, e.chunks.back()->workspace);
    }
  } catch (const dnnl::error&) {
    e.chunks.clear();
    e.chunk_c0.clear();
    return false;
  }
  e.chunk_c0.push_back(s.C);
  const int64_t pixels = s.N * s.in[0] * s.in[1], outs = s.N * s.g.out[0] * s.g.out[1] * s.M;
  size_t off = 0;
  e.off_x = off;
  off += align64(static_cast<size_t>(s.C * pixels) * sizeof(float));
  e.off_tmp = off;
  off += align64(static_cast<size_t>(outs) * sizeof(float));
  e.off_acc = off;
  if (e.chunks.size() > 1) off += align64(static_cast<size_t>(outs) * sizeof(int32_t));
  e.off_dnnl = off;
  e.workspace = off + scratch;
  return true;
}

// The exact kernels' state for a convolution of shapes `s` with weights `w`.
std::shared_ptr<ExactQuant> exact_conv_state(const ConvShapes& s, bool nhwc, const Tensor& w, QuantConsts q,
                                             const Activation& act) {
  auto e = new_exact(std::move(q), act);
  e->conv = true;
  e->nhwc = nhwc;
  e->s = s;
  if (exact_conv_chunks(*e, w)) return e;
  e->pointwise = is_pointwise(s.g);
  const int64_t kh = s.g.kernel[0], kw = s.g.kernel[1], Cg = s.C / s.group, ksz = kh * kw;
  e->K = Cg * ksz;
  e->w.resize(static_cast<size_t>(s.M * e->K));
  const int8_t* wp = w.data<int8_t>();
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t k = 0; k < ksz; ++k)  // NCHW weights [M, Cg, kh, kw]; channels-last [M, kh, kw, Cg]
        e->w[(m * Cg + c) * ksz + k] = wp[nhwc ? (m * ksz + k) * Cg + c : (m * Cg + c) * ksz + k];
  const int64_t ihw = s.in[0] * s.in[1], ohw = s.g.out[0] * s.g.out[1], Mg = s.M / s.group;
  size_t off = 0;
  e->off_x = off;
  off += align64(static_cast<size_t>(s.C * ihw) * sizeof(float));
  e->off_col = off;
  if (!e->pointwise) off += align64(static_cast<size_t>(e->K * ohw) * sizeof(float));
  e->off_tmp = off;
  off += align64(static_cast<size_t>(Mg * ohw) * sizeof(float));
  e->off_acc = off;
  e->workspace = off + align64(static_cast<size_t>(Mg * ohw) * sizeof(int32_t));
  return e;
}

// The exact kernels' state for A [rows, K] times the constant B [K, cols].
std::shared_ptr<ExactQuant> exact_matmul_state(int64_t rows, int64_t K, int64_t cols, const Tensor& w, QuantConsts q,
                                               const Activation& act) {
  auto e = new_exact(std::move(q), act);
  e->rows = rows;
  e->K = K;
  e->cols = cols;
  e->chunk = std::clamp<int64_t>((int64_t{1} << 18) / std::max<int64_t>(std::max(K, cols), 1), 1, rows);
  e->w.resize(static_cast<size_t>(K * cols));
  const int8_t* wp = w.data<int8_t>();
  for (int64_t i = 0; i < K * cols; ++i) e->w[i] = wp[i];
  size_t off = 0;
  e->off_x = off;
  off += align64(static_cast<size_t>(e->chunk * K) * sizeof(float));
  e->off_tmp = off;
  off += align64(static_cast<size_t>(e->chunk * cols) * sizeof(float));
  e->off_acc = off;
  e->workspace = off + align64(static_cast<size_t>(e->chunk * cols) * sizeof(int32_t));
  return e;
}

Status exact_run(KernelContext& ctx) {
  if (!ctx.shape_state()) {
    ctx.output(0);  // an empty output: nothing to compute
    return Status::Ok();
  }
  const ExactQuant& e = shape_state<ExactQuant>(ctx);
  return e.conv ? exact_conv_run(e, ctx) : exact_matmul_run(e, ctx);
}

// ---- kiln.QConv: 2-D convolution, X [N, C, H, W] uint8/int8, W [M, C/group, kh, kw] int8 (or
// channels-last, from passes/channels_last.cpp: oneDNN's int8 kernels work in NHWC, so a chain of
// them in NHWC needs no reorder between layers).

struct QConvAttrs {
  ops::WindowAttrs w;
  int64_t group = 1;
  Activation act;
  bool nhwc = false;  // channels_last: X [N,H,W,C], W [M,kh,kw,C/group], Y [N,OH,OW,M]
};

Shape to_nchw(const Shape& s) { return s.size() == 4 ? Shape{s[0], s[3], s[1], s[2]} : s; }

Status qconv_reshape(ReshapeContext& rc, const QConvAttrs& a, bool exact) {
  if (!present(rc, kX) || !present(rc, kW)) return rc.error("X and W are required");
  ConvShapes s;
  if (a.nhwc && (rc.in[kX].shape.size() != 4 || rc.in[kW].shape.size() != 4))
    return rc.error("channels_last convolutions are 2-D (4-D X and W)");
  const Shape xs = a.nhwc ? to_nchw(rc.in[kX].shape) : rc.in[kX].shape;
  const Shape wsh = a.nhwc ? to_nchw(rc.in[kW].shape) : rc.in[kW].shape;
  KILN_RETURN_IF_ERROR(conv_shapes(rc, a.w, a.group, xs, wsh, s));
  if (s.g.kernel.size() != 2) return rc.error("quantized convolutions are 2-D here");
  const Tensor* w = const_input(rc, kW);
  if (!w) return rc.error("W must be a constant");
  QuantConsts q;
  KILN_RETURN_IF_ERROR(read_consts(rc, s.M, q));
  rc.out[0] = {q.out, a.nhwc ? Shape{s.y[0], s.y[2], s.y[3], s.y[1]} : s.y};
  if (const std::string why = check_tensor_size(q.out, s.y); !why.empty()) return rc.error(why);
  if (shape_numel(s.y) == 0) return Status::Ok();
  if (exact) {
    auto e = exact_conv_state(s, a.nhwc, *w, std::move(q), a.act);
    rc.workspace_bytes = e->workspace;
    rc.state = std::move(e);
    return Status::Ok();
  }
  auto d = std::make_shared<DnnlQuant>();
  try {
    const DnnlConvDims g = dnnl_conv_dims(s, a.nhwc);
    const memory::desc w_user(g.weights, memory::data_type::s8, g.weights_tag);
    const auto xt = dnnl_type(rc.in[kX].dtype), yt = dnnl_type(q.out);
    const memory::desc src_user(g.src, xt, g.data_tag), dst_user(g.dst, yt, g.data_tag);
    const memory::desc src_any(g.src, xt, tag::any), dst_any(g.dst, yt, tag::any), w_any(g.weights, memory::data_type::s8, tag::any);
    const dnnl::primitive_attr attr = make_attr(q, a.act, 1 << 1, &d->bias);
    const memory::desc bias_md({s.M}, memory::data_type::f32, tag::x);
    using CF = dnnl::convolution_forward;
    const auto desc = d->bias.empty()
                          ? CF::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_any, w_any,
                                     dst_any, g.strides, g.dil, g.pad_l, g.pad_r)
                          : CF::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_any, w_any,
                                     bias_md, dst_any, g.strides, g.dil, g.pad_l, g.pad_r);
    const CF::primitive_desc pd(desc, attr, dnnl_cpu());
    d->prim = CF(pd);
    finish(*d, src_user, dst_user, pd.src_desc(), pd.dst_desc(), w_user, pd.weights_desc(), pd.scratchpad_desc(), w->raw(), q);
  } catch (const dnnl::error& e) {
    return rc.error(std::string("oneDNN has no int8 convolution for this (") + e.what() + ")");
  }
  rc.workspace_bytes = d->workspace;
  rc.state = std::move(d);
  return Status::Ok();
}

// ---- kiln.QMatMul: A [..., K] uint8/int8 times constant B [K, N] int8.

Status qmatmul_reshape(ReshapeContext& rc, const Activation& act, bool exact) {
  if (!present(rc, kX) || !present(rc, kW)) return rc.error("A and B are required");
  const Shape& as = rc.in[kX].shape;
  const Shape& bs = rc.in[kW].shape;
  if (as.empty() || bs.size() != 2) return rc.error("A must have rank >= 1 and B must be 2-D [K, N]");
  const int64_t K = as.back(), N = bs[1];
  if (bs[0] != K) return rc.error("A's last dim " + std::to_string(K) + " does not match B's rows " + std::to_string(bs[0]));
  const Tensor* w = const_input(rc, kW);
  if (!w) return rc.error("B must be a constant");
  QuantConsts q;
  KILN_RETURN_IF_ERROR(read_consts(rc, N, q));
  Shape ys = as;
  if (as.size() == 1) ys = {N};
  else ys.back() = N;
  rc.out[0] = {q.out, ys};
  const int64_t M = as.size() == 1 ? 1 : shape_numel(as) / std::max<int64_t>(K, 1);
  if (shape_numel(ys) == 0 || K == 0) {
    if (K == 0 && shape_numel(ys) != 0) return rc.error("K = 0 is not supported by the int8 product");
    return Status::Ok();
  }
  if (exact) {
    auto e = exact_matmul_state(M, K, N, *w, std::move(q), act);
    rc.workspace_bytes = e->workspace;
    rc.state = std::move(e);
    return Status::Ok();
  }
  auto d = std::make_shared<DnnlQuant>();
  try {
    const auto xt = dnnl_type(rc.in[kX].dtype), yt = dnnl_type(q.out);
    const memory::desc src_md({M, K}, xt, tag::ab), dst_md({M, N}, yt, tag::ab);
    const memory::desc w_user({K, N}, memory::data_type::s8, tag::ab), w_any({K, N}, memory::data_type::s8, tag::any);
    const dnnl::primitive_attr attr = make_attr(q, act, 1 << 1, &d->bias);
    const memory::desc bias_md({1, N}, memory::data_type::f32, tag::ab);
    const auto desc = d->bias.empty() ? dnnl::matmul::desc(src_md, w_any, dst_md) : dnnl::matmul::desc(src_md, w_any, bias_md, dst_md);
    const dnnl::matmul::primitive_desc pd(desc, attr, dnnl_cpu());
    d->prim = dnnl::matmul(pd);
    finish(*d, src_md, dst_md, pd.src_desc(), pd.dst_desc(), w_user, pd.weights_desc(), pd.scratchpad_desc(), w->raw(), q);
    if (!d->bias.empty()) d->bias_mem = memory(bias_md, dnnl_cpu(), d->bias.data());
    for (auto& arg : d->args)
      if (arg.arg == DNNL_ARG_BIAS) arg.memory = d->bias_mem.get();
  } catch (const dnnl::error& e) {
    return rc.error(std::string("oneDNN has no int8 matrix product for this (") + e.what() + ")");
  }
  rc.workspace_bytes = d->workspace;
  rc.state = std::move(d);
  return Status::Ok();
}

Status quant_run(KernelContext& ctx) {
  if (!ctx.shape_state()) {
    ctx.output(0);  // an empty output: nothing to compute
    return Status::Ok();
  }
  return run_quant(shape_state<DnnlQuant>(ctx), ctx);
}

Expected<Activation> parse_act(const ir::Node& n) {
  Activation act;
  std::string why;
  if (!read_activation(n, &act, &why)) return invalid_argument(n.describe() + ": " + why);
  return act;
}

// Why the node's static types are not ones the kernels take ("" when they are).
std::string check_quant(const ir::Node& n) {
  if (!n.has_input(kX) || !n.has_input(kW)) return "X and W are required";
  const DataType x = n.inputs[kX]->type.dtype;
  if (x != DataType::kUInt8 && x != DataType::kInt8) return "X must be uint8 or int8";
  if (n.has_input(7) && n.inputs[7]->type.dtype != DataType::kUInt8 && n.inputs[7]->type.dtype != DataType::kInt8)
    return "y must be uint8 or int8";
  if (n.has_input(9)) return "a fused residual (Z) runs on CUDA only";
  if (n.attr_int("output_dtype", static_cast<int64_t>(DataType::kFloat32)) != static_cast<int64_t>(DataType::kFloat32))
    return "a float16 output runs on CUDA only";
  return n.inputs[kW]->type.dtype == DataType::kInt8 ? "" : "W must be int8";
}

// Without VNNI oneDNN's u8·s8 kernels sum pairs of products in saturating int16 (vpmaddubsw): outputs
// measured 3-5 quantization steps off on an AVX2-only CPU. There the oneDNN rows are unavailable and
// the exact kernels run. What oneDNN will dispatch to is its effective ISA: the CPU's, capped by
// ONEDNN_MAX_CPU_ISA (the tests cap it to run the weakest machine's path on any machine). The ISA
// values are bit sets: 0x40 is AVX-512 VNNI (avx512_core_vnni and above), 0x400 AVX-VNNI.
std::string needs_vnni() {
  static const bool vnni = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    return (isa & static_cast<unsigned>(dnnl_cpu_isa_avx512_core_vnni & ~dnnl_cpu_isa_avx512_core)) != 0 ||
           (isa & static_cast<unsigned>(dnnl_cpu_isa_avx2_vnni & ~dnnl_cpu_isa_avx2)) != 0;
  }();
  return vnni ? "" : "oneDNN dispatches to no VNNI kernel here (its int8 kernels would saturate int16 sums)";
}

// ---- kiln.F8MatMul on the CPU: the reference for the CUDA kernel and the emulation behind CPU
// `--precision fp8` builds (which measure FP8's accuracy on machines without a Hopper GPU). A is
// quantized to E4M3 exactly as the GPU does it (x · (1 / a_scale), nearest even, saturating), the
// E4M3 values are multiplied in float32 (each product is exact in float32) and scaled once; then the
// bias and the activation (fuse-activation's, ir/epilogue.h).
struct F8State {
  std::vector<float> b;  // B8 decoded, [N, K]
  int64_t m = 0, n = 0, k = 0;
};

Status f8_reshape(ReshapeContext& rc) {
  if (!present(rc, 0) || !present(rc, 1)) return rc.error("A and B8 are required");
  if (rc.in[0].dtype != DataType::kFloat32) return rc.error("A must be float32 on the CPU");
  const Tensor* b = const_input(rc, 1);
  if (!b || b->dtype() != DataType::kFloat8E4M3FN || b->shape().size() != 2) return rc.error("B8 must be a constant float8e4m3fn [N, K]");
  const Shape& as = rc.in[0].shape;
  const int64_t n = b->shape()[0], k = b->shape()[1];
  if (as.size() < 2 || as.back() != k) return rc.error("A's last dim must be B8's K (" + std::to_string(k) + ")");
  if (k <= 0 || n <= 0) return rc.error("FP8 products need K and N positive");
  if (present(rc, 2) && (rc.in[2].dtype != DataType::kFloat32 || shape_numel(rc.in[2].shape) != n))
    return rc.error("the bias must be float32 [N]");
  Shape ys = as;
  ys.back() = n;
  rc.out[0] = {DataType::kFloat32, ys};
  auto st = std::make_shared<F8State>();
  st->m = shape_numel(as) / k;
  st->n = n;
  st->k = k;
  st->b.resize(static_cast<size_t>(n * k));
  const uint8_t* q = static_cast<const uint8_t*>(b->raw());
  for (int64_t i = 0; i < n * k; ++i) st->b[i] = mini_to_f32(q[i], MiniFloat::kE4M3FN);
  rc.workspace_bytes = static_cast<size_t>(st->m * k) * sizeof(float);
  rc.state = std::move(st);
  return Status::Ok();
}

Status f8_run(KernelContext& ctx, const ops::F8MatMulParams& p) {
  const F8State& st = shape_state<F8State>(ctx);
  Tensor& y = ctx.output(0);
  if (st.m == 0 || st.n == 0) return Status::Ok();
  const float* a = ctx.input(0).data<float>();
  float* aq = static_cast<float*>(ctx.workspace());
  const float inv = 1.0f / p.a_scale;
  parallel_for(st.m * st.k, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) aq[i] = mini_to_f32(f32_to_mini(a[i] * inv, MiniFloat::kE4M3FN, true), MiniFloat::kE4M3FN);
  });
  float* out = y.data<float>();
  gemm<float>(false, true, st.m, st.n, st.k, p.a_scale * p.b_scale, aq, st.k, st.b.data(), st.k, 0.0f, out, st.n);
  const float* bias = ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr;
  if (bias || p.act.kind != ActKind::kNone) fused::apply_epilogue(out, st.m, st.n, bias, p.act);
  return Status::Ok();
}

}  // namespace

void register_qconv(KernelRegistry& r) {
  // oneDNN's kernels where they are exact (VNNI), else the exact ones: the first available row wins.
  for (const bool exact : {false, true}) {
    const std::string variant = exact ? ".i8.exact" : ".i8.onednn";
    KernelDef conv{"QConv", "kiln", 1, 1 << 30, "cpu.QConv" + variant, check_quant,
                   [exact](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
                     KILN_ASSIGN_OR_RETURN(Activation act, parse_act(n));
                     const ops::ConvParams p = ops::parse_conv(n);
                     QConvAttrs a{p.window, p.group, act, p.channels_last};
                     return make_staged([a, exact](ReshapeContext& rc) { return qconv_reshape(rc, a, exact); },
                                        exact ? exact_run : quant_run);
                   }};
    KernelDef matmul{"QMatMul", "kiln", 1, 1 << 30, "cpu.QMatMul" + variant, check_quant,
                     [exact](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
                       KILN_ASSIGN_OR_RETURN(Activation act, parse_act(n));
                       return make_staged([act, exact](ReshapeContext& rc) { return qmatmul_reshape(rc, act, exact); },
                                          exact ? exact_run : quant_run);
                     }};
    if (!exact) conv.unavailable = matmul.unavailable = needs_vnni;
    // Every product the 8-bit build can write in int8 (builder/calibrate.cpp).
    conv.quantizes = {{"Conv"}, {DataType::kInt8}, nullptr};
    matmul.quantizes = {{"MatMul", "Gemm"}, {DataType::kInt8}, nullptr};
    r.add(std::move(conv));
    r.add(std::move(matmul));
  }
  KernelDef f8{"F8MatMul", "kiln", 1, 1 << 30, "cpu.F8MatMul.f32.emulated",
               [](const ir::Node& n) -> std::string {
                 if (!n.has_input(0) || !n.has_input(1)) return "A and B8 are required";
                 return n.inputs[0]->type.dtype == DataType::kFloat32 ? "" : "A must be float32 on the CPU";
               },
               [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
                 KILN_ASSIGN_OR_RETURN(ops::F8MatMulParams p, ops::parse_f8_matmul(n));
                 return make_staged(f8_reshape, [p](KernelContext& ctx) { return f8_run(ctx, p); });
               }};
  f8.quantizes = {{"MatMul", "Gemm"}, {DataType::kFloat8E4M3FN}, fp8_product_check};
  r.add(std::move(f8));
}

}  // namespace kiln::cpu::nn
