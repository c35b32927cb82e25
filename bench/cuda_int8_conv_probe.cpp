// bench/cuda_int8_conv_probe.cpp — how fast can cuDNN run ResNet-50's convolutions in int8 on this GPU?
//
// Issue #12 asks for ResNet-50 INT8 at >= 50,000 img/s. Before kiln's int8 convolution kernel is
// written this probe measures the library's ceiling: every convolution of torchvision's ResNet-50
// (224x224; the stem is left out, its 3 channels are no int8 shape) at batch N, timed with CUDA
// events around CUDA graphs of 20 calls (best of 5), in three forms, each with the best algorithm cuDNN offers for it:
//   fp16  NHWC half in, half out, float accumulation (what kiln's fp16 engine runs today)
//   int8  NHWC int8 in, int8 out, int32 accumulation, bias + ReLU fused (cudnnConvolutionBiasActivationForward)
//   i8x32 NC/32HW32 int8 (the vectorised layout IMMA kernels read), same fusion
//   g-pc, g-res  cuDNN's graph API: int8 convolution with per-channel scales, bias, [an int8 residual,]
//         ReLU and the int8 output in one operation graph (see time_graph_layer)
// The totals weigh each layer by how often ResNet-50 runs it; img/s = N / total. Random data: the
// figures are times, not results.
//
// Build (host code only; cuDNN brings the kernels):
//   g++ -O2 -std=c++17 -I/usr/local/cuda/include bench/cuda_int8_conv_probe.cpp
//       -L/usr/local/cuda/lib64 -lcudnn -lcudart -o cuda_int8_conv_probe
//   (add -Wno-deprecated-declarations: the graph API's plan still takes its handle as an attribute)
//   (and -lcublasLt for --lt)
// Run:   ./cuda_int8_conv_probe [-v] [--x32] [N ...]   (default 64 128 256; --x32 adds i8x32, -v says
//        why cuDNN refused a graph)
//        --lt: the 1x1 stride-1 layers through cuDNN's graph against cuBLASLt's int8 GEMM (per-row
//        alpha vector, int8 C as the residual), after checking cuBLASLt's epilogue on small random
//        data against a host computation; --stem-algos: the float16 stem padded to 4 or 8 channels,
//        every legacy algorithm per batch (status, workspace, time).
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

namespace {

struct Layer {
  int c, k, h, r, stride, count;
};

// torchvision ResNet-50 v1.5 (the stride sits in each stage's first 3x3), input side h.
const std::vector<Layer> kResNet50 = {
    {64, 64, 56, 1, 1, 1},     {64, 64, 56, 3, 1, 3},     {64, 256, 56, 1, 1, 4},
    {256, 64, 56, 1, 1, 2},    {256, 128, 56, 1, 1, 1},   {128, 128, 56, 3, 2, 1},
    {128, 512, 28, 1, 1, 4},   {256, 512, 56, 1, 2, 1},   {512, 128, 28, 1, 1, 3},
    {128, 128, 28, 3, 1, 3},   {512, 256, 28, 1, 1, 1},   {256, 256, 28, 3, 2, 1},
    {256, 1024, 14, 1, 1, 6},  {512, 1024, 28, 1, 2, 1},  {1024, 256, 14, 1, 1, 5},
    {256, 256, 14, 3, 1, 5},   {1024, 512, 14, 1, 1, 1},  {512, 512, 14, 3, 2, 1},
    {512, 2048, 7, 1, 1, 3},   {1024, 2048, 14, 1, 2, 1}, {2048, 512, 7, 1, 1, 2},
    {512, 512, 7, 3, 1, 2},
};

// The stem's 7x7/2 on the RGB image with its channels padded to 4 or 8 (int8 wants C % 4 == 0), and as
// a space-to-depth 4x4 on 16 channels (12 padded) — the probe's --stem flag times these instead.
const std::vector<Layer> kStems = {{4, 64, 224, 7, 2, 1}, {8, 64, 224, 7, 2, 1}, {16, 64, 112, 4, 1, 1}};

enum class Form { fp16, int8, int8x32, gpc, gres };
const char* name(Form f) {
  switch (f) {
    case Form::fp16: return "fp16";
    case Form::int8: return "int8";
    case Form::int8x32: return "i8x32";
    case Form::gpc: return "g-pc";
    default: return "g-res";
  }
}

struct Handles {
  cudnnHandle_t dnn;
  cudaStream_t stream;
  cudaEvent_t start, stop;
};

// The GPU time of one call (ms): 20 calls captured in a CUDA graph, the best of 5 launches (after 3);
// -1 when the calls do not capture.
template <typename Call>
float time_captured(Handles& hd, Call call) {
  const int reps = 20;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(hd.stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) call();
  if (cudaStreamEndCapture(hd.stream, &graph) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, hd.stream));
  float ms = 1e30f;
  for (int t = 0; t < 5; ++t) {
    cudaEventRecord(hd.start, hd.stream);
    CK(cudaGraphLaunch(exec, hd.stream));
    cudaEventRecord(hd.stop, hd.stream);
    CK(cudaEventSynchronize(hd.stop));
    float one_ms = 0;
    cudaEventElapsedTime(&one_ms, hd.start, hd.stop);
    ms = std::min(ms, one_ms);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms / reps;
}

// The legacy API's descriptors of one convolution with a ReLU epilogue, destroyed with it.
struct LegacyDescs {
  cudnnTensorDescriptor_t x, y, b;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t cv;
  cudnnActivationDescriptor_t act;
  LegacyDescs() {
    cudnnCreateTensorDescriptor(&x);
    cudnnCreateTensorDescriptor(&y);
    cudnnCreateTensorDescriptor(&b);
    cudnnCreateFilterDescriptor(&w);
    cudnnCreateConvolutionDescriptor(&cv);
    cudnnCreateActivationDescriptor(&act);
    cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0);
  }
  ~LegacyDescs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(b);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(cv);
    cudnnDestroyActivationDescriptor(act);
  }
};

// The best time (ms) over cuDNN's algorithms for one layer in one form; -1 when none runs.
float time_layer(Handles& hd, const Layer& l, int n, Form form, std::string* algo_out) {
  const int pad = l.r / 2;
  const int ho = (l.h + 2 * pad - l.r) / l.stride + 1;
  LegacyDescs d;
  cudnnTensorDescriptor_t x = d.x, y = d.y, b = d.b;
  cudnnFilterDescriptor_t w = d.w;
  cudnnConvolutionDescriptor_t cv = d.cv;
  cudnnActivationDescriptor_t act = d.act;
  // The form's descriptors: layout and type of X, W and Y, of the bias, and the accumulation type.
  struct Desc {
    cudnnTensorFormat_t format;
    cudnnDataType_t data, bias_data, compute;
    cudnnTensorFormat_t bias_format;
    size_t elem;
  };
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const Desc dd = form == Form::fp16 ? Desc{CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, 2}
                  : form == Form::int8
                      ? Desc{CUDNN_TENSOR_NHWC, CUDNN_DATA_INT8, CUDNN_DATA_FLOAT, CUDNN_DATA_INT32, CUDNN_TENSOR_NCHW, 1}
                      : Desc{CUDNN_TENSOR_NCHW_VECT_C, CUDNN_DATA_INT8x32, CUDNN_DATA_FLOAT, CUDNN_DATA_INT32, CUDNN_TENSOR_NCHW, 1};
#pragma GCC diagnostic pop
  const size_t elem = dd.elem;
  cudnnSetTensor4dDescriptor(x, dd.format, dd.data, n, l.c, l.h, l.h);
  cudnnSetTensor4dDescriptor(y, dd.format, dd.data, n, l.k, ho, ho);
  cudnnSetTensor4dDescriptor(b, dd.bias_format, dd.bias_data, 1, l.k, 1, 1);
  cudnnSetFilter4dDescriptor(w, dd.data, dd.format, l.k, l.c, l.r, l.r);
  cudnnSetConvolution2dDescriptor(cv, pad, pad, l.stride, l.stride, 1, 1, CUDNN_CROSS_CORRELATION, dd.compute);
  cudnnSetConvolutionMathType(cv, CUDNN_TENSOR_OP_MATH);
  cudnnStatus_t st;
  const size_t xs = size_t(n) * l.c * l.h * l.h * elem, ys = size_t(n) * l.k * ho * ho * elem;
  const size_t ws_ = size_t(l.k) * l.c * l.r * l.r * elem;
  void *dx, *dy, *dw, *db, *work = nullptr;
  CK(cudaMalloc(&dx, xs));
  CK(cudaMalloc(&dy, ys));
  CK(cudaMalloc(&dw, ws_));
  CK(cudaMalloc(&db, size_t(l.k) * 4));
  CK(cudaMemset(dx, 1, xs));
  CK(cudaMemset(dw, 1, ws_));
  CK(cudaMemset(db, 0, size_t(l.k) * 4));
  const size_t work_cap = size_t(256) << 20;
  CK(cudaMalloc(&work, work_cap));
  float best = -1;
  const float one = 1.f, zero = 0.f;
  for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
    auto algo = cudnnConvolutionFwdAlgo_t(a);
    size_t need = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(hd.dnn, x, w, cv, y, algo, &need) != CUDNN_STATUS_SUCCESS ||
        need > work_cap)
      continue;
    auto call = [&]() {
      if (form == Form::fp16)
        return cudnnConvolutionForward(hd.dnn, &one, x, dx, w, dw, cv, algo, work, need, &zero, y, dy);
      return cudnnConvolutionBiasActivationForward(hd.dnn, &one, x, dx, w, dw, cv, algo, work, need, &zero, y,
                                                   dy, b, db, act, y, dy);
    };
    st = call();
    if (st != CUDNN_STATUS_SUCCESS) continue;
    if (cudaStreamSynchronize(hd.stream) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    // Captured into a CUDA graph, as kiln's engines run: cuDNN's host time per call (tens of
    // microseconds) would otherwise exceed the small layers' GPU time.
    const float ms = time_captured(hd, call);
    if (ms < 0) continue;
    if (best < 0 || ms < best) {
      best = ms;
      *algo_out = std::to_string(a);
    }
  }
  cudaFree(dx);
  cudaFree(dy);
  cudaFree(dw);
  cudaFree(db);
  cudaFree(work);
  return best;
}


// ---- cuDNN's graph API: int8 convolution with a per-channel float epilogue fused ---------------------
// g-pc:  y8 = int8(relu(conv(x8, w8) * scale[k] + bias[k]))            (per-channel weight scales)
// g-res: y8 = int8(relu(conv(x8, w8) * scale[k] + bias[k] + a2 * z8))  (+ a residual in int8)
// NHWC int8 tensors, int32 accumulation; the engines are whatever cuDNN's heuristics (mode A) offer,
// runtime-fusion (NVRTC) ones included; each is timed as above and the best is kept.

#define DK(x)                                                                                   \
  do {                                                                                          \
    cudnnStatus_t s_ = (x);                                                                     \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                           \
      if (verbose) std::fprintf(stderr, "  %s:%d %s\n", __FILE__, __LINE__, cudnnGetErrorString(s_)); \
      return nullptr;                                                                           \
    }                                                                                           \
  } while (0)

bool verbose = false;
bool only_graph = false, one_layer = false, stems = false;  // --only-graph: g-pc and g-res only; --one: the first 3x3 layer only
// The residual's form in g-res (the probe's --res flag): its type, and whether its scale rides on the
// add (alpha2) or comes from a separate multiply by a per-channel tensor.
cudnnDataType_t res_type = CUDNN_DATA_INT8;
bool res_alpha = true;
cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;

using BD = cudnnBackendDescriptor_t;

struct Owned {
  std::vector<BD> all;
  ~Owned() {
    for (BD d : all) cudnnBackendDestroyDescriptor(d);
  }
  BD make(cudnnBackendDescriptorType_t t) {
    BD d = nullptr;
    if (cudnnBackendCreateDescriptor(t, &d) != CUDNN_STATUS_SUCCESS) return nullptr;
    all.push_back(d);
    return d;
  }
};

// A 4-D tensor given as (n, c, h, w) with NHWC strides.
BD tensor(Owned& o, int64_t uid, cudnnDataType_t t, int64_t n, int64_t c, int64_t h, int64_t w, bool virt) {
  BD d = o.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {n, c, h, w}, strides[4] = {c * h * w, 1, w * c, c}, align = 16;
  DK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t));
  DK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  DK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  DK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  DK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  DK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
  DK(cudnnBackendFinalize(d));
  return d;
}

// One pointwise op y = mode(x [, b]) with alpha2 on b.
BD pointwise(Owned& o, cudnnPointwiseMode_t mode, BD x, BD b, BD y, float alpha2 = 1.f) {
  BD pw = o.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  DK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  DK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
  DK(cudnnBackendFinalize(pw));
  BD op = o.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
  DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  if (b) {
    DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha2));
  }
  DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  DK(cudnnBackendFinalize(op));
  return op;
}

enum Uid : int64_t { kX = 1, kW, kY, kScale, kBias, kZ, kV1, kV2, kV3, kV4, kV5 };

// The operation graph of one layer in form g-pc or g-res, or null when cuDNN refuses it.
BD layer_graph(Owned& o, cudnnHandle_t dnn, const Layer& l, int n, int ho, bool residual) {
  const int pad = l.r / 2;
  BD x = tensor(o, kX, CUDNN_DATA_INT8, n, l.c, l.h, l.h, false);
  BD w = tensor(o, kW, CUDNN_DATA_INT8, l.k, l.c, l.r, l.r, false);
  BD acc = tensor(o, kV1, CUDNN_DATA_FLOAT, n, l.k, ho, ho, true);
  BD scale = tensor(o, kScale, CUDNN_DATA_FLOAT, 1, l.k, 1, 1, false);
  BD bias = tensor(o, kBias, CUDNN_DATA_FLOAT, 1, l.k, 1, 1, false);
  BD scaled = tensor(o, kV2, CUDNN_DATA_FLOAT, n, l.k, ho, ho, true);
  BD biased = tensor(o, kV3, CUDNN_DATA_FLOAT, n, l.k, ho, ho, true);
  BD z = residual ? tensor(o, kZ, res_type, n, l.k, ho, ho, false) : nullptr;
  BD zs = residual && !res_alpha ? tensor(o, kV5, CUDNN_DATA_FLOAT, n, l.k, ho, ho, true) : nullptr;
  BD summed = residual ? tensor(o, kV4, CUDNN_DATA_FLOAT, n, l.k, ho, ho, true) : nullptr;
  BD y = tensor(o, kY, CUDNN_DATA_INT8, n, l.k, ho, ho, false);
  if (!x || !w || !acc || !scale || !bias || !scaled || !biased || !y || (residual && (!z || !summed))) return nullptr;
  BD cv = o.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  cudnnDataType_t comp = CUDNN_DATA_INT32;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t dims = 2, dil[2] = {1, 1}, str[2] = {l.stride, l.stride}, pads[2] = {pad, pad};
  DK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  DK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  DK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
  DK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
  DK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
  DK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
  DK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
  DK(cudnnBackendFinalize(cv));
  BD conv = o.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  float one = 1.f, zero = 0.f;
  DK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  DK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
  DK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &acc));
  DK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cv));
  DK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one));
  DK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero));
  DK(cudnnBackendFinalize(conv));
  std::vector<BD> ops = {conv, pointwise(o, CUDNN_POINTWISE_MUL, acc, scale, scaled),
                         pointwise(o, CUDNN_POINTWISE_ADD, scaled, bias, biased)};
  if (residual && res_alpha) ops.push_back(pointwise(o, CUDNN_POINTWISE_ADD, biased, z, summed, 0.5f));
  if (residual && !res_alpha) {
    ops.push_back(pointwise(o, CUDNN_POINTWISE_MUL, z, scale, zs));
    ops.push_back(pointwise(o, CUDNN_POINTWISE_ADD, biased, zs, summed));
  }
  ops.push_back(pointwise(o, CUDNN_POINTWISE_RELU_FWD, residual ? summed : biased, nullptr, y));
  for (BD op : ops)
    if (!op) return nullptr;
  BD g = o.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  DK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data()));
  DK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn));
  DK(cudnnBackendFinalize(g));
  return g;
}

float time_graph_layer(Handles& hd, const Layer& l, int n, bool residual, std::string* algo_out) {
  const int pad = l.r / 2;
  const int ho = (l.h + 2 * pad - l.r) / l.stride + 1;
  Owned o;
  BD g = layer_graph(o, hd.dnn, l, n, ho, residual);
  if (!g) {
    *algo_out = "graph refused";
    return -1;
  }
  BD heur = o.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendHeurMode_t hm = heur_mode;
  cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
  cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm);
  if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) {
    *algo_out = "no heuristics";
    return -1;
  }
  const int want = 6;
  std::vector<BD> cfgs;
  for (int i = 0; i < want; ++i) cfgs.push_back(o.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  int64_t got = 0;
  cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, want, &got, cfgs.data());
  const size_t xs = size_t(n) * l.c * l.h * l.h, ys = size_t(n) * l.k * ho * ho, wsz = size_t(l.k) * l.c * l.r * l.r;
  void *dx, *dy, *dw, *dz, *dscale, *dbias, *work;
  CK(cudaMalloc(&dx, xs));
  CK(cudaMalloc(&dy, ys));
  CK(cudaMalloc(&dz, ys));
  CK(cudaMalloc(&dw, wsz));
  CK(cudaMalloc(&dscale, size_t(l.k) * 4));
  CK(cudaMalloc(&dbias, size_t(l.k) * 4));
  const size_t work_cap = size_t(256) << 20;
  CK(cudaMalloc(&work, work_cap));
  CK(cudaMemset(dx, 1, xs));
  CK(cudaMemset(dz, 1, ys));
  CK(cudaMemset(dw, 1, wsz));
  CK(cudaMemset(dscale, 0, size_t(l.k) * 4));
  CK(cudaMemset(dbias, 0, size_t(l.k) * 4));
  float best = -1;
  int tried = 0;
  for (int64_t i = 0; i < got; ++i) {
    BD plan = o.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &hd.dnn);
    cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
    if (cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS) continue;
    int64_t need = 0, cnt = 0;
    cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &need);
    if (size_t(need) > work_cap) continue;
    BD eng = o.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t index = -1;
    cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng);
    cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &index);
    BD pack = o.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    int64_t uids[6] = {kX, kW, kY, kScale, kBias, kZ};
    void* ptrs[6] = {dx, dw, dy, dscale, dbias, dz};
    const int64_t count = residual ? 6 : 5;
    cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids);
    cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, ptrs);
    cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &work);
    if (cudnnBackendFinalize(pack) != CUDNN_STATUS_SUCCESS) continue;
    if (cudnnBackendExecute(hd.dnn, plan, pack) != CUDNN_STATUS_SUCCESS || cudaStreamSynchronize(hd.stream) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    ++tried;
    const float ms = time_captured(hd, [&] { cudnnBackendExecute(hd.dnn, plan, pack); });
    if (ms < 0) continue;
    if (best < 0 || ms < best) {
      best = ms;
      *algo_out = "e" + std::to_string(index);
    }
  }
  if (best < 0) *algo_out = std::to_string(got) + " cfgs, none ran";
  if (verbose) std::fprintf(stderr, "  %d of %lld configs ran\n", tried, (long long)got);
  cudaFree(dx);
  cudaFree(dy);
  cudaFree(dz);
  cudaFree(dw);
  cudaFree(dscale);
  cudaFree(dbias);
  cudaFree(work);
  return best;
}


// ---- cuBLASLt: a 1x1 stride-1 convolution as an int8 GEMM (--lt) ------------------------------------
// NHWC X [P, K] (P = N·H·W pixels) times W [M, K] is D [P, M] — in cuBLASLt's column-major terms
// D (M x P) = op(A) (M x K) · B (K x P) with A = W transposed (TN, what IMMA kernels take). The
// epilogue in one call: D8 = int8(relu(alpha[m] · acc + beta · C8 + bias[m])), alpha a per-row
// (output channel) device vector, beta a host scalar, C8 the int8 residual (beta 0: none).
// check_lt_semantics() runs it on small random data against a host computation first, so the
// timing below is of a call whose meaning is known.

#define LK(x)                                                                                        \
  do {                                                                                               \
    cublasStatus_t s_ = (x);                                                                         \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                               \
      if (verbose) std::fprintf(stderr, "  %s:%d cublasLt status %d\n", __FILE__, __LINE__, int(s_)); \
      return false;                                                                                  \
    }                                                                                                \
  } while (0)

struct LtGemm {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  ~LtGemm() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  // M output channels, K input channels, P pixels; `residual`: beta from the host, else beta zero.
  bool setup(cublasLtHandle_t lt, int64_t m, int64_t k, int64_t p, bool residual, bool relu, const float* alpha_dev,
             const float* bias_dev, size_t work_cap) {
    LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32I, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt));
    const cublasLtPointerMode_t pm =
        residual ? CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST : CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm));
    const cublasLtEpilogue_t epi = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_dev, sizeof bias_dev));
    const cudaDataType_t bt = CUDA_R_32F;
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    (void)alpha_dev;
    LK(cublasLtMatrixLayoutCreate(&a, CUDA_R_8I, k, m, k));
    LK(cublasLtMatrixLayoutCreate(&b, CUDA_R_8I, k, p, k));
    LK(cublasLtMatrixLayoutCreate(&c, CUDA_R_8I, m, p, m));
    LK(cublasLtMatmulPreferenceCreate(&pref));
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &work_cap, sizeof work_cap));
    algos.resize(16);
    int found = 0;
    LK(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, int(algos.size()), algos.data(), &found));
    algos.resize(size_t(found));
    return found > 0;
  }
  cublasStatus_t run(cublasLtHandle_t lt, size_t i, const float* alpha, const float* beta, const void* w, const void* x,
                     const void* z, void* y, void* work, size_t work_cap, cudaStream_t s) const {
    return cublasLtMatmul(lt, op, alpha, w, a, x, b, beta, z ? z : y, c, y, c, &algos[i].algo, work, work_cap, s);
  }
};

// Host copies of random int8 data for a small problem; returns the number of outputs more than 1 off.
bool check_lt_semantics(Handles& hd, cublasLtHandle_t lt, bool residual, bool relu, int* bad_out, int* algos_out) {
  const int64_t m = 64, k = 96, p = 200;
  std::vector<int8_t> w(m * k), x(p * k), z(p * m), y(p * m);
  std::vector<float> alpha(m), bias(m);
  unsigned seed = 12345;
  auto rnd = [&] { seed = seed * 1103515245u + 12345u; return int((seed >> 16) & 0x7fff); };
  for (auto& v : w) v = int8_t(rnd() % 255 - 127);
  for (auto& v : x) v = int8_t(rnd() % 255 - 127);
  for (auto& v : z) v = int8_t(rnd() % 255 - 127);
  for (int64_t j = 0; j < m; ++j) {
    alpha[j] = 1e-4f * float(1 + rnd() % 50);
    bias[j] = float(rnd() % 81 - 40);
  }
  const float beta = residual ? 0.75f : 0.f;
  void *dw, *dx, *dz, *dy, *da, *db, *work;
  const size_t work_cap = size_t(32) << 20;
  CK(cudaMalloc(&dw, w.size()));
  CK(cudaMalloc(&dx, x.size()));
  CK(cudaMalloc(&dz, z.size()));
  CK(cudaMalloc(&dy, y.size()));
  CK(cudaMalloc(&da, m * 4));
  CK(cudaMalloc(&db, m * 4));
  CK(cudaMalloc(&work, work_cap));
  CK(cudaMemcpy(dw, w.data(), w.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dx, x.data(), x.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dz, z.data(), z.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(da, alpha.data(), m * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, bias.data(), m * 4, cudaMemcpyHostToDevice));
  LtGemm g;
  bool ok = g.setup(lt, m, k, p, residual, relu, static_cast<float*>(da), static_cast<float*>(db), work_cap);
  *algos_out = int(g.algos.size());
  *bad_out = -1;
  if (ok) {
    int worst = 0;
    for (size_t i = 0; i < g.algos.size(); ++i) {
      CK(cudaMemset(dy, 0x55, y.size()));
      if (g.run(lt, i, static_cast<float*>(da), &beta, dw, dx, residual ? dz : nullptr, dy, work, work_cap, hd.stream) !=
          CUBLAS_STATUS_SUCCESS)
        continue;
      CK(cudaStreamSynchronize(hd.stream));
      CK(cudaMemcpy(y.data(), dy, y.size(), cudaMemcpyDeviceToHost));
      int bad = 0;
      for (int64_t q = 0; q < p; ++q)
        for (int64_t j = 0; j < m; ++j) {
          long acc = 0;
          for (int64_t t = 0; t < k; ++t) acc += long(w[j * k + t]) * x[q * k + t];
          double v = double(alpha[j]) * acc + beta * z[q * m + j] + bias[j];
          if (relu) v = std::max(v, 0.0);
          const double r = std::min(127.0, std::max(-128.0, std::nearbyint(v)));
          if (std::abs(r - y[q * m + j]) > 1) ++bad;
        }
      worst = std::max(worst, bad);
    }
    *bad_out = worst;
  }
  cudaFree(dw); cudaFree(dx); cudaFree(dz); cudaFree(dy); cudaFree(da); cudaFree(db); cudaFree(work);
  return ok;
}

// The best time (ms) of cuBLASLt's offered algorithms for one 1x1 stride-1 layer; -1 when none runs.
float time_lt_layer(Handles& hd, cublasLtHandle_t lt, const Layer& l, int n, bool residual, std::string* algo_out) {
  const int64_t m = l.k, k = l.c, p = int64_t(n) * l.h * l.h;
  void *dw, *dx, *dz, *dy, *da, *db, *work;
  const size_t work_cap = size_t(32) << 20;
  CK(cudaMalloc(&dw, m * k));
  CK(cudaMalloc(&dx, p * k));
  CK(cudaMalloc(&dz, p * m));
  CK(cudaMalloc(&dy, p * m));
  CK(cudaMalloc(&da, m * 4));
  CK(cudaMalloc(&db, m * 4));
  CK(cudaMalloc(&work, work_cap));
  CK(cudaMemset(dw, 1, m * k));
  CK(cudaMemset(dx, 1, p * k));
  CK(cudaMemset(dz, 1, p * m));
  CK(cudaMemset(da, 0, m * 4));
  CK(cudaMemset(db, 0, m * 4));
  LtGemm g;
  float best = -1;
  const float beta = 0.5f;
  *algo_out = "no algo";
  if (g.setup(lt, m, k, p, residual, true, static_cast<float*>(da), static_cast<float*>(db), work_cap))
    for (size_t i = 0; i < g.algos.size(); ++i) {
      auto call = [&] {
        return g.run(lt, i, static_cast<float*>(da), &beta, dw, dx, residual ? dz : nullptr, dy, work, work_cap, hd.stream);
      };
      if (call() != CUBLAS_STATUS_SUCCESS || cudaStreamSynchronize(hd.stream) != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      const float ms = time_captured(hd, call);
      if (ms >= 0 && (best < 0 || ms < best)) {
        best = ms;
        *algo_out = "a" + std::to_string(i);
      }
    }
  cudaFree(dw); cudaFree(dx); cudaFree(dz); cudaFree(dy); cudaFree(da); cudaFree(db); cudaFree(work);
  return best;
}

// --lt: ResNet-50's 1x1 stride-1 layers, cuDNN's graph (g-pc / g-res, the residual as kiln's QConv
// reads it) against cuBLASLt, without and with a residual.
void lt_table(Handles& hd, const std::vector<int>& batches) {
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::printf("no cublasLt\n");
    return;
  }
  for (int res = 0; res < 2; ++res)
    for (int relu = 0; relu < 2; ++relu) {
      int bad = 0, nalgo = 0;
      const bool ok = check_lt_semantics(hd, lt, res, relu, &bad, &nalgo);
      std::printf("lt semantics residual=%d relu=%d: %s, %d algos, worst algo %d of 12800 outputs off by > 1\n", res,
                  relu, ok ? "set up" : "refused", nalgo, bad);
    }
  res_alpha = false;
  for (int n : batches) {
    std::printf("\nbatch %d, 1x1 stride-1 layers: best ms (algo)\n%-26s %16s %16s %16s %16s\n", n,
                "layer c>k hxh x cnt", "g-pc", "lt", "g-res", "lt-res");
    float tot[4] = {0, 0, 0, 0};
    for (const Layer& l : kResNet50) {
      if (l.r != 1 || l.stride != 1) continue;
      char label[64];
      std::snprintf(label, sizeof label, "%d>%d %dx%d x%d", l.c, l.k, l.h, l.h, l.count);
      std::printf("%-26s", label);
      for (int f = 0; f < 4; ++f) {
        std::string algo;
        const bool residual = f >= 2;
        const float ms = f % 2 == 0 ? time_graph_layer(hd, l, n, residual, &algo) : time_lt_layer(hd, lt, l, n, residual, &algo);
        char cell[40];
        std::snprintf(cell, sizeof cell, "%.4f (%s)", ms, algo.c_str());
        std::printf(" %16s", cell);
        if (ms > 0) tot[f] += ms * l.count;
      }
      std::printf("\n");
    }
    std::printf("TOTAL (each layer's count) g-pc %.3f  lt %.3f  g-res %.3f  lt-res %.3f ms\n", tot[0], tot[1], tot[2], tot[3]);
  }
  cublasLtDestroy(lt);
}

// --stem-algos: the float16 stem (7x7/2, 64 outputs, bias + ReLU fused as kiln's FusedConv runs it) with
// the RGB image padded to 4 or 8 channels, every legacy algorithm, per batch: status, workspace, time.
void stem_algos(Handles& hd, const std::vector<int>& batches) {
  for (int cp : {4, 8})
    for (int n : batches) {
      LegacyDescs d;
      cudnnTensorDescriptor_t x = d.x, y = d.y, b = d.b;
      cudnnFilterDescriptor_t w = d.w;
      cudnnConvolutionDescriptor_t cv = d.cv;
      cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, n, cp, 224, 224);
      cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, n, 64, 112, 112);
      cudnnSetTensor4dDescriptor(b, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, 1, 64, 1, 1);
      cudnnSetFilter4dDescriptor(w, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, 64, cp, 7, 7);
      cudnnSetConvolution2dDescriptor(cv, 3, 3, 2, 2, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
      cudnnSetConvolutionMathType(cv, CUDNN_TENSOR_OP_MATH);
      const size_t xs = size_t(n) * cp * 224 * 224 * 2, ys = size_t(n) * 64 * 112 * 112 * 2, wsz = 64 * cp * 49 * 2;
      void *dx, *dy, *dw, *db, *work;
      const size_t work_cap = size_t(256) << 20;
      CK(cudaMalloc(&dx, xs));
      CK(cudaMalloc(&dy, ys));
      CK(cudaMalloc(&dw, wsz));
      CK(cudaMalloc(&db, 64 * 2));
      CK(cudaMalloc(&work, work_cap));
      CK(cudaMemset(dx, 0, xs));
      CK(cudaMemset(dw, 0, wsz));
      CK(cudaMemset(db, 0, 128));
      std::printf("stem fp16 C=%d batch %d:", cp, n);
      const float one = 1.f, zero = 0.f;
      for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
        const auto algo = cudnnConvolutionFwdAlgo_t(a);
        size_t need = 0;
        cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(hd.dnn, x, w, cv, y, algo, &need);
        if (st != CUDNN_STATUS_SUCCESS) {
          std::printf("  a%d ws-refused", a);
          continue;
        }
        if (need > work_cap) {
          std::printf("  a%d ws %zuMB", a, need >> 20);
          continue;
        }
        for (int fused = 0; fused < 2; ++fused) {
          auto call = [&] {
            if (!fused) return cudnnConvolutionForward(hd.dnn, &one, x, dx, w, dw, cv, algo, work, need, &zero, y, dy);
            return cudnnConvolutionBiasActivationForward(hd.dnn, &one, x, dx, w, dw, cv, algo, work, need, &zero, y, dy, b,
                                                         db, d.act, y, dy);
          };
          st = call();
          if (st != CUDNN_STATUS_SUCCESS || cudaStreamSynchronize(hd.stream) != cudaSuccess) {
            cudaGetLastError();
            std::printf("  %s%d %s", fused ? "f" : "a", a, cudnnGetErrorString(st));
            continue;
          }
          std::printf("  %s%d %.4f ms (ws %zuMB)", fused ? "f" : "a", a, time_captured(hd, call), need >> 20);
        }
      }
      std::printf("\n");
      cudaFree(dx); cudaFree(dy); cudaFree(dw); cudaFree(db); cudaFree(work);
    }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches;
  bool x32 = false, lt_mode = false, stem_mode = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--x32") x32 = true;
    else if (a == "-v") verbose = true;
    else if (a == "--res-half") res_type = CUDNN_DATA_HALF;
    else if (a == "--res-float") res_type = CUDNN_DATA_FLOAT;
    else if (a == "--res-mul") res_alpha = false;
    else if (a == "--fallback") heur_mode = CUDNN_HEUR_MODE_FALLBACK;
    else if (a == "--heur-b") heur_mode = CUDNN_HEUR_MODE_B;
    else if (a == "--only-graph") only_graph = true;
    else if (a == "--one") one_layer = true;
    else if (a == "--stem") stems = true;
    else if (a == "--lt") lt_mode = true;
    else if (a == "--stem-algos") stem_mode = true;
    else batches.push_back(std::atoi(argv[i]));
  }
  if (batches.empty()) batches = {64, 128, 256};
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Handles hd;
  cudnnCreate(&hd.dnn);
  CK(cudaStreamCreate(&hd.stream));
  cudnnSetStream(hd.dnn, hd.stream);
  CK(cudaEventCreate(&hd.start));
  CK(cudaEventCreate(&hd.stop));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, cuDNN %zu\n", prop.name, cudnnGetVersion());
  if (lt_mode || stem_mode) {
    if (stem_mode) stem_algos(hd, batches);
    if (lt_mode) lt_table(hd, batches);
    return 0;
  }
  std::vector<Form> forms = {Form::fp16, Form::int8, Form::gpc, Form::gres};
  if (only_graph) forms = {Form::gpc, Form::gres};
  if (x32) forms.push_back(Form::int8x32);
  const size_t nf = forms.size();
  for (int n : batches) {
    std::vector<float> total(nf, 0.f);
    std::vector<bool> complete(nf, true);
    std::printf("\nbatch %d: per-layer best ms (algo)\n%-26s", n, "layer c>k hxh rXr/s x cnt");
    for (Form f : forms) std::printf(" %16s", name(f));
    std::printf("\n");
    for (const Layer& l : stems ? kStems : kResNet50) {
      if (one_layer && &l != &kResNet50[1]) continue;
      char label[64];
      std::snprintf(label, sizeof label, "%d>%d %dx%d %dx%d/%d x%d", l.c, l.k, l.h, l.h, l.r, l.r, l.stride,
                    l.count);
      std::printf("%-26s", label);
      for (size_t f = 0; f < nf; ++f) {
        std::string algo = "-";
        const bool graph = forms[f] == Form::gpc || forms[f] == Form::gres;
        float ms = graph ? time_graph_layer(hd, l, n, forms[f] == Form::gres, &algo) : time_layer(hd, l, n, forms[f], &algo);
        if (ms < 0) {
          complete[f] = false;
          std::printf(" %16s", algo.c_str());
        } else {
          total[f] += ms * l.count;
          char cell[32];
          std::snprintf(cell, sizeof cell, "%.4f (%s)", ms, algo.c_str());
          std::printf(" %16s", cell);
        }
      }
      std::printf("\n");
    }
    for (size_t f = 0; f < nf; ++f)
      std::printf("TOTAL batch %d %-6s %8.3f ms  %9.0f img/s%s\n", n, name(forms[f]), total[f],
                  total[f] > 0 ? n * 1000.0 / total[f] : 0.0, complete[f] ? "" : " (some layers had no algorithm)");
  }
  return 0;
}
