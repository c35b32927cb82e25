// bench/cuda_int8_conv_probe.cpp — how fast can cuDNN run ResNet-50's convolutions in int8 on this GPU?
//
// Issue #12 asks for ResNet-50 INT8 at >= 50,000 img/s. Before kiln's int8 convolution kernel is
// written this probe measures the library's ceiling: every convolution of torchvision's ResNet-50
// (224x224; the stem is left out, its 3 channels are no int8 shape) at batch N, timed with CUDA
// events around CUDA graphs of 20 calls (best of 5), in three forms, each with the best algorithm cuDNN offers for it:
//   fp16  NHWC half in, half out, float accumulation (what kiln's fp16 engine runs today)
//   int8  NHWC int8 in, int8 out, int32 accumulation, bias + ReLU fused (cudnnConvolutionBiasActivationForward)
//   i8x32 NC/32HW32 int8 (the vectorised layout IMMA kernels read), same fusion
// The totals weigh each layer by how often ResNet-50 runs it; img/s = N / total. Random data: the
// figures are times, not results.
//
// Build (host code only; cuDNN brings the kernels):
//   g++ -O2 -std=c++17 -I/usr/local/cuda/include bench/cuda_int8_conv_probe.cpp
//       -L/usr/local/cuda/lib64 -lcudnn -lcudart -o cuda_int8_conv_probe
// Run:   ./cuda_int8_conv_probe [N ...]   (default 64 128 256)
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
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

enum class Form { fp16, int8, int8x32 };
const char* name(Form f) { return f == Form::fp16 ? "fp16" : f == Form::int8 ? "int8" : "i8x32"; }

struct Handles {
  cudnnHandle_t dnn;
  cudaStream_t stream;
  cudaEvent_t start, stop;
};

// The best time (ms) over cuDNN's algorithms for one layer in one form; -1 when none runs.
float time_layer(Handles& hd, const Layer& l, int n, Form form, std::string* algo_out) {
  const int pad = l.r / 2;
  const int ho = (l.h + 2 * pad - l.r) / l.stride + 1;
  cudnnTensorDescriptor_t x, y, b;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t cv;
  cudnnActivationDescriptor_t act;
  cudnnCreateTensorDescriptor(&x);
  cudnnCreateTensorDescriptor(&y);
  cudnnCreateTensorDescriptor(&b);
  cudnnCreateFilterDescriptor(&w);
  cudnnCreateConvolutionDescriptor(&cv);
  cudnnCreateActivationDescriptor(&act);
  cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0);
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
    const int reps = 20;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(hd.stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < reps; ++i) call();
    CK(cudaStreamEndCapture(hd.stream, &graph));
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
    ms /= reps;
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
  cudnnDestroyTensorDescriptor(x);
  cudnnDestroyTensorDescriptor(y);
  cudnnDestroyTensorDescriptor(b);
  cudnnDestroyFilterDescriptor(w);
  cudnnDestroyConvolutionDescriptor(cv);
  cudnnDestroyActivationDescriptor(act);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches;
  for (int i = 1; i < argc; ++i) batches.push_back(std::atoi(argv[i]));
  if (batches.empty()) batches = {64, 128, 256};
  Handles hd;
  cudnnCreate(&hd.dnn);
  CK(cudaStreamCreate(&hd.stream));
  cudnnSetStream(hd.dnn, hd.stream);
  CK(cudaEventCreate(&hd.start));
  CK(cudaEventCreate(&hd.stop));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, cuDNN %zu\n", prop.name, cudnnGetVersion());
  const Form forms[] = {Form::fp16, Form::int8, Form::int8x32};
  for (int n : batches) {
    float total[3] = {0, 0, 0};
    bool complete[3] = {true, true, true};
    std::printf("\nbatch %d: per-layer best ms (algo)\n%-26s %14s %14s %14s\n", n, "layer c>k hxh rXr/s x cnt",
                "fp16", "int8", "i8x32");
    for (const Layer& l : kResNet50) {
      char label[64];
      std::snprintf(label, sizeof label, "%d>%d %dx%d %dx%d/%d x%d", l.c, l.k, l.h, l.h, l.r, l.r, l.stride,
                    l.count);
      std::printf("%-26s", label);
      for (int f = 0; f < 3; ++f) {
        std::string algo = "-";
        float ms = time_layer(hd, l, n, forms[f], &algo);
        if (ms < 0) {
          complete[f] = false;
          std::printf(" %14s", "none");
        } else {
          total[f] += ms * l.count;
          char cell[32];
          std::snprintf(cell, sizeof cell, "%.4f (%s)", ms, algo.c_str());
          std::printf(" %14s", cell);
        }
      }
      std::printf("\n");
    }
    for (int f = 0; f < 3; ++f)
      std::printf("TOTAL batch %d %-6s %8.3f ms  %9.0f img/s%s\n", n, name(forms[f]), total[f],
                  total[f] > 0 ? n * 1000.0 / total[f] : 0.0, complete[f] ? "" : " (some layers had no algorithm)");
  }
  return 0;
}
