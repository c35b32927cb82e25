// backends/cuda/cuda_qconv.cpp — kiln.QConv on the GPU: int8 (and, in FP8 engines, E4M3)
// channels-last convolutions through cuDNN's graph API, the whole epilogue fused into the
// convolution's kernel.
//
// One operation graph per input shape (reshape):
//   acc = conv(x8, w8)                 int32 accumulation (x, w int8 NHWC / KRSC, zero points 0);
//                                      float32 for E4M3 x and w (builder/calibrate.cpp's FP8
//                                      convolutions: X, W, Z and an 8-bit Y all E4M3)
//   y   = acc · scale[m] + bias[m]     scale = xs·ws[m] (per output channel), both divided by ys
//                                      when the output is int8
//   y  += z8 · zmul[m]                 the residual (inputs 9, 10: int8 Z of Y's shape, z_scale),
//                                      zmul = zs / ys — passes/qconv_residual.cpp makes it
//   y   = relu(y)                      when the node's activation is Relu
//   y   = min(max(y, -448), 448)       E4M3 output: QuantizeLinear saturates
//   out = int8(y), e4m3(y) or float32 y
// Why the graph API and not cudnnConvolutionBiasActivationForward: the legacy call takes one scalar
// alpha, so per-channel weight scales (what calibration and ONNX Runtime's per-channel QDQ models
// give) would need a pass of their own; and on the H200 its int8 kernels ran ResNet-50's convolutions
// in 4.06 ms at batch 256 against 3.33 ms for this graph (bench/cuda_int8_conv_probe.cpp,
// tests/gpu/results/h200_int8_graph_probe_1.log). A residual as a per-channel multiply and add is the
// form cuDNN's heuristics accept (an add with alpha2, or a float16 residual, got no engine).
// Input channels not divisible by 4 (int8 kernels read 4 at a time; E4M3: 16) are zero-padded: W
// once, X per run.
// Tactics: the heuristics' engine configurations ("cfg<i>", mode A); without one the first that
// builds runs. 1x1 convolutions without padding (equal strides, K % 16 == 0) also have kiln's own
// int8 / E4M3 GEMM (cuda_qgemm.cu, tactics "mma64" and "mma128": output channels per block; for
// K <= 256 with an 8-bit out also its streaming form, "stream64" and "stream128"), which reads the
// residual as cheaply as the bias: the tuner times them all.
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ir/epilogue.h"
#include "ir/float_types.h"
#include "ops/params_nn.h"
#include "ops/shape_infer_util.h"
#include "passes/passes.h"

namespace kiln::cuda {
namespace {

enum QIn { kX = 0, kXScale, kXZero, kW, kWScale, kWZero, kYScale, kYZero, kB, kZ, kZScale };

using BD = cudnnBackendDescriptor_t;

// The descriptors one plan is made of, destroyed with it (last made first).
struct Descriptors {
  std::vector<BD> all;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    for (auto it = all.rbegin(); it != all.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }
  BD make(cudnnBackendDescriptorType_t t) {
    BD d = nullptr;
    if (cudnnBackendCreateDescriptor(t, &d) != CUDNN_STATUS_SUCCESS) return nullptr;
    all.push_back(d);
    return d;
  }
};

// cuDNN's first failure while a graph is assembled, kept for the error message.
struct Builder {
  Descriptors& d;
  std::string failed;
  bool set(BD desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* v,
           const char* what) {
    if (!failed.empty()) return false;
    if (!desc) {
      failed = std::string(what) + ": no descriptor";
      return false;
    }
    const cudnnStatus_t s = cudnnBackendSetAttribute(desc, name, type, count, v);
    if (s != CUDNN_STATUS_SUCCESS) failed = std::string(what) + ": " + cudnnGetErrorString(s);
    return s == CUDNN_STATUS_SUCCESS;
  }
  bool finalize(BD desc, const char* what) {
    if (!failed.empty()) return false;
    const cudnnStatus_t s = desc ? cudnnBackendFinalize(desc) : CUDNN_STATUS_BAD_PARAM;
    if (s != CUDNN_STATUS_SUCCESS) failed = std::string(what) + ": " + cudnnGetErrorString(s);
    return s == CUDNN_STATUS_SUCCESS;
  }
  // A 4-D tensor of logical dims (n, c, h, w) stored channels-last.
  BD tensor(int64_t uid, cudnnDataType_t type, int64_t n, int64_t c, int64_t h, int64_t w, bool is_virtual) {
    BD t = d.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {c * h * w, 1, w * c, c}, align = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
    finalize(t, "tensor");
    return t;
  }
  // y = mode(x[, b]) in float32.
  BD pointwise(cudnnPointwiseMode_t mode, BD x, BD b, BD y) {
    BD pw = d.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    finalize(pw, "pointwise");
    BD op = d.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pointwise op");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
    if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pointwise b");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
    finalize(op, "pointwise op");
    return op;
  }
};

enum Uid : int64_t { kUidX = 1, kUidW, kUidY, kUidScale, kUidBias, kUidZ, kUidZMul, kUidHi, kUidLo, kUidAcc, kUidScaled,
                     kUidBiased, kUidZScaled, kUidSum, kUidActivated, kUidClamped };


// What every run of the node uses, read once from its constants; the vectors live on the GPU.
struct QConvConsts {
  ops::WindowAttrs w;
  bool relu = false, int8_out = false, residual = false;  // int8_out: an 8-bit output (int8 or E4M3)
  bool fp8 = false;    // X, W, Z and an 8-bit Y are E4M3 (else int8)
  bool clamp = false;  // an E4M3 output saturated at ±448 in the graph (cuDNN's conversion alone makes NaN)
  int64_t m = 0, c = 0, kh = 0, kw = 0;
  // cuDNN's int8 kernels take C divisible by 4 (FP8: 16): X and W of other C (an RGB stem's 3) run
  // with zero channels up to cp — W padded here once (wpad), X per run into the workspace.
  int64_t cp = 0;
  Tensor scale, bias, zmul;  // float32 [M] each (zmul only with a residual)
  Tensor hi, lo;             // float32 [M] of ±448: an E4M3 output's saturation bounds
  float zmul_scalar = 0.f;   // zs / ys, what zmul holds in every element
  Tensor wpad;               // W's type, [M, kh, kw, cp] when cp != c
};

// The plan of one input shape.
struct QConvPlan {
  Descriptors d;
  BD plan = nullptr;
  int64_t workspace = 0;      // cuDNN's, after the padded X
  size_t xpad_bytes = 0;      // X with cp channels, 256-byte aligned (0: X is read as it is)
  int64_t rows = 0;           // N·H·W of X
  bool empty = false;
  int configs = 0;  // how many engine configurations cuDNN's heuristics offered
  // kiln's own 1x1 kernel (tactics "mma<tile>"): its tile width and geometry; 0 when cuDNN runs.
  int mma_tile = 0;
  bool mma_fits = false;  // whether this shape could run it (for the tactics list)
  bool mma_stream = false, stream_fits = false;  // its streaming form (tactics "stream<tile>")
  QGemmArgs mma;
};

std::string qconv_check(const ir::Node& n) {
  if (!n.has_input(kX) || !n.has_input(kW)) return "X and W are required";
  const ops::ConvParams p = ops::parse_conv(n);
  if (!p.channels_last) return "runs channels-last only (kiln.QConv with channels_last = 1)";
  if (p.group != 1) return "grouped int8 convolutions do not run on CUDA";
  const Tensor* w = const_at(n, kW);
  if (!w || (w->dtype() != DataType::kInt8 && w->dtype() != DataType::kFloat8E4M3FN) || w->shape().size() != 4)
    return "W must be a constant int8 or float8e4m3fn [M, kh, kw, C]";
  // The 8-bit type of X, W, Z and an 8-bit Y: int8, or E4M3 (FP8 engines).
  const DataType q8 = w->dtype();
  const bool fp8 = q8 == DataType::kFloat8E4M3FN;
  const DataType x = n.inputs[kX]->type.dtype;
  if (x != q8 && x != DataType::kUndefined)
    return fp8 ? "X must be float8e4m3fn, as W (zero point 0)" : "X must be int8 (symmetric: zero point 0)";
  if (n.has_input(kXZero) && !all_zero(const_at(n, kXZero))) return "x_zero_point must be a constant 0";
  const int64_t m = w->shape()[0], c = w->shape()[3];
  if (m % 4 != 0) return "int8 convolutions take output channel counts divisible by 4";
  if (c <= 0) return "W has no input channels";
  if (fp8 && m % 16 != 0) return "FP8 convolutions take output channel counts divisible by 16";
  if (n.has_input(kWZero) && !all_zero(const_at(n, kWZero))) return "w_zero_point must be 0";
  if (!one_positive(const_at(n, kXScale), nullptr)) return "x_scale must be one positive float32 constant";
  const Tensor* ws = const_at(n, kWScale);
  if (!ws || ws->dtype() != DataType::kFloat32 || (ws->numel() != 1 && ws->numel() != m)) return "w_scale must be 1 or M float32 constants";
  if (n.has_input(kYScale) != n.has_input(kYZero)) return "y_scale and y_zero_point come together";
  if (n.has_input(kYScale)) {
    if (!one_positive(const_at(n, kYScale), nullptr)) return "y_scale must be one positive float32 constant";
    if (n.inputs[kYZero]->type.dtype != q8 || !all_zero(const_at(n, kYZero)))
      return fp8 ? "y must be float8e4m3fn with zero point 0" : "y must be int8 with zero point 0";
  }
  if (n.has_input(kB)) {
    const Tensor* b = const_at(n, kB);
    if (!b || b->numel() != m || (b->dtype() != DataType::kFloat32 && b->dtype() != DataType::kInt32))
      return "B must be M float32 or int32 constants";
  }
  if (n.has_input(kZ) != n.has_input(kZScale)) return "Z and z_scale come together";
  if (n.has_input(kZ)) {
    if (n.inputs[kZ]->type.dtype != q8 && n.inputs[kZ]->type.dtype != DataType::kUndefined)
      return fp8 ? "Z must be float8e4m3fn" : "Z must be int8";
    if (!one_positive(const_at(n, kZScale), nullptr)) return "z_scale must be one positive float32 constant";
  }
  Activation act;
  std::string why;
  if (!read_activation(n, &act, &why)) return why;
  if (act.kind != ActKind::kNone && act.kind != ActKind::kRelu) return "only Relu is fused into int8 convolutions on CUDA";
  return "";
}

Expected<std::shared_ptr<const QConvConsts>> prepare_qconv(const ir::Node& n) {
  if (std::string why = qconv_check(n); !why.empty()) return invalid_argument(n.describe() + ": " + why);
  auto c = std::make_shared<QConvConsts>();
  const ops::ConvParams p = ops::parse_conv(n);
  c->w = p.window;
  Activation act;
  std::string why;
  read_activation(n, &act, &why);
  c->relu = act.kind == ActKind::kRelu;
  const Shape& ws = const_at(n, kW)->shape();
  c->m = ws[0], c->kh = ws[1], c->kw = ws[2], c->c = ws[3];
  c->fp8 = const_at(n, kW)->dtype() == DataType::kFloat8E4M3FN;
  const int64_t align = c->fp8 ? 16 : 4;  // the channels cuDNN's int8 / FP8 kernels read at a time
  c->cp = (c->c + align - 1) / align * align;
  double xs = 0, ys = 1, zs = 0;
  one_positive(const_at(n, kXScale), &xs);
  c->int8_out = n.has_input(kYScale);
  if (c->int8_out) one_positive(const_at(n, kYScale), &ys);
  c->residual = n.has_input(kZ);
  if (c->residual) one_positive(const_at(n, kZScale), &zs);
  std::vector<double> wsc, bias;
  ops::read_doubles(*const_at(n, kWScale), wsc);
  const Tensor* b = const_at(n, kB);
  if (b) ops::read_doubles(*b, bias);
  Tensor scale = Tensor::empty(DataType::kFloat32, {c->m});
  Tensor offset = Tensor::empty(DataType::kFloat32, {c->m});
  Tensor zmul = Tensor::empty(DataType::kFloat32, {c->m});
  Tensor hi = Tensor::empty(DataType::kFloat32, {c->m});
  Tensor lo = Tensor::empty(DataType::kFloat32, {c->m});
  std::fill_n(hi.data<float>(), c->m, kE4M3FNMax);
  std::fill_n(lo.data<float>(), c->m, -kE4M3FNMax);
  for (int64_t j = 0; j < c->m; ++j) {
    const double s = xs * wsc[wsc.size() == 1 ? 0 : j];
    const double bj = quantized_bias(b, bias, j, s);
    scale.data<float>()[j] = static_cast<float>(s / ys);
    offset.data<float>()[j] = static_cast<float>(bj / ys);
    zmul.data<float>()[j] = static_cast<float>(zs / ys);
  }
  c->zmul_scalar = static_cast<float>(zs / ys);
  std::vector<std::pair<Tensor*, Tensor*>> uploads = {{&scale, &c->scale}, {&offset, &c->bias}};
  if (c->residual) uploads.push_back({&zmul, &c->zmul});
  c->clamp = c->fp8 && c->int8_out;
  if (c->clamp) uploads.insert(uploads.end(), {{&hi, &c->hi}, {&lo, &c->lo}});
  Tensor wpad;
  if (c->cp != c->c) {
    const Tensor& w = *const_at(n, kW);
    const int64_t taps = c->m * c->kh * c->kw;
    wpad = Tensor::empty(w.dtype(), {c->m, c->kh, c->kw, c->cp});
    uint8_t* dst = static_cast<uint8_t*>(wpad.raw());
    std::fill_n(dst, wpad.numel(), uint8_t{0});  // 0 in int8 and in E4M3
    for (int64_t t = 0; t < taps; ++t) std::copy_n(static_cast<const uint8_t*>(w.raw()) + t * c->c, c->c, dst + t * c->cp);
    uploads.push_back({&wpad, &c->wpad});
  }
  for (auto [host, dev] : uploads) {
    KILN_ASSIGN_OR_RETURN(*dev, upload(*host));
  }
  return std::shared_ptr<const QConvConsts>(std::move(c));
}

// The operation graph for X [n, h, w, C] → Y [n, oh, ow, M], or why cuDNN refused it.
Status build_graph(QConvPlan& plan, cudnnHandle_t dnn, const QConvConsts& c, int64_t n, int64_t h, int64_t w,
                   const int64_t out[2], const int64_t pb[2], const int64_t pe[2], const int64_t s[2], const int64_t dil[2],
                   BD* graph, std::string* why) {
  Builder b{plan.d, {}};
  const cudnnDataType_t q8 = c.fp8 ? CUDNN_DATA_FP8_E4M3 : CUDNN_DATA_INT8;
  BD x = b.tensor(kUidX, q8, n, c.cp, h, w, false);
  BD wt = b.tensor(kUidW, q8, c.m, c.cp, c.kh, c.kw, false);
  BD acc = b.tensor(kUidAcc, CUDNN_DATA_FLOAT, n, c.m, out[0], out[1], true);
  BD scale = b.tensor(kUidScale, CUDNN_DATA_FLOAT, 1, c.m, 1, 1, false);
  BD bias = b.tensor(kUidBias, CUDNN_DATA_FLOAT, 1, c.m, 1, 1, false);
  BD scaled = b.tensor(kUidScaled, CUDNN_DATA_FLOAT, n, c.m, out[0], out[1], true);
  const bool clamp = c.clamp;
  const bool last_is_bias = !c.residual && !c.relu && !clamp;
  const cudnnDataType_t yt = c.int8_out ? q8 : CUDNN_DATA_FLOAT;
  BD y = b.tensor(kUidY, yt, n, c.m, out[0], out[1], false);
  BD biased = last_is_bias ? y : b.tensor(kUidBiased, CUDNN_DATA_FLOAT, n, c.m, out[0], out[1], true);
  BD cv = plan.d.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t comp = c.fp8 ? CUDNN_DATA_FLOAT : CUDNN_DATA_INT32;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2;
  b.set(cv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "convolution type");
  b.set(cv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "convolution mode");
  b.set(cv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, "convolution dims");
  b.set(cv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, "dilations");
  b.set(cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, s, "strides");
  b.set(cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pb, "pads");
  b.set(cv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pe, "pads");
  b.finalize(cv, "convolution");
  BD conv = plan.d.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float one = 1.f, zero = 0.f;
  b.set(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "conv x");
  b.set(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wt, "conv w");
  b.set(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &acc, "conv y");
  b.set(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cv, "conv desc");
  b.set(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one, "conv alpha");
  b.set(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero, "conv beta");
  b.finalize(conv, "convolution op");
  std::vector<BD> ops = {conv, b.pointwise(CUDNN_POINTWISE_MUL, acc, scale, scaled),
                         b.pointwise(CUDNN_POINTWISE_ADD, scaled, bias, biased)};
  BD last = biased;
  if (c.residual) {
    BD z = b.tensor(kUidZ, q8, n, c.m, out[0], out[1], false);
    BD zmul = b.tensor(kUidZMul, CUDNN_DATA_FLOAT, 1, c.m, 1, 1, false);
    BD zscaled = b.tensor(kUidZScaled, CUDNN_DATA_FLOAT, n, c.m, out[0], out[1], true);
    BD sum = c.relu || clamp ? b.tensor(kUidSum, CUDNN_DATA_FLOAT, n, c.m, out[0], out[1], true) : y;
    ops.push_back(b.pointwise(CUDNN_POINTWISE_MUL, z, zmul, zscaled));
    ops.push_back(b.pointwise(CUDNN_POINTWISE_ADD, biased, zscaled, sum));
    last = sum;
  }
  if (c.relu) {
    BD activated = clamp ? b.tensor(kUidActivated, CUDNN_DATA_FLOAT, n, c.m, out[0], out[1], true) : y;
    ops.push_back(b.pointwise(CUDNN_POINTWISE_RELU_FWD, last, nullptr, activated));
    last = activated;
  }
  if (clamp) {
    // Saturated as QuantizeLinear does it (E4M3 has no infinity: an unclamped overflow is NaN). A NaN
    // sum may leave as ±448 where cuDNN's MIN/MAX follow fminf (kiln's own kernels keep it NaN).
    BD hi = b.tensor(kUidHi, CUDNN_DATA_FLOAT, 1, c.m, 1, 1, false);
    BD clamped = c.relu ? y : b.tensor(kUidClamped, CUDNN_DATA_FLOAT, n, c.m, out[0], out[1], true);
    ops.push_back(b.pointwise(CUDNN_POINTWISE_MIN, last, hi, clamped));
    if (!c.relu) {
      BD lo = b.tensor(kUidLo, CUDNN_DATA_FLOAT, 1, c.m, 1, 1, false);
      ops.push_back(b.pointwise(CUDNN_POINTWISE_MAX, clamped, lo, y));
    }
  }
  BD g = plan.d.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  b.set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()), ops.data(), "graph ops");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  b.set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn, "graph handle");
#pragma GCC diagnostic pop
  b.finalize(g, "operation graph");
  if (!b.failed.empty()) {
    *why = b.failed;
    return Status::Ok();
  }
  *graph = g;
  return Status::Ok();
}

// The heuristics' engine configurations for `graph` (mode A, else the fallback list).
std::vector<BD> engine_configs(Descriptors& d, BD graph) {
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    BD heur = d.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    if (!heur || cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) ||
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) || cudnnBackendFinalize(heur))
      continue;
    int64_t count = 0;
    if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr) ||
        count <= 0)
      continue;
    const int64_t want = std::min<int64_t>(count, 8);
    std::vector<BD> cfgs;
    for (int64_t i = 0; i < want; ++i) cfgs.push_back(d.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    int64_t got = 0;
    if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, want, &got, cfgs.data()))
      continue;
    cfgs.resize(static_cast<size_t>(std::max<int64_t>(got, 0)));
    if (!cfgs.empty()) return cfgs;
  }
  return {};
}

// An execution plan of configuration `cfg`, or null when it does not build here (or needs more
// workspace than the state has).
BD make_plan(Descriptors& d, cudnnHandle_t dnn, BD cfg, int64_t* workspace) {
  BD plan = d.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  if (!plan) return nullptr;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn)) return nullptr;
#pragma GCC diagnostic pop
  if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg) ||
      cudnnBackendFinalize(plan))
    return nullptr;
  int64_t count = 0;
  if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count, workspace) ||
      *workspace < 0 || static_cast<size_t>(*workspace) > kWorkspaceBytes)
    return nullptr;
  return plan;
}

Status reshape_qconv(ReshapeContext& rc, const QConvConsts& c) {
  if (rc.in.size() <= kW || !rc.in[kX].present) return rc.error("X and W are required");
  CudaState* st = reshape_state(rc);
  if (!st) return unsupported("no device state to plan with");
  const Shape& x = rc.in[kX].shape;
  if (x.size() != 4 || x[3] != c.c) return rc.error("X must be [N, H, W, " + std::to_string(c.c) + "], got " + shape_to_string(x));
  const DataType q8 = c.fp8 ? DataType::kFloat8E4M3FN : DataType::kInt8;
  if (rc.in[kX].dtype != q8) return rc.error(std::string("X must be ") + dtype_name(q8));
  const int64_t k[2] = {c.kh, c.kw};
  int64_t s[2], dil[2], pb[2], pe[2], out[2];
  if (!c.w.kernel.empty() && (c.w.kernel.size() != 2 || c.w.kernel[0] != k[0] || c.w.kernel[1] != k[1]))
    return rc.error("kernel_shape does not match W");
  for (int i = 0; i < 2; ++i) {
    s[i] = c.w.strides.empty() ? 1 : c.w.strides[i];
    dil[i] = c.w.dilations.empty() ? 1 : c.w.dilations[i];
    const int64_t p0 = c.w.pads.empty() ? 0 : c.w.pads[i], p1 = c.w.pads.empty() ? 0 : c.w.pads[i + 2];
    KILN_ASSIGN_OR_RETURN(Window g, window_geometry(x[1 + i], k[i], s[i], dil[i], p0, p1, c.w.auto_pad, false));
    pb[i] = g.pad_begin, pe[i] = g.pad_end, out[i] = g.out;
  }
  const Shape yshape = {x[0], out[0], out[1], c.m};
  rc.out[0] = {c.int8_out ? q8 : DataType::kFloat32, yshape};
  if (c.residual) {
    if (rc.in.size() <= kZ || !rc.in[kZ].present || rc.in[kZ].shape != yshape || rc.in[kZ].dtype != q8)
      return rc.error(std::string("Z must be ") + dtype_name(q8) + " of Y's shape " + shape_to_string(yshape));
  }
  auto plan = std::make_shared<QConvPlan>();
  if (shape_numel(yshape) == 0 || shape_numel(x) == 0) {
    plan->empty = true;
    rc.state = std::move(plan);
    return Status::Ok();
  }
  plan->mma_fits = c.kh == 1 && c.kw == 1 && c.cp == c.c && qgemm_fits(c.c, c.m) && s[0] == s[1] && pb[0] == 0 &&
                   pb[1] == 0 && pe[0] == 0 && pe[1] == 0 && c.m <= INT32_MAX && c.c <= INT32_MAX && x[1] <= INT32_MAX &&
                   x[2] <= INT32_MAX && s[0] <= INT32_MAX;
  plan->stream_fits = plan->mma_fits && qgemm_stream_fits(c.c, c.m, c.int8_out);
  const bool stream = rc.tactic == "stream64" || rc.tactic == "stream128";
  if ((plan->mma_fits && (rc.tactic == "mma64" || rc.tactic == "mma128")) || (plan->stream_fits && stream)) {
    plan->mma_tile = rc.tactic == "mma64" || rc.tactic == "stream64" ? 64 : 128;
    plan->mma_stream = stream;
    QGemmArgs& a = plan->mma;
    a.rows = x[0] * out[0] * out[1];
    a.k = static_cast<int>(c.c);
    a.m = static_cast<int>(c.m);
    a.ih = static_cast<int>(x[1]);
    a.iw = static_cast<int>(x[2]);
    a.oh = static_cast<int>(out[0]);
    a.ow = static_cast<int>(out[1]);
    a.stride = static_cast<int>(s[0]);
    a.relu = c.relu;
    a.int8_out = c.int8_out;
    a.fp8 = c.fp8;
    a.zmul = c.zmul_scalar;
    rc.state = std::move(plan);
    return Status::Ok();
  }
  BD graph = nullptr;
  std::string why;
  KILN_RETURN_IF_ERROR(build_graph(*plan, st->dnn, c, x[0], x[1], x[2], out, pb, pe, s, dil, &graph, &why));
  if (!graph) return runtime_error(rc.node.describe() + ": cuDNN refused the 8-bit convolution's graph (" + why + ")");
  const std::vector<BD> cfgs = engine_configs(plan->d, graph);
  plan->configs = static_cast<int>(cfgs.size());
  // The tuner's choice, else the first configuration that builds.
  int chosen = -1;
  if (rc.tactic.rfind("cfg", 0) == 0) chosen = std::atoi(rc.tactic.c_str() + 3);
  for (size_t i = 0; i < cfgs.size() && !plan->plan; ++i) {
    if (chosen >= 0 && static_cast<int>(i) != chosen) continue;
    plan->plan = make_plan(plan->d, st->dnn, cfgs[i], &plan->workspace);
  }
  if (!plan->plan)
    return runtime_error(rc.node.describe() + ": cuDNN has no engine for this 8-bit convolution (" +
                         std::to_string(cfgs.size()) + " configurations offered" + (chosen >= 0 ? ", tactic " + rc.tactic : "") +
                         ")");
  plan->rows = x[0] * x[1] * x[2];
  if (c.cp != c.c) plan->xpad_bytes = static_cast<size_t>((plan->rows * c.cp + 255) / 256 * 256);
  rc.workspace_bytes = plan->xpad_bytes + static_cast<size_t>(plan->workspace);
  rc.state = std::move(plan);
  return Status::Ok();
}

Status run_qconv(KernelContext& ctx, const QConvConsts& c) {
  const auto& p = shape_state<QConvPlan>(ctx);
  if (p.empty) return Status::Ok();
  CudaState& st = state_of(ctx);
  if (p.mma_tile) {
    QGemmArgs a = p.mma;
    a.x = static_cast<const int8_t*>(ctx.input(kX).raw());
    a.w = static_cast<const int8_t*>(ctx.input(kW).raw());
    a.scale = static_cast<const float*>(c.scale.raw());
    a.bias = static_cast<const float*>(c.bias.raw());
    a.z = c.residual ? static_cast<const int8_t*>(ctx.input(kZ).raw()) : nullptr;
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_qgemm(a, p.mma_tile, p.mma_stream, st.stream));
  }
  char* ws = static_cast<char*>(ctx.workspace());
  const void* x = ctx.input(kX).raw();
  const void* w = ctx.input(kW).raw();
  if (p.xpad_bytes) {
    KILN_RETURN_IF_ERROR(launched(ctx, launch_pad_rows(1, x, ws, p.rows, c.c, c.cp, st.stream)));
    x = ws;
    w = c.wpad.raw();
  }
  int64_t uids[9] = {kUidX, kUidW, kUidY, kUidScale, kUidBias};
  void* ptrs[9] = {const_cast<void*>(x), const_cast<void*>(w), ctx.output(0).raw(), const_cast<void*>(c.scale.raw()),
                   const_cast<void*>(c.bias.raw())};
  int64_t count = 5;
  auto add = [&](int64_t uid, const void* ptr) {
    uids[count] = uid;
    ptrs[count++] = const_cast<void*>(ptr);
  };
  if (c.residual) {
    add(kUidZ, ctx.input(kZ).raw());
    add(kUidZMul, c.zmul.raw());
  }
  if (c.clamp) add(kUidHi, c.hi.raw());
  if (c.clamp && !c.relu) add(kUidLo, c.lo.raw());
  void* plan_ws = p.workspace ? ws + p.xpad_bytes : nullptr;
  BD pack = nullptr;
  cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, ptrs);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &plan_ws);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(pack);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute(st.dnn, p.plan, pack);
  if (pack) cudnnBackendDestroyDescriptor(pack);
  if (s != CUDNN_STATUS_SUCCESS)
    return runtime_error(ctx.node().describe() + ": cuDNN 8-bit convolution: " + cudnnGetErrorString(s));
  return Status::Ok();
}

std::vector<std::string> qconv_tactics(const ReshapeContext& rc, const QConvConsts& c) {
  ReshapeContext probe = rc;
  probe.tactic.clear();
  probe.out.assign(1, {});
  if (!reshape_qconv(probe, c).ok() || !probe.state) return {};
  const auto* p = static_cast<const QConvPlan*>(probe.state.get());
  // cuDNN's first configuration (the kernel's own choice, already built), then kiln's own kernel,
  // then the other configurations: the tuner's per-layer time limit can run out among those (each
  // is compiled at first use).
  std::vector<std::string> names, own;
  if (p->stream_fits) own = {"stream128", "stream64"};
  if (p->mma_fits) own.insert(own.end(), {"mma128", "mma64"});
  for (int i = 0; i < p->configs; ++i) {
    names.push_back("cfg" + std::to_string(i));
    if (i == 0) names.insert(names.end(), own.begin(), own.end());
  }
  if (p->configs == 0) names = own;
  return names;
}

}  // namespace

// The float convolutions an 8-bit build gives this row (KernelDef::quantizes): those it runs
// (channels-last, so symmetric pads; group 1; channels divisible by 4; FP8: output channels divisible
// by 16, cuDNN's implicit-GEMM FP8 kernels) with 16+ input channels. An RGB stem stays in the
// engine's float type: in int8 (channels padded to 4 or 8) cuDNN ran it 3-30x slower than in float16
// on the H200 (tests/gpu/results/h200_int8_graph_probe_stems.log).
static std::string qconv_takes(const ir::Node& conv, DataType type) {
  const ops::ConvParams p = ops::parse_conv(conv);
  const Shape& w = conv.inputs[1]->constant->shape();  // [M, C, kh, kw]
  if (p.group != 1) return "grouped convolutions stay float";
  if (w[0] % 4 != 0 || w[1] % 4 != 0) return "channel counts not divisible by 4";
  if (w[1] < 16) return "fewer than 16 input channels (a stem runs faster in half)";
  if (!passes::symmetric_pads(conv))
    return "auto_pad or asymmetric pads (the int8 kernel runs channels-last, which takes symmetric pads only)";
  if (type == DataType::kFloat8E4M3FN && w[0] % 16 != 0) return "FP8 convolutions take output channel counts divisible by 16";
  return "";
}

void register_qconv(KernelRegistry& r) {
  KernelDef q;
  q.op = "QConv";
  q.domain = "kiln";
  q.name = "cuda.QConv.i8.cudnn";
  q.check = qconv_check;
  q.quantizes = {{"Conv"}, {DataType::kInt8, DataType::kFloat8E4M3FN}, qconv_takes};
  q.quantizes.symmetric_input = true;  // the kernel pads X with zeros
  q.quantizes.int8_residual = true;    // a residual Add folds in as an int8 input (fuse_qconv_residual)
  q.create = [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const QConvConsts> c, prepare_qconv(n));
    return make_staged([c](ReshapeContext& rc) { return reshape_qconv(rc, *c); },
                       [c](KernelContext& ctx) { return run_qconv(ctx, *c); },
                       [c](const ReshapeContext& rc) { return qconv_tactics(rc, *c); });
  };
  r.add(q);
}

}  // namespace kiln::cuda
