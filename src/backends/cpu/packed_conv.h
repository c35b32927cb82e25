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

// A 2-D convolution with X [N, H, W, C], W [M, kh, kw, C / group] and Y [N, OH, OW, M].
struct PackedConvGeometry {
  int64_t N = 0, H = 0, W = 0, C = 0, M = 0;
  int64_t kh = 1, kw = 1, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1, pad_top = 0, pad_left = 0;
  int64_t OH = 0, OW = 0;
  int64_t group = 1;
};

// Grouped convolutions run as dense ones over channel blocks: a block is the fewest whole groups
// whose outputs fill whole 16-column panels (groups of 4 outputs: 4 groups, of 8: 2, of 16 or more:
// 1), its weights block-diagonal (zero where an output's group does not read the channel). A group
// of 4 outputs therefore does 4x the useful multiply-adds, in the dense kernel's register tile at
// its full rate. Group 1 is one block of every channel.
struct PackedConvBlocks {
  int64_t per_block = 1;  // groups per block
  int64_t C = 0, M = 0;   // input channels and outputs of one block
};
PackedConvBlocks packed_conv_blocks(const PackedConvGeometry& g);

// The weights packed once (B = the block-diagonal W as [M, kh*kw*blocks.C] transposed, k ordered
// (tap, channel of the block)) and a row of C zeros that padding taps read. `patches`: a dense
// convolution with few channels or many taps (a network's RGB stem: AlexNet's 11x11 on 3 channels)
// copies each tile's six input windows into rows of kh*kw*C floats on the stack and runs the tile on
// them as one dot product, where tap-by-tap dot products of 3 channels would be too short.
struct PackedConv {
  PackedConvGeometry g;
  PackedConvBlocks blocks;
  std::shared_ptr<PackedB> weights;
  std::vector<float> zeros;
  bool patches = false;
};

// Whether this kernel takes the geometry: AVX2/FMA, and either tap by tap (at least 8 channels per
// block: the taps' dot products run over them; at most kMaxTaps taps; for group > 1 groups of 4 or
// more outputs that whole blocks cover, not depthwise convolutions: 16x the work) or, group 1, by
// patches of 8 to kPatchMaxK values (kh*kw*C).
constexpr int64_t kPackedConvMaxTaps = 32;
constexpr int64_t kPackedConvPatchMaxK = 1536;
bool packed_conv_eligible(const PackedConvGeometry& g);
bool packed_conv_by_patches(const PackedConvGeometry& g);

// w: [M, kh, kw, C / group] row-major.
Expected<std::shared_ptr<PackedConv>> pack_conv(const PackedConvGeometry& g, const float* w);

// Y = act(conv(X, W) + bias + Z), bias (M) and Z (Y's shape) optional. Threads over pixel blocks
// and column chunks with parallel_for; allocates nothing. Every output's sum runs over the taps and
// channels in one fixed order, whatever the thread count.
void packed_conv(const PackedConv& pc, const float* x, const float* bias, const float* z, const Activation& act, float* y);

}  // namespace kiln::cpu
