// tests/unit/conv_test_util.h — shared by the tests of kiln's own channels-last convolutions
// (test_packed_conv.cpp, test_dw_conv.cpp): a case's window geometry and the activations in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ir/epilogue.h"

namespace kiln::test {

// The fields both kernels' geometries name (N, H, W, C, window, strides, dilations, top/left pads, output
// size) from a case with one stride and dilation and pads on every side; the caller sets the rest.
template <typename G, typename Case>
G conv_window_geometry(const Case& c) {
  G g;
  g.N = c.N, g.H = c.H, g.W = c.W, g.C = c.C, g.kh = c.kh, g.kw = c.kw;
  g.stride_h = g.stride_w = c.stride;
  g.dil_h = g.dil_w = c.dil;
  g.pad_top = c.pad_top, g.pad_left = c.pad_left;
  g.OH = (c.H + c.pad_top + c.pad_bottom - c.dil * (c.kh - 1) - 1) / c.stride + 1;
  g.OW = (c.W + c.pad_left + c.pad_right - c.dil * (c.kw - 1) - 1) / c.stride + 1;
  return g;
}

// The activations the tests use, in double.
inline double activate_ref(double v, const Activation& act) {
  switch (act.kind) {
    case ActKind::kRelu: return std::max(v, 0.0);
    case ActKind::kClip: return std::min(std::max(v, static_cast<double>(act.a)), static_cast<double>(act.b));
    case ActKind::kSigmoid: return 1.0 / (1.0 + std::exp(-v));
    case ActKind::kSilu: return v / (1.0 + std::exp(-v));
    default: return v;
  }
}

}  // namespace kiln::test
