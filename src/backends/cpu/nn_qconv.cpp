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
#include <cpuid.h>
#include <cmath>

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

Status run_quant(const DnnlQuant& d, KernelContext& ctx) {
  char* ws = static_cast<char*>(ctx.workspace());
  auto ok = [](dnnl_status_t st) { return st == dnnl_success; };
  bool good = ok(dnnl_memory_set_data_handle(d.src_user.get(), const_cast<void*>(ctx.input(kX).raw()))) &&
              ok(dnnl_memory_set_data_handle(d.dst_user.get(), ctx.output(0).raw())) &&
              (!d.reorder_src || ok(dnnl_memory_set_data_handle(d.src.get(), ws + d.src_off))) &&
              (!d.reorder_dst || ok(dnnl_memory_set_data_handle(d.dst.get(), ws + d.dst_off))) &&
              ok(dnnl_memory_set_data_handle(d.scratch.get(), ws + d.scratch_off));
  auto exec = [&](const dnnl::primitive& p, const std::vector<dnnl_exec_arg_t>& args) {
    return ok(dnnl_primitive_execute(p.get(), d.strm.get(), static_cast<int>(args.size()), args.data()));
  };
  good = good && (!d.reorder_src || exec(d.src_in, d.src_args)) && exec(d.prim, d.args) &&
         (!d.reorder_dst || exec(d.dst_out, d.dst_args)) && ok(dnnl_stream_wait(d.strm.get()));
  return good ? Status::Ok() : ctx.error("the oneDNN int8 primitive failed");
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

Status qconv_reshape(ReshapeContext& rc, const QConvAttrs& a) {
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

Status qmatmul_reshape(ReshapeContext& rc, const Activation& act) {
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
// measured 3-5 quantization steps off on an AVX2-only CPU. There the kernels are unavailable, fuse-qdq
// leaves Q/DQ graphs as they are, and they run unfused (exact, not fast).
// AVX-VNNI (CPUID leaf 7 subleaf 1, EAX bit 4) is read from CPUID: clang 14's __builtin_cpu_supports
// does not know it.
bool has_avx_vnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __builtin_cpu_supports("avx2") && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4));
}

std::string needs_vnni() {
  static const bool vnni = __builtin_cpu_supports("avx512vnni") || has_avx_vnni();
  return vnni ? "" : "this CPU has no VNNI (oneDNN's int8 kernels would saturate int16 sums)";
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
  KernelDef conv{"QConv", "kiln", 1, 1 << 30, "cpu.QConv.i8.onednn", check_quant, [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
                   KILN_ASSIGN_OR_RETURN(Activation act, parse_act(n));
                   const ops::ConvParams p = ops::parse_conv(n);
                   QConvAttrs a{p.window, p.group, act, p.channels_last};
                   return make_staged([a](ReshapeContext& rc) { return qconv_reshape(rc, a); }, quant_run);
                 }};
  KernelDef matmul{"QMatMul", "kiln", 1, 1 << 30, "cpu.QMatMul.i8.onednn", check_quant,
                   [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
                     KILN_ASSIGN_OR_RETURN(Activation act, parse_act(n));
                     return make_staged([act](ReshapeContext& rc) { return qmatmul_reshape(rc, act); }, quant_run);
                   }};
  conv.unavailable = matmul.unavailable = needs_vnni;
  r.add(std::move(conv));
  r.add(std::move(matmul));
  KernelDef f8{"F8MatMul", "kiln", 1, 1 << 30, "cpu.F8MatMul.f32.emulated",
               [](const ir::Node& n) -> std::string {
                 if (!n.has_input(0) || !n.has_input(1)) return "A and B8 are required";
                 return n.inputs[0]->type.dtype == DataType::kFloat32 ? "" : "A must be float32 on the CPU";
               },
               [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
                 KILN_ASSIGN_OR_RETURN(ops::F8MatMulParams p, ops::parse_f8_matmul(n));
                 return make_staged(f8_reshape, [p](KernelContext& ctx) { return f8_run(ctx, p); });
               }};
  r.add(std::move(f8));
}

}  // namespace kiln::cpu::nn
