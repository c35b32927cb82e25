// backends/cuda/cuda_conv.cpp — Conv (1-D and 2-D; float32, float16, bfloat16) through cuDNN's
// convolution API.
//
// Float32 runs FP32 math only (CUDNN_FMA_MATH: no TF32) so results match the CPU; float16/bfloat16
// run on tensor cores with float32 accumulation. reshape() makes the
// descriptors and picks the algorithm (cuDNN's heuristics) once per input shape; run() only launches.
// Asymmetric pads (SAME_* with an even window) run on an explicitly zero-padded copy of the input,
// kept in the kernel's planned workspace.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <memory>
#include <string>

#include "backends/cuda/cuda_util.h"
#include "ops/nn.h"
#include "ops/params_nn.h"

namespace kiln::cuda {
namespace {

// Conv's parameters: the window as ops/ parses it for shape inference and every backend, plus group.
struct ConvAttrs {
  ops::WindowAttrs w;
  int64_t group = 1;
  bool nhwc = false;  // channels_last (kiln.FusedConv from passes/channels_last.cpp): X, W, Y channels-last
  bool tf32 = false;  // float32 on TF32 tensor cores (TF32 engines, passes::allow_tf32)
  // kiln.FusedConv's inner Conv (cuda_fused.cpp): kBiasEpilogueAttr = 1 asks for the bias (input 2)
  // and the residual (input 3, optional) in the convolution, 2 also for a ReLU after them.
  int epilogue = 0;
};

// Everything one input shape needs, made by reshape() once per signature: descriptors, the
// algorithm, the geometry. run() only launches.
struct ConvShape {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t algo{};
  size_t algo_bytes = 0;     // cuDNN workspace, after the padded input in the kernel's workspace
  std::vector<int> viable;   // the algorithms usable here, in the heuristic's order (the tactics "algo<N>")
  std::vector<int> fusable;  // those that run the fused epilogue here (the tactics "fused<N>")
  size_t padded_bytes = 0;   // 0: no explicit padding (spatial, or of the channels below)
  // Channels-last half convolutions with a few input channels (a stem's RGB image): X and W padded
  // with zero channels to `cpad` in the workspace, where cuDNN has tensor-core kernels (for C = 3 it
  // runs a generic one, 5-10x slower). 0: not padded.
  int64_t cpad = 0, c_in = 0, x_rows = 0, w_rows = 0;
  size_t wpad_offset = 0;
  // Padded to 4 channels (the tactics "c4.*"), cuDNN's fast stem kernel wants a workspace that grows
  // with the batch (H200: ~1.5 MiB an image at 224x224), so the batch runs in chunks of `chunk` images
  // (x, y describe one chunk, x_tail and y_tail the last when it is shorter). 0: one call.
  int64_t batch = 0, chunk = 0;
  size_t x_image_bytes = 0, y_image_bytes = 0;
  cudnnTensorDescriptor_t x_tail = nullptr, y_tail = nullptr;
  int64_t nc = 0, in_h = 0, in_w = 0, h = 0, wd = 0, pad_t = 0, pad_l = 0, m = 0;
  int elem_bytes = 4;
  // The epilogue (bias, residual, ReLU) in cuDNN's fused call (cudnnConvolutionBiasActivationForward),
  // so the output is written once: kBiasEpilogueAttr's value, 0 when the caller applies it.
  int fused = 0;
  int64_t bias_inner = 1;  // values per (image, channel) along which the bias repeats; 1 for NHWC
  cudnnActivationDescriptor_t act = nullptr;
  // Depthwise channels-last: kiln's kernel (cuda_depthwise.cu) instead of cuDNN (the tactic "dw").
  bool dw = false;
  DepthwiseArgs dwa;
  ~ConvShape() {
    if (act) cudnnDestroyActivationDescriptor(act);
    if (y_tail) cudnnDestroyTensorDescriptor(y_tail);
    if (x_tail) cudnnDestroyTensorDescriptor(x_tail);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

Status dnn_ok(const ir::Node& node, cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::Ok();
  return runtime_error(node.describe() + ": cuDNN " + what + ": " + cudnnGetErrorString(s));
}

constexpr size_t kAlign = 256;
size_t aligned(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

class ConvKernel final : public Kernel {
 public:
  explicit ConvKernel(ConvAttrs at) : at_(std::move(at)) {}
  bool has_reshape() const override { return true; }

  Status reshape(ReshapeContext& rc) const override {
    const ir::Node& node = rc.node;
    if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("X and W are required");
    if (!rc.device_state) return unsupported("no device state to plan with");
    const Shape& x = rc.in[0].shape;
    const Shape& w = rc.in[1].shape;
    const int sd = static_cast<int>(x.size()) - 2;
    if (sd != 1 && sd != 2) return rc.error("only 1-D and 2-D convolutions run on CUDA");
    if (w.size() != x.size()) return rc.error("W must have the rank of X");
    if (at_.nhwc && sd != 2) return rc.error("channels_last convolutions are 2-D");
    // Channels-last X [N,H,W,C] and W [M,kh,kw,C/g] are read through their channels-first dims.
    const int cdim = at_.nhwc ? 3 : 1, sdim = at_.nhwc ? 1 : 2;
    const int64_t n = x[0], c = x[cdim], m = w[0], g = at_.group;
    if (g < 1 || c % g != 0 || m % g != 0 || w[cdim] != c / g)
      return rc.error("channels (" + std::to_string(c) + ") and W " + shape_to_string(w) + " do not fit group=" +
                      std::to_string(g));
    if (rc.in.size() > 2 && rc.in[2].present && shape_numel(rc.in[2].shape) != m) return rc.error("B must have M elements");
    // Spatial geometry; 1-D runs as 2-D with a height of 1.
    int64_t in[2] = {1, 1}, k[2] = {1, 1}, s[2] = {1, 1}, dil[2] = {1, 1}, pb[2] = {0, 0}, pe[2] = {0, 0}, out[2] = {1, 1};
    Shape yshape = {n, m};
    for (int i = 0; i < sd; ++i) {
      const int j = sd == 1 ? 1 : i;
      in[j] = x[sdim + i];
      k[j] = w[sdim + i];
      if (!at_.w.kernel.empty() && at_.w.kernel[i] != k[j]) return rc.error("kernel_shape does not match W");
      s[j] = at_.w.strides.empty() ? 1 : at_.w.strides[i];
      dil[j] = at_.w.dilations.empty() ? 1 : at_.w.dilations[i];
      const int64_t p0 = at_.w.pads.empty() ? 0 : at_.w.pads[i], p1 = at_.w.pads.empty() ? 0 : at_.w.pads[i + sd];
      auto geo = window_geometry(in[j], k[j], s[j], dil[j], p0, p1, at_.w.auto_pad, false);
      if (!geo.ok()) return rc.error(geo.status().message());
      pb[j] = geo->pad_begin;
      pe[j] = geo->pad_end;
      out[j] = geo->out;
      yshape.push_back(out[j]);
    }
    if (at_.nhwc) yshape = {n, out[0], out[1], m};
    const DataType dt = rc.in[0].dtype;
    if (rc.in[1].dtype != dt || (rc.in.size() > 2 && rc.in[2].present && rc.in[2].dtype != dt))
      return rc.error("X, W and B must have one dtype");
    const cudnnDataType_t data = dt == DataType::kFloat16 ? CUDNN_DATA_HALF
                                 : dt == DataType::kBFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    const bool reduced = data != CUDNN_DATA_FLOAT;
    const bool tensor_ops = reduced || at_.tf32;  // float32 takes tensor-op (TF32) algorithms only when allowed
    rc.out[0] = {dt, yshape};
    auto p = std::make_shared<ConvShape>();
    p->elem_bytes = static_cast<int>(dtype_size(dt));
    p->nc = n * c;
    p->in_h = in[0];
    p->in_w = in[1];
    p->h = in[0];
    p->wd = in[1];
    p->m = m;
    if (shape_numel(yshape) == 0) {
      rc.state = p;
      return Status::Ok();
    }
    // Depthwise and channels-last: kiln's kernel, by the tactic "dw", and without a tactic for windows
    // of 5x5 and up, where cuDNN's grouped kernels are slow (ConvNeXt's 7x7: 1.2 ms a layer at batch
    // 64 on an H200). It applies the bias, the residual and the ReLU itself.
    if (depthwise(c, m, g, sd) && (rc.tactic == "dw" || (rc.tactic.empty() && k[0] * k[1] >= 25))) {
      DepthwiseArgs& d = p->dwa;
      d.elem = elem_of(dt);
      d.n = n, d.h = in[0], d.w_ = in[1], d.c = c, d.oh = out[0], d.ow = out[1];
      d.kh = static_cast<int>(k[0]), d.kw = static_cast<int>(k[1]), d.sh = static_cast<int>(s[0]), d.sw = static_cast<int>(s[1]);
      d.dh = static_cast<int>(dil[0]), d.dw = static_cast<int>(dil[1]), d.pt = pb[0], d.pl = pb[1];
      d.relu = at_.epilogue == 2;
      p->dw = true;
      p->fused = at_.epilogue;
      rc.workspace_bytes = aligned(depthwise_workspace_bytes(c, d.kh, d.kw));
      rc.planned_tactic = "dw";
      rc.state = std::move(p);
      return Status::Ok();
    }
    // Asymmetric pads: pad explicitly into the workspace, then convolve without padding.
    if (pb[0] != pe[0] || pb[1] != pe[1]) {
      if (at_.nhwc) return rc.error("channels_last convolutions take symmetric pads only");
      p->h = in[0] + pb[0] + pe[0];
      p->wd = in[1] + pb[1] + pe[1];
      p->pad_t = pb[0];
      p->pad_l = pb[1];
      p->padded_bytes = aligned(static_cast<size_t>(n * c * p->h * p->wd) * dtype_size(dt));
      pb[0] = pb[1] = 0;
    }
    auto i32 = [](int64_t v) { return static_cast<int>(v); };
    KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnCreateTensorDescriptor(&p->x), "descriptor"));
    KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnCreateTensorDescriptor(&p->y), "descriptor"));
    KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnCreateFilterDescriptor(&p->w), "descriptor"));
    KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnCreateConvolutionDescriptor(&p->conv), "descriptor"));
    const cudnnTensorFormat_t format = at_.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    int64_t cx = c;  // X's channels as cuDNN sees them
    // Only for large batches of pixels: at batch 1 the padding pass costs more than it saves
    // (ResNet-50 0.333 -> 0.343 ms, EfficientNet-B0 0.73 -> 0.76 ms; batch 64 3.07 -> 2.66 ms).
    const bool pad_channels = pads_channels(c, g, reduced, n * in[0] * in[1]);
    const bool c4 = pad_channels && c < 4 && rc.tactic.rfind("c4", 0) == 0;
    const std::string tactic = c4 ? rc.tactic.substr(std::min<size_t>(rc.tactic.size(), 3)) : rc.tactic;
    if (pad_channels) {
      p->cpad = cx = c4 ? 4 : (c + 7) / 8 * 8;
      p->c_in = c;
      p->x_rows = n * in[0] * in[1];
      p->w_rows = m * k[0] * k[1];
    }
    KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnSetFilter4dDescriptor(p->w, data, format, i32(m),
                                                                 i32(cx / g), i32(k[0]), i32(k[1])), "filter descriptor"));
    KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnSetConvolution2dDescriptor(p->conv, i32(pb[0]), i32(pb[1]), i32(s[0]), i32(s[1]),
                                                                      i32(dil[0]), i32(dil[1]), CUDNN_CROSS_CORRELATION,
                                                                      CUDNN_DATA_FLOAT), "convolution descriptor"));
    // (The math type before any workspace query: tensor-op kernels size theirs differently.)
    KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnSetConvolutionGroupCount(p->conv, i32(g)), "group count"));
    KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnSetConvolutionMathType(p->conv, tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
                                "math type"));
    auto describe = [&](cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd, int64_t images) {
      Status sx = dnn_ok(node, cudnnSetTensor4dDescriptor(xd, format, data, i32(images), i32(cx), i32(p->h), i32(p->wd)),
                         "input descriptor");
      if (!sx.ok()) return sx;
      return dnn_ok(node, cudnnSetTensor4dDescriptor(yd, format, data, i32(images), i32(m), i32(out[0]), i32(out[1])),
                    "output descriptor");
    };
    KILN_RETURN_IF_ERROR(describe(p->x, p->y, n));
    CudaState& st = *reshape_state(rc);
    if (c4) {
      // Halve the chunk until the padded chunk and the implicit-precomp-GEMM kernel's workspace fit.
      const size_t image_pad = static_cast<size_t>(in[0] * in[1] * cx) * dtype_size(dt);
      int64_t nb = n;
      for (size_t need = 0; nb > 1; nb = (nb + 1) / 2) {
        KILN_RETURN_IF_ERROR(describe(p->x, p->y, nb));
        if (cudnnGetConvolutionForwardWorkspaceSize(st.dnn, p->x, p->w, p->conv, p->y,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, &need) ==
                CUDNN_STATUS_SUCCESS &&
            aligned(image_pad * static_cast<size_t>(nb)) + need <= kWorkspaceBytes)
          break;
      }
      KILN_RETURN_IF_ERROR(describe(p->x, p->y, nb));
      p->batch = n;
      p->chunk = nb;
      p->x_rows = nb * in[0] * in[1];
      p->x_image_bytes = static_cast<size_t>(in[0] * in[1] * c) * dtype_size(dt);
      p->y_image_bytes = static_cast<size_t>(out[0] * out[1] * m) * dtype_size(dt);
      if (n % nb) {
        KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnCreateTensorDescriptor(&p->x_tail), "descriptor"));
        KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnCreateTensorDescriptor(&p->y_tail), "descriptor"));
        KILN_RETURN_IF_ERROR(describe(p->x_tail, p->y_tail, n % nb));
      }
    }
    if (pad_channels) {
      p->wpad_offset = aligned(static_cast<size_t>(p->x_rows * cx) * dtype_size(dt));
      p->padded_bytes = p->wpad_offset + aligned(static_cast<size_t>(p->w_rows * cx) * dtype_size(dt));
    }
    if (rc.in.size() > 2 && rc.in[2].present) {
      KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnCreateTensorDescriptor(&p->bias), "descriptor"));
      KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnSetTensor4dDescriptor(p->bias, format, data, 1, i32(m), 1, 1),
                                  "bias descriptor"));
    }
    // The algorithm: cuDNN's heuristic order, workspace <= 64 MiB; float32 takes FP32 math only (no
    // tensor-op/TF32). Measured on the H100 and lost (tests/gpu/results/h100_layout_run1.log,
    // h100_bench_run4.log): cuDNN's own timing (cudnnFind; ResNet-50 float16 batch 64 16.1 against
    // 13.8 ms, batch 1 2.6 against 0.57 ms) and the heuristic's first choice without the implicit-GEMM
    // preference (batch 64 10.9 against 10.2 ms, MobileNetV2 8.8 against 6.7 ms).
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnGetConvolutionForwardAlgorithm_v7(st.dnn, p->x, p->w, p->conv, p->y,
                                                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf),
                                "choosing an algorithm"));
    // Each candidate is confirmed, and its workspace sized, by cuDNN's workspace query for this exact
    // problem: the heuristic's list can hold algorithms the launch then refuses (seen on the H100:
    // float16 NCHW with 3 input channels at batch 64), and its memory figures are estimates. The tuner
    // times every confirmed one (tactics()); without a tactic the heuristic's first runs.
    // `implicit_gemm_only`: the implicit-GEMM family (FFT and Winograd transform in the data type).
    auto usable = [&](int i, bool implicit_gemm_only, size_t* bytes) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) return false;
      if (!tensor_ops && (perf[i].mathType == CUDNN_TENSOR_OP_MATH || perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
        return false;
      if (implicit_gemm_only && perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM &&
          perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM && perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_GEMM)
        return false;
      return cudnnGetConvolutionForwardWorkspaceSize(st.dnn, p->x, p->w, p->conv, p->y, perf[i].algo, bytes) ==
                 CUDNN_STATUS_SUCCESS &&
             *bytes <= kWorkspaceBytes;
    };
    // Half types list the implicit-GEMM family first (the kernel's own choice is among them whenever
    // there is one), then the others: the tuner may pick one of those where it measures faster and
    // its result agrees with the first's.
    size_t bytes = 0;
    for (int pass = reduced ? 0 : 1; pass < 2; ++pass)
      for (int i = 0; i < returned; ++i)
        if (usable(i, pass == 0, &bytes) &&
            std::find(p->viable.begin(), p->viable.end(), static_cast<int>(perf[i].algo)) == p->viable.end())
          p->viable.push_back(static_cast<int>(perf[i].algo));
    // Padded to 4 channels, cuDNN's heuristic leaves out the implicit-precomp-GEMM kernel that is
    // fastest there (H200, ResNet's stem at batch 32: 0.059 ms against 0.50 for the one it lists;
    // tests/gpu/results/h200_int8_probe_lt_stem.log): every algorithm whose workspace query passes.
    if (c4)
      for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a)
        if (std::find(p->viable.begin(), p->viable.end(), a) == p->viable.end() &&
            cudnnGetConvolutionForwardWorkspaceSize(st.dnn, p->x, p->w, p->conv, p->y, static_cast<cudnnConvolutionFwdAlgo_t>(a),
                                                    &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes <= kWorkspaceBytes)
          p->viable.insert(p->viable.begin(), a);
    if (p->viable.empty()) return runtime_error(node.describe() + ": cuDNN offers no algorithm for this convolution");
    // The fused epilogue (kiln.FusedConv with a bias; ReLU or no activation): cuDNN's fused call takes
    // any algorithm before a ReLU, implicit-precomp-GEMM only without one. Its tactics are "fused<N>";
    // "algo<N>" leaves the epilogue to the caller. Without a tactic the fused form runs where it can
    // (the tuner times both).
    if (at_.epilogue && rc.in.size() > 2 && rc.in[2].present)
      for (int a : p->viable)
        if (at_.epilogue == 2 || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) p->fusable.push_back(a);
    int algo = p->viable[0];
    bool fused = false;
    if (tactic.empty()) {
      if (!p->fusable.empty()) {
        algo = p->fusable[0];
        fused = true;
      }
    } else {
      for (int a : p->viable)
        if (tactic == "algo" + std::to_string(a)) algo = a;
      for (int a : p->fusable)
        if (tactic == "fused" + std::to_string(a)) {
          algo = a;
          fused = true;
        }
    }
    p->algo = static_cast<cudnnConvolutionFwdAlgo_t>(algo);
    if (fused) {
      p->fused = at_.epilogue;
      p->bias_inner = at_.nhwc ? 1 : out[0] * out[1];
      KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnCreateActivationDescriptor(&p->act), "descriptor"));
      // ReLU(NaN) = NaN as in the ONNX reference and kiln's own kernels: cuDNN's NaN option says
      // propagate (NOT_PROPAGATE lets its ReLU make NaN 0).
      KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnSetActivationDescriptor(p->act, at_.epilogue == 2 ? CUDNN_ACTIVATION_RELU
                                                                                                : CUDNN_ACTIVATION_IDENTITY,
                                                                     CUDNN_PROPAGATE_NAN, 0.0),
                                  "activation descriptor"));
    }
    KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnGetConvolutionForwardWorkspaceSize(st.dnn, p->x, p->w, p->conv, p->y, p->algo, &bytes),
                                "workspace size"));
    if (p->x_tail) {
      size_t tail = 0;
      KILN_RETURN_IF_ERROR(dnn_ok(node, cudnnGetConvolutionForwardWorkspaceSize(st.dnn, p->x_tail, p->w, p->conv, p->y_tail,
                                                                                p->algo, &tail),
                                  "workspace size"));
      bytes = std::max(bytes, tail);
    }
    p->algo_bytes = aligned(bytes);
    rc.workspace_bytes = p->padded_bytes + p->algo_bytes;
    rc.state = std::move(p);
    return Status::Ok();
  }

  std::vector<std::string> tactics(const ReshapeContext& rc) const override {
    std::vector<std::string> names;
    const Shape& xs = rc.in[0].shape;
    if (xs.size() == 4 && rc.in[1].shape.size() == 4 && depthwise(xs[3], rc.in[1].shape[0], at_.group, 2)) names.push_back("dw");
    ReshapeContext probe = rc;
    probe.tactic = "cudnn";  // cuDNN's own choice (not kiln's depthwise kernel): its algorithms are listed
    probe.out.assign(1, {});
    if (!reshape(probe).ok() || !probe.state) return names;
    const auto* p = static_cast<const ConvShape*>(probe.state.get());
    // A stem of 1-3 channels: also padded to 4, in batch chunks — first, before the tuner's
    // per-layer time limit goes to the slow algorithms.
    if (p->cpad && p->c_in < 4) {
      ReshapeContext c4 = rc;
      c4.tactic = "c4";
      c4.out.assign(1, {});
      if (reshape(c4).ok() && c4.state) {
        const auto* q = static_cast<const ConvShape*>(c4.state.get());
        for (int a : q->fusable) names.push_back("c4.fused" + std::to_string(a));
        for (int a : q->viable) names.push_back("c4.algo" + std::to_string(a));
      }
    }
    // Grouped (more than 4 groups): not the FFT, tiled-FFT and non-fused Winograd algorithms, which
    // cuDNN runs once per group (a launch each). On every grouped layer timed they lost by 40-4000x
    // (H200, mobilenet_v3_large and SSDlite: 0.25-17.6 ms against 0.004-0.007 ms), and timing one
    // cost seconds (a CUDA graph of hundreds of launches): 14 of mobilenet_v3's 30 s cold build
    // (tests/gpu/results/h200_build_time_check_2026-11-29b.log). They stay runnable by name.
    auto timed = [&](int a) {
      return at_.group <= 4 || (a != CUDNN_CONVOLUTION_FWD_ALGO_FFT && a != CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING &&
                                a != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
    };
    for (int a : p->fusable)
      if (timed(a)) names.push_back("fused" + std::to_string(a));
    for (int a : p->viable)
      if (timed(a)) names.push_back("algo" + std::to_string(a));
    return names;
  }

  Status run(KernelContext& ctx) const override {
    const auto* p = static_cast<const ConvShape*>(ctx.shape_state());
    if (!p) return internal_error(ctx.node().describe() + ": run before reshape");
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return Status::Ok();
    CudaState& st = state_of(ctx);
    if (p->dw) {
      DepthwiseArgs d = p->dwa;
      d.x = ctx.input(0).raw();
      d.w = ctx.input(1).raw();
      d.bias = ctx.num_inputs() > 2 && ctx.has_input(2) ? ctx.input(2).raw() : nullptr;
      d.z = at_.epilogue && ctx.num_inputs() > 3 && ctx.has_input(3) ? ctx.input(3).raw() : nullptr;
      d.y = y.raw();
      return launched(ctx, launch_depthwise_nhwc(d, ctx.workspace(), st.stream));
    }
    char* ws = static_cast<char*>(ctx.workspace());
    const char* xp = static_cast<const char*>(ctx.input(0).raw());
    const void* wp = ctx.input(1).raw();
    const bool has_z = p->fused && ctx.num_inputs() > 3 && ctx.has_input(3);
    const char* zp = has_z ? static_cast<const char*>(ctx.input(3).raw()) : nullptr;
    char* yp = static_cast<char*>(y.raw());
    if (p->cpad) {
      KILN_RETURN_IF_ERROR(launched(ctx, launch_pad_rows(p->elem_bytes, wp, ws + p->wpad_offset, p->w_rows, p->c_in, p->cpad,
                                                         st.stream)));
      wp = ws + p->wpad_offset;
    }
    if (!p->chunk) {
      if (p->cpad) {
        KILN_RETURN_IF_ERROR(launched(ctx, launch_pad_rows(p->elem_bytes, xp, ws, p->x_rows, p->c_in, p->cpad, st.stream)));
        xp = ws;
      } else if (p->padded_bytes) {
        KILN_RETURN_IF_ERROR(launched(ctx, launch_pad2d(p->elem_bytes, xp, ws, p->nc, p->in_h, p->in_w, p->h, p->wd,
                                                        p->pad_t, p->pad_l, st.stream)));
        xp = ws;
      }
      return convolve(ctx, *p, p->x, p->y, xp, wp, zp, yp, y.numel());
    }
    // Chunks of the batch, each padded into the workspace and convolved.
    for (int64_t first = 0; first < p->batch; first += p->chunk) {
      const int64_t images = std::min(p->chunk, p->batch - first);
      const bool tail = images != p->chunk;
      const size_t yo = static_cast<size_t>(first) * p->y_image_bytes;
      KILN_RETURN_IF_ERROR(launched(ctx, launch_pad_rows(p->elem_bytes, xp + static_cast<size_t>(first) * p->x_image_bytes, ws,
                                                         p->x_rows / p->chunk * images, p->c_in, p->cpad, st.stream)));
      KILN_RETURN_IF_ERROR(convolve(ctx, *p, tail ? p->x_tail : p->x, tail ? p->y_tail : p->y, ws, wp, zp ? zp + yo : nullptr,
                                    yp + yo, static_cast<int64_t>(p->y_image_bytes / p->elem_bytes) * images));
    }
    return Status::Ok();
  }

 private:
  // One filter per channel on channels-last 2-D tensors: kiln's depthwise kernel takes it.
  bool depthwise(int64_t c, int64_t m, int64_t g, int sd) const { return at_.nhwc && sd == 2 && g > 1 && g == c && m == c; }

  bool pads_channels(int64_t c, int64_t g, bool reduced, int64_t pixels) const {
    return at_.nhwc && reduced && g == 1 && c % 8 != 0 && c < 32 && pixels >= (int64_t{1} << 18);
  }

  // One convolution call over X (xd, xp) into Y (yd, yp, `count` elements), with the epilogue.
  Status convolve(KernelContext& ctx, const ConvShape& sh, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd,
                  const void* xp, const void* wp, const void* zp, void* yp, int64_t count) const {
    CudaState& st = state_of(ctx);
    const float one = 1.f, zero = 0.f;
    char* ws = static_cast<char*>(ctx.workspace());
    void* algo_ws = sh.algo_bytes ? ws + sh.padded_bytes : nullptr;
    if (sh.fused) {
      // y = act(conv(x) + z + bias); with no residual alpha2 = 0 and z aliases y (cuDNN allows it).
      const float alpha2 = zp ? 1.f : 0.f;
      const cudnnStatus_t fs = cudnnConvolutionBiasActivationForward(
          st.dnn, &one, xd, xp, sh.w, wp, sh.conv, sh.algo, algo_ws, sh.algo_bytes, &alpha2, yd, zp ? zp : yp, sh.bias,
          ctx.input(2).raw(), sh.act, yd, yp);
      if (fs == CUDNN_STATUS_SUCCESS) return Status::Ok();
      if (fs != CUDNN_STATUS_NOT_SUPPORTED && fs != CUDNN_STATUS_BAD_PARAM) return dnn_ok(ctx.node(), fs, "fused convolution");
      // No fused kernel in this cuDNN for the problem: the convolution, then one epilogue pass.
      KILN_RETURN_IF_ERROR(dnn_ok(ctx.node(), cudnnConvolutionForward(st.dnn, &one, xd, xp, sh.w, wp, sh.conv, sh.algo,
                                                                      algo_ws, sh.algo_bytes, &zero, yd, yp),
                                  "convolution"));
      return launched(ctx, launch_bias_act(elem_of(ctx.output(0).dtype()), yp, ctx.input(2).raw(), zp, count, sh.m,
                                           sh.bias_inner, sh.fused == 2, UnaryOp::kRelu, 0.f, 0.f, st.stream));
    }
    KILN_RETURN_IF_ERROR(dnn_ok(ctx.node(), cudnnConvolutionForward(st.dnn, &one, xd, xp, sh.w, wp, sh.conv, sh.algo, algo_ws,
                                                                    sh.algo_bytes, &zero, yd, yp),
                                "convolution"));
    // Inside kiln.FusedConv (an epilogue asked for, not fused here) the bias is the caller's.
    if (sh.bias && !at_.epilogue)
      KILN_RETURN_IF_ERROR(dnn_ok(ctx.node(), cudnnAddTensor(st.dnn, &one, sh.bias, ctx.input(2).raw(), &one, yd, yp), "bias"));
    return Status::Ok();
  }

  ConvAttrs at_;
};

}  // namespace

int conv_epilogue_applied(const void* shape_state) {
  const auto* p = static_cast<const ConvShape*>(shape_state);
  return p ? p->fused : 0;
}

std::string conv_check(const ir::Node& n) {
  const ops::ConvParams p = ops::parse_conv(n);
  int spatial = -1;  // unknown (no typed input, and kernel_shape absent or empty): rejected below
  if (n.has_input(1) && n.inputs[1]->type.shape.known) spatial = n.inputs[1]->type.shape.rank() - 2;
  else if (n.has_input(0) && n.inputs[0]->type.shape.known) spatial = n.inputs[0]->type.shape.rank() - 2;
  else if (!p.window.kernel.empty()) spatial = static_cast<int>(p.window.kernel.size());
  if (spatial != 1 && spatial != 2) return "only 1-D and 2-D convolutions run on CUDA (spatial rank unknown or other)";
  if (p.channels_last && spatial != 2) return "channels_last convolutions are 2-D";
  return require_float(n);
}

namespace {

Expected<KernelPtr> create_conv(const ir::Node& n) {
  const ops::ConvParams p = ops::parse_conv(n);
  ConvAttrs at;
  at.w = p.window;
  at.group = p.group;
  at.nhwc = p.channels_last;
  at.tf32 = ops::allows_tf32(n);
  at.epilogue = static_cast<int>(n.attr_int(kBiasEpilogueAttr, 0));
  const ops::WindowAttrs& w = at.w;
  const size_t sd = !w.kernel.empty() ? w.kernel.size() : !w.strides.empty() ? w.strides.size() : w.pads.size() / 2;
  if ((!w.strides.empty() && w.strides.size() != sd) || (!w.dilations.empty() && w.dilations.size() != sd) ||
      (!w.pads.empty() && w.pads.size() != 2 * sd))
    return invalid_model(n.describe() + ": kernel_shape, strides, dilations and pads disagree in length");
  return KernelPtr(new ConvKernel(std::move(at)));
}

}  // namespace

void register_conv(KernelRegistry& r) {
  KernelDef d;
  d.op = "Conv";
  d.since = 1;
  d.name = "cuda.Conv.cudnn";
  d.half_floats = true;
  d.check = conv_check;
  d.create = [](const ir::Node& n, KernelInit&) { return create_conv(n); };
  r.add(d);
}

}  // namespace kiln::cuda
