// backends/cpu/packed_conv.h — kiln's own float32 convolution for channels-last tensors (the
// "packed-direct" tactic of kiln.FusedConv / Conv in CPU engines): an implicit GEMM over the packed
// GEMM's panels and register tile (packed_gemm.h). No im2col copy: each 6-pixel tile of the output
// reads its input pixels' channel vectors in place, tap by tap, and a zero row stands for padding.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/packed_gemm.h"
#include "ir/epilogue.h"

namespace kiln::cpu {

// A 2-D convolution with X [N, H, W, C], W [M, kh, kw, C] (group 1) and Y [N, OH, OW, M].
struct PackedConvGeometry {
  int64_t N = 0, H = 0, W = 0, C = 0, M = 0;
  int64_t kh = 1, kw = 1, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1, pad_top = 0, pad_left = 0;
  int64_t OH = 0, OW = 0;
};

// The weights packed once (B = W as [M, kh*kw*C] transposed, k ordered (tap, channel)) and a row of
// C zeros that padding taps read.
struct PackedConv {
  PackedConvGeometry g;
  std::shared_ptr<PackedB> weights;
  std::vector<float> zeros;
};

// Whether this kernel takes the geometry: AVX2/FMA, at least 8 channels (the taps' dot products
// run over C), and at most kMaxTaps taps.
constexpr int64_t kPackedConvMaxTaps = 32;
bool packed_conv_eligible(const PackedConvGeometry& g);

// w: [M, kh, kw, C] row-major.
Expected<std::shared_ptr<PackedConv>> pack_conv(const PackedConvGeometry& g, const float* w);

// Y = act(conv(X, W) + bias + Z), bias (M) and Z (Y's shape) optional. Threads over pixel blocks
// and column chunks with parallel_for; allocates nothing. Every output's sum runs over the taps and
// channels in one fixed order, whatever the thread count.
void packed_conv(const PackedConv& pc, const float* x, const float* bias, const float* z, const Activation& act, float* y);

}  // namespace kiln::cpu
