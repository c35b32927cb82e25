// backends/cuda/cuda_conv.cpp — Conv (1-D and 2-D, float32) through cuDNN's convolution API.
//
// FP32 math only (CUDNN_FMA_MATH: no TF32) so results match the CPU. The algorithm comes from
// cuDNN's heuristics the first time a kernel sees an input shape and is cached per shape.
// Asymmetric pads (SAME_* with an even window) run on an explicitly zero-padded copy of the input.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <map>
#include <mutex>

#include "backends/cuda/cuda_util.h"

namespace kiln::cuda {
namespace {

struct ConvAttrs {
  std::string auto_pad;
  int64_t group = 1;
  std::vector<int64_t> kernel, strides, dilations, pads;  // per spatial dim; pads begin..., end...
};

// The algorithm chosen per input shape (N, C, H, W); shared by all runs of one kernel.
struct AlgoCache {
  std::mutex mu;
  std::map<std::array<int64_t, 4>, cudnnConvolutionFwdAlgo_t> algos;
};

// Owns the cuDNN descriptors of one run.
struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~Descs() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

Status dnn_ok(const KernelContext& ctx, cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::Ok();
  return runtime_error(ctx.node().describe() + ": cuDNN " + what + ": " + cudnnGetErrorString(s));
}

// A device buffer from the stream-ordered allocator, freed (in stream order) with the object.
struct StreamBuffer {
  void* ptr = nullptr;
  cudaStream_t stream = nullptr;
  ~StreamBuffer() {
    if (ptr) cudaFreeAsync(ptr, stream);
  }
};

Expected<cudnnConvolutionFwdAlgo_t> choose_algo(const KernelContext& ctx, AlgoCache& cache,
                                                const std::array<int64_t, 4>& key, const Descs& d) {
  std::lock_guard<std::mutex> lock(cache.mu);
  if (auto it = cache.algos.find(key); it != cache.algos.end()) return it->second;
  CudaState& st = state_of(ctx);
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnGetConvolutionForwardAlgorithm_v7(st.dnn, d.x, d.w, d.conv, d.y,
                                                                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf),
                              "choosing an algorithm"));
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > st.workspace_bytes) continue;
    if (perf[i].mathType == CUDNN_TENSOR_OP_MATH || perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    cache.algos[key] = perf[i].algo;
    return perf[i].algo;
  }
  return runtime_error(ctx.node().describe() + ": cuDNN offers no FP32 algorithm for this convolution");
}

Status run_conv(KernelContext& ctx, const ConvAttrs& at, AlgoCache& cache) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const int sd = x.rank() - 2;
  if (sd != 1 && sd != 2) return ctx.error("only 1-D and 2-D convolutions run on CUDA");
  if (w.rank() != x.rank()) return ctx.error("W must have the rank of X");
  const int64_t n = x.dim(0), c = x.dim(1), m = w.dim(0), g = at.group;
  if (g < 1 || c % g != 0 || m % g != 0 || w.dim(1) != c / g)
    return ctx.error("channels (" + std::to_string(c) + ") and W " + shape_to_string(w.shape()) +
                     " do not fit group=" + std::to_string(g));
  // Spatial geometry; 1-D runs as 2-D with a height of 1.
  int64_t in[2] = {1, 1}, k[2] = {1, 1}, s[2] = {1, 1}, dil[2] = {1, 1}, pb[2] = {0, 0}, pe[2] = {0, 0}, out[2] = {1, 1};
  Shape yshape = {n, m};
  for (int i = 0; i < sd; ++i) {
    const int j = sd == 1 ? 1 : i;
    in[j] = x.dim(2 + i);
    k[j] = w.dim(2 + i);
    if (!at.kernel.empty() && at.kernel[i] != k[j]) return ctx.error("kernel_shape does not match W");
    s[j] = at.strides.empty() ? 1 : at.strides[i];
    dil[j] = at.dilations.empty() ? 1 : at.dilations[i];
    const int64_t p0 = at.pads.empty() ? 0 : at.pads[i], p1 = at.pads.empty() ? 0 : at.pads[i + sd];
    auto geo = window_geometry(in[j], k[j], s[j], dil[j], p0, p1, at.auto_pad, false);
    if (!geo.ok()) return ctx.error(geo.status().message());
    pb[j] = geo->pad_begin;
    pe[j] = geo->pad_end;
    out[j] = geo->out;
    yshape.push_back(out[j]);
  }
  Tensor& y = ctx.output(0, DataType::kFloat32, yshape);
  if (y.numel() == 0) return Status::Ok();
  CudaState& st = state_of(ctx);

  // Asymmetric pads: pad explicitly, then convolve without padding.
  const float* xp = x.data<float>();
  StreamBuffer padded{nullptr, st.stream};
  int64_t h = in[0], wd = in[1];
  if (pb[0] != pe[0] || pb[1] != pe[1]) {
    h = in[0] + pb[0] + pe[0];
    wd = in[1] + pb[1] + pe[1];
    KILN_RETURN_IF_ERROR(launched(ctx, cudaMallocAsync(&padded.ptr, n * c * h * wd * sizeof(float), st.stream)));
    KILN_RETURN_IF_ERROR(launched(ctx, launch_pad2d_f32(xp, static_cast<float*>(padded.ptr), n * c, in[0], in[1], h, wd,
                                                        pb[0], pb[1], st.stream)));
    xp = static_cast<const float*>(padded.ptr);
    pb[0] = pb[1] = 0;
  }

  Descs d;
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnCreateTensorDescriptor(&d.x), "descriptor"));
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnCreateTensorDescriptor(&d.y), "descriptor"));
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnCreateFilterDescriptor(&d.w), "descriptor"));
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnCreateConvolutionDescriptor(&d.conv), "descriptor"));
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i32(n), i32(c),
                                                              i32(h), i32(wd)), "input descriptor"));
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i32(n), i32(m),
                                                              i32(out[0]), i32(out[1])), "output descriptor"));
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i32(m),
                                                              i32(c / g), i32(k[0]), i32(k[1])), "filter descriptor"));
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnSetConvolution2dDescriptor(d.conv, i32(pb[0]), i32(pb[1]), i32(s[0]), i32(s[1]),
                                                                   i32(dil[0]), i32(dil[1]), CUDNN_CROSS_CORRELATION,
                                                                   CUDNN_DATA_FLOAT), "convolution descriptor"));
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnSetConvolutionGroupCount(d.conv, i32(g)), "group count"));
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnSetConvolutionMathType(d.conv, CUDNN_FMA_MATH), "math type"));

  KILN_ASSIGN_OR_RETURN(cudnnConvolutionFwdAlgo_t algo, choose_algo(ctx, cache, {n, c, h, wd}, d));
  const float one = 1.f, zero = 0.f;
  KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnConvolutionForward(st.dnn, &one, d.x, xp, d.w, w.data<float>(), d.conv, algo,
                                                           st.workspace, st.workspace_bytes, &zero, d.y, y.data<float>()),
                              "convolution"));
  if (ctx.num_inputs() > 2 && ctx.has_input(2)) {
    const Tensor& b = ctx.input(2);
    if (b.numel() != m) return ctx.error("B must have M elements");
    KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnCreateTensorDescriptor(&d.bias), "descriptor"));
    KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnSetTensor4dDescriptor(d.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i32(m), 1, 1),
                                "bias descriptor"));
    KILN_RETURN_IF_ERROR(dnn_ok(ctx, cudnnAddTensor(st.dnn, &one, d.bias, b.data<float>(), &one, d.y, y.data<float>()),
                                "bias"));
  }
  return Status::Ok();
}

std::string conv_check(const ir::Node& n) {
  int spatial = -1;
  if (n.has_input(1) && n.inputs[1]->type.shape.known) spatial = n.inputs[1]->type.shape.rank() - 2;
  else if (n.has_input(0) && n.inputs[0]->type.shape.known) spatial = n.inputs[0]->type.shape.rank() - 2;
  else if (const ir::Attribute* k = n.attr("kernel_shape")) spatial = static_cast<int>(k->ints.size());
  if (spatial != 1 && spatial != 2) return "only 1-D and 2-D convolutions run on CUDA (spatial rank unknown or other)";
  return require_f32(n);
}

Expected<KernelPtr> create_conv(const ir::Node& n) {
  ConvAttrs at;
  at.auto_pad = n.attr_string("auto_pad", "NOTSET");
  at.group = n.attr_int("group", 1);
  at.kernel = n.attr_ints("kernel_shape");
  at.strides = n.attr_ints("strides");
  at.dilations = n.attr_ints("dilations");
  at.pads = n.attr_ints("pads");
  const size_t sd = !at.kernel.empty() ? at.kernel.size() : !at.strides.empty() ? at.strides.size() : at.pads.size() / 2;
  if ((!at.strides.empty() && at.strides.size() != sd) || (!at.dilations.empty() && at.dilations.size() != sd) ||
      (!at.pads.empty() && at.pads.size() != 2 * sd))
    return invalid_model(n.describe() + ": kernel_shape, strides, dilations and pads disagree in length");
  auto cache = std::make_shared<AlgoCache>();
  return make_kernel([at, cache](KernelContext& ctx) { return run_conv(ctx, at, *cache); });
}

}  // namespace

void register_conv(KernelRegistry& r) {
  KernelDef d;
  d.op = "Conv";
  d.since = 1;
  d.name = "cuda.Conv.f32.cudnn";
  d.check = conv_check;
  d.create = [](const ir::Node& n, KernelInit&) { return create_conv(n); };
  r.add(d);
}

}  // namespace kiln::cuda
