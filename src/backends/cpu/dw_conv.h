// backends/cpu/dw_conv.h — kiln's own float32 depthwise convolution for channels-last tensors (the
// "dw-direct" tactic of kiln.FusedConv / Conv in CPU engines): one filter per channel (group == C ==
// M), X [N, H, W, C], W [C, kh, kw, 1] repacked once as [kh * kw, C], Y [N, OH, OW, C].
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ir/epilogue.h"
#include "kiln/status.h"

namespace kiln::cpu {

struct DwConvGeometry {
  int64_t N = 0, H = 0, W = 0, C = 0;
  int64_t kh = 1, kw = 1, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1, pad_top = 0, pad_left = 0;
  int64_t OH = 0, OW = 0;
};

struct DwConv {
  DwConvGeometry g;
  std::vector<float> w;  // [kh * kw, C]: a tap's weights for consecutive channels are contiguous
};

// Windows of at most kDwConvMaxTaps taps (MobileNet's and EfficientNet's are 3x3 and 5x5).
constexpr int64_t kDwConvMaxTaps = 64;
bool dw_conv_eligible(const DwConvGeometry& g);

// w: [C, kh, kw] row-major (channels-last W [C, kh, kw, 1]).
Expected<std::shared_ptr<DwConv>> pack_dw_conv(const DwConvGeometry& g, const float* w);

// Y = act(dwconv(X) + bias + Z), bias (C) and Z (Y's shape) optional. Threads over output rows and
// channel chunks; allocates nothing; each output's sum runs over the taps in one fixed order (row by
// row of the window), whatever the thread count.
void dw_conv(const DwConv& d, const float* x, const float* bias, const float* z, const Activation& act, float* y);

}  // namespace kiln::cpu
