// backends/cpu/packed_conv.cpp — the "packed-direct" channels-last convolution (see packed_conv.h).
//
// The convolution as a GEMM whose A is never built: C[pixel, m] = sum over taps t and channels c of
// X[pixel's input at tap t][c] · W[m][t][c]. For NHWC input, one pixel's channels at one tap are C
// contiguous floats, so the packed GEMM's 6 x 16 register tile (packed_tile.h) runs over c with six
// row pointers per tap (a zero row where the tap reads padding) and the packed panels of W read
// straight through. Blocking as in the GEMM: taps in blocks of about kKc channels (a panel's slice
// stays in L1/L2 while the tile walks the pixels of a block), pixels in blocks of kMc, panels in
// column chunks (for_each_task); tasks (pixel block, column chunk) each own their tile of Y across
// every tap block, so threads never write the same element, and each output's sum runs in one
// fixed order. The residual and the activation are applied in the tile's registers (None, Relu,
// Clip) or to a task's rows while they are still in cache (the others).
//
// Measured on ResNet-50's 3x3 layers (AVX2 EPYC, 1 and 2 threads): bench/results/cpu_packed_conv.md.
#include "backends/cpu/packed_conv.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/fused_common.h"
#include "backends/cpu/packed_tile.h"

namespace kiln::cpu {
namespace {

using packed::kMr;
using packed::kP;
using packed::kTiles;
using packed::TileFinish;
constexpr int64_t kKc = 768;
constexpr int64_t kMc = 96;  // a multiple of kMr

// The input row each (pixel, tap) reads from channel `c0` on: ptrs[(p - p0) * taps + t], the zero row
// (from its c0-th entry) where the tap falls in the padding.
void tap_pointers(const PackedConv& pc, const float* x, int64_t c0, int64_t p0, int64_t p1, const float** ptrs) {
  const PackedConvGeometry& g = pc.g;
  const int64_t taps = g.kh * g.kw, plane = g.OH * g.OW;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n = p / plane, oh = p % plane / g.OW, ow = p % g.OW;
    const float* img = x + n * g.H * g.W * g.C;
    const float** row = ptrs + (p - p0) * taps;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t ih = oh * g.stride_h - g.pad_top + i * g.dil_h;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t iw = ow * g.stride_w - g.pad_left + j * g.dil_w;
        row[i * g.kw + j] = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? img + (ih * g.W + iw) * g.C + c0 : pc.zeros.data() + c0;
      }
    }
  }
}

// A partial last panel's rows (nw < 16 columns), computed into `edge`, stored to Y at `cp`; on the
// last tap block of an in-tile epilogue with the residual and the clamp applied.
void store_edge(const float* edge, int64_t rows, int64_t nw, float* cp, int64_t M, const float* zres, const TileFinish& fin,
                bool finish) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < nw; ++j) {
      float v = edge[r * kP + j];
      if (finish) {
        if (zres) v += zres[r * M + j];
        if (fin.clamp) v = std::min(std::max(v, fin.lo), fin.hi);
      }
      cp[r * M + j] = v;
    }
}

// The epilogue outside the tile (activations other than None / Relu / Clip): the residual, then the
// activation, over a task's rows [p0, p1) and panels [q0, q1) while they are in cache.
void finish_task(int64_t p0, int64_t p1, int64_t q0, int64_t q1, int64_t M, const float* zres, const Activation& act,
                 float* y) {
  const int64_t c0 = q0 * kP, width = std::min(M, q1 * kP) - c0;
  for (int64_t p = p0; p < p1; ++p) {
    float* yr = y + p * M + c0;
    if (zres) {
      const float* zr = zres + p * M + c0;
      for (int64_t i = 0; i < width; ++i) yr[i] += zr[i];
    }
    fused::apply_epilogue(yr, 1, width, nullptr, act);
  }
}

// Whether the tile applies the activation itself (None, Relu, Clip: a clamp), and its clamp bounds.
bool act_in_tile(const Activation& act) {
  return act.kind == ActKind::kNone || act.kind == ActKind::kRelu || act.kind == ActKind::kClip;
}
TileFinish tile_finish(const Activation& act) {
  TileFinish fin;
  fin.clamp = act.kind != ActKind::kNone;
  fin.lo = act.kind == ActKind::kClip ? act.a : 0.0f;
  fin.hi = act.kind == ActKind::kClip ? act.b : std::numeric_limits<float>::infinity();
  return fin;
}

// Pixels [p0, p1) x panels [q0, q1) of Y over every tap, then the residual and the activation: in
// the tile's registers for None / Relu / Clip (and the partial last panel in the copy out), as a
// pass over the task's rows while they are in cache for the others.
[[gnu::target("avx2,fma")]] void block(const PackedConv& pc, int64_t p0, int64_t p1, int64_t q0, int64_t q1,
                                      const float* x, const float* bias, const float* zres, const Activation& act,
                                      float* y, int64_t taps_per_block) {
  const PackedConvGeometry& g = pc.g;
  // C: the channels each output reads (its block's), M: the row stride of Y.
  const int64_t taps = g.kh * g.kw, C = pc.blocks.C, M = g.M, K = taps * C;
  const float* ptrs[kMc * kPackedConvMaxTaps];
  int64_t ptrs_block = -1;  // the channel block ptrs point into
  const float* panels = pc.weights->data();
  alignas(32) float edge[kMr * kP];
  alignas(32) float edge_bias[kP];
  const bool in_tile = act_in_tile(act);
  TileFinish fin = tile_finish(act);
  for (int64_t t0 = 0; t0 < taps; t0 += taps_per_block) {
    const int64_t tn = std::min(taps_per_block, taps - t0);
    const bool accumulate = t0 > 0, last = t0 + tn >= taps;
    for (int64_t q = q0; q < q1; ++q) {
      const float* bp = panels + q * K * kP + t0 * C * kP;
      const int64_t n0 = q * kP, nw = std::min(kP, M - n0);
      if (const int64_t blk = n0 / pc.blocks.M; blk != ptrs_block) {
        // Another block's channels: every pointer moves by the same amount (the zero row too, which
        // holds C zeros: enough from any block's first channel).
        if (ptrs_block < 0) {
          tap_pointers(pc, x, blk * C, p0, p1, ptrs);
        } else {
          const int64_t delta = (blk - ptrs_block) * C;
          for (int64_t i = 0; i < (p1 - p0) * taps; ++i) ptrs[i] += delta;
        }
        ptrs_block = blk;
      }
      const float* bias_q = packed::panel_bias(bias, n0, nw, edge_bias);
      for (int64_t m = p0; m < p1; m += kMr) {
        const int64_t rows = std::min(kMr, p1 - m);
        const float* const* rp = ptrs + (m - p0) * taps + t0;
        float* cp = y + m * M + n0;
        if (nw == kP) {
          fin.z = zres ? zres + m * M + n0 : nullptr;
          kTiles[rows](tn, C, rp, taps, bp, cp, M, accumulate, bias_q, last && in_tile ? &fin : nullptr);
          continue;
        }
        if (accumulate)
          for (int64_t r = 0; r < rows; ++r) std::memcpy(edge + r * kP, cp + r * M, static_cast<size_t>(nw) * sizeof(float));
        kTiles[rows](tn, C, rp, taps, bp, edge, kP, accumulate, bias_q, nullptr);
        store_edge(edge, rows, nw, cp, M, zres ? zres + m * M + n0 : nullptr, fin, last && in_tile);
      }
    }
  }
  if (!in_tile) finish_task(p0, p1, q0, q1, M, zres, act, y);
}

// Patch mode (PackedConv::patches): pixels [p0, p1) x panels [q0, q1), a group of tiles at a time:
// the group's pixels' windows are copied to rows of K = kh*kw*C floats on the stack (zeros for
// padding; a kernel row's taps are adjacent pixels, one copy), then each panel runs over the group's
// tiles while its K x 16 weights stay in L1; the activation as in block().
constexpr int64_t kPatchFloats = 12288;  // 48 KiB of patch rows: at least one tile of the largest K
static_assert(kPatchFloats >= kMr * kPackedConvPatchMaxK);
[[gnu::target("avx2,fma")]] void patch_block(const PackedConv& pc, int64_t p0, int64_t p1, int64_t q0, int64_t q1,
                                            const float* x, const float* bias, const float* zres, const Activation& act,
                                            float* y) {
  const PackedConvGeometry& g = pc.g;
  const int64_t C = g.C, M = g.M, K = g.kh * g.kw * C, plane = g.OH * g.OW;
  const int64_t group_rows = std::max<int64_t>(1, kPatchFloats / (kMr * K)) * kMr;
  alignas(32) float patch[kPatchFloats];
  const float* rows[kPatchFloats / 8];
  alignas(32) float edge[kMr * kP];
  alignas(32) float edge_bias[kP];
  const bool in_tile = act_in_tile(act);
  TileFinish fin = tile_finish(act);
  const float* panels = pc.weights->data();
  for (int64_t g0 = p0; g0 < p1; g0 += group_rows) {
    const int64_t g1 = std::min(p1, g0 + group_rows);
    for (int64_t p = g0; p < g1; ++p) {
      const int64_t n = p / plane, oh = p % plane / g.OW, ow = p % g.OW;
      const float* img = x + n * g.H * g.W * C;
      float* row = patch + (p - g0) * K;
      rows[p - g0] = row;
      const int64_t iw0 = ow * g.stride_w - g.pad_left;
      // The taps j in [jlo, jhi) read inside the image's width (the same for every kernel row).
      const int64_t jlo = iw0 >= 0 ? 0 : std::min(g.kw, (-iw0 + g.dil_w - 1) / g.dil_w);
      const int64_t jhi = std::max(jlo, std::min(g.kw, iw0 >= g.W ? 0 : (g.W - 1 - iw0) / g.dil_w + 1));
      for (int64_t i = 0; i < g.kh; ++i, row += g.kw * C) {
        const int64_t ih = oh * g.stride_h - g.pad_top + i * g.dil_h;
        if (ih < 0 || ih >= g.H || jlo >= jhi) {
          std::fill_n(row, g.kw * C, 0.0f);
          continue;
        }
        std::fill_n(row, jlo * C, 0.0f);
        const float* src = img + (ih * g.W + iw0 + jlo * g.dil_w) * C;
        if (g.dil_w == 1) {
          std::copy_n(src, (jhi - jlo) * C, row + jlo * C);  // the row's taps are adjacent pixels
        } else {
          for (int64_t j = jlo; j < jhi; ++j, src += g.dil_w * C) std::copy_n(src, C, row + j * C);
        }
        std::fill_n(row + jhi * C, (g.kw - jhi) * C, 0.0f);
      }
    }
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t n0 = q * kP, nw = std::min(kP, M - n0);
      const float* bias_q = packed::panel_bias(bias, n0, nw, edge_bias);
      const float* bp = panels + q * K * kP;
      for (int64_t m = g0; m < g1; m += kMr) {
        const int64_t nrows = std::min(kMr, g1 - m);
        const float* const* rp = rows + (m - g0);
        float* cp = y + m * M + n0;
        if (nw == kP) {
          fin.z = zres ? zres + m * M + n0 : nullptr;
          kTiles[nrows](1, K, rp, 1, bp, cp, M, false, bias_q, in_tile ? &fin : nullptr);
          continue;
        }
        kTiles[nrows](1, K, rp, 1, bp, edge, kP, false, bias_q, nullptr);
        store_edge(edge, nrows, nw, cp, M, zres ? zres + m * M + n0 : nullptr, fin, in_tile);
      }
    }
  }
  if (!in_tile) finish_task(p0, p1, q0, q1, M, zres, act, y);
}

}  // namespace

bool packed_conv_by_patches(const PackedConvGeometry& g) {
  const int64_t taps = g.kh * g.kw;
  return g.group == 1 && g.kh >= 1 && g.kw >= 1 && (g.C < 8 || taps > kPackedConvMaxTaps) && g.C >= 1 &&
         taps <= kPackedConvPatchMaxK && taps * g.C >= 8 && taps * g.C <= kPackedConvPatchMaxK;
}

PackedConvBlocks packed_conv_blocks(const PackedConvGeometry& g) {
  PackedConvBlocks b;
  if (g.group <= 1 || g.C % g.group != 0 || g.M % g.group != 0) {
    b.C = g.C, b.M = g.M;
    return b;
  }
  const int64_t mg = g.M / g.group;
  b.per_block = mg % kP == 0 ? 1 : mg % 8 == 0 ? 2 : mg % 4 == 0 ? 4 : 0;  // 0: no whole panels
  b.C = b.per_block * (g.C / g.group);
  b.M = b.per_block * mg;
  return b;
}

bool packed_conv_eligible(const PackedConvGeometry& g) {
  if (g.group < 1 || g.C % g.group != 0 || g.M % g.group != 0) return false;
  if (!packed_gemm_available() || g.N <= 0 || g.M <= 0 || g.OH <= 0 || g.OW <= 0 || g.H <= 0 || g.W <= 0) return false;
  if (packed_conv_by_patches(g)) return true;
  const PackedConvBlocks b = packed_conv_blocks(g);
  if (g.group > 1 && (b.per_block == 0 || g.group % b.per_block != 0)) return false;
  return b.C >= 8 && g.kh >= 1 && g.kw >= 1 && g.kh * g.kw <= kPackedConvMaxTaps;
}

Expected<std::shared_ptr<PackedConv>> pack_conv(const PackedConvGeometry& g, const float* w) {
  auto pc = std::make_shared<PackedConv>();
  pc->g = g;
  pc->blocks = packed_conv_blocks(g);
  const int64_t taps = g.kh * g.kw, cb = pc->blocks.C;
  if (g.group <= 1) {
    // W [M, kh, kw, C] is B transposed: [N = M, K = kh*kw*C], k ordered (tap, channel).
    KILN_ASSIGN_OR_RETURN(pc->weights, pack_b(w, taps * g.C, g.M, /*transposed=*/true));
  } else {
    // The block-diagonal W [M, kh, kw, blocks.C]: output m (group gm) reads its group's channels,
    // at slot gm % per_block of its block.
    const int64_t cg = g.C / g.group, mg = g.M / g.group;
    std::vector<float> wide(static_cast<size_t>(g.M * taps * cb), 0.0f);
    for (int64_t m = 0; m < g.M; ++m) {
      const int64_t slot = m / mg % pc->blocks.per_block;
      for (int64_t t = 0; t < taps; ++t)
        std::memcpy(wide.data() + (m * taps + t) * cb + slot * cg, w + (m * taps + t) * cg, static_cast<size_t>(cg) * sizeof(float));
    }
    KILN_ASSIGN_OR_RETURN(pc->weights, pack_b(wide.data(), taps * cb, g.M, /*transposed=*/true));
  }
  pc->zeros.assign(static_cast<size_t>(g.C), 0.0f);  // read from a block's first channel on: C of them
  pc->patches = packed_conv_by_patches(g);
  return pc;
}

void packed_conv(const PackedConv& pc, const float* x, const float* bias, const float* z, const Activation& act, float* y) {
  const PackedConvGeometry& g = pc.g;
  const int64_t pixels = g.N * g.OH * g.OW, panels = (g.M + kP - 1) / kP, taps = g.kh * g.kw;
  if (pixels <= 0 || panels == 0) return;
  if (pc.patches) {
    packed::for_each_task(pixels, panels, kMc, [&](int64_t p0, int64_t p1, int64_t q0, int64_t q1) {
      patch_block(pc, p0, p1, q0, q1, x, bias, z, act, y);
    });
    return;
  }
  // Tap blocks of about kKc channels (3x3 at C = 64: all nine taps; at C = 512: one tap per block).
  const int64_t per = std::max<int64_t>(1, std::min(taps, kKc / pc.blocks.C));
  const int64_t tblocks = (taps + per - 1) / per;
  const int64_t taps_per_block = (taps + tblocks - 1) / tblocks;
  packed::for_each_task(pixels, panels, kMc, [&](int64_t p0, int64_t p1, int64_t q0, int64_t q1) {
    block(pc, p0, p1, q0, q1, x, bias, z, act, y, taps_per_block);
  });
}

}  // namespace kiln::cpu
