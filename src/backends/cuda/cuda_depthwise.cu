// backends/cuda/cuda_depthwise.cu — depthwise 2-D convolution on channels-last tensors (one filter per
// channel: group = C = M), the layer ConvNeXt, MobileNets and EfficientNets are made of, where cuDNN's
// grouped kernels are slow for large windows (ConvNeXt-Tiny's 7x7 at batch 64 on an H200: 1.2 ms a
// layer, 72% of the network's time).
//
// Each thread computes kStrip neighbouring outputs along W for one vector of channels (8 of a 2-byte
// type or 4 floats: one 16-byte load per input pixel; one channel per thread when C or the pointers do
// not allow it); a window tap's weights are loaded once for the strip. The weights are first
// rearranged to [kh·kw][C] float32 in the workspace (depthwise_weights_kernel), so a tap's weights for
// a vector of channels are contiguous. Float math; the epilogue adds the bias, the residual and a
// ReLU when asked, and rounds once to Y's type.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_types.cuh"

#include <type_traits>

namespace kiln::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void depthwise_weights_kernel(int elem, const void* w, float* wt, int64_t c, int taps) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= c * taps) return;
  const int64_t ch = i / taps, tap = i % taps;  // W [C, kh, kw, 1]: channel-major
  float v;
  if (elem == kElemF16) v = __half2float(static_cast<const __half*>(w)[i]);
  else if (elem == kElemBF16) v = __bfloat162float(static_cast<const __nv_bfloat16*>(w)[i]);
  else v = static_cast<const float*>(w)[i];
  wt[tap * c + ch] = v;
}

// V values of T loaded and stored as one access (16 bytes for the vector widths used).
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <typename T, int V, int kStrip>
__global__ void __launch_bounds__(kThreads) depthwise_kernel(DepthwiseArgs a, const float* __restrict__ wt) {
  const int64_t groups = a.c / V, strips = (a.ow + kStrip - 1) / kStrip;
  const int64_t total = a.n * a.oh * strips * groups;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t g = t % groups;
    int64_t r = t / groups;
    const int64_t ws = r % strips;
    r /= strips;
    const int64_t oh = r % a.oh, n = r / a.oh;
    const int64_t c0 = g * V, ow0 = ws * kStrip;
    float acc[kStrip][V];
#pragma unroll
    for (int s = 0; s < kStrip; ++s)
#pragma unroll
      for (int q = 0; q < V; ++q) acc[s][q] = 0.f;
    const T* x = static_cast<const T*>(a.x) + n * a.h * a.w_ * a.c + c0;
    for (int i = 0; i < a.kh; ++i) {
      const int64_t ih = oh * a.sh - a.pt + int64_t{i} * a.dh;
      if (ih < 0 || ih >= a.h) continue;
      const T* row = x + ih * a.w_ * a.c;
      for (int j = 0; j < a.kw; ++j) {
        float wv[V];
        const float* wp = wt + (int64_t{i} * a.kw + j) * a.c + c0;
        if constexpr (V % 4 == 0) {  // 16-byte aligned: the workspace is, C and c0 are multiples of V
#pragma unroll
          for (int q = 0; q < V; q += 4) *reinterpret_cast<float4*>(wv + q) = *reinterpret_cast<const float4*>(wp + q);
        } else {
#pragma unroll
          for (int q = 0; q < V; ++q) wv[q] = wp[q];
        }
#pragma unroll
        for (int s = 0; s < kStrip; ++s) {
          const int64_t iw = (ow0 + s) * a.sw - a.pl + int64_t{j} * a.dw;
          if (ow0 + s >= a.ow || iw < 0 || iw >= a.w_) continue;
          const Vec<T, V> xv = *reinterpret_cast<const Vec<T, V>*>(row + iw * a.c);
#pragma unroll
          for (int q = 0; q < V; ++q) acc[s][q] = fmaf(convert<float>(xv.v[q]), wv[q], acc[s][q]);
        }
      }
    }
    float bias[V];
#pragma unroll
    for (int q = 0; q < V; ++q) bias[q] = a.bias ? convert<float>(static_cast<const T*>(a.bias)[c0 + q]) : 0.f;
#pragma unroll
    for (int s = 0; s < kStrip; ++s) {
      if (ow0 + s >= a.ow) break;
      const int64_t o = ((n * a.oh + oh) * a.ow + ow0 + s) * a.c + c0;
      Vec<T, V> zv;
      if (a.z) zv = *reinterpret_cast<const Vec<T, V>*>(static_cast<const T*>(a.z) + o);
      Vec<T, V> yv;
#pragma unroll
      for (int q = 0; q < V; ++q) {
        float v = acc[s][q] + bias[q];
        if (a.z) v += convert<float>(zv.v[q]);
        if (a.relu) v = v < 0.f ? 0.f : v;
        yv.v[q] = convert<T>(v);
      }
      *reinterpret_cast<Vec<T, V>*>(static_cast<T*>(a.y) + o) = yv;
    }
  }
}

// Strips of 4 outputs where the layer has work enough to fill the GPU with them, else one output a
// thread (batch 1: ConvNeXt's 56x56x96 layer has 9,408 strips of 4).
template <typename T, int V>
int launch_vec(const DepthwiseArgs& a, const float* wt, cudaStream_t stream) {
  const int64_t groups = a.c / V, strips4 = a.n * a.oh * ((a.ow + 3) / 4) * groups;
  auto go = [&](auto strip) {
    constexpr int S = decltype(strip)::value;
    const int64_t total = a.n * a.oh * ((a.ow + S - 1) / S) * groups;
    const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t{1} << 20);
    depthwise_kernel<T, V, S><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, wt);
    return static_cast<int>(cudaGetLastError());
  };
  if (strips4 >= (int64_t{1} << 17)) return go(std::integral_constant<int, 4>{});
  return go(std::integral_constant<int, 1>{});
}

}  // namespace

size_t depthwise_workspace_bytes(int64_t c, int kh, int kw) { return sizeof(float) * static_cast<size_t>(c * kh * kw); }

int launch_depthwise_nhwc(const DepthwiseArgs& a, void* workspace, cudaStream_t stream) {
  if (a.n <= 0 || a.oh <= 0 || a.ow <= 0 || a.c <= 0) return cudaSuccess;
  float* wt = static_cast<float*>(workspace);
  const int taps = a.kh * a.kw;
  const int64_t wn = a.c * taps;
  depthwise_weights_kernel<<<static_cast<unsigned>((wn + 255) / 256), 256, 0, stream>>>(a.elem, a.w, wt, a.c, taps);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);
  const bool vec = aligned16(a.x) && aligned16(a.y) && (!a.z || aligned16(a.z));
  return dispatch_float(a.elem, [&](auto t) {
    using T = decltype(t);
    constexpr int V = sizeof(T) == 2 ? 8 : 4;
    if (vec && a.c % V == 0) return launch_vec<T, V>(a, wt, stream);
    return launch_vec<T, 1>(a, wt, stream);
  });
}

}  // namespace kiln::cuda
