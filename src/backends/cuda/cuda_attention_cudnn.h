// backends/cuda/cuda_attention_cudnn.h — kiln.Attention through cuDNN's fused attention (the SDPA
// graph of cuDNN's graph API, built with NVIDIA's header-only cudnn-frontend): a tactic ("cudnn") the
// tuner times against kiln's own kernels (cuda_attention.cu). cuDNN's Hopper kernels use warpgroup
// MMA; at GPT-2's 128 tokens they ran 33 us per layer where kiln's took 51 (H200, torch.compile's
// profile, 2026-11-30). Built only where the build found cudnn-frontend's headers
// (KILN_CUDNN_FRONTEND, scripts/setup.sh fetches them); elsewhere the tactic is never offered.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "backends/cuda/cuda_kernels.h"

struct cudnnContext;
typedef struct cudnnContext* cudnnHandle_t;  // NOLINT: same typedef as cudnn.h

namespace kiln::cuda {

struct CudnnAttention;  // a built cuDNN plan for one signature (shapes, strides, dtype, mask layout)

// Why cuDNN's fused attention cannot run these arguments (dtype, head sizes, masks, layout, a build
// without cudnn-frontend), or "" when it may: no cuDNN call, so cheap enough for tactics().
std::string cudnn_attention_refusal(const AttentionArgs& a);

struct CudaState;

// cuDNN's plan for a's shapes, strides, dtype, scale and mask layout (a's pointers are not read), built
// with the state's handle once per signature and kept in the state (cuDNN's plans hold the handle they
// were built with: one context's plans are never run on another's handle or thread); null with *why
// set when cuDNN refuses.
std::shared_ptr<const CudnnAttention> plan_cudnn_attention(CudaState& st, const AttentionArgs& a, std::string* why);

// Scratch memory the plan's run needs.
size_t cudnn_attention_workspace(const CudnnAttention& p);

// Runs the plan on dnn's stream (the handle it was planned with) with a's pointers (q, k, v, mask, y);
// "" or what failed.
std::string run_cudnn_attention(const CudnnAttention& p, cudnnHandle_t dnn, const AttentionArgs& a, void* workspace);

}  // namespace kiln::cuda
